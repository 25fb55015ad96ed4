"""Peak memory and time of SKI training steps at large n (issue 49: "10^6 points train in
bounded memory").

Data: n points uniform on [0, 1]^2, ``y = sin(6 x_1) cos(4 x_2) + 0.1 eps``; RBF ARD kernel
(lengthscales 0.2), Gaussian noise 0.05, float64, a G x G grid; BBMM with a rank-15
pivoted-Cholesky preconditioner, 10 probes, tolerance 1.0, 20 Lanczos iterations. Reports the
step times and the process's peak resident memory (``resource.getrusage``: ru_maxrss) after
building the data, after the model, and after the steps.

Usage (exclusive lock; GPNUM_BLAS_THREADS=1 is gpnum's default):
    PYTHONPATH=. flock -x /tmp/cpu.lock python asv_benchmarks/scripts/ski_memory.py [N] [G] [STEPS]
"""

import resource
import sys
import time

import numpy as np

from gpnum.kernels import RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
G = int(sys.argv[2]) if len(sys.argv) > 2 else 100
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
print(f"start: peak {peak_mib():.0f} MiB", flush=True)
rng = np.random.default_rng(0)
X = rng.uniform(0.0, 1.0, (n, 2))
y = np.sin(6 * X[:, 0]) * np.cos(4 * X[:, 1]) + 0.1 * rng.standard_normal(n)
print(f"data n={n}: peak {peak_mib():.0f} MiB (X and y: {(X.nbytes + y.nbytes) / 2**20:.0f} MiB)",
      flush=True)
model = GPR(RBF(lengthscale=[0.2, 0.2]), Gaussian(variance=0.05), X, y, solver="ski",
            grid_size=G, cg_options={"precond_rank": 15})
print(f"model: peak {peak_mib():.0f} MiB", flush=True)
for i in range(steps):
    t = time.perf_counter()
    value, _ = model.objective_and_grad()
    print(f"step {i}: {time.perf_counter() - t:.2f} s, LML/n {float(value) / n:.4f}, "
          f"{model.cg_info['num_iter']} CG iterations, peak {peak_mib():.0f} MiB", flush=True)
