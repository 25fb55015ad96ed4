"""GPR(solver="ski") predictions and samples against a dense GP with the SKI kernel
``k(x, x') = w(x)^T K_UU w(x')`` (issue 49).

The reference builds the cubic convolution weights (Keys 1981, a = -1/2) and ``K_UU`` in NumPy
from their formulas, then conditions densely. The model's prediction solve runs at a tight
tolerance and LOVE with as many Lanczos steps as points, so means and variances agree to
rounding; posterior samples are checked by their Monte Carlo moments.
"""

import numpy as np
import pytest
from test_linalg_cases import torch_single_thread  # noqa: F401

from gpnum import backend as B
from gpnum.kernels import RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

TIGHT = {"predict_rtol": 1e-13, "maxiter": 400, "precond_rank": 3, "love_rank": 200,
         "variance_checks": 0}
LENGTHSCALES, VARIANCE, NOISE, MEAN, G = np.array([0.5, 0.4]), 1.3, 0.05, 0.2, 12


def host(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


def data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0.0, 2.0, n), rng.uniform(-1.0, 1.0, n)])
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def keys(s):
    t = np.abs(s)
    near = 1.5 * t ** 3 - 2.5 * t ** 2 + 1.0
    far = -0.5 * t ** 3 + 2.5 * t ** 2 - 4.0 * t + 2.0
    return np.where(t <= 1.0, near, np.where(t < 2.0, far, 0.0))


def reference(X, Xtrain):
    """Dense ``W`` (rows of X) on the grid covering Xtrain, and the grid's ``K_UU``."""
    axes, Ws = [], []
    for j in range(2):
        lo, hi = Xtrain[:, j].min(), Xtrain[:, j].max()
        h = (hi - lo) / (G - 3)
        a = lo - h + h * np.arange(G)
        axes.append(a)
        Ws.append(keys((X[:, j:j + 1] - a[None, :]) / h))            # (n, G)
    W = (Ws[0][:, :, None] * Ws[1][:, None, :]).reshape(X.shape[0], -1)
    U = np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    D = (U[:, None, :] - U[None, :, :]) / LENGTHSCALES
    return W, VARIANCE * np.exp(-0.5 * np.sum(D * D, axis=-1))


def rbf(A, C):
    D = (A[:, None, :] - C[None, :, :]) / LENGTHSCALES
    return VARIANCE * np.exp(-0.5 * np.sum(D * D, axis=-1))


def model(to_xp, xp, dtype, device, X, y, **cg):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    return GPR(RBF(lengthscale=list(LENGTHSCALES), variance=VARIANCE, **kw),
               Gaussian(variance=NOISE, **kw), to_xp(X), to_xp(y), mean=MEAN, solver="ski",
               grid_size=G, cg_options={**TIGHT, **cg})


def dense_posterior(X, y, Xs, shift):
    W, K_UU = reference(X, X)
    Ws, _ = reference(Xs, X)
    Ky = W @ K_UU @ W.T + shift * np.eye(X.shape[0])
    Kx = Ws @ K_UU @ W.T
    mean = MEAN + Kx @ np.linalg.solve(Ky, y - MEAN)
    cov = Ws @ K_UU @ Ws.T - Kx @ np.linalg.solve(Ky, Kx.T)
    return mean, cov


def test_ski_predictions_match_the_dense_ski_gp(to_xp, xp, dtype, device):
    X, y = data()
    Xs = np.column_stack([np.linspace(0.1, 1.9, 7), np.linspace(0.8, -0.9, 7)])
    Xs = np.clip(Xs, X.min(0), X.max(0))
    m = model(to_xp, xp, dtype, device, X, y)
    mean, cov = dense_posterior(X, y, Xs, NOISE + float(m.jitter))
    tol = 1e-8 if dtype == xp.float64 else 2e-4
    mu, var = m.predict_f(to_xp(Xs))
    assert mu.dtype == dtype and var.dtype == dtype
    np.testing.assert_allclose(host(mu), mean, rtol=tol, atol=tol)
    np.testing.assert_allclose(host(var), np.diag(cov), rtol=tol, atol=tol)
    mu_full, full = m.predict_f(to_xp(Xs), full_cov=True)
    np.testing.assert_allclose(host(mu_full), mean, rtol=tol, atol=tol)
    np.testing.assert_allclose(host(full), cov, rtol=tol, atol=tol)


def test_ski_predictions_outside_the_grid_take_exact_cross_covariances(to_xp, xp, dtype, device):
    """Beyond the training inputs' range (where the grid does not interpolate): the exact
    kernel's ``k(X_*, X)`` and ``k(x_*, x_*)`` with ``K_y`` the SKI matrix."""
    if dtype != xp.float64:
        pytest.skip("float64")
    X, y = data()
    Xs = np.array([[2.3, 0.0], [0.5, -1.4], [1.0, 0.2]])
    m = model(to_xp, xp, dtype, device, X, y)
    W, K_UU = reference(X, X)
    Ky = W @ K_UU @ W.T + (NOISE + float(m.jitter)) * np.eye(X.shape[0])
    Kx = rbf(Xs, X)
    mu, var = m.predict_f(to_xp(Xs))
    np.testing.assert_allclose(host(mu), MEAN + Kx @ np.linalg.solve(Ky, y - MEAN), rtol=1e-8,
                               atol=1e-8)
    want = VARIANCE - np.sum(Kx * np.linalg.solve(Ky, Kx.T).T, axis=1)
    np.testing.assert_allclose(host(var), want, rtol=1e-8, atol=1e-8)


def test_ski_sample_f_moments_match_the_dense_ski_posterior(to_xp, xp, dtype, device):
    """Sample means within 5 Monte Carlo standard errors of the dense SKI posterior's, sample
    covariances within 5 of theirs (the standard error of a covariance entry from 2,000
    draws, sqrt((S_ii S_jj + S_ij^2) / N))."""
    X, y = data(30, seed=1)
    Xs = np.array([[0.3, 0.1], [1.1, -0.5], [1.15, -0.45], [1.7, 0.6]])
    m = model(to_xp, xp, dtype, device, X, y, predict_rtol=1e-10)
    num = 2000
    S = host(m.sample_f(to_xp(Xs), num, seed=3))
    assert S.shape == (num, 4)
    mean, cov = dense_posterior(X, y, Xs, NOISE + float(m.jitter))
    assert np.all(np.abs(S.mean(0) - mean) < 5.0 * np.sqrt(np.diag(cov) / num))
    d = np.diag(cov)
    se = np.sqrt((d[:, None] * d[None, :] + cov ** 2) / num)
    assert np.all(np.abs(np.cov(S.T) - cov) < 5.0 * se)
    # the draws follow the SKI posterior's correlation, not independent noise: the two close
    # points are strongly correlated in both
    r = np.corrcoef(S.T)[1, 2]
    assert abs(r - cov[1, 2] / np.sqrt(d[1] * d[2])) < 0.05
