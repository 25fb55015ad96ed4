"""Lanczos, spectrum bounds, stochastic Lanczos log-determinants, pivoted Cholesky."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from test_linalg_cases import (  # noqa: F401
    RBFKernel,
    cast_reference,
    kernel_problem,
    rbf_numpy,
    torch_single_thread,
)

from gpnum.backend import to_numpy
from gpnum.errors import NotPSDError, ShapeError
from gpnum.linalg import (
    AddedDiag,
    Dense,
    Diagonal,
    KernelMatrix,
    LowRank,
    eigen_bounds,
    lanczos,
    pivoted_cholesky,
    pivoted_cholesky_preconditioner,
    slq_logdet,
    slq_logdet_and_grad,
)

N = 40


def _np(x):
    return to_numpy(x).astype(np.float64)


# --- lanczos -----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [None, 3])
def test_lanczos_relation_and_orthogonality(to_xp, xp, dtype, device, k):
    X, s2, A = kernel_problem(N, 1e4)
    rng = np.random.default_rng(0)
    V = rng.normal(size=(N,) if k is None else (N, k))
    j = 12
    res = lanczos(to_xp(A), to_xp(V), j)
    Q, T = _np(res.basis), _np(res.tridiagonal())
    alpha, beta, beta_last = _np(res.alpha), _np(res.beta), _np(res.beta_last)
    if k is None:
        Q, T, alpha, beta, beta_last = Q[None], T[None], alpha[None], beta[None], beta_last[None]
        V = V[:, None]
    assert Q.shape == (V.shape[1], N, j) and T.shape == (V.shape[1], j, j)
    tol = 1e-4 if dtype == xp.float32 else 1e-10
    Ar = cast_reference(A, xp, dtype, device)
    for c in range(V.shape[1]):
        np.testing.assert_allclose(Q[c, :, 0], V[:, c] / np.linalg.norm(V[:, c]), atol=tol)
        # Reorthogonalised: Q^T Q = I and T = Q^T A Q to working precision.
        np.testing.assert_allclose(Q[c].T @ Q[c], np.eye(j), atol=tol)
        np.testing.assert_allclose(Q[c].T @ Ar @ Q[c], T[c], atol=tol * np.abs(A).max() * 10)
        np.testing.assert_allclose(np.diag(T[c]), alpha[c])
        np.testing.assert_allclose(np.diag(T[c], 1), beta[c])
        # A Q - Q T is beta_last times the next vector in the last column only.
        R = Ar @ Q[c] - Q[c] @ T[c]
        np.testing.assert_allclose(R[:, :-1], 0.0, atol=tol * 10)
        np.testing.assert_allclose(np.linalg.norm(R[:, -1]), beta_last[c], rtol=1e-3,
                                   atol=tol * 10)
    np.testing.assert_allclose(_np(res.start_norm), np.linalg.norm(V, axis=0), rtol=1e-6)


def test_lanczos_full_run_recovers_the_spectrum(to_xp, xp, dtype, device):
    X, s2, A = kernel_problem(20, 1e3)
    res = lanczos(to_xp(A), to_xp(np.ones(20)), 20)
    ev = np.linalg.eigvalsh(_np(res.tridiagonal()))
    np.testing.assert_allclose(ev, np.linalg.eigvalsh(cast_reference(A, xp, dtype, device)),
                               rtol=1e-3 if dtype == xp.float32 else 1e-9,
                               atol=1e-5 if dtype == xp.float32 else 1e-12)


def test_lanczos_invariant_subspace_decouples(to_xp):
    """A start vector in a 2-d eigenspace: beta vanishes after two steps and the rest of T
    stays inside the spectrum without changing the extreme Ritz values."""
    A = np.diag(np.arange(1.0, 9.0))
    v = np.zeros(8)
    v[[2, 5]] = 1.0
    res = lanczos(to_xp(A), to_xp(v), 5)
    beta = _np(res.beta)
    assert abs(beta[1]) <= 1e-6 and np.all(beta[1:] == 0.0)
    ev = np.linalg.eigvalsh(_np(res.tridiagonal()))
    np.testing.assert_allclose([ev.min(), ev.max()], [3.0, 6.0], rtol=1e-5)
    assert np.all(np.isfinite(_np(res.basis)))


def test_lanczos_bad_inputs(to_xp):
    A = to_xp(np.eye(5))
    with pytest.raises(ValueError, match=r"num_iter: expected an integer in \[1, 5\], got 6"):
        lanczos(A, to_xp(np.ones(5)), 6)
    with pytest.raises(ValueError, match="v0: expected non-zero start vectors"):
        lanczos(A, to_xp(np.zeros((5, 2))), 2)
    with pytest.raises(ShapeError, match=r"v0: expected shape \(5,\) or \(5, k\), got \(4,\)"):
        lanczos(A, to_xp(np.ones(4)), 2)


# --- eigen_bounds ------------------------------------------------------------------------

@pytest.mark.parametrize("cond", [1e2, 1e4, 1e6])
def test_eigen_bounds_are_safe_and_tight(to_xp, xp, dtype, device, cond):
    n = 60
    X, s2, A = kernel_problem(n, cond, d=3, lengthscale=0.6)
    ops = {"dense": to_xp(A),
           "kernel+noise": AddedDiag(KernelMatrix(RBFKernel(1.0, 0.6), to_xp(X)), s2)}
    for name, op in ops.items():
        Ar = _np(op.to_dense()) if name != "dense" else cast_reference(A, xp, dtype, device)
        lam = np.linalg.eigvalsh(Ar)
        lower, upper = eigen_bounds(op, num_iter=20)
        assert isinstance(lower, float) and isinstance(upper, float)
        # Safe: never above the smallest eigenvalue, never below the largest.
        assert 0.0 <= lower <= lam[0], (name, lower, lam[0])
        assert upper >= lam[-1], (name, upper, lam[-1])
        assert upper <= lam[-1] * (1.0 + 1e-3)
        if dtype == xp.float64 or cond <= 1e4:
            # Useful: within a factor 2 of the truth at this size.
            assert lower >= 0.5 * lam[0], (name, lower, lam[0])


def test_eigen_bounds_use_the_diagonal_floor_when_lanczos_cannot_see_the_bottom(to_xp, xp,
                                                                               dtype):
    """Three Lanczos steps cannot resolve the bottom of an ill-conditioned kernel matrix: the
    Lanczos estimate is dropped (it would be too high) and the known noise floor is used.
    (float32 at cond 1e6 puts the floor below rounding level, where 0 is the only safe
    answer; it uses cond 1e4.)"""
    X, s2, A = kernel_problem(N, 1e4 if dtype == xp.float32 else 1e6)
    K = A - s2 * np.eye(N)
    op = AddedDiag(to_xp(K), s2)
    lower, upper = eigen_bounds(op, num_iter=3, max_iter=3)
    lam = np.linalg.eigvalsh(_np(op.to_dense()))
    assert lower <= lam[0] and lower >= 0.5 * s2
    lower_dense, _ = eigen_bounds(to_xp(A), num_iter=3, max_iter=3)
    assert lower_dense <= lam[0]


def test_eigen_bounds_singular_operator_gives_zero(to_xp):
    F = np.random.default_rng(1).normal(size=(N, 3))
    lower, upper = eigen_bounds(LowRank(to_xp(F)), num_iter=10)
    assert lower == 0.0
    assert upper >= np.linalg.eigvalsh(F @ F.T)[-1]


def test_eigen_bounds_diagonal_is_exact(to_xp):
    d = np.linspace(0.5, 3.0, N)
    lower, upper = eigen_bounds(Diagonal(to_xp(d)), num_iter=N)
    np.testing.assert_allclose([lower, upper], [0.5, 3.0], rtol=1e-5)
    assert lower <= 0.5 and upper >= 3.0 - 1e-12


def test_eigen_bounds_bad_inputs(to_xp):
    with pytest.raises(ValueError, match="num_iter: expected an integer >= 1"):
        eigen_bounds(to_xp(np.eye(3)), num_iter=0)
    with pytest.raises(ValueError, match="max_iter: expected an integer >= 1"):
        eigen_bounds(to_xp(np.eye(3)), max_iter=-2)
    with pytest.raises(ShapeError, match=r"A: expected a square operator"):
        eigen_bounds(to_xp(np.ones((3, 2))))


# --- stochastic Lanczos quadrature -------------------------------------------------------

def test_slq_is_exact_with_complete_probes(to_xp, xp, dtype, device):
    """With sqrt(n) times an orthogonal matrix as probes and n Lanczos steps, SLQ is exact."""
    n = 24
    X, s2, A = kernel_problem(n, 1e3)
    P = np.sqrt(n) * np.linalg.qr(np.random.default_rng(2).normal(size=(n, n)))[0]
    value = slq_logdet(to_xp(A), probes=to_xp(P), num_iter=n)
    assert value.ndim == 0
    expected = np.linalg.slogdet(cast_reference(A, xp, dtype, device))[1]
    np.testing.assert_allclose(float(value), expected, rtol=1e-4 if dtype == xp.float32 else 1e-10)


def test_slq_random_probes_within_monte_carlo_error(to_xp, xp, dtype, device):
    X, s2, A = kernel_problem(N, 1e4)
    op = AddedDiag(KernelMatrix(RBFKernel(1.0, 0.3), to_xp(X)), s2)
    t = 32
    value = float(slq_logdet(op, num_probes=t, num_iter=20, seed=3))
    Ar = _np(op.to_dense())
    lam, W = np.linalg.eigh(Ar)
    exact = np.sum(np.log(lam))
    # Hutchinson with Rademacher probes: Var = 2 (||L||_F^2 - sum_i L_ii^2), L = log A.
    L = (W * np.log(lam)) @ W.T
    sd = np.sqrt(2.0 * (np.sum(L * L) - np.sum(np.diag(L) ** 2)) / t)
    assert abs(value - exact) <= 4.0 * sd + 1e-3 * abs(exact), (value, exact, sd)
    # Same seed, same probes, same value; another seed, another estimate.
    assert float(slq_logdet(op, num_probes=t, num_iter=20, seed=3)) == value
    assert float(slq_logdet(op, num_probes=t, num_iter=20, seed=4)) != value


def test_slq_gradient_matches_finite_differences(to_xp, xp, dtype):
    """Exact probes make value and gradient exact, so the hand-derived gradient must match
    central differences of the estimate through the kernel's parameters and inputs."""
    if dtype != xp.float64:
        pytest.skip("finite-difference checks run in float64")
    n = 6
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, 2))
    P = np.sqrt(n) * np.linalg.qr(rng.normal(size=(n, n)))[0]
    var, ls, noise = 1.2, 0.9, 0.3

    def build(X_, var_, ls_, noise_):
        return AddedDiag(KernelMatrix(RBFKernel(var_, ls_), to_xp(X_), block_size=4),
                         to_xp(np.array(noise_)))

    def value(X_=X, var_=var, ls_=ls, noise_=noise):
        return float(slq_logdet(build(X_, var_, ls_, noise_), probes=to_xp(P), num_iter=n))

    v, g = slq_logdet_and_grad(build(X, var, ls, noise), probes=to_xp(P), num_iter=n)
    np.testing.assert_allclose(float(v), np.linalg.slogdet(
        rbf_numpy(X, X, var, ls) + noise * np.eye(n))[1], rtol=1e-10)
    gk = g["operator"]["kernel"]
    check_grad(lambda a: value(var_=float(a)), np.array(var), _np(gk["variance"]))
    check_grad(lambda a: value(ls_=float(a)), np.array(ls), _np(gk["lengthscale"]))
    check_grad(lambda a: value(noise_=float(a)), np.array(noise), _np(g["diag"]))
    check_grad(lambda a: value(X_=a), X, _np(g["operator"]["X"]))


def test_slq_gradient_of_dense_is_the_inverse_on_average(to_xp, xp, dtype):
    """Random probes: d logdet / dA = A^{-1}, estimated without bias (checked in mean)."""
    X, s2, A = kernel_problem(16, 1e2)
    v, g = slq_logdet_and_grad(Dense(to_xp(A)), num_probes=400, num_iter=16, seed=5)
    G = _np(g["A"])
    Ainv = np.linalg.inv(A)
    assert np.linalg.norm(G - Ainv) <= 0.25 * np.linalg.norm(Ainv)


def test_slq_not_positive_definite_raises(to_xp):
    A = np.diag(np.linspace(-1.0, 1.0, 10))
    with pytest.raises(NotPSDError, match=r"Ritz value .* <= 0: the operator is not positive "
                                          r"definite"):
        slq_logdet(to_xp(A), num_probes=4, num_iter=10)


def test_slq_bad_inputs(to_xp):
    A = to_xp(np.eye(5))
    with pytest.raises(ValueError, match="num_probes: expected an integer >= 1"):
        slq_logdet(A, num_probes=0)
    with pytest.raises(ValueError, match="num_iter: expected an integer >= 1"):
        slq_logdet(A, num_iter=0)
    with pytest.raises(ShapeError, match=r"probes: expected shape \(5, t\), got \(4, 2\)"):
        slq_logdet(A, probes=to_xp(np.ones((4, 2))))
    with pytest.raises(ValueError, match="probes: expected non-zero probe vectors"):
        slq_logdet(A, probes=to_xp(np.zeros((5, 2))))


# --- pivoted Cholesky --------------------------------------------------------------------

def _pivoted_cholesky_numpy(A, rank):
    """Textbook greedy pivoted Cholesky on a dense matrix (the reference)."""
    n = A.shape[0]
    d = np.diag(A).copy()
    L = np.zeros((n, rank))
    piv = []
    for r in range(rank):
        p = int(np.argmax(d))
        piv.append(p)
        L[:, r] = (A[:, p] - L[:, :r] @ L[p, :r]) / np.sqrt(d[p])
        d = d - L[:, r] ** 2
    return L, piv


def test_pivoted_cholesky_matches_reference(to_xp, xp, dtype):
    X, s2, A = kernel_problem(N, 1e4)
    K = rbf_numpy(X, X, 1.0, 0.3)
    op = KernelMatrix(RBFKernel(1.0, 0.3), to_xp(X), block_size=16)
    L, piv = pivoted_cholesky(op, 8, tol=0.0, return_pivots=True)
    L_ref, piv_ref = _pivoted_cholesky_numpy(K, 8)
    assert tuple(L.shape) == (N, 8)
    np.testing.assert_array_equal(to_numpy(piv), piv_ref)
    np.testing.assert_allclose(_np(L), L_ref, rtol=1e-3 if dtype == xp.float32 else 1e-10,
                               atol=1e-4 if dtype == xp.float32 else 1e-12)


def test_pivoted_cholesky_stops_at_tolerance_and_on_low_rank(to_xp, xp, dtype):
    X, s2, A = kernel_problem(N, 1e4, d=1, lengthscale=0.5)
    K = rbf_numpy(X, X, 1.0, 0.5)
    L = _np(pivoted_cholesky(to_xp(K), N, tol=1e-3))
    err = np.trace(K - L @ L.T) / np.trace(K)
    assert err <= 1e-3 and L.shape[1] < N // 2
    F = np.random.default_rng(6).normal(size=(N, 3))
    L3 = _np(pivoted_cholesky(LowRank(to_xp(F)), 10, tol=0.0))
    assert L3.shape[1] == 3              # rounding-level pivots are not taken
    np.testing.assert_allclose(L3 @ L3.T, F @ F.T, atol=1e-3 if dtype == xp.float32 else 1e-10)


def test_pivoted_cholesky_preconditioner_is_the_woodbury_inverse(to_xp, xp, dtype):
    X, s2, A = kernel_problem(N, 1e4)
    K = rbf_numpy(X, X, 1.0, 0.3)
    noise = np.random.default_rng(7).uniform(0.5, 1.5, size=N) * s2
    op = AddedDiag(KernelMatrix(RBFKernel(1.0, 0.3), to_xp(X)), to_xp(noise))
    M = pivoted_cholesky_preconditioner(op, rank=10, tol=0.0)
    L, _ = _pivoted_cholesky_numpy(K, 10)
    P = L @ L.T + np.diag(noise)
    np.testing.assert_allclose(_np(M.to_dense()) @ P, np.eye(N),
                               atol=5e-2 if dtype == xp.float32 else 1e-8)
    np.testing.assert_allclose(float(M.logdet()), np.linalg.slogdet(P)[1],
                               rtol=1e-4 if dtype == xp.float32 else 1e-10)


def test_pivoted_cholesky_bad_inputs(to_xp):
    with pytest.raises(ValueError, match="rank: expected an integer >= 1"):
        pivoted_cholesky(to_xp(np.eye(3)), 0)
    with pytest.raises(ValueError, match="tol: expected a finite number >= 0"):
        pivoted_cholesky(to_xp(np.eye(3)), 2, tol=-1.0)
    with pytest.raises(ValueError, match="A: expected a non-negative diagonal"):
        pivoted_cholesky(to_xp(-np.eye(3)), 2)
    with pytest.raises(ValueError, match="A: expected a finite diagonal"):
        pivoted_cholesky(to_xp(np.diag([1.0, np.nan, 1.0])), 2)
    with pytest.raises(ShapeError, match="pivoted_cholesky: expected a square operator"):
        pivoted_cholesky(to_xp(np.ones((3, 2))), 2)
    with pytest.raises(TypeError, match="A: expected an AddedDiag operator"):
        pivoted_cholesky_preconditioner(to_xp(np.eye(3)))
