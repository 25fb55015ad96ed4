"""State-space forms of the 1-D kernels (gpnum.kernels.state_space_form) and the SHO kernel.

References: the kernels' own gram matrices (the covariance implied by a form must equal them),
SciPy's matrix exponential of the SHO's SDE, celerite's closed form of the SHO covariance
(Foreman-Mackey et al. 2017, eq. 23) written out here, and central finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
from gradcheck import check_grad

import gpnum.kernels as K
from gpnum.backend import to_numpy

LAGS = np.array([0.0, 1e-9, 1e-4, 0.03, 0.4, 1.0, 2.7, 9.0, 31.0])


def _kernels():
    return {
        "matern12": K.Matern12(lengthscale=0.7, variance=1.3),
        "exponential": K.Exponential(lengthscale=[1.9], variance=0.6),
        "matern32": K.Matern32(lengthscale=0.8, variance=1.4),
        "matern52": K.Matern52(lengthscale=1.1, variance=0.9),
        "cosine": K.Cosine(lengthscale=2.3, variance=0.7),
        "sho_under": K.SHO(variance=1.2, period=1.7, quality=3.0),
        "sho_over": K.SHO(variance=0.8, period=2.5, quality=0.2),
        "sho_critical": K.SHO(variance=0.8, period=2.5, quality=0.5),
        "sho_near_critical": K.SHO(variance=0.8, period=2.5, quality=0.5 + 1e-7),
        "constant": K.Constant(variance=0.8),
        "sum": K.Matern32(lengthscale=0.9, variance=1.1) + K.SHO(1.3, 2.0, 4.0)
        + K.Constant(0.3),
        "quasi_periodic": K.Matern52(lengthscale=3.0, variance=1.2) * K.Cosine(1.3, 0.9),
        "product3": K.Matern12(1.7, 0.8) * K.Matern32(2.2, 1.0) * K.SHO(0.9, 1.9, 0.8),
        "nested": (K.Matern32(0.5, 1.0) + K.Cosine(1.1, 0.4)) * K.Matern12(4.0, 1.5)
        + K.Matern52(0.6, 0.2),
        "periodic_series": K.PeriodicSeries(lengthscale=0.9, variance=1.1, period=2.2, order=5),
        "periodic_series_sum": K.Matern32(2.0, 0.5)
        * K.PeriodicSeries(lengthscale=1.3, variance=1.0, period=1.1, order=3)
        + K.Matern12(0.7, 0.3),
    }


KERNEL_IDS = list(_kernels())


def _gram_at_lags(kernel, lags):
    return np.asarray(kernel(lags[:, None], np.zeros((1, 1))))[:, 0]


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_form_covariance_equals_gram(name):
    kernel = _kernels()[name]
    form = K.state_space_form(kernel)
    A, _ = form.transition(LAGS)
    # H P_inf A(dt)^T H^T = k(dt)
    implied = np.einsum("j,jk,nlk,l->n", form.H, form.P_inf, A, form.H)
    np.testing.assert_allclose(implied, _gram_at_lags(kernel, LAGS), rtol=0, atol=1e-12)
    np.testing.assert_allclose(A[0], np.eye(form.state_dim), atol=0)  # A(0) = I exactly
    Q, _ = form.process_noise(A)
    np.testing.assert_array_equal(Q[0], 0.0)  # no noise over a step of zero
    eig = np.linalg.eigvalsh(Q)
    assert eig.min() > -1e-12 * max(1.0, eig.max())  # Q is a covariance
    np.testing.assert_allclose(form.P_inf, form.P_inf.T, atol=0)


def _sho_reference_expm(variance, period, quality, lags):
    """H exp(F t) P_inf H^T for the SDE f'' + (w0/Q) f' + w0^2 f = w, by SciPy's expm."""
    w0 = 2.0 * math.pi / period
    F = np.array([[0.0, 1.0], [-w0 ** 2, -w0 / quality]])
    P = np.diag([variance, variance * w0 ** 2])
    # P must be stationary: F P + P F^T + L qc L^T = 0 with L = (0, 1)^T
    lyap = F @ P + P @ F.T
    assert abs(lyap[0, 0]) + abs(lyap[0, 1]) + abs(lyap[1, 0]) < 1e-10 * variance * w0 ** 2
    return np.array([(scipy.linalg.expm(F * abs(t)) @ P)[0, 0] for t in lags])


def _sho_reference_celerite(variance, period, quality, lags):
    """celerite's SHO covariance (Foreman-Mackey et al. 2017, eq. 23), S0 w0 Q = variance."""
    w0 = 2.0 * math.pi / period
    t = np.abs(lags)
    decay = np.exp(-w0 * t / (2.0 * quality))
    if quality > 0.5:
        eta = math.sqrt(1.0 - 1.0 / (4.0 * quality ** 2))
        return variance * decay * (np.cos(eta * w0 * t)
                                   + np.sin(eta * w0 * t) / (2.0 * eta * quality))
    if quality < 0.5:
        eta = math.sqrt(1.0 / (4.0 * quality ** 2) - 1.0)
        return variance * decay * (np.cosh(eta * w0 * t)
                                   + np.sinh(eta * w0 * t) / (2.0 * eta * quality))
    return variance * decay * (1.0 + w0 * t)


@pytest.mark.parametrize("quality", [0.05, 0.3, 0.5, 0.5 + 1e-9, 0.7, 3.0, 50.0])
def test_sho_gram_matches_celerite_and_the_sde(quality):
    kernel = K.SHO(variance=1.3, period=2.1, quality=quality)
    lags = np.concatenate([LAGS, -LAGS[1:], [200.0]])
    got = _gram_at_lags(kernel, lags)
    assert np.all(np.isfinite(got))
    with np.errstate(over="ignore", invalid="ignore"):  # the textbook form overflows far out
        ref = _sho_reference_celerite(1.3, 2.1, quality, lags)
    ok = np.isfinite(ref)
    assert ok.sum() >= len(lags) - 3
    np.testing.assert_allclose(got[ok], ref[ok], rtol=1e-9, atol=1e-13)
    near = np.abs(lags) < 10.0  # expm's squaring overflows far out when overdamped
    np.testing.assert_allclose(got[near], _sho_reference_expm(1.3, 2.1, quality, lags[near]),
                               rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("quality", [0.2, 0.5, 0.5 + 1e-8, 2.5])
def test_sho_gram_vjp_finite_differences(quality):
    rng = np.random.default_rng(3)
    X1 = rng.uniform(0.0, 5.0, (7, 1))
    X2 = rng.uniform(0.0, 5.0, (5, 1))
    G = rng.standard_normal((7, 5))
    names = ("variance", "period", "quality")
    base = {"variance": 1.3, "period": 2.1, "quality": quality}
    kernel = K.SHO(**base)
    out = kernel.gram_vjp(G, X1, X2)
    for name in names:
        def f(v, name=name):
            return np.sum(G * K.SHO(**{**base, name: float(v)})(X1, X2))

        check_grad(f, np.array(base[name]), out["params"][name], name=name, eps=1e-7)
    check_grad(lambda x: np.sum(G * kernel(x, X2)), X1, out["X1"], name="X1")
    check_grad(lambda x: np.sum(G * kernel(X1, x)), X2, out["X2"], name="X2")
    Gs = rng.standard_normal((7, 7))
    same = kernel.gram_vjp(Gs, X1)
    check_grad(lambda x: np.sum(Gs * kernel(x)), X1, same["X1"], name="X1 (one set)")


def _set(kernel, name, value):
    p = kernel.parameters()[name]
    kernel.set_parameters({name: np.reshape(np.asarray(value, dtype=np.float64), p.shape)})


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_form_derivatives_finite_differences(name):
    kernel = _kernels()[name]
    form = K.state_space_form(kernel)
    assert set(form.names) == set(kernel.parameters())
    dt = np.array([0.0, 0.013, 0.35, 1.2, 4.0])
    rng = np.random.default_rng(11)
    A, dA = form.transition(dt, need_grad=True)
    Q, dQ = form.process_noise(A, dA)
    WA, WQ, WP = (rng.standard_normal(A.shape), rng.standard_normal(Q.shape),
                  rng.standard_normal(form.P_inf.shape))
    for i, pname in enumerate(form.names):
        x0 = float(np.reshape(kernel.parameters()[pname], ()))

        def parts(v, pname=pname, x0=x0):
            _set(kernel, pname, v)
            f = K.state_space_form(kernel)
            a, _ = f.transition(dt)
            q, _ = f.process_noise(a)
            _set(kernel, pname, x0)
            return a, q, f.P_inf

        check_grad(lambda v: np.sum(WA * parts(v)[0]), np.array(x0), np.sum(WA * dA[i]),
                   name=f"{name} dA/d{pname}", atol=1e-10)
        check_grad(lambda v: np.sum(WQ * parts(v)[1]), np.array(x0), np.sum(WQ * dQ[i]),
                   name=f"{name} dQ/d{pname}", atol=1e-10)
        check_grad(lambda v: np.sum(WP * parts(v)[2]), np.array(x0),
                   np.sum(WP * form.dP_inf[i]), name=f"{name} dP_inf/d{pname}", atol=1e-10)


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_transition_vjp_is_the_contraction_with_dA(name):
    # the reverse pass's seam: sums split the adjoint by blocks, PeriodicSeries has its own
    form = K.state_space_form(_kernels()[name])
    dt = np.array([0.0, 0.013, 0.35, 1.2, 4.0])
    _, dA = form.transition(dt, need_grad=True)
    A_bar = np.random.default_rng(5).standard_normal(dA.shape[1:])
    got = np.asarray(form.transition_vjp(dt, A_bar))
    ref = np.einsum("pkij,kij->p", np.asarray(dA), A_bar)
    assert got.shape == (len(form.names),)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_transition_terms_give_the_gram(name):
    # A(dt) = sum_k c_k(dt) E_k, the expansion the likelihood's pass forms its transitions by
    kernel = _kernels()[name]
    form = K.state_space_form(kernel)
    c, E = form.transition_terms(LAGS)
    c, E = np.asarray(c), np.asarray(E)
    J = form.state_dim
    assert c.shape == (len(LAGS), E.shape[0]) and E.shape[1:] == (J, J)
    A = np.einsum("nk,kij->nij", c, E)
    implied = np.einsum("j,jk,nlk,l->n", form.H, form.P_inf, A, form.H)
    np.testing.assert_allclose(implied, _gram_at_lags(kernel, LAGS), rtol=0, atol=1e-12)
    np.testing.assert_allclose(A[0], np.eye(J), atol=1e-15)


def test_form_on_every_backend(xp, dtype, device, to_xp):
    kernel = (K.Matern32(lengthscale=0.8, variance=1.4, xp=xp, dtype=dtype, device=device)
              + K.SHO(1.2, 1.7, 3.0, xp=xp, dtype=dtype, device=device))
    form = K.state_space_form(kernel)
    lags = to_xp(LAGS)
    A, dA = form.transition(lags, need_grad=True)
    _, dQ = form.process_noise(A, dA)
    assert A.dtype == dtype and dQ.shape == (5,) + tuple(A.shape)
    implied = (A @ (form.P_inf @ form.H)) @ form.H
    expected = _gram_at_lags(K.Matern32(0.8, 1.4) + K.SHO(1.2, 1.7, 3.0), LAGS)
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(to_numpy(implied), expected, atol=tol)
    c, E = form.transition_terms(lags)
    A_terms = xp.reshape(c @ xp.reshape(E, (E.shape[0], -1)), tuple(A.shape))
    implied = (A_terms @ (form.P_inf @ form.H)) @ form.H
    np.testing.assert_allclose(to_numpy(implied), expected, atol=tol)


@pytest.mark.parametrize("kernel, culprit", [
    (K.RBF(), "RBF"),
    (K.Periodic(K.RBF(), period=2.0), "Periodic"),
    (K.Matern32() + K.RationalQuadratic(), "RationalQuadratic"),
    (K.Matern32() * (K.White() + K.Cosine()), "White"),
])
def test_kernels_without_a_form_are_named(kernel, culprit):
    assert not K.has_state_space_form(kernel)
    with pytest.raises(TypeError, match=culprit):
        K.state_space_form(kernel)


def test_form_needs_column_zero_and_one_lengthscale():
    with pytest.raises(TypeError, match="active_dims"):
        K.state_space_form(K.Matern32(active_dims=[1]))
    assert K.has_state_space_form(K.Matern32(active_dims=[0]))
    with pytest.raises(TypeError, match="shape"):
        K.state_space_form(K.Matern32(lengthscale=[1.0, 2.0]))


def test_register_state_space_for_a_new_class():
    class Scaled(K.Matern32):
        """A kernel class of its own: exact-class lookup finds no form until registered."""

    k = Scaled(lengthscale=0.9, variance=1.2)
    assert not K.has_state_space_form(k)
    K.register_state_space(Scaled, lambda kern: K.state_space_form(
        K.Matern32(lengthscale=kern.lengthscale, variance=kern.variance)))
    form = K.state_space_form(k)
    np.testing.assert_allclose(form.covariance(LAGS), _gram_at_lags(k, LAGS), atol=1e-12)
