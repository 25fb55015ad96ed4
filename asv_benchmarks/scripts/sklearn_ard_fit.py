"""GPRegressor against scikit-learn's GaussianProcessRegressor: an ARD Matern-5/2 kernel with a
learned noise on n synthetic points in 4 dimensions (issue 48), side by side in one process.

    PYTHONPATH=. python asv_benchmarks/scripts/sklearn_ard_fit.py 500 1000 [3000] [restarts=0]

Same model (scikit-learn: ConstantKernel * Matern(nu=2.5, ARD) + WhiteKernel; gpnum:
Matern52(ARD) with learn_noise=True), same start (variance 1, lengthscales 1, noise 0.01), same
optimiser rule (L-BFGS-B on log parameters within (1e-5, 1e5): gpnum's
optimizer="fmin_l_bfgs_b"), normalize_y=True on both, the same number of restarts. Prints each
fit's time, the log marginal likelihood reached and the ratio of the times.
BLAS threads are as the environment sets them (say which when reporting).
"""

import sys
import time
import warnings

import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process import kernels as sk

from gpnum.kernels import Matern52
from gpnum.sklearn import GPRegressor

sys.path.insert(0, "asv_benchmarks")
from benchmarks.bench_exact_fit import _ard_data  # the benchmark's data

args = [int(a) for a in sys.argv[1:] if not a.startswith("restarts=")]
restarts = next((int(a.split("=")[1]) for a in sys.argv[1:] if a.startswith("restarts=")), 0)
warnings.simplefilter("ignore")
for n in args or [500, 1000]:
    X, y = _ard_data(n)
    d = X.shape[1]
    t = time.perf_counter()
    ours = GPRegressor(Matern52(lengthscale=np.ones(d), variance=1.0, dtype="float64"),
                       alpha=1e-2, learn_noise=True, normalize_y=True,
                       optimizer="fmin_l_bfgs_b", n_restarts_optimizer=restarts,
                       random_state=0).fit(X, y)
    t_ours = time.perf_counter() - t
    kern = (sk.ConstantKernel(1.0, (1e-5, 1e5)) * sk.Matern(np.ones(d), (1e-5, 1e5), nu=2.5)
            + sk.WhiteKernel(1e-2, (1e-5, 1e5)))
    t = time.perf_counter()
    theirs = GaussianProcessRegressor(kern, normalize_y=True, n_restarts_optimizer=restarts,
                                      random_state=0).fit(X, y)
    t_theirs = time.perf_counter() - t
    print(f"n={n} restarts={restarts}: gpnum {t_ours:.2f} s LML "
          f"{ours.log_marginal_likelihood_value_:.4f} ({ours.n_iter_} it); scikit-learn "
          f"{t_theirs:.2f} s LML {theirs.log_marginal_likelihood_value_:.4f}; "
          f"speed-up {t_theirs / t_ours:.2f}x", flush=True)
