"""CIQ: accuracy against the eigendecomposition, the whitening identity, backward passes against
finite differences, prior sampling through a lazy kernel matrix, bad input."""

import warnings

import numpy as np
import pytest
from gradcheck import check_grad

from gpnum import backend as B
from gpnum.ciq import (
    ciq_quadrature,
    inv_sqrt_matmul,
    inv_sqrt_matmul_vjp,
    sample_mvn,
    sqrt_matmul,
    sqrt_matmul_vjp,
)
from gpnum.errors import ConvergenceWarning, NotPSDError, ShapeError
from gpnum.kernels import RBF, Matern52
from gpnum.linalg import AddedDiag, Dense, Diagonal, KernelMatrix


def kernel_matrix(kind, m, cond, seed=0):
    """A kernel matrix plus the diagonal that sets its condition number to about ``cond``."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 1, (m, 1)), axis=0)
    d = np.abs(x - x.T) / 0.2
    if kind == "rbf":
        K = np.exp(-0.5 * d**2)
    else:
        K = (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)
    lmax = np.linalg.eigvalsh(K)[-1]
    return K + (lmax / cond) * np.eye(m)


def eig_power(K, B, p):
    w, V = np.linalg.eigh(K)
    return (V * w**p) @ V.T @ B


def test_quadrature_rule_accuracy():
    for kappa in (1e2, 1e4, 1e6, 1e10):
        lam = np.logspace(0, np.log10(kappa), 200)
        s, w = ciq_quadrature(1.0, kappa, 15)
        approx = (w / (lam[:, None] + s)).sum(1)
        bound = np.exp(-2 * np.pi**2 * 15 / (np.log(kappa) + 3))
        assert np.max(np.abs(approx * np.sqrt(lam) - 1)) < 10 * bound + 1e-14
    s, w = ciq_quadrature(2.0, 2.0, 5)  # a multiple of the identity
    assert abs((w / (2.0 + s)).sum() - 2.0**-0.5) < 1e-7


def test_elliptic_functions_against_scipy():
    """The AGM's K(m) and sn, cn, dn(u | m) (m = 1 - k2, u = frac K) against scipy.special at
    the quadrature's nodes, for k2 where SciPy's parameter 1 - k2 is still exact enough."""
    from scipy.special import ellipj, ellipk

    from gpnum.linalg._ciq_quadrature import _elliptic_agm

    for k2 in (1e-4, 1e-2, 0.3, 0.9, 1.0):
        K_ref = ellipk(1.0 - k2)
        frac = (np.arange(1, 16) - 0.5) / 15
        K, sn, cn, dn = _elliptic_agm(k2, frac)
        sn_ref, cn_ref, dn_ref, _ = ellipj(frac * K_ref, 1.0 - k2)
        np.testing.assert_allclose(K, K_ref, rtol=1e-12)
        np.testing.assert_allclose(sn, sn_ref, rtol=1e-13)
        np.testing.assert_allclose(cn, cn_ref, rtol=1e-10)
        np.testing.assert_allclose(dn, dn_ref, rtol=1e-11)


@pytest.mark.parametrize("kind", ["matern52", "rbf"])
@pytest.mark.parametrize("cond", [1e2, 1e4, 1e6])
def test_inv_sqrt_matches_eigh(to_xp, xp, dtype, kind, cond):
    f32 = dtype == xp.float32
    if f32 and cond > 1e4:
        pytest.skip("float32 resolves condition numbers up to about 1e4")
    m, k = 60, 3
    K = kernel_matrix(kind, m, cond)
    Bm = np.random.default_rng(1).standard_normal((m, k))
    rtol = 1e-3 if f32 else 1e-6
    res = inv_sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol, maxiter=400)
    ref = eig_power(K, Bm, -0.5)
    x = B.to_numpy(res.x)
    assert x.shape == (m, k) and res.info == 0
    err = np.linalg.norm(x - ref) / np.linalg.norm(ref)
    assert err < 20 * rtol, err
    s = B.to_numpy(sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol, maxiter=400).x)
    ref_s = eig_power(K, Bm, 0.5)
    assert np.linalg.norm(s - ref_s) / np.linalg.norm(ref_s) < 20 * rtol


def test_whitening_identity():
    K = kernel_matrix("matern52", 80, 1e4, seed=2)
    Bm = np.random.default_rng(3).standard_normal((80, 5))
    x = inv_sqrt_matmul(K, Bm, rtol=1e-8, maxiter=500).x
    np.testing.assert_allclose(x.T @ x, Bm.T @ np.linalg.solve(K, Bm), rtol=1e-5, atol=1e-6)


def test_vector_right_hand_side_and_result_fields():
    K = kernel_matrix("rbf", 30, 1e3)
    b = np.random.default_rng(4).standard_normal(30)
    r = inv_sqrt_matmul(K, b, num_quad=8, rtol=1e-6)
    assert r.x.shape == (30,) and r.shifts.shape == (8,) and r.weights.shape == (8,)
    assert r.solves.shape == (8, 30, 1)
    lo, hi = r.eigen_bounds
    w = np.linalg.eigvalsh(K)
    assert 0 < lo <= w[0] and hi >= w[-1]
    assert "converged" in repr(r)


def _kernel_operator(kern, X, jitter=1e-3):
    return AddedDiag(KernelMatrix(kern, X), jitter * np.ones(X.shape[0]))


@pytest.mark.parametrize("which", ["inv_sqrt", "sqrt"])
def test_vjp_finite_differences(which):
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, (12, 2))
    Bm = rng.standard_normal((12, 2))
    xbar = rng.standard_normal((12, 2))
    opts = dict(num_quad=40, rtol=1e-12, maxiter=200)
    fwd = inv_sqrt_matmul if which == "inv_sqrt" else sqrt_matmul
    vjp = inv_sqrt_matmul_vjp if which == "inv_sqrt" else sqrt_matmul_vjp

    def value(ls, var, Bm_):
        op = _kernel_operator(Matern52(lengthscale=ls, variance=var), X)
        return float(np.sum(xbar * fwd(op, Bm_, **opts).x))

    kern = Matern52(lengthscale=np.array([0.4, 0.6]), variance=1.3)
    op = _kernel_operator(kern, X)
    res = fwd(op, Bm, **opts)
    bbar, g = vjp(res, op, Bm, xbar, rtol=1e-12)
    check_grad(lambda b: value(np.array([0.4, 0.6]), 1.3, b), Bm, bbar, name="B")
    gk = g["operator"]["kernel"]
    check_grad(lambda ls: value(ls, 1.3, Bm), np.array([0.4, 0.6]), gk["lengthscale"],
               name="lengthscale")
    check_grad(lambda v: value(np.array([0.4, 0.6]), float(v), Bm), np.array(1.3),
               gk["variance"], name="variance")


def test_vjp_on_every_backend(to_xp, xp, dtype):
    K = kernel_matrix("matern52", 25, 1e3, seed=6)
    rng = np.random.default_rng(7)
    Bm, xbar = rng.standard_normal((25, 2)), rng.standard_normal((25, 2))
    rtol = 1e-3 if dtype == xp.float32 else 1e-8
    res = inv_sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol)
    bbar, g = inv_sqrt_matmul_vjp(res, to_xp(K), to_xp(Bm), to_xp(xbar), rtol=rtol)
    # Dense references: d/dB sum(xbar * K^{-1/2} B) = K^{-1/2} xbar; w.r.t. K through eigh.
    np.testing.assert_allclose(B.to_numpy(bbar), eig_power(K, xbar, -0.5),
                               rtol=50 * rtol, atol=50 * rtol)
    w, V = np.linalg.eigh(K)
    f = w**-0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        D = (f[:, None] - f[None, :]) / (w[:, None] - w[None, :])
    D[np.diag_indices_from(D)] = -0.5 * w**-1.5
    Gk = V @ (D * (V.T @ xbar @ Bm.T @ V)) @ V.T  # Daleckii-Krein
    G = B.to_numpy(g["A"])
    Gs = 0.5 * (G + G.T)
    np.testing.assert_allclose(Gs, 0.5 * (Gk + Gk.T), rtol=100 * rtol, atol=100 * rtol)


def test_sample_mvn_through_lazy_kernel_matrix(xp, dtype, device):
    grid = np.linspace(0, 1, 6)[:, None]
    kern = RBF(lengthscale=0.4, variance=1.5, xp=xp, dtype=dtype, device=device)
    Xg = B.asarray(grid, dtype=dtype, xp=xp, device=device)
    op = AddedDiag(KernelMatrix(kern, Xg, block_size=2),
                   B.asarray(np.full(6, 1e-2), dtype=dtype, xp=xp, device=device))
    mean = B.asarray(np.arange(6.0), dtype=dtype, xp=xp, device=device)
    S = B.to_numpy(sample_mvn(op, 4000, seed=0, mean=mean,
                              rtol=1e-3 if dtype == xp.float32 else 1e-6))
    assert S.shape == (6, 4000)
    K = 1.5 * np.exp(-0.5 * (grid - grid.T) ** 2 / 0.16) + 1e-2 * np.eye(6)
    emp = np.cov(S)
    se = np.sqrt((K**2 + np.outer(np.diag(K), np.diag(K))) / 4000)  # sd of each entry
    assert np.all(np.abs(emp - K) < 5 * se + 2e-3)
    assert np.all(np.abs(S.mean(1) - np.arange(6.0)) < 5 * np.sqrt(np.diag(K) / 4000))


def test_bad_input():
    K = kernel_matrix("rbf", 10, 1e2)
    b = np.ones((10, 2))
    bad = b.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="B: expected finite values, got 1 NaN"):
        inv_sqrt_matmul(K, bad)
    with pytest.raises(ValueError, match="num_quad"):
        inv_sqrt_matmul(K, b, num_quad=0)
    with pytest.raises(ShapeError, match=r"B: expected shape \(10,\) or \(10, k\)"):
        inv_sqrt_matmul(K, np.ones((9, 2)))
    with pytest.raises(NotPSDError, match="not positive definite"):
        inv_sqrt_matmul(np.diag(np.linspace(-1.0, 2.0, 10)), b)
    with pytest.raises(ValueError, match="eigen_bounds"):
        inv_sqrt_matmul(K, b, eigen_bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="num_samples"):
        sample_mvn(Dense(K, symmetric=True), 0, seed=0)
    res = inv_sqrt_matmul(K, b)
    with pytest.raises(ShapeError, match="x_bar"):
        inv_sqrt_matmul_vjp(res, K, b, np.ones((10, 3)))


def test_warns_when_stopping_short():
    K = kernel_matrix("matern52", 200, 1e6)
    b = np.random.default_rng(8).standard_normal((200, 1))
    with pytest.warns(ConvergenceWarning, match="stopped after 3 iterations"):
        r = inv_sqrt_matmul(K, b, rtol=1e-10, maxiter=3)
    assert r.info > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inv_sqrt_matmul(K, b, rtol=1e-3, maxiter=400)


@pytest.mark.parametrize("cond", [1e4, 1e6])
def test_deflated_inv_sqrt_matches_eigh(to_xp, xp, dtype, cond):
    f32 = dtype == xp.float32
    if f32 and cond > 1e4:
        pytest.skip("float32 resolves condition numbers up to about 1e4")
    m, k = 300, 16  # large enough for the automatic deflation
    K = kernel_matrix("matern52", m, cond, seed=9)
    Bm = np.random.default_rng(10).standard_normal((m, k))
    rtol = 1e-3 if f32 else 1e-6
    res = inv_sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol, maxiter=400)
    assert res.num_deflated > 0 and res.deflation_products == 5 * min(256, m // 2)
    assert res.info == 0
    ref = eig_power(K, Bm, -0.5)
    err = np.linalg.norm(B.to_numpy(res.x) - ref) / np.linalg.norm(ref)
    assert err < 20 * rtol, err
    plain = inv_sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol, maxiter=400, deflate=0)
    assert plain.num_deflated == 0 and res.num_iter < plain.num_iter


def _matern52_points(m, lengthscale, jitter, seed):
    x = np.random.default_rng(seed).uniform(size=(m, 2))
    r = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)) / lengthscale
    K = (1 + np.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-np.sqrt(5) * r)
    # As an AddedDiag, whose diagonal gives Lanczos its spectrum floor.
    return K + jitter * np.eye(m), AddedDiag(Dense(K, symmetric=True), Diagonal(np.asarray(jitter), m))


def test_adaptive_deflation_searches_again_on_a_slow_spectrum():
    # Matern-5/2 with a short lengthscale: the spectrum decays slowly over the first block, so
    # its last pair still leaves a condition number of about 1e3 and the automatic search takes
    # further rounds, which cut the iterations below a single round's at the same accuracy.
    m, k = 800, 256
    K, op = _matern52_points(m, 0.1, 1e-4, seed=12)
    Bm = np.random.default_rng(13).standard_normal((m, k))
    ref = eig_power(K, Bm, -0.5)
    auto = inv_sqrt_matmul(op, Bm, rtol=1e-3, maxiter=400)
    once = inv_sqrt_matmul(op, Bm, rtol=1e-3, maxiter=400, deflate=384)
    assert once.deflation_products == 5 * 384 and 0 < once.num_deflated <= 384
    assert auto.deflation_products > once.deflation_products
    assert auto.num_deflated > once.num_deflated
    assert auto.num_iter < 0.7 * once.num_iter, (auto.num_iter, once.num_iter)
    W = auto.deflation[1]
    assert np.abs(W.T @ W - np.eye(W.shape[1])).max() < 1e-8  # the rounds' pairs are orthogonal
    for res in (auto, once):
        assert res.info == 0
        assert np.linalg.norm(res.x - ref) / np.linalg.norm(ref) < 3e-3


def test_adaptive_deflation_stops_after_one_round_on_a_fast_spectrum():
    m, k = 400, 64  # long lengthscale: the first block holds every pair above the jitter
    _, op = _matern52_points(m, 0.5, 1e-4, seed=14)
    res = inv_sqrt_matmul(op, np.random.default_rng(15).standard_normal((m, k)), rtol=1e-3)
    assert res.num_deflated > 0 and res.deflation_products == 5 * 200


def test_deflated_vjp_finite_differences():
    rng = np.random.default_rng(11)
    X = rng.uniform(0, 1, (40, 1))
    Bm = rng.standard_normal((40, 2))
    xbar = rng.standard_normal((40, 2))
    opts = dict(num_quad=40, rtol=1e-12, maxiter=300, deflate=16)

    def value(ls, Bm_):
        op = _kernel_operator(RBF(lengthscale=ls, variance=1.1), X)
        return float(np.sum(xbar * inv_sqrt_matmul(op, Bm_, **opts).x))

    op = _kernel_operator(RBF(lengthscale=0.3, variance=1.1), X)
    res = inv_sqrt_matmul(op, Bm, **opts)
    assert res.num_deflated >= 3  # the split is exercised at this tolerance
    bbar, g = inv_sqrt_matmul_vjp(res, op, Bm, xbar, rtol=1e-12, maxiter=300)
    check_grad(lambda b: value(0.3, b), Bm, bbar, name="B")
    check_grad(lambda ls: value(float(ls), Bm), np.array(0.3),
               g["operator"]["kernel"]["lengthscale"], name="lengthscale")


def test_deflate_argument_errors():
    K = kernel_matrix("rbf", 20, 1e2)
    b = np.ones((20, 2))
    with pytest.raises(ValueError, match=r"deflate: expected an integer block size <= m / 2"):
        inv_sqrt_matmul(K, b, deflate=11)
    with pytest.raises(ValueError, match="deflate"):
        inv_sqrt_matmul(K, b, deflate=-1)
    with pytest.raises(TypeError, match="deflate"):
        inv_sqrt_matmul(K, b, deflate=2.5)


def test_deflation_reused_from_an_earlier_result():
    K = kernel_matrix("matern52", 300, 1e4, seed=12)
    rng = np.random.default_rng(13)
    B1, B2m = rng.standard_normal((300, 16)), rng.standard_normal((300, 16))
    first = inv_sqrt_matmul(K, B1, rtol=1e-6, maxiter=400)
    again = inv_sqrt_matmul(K, B2m, rtol=1e-6, maxiter=400, deflate=first.deflation,
                            eigen_bounds=first.eigen_bounds)
    assert again.num_deflated == first.num_deflated > 0 and again.deflation_products == 0
    ref = eig_power(K, B2m, -0.5)
    assert np.linalg.norm(again.x - ref) / np.linalg.norm(ref) < 2e-5
    with pytest.raises(ShapeError, match="deflate"):
        inv_sqrt_matmul(K[:200, :200], B1[:200], deflate=first.deflation)
    # The whole result: its bounds, pairs and deflated matrix are reused (no new search, the
    # same complement operator), with the same answer.
    whole = inv_sqrt_matmul(K, B2m, rtol=1e-6, maxiter=400, deflate=first)
    assert whole.complement is first.complement and whole.deflation_products == 0
    assert whole.eigen_bounds == first.eigen_bounds
    assert np.linalg.norm(whole.x - ref) / np.linalg.norm(ref) < 2e-5
    plain = inv_sqrt_matmul(K, B2m, rtol=1e-6, maxiter=400, deflate=0)
    undeflated = inv_sqrt_matmul(K, B2m, rtol=1e-6, maxiter=400, deflate=plain)
    assert undeflated.num_deflated == 0 and undeflated.deflation_products == 0


def test_deflated_matrix_acts_as_the_projected_operator():
    # Any orthonormal W (here not eigenvectors of K): K_d x = (I - W W^T) K x for x orthogonal
    # to W, and K_d W = floor W, checked against the dense products.
    from gpnum.linalg._ciq_deflation import _deflated_matrix

    rng = np.random.default_rng(30)
    A = rng.standard_normal((50, 50))
    K = A @ A.T + 0.1 * np.eye(50)
    W, _ = np.linalg.qr(rng.standard_normal((50, 7)))
    Kd = _deflated_matrix(K, W, K @ W, 0.37)
    P = np.eye(50) - W @ W.T
    x = P @ rng.standard_normal((50, 4))
    np.testing.assert_allclose(Kd @ x, P @ K @ x, rtol=0, atol=1e-12 * np.abs(K).max())
    np.testing.assert_allclose(Kd @ W, 0.37 * W, rtol=0, atol=1e-12 * np.abs(K).max())
    np.testing.assert_allclose(Kd, Kd.T, rtol=0, atol=1e-13 * np.abs(K).max())


@pytest.mark.parametrize("kind", ["matrix", "callable"])
def test_deflated_solves_held_matrix_and_lazy_operator(kind):
    # The same slowly decaying spectrum solved through the deflated matrix (an operator held as
    # a matrix) and through the projecting complement (a callable, whose matrix CIQ cannot
    # see): same pairs split off, both within the tolerance of eigh, and so is the backward
    # pass's B-cotangent (the same solves with the cotangent as right-hand side).
    from gpnum.linalg import aslinearoperator

    K, op = _matern52_points(600, 0.1, 1e-4, seed=31)
    Bm = np.random.default_rng(32).standard_normal((600, 64))
    xbar = np.random.default_rng(33).standard_normal((600, 64))
    if kind == "callable":
        op = aslinearoperator(lambda X: K @ X, like=Bm)
    w = np.linalg.eigvalsh(K)
    res = inv_sqrt_matmul(op, Bm, rtol=1e-4, maxiter=400, deflate=256,
                          eigen_bounds=(0.9 * w[0], 1.1 * w[-1]))
    assert res.info == 0 and res.num_deflated > 50
    assert (type(res.complement).__name__ == "Dense") == (kind == "matrix")
    ref = eig_power(K, Bm, -0.5)
    assert np.linalg.norm(res.x - ref) / np.linalg.norm(ref) < 1e-3
    if kind == "callable":
        return  # a callable has no parameters for the backward pass
    bbar, _ = inv_sqrt_matmul_vjp(res, op, Bm, xbar, rtol=1e-4, maxiter=400)
    ref_bar = eig_power(K, xbar, -0.5)
    assert np.linalg.norm(bbar - ref_bar) / np.linalg.norm(ref_bar) < 1e-3


def test_deflated_vjp_finite_differences_through_a_held_matrix():
    # The backward pass through the deflated matrix (reused from the forward result) against
    # central differences of the forward, for B and for the matrix entries along a symmetric
    # direction E.
    rng = np.random.default_rng(34)
    x = rng.uniform(0, 1, (40, 1))
    K0 = 1.1 * np.exp(-0.5 * (x - x.T) ** 2 / 0.3**2)
    Bm = rng.standard_normal((40, 2))
    xbar = rng.standard_normal((40, 2))
    E = rng.standard_normal((40, 40))
    E = 1e-3 * (E + E.T) / np.linalg.norm(E + E.T, 2)  # small against lambda_min = 1e-3: the
    opts = dict(num_quad=40, rtol=1e-12, maxiter=300, deflate=16)  # differences stay linear

    def op_at(t):
        return AddedDiag(Dense(K0 + t * E, symmetric=True), Diagonal(np.asarray(1e-3), 40))

    def value(t, Bm_):
        return float(np.sum(xbar * inv_sqrt_matmul(op_at(t), Bm_, **opts).x))

    res = inv_sqrt_matmul(op_at(0.0), Bm, **opts)
    assert res.num_deflated >= 3 and type(res.complement).__name__ == "Dense"
    bbar, g = inv_sqrt_matmul_vjp(res, op_at(0.0), Bm, xbar, rtol=1e-12, maxiter=300)
    check_grad(lambda b: value(0.0, b), Bm, bbar, name="B")
    check_grad(lambda t: value(float(t), Bm), np.array(0.0),
               np.array(np.sum(g["operator"]["A"] * E)), name="E direction")


@pytest.mark.parametrize("deflate", [0, 32])
def test_deferred_solves_match_dense_shifted_solves(deflate):
    """Without a workspace the forward forms x from the Lanczos basis directly and the
    per-shift solves only when asked (a backward pass): both against dense solves."""
    from gpnum.linalg import Workspace
    from gpnum.linalg._ciq_solves import _DeferredSolves

    m, k = 200, 16
    K = kernel_matrix("matern52", m, 1e4, seed=43)
    Bm = np.random.default_rng(44).standard_normal((m, k))
    res = inv_sqrt_matmul(K, Bm, rtol=1e-10, maxiter=400, deflate=deflate)
    assert isinstance(res._solves, _DeferredSolves)
    shifts, weights = (B.to_numpy(a) for a in (res.shifts, res.weights))
    dense = np.stack([np.linalg.solve(K + s * np.eye(m), Bm) for s in shifts])
    scale = np.abs(dense).max(axis=(1, 2))[:, None, None]
    np.testing.assert_array_less(np.abs(res.solves - dense) / scale, 1e-6)
    np.testing.assert_allclose(res.x, np.tensordot(weights, dense, axes=1), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(res.x, eig_power(K, Bm, -0.5), rtol=1e-5, atol=1e-8)
    # with a workspace the solves are formed at once (the basis is the workspace's)
    shared = inv_sqrt_matmul(K, Bm, rtol=1e-10, maxiter=400, deflate=deflate,
                             workspace=Workspace())
    assert not isinstance(shared._solves, _DeferredSolves)
    np.testing.assert_allclose(shared.solves, res.solves, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fold", [False, True])
def test_deflated_solves_with_a_workspace_match_dense_shifted_solves(monkeypatch, fold):
    """With a workspace the deflated per-shift solves are assembled in msMINRES's layout (the
    scale folded into the coefficients, W D added by blocks of columns), or, when msMINRES
    folds its basis into running solutions (``max_basis_bytes`` exceeded), shift by shift:
    both against dense solves, with columns of very different norms."""
    import functools

    import gpnum.linalg._ciq_solves as ciq_solves
    from gpnum.linalg import Workspace, msminres

    if fold:
        monkeypatch.setattr(ciq_solves, "msminres", functools.partial(
            msminres, max_basis_bytes=3 * 8 * 200 * 40))
    m, k = 200, 40
    K = kernel_matrix("matern52", m, 1e4, seed=45)
    Bm = np.random.default_rng(46).standard_normal((m, k)) * np.logspace(-3, 3, k)
    res = inv_sqrt_matmul(K, Bm, rtol=1e-10, maxiter=400, deflate=32, workspace=Workspace())
    assert res.num_deflated >= 4 and res.num_iter > 3
    shifts = B.to_numpy(res.shifts)
    dense = np.stack([np.linalg.solve(K + s * np.eye(m), Bm) for s in shifts])
    scale = np.abs(dense).max(axis=1, keepdims=True)  # per shift and column
    np.testing.assert_array_less(np.abs(res.solves - dense) / scale, 1e-6)
    np.testing.assert_allclose(res.x, eig_power(K, Bm, -0.5), rtol=1e-5,
                               atol=1e-8 * np.abs(Bm).max())


def _perturbed_points(m, lengthscale, jitter, seed, shift):
    """``_matern52_points`` with every point moved by ``shift`` in a random direction: the
    next matrix of a training loop that moves the inducing points."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(m, 2))
    x2 = x + shift * rng.standard_normal((m, 2))
    out = []
    for pts in (x, x2):
        r = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)) / lengthscale
        K = (1 + np.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-np.sqrt(5) * r)
        out.append((K + jitter * np.eye(m),
                    AddedDiag(Dense(K, symmetric=True), Diagonal(np.asarray(jitter), m))))
    return out


@pytest.mark.parametrize("shift", [0.0, 3e-3])
def test_deflation_search_warm_started_from_a_nearby_operator(shift):
    # A training loop's next K_ZZ: the search starts from the previous one's Ritz vectors
    # and runs at least its rounds while they keep pairs. Its pairs are orthonormal (no
    # direction split off twice, although the start holds directions that the earlier search
    # found in a later round and this one may find in its first), there are more of them
    # than a cold search finds, and the result is as accurate as a cold search's, against
    # eigh.
    from gpnum.ciq import SearchStart

    m, k = 800, 256
    (K1, op1), (K2, op2) = _perturbed_points(m, 0.1, 1e-4, seed=12, shift=shift)
    Bm = np.random.default_rng(13).standard_normal((m, k))
    first = inv_sqrt_matmul(op1, Bm, rtol=1e-3, maxiter=400)
    start = first.search_start
    assert isinstance(start, SearchStart) and start.rounds >= 2
    assert start.vectors.shape == (m, first.deflation_products // 5)
    warm = inv_sqrt_matmul(op2, Bm, rtol=1e-3, maxiter=400, deflate_start=start)
    cold = inv_sqrt_matmul(op2, Bm, rtol=1e-3, maxiter=400)
    assert warm.search_start.rounds >= 2
    W = warm.deflation[1]
    assert np.abs(W.T @ W - np.eye(W.shape[1])).max() < 1e-8
    assert warm.num_deflated >= cold.num_deflated
    ref = eig_power(K2, Bm, -0.5)
    for res in (warm, cold):
        assert res.info == 0
        assert np.linalg.norm(res.x - ref) / np.linalg.norm(ref) < 3e-3


def test_top_eigenpairs_from_a_start_block():
    # Started from exact eigenvectors, the search returns them with no subspace iteration;
    # a narrower start is completed with Gaussian columns, a wider one cut to the block.
    from gpnum.linalg import top_eigenpairs

    K = kernel_matrix("matern52", 120, 1e6, seed=47)
    w, V = np.linalg.eigh(K)
    theta, W, resid = top_eigenpairs(K, 10, power_iters=0, start=V[:, ::-1][:, :10])
    np.testing.assert_allclose(theta, w[::-1][:10], rtol=1e-12)
    assert np.all(resid < 1e-12 * w[-1])
    for cols in (4, 30):
        theta, _, _ = top_eigenpairs(K, 10, power_iters=0, start=V[:, ::-1][:, :cols])
        assert theta.shape == (10,)
        np.testing.assert_allclose(theta[:4], w[::-1][:4], rtol=1e-12)
    with pytest.raises(ShapeError, match="start"):
        top_eigenpairs(K, 10, start=V[:50, :10])


def test_deflate_start_errors():
    from gpnum.ciq import SearchStart

    K = kernel_matrix("rbf", 300, 1e4)
    b = np.ones((300, 16))
    with pytest.raises(TypeError, match="deflate_start: expected a SearchStart"):
        inv_sqrt_matmul(K, b, deflate_start=np.ones((300, 10)))
    with pytest.raises(ShapeError, match="deflate_start"):
        inv_sqrt_matmul(K, b, deflate_start=SearchStart(np.ones((200, 10)), 1))


@pytest.mark.parametrize("deflate", [0, 16])
@pytest.mark.parametrize("shared", [False, True])
def test_vjp_in_factored_form_matches_the_dense_frechet_derivative(deflate, shared):
    # A right-hand side in the span of few eigenvectors: the forward's Krylov basis is two
    # vectors long, so the backward forms the K cotangent from that basis and the deflated
    # pairs (never the per-shift forward solves), with a workspace (the basis copied out of
    # it) or without. Reference: the Daleckii-Krein formula for d<xbar, K^(-1/2) B>/dK,
    # V (F o V^T xbar B^T V) V^T with F the divided differences of lambda^(-1/2).
    from gpnum.linalg import Workspace
    from gpnum.linalg._ciq_solves import _DeferredSolves

    m, k = 60, 5
    K = kernel_matrix("matern52", m, 1e3, seed=48)
    lam, V = np.linalg.eigh(K)
    rng = np.random.default_rng(49)
    pick = [m - 1, m - 2, 20, 30] if deflate else [20, 30]  # leading pairs: split off
    Bm = V[:, pick] @ rng.standard_normal((len(pick), k))
    xbar = rng.standard_normal((m, k))
    op = Dense(K, symmetric=True)
    rtol = 1e-8 if deflate else 1e-11  # deflation accepts pairs to rtol / 10
    opts = dict(num_quad=40, rtol=rtol, maxiter=400, deflate=deflate)
    ws = Workspace() if shared else None
    res = inv_sqrt_matmul(op, Bm, workspace=ws, **opts)
    assert isinstance(res._solves, _DeferredSolves) and len(res._solves.coeffs) <= 6
    assert res.num_deflated >= (2 if deflate else 0)
    _, g = inv_sqrt_matmul_vjp(res, op, Bm, xbar, rtol=rtol, maxiter=400, workspace=ws)
    f = lam ** -0.5
    dl = lam[:, None] - lam[None, :]
    same = np.abs(dl) < 1e-12 * lam.max()
    F = np.where(same, -0.5 * lam[:, None] ** -1.5, (f[:, None] - f[None, :]) / np.where(same, 1.0, dl))
    ref = V @ (F * (V.T @ xbar @ Bm.T @ V)) @ V.T
    got = g["A"]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e3 * rtol * np.abs(ref).max())
    # and the forward solves formed afterwards still match dense solves
    dense = np.stack([np.linalg.solve(K + s * np.eye(m), Bm) for s in B.to_numpy(res.shifts)])
    np.testing.assert_allclose(res.solves, dense, rtol=0, atol=1e3 * rtol * np.abs(dense).max())
    if deflate:
        return  # the pairs are accepted at rtol / 10 = 1e-9: too coarse for differences
    # and the factored gradient against central differences of the forward along a symmetric
    # direction E (small against lambda_min, so that the differences stay linear)
    E = rng.standard_normal((m, m))
    E = 1e-3 * lam[0] * (E + E.T) / np.linalg.norm(E + E.T, 2)

    def value(t):
        res_t = inv_sqrt_matmul(Dense(K + float(t) * E, symmetric=True), Bm, num_quad=40,
                                rtol=1e-13, maxiter=400, deflate=0)
        return float(np.sum(xbar * res_t.x))

    # (a step of 0.01 E: E is already small, and a 1e-6 step would drown in rounding)
    check_grad(value, np.array(0.0), np.array(np.sum(got * E)), eps=1e-2, name="E direction")


@pytest.mark.parametrize("deflate", [0, 16])
def test_vjp_from_both_bases_on_every_backend(to_xp, xp, dtype, deflate, monkeypatch):
    # A short forward basis with a workspace: the backward keeps its own basis on the
    # workspace's memory and forms the K cotangent from the two bases (and the deflated
    # pairs), never a (q, m, k) array; against the Daleckii-Krein derivative and K^(-1/2) xbar,
    # on every backend.
    from gpnum.linalg import Workspace
    from gpnum.linalg._ciq_solves import _DeferredSolves

    used = []
    plain = _DeferredSolves.factors_against
    monkeypatch.setattr(_DeferredSolves, "factors_against",
                        lambda self, back, omega: used.append(1) or plain(self, back, omega))
    f32 = dtype == xp.float32
    m, k = 60, 5
    K = kernel_matrix("matern52", m, 1e3, seed=52)
    lam, V = np.linalg.eigh(K)
    rng = np.random.default_rng(53)
    pick = [m - 1, m - 2, 20, 30] if deflate else [20, 30]
    Bm = V[:, pick] @ rng.standard_normal((len(pick), k))
    xbar = rng.standard_normal((m, k))
    rtol = 1e-4 if f32 else 1e-8
    ws = Workspace()
    op = Dense(to_xp(K), symmetric=True)
    res = inv_sqrt_matmul(op, to_xp(Bm), num_quad=30, rtol=rtol, maxiter=400, deflate=deflate,
                          workspace=ws)
    bbar, g = inv_sqrt_matmul_vjp(res, op, to_xp(Bm), to_xp(xbar), rtol=rtol, maxiter=400,
                                  workspace=ws)
    assert used, "the backward did not take the two-bases route"
    ref_bar = eig_power(K, xbar, -0.5)
    np.testing.assert_allclose(B.to_numpy(bbar), ref_bar, rtol=0,
                               atol=100 * rtol * np.abs(ref_bar).max())
    f = lam ** -0.5
    dl = lam[:, None] - lam[None, :]
    same = np.abs(dl) < 1e-12 * lam.max()
    F = np.where(same, -0.5 * lam[:, None] ** -1.5, (f[:, None] - f[None, :]) / np.where(same, 1.0, dl))
    ref = V @ (F * (V.T @ xbar @ Bm.T @ V)) @ V.T
    np.testing.assert_allclose(B.to_numpy(g["A"]), ref, rtol=0,
                               atol=(1e4 if f32 else 1e3) * rtol * np.abs(ref).max())


@pytest.mark.parametrize("cols", [40, 100])
def test_deflation_warm_start_narrower_than_the_block_on_every_backend(to_xp, xp, dtype, cols):
    # A start with fewer vectors than the search block (a smaller earlier search): under half
    # the block the round starts cold, above it the rest of the block is Gaussian; either way
    # the result matches eigh, on every backend (array_api_strict refuses slices past an axis).
    from gpnum.ciq import SearchStart

    f32 = dtype == xp.float32
    m, k = 300, 16
    K = kernel_matrix("matern52", m, 1e4, seed=50)
    Bm = np.random.default_rng(51).standard_normal((m, k))
    rtol = 1e-3 if f32 else 1e-6
    first = inv_sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol, maxiter=400)
    start = SearchStart(first.search_start.vectors[:, :cols], 1)
    warm = inv_sqrt_matmul(to_xp(K), to_xp(Bm), rtol=rtol, maxiter=400, deflate_start=start)
    assert warm.info == 0 and warm.num_deflated > 0
    ref = eig_power(K, Bm, -0.5)
    err = np.linalg.norm(B.to_numpy(warm.x) - ref) / np.linalg.norm(ref)
    assert err < 20 * rtol, err


def test_gpnum_ciq_names_the_linalg_functions():
    # gpnum.ciq is kept as a thin re-export of CIQ's home, gpnum.linalg.
    import gpnum.ciq
    import gpnum.linalg

    assert set(gpnum.ciq.__all__) <= set(gpnum.linalg.__all__)
    for name in gpnum.ciq.__all__:
        assert getattr(gpnum.ciq, name) is getattr(gpnum.linalg, name), name
