"""Multi-output exact GP with missing outputs (issue 51): the log marginal likelihood with its
gradient by Cholesky on the observed entries against BBMM conjugate gradients with Kronecker
products and a mask (MultiOutputGPR solver="cholesky" / "cg"), side by side in one process.

Data: n random inputs in 3 dimensions, t outputs from an ICM (RBF, rank 2) plus noise, a
fraction of entries missing at random; model ICM(RBF(ARD), t, 2), per-output noise, float64.
CG with the default options (10 probes, a rank-100 pivoted-Cholesky preconditioner, 20
iterations at least). Prints the time of each path, their LML difference against CG's
reported standard error, and the peak memory of each path's arrays (tracemalloc, a separate
run after the timed one; after one warm-up run).

With a fifth argument ``blocked``: CG with the latent grams formed (``n x n`` arrays) against
CG with them as blocked ``KernelMatrix`` products (what ``MultiOutputGPR(solver="cg")`` does
where the arrays do not fit in memory; forced here by ``cg_options={"dense_limit_mib": 0}``),
no Cholesky.

Usage (quiet machine, under the exclusive lock; the fourth argument: BLAS threads of both):
    flock -x /tmp/cpu.lock python asv_benchmarks/scripts/multioutput_missing_cg.py 700 10 0.3 1
    flock -x /tmp/cpu.lock python asv_benchmarks/scripts/multioutput_missing_cg.py 4000 5 0.3 1 \
        blocked
"""

import sys
import time
import tracemalloc

import numpy as np

from gpnum.backend import set_blas_threads
from gpnum.kernels import ICM, RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import MultiOutputGPR

n = int(sys.argv[1]) if len(sys.argv) > 1 else 700
t = int(sys.argv[2]) if len(sys.argv) > 2 else 10
missing = float(sys.argv[3]) if len(sys.argv) > 3 else 0.3
set_blas_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
BLOCKED = len(sys.argv) > 5 and sys.argv[5] == "blocked"
RANK, D = 2, 3

rng = np.random.default_rng(0)
X = rng.uniform(-2.0, 2.0, (n, D))
W_true = rng.normal(size=(t, RANK))
K_true = RBF(lengthscale=np.full(D, 0.8))(X) + 1e-8 * np.eye(n)
Y = np.linalg.cholesky(K_true) @ rng.normal(size=(n, RANK)) @ W_true.T
Y = Y + 0.3 * rng.normal(size=(n, t))
Y[rng.uniform(size=(n, t)) < missing] = np.nan
n_obs = int(np.sum(~np.isnan(Y)))


def run(solver, cg_options=None):
    model = MultiOutputGPR(ICM(RBF(lengthscale=np.ones(D)), t, RANK),
                           Gaussian(variance=np.full(t, 0.2)), X, Y, solver=solver,
                           cg_options=cg_options)
    model.log_marginal_likelihood_and_grad()       # warm-up
    t0 = time.perf_counter()
    value, _ = model.log_marginal_likelihood_and_grad()
    elapsed = time.perf_counter() - t0
    tracemalloc.start()
    model.log_marginal_likelihood_and_grad()
    peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    return float(value), elapsed, peak, model.cg_info


if BLOCKED:
    v_d, t_d, m_d, info_d = run("cg")
    v_b, t_b, m_b, info_b = run("cg", {"dense_limit_mib": 0})
    print(f"n={n} t={t} missing={missing:.0%} N_o={n_obs}: CG with formed grams {t_d:.2f} s "
          f"({m_d:.0f} MiB peak, {info_d['num_iter']} iterations), CG with blocked grams "
          f"{t_b:.2f} s ({m_b:.0f} MiB peak, {info_b['num_iter']} iterations); LML difference "
          f"{v_b - v_d:+.2e} (LML {v_d:.2f})")
    sys.exit(0)
v_chol, t_chol, m_chol, _ = run("cholesky")
v_cg, t_cg, m_cg, info = run("cg")
print(f"n={n} t={t} missing={missing:.0%} N_o={n_obs}: Cholesky {t_chol:.2f} s "
      f"({m_chol:.0f} MiB peak), CG {t_cg:.2f} s ({m_cg:.0f} MiB peak, {info['num_iter']} "
      f"iterations), ratio {t_chol / t_cg:.1f}x; LML difference {v_cg - v_chol:+.3f} "
      f"(CG's standard error {info['lml_std_error']:.3f}, LML {v_chol:.2f})")
