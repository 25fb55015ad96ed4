"""``GPRegressor``: exact GP regression (:class:`gpnum.GPR`) as scikit-learn's
``GaussianProcessRegressor``, trained by gpnum's L-BFGS-B driver (:func:`gpnum.optim.lbfgs`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from gpnum import backend as B
from gpnum.kernels import RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR, MultiOutputGPR
from gpnum.optim import lbfgs
from gpnum.sklearn._base import (
    GPnumEstimator,
    check_int,
    check_positive,
    check_return,
    normalisation,
)
from gpnum.sklearn._multioutput import (
    build_model,
    check_targets,
    column_normalisation,
    is_multi_target,
    multi_score,
    per_output_cov,
    target_shape,
)

__all__ = ["GPRegressor"]

_LBFGS_NAMES = ("lbfgs", "fmin_l_bfgs_b")


class _IterationPrinter:
    """``verbose=2``: the log marginal likelihood after each L-BFGS-B iteration."""

    def __init__(self, name):
        self.name, self.count = name, 0

    def __call__(self, objective):
        self.count += 1
        print(f"{self.name}: iteration {self.count}: log marginal likelihood {objective:.6g}",
              flush=True)


def _print_runs(name, result):
    for i, run in enumerate(result.runs):
        kept = "  (kept)" if i == result.best_run else ""
        print(f"{name}: run {i}: log marginal likelihood {run['objective']:.6g}, "
              f"{run['num_iter']} iterations, {run['num_eval']} evaluations: "
              f"{run['stop_reason']}{kept}", flush=True)


class GPRegressor(RegressorMixin, GPnumEstimator):
    """Exact Gaussian-process regression (:class:`gpnum.GPR`) as a scikit-learn regressor.

    The arguments mean what they mean for scikit-learn's ``GaussianProcessRegressor``: the
    prior is ``f ~ GP(0, kernel)`` (after removing the mean and scale of ``y`` when
    ``normalize_y``), ``y = f(X) + eps`` with ``eps ~ N(0, alpha)``, and the kernel's
    hyper-parameters maximise the log marginal likelihood (Rasmussen & Williams 2006, ch. 2
    and 5.4.1).

    ``y`` of shape (n, t) with ``t >= 2`` columns (NaN marks an output not observed at that
    input) fits one joint model of the ``t`` outputs, :class:`gpnum.models.MultiOutputGPR`,
    whose kernel is ``ICM(kernel, t, rank)`` (``multioutput="icm"``: outputs correlated through
    ``B = W W^T + diag(kappa)``, learned) or ``t`` independent copies of ``kernel``
    (``multioutput="independent"``); every output has noise variance ``alpha`` and
    ``normalize_y`` acts per column. ``predict`` then returns (m, t) arrays. ``y`` of shape (n,)
    or (n, 1) is the single-output GP.

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
    solver : {"auto", "cholesky", "cg", "state_space", "grid", "ski"}
        How gpnum.GPR solves with ``K + alpha I`` (:class:`gpnum.GPR`): ``"auto"`` by size and
        structure, ``"cholesky"`` factorises it, ``"cg"`` by conjugate gradients (stochastic
        log-determinant), ``"state_space"`` for one feature (time) and a kernel with a
        state-space form (Matern, Cosine, SHO, Constant, PeriodicSeries, their sums and products), or
        several series sharing it (features ``[time, label]``, kernel
        ``k_t * SameGroup(active_dims=[1])``): exact in O(n) (docs/timeseries.md); ``"grid"`` (inputs on a Cartesian grid) and ``"ski"``
        (d <= 3) the structured solvers (docs/structure.md).
    optimizer : {"lbfgs", "fmin_l_bfgs_b"} or None
        Both run gpnum's L-BFGS-B driver (:func:`gpnum.optim.lbfgs`, as :func:`gpnum.fit`) on
        the log marginal likelihood per data point, positive parameters in log coordinates.
        ``"lbfgs"``: unbounded. ``"fmin_l_bfgs_b"``: scikit-learn's rule, each positive
        parameter within ``hyperparameter_bounds``. None: keep the kernel's hyper-parameters
        as given.
    n_restarts_optimizer : int
        Further runs of the optimiser from positive parameters drawn log-uniformly within
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
    maxiter : int
        L-BFGS-B iterations per run (the name of :func:`gpnum.fit` and SciPy).
    max_iter : int, optional
        Deprecated spelling of ``maxiter`` (a DeprecationWarning; it wins when given).
    backend : str, optional
        gpnum backend for the computation (``"numpy"``, ``"torch"``, ``"cupy"``,
        ``"array_api_strict"``); default ``GPNUM_BACKEND``.
    dtype : {"float64", "float32"}
        Working precision on the backend.
    verbose : int
        0 (default): silent. 1: one line per L-BFGS-B run when the fit ends (log marginal
        likelihood, iterations, evaluations, SciPy's stop reason). 2: also the log marginal
        likelihood after every iteration. Printed to standard output.
    multioutput : {"icm", "independent"}
        With ``t >= 2`` target columns: the intrinsic coregionalisation model of ``kernel``
        (default) or independent outputs, each with its own copy of ``kernel``. Unused for one
        target.
    rank : int
        With ``multioutput="icm"``: columns of ``W`` in ``B = W W^T + diag(kappa)`` (default
        1: one shared factor plus a variance of each output's own).

    Attributes
    ----------
    kernel_ : gpnum kernel
        The fitted kernel (on the training backend); with several targets the fitted
        multi-output kernel (``gpnum.kernels.ICM`` or ``IndependentOutputs``).
    model_ : gpnum.GPR or gpnum.models.MultiOutputGPR
    log_marginal_likelihood_value_ : float
        Log marginal likelihood of the (normalised) training targets at ``kernel_``.
    noise_variance_ : float, or ndarray (t,) with several targets
    n_outputs_ : int
        Number of target columns (1 for ``y`` of shape (n,)).
    n_iter_ : int
        L-BFGS-B iterations over all runs (0 with ``optimizer=None``).
    optimizer_result_ : gpnum.optim.LBFGSResult or None
        Evaluations, SciPy's stop reason and the runs (None with ``optimizer=None``).
    X_train_, y_train_ : ndarray (n, d), (n,) or (n, t)
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names.
    """

    def __init__(self, kernel=None, *, alpha=1e-10, solver="auto", optimizer="lbfgs",
                 n_restarts_optimizer=0, normalize_y=False, random_state=None,
                 learn_noise=False, hyperparameter_bounds=(1e-5, 1e5), maxiter=1000,
                 backend=None, dtype="float64", max_iter=None, verbose=0,
                 multioutput="icm", rank=1):
        self.kernel = kernel
        self.alpha = alpha
        self.solver = solver
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.random_state = random_state
        self.learn_noise = learn_noise
        self.hyperparameter_bounds = hyperparameter_bounds
        self.maxiter = maxiter
        self.max_iter = max_iter
        self.backend = backend
        self.dtype = dtype
        self.verbose = verbose
        self.multioutput = multioutput
        self.rank = rank

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _default_kernel(self, n_features, xp, dtype):
        return RBF(lengthscale=1.0, variance=1.0, xp=xp, dtype=dtype)

    def _gpr_kwargs(self):
        if self.solver not in GPR.SOLVERS:
            raise ValueError(f"solver: expected one of {', '.join(map(repr, GPR.SOLVERS))}, "
                             f"got {self.solver!r}")
        return {} if self.solver == "auto" else {"solver": self.solver}

    def _check_settings(self):
        if np.ndim(self.alpha) != 0:
            raise ValueError("alpha: gpnum.GPR has one noise variance; expected a number > 0, "
                             f"got an array of shape {np.shape(self.alpha)}")
        alpha = check_positive(self.alpha, "alpha")
        if self.optimizer is not None and self.optimizer not in _LBFGS_NAMES:
            raise ValueError(f"optimizer: expected 'lbfgs', 'fmin_l_bfgs_b' or None, got "
                             f"{self.optimizer!r}")
        restarts = check_int(self.n_restarts_optimizer, "n_restarts_optimizer", 0)
        if self.max_iter is not None:
            warnings.warn("GPRegressor(max_iter=) is deprecated: use maxiter=, as gpnum.fit",
                          DeprecationWarning, stacklevel=3)
            max_iter = check_int(self.max_iter, "max_iter", 1)
        else:
            max_iter = check_int(self.maxiter, "maxiter", 1)
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
        """Fit the GP to ``X`` (n, d) and ``y`` (n,), or (n, t) with NaN for missing outputs
        (class notes); returns ``self``."""
        alpha, restarts, max_iter, (low, high) = self._check_settings()
        if is_multi_target(y):
            X = validate_data(self, X, dtype=np.float64)
            y = check_targets(X, y)
            xp, dtype = self._namespace()
            mean, std = column_normalisation(y, self.normalize_y)
            model = build_model(self._initial_kernel(X.shape[1], xp, dtype), X,
                                (y - mean[None, :]) / std[None, :], alpha=alpha,
                                multioutput=self.multioutput, rank=self.rank,
                                solver=self.solver, xp=xp, dtype=dtype)
        else:
            gpr_kwargs = self._gpr_kwargs()
            if target_shape(y)[1:] == (1,):
                y = np.asarray(y)[:, 0]  # one target column: the single-output GP
            X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
            xp, dtype = self._namespace()
            mean, std = normalisation(y, self.normalize_y)
            kernel = self._initial_kernel(X.shape[1], xp, dtype)
            likelihood = Gaussian(variance=alpha, xp=xp, dtype=dtype)
            model = GPR(kernel, likelihood, B.asarray(X, dtype=dtype, xp=xp),
                        B.asarray((y - mean) / std, dtype=dtype, xp=xp), mean=0.0, **gpr_kwargs)
        fixed = ["mean"] if self.learn_noise else ["mean", "likelihood.variance"]
        free = [k for k in model.parameters() if k not in fixed]
        self.n_iter_, self.optimizer_result_ = 0, None
        if self.optimizer is not None and free:
            verbose = check_int(self.verbose, "verbose", 0)
            result = lbfgs(model, fixed=fixed, maxiter=max_iter, n_restarts=restarts,
                           seed=self._seed(), restart_bounds=(low, high),
                           bounds=(low, high) if self.optimizer == "fmin_l_bfgs_b" else None,
                           callback=_IterationPrinter(type(self).__name__)
                           if verbose >= 2 else None)
            if verbose >= 1:
                _print_runs(type(self).__name__, result)
            self.n_iter_, self.optimizer_result_ = result.num_iter, result
            lml = result.objective
        else:
            lml = float(model.log_marginal_likelihood())
        self.model_ = model
        self.kernel_ = model.kernel
        self.log_marginal_likelihood_value_ = lml
        noise = np.asarray(B.to_numpy(model.likelihood.variance), dtype=np.float64)
        self.noise_variance_ = float(noise) if noise.ndim == 0 else noise
        self.n_outputs_ = y.shape[1] if y.ndim == 2 else 1
        self.X_train_, self.y_train_ = X, y
        self._y_train_mean, self._y_train_std = mean, std
        return self

    def predict(self, X, return_std=False, return_cov=False):
        """Posterior of the latent function at ``X`` (m, d), as GaussianProcessRegressor's.

        Returns
        -------
        y_mean : ndarray (m,), or (m, t) with several targets
        y_std : ndarray (m,) or (m, t), only with ``return_std``
            Standard deviation of ``f(X)`` (without the noise ``alpha``, as in scikit-learn).
        y_cov : ndarray (m, m), or (m, m, t) with several targets, only with ``return_cov``
            With several targets, each output's covariance over ``X`` (scikit-learn's layout;
            the covariances between outputs are in ``model_.predict_f(X, full_cov=True)``).
        """
        check_return(return_std, return_cov)
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        multi = isinstance(self.model_, MultiOutputGPR)
        mean, var = self.model_.predict_f(self._to_backend(X), full_cov=bool(return_cov))
        y_mean = B.to_numpy(mean).astype(np.float64) * self._y_train_std + self._y_train_mean
        if not (return_std or return_cov):
            return y_mean
        var = B.to_numpy(var).astype(np.float64)
        if not multi:
            var = var * self._y_train_std ** 2
            return (y_mean, var) if return_cov else (y_mean, np.sqrt(var))
        if return_cov:
            cov = per_output_cov(var, X.shape[0], self.n_outputs_)
            return y_mean, cov * (self._y_train_std ** 2)[None, None, :]
        return y_mean, np.sqrt(var) * self._y_train_std[None, :]

    def sample_y(self, X, n_samples=1, random_state=0):
        """Joint draws of ``f(X)`` from the posterior, shape (m, n_samples) (scikit-learn's
        rule: ``multivariate_normal`` of :meth:`predict`'s mean and covariance); with several
        targets (m, t, n_samples), every output drawn jointly with the others (their posterior
        correlation kept, where scikit-learn draws each target alone)."""
        rng = check_random_state(random_state)
        if not isinstance(getattr(self, "model_", None), MultiOutputGPR):
            mean, cov = self.predict(X, return_cov=True)
            return rng.multivariate_normal(mean, cov, int(n_samples)).T
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, joint = self.model_.predict_f(self._to_backend(X), full_cov=True)
        m, t = X.shape[0], self.n_outputs_
        scale = np.tile(self._y_train_std, m)                       # input-major, (m t,)
        joint = B.to_numpy(joint).astype(np.float64) * scale[:, None] * scale[None, :]
        mean = (B.to_numpy(mean).astype(np.float64) * self._y_train_std
                + self._y_train_mean).reshape(-1)
        draws = rng.multivariate_normal(mean, joint, int(n_samples))  # (n_samples, m t)
        return np.transpose(draws.reshape(int(n_samples), m, t), (1, 2, 0))

    def score(self, X, y, sample_weight=None):
        """R^2 of :meth:`predict` (scikit-learn's ``score``); with several targets the mean
        over the outputs of each one's R^2 on its observed entries (NaN entries of ``y`` are
        skipped; with none missing this is scikit-learn's ``uniform_average``)."""
        if not is_multi_target(y):
            return super().score(X, y, sample_weight=sample_weight)
        return multi_score(y, self.predict(X), sample_weight)
