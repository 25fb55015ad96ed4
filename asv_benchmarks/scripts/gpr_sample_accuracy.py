"""Accuracy of GPR.sample_f with solver="cg" against the exact posterior, by tolerance (issue 33).

Draws 8,000 pathwise samples at 5 points from a Matern-3/2 GP on n = 300 points (preconditioner
rank 20) and reports, per CG/CIQ tolerance, the largest distance of the sample mean from the
exact (dense NumPy) posterior mean in Monte Carlo standard errors, the same for the sample
covariance entries, and the largest relative error of the sample variances.

Usage (from the repository root; about a minute, run under nice):
    PYTHONPATH=. nice -n 5 python asv_benchmarks/scripts/gpr_sample_accuracy.py
"""

import sys

import numpy as np

import gpnum
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian

LS, VAR, S2, C = np.array([0.7, 1.1]), 1.2, 0.05, 0.1


def matern32(X1, X2):
    r = np.sqrt(np.maximum((((X1[:, None, :] - X2[None, :, :]) / LS) ** 2).sum(-1), 0.0))
    return VAR * (1.0 + np.sqrt(3.0) * r) * np.exp(-np.sqrt(3.0) * r)


def main(num=8000):
    rng = np.random.default_rng(3)
    X = rng.uniform(-2.0, 2.0, (300, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(300)
    Xs = np.concatenate([X[:1] + 0.05, rng.uniform(-3.0, 3.0, (4, 2))])
    Ky = matern32(X, X) + S2 * np.eye(300)
    Ks = matern32(Xs, X)
    mean = C + Ks @ np.linalg.solve(Ky, y - C)
    cov = matern32(Xs, Xs) - Ks @ np.linalg.solve(Ky, Ks.T)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov ** 2) / num)
    gp = gpnum.GPR(Matern32(lengthscale=LS, variance=VAR), Gaussian(variance=S2), X, y, mean=C,
                   solver="cg", cg_options={"precond_rank": 20})
    for rtol in (0.01, 1e-4):
        S = np.asarray(gp.sample_f(Xs, num, seed=0, rtol=rtol))
        z_mean = np.max(np.abs(S.mean(0) - mean) / np.sqrt(np.diag(cov) / num))
        z_cov = np.max(np.abs(np.cov(S.T) - cov) / se_cov)
        var_err = np.max(np.abs(S.var(0) / np.diag(cov) - 1.0))
        print(f"rtol {rtol}: mean within {z_mean:.2f} "
              f"standard errors, covariance within {z_cov:.2f}, variances within "
              f"{100 * var_err:.1f}%")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
