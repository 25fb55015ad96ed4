"""gpnum.special: special functions built from array-API primitives, against SciPy (and mpmath
if installed); the likelihoods' Gauss-Hermite rule."""

import math

import numpy as np
import pytest
import scipy.special as sp
from gradcheck import check_grad

from gpnum import backend as B
from gpnum.likelihoods import gauss_hermite
from gpnum.special import (
    digamma,
    erfcx,
    lgamma,
    log_gamma_half_ratio,
    log_gamma_half_ratio_and_grad,
    log_ndtr,
    log_ndtr_and_grad,
    logsumexp,
    multidigamma,
    multigammaln,
    ndtr,
    trigamma,
)


def _is64(xp, dtype):
    return dtype == xp.float64


def test_log_ndtr_matches_scipy_over_minus40_to_10(xp, dtype, to_xp):
    x = np.linspace(-40.0, 10.0, 2001)
    if not _is64(xp, dtype):
        x = x.astype(np.float32).astype(np.float64)  # compare at the representable inputs
    value, grad = log_ndtr_and_grad(to_xp(x))
    value, grad = B.to_numpy(value), B.to_numpy(grad)
    assert value.dtype == (np.float64 if _is64(xp, dtype) else np.float32)
    ref = sp.log_ndtr(x)
    # phi/Phi from SciPy's log_ndtr and the exact log pdf
    ref_grad = np.exp(-0.5 * x * x - 0.5 * math.log(2.0 * math.pi) - ref)
    rtol = 1e-13 if _is64(xp, dtype) else 5e-6
    np.testing.assert_allclose(value, ref, rtol=rtol, atol=0.0)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12 if _is64(xp, dtype) else 5e-6, atol=0.0)
    np.testing.assert_allclose(B.to_numpy(log_ndtr(to_xp(x))), value, rtol=0.0, atol=0.0)


def test_log_ndtr_far_tails_finite_and_asymptotic(xp, dtype, to_xp):
    x = np.array([-1e6, -1e3, -200.0, 38.0, 1e3]) if _is64(xp, dtype) else \
        np.array([-1e4, -1e3, -200.0, 15.0, 1e3])
    value, grad = (B.to_numpy(a) for a in log_ndtr_and_grad(to_xp(x)))
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    # lower tail: log Phi(x) = -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + ...), grad ~ -x
    lo = x[:3]
    asym = -0.5 * lo * lo - np.log(-lo * math.sqrt(2 * math.pi)) + np.log1p(-1.0 / lo**2)
    np.testing.assert_allclose(value[:3], asym, rtol=1e-9 if _is64(xp, dtype) else 1e-6)
    np.testing.assert_allclose(grad[:3], -lo * (1 + 1 / lo**2), rtol=1e-6)
    assert np.all(value[3:] <= 0.0) and np.all(value[3:] > -1e-30)


def test_ndtr_and_erfcx_match_scipy(xp, dtype, to_xp):
    x = np.linspace(-30.0, 8.0, 401)
    # relative condition number of exp(-x^2/2) is x^2/2: up to 450 ulps at x = -30
    rtol = 3e-13 if _is64(xp, dtype) else 2e-6
    if not _is64(xp, dtype):
        # Phi(x) underflows float32 below x ~ -13
        x = np.linspace(-12.0, 8.0, 401).astype(np.float32).astype(np.float64)
        # lower tail of Phi in float32: conditioning x^2/2 * eps limits the relative accuracy
        rtol = 1e-4
    np.testing.assert_allclose(B.to_numpy(ndtr(to_xp(x))), sp.ndtr(x), rtol=rtol, atol=0.0)
    u = np.concatenate([np.linspace(-5.0, 5.0, 201), np.logspace(-8, 8, 101)])
    if not _is64(xp, dtype):
        u = u.astype(np.float32).astype(np.float64)
    rtol = 2e-15 if _is64(xp, dtype) else 3e-6
    np.testing.assert_allclose(B.to_numpy(erfcx(to_xp(u))), sp.erfcx(u), rtol=rtol * 20, atol=0)
    pos = u[u >= 0]
    np.testing.assert_allclose(B.to_numpy(erfcx(to_xp(pos))), sp.erfcx(pos), rtol=rtol, atol=0)


def test_log_gamma_half_ratio_against_scipy(xp, dtype, to_xp):
    a = np.logspace(-6, 12, 181)
    if not _is64(xp, dtype):
        a = a.astype(np.float32).astype(np.float64)
    value, grad = (B.to_numpy(v) for v in log_gamma_half_ratio_and_grad(to_xp(a)))
    # log(poch(a, 1/2)) = log Gamma(a + 1/2) - log Gamma(a); SciPy's own error is ~1e-12
    ref = np.log(sp.poch(a, 0.5))
    ref_grad = sp.digamma(a + 0.5) - sp.digamma(a)
    big = a > 1e4  # the digamma difference cancels there; use its asymptotic series
    ref_grad[big] = (1 / (2 * a[big]) + 1 / (8 * a[big] ** 2) - 1 / (64 * a[big] ** 4))
    if _is64(xp, dtype):
        np.testing.assert_allclose(value, ref, rtol=3e-12, atol=1e-14)
        # the reference digamma difference itself cancels to ~1e-11 near a = 1e4
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10)
    else:
        np.testing.assert_allclose(value, ref, rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(grad, ref_grad, rtol=2e-6)
    np.testing.assert_array_equal(B.to_numpy(log_gamma_half_ratio(to_xp(a))), value)


def test_log_gamma_half_ratio_to_full_float64_precision():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    a = np.logspace(-6, 12, 73)
    ref = np.array([float(mpmath.loggamma(mpmath.mpf(v) + 0.5) - mpmath.loggamma(mpmath.mpf(v)))
                    for v in a])
    ref_grad = np.array([float(mpmath.digamma(mpmath.mpf(v) + 0.5) - mpmath.digamma(mpmath.mpf(v)))
                         for v in a])
    value, grad = log_gamma_half_ratio_and_grad(a)
    np.testing.assert_allclose(value, ref, rtol=3e-14, atol=1e-14)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-14)


def test_special_function_gradients_by_finite_differences():
    x0 = np.array([-37.0, -6.5, -0.3, 0.0, 0.7, 4.0])
    _, g = log_ndtr_and_grad(x0)
    check_grad(lambda x: np.sum(log_ndtr(x)), x0, g, name="log_ndtr")
    a0 = np.array([1e-3, 0.4, 2.5, 31.0, 4e3])
    _, g = log_gamma_half_ratio_and_grad(a0)
    check_grad(lambda a: np.sum(log_gamma_half_ratio(a)), a0, g, eps=1e-7,
               name="log_gamma_half_ratio")


def test_logsumexp_matches_scipy(xp, dtype, to_xp):
    a = np.array([[1000.0, 999.0, -np.inf], [-5.0, -7.0, -3.0], [-np.inf, -np.inf, 2.0]])
    out = B.to_numpy(logsumexp(to_xp(a), axis=1))
    np.testing.assert_allclose(out, sp.logsumexp(a, axis=1), rtol=1e-6 if dtype == xp.float32
                               else 1e-14)


@pytest.mark.parametrize("q", [1, 5, 20])
def test_gauss_hermite_integrates_gaussian_moments_exactly(xp, dtype, device, q):
    t, w, logw = gauss_hermite(q, xp=xp, dtype=dtype, device=device)
    assert t.shape == (q,) and w.dtype == dtype and B.device_of(t) == device
    t, w, logw = B.to_numpy(t), B.to_numpy(w), B.to_numpy(logw)
    np.testing.assert_allclose(np.exp(logw), w, rtol=1e-6)
    mu, var = 0.7, 1.9
    x = mu + np.sqrt(2 * var) * t
    rtol = 1e-12 if dtype == xp.float64 else 1e-5
    # raw moments of N(mu, var) up to degree 2q - 1 are reproduced exactly
    for k in range(2 * q):
        # E[(mu + z)^k] with E[z^j] = var^(j/2) (j - 1)!! for even j, 0 for odd j
        exact = sum(math.comb(k, j) * mu ** (k - j) * var ** (j // 2)
                    * math.prod(range(1, j, 2)) for j in range(0, k + 1, 2))
        np.testing.assert_allclose(np.sum(w * x**k), exact, rtol=rtol, atol=rtol)


# ------------------------------------------- lgamma, digamma, trigamma and the multivariate gamma
def test_special_functions_against_scipy(xp, dtype, to_xp, tol):
    x = np.concatenate([np.logspace(-3, 3, 40), [0.5, 1.0, 2.5, 7.0, 1e5]])
    xx = to_xp(x)
    np.testing.assert_allclose(B.to_numpy(digamma(xx)), sp.digamma(x), rtol=20 * tol,
                               atol=20 * tol)
    np.testing.assert_allclose(B.to_numpy(lgamma(xx)), sp.gammaln(x), rtol=20 * tol,
                               atol=20 * tol)
    a = to_xp(np.array([2.0, 3.7, 50.0]))
    np.testing.assert_allclose(B.to_numpy(multigammaln(a, 3)),
                               sp.multigammaln([2.0, 3.7, 50.0], 3), rtol=20 * tol)


def test_multidigamma_is_the_derivative_of_multigammaln(xp, dtype, to_xp, tol):
    a = np.array([2.0, 3.7, 50.0])
    h = 1e-5  # central differences of SciPy's multigammaln: truncation error ~ 1e-10
    fd = np.array([(sp.multigammaln(v + h, 3) - sp.multigammaln(v - h, 3)) / (2 * h) for v in a])
    np.testing.assert_allclose(B.to_numpy(multidigamma(to_xp(a), 3)), fd,
                               rtol=max(20 * tol, 1e-8))


def test_gamma_functions_match_scipy_in_float64(xp, device):
    x = np.array([0.5, 1.0, 1.7, 3.3, 10.0, 101.5, 1e4, 1e7])
    a = B.asarray(x, dtype=xp.float64, xp=xp, device=device)
    np.testing.assert_allclose(B.to_numpy(lgamma(a)), sp.gammaln(x), rtol=1e-14, atol=1e-13)
    np.testing.assert_allclose(B.to_numpy(digamma(a)), sp.digamma(x), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(B.to_numpy(trigamma(a)), sp.polygamma(1, x), rtol=1e-13, atol=0)


def test_old_public_paths_name_the_same_functions():
    import gpnum.likelihoods
    import gpnum.models._student_t_math as student_t_math
    import gpnum.special

    for name in ("erfcx", "log_gamma_half_ratio", "log_gamma_half_ratio_and_grad", "log_ndtr",
                 "log_ndtr_and_grad", "logsumexp", "ndtr"):
        assert getattr(gpnum.likelihoods, name) is getattr(gpnum.special, name), name
        assert name in gpnum.likelihoods.__all__
    for name in ("lgamma", "digamma", "trigamma", "trigamma_difference"):
        assert getattr(student_t_math, name) is getattr(gpnum.special, name), name
