"""gpnum's kernels and exact-GP log marginal likelihood against scikit-learn's."""

import numpy as np
import pytest

import gpnum
from gpnum import kernels as K

skk = pytest.importorskip("sklearn.gaussian_process.kernels")
from sklearn.gaussian_process import GaussianProcessRegressor  # noqa: E402


def _data(d=1, n=30, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * 2.0, rng.normal(size=(n - 7, d)) * 2.0


PAIRS = {
    "rbf_ard": (lambda: K.RBF([0.7, 1.9], 1.6),
                lambda: skk.ConstantKernel(1.6) * skk.RBF([0.7, 1.9]), 2),
    "rq": (lambda: K.RationalQuadratic(1.3, 0.45, 0.8),
           lambda: skk.ConstantKernel(0.8) * skk.RationalQuadratic(1.3, 0.45), 2),
    "exp_sine_squared": (lambda: K.Periodic(K.RBF(0.9, 1.4), 2.3),
                         lambda: skk.ConstantKernel(1.4) * skk.ExpSineSquared(0.9, 2.3), 1),
    "dot_product": (lambda: K.Constant(0.7) + K.Linear(1.0),
                    lambda: skk.DotProduct(sigma_0=np.sqrt(0.7)), 3),
    "constant": (lambda: K.Constant(2.2), lambda: skk.ConstantKernel(2.2), 2),
    "white": (lambda: K.White(0.35), lambda: skk.WhiteKernel(0.35), 2),
}


@pytest.mark.parametrize("name", PAIRS)
def test_gram_matches_scikit_learn(name):
    ours, theirs, d = PAIRS[name]
    X, Z = _data(d)
    k, s = ours(), theirs()
    np.testing.assert_allclose(k(X), s(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k(X, Z), s(X, Z), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k.diag(X), s.diag(X), rtol=1e-12, atol=1e-12)


def book_kernel_gpnum(theta):
    """Rasmussen & Williams (5.19) in gpnum: long-term RBF + RBF x Periodic + RQ + (RBF + White)."""
    t = theta
    return (K.RBF(t[1], t[0] ** 2)
            + K.RBF(t[3], t[2] ** 2) * K.Periodic(K.RBF(t[5]), 1.0)
            + K.RationalQuadratic(t[7], t[8], t[6] ** 2)
            + K.RBF(t[10], t[9] ** 2) + K.White(t[11] ** 2))


def book_kernel_sklearn(theta):
    t = theta
    return (skk.ConstantKernel(t[0] ** 2) * skk.RBF(t[1])
            + skk.ConstantKernel(t[2] ** 2) * skk.RBF(t[3])
            * skk.ExpSineSquared(t[5], 1.0)
            + skk.ConstantKernel(t[6] ** 2) * skk.RationalQuadratic(t[7], t[8])
            + skk.ConstantKernel(t[9] ** 2) * skk.RBF(t[10]) + skk.WhiteKernel(t[11] ** 2))


def test_gpr_log_marginal_likelihood_equals_scikit_learn():
    # The book's CO2 hyper-parameters (R&W 2006, section 5.4.3) on a synthetic seasonal series
    theta = [66.0, 67.0, 2.4, 90.0, 1.0, 1.3, 0.66, 1.2, 0.78, 0.18, 1.6 / 12, 0.19]
    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(0.0, 20.0, 80))
    y = 0.05 * x ** 2 + np.sin(2 * np.pi * x) + 0.2 * rng.normal(size=80)
    X = x[:, None]
    noise = 1e-3  # the likelihood's variance = scikit-learn's alpha
    model = gpnum.GPR(book_kernel_gpnum(theta), gpnum.likelihoods.Gaussian(noise), X, y)
    ours = float(model.log_marginal_likelihood())
    skl = GaussianProcessRegressor(book_kernel_sklearn(theta), alpha=noise, optimizer=None,
                                   normalize_y=False).fit(X, y)
    theirs = skl.log_marginal_likelihood_value_
    assert abs(ours - theirs) <= 1e-9 * abs(theirs), (ours, theirs)
