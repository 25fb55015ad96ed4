"""GPR.sample_f: pathwise posterior samples (Wilson et al. 2020) against the dense posterior.

The reference is the exact posterior mean and covariance in dense NumPy; the samples' mean and
covariance must lie within 4.5 Monte Carlo standard errors of it, entry by entry (the standard
error of a sample covariance entry is sqrt((C_ii C_jj + C_ij^2) / N)). Both solvers (the
Cholesky joint prior draw and the factorisation-free CIQ draw plus batched PCG), every backend,
float32 and float64; the same seed gives the same samples.
"""

import numpy as np
import pytest

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

LS = np.array([0.7, 1.1])
VAR, S2, C = 1.2, 0.05, 0.1
NUM_SE = 4.5


def matern32_np(X1, X2):
    r = np.sqrt(np.maximum((((X1[:, None, :] - X2[None, :, :]) / LS) ** 2).sum(-1), 0.0))
    s = np.sqrt(3.0) * r
    return VAR * (1.0 + s) * np.exp(-s)


def problem(n=30, m=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    # new points inside the data (small posterior variance) and outside (near the prior)
    Xs = np.concatenate([X[:1] + 0.05, rng.uniform(-3.0, 3.0, (m - 1, 2))])
    Ky = matern32_np(X, X) + S2 * np.eye(n)
    Ks = matern32_np(Xs, X)
    mean = C + Ks @ np.linalg.solve(Ky, y - C)
    cov = matern32_np(Xs, Xs) - Ks @ np.linalg.solve(Ky, Ks.T)
    return X, y, Xs, mean, cov


def build(X, y, xp, dtype, device, to_xp, solver):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    return GPR(Matern32(lengthscale=LS, variance=VAR, **kw), Gaussian(variance=S2, **kw),
               to_xp(X), to_xp(y), mean=C, solver=solver,
               cg_options={"predict_rtol": 1e-10, "precond_rank": 10})


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_samples_match_the_dense_posterior(xp, dtype, device, to_xp, solver):
    X, y, Xs, mean, cov = problem()
    model = build(X, y, xp, dtype, device, to_xp, solver)
    num = 2500
    S = model.sample_f(to_xp(Xs), num, seed=3)
    assert S.shape == (num, Xs.shape[0]) and S.dtype == dtype
    S = np.asarray(B.to_numpy(S), dtype=np.float64)
    se_mean = np.sqrt(np.diag(cov) / num)
    assert np.all(np.abs(S.mean(0) - mean) < NUM_SE * se_mean), (S.mean(0), mean)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov ** 2) / num)
    emp = np.cov(S.T)
    assert np.all(np.abs(emp - cov) < NUM_SE * se_cov), (emp, cov)
    # the same seed, the same samples; another seed, others
    first = np.asarray(B.to_numpy(model.sample_f(to_xp(Xs), 20, seed=3)), dtype=np.float64)
    again = np.asarray(B.to_numpy(model.sample_f(to_xp(Xs), 20, seed=3)), dtype=np.float64)
    np.testing.assert_array_equal(again, first)
    other = np.asarray(B.to_numpy(model.sample_f(to_xp(Xs), 20, seed=4)), dtype=np.float64)
    assert not np.allclose(other, first)


def test_sample_f_errors():
    X, y, Xs, _, _ = problem(n=10, m=2)
    model = GPR(Matern32(lengthscale=LS), Gaussian(variance=S2), X, y)
    with pytest.raises(ValueError, match="num_samples"):
        model.sample_f(Xs, 0, seed=0)
    with pytest.raises(ValueError, match="num_samples"):
        model.sample_f(Xs, 2.5, seed=0)
    with pytest.raises(ShapeError, match="X: expected shape"):
        model.sample_f(Xs[:, :1], 3, seed=0)
    with pytest.raises(ValueError, match="jitter"):
        model.sample_f(Xs, 3, seed=0, jitter=-1.0)
    with pytest.raises(ValueError, match="rtol: expected a positive number"):
        model.sample_f(Xs, 3, seed=0, rtol=0.0)
