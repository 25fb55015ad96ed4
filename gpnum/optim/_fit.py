"""The training loop: minibatches, natural gradients for q alternating with Adam for the rest.

The protocol of Pleiss et al. (2020), "Fast matrix square roots with applications to Gaussian
processes and Bayesian optimization" (NeurIPS), section 5: each step takes one minibatch, one
natural-gradient step on ``q(u')`` and one Adam step on every other parameter (kernel,
likelihood, inducing points, mean), both from the same ELBO evaluation (as GPyTorch does with
two optimisers on one loss).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

from gpnum import backend as B
from gpnum.errors import ConvergenceWarning
from gpnum.models import check_model
from gpnum.optim import _defaults
from gpnum.optim._adam import Adam
from gpnum.optim._lbfgs import lbfgs
from gpnum.optim._ngd import NaturalGradient
from gpnum.priors import add_log_prior, check_priors

__all__ = ["fit", "History", "TrainingState"]


@dataclass
class History:
    """What :func:`fit` recorded.

    Attributes
    ----------
    step_elbo : list of float
        Minibatch ELBO estimate (scaled to the whole data set) at each step, before the update.
    step_time : list of float
        Wall-clock seconds since the start of training at the end of each step.
    epoch_elbo : list of float
        Mean minibatch ELBO over each epoch.
    val : list of dict
        Validation metrics after each epoch (when validation data is given).
    first_epoch : int
        The epoch this call of :func:`fit` started at (0, or the checkpoint's epoch when resumed).
    stopped : str or None
        Why training stopped early, if it did.
    solver_warnings : int
        How many solver calls (CIQ's msMINRES, PCG) stopped short of their tolerance; they are
        reported once, as one ConvergenceWarning, at the end of :func:`fit`.
    num_iter, num_eval : int
        L-BFGS-B only: iterations and objective evaluations over all runs.
    stop_reason : str or None
        L-BFGS-B only: SciPy's message for the run kept, converged or not.
    """

    step_elbo: list = field(default_factory=list)
    step_time: list = field(default_factory=list)
    epoch_elbo: list = field(default_factory=list)
    val: list = field(default_factory=list)
    first_epoch: int = 0
    stopped: str | None = None
    solver_warnings: int = 0
    num_iter: int = 0
    num_eval: int = 0
    stop_reason: str | None = None

    @property
    def num_steps(self) -> int:
        return len(self.step_elbo)


@dataclass
class TrainingState:
    """Everything :func:`fit` needs to resume exactly: optimisers, counters, RNG state.

    Kept on the model as ``model.training_state`` after :func:`fit` and saved with it by
    ``model.save``.
    """

    epoch: int
    step: int
    rng_state: str
    adam: Adam
    ngd: NaturalGradient | None
    seed: int
    good: dict | None = field(default=None, repr=False)
    last_error: str | None = None
    fixed: tuple = ()
    priors: dict = field(default_factory=dict, repr=False)  # fitting options: not saved
    schedule: dict | None = None  # an adaptive lr_schedule's state (PlateauDecay.state_dict)


def _as_batches(X, y, batch_size, rng):
    """Index order of one epoch: a random permutation in blocks of ``batch_size``."""
    n = X.shape[0]
    perm = rng.host().permutation(n)
    return [perm[i:i + batch_size] for i in range(0, n, batch_size)]


def _take(xp, a, idx, device):
    return xp.take(a, B.asarray(idx, dtype=xp.int64, xp=xp, device=device), axis=0)


def _natural_names(model):
    """The parameters natural gradients own (Adam leaves them alone under "ngd"):
    ``model.natural_gradient_names`` (gpnum.models.Model)."""
    return tuple(model.natural_gradient_names)


def _first_nonfinite(xp, named):
    for k, v in named.items():
        if not bool(xp.all(xp.isfinite(v))):
            return k
    return None


def _all_finite(xp, arrays):
    """One 0-d boolean array: every element of every array is finite (no host sync here)."""
    flags = [xp.all(xp.isfinite(a)) for a in arrays]
    return xp.all(xp.stack(flags)) if len(flags) > 1 else flags[0]


def _check_fixed(model, fixed, optimizer):
    names = tuple(fixed or ())
    params = model.parameters()
    unknown = [k for k in names if k not in params]
    if unknown:
        raise ValueError(f"fixed: {unknown} are not parameters of the model; expected names "
                         f"from {sorted(params)}")
    if optimizer == "ngd":
        q = [k for k in names if k in _natural_names(model)]
        if q:
            raise ValueError(f"fixed: {q} belong to q, which natural gradients update; use "
                             "optimizer='adam' to hold them")
    return names


def fit(model, X=None, y=None, *, epochs=None, batch_size=_defaults.BATCH_SIZE, optimizer=None,
        lr=_defaults.LR, gamma=_defaults.GAMMA, ngd_method="dense", lr_schedule="plateau", gamma_schedule=None, batches=None,
        X_val=None, y_val=None, callbacks=(), progress=True, seed=0, resume=False,
        clip_curvature=True, fixed=(), maxiter=1000, n_restarts=0, coordinates="log",
        priors=None):
    """Train a model of the model protocol (docs: "Adding a model").

    Minibatch models (SVGP) by stochastic variational inference; full-batch models (GPR, SGPR:
    ``model.full_batch``) by L-BFGS-B or Adam on all the data.

    Parameters
    ----------
    model : gpnum.SVGP, gpnum.GPR, gpnum.SGPR or any model of the protocol
    X, y : arrays (n, d), (n,)
        Training data on any backend (converted to the model's), validated once here.
        Alternatively ``batches``. Full-batch models use their own data when these are None.
    epochs : int, optional
        Total number of passes over the data. With ``resume=True`` training continues from the
        epoch stored in ``model.training_state`` up to this total. Default (the default recipe,
        :mod:`gpnum.optim.defaults`): 20 epochs or as many as 1,500 minibatch steps take,
        whichever is more (:func:`gpnum.optim.default_epochs`); 20 for full-batch models and
        for a ``batches`` callable.
    batch_size : int
    optimizer : {"ngd", "adam", "lbfgs"}, optional
        ``"ngd"`` (default for minibatch models): natural gradients for ``q`` alternating with
        Adam for everything else (the protocol of Pleiss et al. 2020; a model with its own
        natural gradient, SVTP, declares ``natural_gradient_names`` and takes the step in
        ``natural_gradient_step``: docs "Models"); ``"adam"``: Adam on every parameter;
        ``"lbfgs"`` (default for full-batch models, and only for them): SciPy's L-BFGS-B on the
        host vector of the free parameters, positive ones in log coordinates, the objective
        per data point, up to ``maxiter`` iterations per run (:func:`gpnum.optim.lbfgs`; the
        model itself stays on its backend).
    lr : float
        Adam's learning rate (or its initial value under ``lr_schedule``).
    gamma : float
        Natural-gradient step size (ignored with ``optimizer="adam"``).
    ngd_method : {"dense", "krylov"}
        Natural-gradient algebra (default ``"dense"``, for both whitenings). ``"krylov"`` holds q
        as natural parameters and needs only PCG solves with the precision, O(J m^2 b) per step
        with no O(m^3) operation; the precision's condition number grows like
        ``num_data / noise``, so J is in the hundreds and the dense O(m^3) step is cheaper unless
        ``J b << m / 3`` (very large m).
    lr_schedule : "plateau", callable or None
        ``epoch -> lr``. ``"plateau"`` (default, the default recipe): Adam's rate and the
        natural-gradient step are cut by 0.3, at most twice, when the training objective per
        data point has not improved for max(2 epochs, 100 steps)
        (:func:`gpnum.optim.default_schedules`); None: constant; or a callable such as
        :func:`gpnum.optim.step_decay` (the decay of Pleiss et al. 2020 at epochs 1, 5, 10, 15),
        :func:`gpnum.optim.warmup` or a :class:`gpnum.optim.PlateauDecay`.
    gamma_schedule : callable, optional
        ``step -> gamma``. Default: tied to ``lr_schedule="plateau"``'s cuts, else constant.
    batches : callable, optional
        For data that does not fit in memory: ``batches(epoch)`` returns an iterable of
        ``(X_b, y_b)`` minibatches for that epoch (then ``X``, ``y`` are not used).
    X_val, y_val : arrays, optional
        Validation data: RMSE (or accuracy) and NLL are recorded after each epoch.
    callbacks : sequence of callables
        Each is called as ``cb(model, history, epoch)`` after every epoch; returning ``True``
        stops training.
    progress : bool
        Show a progress bar that moves once per step, with the step's minibatch ELBO (the value
        ``History.step_elbo`` records), the epoch and an ETA (tqdm when installed, else one line
        per epoch with an ETA).
    seed : int
        Seed of the minibatch order.
    clip_curvature : bool
        Natural gradients with ``min(g_var, 0)`` (see :class:`gpnum.optim.NaturalGradient`):
        a no-op for log-concave likelihoods, and what keeps Student-t training stable.
    resume : bool
        Continue from ``model.training_state`` (optimiser state, counters, RNG): a resumed run
        matches an uninterrupted one exactly.
    fixed : sequence of str
        Parameter names (as in ``model.parameters()``, e.g. ``"likelihood.variance"``,
        ``"inducing_points"``) held bit-identical: no optimiser touches them.
    maxiter : int
        L-BFGS-B iterations per run (``optimizer="lbfgs"`` only).
    n_restarts : int
        ``optimizer="lbfgs"`` only: further runs from positive parameters drawn uniformly in
        the optimiser's coordinates (seeded by ``seed``); the best run is kept
        (:func:`gpnum.optim.lbfgs`).
    coordinates : {"log", "softplus"}
        ``optimizer="lbfgs"`` only: positive parameters in log coordinates (default, as
        scikit-learn) or in the model's softplus-unconstrained view.
    priors : dict, optional
        ``{parameter name: gpnum.priors.Prior}``, e.g. ``{"likelihood.variance":
        LogNormal(-4.0, 2.0), "kernel.coregion.kappa": Gamma(2.0, 2.0)}``: maximum a
        posteriori fitting, the objective plus the summed log prior densities of those
        parameters' natural values (:mod:`gpnum.priors`; every optimiser). The recorded
        objectives (``History.step_elbo``, ``epoch_elbo``) then include the log prior. Priors
        are fitting options, like schedules: checkpoints do not save them, so pass them again
        with ``resume=True``.

    Returns
    -------
    History

    Notes
    -----
    Defaults: the default recipe (``gpnum.optim.DEFAULT_RECIPE``, the same as the command
    line's), chosen by the sweep in docs/benchmarks.md over every bundled data set. The seed's
    10x decays at epochs 1, 5, 10, 15 suit its 300k-point sets and stop far short on small
    ones, so they are opt-in.
    A non-finite ELBO or parameter stops training with the parameters of the last good step
    restored and a warning naming the parameter.
    """
    check_model(model, ("fit",), caller="gpnum.fit")
    full_batch = bool(model.full_batch)
    if optimizer is None:
        optimizer = "lbfgs" if full_batch else "ngd"
    if optimizer not in ("ngd", "adam", "lbfgs"):
        raise ValueError(f"optimizer: expected 'ngd', 'adam' or 'lbfgs', got {optimizer!r}")
    if full_batch and optimizer == "ngd":
        raise ValueError(f"optimizer='ngd': {type(model).__name__} has no variational "
                         "distribution to take natural gradients of; use 'lbfgs' or 'adam'")
    if not full_batch and optimizer == "lbfgs":
        raise ValueError(f"optimizer='lbfgs' needs a full-batch model (GPR, SGPR); "
                         f"{type(model).__name__} trains on minibatches: use 'ngd' or 'adam'")
    epochs = None if epochs is None else int(epochs)
    batch_size = int(batch_size)
    if (epochs is not None and epochs < 0) or batch_size < 1:
        raise ValueError(f"epochs >= 0 and batch_size >= 1 expected, got {epochs}, {batch_size}")
    fixed = _check_fixed(model, fixed, optimizer)
    priors = check_priors(priors, model)
    if full_batch:
        if batches is not None:
            raise ValueError(f"batches: {type(model).__name__} is a full-batch model")
        if (X is None) != (y is None):
            raise ValueError("fit: pass both X and y, or neither (the model's own data)")
        data = model.data()
        X, y = model.check_data(data["X"] if X is None else X, data["y"] if y is None else y)
        batch_size = X.shape[0]
        if optimizer == "lbfgs":
            return _fit_lbfgs(model, X, y, fixed, int(maxiter), callbacks, coordinates,
                              int(n_restarts), seed, priors)
    elif batches is None:
        if X is None or y is None:
            raise ValueError("fit: pass X and y, or a batches callable")
        X, y = model.check_data(X, y)  # once: each step then trusts them
    if epochs is None:
        epochs = (_defaults.default_epochs(X.shape[0], batch_size)
                  if not full_batch and batches is None else _defaults.EPOCHS)
    if isinstance(lr_schedule, str):
        if lr_schedule != "plateau":
            raise ValueError(f"lr_schedule: expected 'plateau', a callable or None, got "
                             f"{lr_schedule!r}")
        steps_per_epoch = None if batches is not None else -(-X.shape[0] // batch_size)
        lr_schedule, tied = _defaults.default_schedules(lr, gamma, steps_per_epoch)
        if gamma_schedule is None:
            gamma_schedule = tied
    if resume:
        state = model.training_state
        if state is None:
            raise ValueError("resume=True but the model has no training_state (train or load a "
                             "checkpoint first)")
        if gamma_schedule is not None and state.ngd is not None:
            state.ngd.gamma = gamma_schedule  # schedules are code: they are not saved
        if fixed:
            state.fixed = fixed
        state.priors = priors
    else:
        ngd = (NaturalGradient(gamma_schedule if gamma_schedule is not None else gamma,
                               ngd_method, clip_curvature=clip_curvature)
               if optimizer == "ngd" else None)
        rng0 = B.default_rng(seed)
        state = TrainingState(epoch=0, step=0, rng_state=rng0.get_state(), adam=Adam(lr=lr),
                              ngd=ngd, seed=int(seed), fixed=fixed, priors=priors)
    if hasattr(lr_schedule, "observe"):
        # An adaptive schedule (PlateauDecay) decides from the epoch's metrics: the validation
        # ones, or the training objective ("objective"), which needs no validation data.
        if (X_val is None or y_val is None) and getattr(lr_schedule, "metric",
                                                        None) != "objective":
            raise ValueError(f"lr_schedule={lr_schedule!r} adapts to the validation metrics: "
                             "pass X_val and y_val")
        if resume and state.schedule is not None:
            lr_schedule.load_state_dict(state.schedule)
        elif not resume:
            lr_schedule.reset()
    if state.ngd is None:
        model.to_cholesky()  # Adam works on q_mu, q_sqrt (a no-op for models without q)
    model.training_state = state
    rng = B.default_rng(state.seed)
    rng.set_state(state.rng_state)
    if state.ngd is not None:
        state.ngd.prepare(model)
    history = History(first_epoch=state.epoch)
    with warnings.catch_warnings(record=True) as caught:
        # Solver warnings of every step would bury the progress bar: count them, report once.
        warnings.simplefilter("always", ConvergenceWarning)
        _fit_loop(model, X, y, state, history, rng, epochs, batch_size, lr_schedule, batches,
                  X_val, y_val, callbacks, progress)
    solver = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    for w in caught:
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    history.solver_warnings = len(solver)
    if solver:
        warnings.warn(f"{len(solver)} solver call(s) during training stopped short of their "
                      f"tolerance (over {history.num_steps} steps); the first: "
                      f"{solver[0].message}", ConvergenceWarning, stacklevel=2)
    return history


def _fit_loop(model, X, y, state, history, rng, epochs, batch_size, lr_schedule, batches,
              X_val, y_val, callbacks, progress):
    xp = model.xp
    t_start = time.perf_counter()
    steps_per_epoch = None if batches is not None else -(-X.shape[0] // batch_size)
    bar = _Progress(progress, epochs, state.epoch, steps_per_epoch,
                    label=model.objective_name)
    try:
        for epoch in range(state.epoch, epochs):
            if lr_schedule is not None:
                state.adam.lr = float(lr_schedule(epoch))
            if batches is None:
                it = ((_take(xp, X, idx, model.device), _take(xp, y, idx, model.device))
                      for idx in _as_batches(X, y, batch_size, rng))
            else:
                it = batches(epoch)
            elbos = []
            for Xb, yb in it:
                # A user's batches callable is checked batch by batch; fit's own batches were
                # checked once, as X and y.
                value = _train_step(model, state, Xb, yb, validate=batches is not None)
                if value is None:
                    history.stopped = state.last_error
                    warnings.warn(f"fit stopped at epoch {epoch}, step {state.step}: "
                                  f"{state.last_error}", RuntimeWarning, stacklevel=4)
                    return
                elbos.append(value)
                history.step_elbo.append(value)
                history.step_time.append(time.perf_counter() - t_start)
                bar.step(epoch, value)
            state.epoch = epoch + 1
            state.rng_state = rng.get_state()
            history.epoch_elbo.append(sum(elbos) / max(len(elbos), 1))
            metrics = {"objective": -history.epoch_elbo[-1] / model.num_data}
            if X_val is not None and y_val is not None:
                history.val.append(evaluate(model, X_val, y_val))
                metrics.update(history.val[-1])
            if hasattr(lr_schedule, "observe"):
                lr_schedule.observe(metrics)
                state.schedule = lr_schedule.state_dict()
            bar.epoch_done(epoch, history, time.perf_counter() - t_start)
            if any(cb(model, history, epoch) for cb in callbacks):
                history.stopped = f"stopped by a callback after epoch {epoch + 1}"
                break
        # Each step checks the parameters the step before it left; this checks the last's.
        params = model.parameters()
        if history.num_steps and not bool(_all_finite(xp, list(params.values()))):
            _stop(model, state, xp, params=params)
            history.stopped = state.last_error
            warnings.warn(f"fit stopped after step {state.step}: {state.last_error}",
                          RuntimeWarning, stacklevel=4)
    finally:
        bar.close()


def _train_step(model, state, Xb, yb, *, validate):
    """One NGD + Adam (or Adam only) step; returns the minibatch objective, or None if it went
    bad. One host synchronisation: the objective, made NaN when a gradient or a parameter (of
    the previous step's update) is not finite."""
    xp = model.xp
    params = model.parameters()
    if state.ngd is not None:
        value, grads, data = model.objective_and_grad(Xb, yb, validate=validate,
                                                      return_data=True)
    else:
        value, grads = model.objective_and_grad(Xb, yb, validate=validate)
        data = None
    # A minibatch objective estimates the whole data set's, so the prior enters once per step.
    value, grads = add_log_prior(state.priors, params, value, grads)
    # Natural gradients update q themselves; fixed parameters get no step at all.
    skip = set(state.fixed) | (set(_natural_names(model)) if state.ngd is not None else set())
    hyper = {k: g for k, g in grads.items() if k not in skip}
    hyper_u = model.grad_to_unconstrained(hyper)
    ok = _all_finite(xp, [*hyper_u.values(), *params.values()])
    v = float(xp.where(ok, value, xp.asarray(float("nan"), dtype=value.dtype,
                                             device=B.device_of(value))))
    if not math.isfinite(v):
        _stop(model, state, xp, value=value, grads=grads, hyper_u=hyper_u, params=params)
        return None
    state.good = params  # finite: the values to go back to if this step's update is not
    if state.ngd is not None:
        state.ngd.step(model, data=data)
    current_u = model.unconstrained()
    new_u = state.adam.step({k: current_u[k] for k in hyper_u}, hyper_u, maximize=True)
    model.set_unconstrained(new_u)
    state.step += 1
    return v


def _stop(model, state, xp, *, value=None, grads=None, hyper_u=None, params=None):
    """Say what went non-finite (the slow, per-array look happens only here) and restore the
    last good parameters when the parameters themselves are at fault."""
    bad_param = _first_nonfinite(xp, params)
    if bad_param is not None:
        if state.good is not None:
            model.set_parameters(state.good)
        state.last_error = (f"parameter {bad_param} became non-finite; restored the last good "
                            "values")
    elif value is not None and not math.isfinite(float(value)):
        bad = _first_nonfinite(xp, grads) or "the objective"
        state.last_error = (f"non-finite objective ({float(value)}); first non-finite "
                            f"gradient: {bad}")
    else:
        state.last_error = f"non-finite gradient of {_first_nonfinite(xp, hyper_u)}"


def _fit_lbfgs(model, X, y, fixed, maxiter, callbacks, coordinates, n_restarts, seed, priors):
    """Full-batch training by the L-BFGS-B driver (:func:`gpnum.optim.lbfgs`)."""
    history = History()
    t_start = time.perf_counter()

    def record(value):
        history.step_elbo.append(value)
        history.step_time.append(time.perf_counter() - t_start)

    result = lbfgs(model, X, y, fixed=fixed, coordinates=coordinates, maxiter=maxiter,
                   n_restarts=n_restarts, seed=seed, callback=record, warn=False,
                   priors=priors)
    history.epoch_elbo.append(result.objective)
    history.num_iter, history.num_eval = result.num_iter, result.num_eval
    history.stop_reason = result.stop_reason
    if not result.converged:
        history.stopped = f"L-BFGS-B: {result.stop_reason}"
        warnings.warn(f"fit: L-BFGS-B stopped without converging after "
                      f"{result.runs[result.best_run]['num_iter']} iterations: "
                      f"{result.stop_reason}", ConvergenceWarning, stacklevel=3)
    for cb in callbacks:
        cb(model, history, 0)
    return history


def evaluate(model, X, y):
    """Test metrics: RMSE (regression) or accuracy (classification) and mean NLL.

    Returns
    -------
    dict with ``rmse`` or ``accuracy``, and ``nll`` (mean negative log predictive density).
    """
    xp = model.xp
    mean, _ = model.predict_y(X)
    nll = -float(xp.mean(model.log_predictive_density(X, y)))
    lik = type(model.likelihood).__name__
    if lik in ("Bernoulli",):
        acc = float(xp.mean(xp.astype((mean > 0.5) == (y > 0.5), model.dtype)))
        return {"accuracy": acc, "nll": nll}
    if mean.ndim == 2:  # multiclass probabilities
        pred = xp.argmax(mean, axis=1)
        acc = float(xp.mean(xp.astype(pred == xp.astype(y, pred.dtype), model.dtype)))
        return {"accuracy": acc, "nll": nll}
    rmse = float(xp.sqrt(xp.mean((mean - y) ** 2)))
    return {"rmse": rmse, "nll": nll}


class _Progress:
    """The progress display of :func:`fit`: a tqdm bar in steps, or one line per epoch.

    The bar's total is the number of steps still to run (known when ``fit`` draws the
    minibatches itself), so tqdm's ETA is the time left; its postfix shows the epoch and the last
    step's minibatch ELBO, the value ``History.step_elbo`` records.
    """

    def __init__(self, enabled, epochs, first_epoch, steps_per_epoch, label="elbo"):
        self.enabled = bool(enabled)
        # What the model maximises, as it names it (GPR: its log marginal likelihood, "lml").
        self.label = str(label)
        self.epochs = epochs
        self.first_epoch = first_epoch
        self.bar = None
        if not self.enabled or epochs <= first_epoch:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        total = None if steps_per_epoch is None else (epochs - first_epoch) * steps_per_epoch
        self.bar = tqdm(total=total, unit="step", leave=True, dynamic_ncols=True)

    def step(self, epoch, value):
        if self.bar is not None:
            self.bar.set_postfix_str(f"epoch {epoch + 1}/{self.epochs} {self.label} {value:.6g}",
                                     refresh=False)
            self.bar.update(1)

    def epoch_done(self, epoch, history, elapsed):
        if self.bar is not None or not self.enabled:
            return
        done = epoch + 1 - self.first_epoch
        eta = elapsed / done * (self.epochs - epoch - 1)
        label = "ELBO" if self.label == "elbo" else self.label
        msg = (f"epoch {epoch + 1}/{self.epochs}: mean {label} "
               f"{history.epoch_elbo[-1]:.6g}")
        if history.val:
            msg += "  " + "  ".join(f"val {k} {v:.4g}" for k, v in history.val[-1].items())
        print(msg + f"  ({elapsed:.1f} s, ETA {eta:.0f} s)", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
