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
