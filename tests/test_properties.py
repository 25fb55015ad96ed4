"""Property-based tests (Hypothesis) of the numerical core: operators, kernels, divergences,
likelihoods. Few examples each and no deadline, so that they stay quick in CI; every property
is checked against an independent statement of it (dense NumPy, a closed form, an identity)."""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpnum import divergences as D  # noqa: E402
from gpnum.kernels import RBF, Matern12, Matern32, Matern52  # noqa: E402
from gpnum.likelihoods import Gaussian, StudentT  # noqa: E402
from gpnum.linalg import AddedDiag, Dense, Diagonal, LowRank, pcg  # noqa: E402

QUICK = settings(max_examples=12, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])
KERNELS = (RBF, Matern12, Matern32, Matern52)
EPS = float(np.finfo(np.float64).eps)


def log_uniform(lo, hi):
    return st.floats(np.log10(lo), np.log10(hi)).map(lambda e: float(10.0 ** e))


@st.composite
def inputs(draw, max_n=12, max_d=6):
    """Inputs with the edge cases of issue 31: duplicated rows, constant columns, one point."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * draw(log_uniform(1e-3, 1e3))
    if n > 1 and draw(st.booleans()):
        X[rng.integers(0, n)] = X[0]                 # a duplicated row
    if draw(st.booleans()):
        X[:, rng.integers(0, d)] = draw(st.floats(-5.0, 5.0))  # a constant column
    return X


# ----------------------------------------------------------------------------- kernels
@QUICK
@given(X=inputs(), kind=st.sampled_from(KERNELS), ell=log_uniform(1e-8, 1e8),
       variance=log_uniform(1e-3, 1e3), ard=st.booleans(), seed=st.integers(0, 1000))
def test_kernel_matrices_are_symmetric_psd_for_any_inputs_and_parameters(X, kind, ell, variance,
                                                                          ard, seed):
    d = X.shape[1]
    rng = np.random.default_rng(seed)
    lengthscale = ell * np.exp(rng.uniform(-2.0, 2.0, d)) if ard else ell
    k = kind(lengthscale=lengthscale, variance=variance)
    K = np.asarray(k(X))
    n = X.shape[0]
    assert np.array_equal(K, K.T)
    np.testing.assert_allclose(np.diag(K), variance, rtol=1e-12)
    assert np.all(np.abs(K) <= variance * (1.0 + 1e-12))
    # eigenvalues >= minus round-off: n eps times the largest entry
    assert np.linalg.eigvalsh(K).min() >= -10.0 * n * EPS * variance


@QUICK
@given(X=inputs(max_n=8, max_d=4), kind=st.sampled_from(KERNELS), seed=st.integers(0, 1000),
       a=st.floats(-3.0, 3.0), b=st.floats(-3.0, 3.0))
def test_kernel_vjp_is_linear_in_the_cotangent(X, kind, seed, a, b):
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    Z = rng.standard_normal((5, d))
    k = kind(lengthscale=np.exp(rng.uniform(-1.0, 1.0, d)), variance=1.3)
    _, vjp = k.gram_and_vjp(X, Z)
    G1, G2 = rng.standard_normal((2, X.shape[0], 5))
    g1, g2, g12 = vjp(G1), vjp(G2), vjp(a * G1 + b * G2)
    for name in g12["params"]:
        lin = a * np.asarray(g1["params"][name]) + b * np.asarray(g2["params"][name])
        scale = np.abs(np.asarray(g1["params"][name])).max() + np.abs(
            np.asarray(g2["params"][name])).max() + 1.0
        np.testing.assert_allclose(np.asarray(g12["params"][name]), lin, atol=1e-10 * scale)
    for key in ("X1", "X2"):
        lin = a * np.asarray(g1[key]) + b * np.asarray(g2[key])
        scale = np.abs(np.asarray(g1[key])).max() + np.abs(np.asarray(g2[key])).max() + 1.0
        np.testing.assert_allclose(np.asarray(g12[key]), lin, atol=1e-10 * scale)


# ----------------------------------------------------------------------------- operators
@st.composite
def spd_operators(draw):
    """An operator, its dense matrix, and a solve tolerance's condition number bound."""
    n = draw(st.integers(1, 10))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["dense", "diagonal", "added", "lowrank"]))
    diag = rng.uniform(0.5, 2.0, n)
    if kind == "diagonal":
        return Diagonal(diag), np.diag(diag)
    U = rng.standard_normal((n, draw(st.integers(1, 4))))
    if kind == "lowrank":
        return LowRank(U, diag), U @ U.T + np.diag(diag)
    W = rng.standard_normal((n, n))
    A = W @ W.T / n + 0.5 * np.eye(n)
    if kind == "added":
        return AddedDiag(Dense(A, symmetric=True), Diagonal(diag)), A + np.diag(diag)
    return Dense(A, symmetric=True), A


@QUICK
@given(op=spd_operators(), seed=st.integers(0, 1000))
def test_operators_are_symmetric_and_match_their_dense_form(op, seed):
    op, A = op
    n = A.shape[0]
    rng = np.random.default_rng(seed)
    X, Y = rng.standard_normal((2, n, 3))
    np.testing.assert_allclose(np.asarray(op @ X), A @ X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(op.to_dense()), A, rtol=1e-12, atol=1e-13)
    # <Y, op X> == <op Y, X>
    np.testing.assert_allclose(np.sum(Y * np.asarray(op @ X)), np.sum(np.asarray(op @ Y) * X),
                               rtol=1e-10, atol=1e-12)


@QUICK
@given(op=spd_operators(), seed=st.integers(0, 1000), rtol=st.sampled_from([1e-6, 1e-9]))
def test_pcg_solves_what_matmul_made_within_its_stated_tolerance(op, seed, rtol):
    op, A = op
    n = A.shape[0]
    x = np.random.default_rng(seed).standard_normal((n, 2))
    b = np.asarray(op @ x)
    res = pcg(op, b, rtol=rtol, maxiter=10 * n + 10)
    assert res.info == 0
    # the stated criterion: ||b - A x||_2 <= rtol ||b||_2 per column (a little round-off slack)
    r = b - A @ np.asarray(res.x)
    assert np.all(np.linalg.norm(r, axis=0) <= 1.01 * rtol * np.linalg.norm(b, axis=0) + 1e-14)
    # hence the error is within cond(A) times that
    cond = np.linalg.cond(A)
    err = np.linalg.norm(np.asarray(res.x) - x, axis=0) / np.linalg.norm(x, axis=0)
    assert np.all(err <= 1.01 * cond * rtol + 1e-12)


# ----------------------------------------------------------------------------- divergences
POINTWISE = {
    "kl": (D.kl_normal, False), "bhattacharyya": (D.bhattacharyya_normal, True),
    "hellinger": (D.hellinger_normal, True), "wasserstein": (D.wasserstein_normal, True),
    "renyi-0.5": (lambda *a, **k: D.renyi_normal(*a, alpha=0.5, **k), False),
    "renyi-2": (lambda *a, **k: D.renyi_normal(*a, alpha=2.0, **k), False),
}


@st.composite
def gaussians(draw):
    n = draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    mq, mp = rng.standard_normal((2, n)) * draw(log_uniform(1e-2, 1e2))
    vq = np.exp(rng.uniform(-3, 3, n))
    # Renyi of order 2 needs 2 vp - vq > 0: keep vq < 1.9 vp
    vp = np.maximum(np.exp(rng.uniform(-3, 3, n)), vq / 1.9)
    return mq, vq, mp, vp


@QUICK
@given(g=gaussians(), name=st.sampled_from(sorted(POINTWISE)))
def test_pointwise_divergences_are_nonnegative_zero_at_equality_symmetric_where_stated(g, name):
    f, symmetric = POINTWISE[name]
    mq, vq, mp, vp = g
    v = np.asarray(f(mq, vq, mp, vp, reduction="none"))
    assert np.all(v >= -1e-12 * (1.0 + np.abs(v)))
    np.testing.assert_allclose(np.asarray(f(mq, vq, mq, vq, reduction="none")), 0.0, atol=1e-12)
    if symmetric:
        np.testing.assert_allclose(np.asarray(f(mp, vp, mq, vq, reduction="none")), v,
                                   rtol=1e-10, atol=1e-14)


@QUICK
@given(g=gaussians(), seed=st.integers(0, 1000))
def test_multivariate_divergences_nonnegative_and_zero_between_equal_gaussians(g, seed):
    mq, _, mp, _ = g
    n = mq.shape[0]
    rng = np.random.default_rng(seed)
    Wq, Wp = rng.standard_normal((2, n, n))
    Sq, Sp = Wq @ Wq.T + 0.1 * np.eye(n), Wp @ Wp.T + 0.1 * np.eye(n)
    for f, sym in ((D.kl_mvn, False), (D.wasserstein_mvn, True), (D.bhattacharyya_mvn, True),
                   (D.hellinger_mvn, True)):
        v = float(np.asarray(f(mq, Sq, mp, Sp)))
        assert v >= -1e-10 * (1.0 + abs(v))
        assert abs(float(np.asarray(f(mq, Sq, mq, Sq)))) <= 1e-8 * (1.0 + np.trace(Sq))
        if sym:
            np.testing.assert_allclose(float(np.asarray(f(mp, Sp, mq, Sq))), v, rtol=1e-7,
                                       atol=1e-10)


VJPS = {"kl": D.kl_normal_vjp, "bhattacharyya": D.bhattacharyya_normal_vjp,
        "hellinger": D.hellinger_normal_vjp, "wasserstein": D.wasserstein_normal_vjp,
        "squared_difference": D.squared_difference_normal_vjp}


@QUICK
@given(g=gaussians(), name=st.sampled_from(sorted(VJPS)), seed=st.integers(0, 1000),
       a=st.floats(-2.0, 2.0), b=st.floats(-2.0, 2.0))
def test_divergence_vjps_are_linear_in_the_cotangent(g, name, seed, a, b):
    vjp = VJPS[name]
    n = g[0].shape[0]
    c1, c2 = np.random.default_rng(seed).standard_normal((2, n))
    r1, r2, r12 = vjp(c1, *g), vjp(c2, *g), vjp(a * c1 + b * c2, *g)
    assert set(r12) == set(r1)
    for key in r12:
        x1, x2, x12 = r1[key], r2[key], r12[key]
        lin = a * np.asarray(x1) + b * np.asarray(x2)
        scale = np.abs(np.asarray(x1)).max() + np.abs(np.asarray(x2)).max() + 1.0
        np.testing.assert_allclose(np.asarray(x12), lin, atol=1e-10 * scale)


# ----------------------------------------------------------------------------- likelihoods
@QUICK
@given(seed=st.integers(0, 1000), n=st.integers(2, 10), which=st.sampled_from(["gauss", "t"]),
       a=st.floats(0.1, 3.0), b=st.floats(0.1, 3.0))
def test_likelihood_parameter_vjp_is_linear_in_the_per_point_weights(seed, n, which, a, b):
    # The parameter gradient of sum_i c_i ve_i is linear in c: the gradient of a weighted sum
    # equals the weighted sum of per-point gradients (each point alone, c = e_i).
    rng = np.random.default_rng(seed)
    y, mu = rng.standard_normal((2, n))
    var = np.exp(rng.uniform(-2, 1, n))
    lik = Gaussian(variance=0.3) if which == "gauss" else StudentT(df=4.0, scale=0.7)
    per_point = [lik.variational_expectations_and_grad(y[i:i + 1], mu[i:i + 1], var[i:i + 1])[1]
                 for i in range(n)]
    _, whole = lik.variational_expectations_and_grad(y, mu, var)
    k = n // 2
    _, g_lo = lik.variational_expectations_and_grad(y[:k], mu[:k], var[:k])
    _, g_hi = lik.variational_expectations_and_grad(y[k:], mu[k:], var[k:])
    for name in whole["params"]:
        parts = np.array([float(np.asarray(p["params"][name])) for p in per_point])
        total = float(np.asarray(whole["params"][name]))
        np.testing.assert_allclose(total, parts.sum(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(float(np.asarray(g_lo["params"][name]))
                                   + float(np.asarray(g_hi["params"][name])), total,
                                   rtol=1e-10, atol=1e-12)
        # and with weights: sum_i c_i (d ve_i / d theta) from the parts, against a*lo + b*hi
        c = np.where(np.arange(n) < k, a, b)
        np.testing.assert_allclose(np.dot(c, parts),
                                   a * float(np.asarray(g_lo["params"][name]))
                                   + b * float(np.asarray(g_hi["params"][name])),
                                   rtol=1e-9, atol=1e-12)
