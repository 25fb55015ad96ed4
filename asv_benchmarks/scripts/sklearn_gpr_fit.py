"""gpnum.sklearn.GPRegressor vs scikit-learn's GaussianProcessRegressor: the time to fit.

Both fit the same model to the same rows: a scaled RBF kernel (variance, one lengthscale) and a
learned Gaussian noise variance (scikit-learn: ConstantKernel * RBF + WhiteKernel with
alpha=1e-10; gpnum: RBF with learn_noise=True), from the same initial values (1, 1, 0.1), by
SciPy's L-BFGS-B on the log marginal likelihood with the same number of restarts. gpnum runs
it twice through its one driver (gpnum.optim.lbfgs, logarithms of the positive parameters, the
objective per data point): ``optimizer="fmin_l_bfgs_b"``, within scikit-learn's bounds
(1e-5, 1e5), and ``optimizer="lbfgs"``, unbounded. Printed for each: the fit time, L-BFGS-B iterations, objective
evaluations, the log marginal likelihood reached; then the time of one objective-and-gradient
evaluation on each side (the best of three) and the time ratios.

Usage (from the repository's top folder, so that this checkout's gpnum is imported)::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python asv_benchmarks/scripts/sklearn_gpr_fit.py \
        [n=3000] [restarts=0] [dataset=elevators] [gpnum optimizers=fmin_l_bfgs_b,lbfgs]

Both libraries call NumPy's and SciPy's BLAS, which are two OpenBLAS builds with a thread pool
each: on a shared machine their spinning threads contend, and the same fit took 1 s with one
thread and 7-50 s with the default (n = 500, measured here, loaded), so single-threaded BLAS
is the setting whose figures mean something there.

Rows are a random subset of the bundled data set's training part (standardised). Run on a quiet
machine for figures to quote; on a shared one say they are loaded.
"""

import os
import sys
import time

import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor, _gpr
from sklearn.gaussian_process import kernels as sk

import gpnum
from gpnum.kernels import RBF
from gpnum.models import GPR
from gpnum.sklearn import GPRegressor


def main(n=3000, restarts=0, dataset="elevators", optimizers=("fmin_l_bfgs_b", "lbfgs")):
    ds = gpnum.datasets.load(dataset, xp="numpy")
    rows = np.random.default_rng(0).permutation(ds.X_train.shape[0])[:n]
    X, y = np.asarray(ds.X_train)[rows], np.asarray(ds.y_train)[rows]

    # scikit-learn's L-BFGS-B result, read where it checks it (iterations and evaluations).
    seen = []
    check = _gpr._check_optimize_result

    def recording(solver, result, *args, **kwargs):
        seen.append((result.nit, result.nfev))
        return check(solver, result, *args, **kwargs)

    _gpr._check_optimize_result = recording

    # gpnum's evaluations of the objective and gradient (every L-BFGS-B trial point).
    evaluations = []
    objective_and_grad = GPR.objective_and_grad

    def counting(self, *args, **kwargs):
        evaluations.append(1)
        return objective_and_grad(self, *args, **kwargs)

    GPR.objective_and_grad = counting

    theirs = GaussianProcessRegressor(
        sk.ConstantKernel(1.0) * sk.RBF(1.0) + sk.WhiteKernel(0.1), alpha=1e-10,
        n_restarts_optimizer=restarts, random_state=0)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "the BLAS default")
    print(f"{dataset} n={n} d={X.shape[1]} restarts={restarts} (OPENBLAS_NUM_THREADS: {threads})")
    fits = {}
    for optimizer in optimizers:
        ours = GPRegressor(RBF(lengthscale=1.0, variance=1.0), alpha=0.1, learn_noise=True,
                           optimizer=optimizer, n_restarts_optimizer=restarts, random_state=0)
        evaluations.clear()
        t0 = time.perf_counter()
        ours.fit(X, y)
        fits[optimizer] = time.perf_counter() - t0
        print(f"  gpnum GPRegressor(optimizer={optimizer!r}) fit {fits[optimizer]:8.2f} s  "
              f"iterations {ours.n_iter_:4d}  evaluations {len(evaluations):4d}  "
              f"lml {ours.log_marginal_likelihood_value_:.6f}  ({ours.kernel_}, noise "
              f"{ours.noise_variance_:.4g})", flush=True)
    GPR.objective_and_grad = objective_and_grad

    t0 = time.perf_counter()
    theirs.fit(X, y)
    t_theirs = time.perf_counter() - t0
    nit = sum(r[0] for r in seen)
    nfev = sum(r[1] for r in seen)
    print(f"  scikit-learn GaussianProcessRegressor fit {t_theirs:8.2f} s  iterations {nit:4d}  "
          f"evaluations {nfev:4d}  lml {theirs.log_marginal_likelihood_value_:.6f}  "
          f"({theirs.kernel_})", flush=True)

    # One objective-and-gradient evaluation each, at the fitted values (best of three).
    model = ours.model_
    theta = theirs.kernel_.theta
    one_ours, one_theirs = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        model.log_marginal_likelihood_and_grad()
        one_ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        theirs.log_marginal_likelihood(theta, eval_gradient=True)
        one_theirs.append(time.perf_counter() - t0)
    print(f"  one evaluation: gpnum {min(one_ours):.3f} s, scikit-learn {min(one_theirs):.3f} s")
    for optimizer, t in fits.items():
        print(f"  fit time ratio scikit-learn / gpnum({optimizer}) {t_theirs / t:.2f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 3000, int(args[1]) if len(args) > 1 else 0,
         args[2] if len(args) > 2 else "elevators",
         tuple(args[3].split(",")) if len(args) > 3 else ("fmin_l_bfgs_b", "lbfgs"))
