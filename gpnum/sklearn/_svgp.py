"""``SVGPRegressor`` and ``SVGPClassifier``: sparse variational GPs (:class:`gpnum.SVGP`)
trained on minibatches by :func:`gpnum.fit`."""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from gpnum import backend as B
from gpnum.inducing import kmeans
from gpnum.likelihoods import LIKELIHOOD_TARGETS, Bernoulli, Gaussian, canonical_name
from gpnum.models import SVGP, default_kernel, default_likelihood, inducing_jitter
from gpnum.optim import DEFAULT_RECIPE as _RECIPE
from gpnum.optim import default_epochs
from gpnum.optim import fit as gpnum_fit
from gpnum.sklearn._base import (
    GPnumEstimator,
    check_int,
    check_positive,
    check_return,
    normalisation,
)

__all__ = ["SVGPClassifier", "SVGPRegressor", "auto_epochs", "auto_num_inducing"]

#: Inducing points at most under ``num_inducing="auto"``.
MAX_AUTO_INDUCING = 500
#: From this many training rows on, ``epochs="auto"`` is gpnum.fit's default recipe.
RECIPE_ROWS = 3000
#: Minibatch steps at least under ``epochs="auto"``.
MIN_AUTO_STEPS = 100


def auto_num_inducing(num_data, num_distinct=None):
    """``num_inducing="auto"``: ``m = min(500, n_distinct, ceil(4 sqrt(n)))``.

    For smooth kernels few inducing points suffice (Burt, Rasmussen & van der Wilk 2019,
    sec. 4: ``m`` growing like a power of ``log n`` for the squared-exponential kernel and
    Gaussian inputs), while each step costs O(b m^2 + m^3). ``4 sqrt(n)`` is a practical rule,
    measured on bundled data sets (docs/sklearn.md): cheap on small data, the cap of 500 from
    n = 15,625 on.

    >>> auto_num_inducing(426), auto_num_inducing(3000), auto_num_inducing(20000)
    (83, 220, 500)
    """
    n = int(num_data)
    distinct = n if num_distinct is None else int(num_distinct)
    return max(1, min(MAX_AUTO_INDUCING, distinct, math.ceil(4.0 * math.sqrt(n))))


def auto_epochs(num_data, batch_size):
    """``epochs="auto"``: for ``n >= 3000`` gpnum.fit's default recipe
    (:func:`gpnum.optim.default_epochs`: 20 epochs or 1,500 steps, whichever is more); below,
    as many epochs as ``max(100, ceil(n / 2))`` minibatch steps take.

    >>> auto_epochs(426, 256), auto_epochs(60, 256), auto_epochs(12449, 256)
    (107, 100, 31)
    """
    n, b = int(num_data), int(batch_size)
    if n >= RECIPE_ROWS:
        return default_epochs(n, b)
    steps = max(MIN_AUTO_STEPS, -(-n // 2))
    return -(-steps // -(-n // b))


class _SVGPEstimator(GPnumEstimator):
    """What SVGPRegressor and SVGPClassifier share: inducing points, the model, the fit."""

    def _default_kernel(self, n_features, xp, dtype):
        # gpnum's recipe (gpnum.models.default_kernel): ARD Matern-5/2, unit values.
        return default_kernel("matern52", n_features, xp=xp, dtype=dtype)

    def _separate_inducing(self):
        return False  # SVGPClassifier's option

    def _check_svgp_settings(self):
        if not (isinstance(self.num_inducing, str) and self.num_inducing == "auto"):
            check_int(self.num_inducing, "num_inducing", 1)
        if self.epochs is not None and not (isinstance(self.epochs, str)
                                            and self.epochs == "auto"):
            check_int(self.epochs, "epochs", 1)
        check_int(self.batch_size, "batch_size", 1)
        if self.whitening not in ("cholesky", "ciq"):
            raise ValueError(f"whitening: expected 'cholesky' or 'ciq', got {self.whitening!r}")
        if self.optimizer not in ("ngd", "adam"):
            raise ValueError(f"optimizer: expected 'ngd' or 'adam', got {self.optimizer!r}")
        check_positive(self.lr, "lr")
        check_positive(self.gamma, "gamma")

    def _fit_svgp(self, X, y_model, likelihood, xp, dtype):
        """Build the SVGP on k-means inducing points and train it with :func:`gpnum.fit`."""
        seed = self._seed()
        Xb = B.asarray(X, dtype=dtype, xp=xp)
        n, distinct = X.shape[0], int(np.unique(X, axis=0).shape[0])
        if isinstance(self.num_inducing, str):  # "auto"
            m = auto_num_inducing(n, distinct)
        else:
            m = min(int(self.num_inducing), distinct)
        if isinstance(self.epochs, str):  # "auto"
            epochs = auto_epochs(n, self.batch_size)
        else:
            epochs = None if self.epochs is None else int(self.epochs)
        Z = kmeans(Xb, m, seed=seed)
        if self._separate_inducing():
            # One set per latent function, all starting at the same k-means points.
            Z = xp.stack([Z] * int(likelihood.num_latent))
        jitter = inducing_jitter(xp, dtype)
        model = SVGP(self._initial_kernel(X.shape[1], xp, dtype), likelihood, Z,
                     num_data=X.shape[0], whitening=self.whitening, jitter=jitter)
        history = gpnum_fit(model, Xb, B.asarray(y_model, dtype=dtype, xp=xp),
                            epochs=epochs,
                            batch_size=int(self.batch_size),
                            optimizer=self.optimizer, lr=float(self.lr), gamma=float(self.gamma),
                            seed=seed, progress=bool(self.verbose))
        if history.stopped is not None:
            warnings.warn(f"{type(self).__name__}: training stopped early: {history.stopped}",
                          RuntimeWarning, stacklevel=3)
        model.training_state = None  # optimiser state is not part of the fitted estimator
        self.model_ = model
        self.kernel_ = model.kernel
        self.elbo_ = float(history.epoch_elbo[-1])
        self.history_ = history
        self.num_inducing_ = m
        self.epochs_ = len(history.epoch_elbo)
        return model

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("history_", None)  # per-step records, not needed to predict
        return state


def _likelihood_by_name(name, targets, xp, dtype, num_classes=None):
    """A gpnum likelihood by a name of the one name table (``gpnum.likelihoods.
    LIKELIHOOD_NAMES``, class names too) whose targets are among ``targets``, else None."""
    if not isinstance(name, str):
        return None
    try:
        key = canonical_name(name)
    except ValueError:
        return None
    if LIKELIHOOD_TARGETS[key] not in targets:
        return None
    try:
        return default_likelihood(key, num_classes=num_classes, xp=xp, dtype=dtype)
    except ValueError:
        return None


# --------------------------------------------------------------------------- SVGPRegressor
class SVGPRegressor(RegressorMixin, _SVGPEstimator):
    """Sparse variational GP regression (:class:`gpnum.SVGP`, Hensman et al. 2013/2015),
    trained on minibatches by :func:`gpnum.fit` (natural gradients for q, Adam for the rest).

    For data of up to a few thousand rows prefer :class:`GPRegressor`: the exact GP is
    faster there and has no approximation (docs/sklearn.md measures both).

    Parameters
    ----------
    kernel : gpnum kernel, optional
        Default: ARD Matern-5/2 with unit lengthscales and variance (gpnum's recipe).
    num_inducing : int or "auto"
        Number of inducing points ``m``, placed by k-means (at most the number of distinct
        training inputs) and then learned. ``"auto"`` (default): ``min(500, n_distinct,
        ceil(4 sqrt(n)))`` for ``n`` training rows (:func:`auto_num_inducing`).
    epochs : int, "auto" or None
        Passes over the data. ``"auto"`` (default): for ``n >= 3000`` gpnum's default recipe
        (as :func:`gpnum.fit`: 20, or as many as 1,500 minibatch steps take, whichever is
        more); below, as many as ``max(100, ceil(n / 2))`` minibatch steps take
        (:func:`auto_epochs`). None: gpnum's default recipe at every size.
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
    verbose : int
        0 (default): silent; 1 or more: :func:`gpnum.fit`'s progress (a tqdm bar in steps
        with the minibatch ELBO and an ETA, or one line per epoch without tqdm).

    Attributes
    ----------
    kernel_, model_ : the fitted kernel and gpnum.SVGP
    elbo_ : float
        Mean minibatch ELBO of the last epoch (scaled to the whole training set).
    history_ : gpnum.optim.History
    num_inducing_ : int
        Inducing points used (per latent function).
    epochs_ : int
        Passes over the data made.
    n_features_in_ : int
    """

    def __init__(self, kernel=None, *, num_inducing="auto", epochs="auto",
                 batch_size=_RECIPE["batch_size"], likelihood="gaussian", whitening="cholesky",
                 optimizer="ngd", lr=_RECIPE["lr"], gamma=_RECIPE["gamma"], normalize_y=True,
                 random_state=None, backend=None, dtype="float64", verbose=0):
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
        self.verbose = verbose

    def _make_likelihood(self, xp, dtype):
        lik = _likelihood_by_name(self.likelihood, ("real", "count", "positive", "unit"), xp,
                                  dtype)
        if lik is None:
            raise ValueError(f"likelihood: expected 'gaussian', 'studentt' or the name of a "
                             f"gpnum likelihood for real-valued targets, got {self.likelihood!r}")
        return lik

    def fit(self, X, y):
        """Fit to ``X`` (n, d) and ``y`` (n,); returns ``self``."""
        self._check_svgp_settings()
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        xp, dtype = self._namespace()
        mean, std = normalisation(y, self.normalize_y)
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
        check_return(return_std, return_cov)
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

    The defaults (``num_inducing="auto"``, ``epochs="auto"``) scale with the data: a few
    hundred rows fit in seconds (docs/sklearn.md measures them against scikit-learn's
    ``GaussianProcessClassifier``).

    Parameters
    ----------
    kernel : gpnum kernel, optional
        Default: ARD Matern-5/2 with unit lengthscales and variance. Many-class models share
        it between their latent functions (one per class).
    num_inducing : int or "auto"
    epochs : int, "auto" or None
        As for :class:`SVGPRegressor` (the same ``"auto"`` rules, defaults).
    batch_size : int
    likelihood : str
        ``"auto"`` (default): ``"bernoulli"`` (probit) for two classes, otherwise ``"softmax"``
        when gpnum.likelihoods has it, else ``"robustmax"``. Also ``"probit"`` / ``"logit"``
        (Bernoulli with that link, two classes), ``"robustmax"``, ``"softmax"``, or the name of
        another gpnum many-class likelihood taking ``num_classes``.
    whitening, optimizer, lr, gamma, random_state, backend, dtype, verbose
        As for :class:`SVGPRegressor`.
    separate_inducing : bool
        Many-class likelihoods: ``num_inducing`` inducing points per latent function (class),
        learned separately, instead of one shared set (all start at the same k-means points;
        :class:`gpnum.SVGP` with ``inducing_points`` of shape (n_classes, m, d)).

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    kernel_, model_, elbo_, history_, num_inducing_, epochs_, n_features_in_
        As for :class:`SVGPRegressor`.
    """

    def __init__(self, kernel=None, *, num_inducing="auto", epochs="auto",
                 batch_size=_RECIPE["batch_size"], likelihood="auto", whitening="cholesky",
                 optimizer="ngd", lr=_RECIPE["lr"], gamma=_RECIPE["gamma"],
                 random_state=None, backend=None, dtype="float64", separate_inducing=False,
                 verbose=0):
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
        self.verbose = verbose

    def _separate_inducing(self):
        return bool(self.separate_inducing)

    def _make_likelihood(self, n_classes, xp, dtype):
        name = self.likelihood
        if name == "auto":
            name = "bernoulli" if n_classes == 2 else "softmax"
        if name in ("bernoulli", "probit", "logit"):
            if n_classes != 2:
                raise ValueError(f"likelihood={name!r} is binary; y has {n_classes} classes "
                                 "(use 'auto', 'robustmax' or 'softmax')")
            return Bernoulli(link="logit" if name == "logit" else "probit", xp=xp, dtype=dtype)
        lik = _likelihood_by_name(name, ("classes",), xp, dtype, num_classes=n_classes)
        if lik is None or lik.num_latent != n_classes:
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

