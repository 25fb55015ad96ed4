"""Exact GP by BBMM conjugate gradients at n = 40,000: peak memory beyond the data (issue 33).

A dense n x n float64 kernel matrix at n = 40,000 would take 12.8 GB; the CG path never forms
it: kernel row blocks under ``cg_options.memory_budget_mib`` are formed, multiplied and
dropped at every CG iteration (and in the gradient's vjp), the preconditioner is an (n, k)
pivoted-Cholesky factor and the LOVE cache an (n, love_rank) basis.

Data: the bundled precip set (real data, 3 inputs), a random 40,000 of its training rows,
Gaussian likelihood (its tails are heavy; this run measures scale, not the best model of
precip), Matern-3/2 ARD, constant mean. Training: gpnum.optim.fit_exact_gp (Cholesky L-BFGS-B
then Adam on a 2,000-point subset, then full-data CG Adam steps), then predictions for 2,000
test points. Reports the time of each phase, the CG diagnostics, and the peak resident memory
of the process (VmHWM) against its resident memory once the data were loaded (VmRSS): the
difference is the memory the exact GP used beyond the data and the imported libraries.

Usage (from the repository root; tens of minutes):
    PYTHONPATH=. python asv_benchmarks/scripts/exact_gp_memory.py [N] [FULL_STEPS] [BUDGET_MIB] [LOVE_RANK]

LOVE_RANK (default 20, GPyTorch's default is 100) is small because each of its Lanczos steps is
one kernel product (tens of seconds at n = 40,000 on 2 cores).
"""

import sys
import time

import numpy as np

import gpnum
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR
from gpnum.optim import fit_exact_gp


def status_mib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{field} not in /proc/self/status")


n = int(sys.argv[1]) if len(sys.argv) > 1 else 40000
full_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
budget = float(sys.argv[3]) if len(sys.argv) > 3 else 256.0
love_rank = int(sys.argv[4]) if len(sys.argv) > 4 else 20

d = gpnum.datasets.load("precip", xp="numpy", dtype="float64")
X, y = gpnum.datasets.random_subset(d.X_train, d.y_train, n, seed=0)
Xt, yt = gpnum.datasets.random_subset(d.X_test, d.y_test, 2000, seed=1)
X, y, Xt, yt = (np.ascontiguousarray(a) for a in (X, y, Xt, yt))
del d
base = status_mib("VmRSS")
print(f"precip: n={X.shape[0]} d={X.shape[1]} test={Xt.shape[0]}; resident after loading "
      f"{base:.0f} MiB (dense K would be {8.0 * n * n / 2**30:.1f} GiB)", flush=True)

kernel = Matern32(lengthscale=np.ones(X.shape[1]), variance=1.0)
lik = Gaussian(variance=0.1)
model = GPR(kernel, lik, X, y, mean=0.0, solver="cg", jitter=1e-4,
            cg_options={"memory_budget_mib": budget, "dense_limit_mib": 0,
                                "love_rank": love_rank})
t0 = time.perf_counter()
fit_exact_gp(model, subset_size=2000, lbfgs_maxiter=50, subset_adam_steps=10,
             full_adam_steps=0, lr=0.05)
print(f"pretraining on 2,000 points: {time.perf_counter() - t0:.1f} s; peak beyond loading "
      f"{status_mib('VmHWM') - base:.0f} MiB", flush=True)
for step in range(full_steps):
    ts = time.perf_counter()
    fit_exact_gp(model, subset_size=0, full_adam_steps=1, lr=0.01)
    print(f"full-data CG Adam step {step + 1}: {time.perf_counter() - ts:.1f} s; "
          f"{model.cg_info}; peak beyond loading {status_mib('VmHWM') - base:.0f} MiB",
          flush=True)
ts = time.perf_counter()
mu, var = model.predict_y(Xt)
mu, var = np.asarray(mu), np.asarray(var)
rmse = float(np.sqrt(np.mean((mu - yt) ** 2)))
print(f"prediction of {Xt.shape[0]} test points: {time.perf_counter() - ts:.1f} s; test RMSE "
      f"{rmse:.4f}; {model.cg_predict_info}", flush=True)
peak = status_mib("VmHWM")
print(f"peak resident {peak:.0f} MiB; beyond the loaded data and libraries {peak - base:.0f} "
      f"MiB", flush=True)
