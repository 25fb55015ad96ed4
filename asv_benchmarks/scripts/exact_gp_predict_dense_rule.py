"""GPR(solver="cg").predict_f with default options on 13,500 rows of 26 inputs (issue 49's case:
K = 1.5 GB): the path the memory rule picks (dense: K formed once), against the blocked path
forced by dense_limit_mib=0, in one process.

Synthetic data (uniform inputs, a smooth function of a few of them plus noise); Matern-3/2 ARD
with lengthscales 3 (the inputs span [-1, 1]), noise 0.1, float64; 1,000 test points.
Prediction = the PCG solve for the mean cache (with cg_options.variance_checks columns), LOVE's
Lanczos cache (love_rank 100 steps) and the test points' means and variances.

Usage (quiet machine): PYTHONPATH=. python asv_benchmarks/scripts/exact_gp_predict_dense_rule.py [N]
"""

import sys
import time

import numpy as np

import gpnum
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import _gpr_cg

n = int(sys.argv[1]) if len(sys.argv) > 1 else 13500
d = 26
rng = np.random.default_rng(0)
X = rng.uniform(-1.0, 1.0, (n + 1000, d))
f = np.sin(3.0 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.5 * np.cos(2.0 * X[:, 3])
y = f + 0.3 * rng.standard_normal(n + 1000)
Xtr, ytr, Xte, fte = X[:n], y[:n], X[n:], f[n:]
print(f"n={n} d={d}: K is {8.0 * n * n / 1e9:.2f} GB; available "
      f"{gpnum.backend.available_memory(np) / 2**30:.1f} GiB; dense limit "
      f"{_gpr_cg.dense_limit_bytes(_gpr_cg.CGOptions()) / 2**30:.1f} GiB", flush=True)
for name, options in (("default (memory rule)", {}), ("blocked (dense_limit_mib=0)",
                                                      {"dense_limit_mib": 0.0})):
    gp = gpnum.GPR(Matern32(lengthscale=np.full(d, 3.0), variance=1.0), Gaussian(variance=0.1),
                   Xtr, ytr, solver="cg", cg_options=options)
    dense = _gpr_cg.dense_fits(n, gp.cg_options, np)
    time.sleep(0.5)
    t0 = time.perf_counter()
    mean, var = gp.predict_f(Xte)
    t = time.perf_counter() - t0
    rmse = float(np.sqrt(np.mean((np.asarray(mean) - fte) ** 2)))
    print(f"{name}: {'dense' if dense else 'blocked'} path, predict_f {t:.1f} s, RMSE to f "
          f"{rmse:.4f}, {gp.cg_predict_info}", flush=True)
