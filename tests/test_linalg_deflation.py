"""Leading eigenpairs for deflation (gpnum.linalg.top_eigenpairs)."""

import numpy as np
import pytest

from gpnum import backend as B


def test_top_eigenpairs_against_eigh(to_xp, xp, dtype):
    from gpnum.linalg import top_eigenpairs

    rng = np.random.default_rng(21)
    Q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    w = np.exp(-np.arange(60) / 2.0)  # fast decay, as kernel matrices have
    K = (Q * w) @ Q.T
    theta, W, resid = top_eigenpairs(to_xp(K), 12, power_iters=3, seed=1)
    theta, W, resid = (B.to_numpy(a) for a in (theta, W, resid))
    tol = 1e-4 if dtype == xp.float32 else 1e-10
    assert np.all(np.diff(theta) <= 0)
    np.testing.assert_allclose(theta[:4], w[:4], rtol=tol)
    np.testing.assert_allclose(W.T @ W, np.eye(12), atol=50 * tol)
    # the reported residuals are the true ones
    np.testing.assert_allclose(resid, np.linalg.norm(K @ W - W * theta, axis=0),
                               rtol=1e-2, atol=50 * tol)
    with pytest.raises(ValueError, match="block_size"):
        top_eigenpairs(to_xp(K), 61)


def test_top_eigenpairs_from_a_narrower_or_wider_start_on_every_backend(to_xp, xp, dtype):
    # A start block with fewer columns than the block is completed with Gaussian ones, a wider
    # one is cut (slices within the axis: the array API leaves longer ones unspecified, and
    # array_api_strict refuses them); started from the leading eigenvectors the leading
    # pairs come back exactly.
    from gpnum.linalg import top_eigenpairs

    rng = np.random.default_rng(22)
    Q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    w = np.exp(-np.arange(60) / 2.0)
    K = (Q * w) @ Q.T
    tol = 1e-4 if dtype == xp.float32 else 1e-10
    for cols in (5, 12, 20):
        theta, W, _ = top_eigenpairs(to_xp(K), 12, power_iters=1, start=to_xp(Q[:, :cols]))
        theta = B.to_numpy(theta)
        assert theta.shape == (12,) and tuple(W.shape) == (60, 12)
        np.testing.assert_allclose(theta[:5], w[:5], rtol=tol)


def test_spectral_preconditioner_speeds_up_pcg_without_changing_the_answer(to_xp, xp, dtype):
    from gpnum.linalg import Dense, SpectralPreconditioner, pcg

    rng = np.random.default_rng(22)
    n = 120
    U = rng.standard_normal((n, 40))
    P = np.eye(n) + (U * np.exp(-np.arange(40) / 4.0) * 1e3) @ U.T / 40  # I + decaying terms
    Bm = rng.standard_normal((n, 3))
    ref = np.linalg.solve(P, Bm)
    f32 = dtype == xp.float32
    rtol = 1e-5 if f32 else 1e-10
    op = Dense(to_xp(P), symmetric=True)
    M = SpectralPreconditioner.from_operator(op, 30)
    # M is symmetric positive definite: M P has eigenvalues near 1 on the leading directions
    Md = B.to_numpy(M @ to_xp(np.eye(n)))
    np.testing.assert_allclose(Md, Md.T, atol=1e-5 if f32 else 1e-12)
    assert np.linalg.eigvalsh(0.5 * (Md + Md.T))[0] > 0
    plain = pcg(op, to_xp(Bm), rtol=rtol, maxiter=2000)
    pre = pcg(op, to_xp(Bm), rtol=rtol, maxiter=2000, M=M)
    assert pre.info == 0 and pre.num_iter < plain.num_iter / 2
    tol = 1e-3 if f32 else 1e-8
    np.testing.assert_allclose(B.to_numpy(pre.x), ref, rtol=tol, atol=tol)


def test_spectral_preconditioner_warm_started_from_a_nearby_operator(to_xp, xp, dtype):
    # A natural-gradient step moves the precision a fraction gamma towards another: one
    # subspace iteration from the previous preconditioner's W finds the new leading pairs
    # (against eigh) where one from Gaussian vectors does not, and PCG needs fewer iterations.
    from gpnum.linalg import Dense, SpectralPreconditioner, pcg

    rng = np.random.default_rng(24)
    n = 150
    lam = 1e4 * np.exp(-np.arange(60) / 4.0)  # I + decaying terms, like a precision

    def precision(V):
        return np.eye(n) + (V * lam) @ V.T

    V1 = np.linalg.qr(rng.standard_normal((n, 60)))[0]
    V2 = np.linalg.qr(V1 + 0.05 * rng.standard_normal((n, 60)))[0]  # a nearby one
    P1, P2 = precision(V1), precision(V2)
    Bm = rng.standard_normal((n, 3))
    f32 = dtype == xp.float32
    rtol = 1e-4 if f32 else 1e-10
    old = SpectralPreconditioner.from_operator(Dense(to_xp(P1), symmetric=True), 40)
    op2 = Dense(to_xp(P2), symmetric=True)
    warm = SpectralPreconditioner.from_operator(op2, 40, power_iters=1, start=old.W)
    cold = SpectralPreconditioner.from_operator(op2, 40, power_iters=1)
    w = np.linalg.eigvalsh(P2)[::-1]
    theta = 1.0 / (B.to_numpy(warm._scale) + 1.0 / warm.sigma)
    np.testing.assert_allclose(theta[:10], w[:10], rtol=1e-3 if f32 else 1e-6)
    runs = {name: pcg(op2, to_xp(Bm), rtol=rtol, maxiter=2000, M=M)
            for name, M in (("warm", warm), ("cold", cold))}
    # (float32: rounding decides the last iterations, not the preconditioner)
    assert runs["warm"].info == 0 and (runs["warm"].num_iter <= runs["cold"].num_iter if f32
                                       else runs["warm"].num_iter < runs["cold"].num_iter)
    x = B.to_numpy(runs["warm"].x).astype(np.float64)
    assert np.linalg.norm(P2 @ x - Bm) <= 10 * rtol * np.linalg.norm(Bm)


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("decades", [4, 7.5, 10, 14])
def test_orthonormal_basis_of_ill_conditioned_blocks(to_xp, xp, dtype, exact, decades):
    # Singular values from 1 to 1e-4 or 10^-7.5 (unshifted CholeskyQR2 in float64, near the
    # edge of where it applies for the second), 1e-10 or 1e-14 (an unshifted pass fails and a
    # shifted one is needed; float32: Householder).
    from gpnum.linalg._deflation import _orthonormal_basis

    rng = np.random.default_rng(23)
    U, _ = np.linalg.qr(rng.standard_normal((300, 40)))
    V, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    Y = (U * np.logspace(0, -decades, 40)) @ V.T
    Q = B.to_numpy(_orthonormal_basis(xp, to_xp(Y), exact=exact)).astype(np.float64)
    f32 = dtype == xp.float32
    # The span: Y's part outside span(Q), relative to Y.
    Qo, _ = np.linalg.qr(Q)
    assert np.linalg.norm(Y - Qo @ (Qo.T @ Y)) / np.linalg.norm(Y) < (1e-5 if f32 else 1e-12)
    if f32 and decades > 10:
        return  # float32 cannot hold the smallest directions
    s = np.linalg.svd(Q, compute_uv=False)
    if exact or f32:
        assert np.abs(Q.T @ Q - np.eye(40)).max() < (1e-5 if f32 else 1e-13)
    else:  # one shifted pass: better conditioned than Y by orders of magnitude, not orthonormal
        assert s[0] / s[-1] < max(10.0, 1e-4 * 10.0**decades)


def test_orthonormal_basis_of_a_rank_deficient_block():
    # Repeated and zero columns: the Cholesky factorisations fail, Householder QR takes over.
    from gpnum.linalg._deflation import _orthonormal_basis

    rng = np.random.default_rng(24)
    Y = rng.standard_normal((100, 10))
    Y[:, 5] = Y[:, 2]
    Y[:, 7] = 0.0
    Q = _orthonormal_basis(np, Y, exact=True)
    np.testing.assert_allclose(Q.T @ Q, np.eye(10), atol=1e-13)
    assert np.linalg.norm(Y - Q @ (Q.T @ Y)) < 1e-12 * np.linalg.norm(Y)


@pytest.mark.parametrize("n", [1, 64, 65, 203])
def test_lower_inverse_against_numpy(to_xp, xp, dtype, n):
    from gpnum.linalg._deflation import _lower_inverse

    rng = np.random.default_rng(25)
    A = rng.standard_normal((n, n + 5))
    L = np.linalg.cholesky(A @ A.T / n + 0.1 * np.eye(n))  # a Gram factor, as in the use
    got = B.to_numpy(_lower_inverse(xp, to_xp(L))).astype(np.float64)
    ref = np.linalg.inv(L)
    tol = 1e-5 if dtype == xp.float32 else 1e-13
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())
    assert np.all(np.triu(got, 1) == 0.0)


def test_top_eigenpairs_take_the_last_cholesky_qr_pass_into_rayleigh_ritz(to_xp, xp, dtype,
                                                                           monkeypatch):
    # The exact basis arrives as Q T with the last pass's T unapplied; the Ritz pairs must be
    # those of the orthonormal basis Q T: W orthonormal to rounding, values against eigh.
    import gpnum.linalg._deflation as deflation

    rng = np.random.default_rng(26)
    U, _ = np.linalg.qr(rng.standard_normal((200, 200)))
    w = np.exp(-np.arange(200) / 3.0)  # block condition ~1e5: one pass is far from orthonormal
    K = (U * w) @ U.T
    seen = []
    real = deflation._orthonormal_factors

    def spy(xp_, Y):
        out = real(xp_, Y)
        seen.append(out[1] is not None)
        return out

    monkeypatch.setattr(deflation, "_orthonormal_factors", spy)
    theta, W, resid = (B.to_numpy(a) for a in
                       deflation.top_eigenpairs(to_xp(K), 40, power_iters=3, seed=2))
    f32 = dtype == xp.float32
    assert seen == [not f32]  # float64: Cholesky QR, whose last pass is T
    tol = 1e-4 if f32 else 1e-12
    np.testing.assert_allclose(W.T @ W, np.eye(40), atol=10 * tol)
    # Rayleigh-Ritz in that basis: W^T K W is diagonal with the Ritz values
    np.testing.assert_allclose(W.T @ K @ W, np.diag(theta), atol=10 * tol)
    np.testing.assert_allclose(theta[:10], w[:10], rtol=tol)
    np.testing.assert_allclose(resid, np.linalg.norm(K @ W - W * theta, axis=0),
                               rtol=1e-2, atol=10 * tol)
