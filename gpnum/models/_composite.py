"""Parameter plumbing shared by models that own a kernel and a likelihood.

A model's learnable parameters are its own (``mean``, ``inducing_points``, ...) plus those of its
components, presented as one flat dictionary with dotted names: ``"mean"``,
``"kernel.lengthscale"``, ``"kernel.0.variance"`` (a :class:`gpnum.kernels.Sum`),
``"likelihood.variance"``. :class:`ComposedParameters` implements the
:class:`gpnum.params.Parameterised` methods on that flat dictionary by delegating each prefixed
group to its component, so that a model only lists its own parameters.
"""

from __future__ import annotations

import math

from gpnum.backend import asarray, blas_pool, device_of, get_namespace, is_array
from gpnum.errors import (
    NotPSDError,
    ShapeError,
    check_finite,
    check_points_shape,
    describe_shape,
)
from gpnum.kernels import Kernel
from gpnum.likelihoods import Gaussian
from gpnum.models._protocol import ModelDefaults
from gpnum.params import (
    Parameterised,
    chain_to_unconstrained,
    from_unconstrained,
    to_unconstrained,
)

__all__ = ["ComposedParameters", "FullBatchGaussianModel"]


class ComposedParameters(ModelDefaults, Parameterised):
    """Mixin: own parameters plus those of the components named in ``_components``.

    Subclasses set ``_param_names`` / ``_positive`` for their own parameters (as for
    :class:`gpnum.params.Parameterised`) and ``_components``, the attribute names of their
    parameterised parts (default ``("kernel", "likelihood")``). A component's parameter
    ``name`` appears as ``"<component>.<name>"``.
    """

    _components: tuple = ("kernel", "likelihood")

    @property
    def device(self):
        """Device of the model's arrays."""
        return self._device

    #: What fixes a failed factorisation of this model's kernel matrix (for its error message).
    _factorisation_hint = ("raise the model's jitter (jitter=... when constructing it; "
                           "gpnum fit --jitter) or choose inducing points further apart "
                           "(gpnum.inducing.kmeans or greedy_variance)")

    def _not_psd(self, matrix, exc, kernel=None):
        """A :class:`NotPSDError` naming the model, the matrix, the kernel's parameters and the
        option that fixes it, from the error ``exc`` of the factorisation."""
        kernel = self.kernel if kernel is None else kernel
        return NotPSDError(f"{type(self).__name__}: {matrix} with kernel {kernel!r} could not be "
                           f"factorised ({exc}); fix: {self._factorisation_hint}")

    def _adopt_inducing_points(self, Z, kernel, name="inducing_points", num_latent=None):
        """Take the namespace, dtype and device of ``Z`` (the kernel's when ``Z`` is not an
        array); return ``Z`` converted, checked to be (m, d) and finite. With ``num_latent``
        (a model whose latent functions may have their own sets), (num_latent, m, d) is
        accepted too."""
        if is_array(Z):
            xp = get_namespace(Z)
            dtype = Z.dtype if xp.isdtype(Z.dtype, "real floating") else None
            self._init_namespace(xp, dtype, device_of(Z))
        else:
            self._init_namespace(kernel.xp, kernel.dtype, None)
        Z = asarray(Z, dtype=self.dtype, xp=self.xp, device=self._device)
        if num_latent is not None and Z.ndim == 3:
            if Z.shape[0] != num_latent:
                raise ShapeError(f"{name}: a 3-D array holds one set per latent function, "
                                 f"expected {num_latent} sets (num_latent) but got {Z.shape[0]} "
                                 f"(shape {describe_shape(Z.shape)})")
        elif Z.ndim != 2:
            expected = "(m, d)" if num_latent is None else f"(m, d) or ({num_latent}, m, d)"
            raise ShapeError(f"{name}: expected shape {expected}, got {describe_shape(Z.shape)}")
        check_finite(self.xp, Z, name)
        return Z

    def _check_X(self, X, name="X"):
        """Inputs of a model with inducing points: ``X`` converted to the model's namespace,
        dtype and device, checked to be (n, d) like the inducing points, and finite."""
        X = asarray(X, dtype=self.dtype, xp=self.xp, device=self._device)
        d = self.inducing_points.shape[-1]
        if X.ndim != 2 or X.shape[1] != d:
            raise ShapeError(f"{name}: expected shape (n, {d}), got {describe_shape(X.shape)}")
        check_finite(self.xp, X, name)
        return X

    def _check_y(self, y, n, name="y", inputs="X"):
        """Targets of a model with inducing points: ``y`` converted like :meth:`_check_X`,
        checked to be (n,) to match the ``n`` rows of ``inputs``, finite, and valid for the
        likelihood."""
        y = asarray(y, dtype=self.dtype, xp=self.xp, device=self._device)
        if y.ndim != 1 or y.shape[0] != n:
            raise ShapeError(f"{name}: expected shape ({n},) to match {inputs}, got "
                             f"{describe_shape(y.shape)}")
        check_finite(self.xp, y, name)
        if hasattr(self.likelihood, "check_targets"):
            self.likelihood.check_targets(y)
        return y

    def _check_minibatch_data(self, X, y):
        """``X`` and ``y`` through :meth:`_check_X` and :meth:`_check_y`, and at most
        ``num_data`` rows (the training-set size the minibatch terms are scaled to)."""
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        if X.shape[0] > self.num_data:
            raise ValueError(f"num_data: the model says {self.num_data} points but X has "
                             f"{X.shape[0]}")
        return X, y

    def _adopt_num_data(self, num_data):
        """Set ``num_data`` (N, the training-set size the minibatch terms are scaled to) as an
        int >= 1; anything ``int()`` takes is accepted."""
        self.num_data = int(num_data)
        if self.num_data < 1:
            raise ValueError(f"num_data: expected an integer >= 1, got {num_data!r}")

    # ------------------------------------------------------------------ helpers
    def _own_names(self) -> tuple:
        """Names of the model's own parameters (hook for models with inactive ones)."""
        return tuple(self._param_names)

    def _split(self, values: dict):
        """``{name: value}`` -> (own dict, {component: dict}); unknown names raise KeyError."""
        own = {}
        parts = {c: {} for c in self._components}
        own_names = self._own_names()
        for key, value in values.items():
            head, dot, rest = str(key).partition(".")
            if dot and head in parts:
                parts[head][rest] = value
            elif key in own_names:
                own[key] = value
            else:
                raise KeyError(f"unknown parameter {key!r}; expected one of "
                               f"{sorted(self.parameters())}")
        for comp, sub in parts.items():
            known = getattr(self, comp).parameters()
            unknown = sorted(set(sub) - set(known))
            if unknown:
                raise KeyError(f"unknown parameter(s) {[f'{comp}.{k}' for k in unknown]}; "
                               f"expected one of {sorted(self.parameters())}")
        return own, parts

    def _check_component(self, comp: str) -> None:
        """Raise ``TypeError`` unless the component's parameters share the model's namespace,
        dtype and device (a mismatch would otherwise surface later, deep inside a computation)."""
        obj = getattr(self, comp)
        device = self._device
        for name, value in obj.parameters().items():
            if not is_array(value) or get_namespace(value) is not self.xp:
                raise TypeError(f"{comp}: its parameter {name!r} is a {type(value).__module__} "
                                f"array but the model's data are {self.xp.__name__} arrays; "
                                f"create the {comp} with the data's xp=, dtype= and device=")
            if value.dtype != self.dtype:
                raise TypeError(f"{comp}: expected parameters of dtype {self.dtype} (that of "
                                f"the data), got {name!r} of dtype {value.dtype}; create the "
                                f"{comp} with dtype={self.dtype}")
            if device_of(value) != device:
                raise TypeError(f"{comp}: expected parameters on the data's device {device}, "
                                f"got {name!r} on {device_of(value)}")

    # ------------------------------------------------------------------ Parameterised API
    def parameters(self) -> dict:
        """All learnable parameters in natural form, as one flat dict.

        Keys: the model's own names, then ``"<component>.<name>"`` for each component. The
        values are the arrays themselves, not copies.
        """
        out = {n: getattr(self, n) for n in self._own_names()}
        for comp in self._components:
            out.update({f"{comp}.{k}": v for k, v in getattr(self, comp).parameters().items()})
        return out

    def _assign(self, own: dict, parts: dict, method: str) -> None:
        """Set own natural values and call each component's ``method`` with its group.

        Own values are validated before any assignment; a component that rejects its values
        leaves the components updated before it restored and the own values untouched.
        """
        own_converted = {n: self._convert_param(n, v) for n, v in own.items()}
        done = []
        try:
            for comp, sub in parts.items():
                if sub:
                    obj = getattr(self, comp)
                    previous = {k: v for k, v in obj.parameters().items() if k in sub}
                    getattr(obj, method)(sub)
                    done.append((obj, previous))
        except Exception:
            for obj, previous in reversed(done):
                obj.set_parameters(previous)
            raise
        for n, v in own_converted.items():
            object.__setattr__(self, n, v)

    def set_parameters(self, values: dict) -> None:
        """Assign natural-form parameters given by their dotted names.

        Every name is checked, and the model's own values validated, before anything is
        assigned; if a component rejects its values, the components already updated by this
        call get their previous values back.
        """
        own, parts = self._split(values)
        self._assign(own, parts, "set_parameters")

    #: Lower bounds of the transformed own parameters whose bound is not 0 (for
    #: :func:`gpnum.params.to_unconstrained`); empty: every transformed parameter is > 0.
    _lower: dict = {}

    def _constrained(self) -> tuple:
        """Own parameters stored through the softplus transform (hook; ``_positive`` here)."""
        return tuple(self._positive)

    def unconstrained(self) -> dict:
        """Parameters in unconstrained form, keyed like :meth:`parameters`."""
        out = to_unconstrained({n: getattr(self, n) for n in self._own_names()},
                               self._constrained(), self._lower)
        for comp in self._components:
            out.update({f"{comp}.{k}": v
                        for k, v in getattr(self, comp).unconstrained().items()})
        return out

    def set_unconstrained(self, values: dict) -> None:
        """Assign parameters from their unconstrained form (inverse of :meth:`unconstrained`)."""
        own, parts = self._split(values)
        natural = from_unconstrained(own, self._constrained(), self._lower)
        self._assign(natural, parts, "set_unconstrained")

    def grad_to_unconstrained(self, grads: dict) -> dict:
        """Chain rule: gradients w.r.t. the natural parameters -> w.r.t. the unconstrained ones."""
        own, parts = self._split(grads)
        constrained = self._constrained()
        natural = {n: getattr(self, n) for n in own if n in constrained}
        out = chain_to_unconstrained(own, natural, constrained, self._lower)
        for comp, sub in parts.items():
            if sub:
                out.update({f"{comp}.{k}": v
                            for k, v in getattr(self, comp).grad_to_unconstrained(sub).items()})
        return out


class FullBatchGaussianModel(ComposedParameters):
    """What the exact-inference models (:class:`~gpnum.models.GPR`,
    :class:`~gpnum.models.SGPR`) share: a kernel, a Gaussian likelihood, a learned
    constant mean, the training data held by the model, their checks, and the model protocol
    around the objective.

    Subclasses set ``_param_names`` (including ``"mean"``) and ``_default_jitter``, and
    implement ``_objective_and_grad(X, y)``, ``_prediction_state()`` (what every prediction
    needs from the training data, computed once per call of :meth:`predict_f`) and
    ``_predict(Xnew, state, full_cov)``.
    """

    full_batch = True
    #: The BLAS pool of the model's work (gpnum.backend.blas_pool): SciPy's, where the
    #: Cholesky factorisations and triangular solves run.
    blas_pool = "scipy"
    #: Whether the training objective splits its memory-bound passes over gpnum's own
    #: threads with the BLAS pools at one thread (gpnum.backend.blas_pool's split_rows).
    split_rows = False
    _default_jitter = 0.0
    _predict_chunk = 4096

    # ------------------------------------------------------------------ construction
    def _setup(self, kernel, likelihood, X, y, mean, jitter):
        """Validate and store the constructor's arguments (namespace from ``X``)."""
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel, got {type(kernel).__name__}")
        self._check_likelihood(likelihood)
        # The model lives where its data do (a list or scalar data: where the kernel does).
        ref = X if is_array(X) else next(iter(kernel.parameters().values()))
        xp = get_namespace(ref)
        dtype = ref.dtype if xp.isdtype(ref.dtype, "real floating") else kernel.dtype
        device = device_of(ref)
        self._init_namespace(xp, dtype, device)
        if is_array(y):
            get_namespace(ref, y)  # a clear TypeError when libraries are mixed
        X = asarray(X, dtype=dtype, xp=xp, device=device)
        y = asarray(y, dtype=dtype, xp=xp, device=device)
        check_points_shape(X, "X")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ShapeError(f"y: expected shape ({X.shape[0]},) to match X, got "
                             f"{describe_shape(y.shape)}")
        check_finite(xp, X, "X")
        check_finite(xp, y, "y")
        if is_array(mean) and mean.ndim != 0:
            raise ShapeError(f"mean: expected a scalar (shape ()), got shape "
                             f"{describe_shape(mean.shape)}")
        if jitter is None:
            jitter = self._default_jitter
        try:
            jitter = float(jitter)
        except (TypeError, ValueError):
            raise TypeError(f"jitter: expected a real number or None, got {jitter!r}") from None
        if not (jitter >= 0.0 and math.isfinite(jitter)):
            raise ValueError(f"jitter: expected a finite number >= 0, got {jitter!r}")
        self.kernel = kernel
        self.likelihood = likelihood
        self._check_component("kernel")
        self._check_component("likelihood")
        # The kernel's own check of the columns (an ARD lengthscale of the wrong length).
        kernel.diag(X[:1, :])
        self.jitter = jitter
        self.mean = mean
        self._X = X
        self._y = y

    def _check_likelihood(self, likelihood):
        """Raise unless the model can use ``likelihood`` (here: Gaussian noise only)."""
        if not isinstance(likelihood, Gaussian):
            raise TypeError(f"likelihood: {type(self).__name__} is exact inference, closed-form "
                            f"only for Gaussian noise: expected gpnum.likelihoods.Gaussian, got "
                            f"{type(likelihood).__name__} (use SVGP for other likelihoods)")

    # ------------------------------------------------------------------ data and settings
    @property
    def X(self):
        """The training inputs, (n, d)."""
        return self._X

    @property
    def y(self):
        """The training targets, (n,)."""
        return self._y

    @property
    def num_data(self) -> int:
        """Number of training points ``n``."""
        return self._X.shape[0]

    def config(self) -> dict:
        """The constructor's non-array settings, JSON-able: ``{"jitter": float}``.

        With :meth:`data`, the kernel, the likelihood and the values of :meth:`parameters`
        they rebuild the model (:meth:`from_config`, :mod:`gpnum.checkpoint`).
        """
        return {"jitter": self.jitter}

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        """Rebuild a model from :meth:`config`, :meth:`data` and the model's own
        :meth:`parameters` values (``params``: ``mean``, and ``inducing_points`` for SGPR)."""
        return cls(kernel, likelihood, data["X"], data["y"], **cls._own_init_args(params),
                   jitter=config["jitter"])

    @classmethod
    def _own_init_args(cls, params):
        """Constructor keywords for the own parameters in ``params``."""
        return {"mean": params["mean"]} if "mean" in params else {}

    def data(self) -> dict:
        """The constructor's arrays that are not parameters: ``{"X": (n, d), "y": (n,)}``."""
        return {"X": self._X, "y": self._y}

    # ------------------------------------------------------------------ input checks
    def _check_like(self, A, ref, name):
        """``A`` converted to the model's arrays, with ``ref``'s shape, finite."""
        A = asarray(A, dtype=self.dtype, xp=self.xp, device=self._device)
        if tuple(A.shape) != tuple(ref.shape):
            raise ShapeError(f"{name}: expected shape {describe_shape(ref.shape)} (the training "
                             f"data's: {type(self).__name__} is a full-batch model), got "
                             f"{describe_shape(A.shape)}")
        check_finite(self.xp, A, name)
        return A

    def check_data(self, X, y):
        """Validate and convert training data once (:func:`gpnum.fit` does, then passes
        ``validate=False`` to each evaluation of the objective).

        Parameters
        ----------
        X : array (n, d)
        y : array (n,)
            A full-batch model's objective needs the whole data set: the shapes must be those
            of the training data the model was built with.

        Returns
        -------
        X, y : arrays in the model's namespace, dtype and device

        Raises
        ------
        ShapeError
            Shapes other than the training data's.
        ValueError
            NaN or Inf values.
        """
        X = X if X is self._X else self._check_like(X, self._X, "X")
        y = y if y is self._y else self._check_like(y, self._y, "y")
        return X, y

    def _training_batch(self, X, y, validate):
        """The data an objective is evaluated on: the model's own unless given (same shapes).

        The model's own arrays are trusted without a check, as is anything when ``validate``
        is false (data that :meth:`check_data` has passed).
        """
        X = self._X if X is None else X
        y = self._y if y is None else y
        if validate:
            X, y = self.check_data(X, y)
        return X, y

    def _check_new(self, Xnew, name="Xnew"):
        """Prediction inputs (n, d) converted to the model's arrays, finite."""
        Xnew = asarray(Xnew, dtype=self.dtype, xp=self.xp, device=self._device)
        d = self._X.shape[1]
        if Xnew.ndim != 2 or Xnew.shape[1] != d or Xnew.shape[0] < 1:
            raise ShapeError(f"{name}: expected shape (n, {d}) with n >= 1, got "
                             f"{describe_shape(Xnew.shape)}")
        check_finite(self.xp, Xnew, name)
        return Xnew

    # ------------------------------------------------------------------ model protocol
    def objective_and_grad(self, X=None, y=None, *, validate=True):
        """The objective to maximise and its gradients, keyed like :meth:`parameters`.

        Parameters
        ----------
        X : array (n, d), optional
            Default: the training inputs. A full-batch model needs the whole data set: an
            array of another shape raises :class:`gpnum.ShapeError`.
        y : array (n,), optional
            Default: the training targets.
        validate : bool
            False skips the input checks, for data that :meth:`check_data` has passed.

        Returns
        -------
        value : 0-d array
        grads : dict
            Natural-form gradients, each shaped like its parameter.
        """
        X, y = self._training_batch(X, y, validate)
        with blas_pool(self.blas_pool, split_rows=self.split_rows):
            return self._objective_and_grad(X, y)

    def predict_f(self, Xnew, full_cov=False):
        """Posterior mean and (co)variance of the latent function at ``Xnew``.

        Parameters
        ----------
        Xnew : array (n, d)
        full_cov : bool
            Return the (n, n) posterior covariance instead of the marginal variances.

        Returns
        -------
        mean : array (n,)
        var : array (n,), or cov : array (n, n) with ``full_cov=True``
        """
        with blas_pool(self.blas_pool):
            return self._predict_f(Xnew, full_cov)

    def _predict_f(self, Xnew, full_cov):
        xp = self.xp
        Xnew = self._check_new(Xnew)
        state = self._prediction_state()
        if full_cov:
            mean, cov = self._predict(Xnew, state, True)
            return mean, 0.5 * (cov + cov.T)  # exactly symmetric, as a covariance must be
        n = Xnew.shape[0]
        means, variances = [], []
        for start in range(0, n, self._predict_chunk):
            # Blocks of rows bound the (n_train or m, chunk) intermediates; the array API
            # leaves a slice past the end unspecified, hence the min.
            mean, var = self._predict(Xnew[start:min(start + self._predict_chunk, n), :],
                                      state, False)
            means.append(mean)
            variances.append(var)
        mean = means[0] if len(means) == 1 else xp.concat(means)
        var = variances[0] if len(variances) == 1 else xp.concat(variances)
        # Round-off can take a variance that is ~0 in exact arithmetic below zero; the floor
        # keeps it in the likelihood's domain (predict_y, log_predictive_density).
        floor = 1e-12 if self.dtype == xp.float64 else 1e-6
        return mean, xp.where(var > floor, var, floor)

    def predict_y(self, Xnew):
        """Predictive mean and variance of noisy observations at ``Xnew``, each (n,).

        The latent marginals of :meth:`predict_f` through
        ``likelihood.predict_mean_and_var``: ``(mean, var + noise variance)``.
        """
        mean, var = self.predict_f(Xnew)
        return self.likelihood.predict_mean_and_var(mean, var)

    def log_predictive_density(self, Xnew, ynew):
        """Per-point ``log p(ynew_i | Xnew_i, data)`` under the posterior, shape (n,).

        ``log N(ynew_i; mean_i, var_i + noise variance)`` with the marginals of
        :meth:`predict_f`.
        """
        Xnew = self._check_new(Xnew)
        ynew = asarray(ynew, dtype=self.dtype, xp=self.xp, device=self._device)
        if ynew.ndim != 1 or ynew.shape[0] != Xnew.shape[0]:
            raise ShapeError(f"ynew: expected shape ({Xnew.shape[0]},) to match Xnew, got "
                             f"{describe_shape(ynew.shape)}")
        check_finite(self.xp, ynew, "ynew")
        mean, var = self.predict_f(Xnew)
        return self.likelihood.predictive_log_density(ynew, mean, var)

    def _scalar(self, value):
        """``value`` as a genuine 0-d array (NumPy reductions return NumPy scalars)."""
        return self._shaped(value, ())

    def _shaped(self, value, shape):
        """``value`` as a genuine array of ``shape`` in the model's namespace, dtype, device.

        Gradients of 0-d parameters come back from NumPy arithmetic as NumPy scalars; the
        model protocol hands out arrays shaped like the parameters.
        """
        xp = self.xp
        return xp.reshape(xp.asarray(value, dtype=self.dtype, device=self._device),
                          tuple(shape))

    def _objective_and_grad(self, X, y):
        raise NotImplementedError

    def _prediction_state(self):
        raise NotImplementedError

    def _predict(self, Xnew, state, full_cov):
        raise NotImplementedError
