"""scikit-learn estimators over gpnum's models: GPs inside pipelines, grid searches and CV.

``GPRegressor`` (exact GP regression, :class:`gpnum.GPR`), ``SVGPRegressor`` and
``SVGPClassifier`` (:class:`gpnum.SVGP` trained by :func:`gpnum.fit`) follow scikit-learn's
estimator contract: constructor arguments stored untouched, learned state in attributes ending
in ``_``, ``get_params`` / ``set_params`` (reaching into gpnum kernels: ``kernel__lengthscale``),
``clone``, pickling, and input validation through scikit-learn's own helpers. ``GPRegressor``
gives scikit-learn's ``GaussianProcessRegressor`` meanings to its arguments (``alpha``,
``optimizer``, ``n_restarts_optimizer``, ``normalize_y``) and to ``predict(X, return_std,
return_cov)`` and ``sample_y``; ``docs/sklearn.md`` says where, and why, it differs.

scikit-learn is an optional extra (``pip install gpnum[sklearn]``): ``import gpnum`` does not
import this module. Arrays are NumPy at the boundary (scikit-learn's contract); training runs on
the backend named by ``backend=`` (default ``GPNUM_BACKEND``) and results come back as NumPy.
This module therefore imports NumPy, like the data loaders: it is a host-side boundary.

gpnum kernels have no ``get_params`` of their own, so the nesting is done here, through the
kernels' public ``parameters()`` and their constructor's signature: a kernel's learnable
parameters and its constructor settings (``degree``, ``depth``, ...) appear as
``kernel__<name>``; the parts of a ``Sum`` / ``Product`` as ``kernel__<i>__<name>``. Setting one
builds a new kernel object with that value (the object passed in is left unchanged). gpnum
kernels hold their array namespace (a module), which neither ``pickle`` nor ``copy.deepcopy``
(``clone``, ``GridSearchCV``) can copy; importing this module registers a ``copyreg`` reducer
for gpnum's kernel classes that rebuilds a kernel from its settings and NumPy parameter values
(same namespace, dtype and device), and the estimators pickle their fitted models as
checkpoint state (:func:`gpnum.checkpoint.model_state`).
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from gpnum import backend as B
from gpnum.checkpoint import model_from_state, model_state
from gpnum.errors import ConvergenceWarning, NotPSDError
from gpnum.inducing import kmeans
from gpnum.kernels import RBF, Kernel
from gpnum.likelihoods import Bernoulli, Gaussian
from gpnum.models import GPR, SVGP, default_kernel, default_likelihood, inducing_jitter
from gpnum.optim import DEFAULT_RECIPE as _RECIPE
from gpnum.optim import fit as gpnum_fit

__all__ = ["GPRegressor", "SVGPRegressor", "SVGPClassifier"]

_SKIP_INIT = {"self", "xp", "dtype", "device"}
_LBFGS_NAMES = ("lbfgs", "fmin_l_bfgs_b")


# ---------------------------------------------------------------------------------- kernels
def _is_composite(cls, kernel):
    params = inspect.signature(cls.__init__).parameters.values()
    return hasattr(kernel, "kernels") and any(p.kind is p.VAR_POSITIONAL for p in params)


def _kernel_spec(kernel):
    """A kernel as plain data: its class, constructor settings and NumPy parameter values.

    Read only through the public ``parameters()`` and the constructor's signature (a setting
    is a constructor argument that the kernel keeps as an attribute of the same name).
    """
    cls = type(kernel)
    if _is_composite(cls, kernel):
        return {"class": cls, "children": [_kernel_spec(k) for k in kernel.kernels]}
    params = {n: np.array(B.to_numpy(v), dtype=np.float64)
              for n, v in kernel.parameters().items()}
    settings = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in _SKIP_INIT or name in params or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if not hasattr(kernel, name):
            # A setting the kernel does not keep under its own name cannot be read back, and
            # a copy built without it could differ silently: refuse instead.
            raise TypeError(f"{cls.__name__}: its constructor argument {name!r} is neither a "
                            f"parameter nor an attribute of the kernel, so gpnum.sklearn cannot "
                            f"copy the kernel")
        value = getattr(kernel, name)
        settings[name] = np.array(B.to_numpy(value)) if B.is_array(value) else copy.deepcopy(value)
    return {"class": cls, "settings": settings, "params": params}


def _build_kernel(spec, xp, dtype, device):
    """The kernel of :func:`_kernel_spec`'s ``spec`` on namespace ``xp``, ``dtype``, ``device``."""
    cls = spec["class"]
    if "children" in spec:
        return cls(*[_build_kernel(c, xp, dtype, device) for c in spec["children"]])
    accepted = inspect.signature(cls.__init__).parameters
    arrays = {n: B.asarray(v, dtype=dtype, xp=xp, device=device)
              for n, v in spec["params"].items()}
    # Parameters go to the constructor, which fixes their shapes (an ARD lengthscale (d,)).
    kernel = cls(**spec["settings"], **{n: v for n, v in arrays.items() if n in accepted},
                 xp=xp, dtype=dtype, device=device)
    rest = {n: v for n, v in arrays.items() if n not in accepted}
    if rest:
        kernel.set_parameters(rest)
    return kernel


def _kernel_home(kernel):
    """Namespace, dtype and device of a kernel's parameters."""
    params = list(kernel.parameters().values())
    return kernel.xp, kernel.dtype, (B.device_of(params[0]) if params else None)


def _flat_values(spec, prefix=""):
    """``{"<i>__<name>": value}`` of a spec: floats for 0-d parameters, NumPy arrays else."""
    if "children" in spec:
        out = {}
        for i, child in enumerate(spec["children"]):
            out.update(_flat_values(child, f"{prefix}{i}__"))
        return out
    out = {f"{prefix}{n}": (float(v) if v.ndim == 0 else v.copy())
           for n, v in spec["params"].items()}
    out.update({f"{prefix}{n}": v for n, v in spec["settings"].items()})
    return out


def _spec_with(spec, key, value, full_key):
    """A copy of ``spec`` with the parameter or setting at ``key`` ("0__variance") replaced."""
    spec = dict(spec)
    if "children" in spec:
        head, sep, rest = key.partition("__")
        if not (sep and head.isdigit() and int(head) < len(spec["children"])):
            raise ValueError(f"Invalid parameter {full_key!r}: a {spec['class'].__name__} "
                             f"kernel's parameters are named '<i>__<name>' for its "
                             f"{len(spec['children'])} parts")
        children = list(spec["children"])
        children[int(head)] = _spec_with(children[int(head)], rest, value, full_key)
        spec["children"] = children
        return spec
    if key in spec["params"]:
        spec["params"] = dict(spec["params"], **{key: np.asarray(value, dtype=np.float64)})
    elif key in spec["settings"]:
        spec["settings"] = dict(spec["settings"], **{key: value})
    else:
        names = sorted(set(spec["params"]) | set(spec["settings"]))
        raise ValueError(f"Invalid parameter {full_key!r}: {spec['class'].__name__} has "
                         f"{names}")
    return spec


def _namespace_name(xp):
    """The ``GPNUM_BACKEND`` name of namespace ``xp``."""
    last = xp.__name__.split(".")[-1]
    return last if last in B.BACKENDS else xp.__name__


def _dtype_name(xp, dtype):
    return "float32" if dtype == xp.float32 else "float64"


class _PickledKernel:
    """A gpnum kernel as picklable data: spec, namespace by name, dtype name, device."""

    def __init__(self, kernel):
        xp, dtype, device = _kernel_home(kernel)
        self.spec = _kernel_spec(kernel)
        self.backend = _namespace_name(xp)
        self.dtype = _dtype_name(xp, dtype)
        self.device = device

    def restore(self):
        xp = B.namespace_by_name(self.backend)
        return _build_kernel(self.spec, xp, getattr(xp, self.dtype), self.device)


def _restore_kernel(pickled):
    return pickled.restore()


def _reduce_kernel(kernel):
    return _restore_kernel, (_PickledKernel(kernel),)


def _register_kernel_reducers():
    """Make gpnum's kernels picklable and deep-copyable (what ``clone`` and ``GridSearchCV``
    do to parameter values): their namespace is a module, which neither can copy, so a
    ``copyreg`` reducer rebuilds each kernel from its spec instead. Only gpnum's own kernel
    classes are registered, and never over an existing registration."""
    import copyreg

    stack = list(Kernel.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("gpnum.") and cls not in copyreg.dispatch_table:
            copyreg.pickle(cls, _reduce_kernel)


_register_kernel_reducers()


class _PickledModel:
    """A fitted gpnum model as its checkpoint state (settings and NumPy arrays)."""

    def __init__(self, model):
        self.config, self.arrays = model_state(model)
        self.backend = _namespace_name(model.xp)

    def restore(self):
        return model_from_state(self.config, self.arrays,
                                xp=B.namespace_by_name(self.backend), where="pickled estimator")


# ------------------------------------------------------------------------- shared machinery
class _GPnumEstimator(BaseEstimator):
    """get_params / set_params into gpnum kernels, pickling, the backend and the dtype."""

    def get_params(self, deep=True):
        """Parameters of this estimator; with ``deep=True`` also ``kernel__<name>`` for each
        parameter and constructor setting of a gpnum kernel (``kernel__<i>__<name>`` for the
        parts of a sum or product)."""
        out = super().get_params(deep=deep)
        if deep:
            for name, value in list(out.items()):
                if isinstance(value, Kernel):
                    out.update({f"{name}__{k}": v
                                for k, v in _flat_values(_kernel_spec(value)).items()})
        return out

    def set_params(self, **params):
        """Set parameters; ``kernel__<name>=v`` replaces ``kernel`` by a new kernel equal to it
        but for that value (in the kernel's own namespace, dtype and device)."""
        plain, nested = {}, {}
        own = self._get_param_names()
        for key, value in params.items():
            head, sep, rest = key.partition("__")
            if sep and head in own:
                nested.setdefault(head, {})[rest] = value
            else:
                plain[key] = value
        kernel_nested = {}
        for head, sub in nested.items():
            target = plain.get(head, getattr(self, head))
            if isinstance(target, Kernel):
                kernel_nested[head] = sub
            else:  # a nested scikit-learn object, if any: its own set_params
                plain.update({f"{head}__{k}": v for k, v in sub.items()})
        super().set_params(**plain)
        for head, sub in kernel_nested.items():
            kernel = getattr(self, head)
            spec = _kernel_spec(kernel)
            for key, value in sub.items():
                spec = _spec_with(spec, key, value, f"{head}__{key}")
            setattr(self, head, _build_kernel(spec, *_kernel_home(kernel)))
        return self

    def __getstate__(self):
        state = super().__getstate__()
        # The fitted model holds its namespace (a module): it travels as its checkpoint state;
        # kernel_ is the model's own kernel and is restored with it.
        if "model_" in state:
            state = dict(state, model_=_PickledModel(state["model_"]))
            state.pop("kernel_", None)
        return state

    def __setstate__(self, state):
        state = {k: (v.restore() if isinstance(v, _PickledModel) else v)
                 for k, v in state.items()}
        super().__setstate__(state)
        if "model_" in state:  # the fitted kernel is the model's own
            self.kernel_ = self.model_.kernel

    # ------------------------------------------------------------------ helpers
    def _namespace(self):
        """Training namespace and dtype: ``backend`` (default ``GPNUM_BACKEND``), ``dtype``."""
        xp = B.namespace() if self.backend is None else B.namespace_by_name(str(self.backend))
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype: expected 'float64' or 'float32', got {self.dtype!r}")
        return xp, getattr(xp, self.dtype)

    def _to_backend(self, a):
        xp = self.model_.xp
        return B.asarray(a, dtype=self.model_.dtype, xp=xp, device=self.model_.device)

    def _initial_kernel(self, n_features, xp, dtype):
        """The kernel to train: ``kernel`` rebuilt on the training backend (never the object
        passed in, which stays as it was), or the default."""
        if self.kernel is None:
            return self._default_kernel(n_features, xp, dtype)
        if not isinstance(self.kernel, Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel (gpnum.kernels) or None, got "
                            f"{type(self.kernel).__name__}")
        return _build_kernel(_kernel_spec(self.kernel), xp, dtype, None)

    def _seed(self):
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def _normalisation(y, normalize_y):
    """``(mean, std)`` that ``normalize_y`` removes from the targets (scikit-learn's rule: a
    zero standard deviation is taken as 1)."""
    if not normalize_y:
        return 0.0, 1.0
    mean, std = float(np.mean(y)), float(np.std(y))
    return mean, (std if std > 0.0 else 1.0)


def _check_return(return_std, return_cov):
    if return_std and return_cov:
        raise RuntimeError("At most one of return_std or return_cov can be requested.")


def _lbfgs_in_logs(model, fixed, max_iter, low, high):
    """scikit-learn's optimiser: L-BFGS-B on the logarithms of the free parameters, each in
    ``[log low, log high]``, through the model protocol. Returns (iterations, the objective at
    the parameters it leaves on the model)."""
    from scipy.optimize import minimize

    start = {k: np.array(B.to_numpy(v), dtype=np.float64)
             for k, v in model.parameters().items() if k not in fixed}
    for k, v in start.items():
        if not np.all(v > 0.0):
            raise ValueError(f"optimizer='fmin_l_bfgs_b' optimises logarithms, but {k} is not "
                             f"positive; use optimizer='lbfgs'")
    names = list(start)
    sizes = [v.size for v in start.values()]
    splits = np.cumsum(sizes)[:-1]

    def values(theta):
        return {k: np.exp(part).reshape(start[k].shape)
                for k, part in zip(names, np.split(theta, splits))}

    def objective(theta):
        try:
            model.set_parameters(values(theta))
            value, grads = model.objective_and_grad(validate=False)
        except NotPSDError:
            return math.inf, np.zeros_like(theta)  # the line search backs off
        g = np.concatenate([np.ravel(B.to_numpy(grads[k])) for k in names]) * np.exp(theta)
        v = float(value)
        if not (math.isfinite(v) and np.all(np.isfinite(g))):
            return math.inf, np.zeros_like(theta)
        return -v, -g  # d/d log p = p d/dp

    theta0 = np.concatenate([np.log(v).ravel() for v in start.values()])
    bounds = [(math.log(low), math.log(high))] * theta0.size
    result = minimize(objective, theta0, jac=True, method="L-BFGS-B", bounds=bounds,
                      options={"maxiter": max_iter})
    if not result.success:
        warnings.warn(f"L-BFGS-B stopped without converging after {result.nit} iterations: "
                      f"{result.message}", ConvergenceWarning, stacklevel=4)
    model.set_parameters(values(result.x))
    return int(result.nit), -float(result.fun)


# ----------------------------------------------------------------------------- GPRegressor
class GPRegressor(RegressorMixin, _GPnumEstimator):
    """Exact Gaussian-process regression (:class:`gpnum.GPR`) as a scikit-learn regressor.

    The arguments mean what they mean for scikit-learn's ``GaussianProcessRegressor``: the
    prior is ``f ~ GP(0, kernel)`` (after removing the mean and scale of ``y`` when
    ``normalize_y``), ``y = f(X) + eps`` with ``eps ~ N(0, alpha)``, and the kernel's
    hyper-parameters maximise the log marginal likelihood (Rasmussen & Williams 2006, ch. 2
    and 5.4.1).

    Parameters
    ----------
    kernel : gpnum kernel, optional
        Prior covariance. Default ``RBF(lengthscale=1.0, variance=1.0)``, the kernel that
        scikit-learn uses by default, but with its hyper-parameters optimised like any other
        (scikit-learn holds its default fixed). The object passed is never modified: the
        fitted kernel is ``kernel_``.
    alpha : float
        Noise variance added to the diagonal of the training covariance, as in scikit-learn.
        It becomes the variance of gpnum.GPR's Gaussian likelihood, held fixed during the fit
        (``learn_noise=False``). Must be > 0; a per-sample array is not supported (GPR has one
        noise variance).
    solver : {"auto", "cholesky", "cg", "grid", "ski"}
        How gpnum.GPR solves with ``K + alpha I``: ``"auto"`` and ``"cholesky"`` factorise it;
        ``"cg"`` needs a gpnum.GPR with a ``solver`` argument (an error names it otherwise);
        ``"grid"`` (inputs on a Cartesian grid) and ``"ski"`` (d <= 3) use the structured
        solvers (docs/structure.md).
    optimizer : {"lbfgs", "fmin_l_bfgs_b"} or None
        Both run SciPy's L-BFGS-B on the log marginal likelihood. ``"lbfgs"``: through
        :func:`gpnum.fit`, on gpnum's unconstrained coordinates (the softplus-inverse of each
        positive parameter), unbounded. ``"fmin_l_bfgs_b"``: scikit-learn's rule, on the
        logarithms of the hyper-parameters within ``hyperparameter_bounds`` (every free
        parameter must be positive). None: keep the kernel's hyper-parameters as given.
    n_restarts_optimizer : int
        Further runs of the optimiser from free parameters drawn log-uniformly within
        ``hyperparameter_bounds`` (scikit-learn's rule with its default bounds); the run with
        the largest log marginal likelihood is kept.
    normalize_y : bool
        Remove the mean of ``y`` and divide by its standard deviation before fitting;
        predictions are mapped back.
    random_state : int, RandomState or None
        Seeds the restarts' draws.
    learn_noise : bool
        If True, ``alpha`` is only the initial noise variance, learned with the kernel (what
        gpnum.GPR does on its own; scikit-learn would need a WhiteKernel). Predictions remain
        those of the latent ``f``; the fitted noise variance is ``noise_variance_``.
    hyperparameter_bounds : (float, float)
        Range of the restarts' log-uniform draws, for every free parameter, and the box of
        ``optimizer="fmin_l_bfgs_b"`` for every free parameter (scikit-learn's default).
    max_iter : int
        L-BFGS-B iterations per run.
    backend : str, optional
        gpnum backend for the computation (``"numpy"``, ``"torch"``, ``"cupy"``,
        ``"array_api_strict"``); default ``GPNUM_BACKEND``.
    dtype : {"float64", "float32"}
        Working precision on the backend.

    Attributes
    ----------
    kernel_ : gpnum kernel
        The fitted kernel (on the training backend).
    model_ : gpnum.GPR
    log_marginal_likelihood_value_ : float
        Log marginal likelihood of the (normalised) training targets at ``kernel_``.
    noise_variance_ : float
    n_iter_ : int
        L-BFGS-B iterations over all runs (0 with ``optimizer=None``).
    X_train_, y_train_ : ndarray (n, d), (n,)
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names.
    """

    def __init__(self, kernel=None, *, alpha=1e-10, solver="auto", optimizer="lbfgs",
                 n_restarts_optimizer=0, normalize_y=False, random_state=None,
                 learn_noise=False, hyperparameter_bounds=(1e-5, 1e5), max_iter=1000, backend=None,
                 dtype="float64"):
        self.kernel = kernel
        self.alpha = alpha
        self.solver = solver
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.random_state = random_state
        self.learn_noise = learn_noise
        self.hyperparameter_bounds = hyperparameter_bounds
        self.max_iter = max_iter
        self.backend = backend
        self.dtype = dtype

    def _default_kernel(self, n_features, xp, dtype):
        return RBF(lengthscale=1.0, variance=1.0, xp=xp, dtype=dtype)

    def _gpr_kwargs(self):
        has_solver = "solver" in inspect.signature(GPR.__init__).parameters
        if self.solver not in ("auto", "cholesky", "cg", "grid", "ski"):
            raise ValueError(f"solver: expected 'auto', 'cholesky', 'cg', 'grid' or 'ski', got "
                             f"{self.solver!r}")
        if has_solver and self.solver != "auto":
            return {"solver": self.solver}
        if self.solver == "cg":
            raise ValueError("solver='cg': this gpnum.GPR has no conjugate-gradient solver; use "
                             "'auto' or 'cholesky'")
        return {}

    def _check_settings(self):
        if np.ndim(self.alpha) != 0:
            raise ValueError("alpha: gpnum.GPR has one noise variance; expected a number > 0, "
                             f"got an array of shape {np.shape(self.alpha)}")
        alpha = _check_positive(self.alpha, "alpha")
        if self.optimizer is not None and self.optimizer not in _LBFGS_NAMES:
            raise ValueError(f"optimizer: expected 'lbfgs', 'fmin_l_bfgs_b' or None, got "
                             f"{self.optimizer!r}")
        restarts = _check_int(self.n_restarts_optimizer, "n_restarts_optimizer", 0)
        max_iter = _check_int(self.max_iter, "max_iter", 1)
        try:
            low, high = (float(b) for b in self.hyperparameter_bounds)
        except (TypeError, ValueError):
            raise ValueError(f"hyperparameter_bounds: expected two numbers (low, high), got "
                             f"{self.hyperparameter_bounds!r}") from None
        if not 0.0 < low <= high < math.inf:
            raise ValueError(f"hyperparameter_bounds: expected 0 < low <= high, got "
                             f"{self.hyperparameter_bounds!r}")
        return alpha, restarts, max_iter, (low, high)

    def fit(self, X, y):
        """Fit the GP to ``X`` (n, d) and ``y`` (n,); returns ``self``."""
        alpha, restarts, max_iter, (low, high) = self._check_settings()
        gpr_kwargs = self._gpr_kwargs()
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        xp, dtype = self._namespace()
        mean, std = _normalisation(y, self.normalize_y)
        kernel = self._initial_kernel(X.shape[1], xp, dtype)
        likelihood = Gaussian(variance=alpha, xp=xp, dtype=dtype)
        model = GPR(kernel, likelihood, B.asarray(X, dtype=dtype, xp=xp),
                    B.asarray((y - mean) / std, dtype=dtype, xp=xp), mean=0.0, **gpr_kwargs)
        fixed = ["mean"] if self.learn_noise else ["mean", "likelihood.variance"]
        free = [k for k in model.parameters() if k not in fixed]
        self.n_iter_ = 0
        if self.optimizer is not None and free:
            self.n_iter_, lml = self._optimise(model, fixed, restarts, max_iter, low, high)
        else:
            lml = float(model.log_marginal_likelihood())
        self.model_ = model
        self.kernel_ = model.kernel
        self.log_marginal_likelihood_value_ = lml
        self.noise_variance_ = float(B.to_numpy(model.likelihood.variance))
        self.X_train_, self.y_train_ = X, y
        self._y_train_mean, self._y_train_std = mean, std
        return self

    def _optimise(self, model, fixed, restarts, max_iter, low, high):
        """L-BFGS-B from the kernel's values, then from ``restarts`` log-uniform draws; keeps
        the run with the largest log marginal likelihood. Returns the iterations over all runs
        and that log marginal likelihood."""
        rng = check_random_state(self.random_state)
        start = {k: v for k, v in model.parameters().items() if k not in fixed}
        best, best_lml, iterations = None, -math.inf, 0
        for run in range(restarts + 1):
            if run:
                model.set_parameters({
                    k: np.exp(rng.uniform(math.log(low), math.log(high), size=tuple(v.shape)))
                    for k, v in start.items()})
            if self.optimizer == "lbfgs":
                history = gpnum_fit(model, optimizer="lbfgs", fixed=fixed, maxiter=max_iter,
                                    progress=False)
                # gpnum.fit's last record is the objective at the parameters it leaves.
                nit, lml = history.num_steps, history.epoch_elbo[-1]
            else:
                nit, lml = _lbfgs_in_logs(model, fixed, max_iter, low, high)
            iterations += nit
            if lml > best_lml or best is None:
                best_lml = lml
                best = {k: np.array(B.to_numpy(v)) for k, v in model.parameters().items()}
        if restarts:
            model.set_parameters(best)
        return iterations, best_lml

    def predict(self, X, return_std=False, return_cov=False):
        """Posterior of the latent function at ``X`` (m, d), as GaussianProcessRegressor's.

        Returns
        -------
        y_mean : ndarray (m,)
        y_std : ndarray (m,), only with ``return_std``
            Standard deviation of ``f(X)`` (without the noise ``alpha``, as in scikit-learn).
        y_cov : ndarray (m, m), only with ``return_cov``
        """
        _check_return(return_std, return_cov)
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, var = self.model_.predict_f(self._to_backend(X), full_cov=bool(return_cov))
        y_mean = B.to_numpy(mean).astype(np.float64) * self._y_train_std + self._y_train_mean
        if not (return_std or return_cov):
            return y_mean
        var = B.to_numpy(var).astype(np.float64) * self._y_train_std ** 2
        return (y_mean, var) if return_cov else (y_mean, np.sqrt(var))

    def sample_y(self, X, n_samples=1, random_state=0):
        """Joint draws of ``f(X)`` from the posterior, shape (m, n_samples) (scikit-learn's
        rule: ``multivariate_normal`` of :meth:`predict`'s mean and covariance)."""
        rng = check_random_state(random_state)
        mean, cov = self.predict(X, return_cov=True)
        return rng.multivariate_normal(mean, cov, int(n_samples)).T


# ------------------------------------------------------------------------------- SVGP base
class _SVGPEstimator(_GPnumEstimator):
    """What SVGPRegressor and SVGPClassifier share: inducing points, the model, the fit."""

    def _default_kernel(self, n_features, xp, dtype):
        # gpnum's recipe (gpnum.models.default_kernel): ARD Matern-5/2, unit values.
        return default_kernel("matern52", n_features, xp=xp, dtype=dtype)

    def _check_svgp_settings(self):
        _check_int(self.num_inducing, "num_inducing", 1)
        if self.epochs is not None:
            _check_int(self.epochs, "epochs", 1)
        _check_int(self.batch_size, "batch_size", 1)
        if self.whitening not in ("cholesky", "ciq"):
            raise ValueError(f"whitening: expected 'cholesky' or 'ciq', got {self.whitening!r}")
        if self.optimizer not in ("ngd", "adam"):
            raise ValueError(f"optimizer: expected 'ngd' or 'adam', got {self.optimizer!r}")
        _check_positive(self.lr, "lr")
        _check_positive(self.gamma, "gamma")

    def _fit_svgp(self, X, y_model, likelihood, xp, dtype):
        """Build the SVGP on k-means inducing points and train it with :func:`gpnum.fit`."""
        seed = self._seed()
        Xb = B.asarray(X, dtype=dtype, xp=xp)
        m = min(int(self.num_inducing), int(np.unique(X, axis=0).shape[0]))
        Z = kmeans(Xb, m, seed=seed)
        if getattr(self, "separate_inducing", False):
            # One set per latent function, all starting at the same k-means points.
            Z = xp.stack([Z] * int(getattr(likelihood, "num_latent", 1)))
        jitter = inducing_jitter(xp, dtype)
        model = SVGP(self._initial_kernel(X.shape[1], xp, dtype), likelihood, Z,
                     num_data=X.shape[0], whitening=self.whitening, jitter=jitter)
        history = gpnum_fit(model, Xb, B.asarray(y_model, dtype=dtype, xp=xp),
                            epochs=None if self.epochs is None else int(self.epochs),
                            batch_size=int(self.batch_size),
                            optimizer=self.optimizer, lr=float(self.lr), gamma=float(self.gamma),
                            seed=seed, progress=False)
        if history.stopped is not None:
            warnings.warn(f"{type(self).__name__}: training stopped early: {history.stopped}",
                          RuntimeWarning, stacklevel=3)
        model.training_state = None  # optimiser state is not part of the fitted estimator
        self.model_ = model
        self.kernel_ = model.kernel
        self.elbo_ = float(history.epoch_elbo[-1])
        self.history_ = history
        self.num_inducing_ = m
        return model

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("history_", None)  # per-step records, not needed to predict
        return state


def _likelihood_by_name(name, xp, dtype, **kwargs):
    """A gpnum likelihood by (case-insensitive) class name, for names beyond the defaults."""
    from gpnum import likelihoods

    key = str(name).replace("_", "").replace("-", "").lower()
    for cls_name in likelihoods.__all__:
        cls = getattr(likelihoods, cls_name)
        if (isinstance(cls, type) and issubclass(cls, likelihoods.Likelihood)
                and cls is not likelihoods.Likelihood and cls_name.lower() == key):
            accepted = inspect.signature(cls.__init__).parameters
            return cls(**{k: v for k, v in kwargs.items() if k in accepted}, xp=xp, dtype=dtype)
    return None


# --------------------------------------------------------------------------- SVGPRegressor
class SVGPRegressor(RegressorMixin, _SVGPEstimator):
    """Sparse variational GP regression (:class:`gpnum.SVGP`, Hensman et al. 2013/2015),
    trained on minibatches by :func:`gpnum.fit` (natural gradients for q, Adam for the rest).

    Parameters
    ----------
    kernel : gpnum kernel, optional
        Default: ARD Matern-5/2 with unit lengthscales and variance (gpnum's recipe).
    num_inducing : int
        Number of inducing points ``m``, placed by k-means (at most the number of distinct
        training inputs) and then learned.
    epochs : int, optional
        Passes over the data. Default: gpnum's default recipe (as :func:`gpnum.fit`): 20, or
        as many as 1,500 minibatch steps take, whichever is more.
    batch_size : int
        Minibatch size.
    likelihood : str
        ``"gaussian"`` (default, noise variance learned), ``"studentt"``, or the name of another
        gpnum likelihood class for real-valued targets.
    whitening : {"cholesky", "ciq"}
    optimizer : {"ngd", "adam"}
        Natural gradients for q alternating with Adam (default), or Adam on everything.
    lr, gamma : float
        Adam's learning rate and the natural-gradient step size.
    normalize_y : bool
        Standardise ``y`` before fitting (default True: training starts from unit-scale
        hyper-parameters, which suit unit-scale targets); predictions are mapped back.
    random_state : int, RandomState or None
        Seeds k-means, the minibatch order and :meth:`sample_y`'s default.
    backend : str, optional
    dtype : {"float64", "float32"}

    Attributes
    ----------
    kernel_, model_ : the fitted kernel and gpnum.SVGP
    elbo_ : float
        Mean minibatch ELBO of the last epoch (scaled to the whole training set).
    history_ : gpnum.optim.History
    num_inducing_ : int
    n_features_in_ : int
    """

    def __init__(self, kernel=None, *, num_inducing=500, epochs=None,
                 batch_size=_RECIPE["batch_size"], likelihood="gaussian", whitening="cholesky",
                 optimizer="ngd", lr=_RECIPE["lr"], gamma=_RECIPE["gamma"], normalize_y=True, random_state=None, backend=None, dtype="float64"):
        self.kernel = kernel
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.batch_size = batch_size
        self.likelihood = likelihood
        self.whitening = whitening
        self.optimizer = optimizer
        self.lr = lr
        self.gamma = gamma
        self.normalize_y = normalize_y
        self.random_state = random_state
        self.backend = backend
        self.dtype = dtype

    def _make_likelihood(self, xp, dtype):
        if self.likelihood in ("gaussian", "studentt"):
            return default_likelihood(self.likelihood, xp=xp, dtype=dtype)
        lik = None
        if isinstance(self.likelihood, str) and self.likelihood not in ("bernoulli",
                                                                        "robustmax", "softmax"):
            lik = _likelihood_by_name(self.likelihood, xp, dtype)
        if lik is None:
            raise ValueError(f"likelihood: expected 'gaussian', 'studentt' or the name of a "
                             f"gpnum likelihood for real-valued targets, got {self.likelihood!r}")
        return lik

    def fit(self, X, y):
        """Fit to ``X`` (n, d) and ``y`` (n,); returns ``self``."""
        self._check_svgp_settings()
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        xp, dtype = self._namespace()
        mean, std = _normalisation(y, self.normalize_y)
        self._fit_svgp(X, (y - mean) / std, self._make_likelihood(xp, dtype), xp, dtype)
        self._y_train_mean, self._y_train_std = mean, std
        return self

    def _latent_moments(self):
        return isinstance(self.model_.likelihood, Gaussian) or \
            type(self.model_.likelihood).__name__ == "StudentT"

    def predict(self, X, return_std=False, return_cov=False):
        """Predictions at ``X`` (m, d), as GaussianProcessRegressor's ``predict``.

        For the Gaussian and Student-t likelihoods the mean, standard deviation and covariance
        are those of the latent ``f(X)`` under q (the noise excluded, as in scikit-learn).
        For other likelihoods the mean and standard deviation are those of ``y`` (the
        likelihood's predictive moments) and ``return_cov`` is not available.
        """
        _check_return(return_std, return_cov)
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        Xb = self._to_backend(X)
        s, c = self._y_train_std, self._y_train_mean
        if self._latent_moments():
            mean, var = self.model_.predict_f(Xb, full_cov=bool(return_cov))
        elif return_cov:
            raise ValueError(f"return_cov: not available for the "
                             f"{type(self.model_.likelihood).__name__} likelihood")
        else:
            mean, var = self.model_.predict_y(Xb)
        y_mean = B.to_numpy(mean).astype(np.float64) * s + c
        if not (return_std or return_cov):
            return y_mean
        var = B.to_numpy(var).astype(np.float64) * s ** 2
        return (y_mean, var) if return_cov else (y_mean, np.sqrt(np.maximum(var, 0.0)))

    def sample_y(self, X, n_samples=1, random_state=0):
        """Joint draws of ``f(X)`` from q, shape (m, n_samples), by pathwise conditioning
        (:meth:`gpnum.SVGP.sample_f`)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
        draws = self.model_.sample_f(self._to_backend(X), int(n_samples), seed)
        return B.to_numpy(draws).astype(np.float64).T * self._y_train_std + self._y_train_mean


# -------------------------------------------------------------------------- SVGPClassifier
class SVGPClassifier(ClassifierMixin, _SVGPEstimator):
    """Sparse variational GP classification (:class:`gpnum.SVGP`; Hensman, Matthews &
    Ghahramani 2015), binary or many-class, trained by :func:`gpnum.fit`.

    Parameters
    ----------
    kernel : gpnum kernel, optional
        Default: ARD Matern-5/2 with unit lengthscales and variance. Many-class models share
        it between their latent functions (one per class).
    num_inducing, batch_size : int
    epochs : int, optional
        Default: gpnum's default recipe, as :class:`SVGPRegressor`.
    likelihood : str
        ``"auto"`` (default): ``"bernoulli"`` (probit) for two classes, otherwise ``"softmax"``
        when gpnum.likelihoods has it, else ``"robustmax"``. Also ``"probit"`` / ``"logit"``
        (Bernoulli with that link, two classes), ``"robustmax"``, ``"softmax"``, or the name of
        another gpnum many-class likelihood taking ``num_classes``.
    whitening, optimizer, lr, gamma, random_state, backend, dtype
        As for :class:`SVGPRegressor`.
    separate_inducing : bool
        Many-class likelihoods: ``num_inducing`` inducing points per latent function (class),
        learned separately, instead of one shared set (all start at the same k-means points;
        :class:`gpnum.SVGP` with ``inducing_points`` of shape (n_classes, m, d)).

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    kernel_, model_, elbo_, history_, num_inducing_, n_features_in_
        As for :class:`SVGPRegressor`.
    """

    def __init__(self, kernel=None, *, num_inducing=500, epochs=None,
                 batch_size=_RECIPE["batch_size"], likelihood="auto", whitening="cholesky",
                 optimizer="ngd", lr=_RECIPE["lr"], gamma=_RECIPE["gamma"],
                 random_state=None, backend=None, dtype="float64", separate_inducing=False):
        self.kernel = kernel
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.batch_size = batch_size
        self.likelihood = likelihood
        self.separate_inducing = separate_inducing
        self.whitening = whitening
        self.optimizer = optimizer
        self.lr = lr
        self.gamma = gamma
        self.random_state = random_state
        self.backend = backend
        self.dtype = dtype

    def _make_likelihood(self, n_classes, xp, dtype):
        from gpnum import likelihoods

        name = self.likelihood
        if name == "auto":
            name = ("bernoulli" if n_classes == 2
                    else "softmax" if hasattr(likelihoods, "Softmax") else "robustmax")
        if name in ("bernoulli", "probit", "logit"):
            if n_classes != 2:
                raise ValueError(f"likelihood={name!r} is binary; y has {n_classes} classes "
                                 "(use 'auto', 'robustmax' or 'softmax')")
            return Bernoulli(link="logit" if name == "logit" else "probit", xp=xp, dtype=dtype)
        lik = (_likelihood_by_name(name, xp, dtype, num_classes=n_classes)
               if isinstance(name, str) else None)
        if lik is None or getattr(lik, "num_latent", 1) != n_classes:
            raise ValueError(f"likelihood: expected 'auto', 'bernoulli', 'probit', 'logit', "
                             f"'robustmax' or 'softmax' (or another gpnum many-class "
                             f"likelihood), got {self.likelihood!r}")
        return lik

    def fit(self, X, y):
        """Fit to ``X`` (n, d) and class labels ``y`` (n,); returns ``self``."""
        self._check_svgp_settings()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.shape[0] < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in "
                             f"the data, but the data contain only one class: "
                             f"{self.classes_[0]!r}")
        xp, dtype = self._namespace()
        lik = self._make_likelihood(self.classes_.shape[0], xp, dtype)
        self._fit_svgp(X, codes.astype(np.float64), lik, xp, dtype)
        return self

    def predict_proba(self, X):
        """Class probabilities at ``X`` (m, d) under q, shape (m, n_classes), columns in the
        order of ``classes_``."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, _ = self.model_.predict_y(self._to_backend(X))
        p = B.to_numpy(mean).astype(np.float64)
        if p.ndim == 1:
            p = np.stack([1.0 - p, p], axis=1)
        # Quadrature round-off can leave rows a few ulps from summing to one.
        p = np.clip(p, 0.0, 1.0)
        return p / np.sum(p, axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """``log`` of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """The most probable class at each row of ``X`` (m, d)."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
