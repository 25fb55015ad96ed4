"""The model protocol: what training, natural gradients, checkpoints, the data-parallel layer
and the scikit-learn estimators may call on a model, written once.

:class:`Model` states every member; :class:`ModelDefaults` gives the optional ones their
defaults (every gpnum model inherits it), so consumers call them without probing; and
:func:`check_model` is the one check, at the point where a model enters ``fit``, a natural-
gradient step, a checkpoint, :mod:`gpnum.distributed` or an estimator, that raises a
``TypeError`` naming what a foreign object lacks.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

__all__ = ["Model", "ModelDefaults", "check_model", "model_members"]

#: The Gaussian q's parameters that natural gradients update through the variational
#: distribution's public methods (Salimbeni et al. 2018): the default of
#: ``natural_gradient_names``.
GAUSSIAN_Q_NAMES = ("q_mu", "q_sqrt", "q_theta1", "q_precision")


@runtime_checkable
class Model(Protocol):
    """The contract between a model and everything that trains, saves or serves it.

    Required members
    ----------------
    xp, dtype, device
        The array namespace, floating dtype and device of the model's arrays.
    full_batch : bool
        ``True`` when the objective needs the whole data set (``fit`` then uses ``data()``'s
        ``X``, ``y`` and L-BFGS-B by default); ``False`` for minibatch objectives scaled by
        ``num_data / b``.
    num_data : int
        Number of training points the objective is scaled to.
    parameters() -> dict
        Every learnable parameter in natural form, a flat dict with dotted names: the model's
        own (``mean``, ``inducing_points``, ``q_mu``, ...), then ``kernel.<name>`` and
        ``likelihood.<name>``. The arrays themselves, not copies.
    set_parameters(values)
        Assign some or all of them (converted to the model's arrays), validated first.
    unconstrained(), set_unconstrained(values), grad_to_unconstrained(grads)
        The same in unconstrained form (the softplus inverse of positive parameters), for
        Adam; the chain rule for gradients.
    positive_names() -> tuple of str
        The dotted names of the parameters constrained to be positive (what the L-BFGS-B
        driver optimises in log coordinates).
    check_data(X, y) -> (X, y)
        Validate and convert training data once; ``fit`` then passes ``validate=False``.
    objective_and_grad(X, y, *, validate=True) -> (value, grads)
        A 0-d objective to **maximise** (ELBO, log marginal likelihood, ...) and its
        gradients keyed like ``parameters()``. Minibatch models also take ``scale=`` (the
        data term is ``scale`` times a sum over the rows) and ``return_data=True`` (a third
        output: the statistics of a natural-gradient step).
    predict_f(X, full_cov=False) -> (mean, var or cov)
        Latent mean ``(n,)`` and variance ``(n,)``, or covariance ``(n, n)``.
    predict_y(X), log_predictive_density(X, y)
        The likelihood's predictive moments and per-point log density ``(n,)``.
    config() -> dict, data() -> dict, from_config(kernel, likelihood, params, config, data)
        JSON-able settings, constructor arrays that are not parameters, and the class method
        that rebuilds the model from them: what a checkpoint stores and loads.
    kernel, likelihood
        The model's kernel and likelihood (saved by their specs, :mod:`gpnum.models`'s
        ``kernel_spec`` / ``likelihood_spec``).

    Optional members (defaults in :class:`ModelDefaults`)
    -----------------------------------------------------
    objective_name : str
        What the model maximises, as progress displays name it (``"elbo"``; GPR ``"lml"``).
    training_state
        ``None``, or what :func:`gpnum.fit` leaves for resuming (saved in checkpoints).
    natural_gradient_names : tuple of str
        The parameters a natural-gradient step owns (Adam leaves them alone under ``"ngd"``,
        ``fixed=`` may not name them). Default: the Gaussian q's ``q_mu``, ``q_sqrt``,
        ``q_theta1``, ``q_precision``, which ``gpnum.optim.NaturalGradient`` updates through
        the variational distribution's public methods (``variational_form``, ``to_natural``,
        ``q_cholesky``, ``q_natural``, ``precision_solve``, ``data_term_and_grad``).
    natural_gradient_step : callable or None
        ``(data, gamma) -> (gamma_used, num_halvings)``: a model whose q is not Gaussian (SVTP's
        Student-t) takes natural-gradient steps itself from ``objective_and_grad(...,
        return_data=True)``'s third output, with its own step-size guard. ``None``: the
        Gaussian path of ``NaturalGradient``.
    to_cholesky()
        Put q in (mean, Cholesky) form, what Adam updates; a no-op without such a q.
    prior_term_and_grad : callable or None
        Minibatch models: ``() -> (value, grads)``, the objective's term that sees no data
        (SVGP: ``-KL``); with ``objective_and_grad(X, y, scale=s)`` it lets
        :mod:`gpnum.distributed` sum the data term over workers. ``None``: not splittable.
    cg_objective_and_grad : callable or None
        Full-batch models with a conjugate-gradient path (GPR): the objective with the kernel
        matrix given as an operator (what :mod:`gpnum.distributed` runs on Dask).
    uses_cg : bool
        Whether the model currently solves by conjugate gradients.
    whitening : str or None
        The whitening of an inducing-point model (``"cholesky"``, ``"ciq"``), else None.
    solver : str
        How the model solves with its kernel matrix (``"cholesky"``; GPR also ``"cg"``).
    """

    xp: Any
    dtype: Any
    device: Any
    full_batch: bool
    num_data: int
    kernel: Any
    likelihood: Any

    def parameters(self) -> dict: ...

    def set_parameters(self, values: dict) -> None: ...

    def unconstrained(self) -> dict: ...

    def set_unconstrained(self, values: dict) -> None: ...

    def grad_to_unconstrained(self, grads: dict) -> dict: ...

    def positive_names(self) -> tuple: ...

    def check_data(self, X, y): ...

    def objective_and_grad(self, X, y, *, validate=True): ...

    def predict_f(self, X, full_cov=False): ...

    def predict_y(self, X): ...

    def log_predictive_density(self, X, y): ...

    def config(self) -> dict: ...

    def data(self) -> dict: ...

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data): ...

    # Optional members: defaults in ModelDefaults.
    objective_name: str
    training_state: Any
    natural_gradient_names: tuple
    natural_gradient_step: Any
    prior_term_and_grad: Any
    cg_objective_and_grad: Any
    uses_cg: bool
    whitening: Any
    solver: str

    def to_cholesky(self) -> None: ...


class ModelDefaults:
    """The optional members of :class:`Model` with their defaults: a model class inherits
    this and overrides what it has (SVTP its own natural-gradient step, GPR its CG path)."""

    objective_name: ClassVar[str] = "elbo"
    training_state = None
    natural_gradient_names: tuple = GAUSSIAN_Q_NAMES
    natural_gradient_step = None
    prior_term_and_grad = None
    cg_objective_and_grad = None
    uses_cg = False
    whitening = None
    solver = "cholesky"

    def to_cholesky(self) -> None:
        """No variational distribution to convert: nothing to do."""

    def positive_names(self) -> tuple:
        """Dotted names of the positive parameters: the model's own, then its components'."""
        own = tuple(n for n in self._own_names() if n in type(self)._positive)
        for comp in self._components:
            own += tuple(f"{comp}.{n}" for n in getattr(self, comp).positive_names())
        return own


#: The members each consumer calls (``check_model``'s ``needs``).
_CORE = ("xp", "dtype", "device", "full_batch", "num_data", "parameters", "set_parameters",
         "unconstrained", "set_unconstrained", "grad_to_unconstrained", "check_data",
         "objective_and_grad")
_NEEDS = {
    "fit": _CORE + ("data", "positive_names", "objective_name", "training_state",
                    "natural_gradient_names", "natural_gradient_step", "to_cholesky"),
    "predict": ("xp", "dtype", "device", "predict_f", "predict_y", "log_predictive_density"),
    "checkpoint": ("xp", "dtype", "device", "parameters", "set_parameters", "unconstrained",
                   "config", "data", "from_config", "kernel", "likelihood", "training_state"),
    "distributed": _CORE + ("prior_term_and_grad", "cg_objective_and_grad", "uses_cg"),
    "lbfgs": _CORE + ("data", "positive_names"),
}
_DATA = {"xp", "dtype", "device", "full_batch", "num_data", "kernel", "likelihood",
         "training_state", "objective_name", "natural_gradient_names", "uses_cg", "whitening",
         "solver", "natural_gradient_step", "prior_term_and_grad", "cg_objective_and_grad"}


def model_members(need: str) -> tuple:
    """The members of :class:`Model` that ``need`` (``"fit"``, ``"predict"``,
    ``"checkpoint"``, ``"distributed"``, ``"lbfgs"``) calls."""
    try:
        return _NEEDS[need]
    except KeyError:
        raise ValueError(f"need: expected one of {sorted(_NEEDS)}, got {need!r}") from None


def check_model(model, needs=("fit",), *, caller="gpnum"):
    """Raise ``TypeError`` unless ``model`` has every member of :class:`Model` that
    ``needs`` (names of :func:`model_members`) call; returns ``model``.

    A method must be callable; an optional member may be ``None`` only where its default is.
    """
    if isinstance(needs, str):
        needs = (needs,)
    wanted = []
    for need in needs:
        wanted.extend(n for n in model_members(need) if n not in wanted)
    missing = []
    for name in wanted:
        try:
            value = getattr(model, name)
        except AttributeError:
            missing.append(name)
            continue
        if name not in _DATA and not callable(value):
            missing.append(name)
    if missing:
        raise TypeError(f"{caller}: {type(model).__module__}.{type(model).__name__} is not a "
                        f"model of gpnum's model protocol (gpnum.models.Model) for "
                        f"{' and '.join(needs)}: it lacks {', '.join(missing)}; a model class "
                        "inherits the optional members' defaults from "
                        "gpnum.models.ModelDefaults")
    return model
