"""Exact-GP fits at scikit-learn's sizes (issue 48): the Mauna Loa CO2 fit (Rasmussen &
Williams 2006, sec. 5.4.3) by gpnum.fit with its defaults, the kernel built by hand or written
as an expression with data-informed starts; and GPRegressor with an ARD Matern-5/2 kernel by n.
The side-by-side runs against scikit-learn are asv_benchmarks/scripts/co2_study.py and
asv_benchmarks/scripts/sklearn_ard_fit.py (scikit-learn is not a dependency of gpnum)."""

import warnings

import numpy as np

import gpnum
from gpnum import kernels as K

# The period (one year) and the periodic factor's variance (the product's first factor carries
# it) are held, as in the book; the mean is 0 (the data are centred) and the noise is 1e-10
# (the white kernel models it), as in asv_benchmarks/scripts/co2_study.py.
CO2_FIXED = ("mean", "likelihood.variance", "kernel.1.1.period", "kernel.1.1.base.variance")
CO2_EXPRESSION = "rbf + rbf*periodic + rq + rbf + white"


def _co2():
    ds = gpnum.datasets.load("co2", split=0, standardize=False, xp="numpy", dtype="float64")
    X = np.concatenate([ds.X_train, ds.X_test])
    y = np.concatenate([ds.y_train, ds.y_test])
    return X, y - y.mean()


def _co2_hand_kernel():
    # scikit-learn's gallery start of the book's kernel (5.19): amplitudes as variances, years
    return K.Sum(K.RBF(50.0, 50.0 ** 2, dtype="float64"),
                 K.RBF(100.0, 2.0 ** 2, dtype="float64")
                 * K.Periodic(K.RBF(1.0, 1.0, dtype="float64"), 1.0),
                 K.RationalQuadratic(1.0, 1.0, 0.5 ** 2, dtype="float64"),
                 K.RBF(0.1, 0.1 ** 2, dtype="float64"), K.White(0.1 ** 2, dtype="float64"))


class CO2Fit:
    """gpnum.fit(GPR) on the first ``months`` monthly CO2 means (521: the whole series) with
    its defaults (L-BFGS-B in log coordinates, no restart), period fixed at one year."""

    params = (["hand", "expression"], [60, 521])
    param_names = ("kernel", "months")
    timeout = 300

    def setup(self, kernel, months):
        X, y = _co2()
        self.X, self.y = X[:months], y[:months] - y[:months].mean()

    def _model(self, kernel):
        if kernel == "hand":
            kern = _co2_hand_kernel()
        else:
            kern = K.from_expression(CO2_EXPRESSION, input_dim=1, X=self.X, y=self.y,
                                     xp="numpy", dtype="float64")
        return gpnum.GPR(kern, gpnum.likelihoods.Gaussian(1e-10, dtype="float64"), self.X,
                         self.y)

    def time_fit(self, kernel, months):
        model = self._model(kernel)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a stop short of tolerance is reported, not timed
            gpnum.fit(model, optimizer="lbfgs", fixed=CO2_FIXED, progress=False)


def _ard_data(n, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    scales = np.array([0.7, 1.5, 3.0, 10.0])[:d]  # one feature nearly irrelevant
    y = np.sin(X @ (1.0 / scales)) + 0.5 * np.cos(2.0 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y


class ARDFit:
    """GPRegressor(ARD Matern-5/2, learned noise) fit on n synthetic points in 4 dimensions,
    scikit-learn's meanings (normalize_y, no restart); the estimators' package needs
    scikit-learn installed (skipped otherwise)."""

    params = ([500, 1000, 3000],)
    param_names = ("n",)
    timeout = 600

    def setup(self, n):
        try:
            from gpnum.sklearn import GPRegressor
        except ImportError:
            raise NotImplementedError from None  # asv: skipped without scikit-learn
        self.GPRegressor = GPRegressor
        self.X, self.y = _ard_data(n)

    def time_fit(self, n):
        kern = K.Matern52(lengthscale=np.ones(self.X.shape[1]), variance=1.0, dtype="float64")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.GPRegressor(kern, alpha=1e-2, learn_noise=True, normalize_y=True,
                             random_state=0).fit(self.X, self.y)
