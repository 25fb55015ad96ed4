"""gpnum.fit with its defaults on the Mauna Loa CO2 series (Rasmussen & Williams 2006, 5.4.3):
the book's kernel from scikit-learn's gallery start and the same kernel written as an expression
with data-informed starts both reach scikit-learn's optimum (docs/co2.md)."""

import numpy as np
import pytest

import gpnum
from gpnum import kernels as K

#: scikit-learn 1.9's GaussianProcessRegressor on the same data, kernel and start (co2_study.py):
#: an independent implementation's optimum of the same log marginal likelihood.
SKLEARN_OPTIMUM = -115.0507603
FIXED = ("mean", "likelihood.variance", "kernel.1.1.period", "kernel.1.1.base.variance")


@pytest.fixture(scope="module")
def co2():
    ds = gpnum.datasets.load("co2", split=0, standardize=False, xp="numpy", dtype="float64")
    X = np.concatenate([ds.X_train, ds.X_test])
    y = np.concatenate([ds.y_train, ds.y_test])
    return X, y - y.mean()


def _fit(kernel, X, y):
    model = gpnum.GPR(kernel, gpnum.likelihoods.Gaussian(1e-10, dtype="float64"), X, y)
    hist = gpnum.fit(model, optimizer="lbfgs", fixed=FIXED, progress=False)
    return float(model.log_marginal_likelihood()), hist


def test_hand_built_kernel_reaches_sklearns_optimum(co2):
    X, y = co2
    kernel = K.Sum(K.RBF(50.0, 50.0**2, dtype="float64"),
                   K.RBF(100.0, 2.0**2, dtype="float64")
                   * K.Periodic(K.RBF(1.0, 1.0, dtype="float64"), 1.0),
                   K.RationalQuadratic(1.0, 1.0, 0.5**2, dtype="float64"),
                   K.RBF(0.1, 0.1**2, dtype="float64"), K.White(0.1**2, dtype="float64"))
    lml, hist = _fit(kernel, X, y)
    assert lml >= SKLEARN_OPTIMUM, lml
    assert hist.stop_reason.startswith("CONVERGENCE")


def test_expression_kernel_with_data_starts_reaches_sklearns_optimum(co2):
    X, y = co2
    kernel = K.from_expression("rbf + rbf*periodic + rq + rbf + white", input_dim=1, X=X, y=y,
                               xp="numpy", dtype="float64")
    lml, _ = _fit(kernel, X, y)
    assert lml >= SKLEARN_OPTIMUM, lml
