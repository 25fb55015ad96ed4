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
