"""One GPR(solver="cg") training step with the kernel matrix formed once (dense) against the
blocked paths that recompute it in every product, side by side in one process (issue 49).

Data: a random n of the bundled elevators training rows (18 inputs, standardised); Matern-3/2
ARD kernel, Gaussian noise 0.1, float64; pivoted-Cholesky rank 100, 10 probes, training
tolerance 1.0, 20 Lanczos iterations (as exact_gp_step_vs_gpytorch.py). One step = the log
marginal likelihood and its gradient (the same probes on every path, so the same numbers up to
rounding). The paths:

- "dense": K formed once per step (dense_limit_mib large enough);
- "row blocks": the blocked path as it was before the symmetric tiles: k(X_b, X) for every row
  block in every product and in the backward pass (a KernelMatrix with an explicit second set,
  through GPR.cg_objective_and_grad);
- "tiles, 1 thread" and "tiles, 2 threads": the blocked path now (each pair of blocks evaluated
  once per product; cg_options.workers).

It also times one product K @ V with 1 and 11 columns on the dense and the tiled operator:
predictions on the blocked path cost (prediction PCG iterations + love_rank) products with one
to a few columns.

Usage (quiet machine): PYTHONPATH=. python asv_benchmarks/scripts/exact_gp_blocked_vs_dense.py [N] [REPS]
"""

import sys
import time
import warnings

import numpy as np

import gpnum
from gpnum.backend import blas_pool
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.linalg import KernelMatrix, block_rows_for_budget
from gpnum.models import _gpr_cg

warnings.simplefilter("ignore")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
data = gpnum.datasets.load("elevators", xp="numpy", dtype="float64")
X, y = gpnum.datasets.random_subset(data.X_train, data.y_train, n, seed=0)
X, y = np.ascontiguousarray(X), np.ascontiguousarray(y)
d = X.shape[1]
BASE = {"precond_rank": 100, "num_probes": 10, "train_rtol": 1.0, "min_iter": 20}


def model(**options):
    return gpnum.GPR(Matern32(lengthscale=np.ones(d), variance=1.0), Gaussian(variance=0.1),
                     X, y, mean=0.0, solver="cg", jitter=1e-4, cg_options={**BASE, **options})


def row_blocks(gp):
    # the old blocked operator: KernelMatrix's row-block path (an explicit second set) with the
    # old sizes: products in blocks of 2^19 elements, the backward pass in the budget's
    rows = min(block_rows_for_budget(n, gp.cg_options.memory_budget_mib * 2**20, 8), n)
    return KernelMatrix(gp.kernel, gp.X, gp.X, block_size=min(rows, max(8, 2**19 // n)),
                        vjp_block_size=rows, compute_dtype=np.float64)


def timed(fn, reps=1):
    best = out = None
    for _ in range(reps):
        time.sleep(0.5)
        t0 = time.perf_counter()
        out = fn()
        t = time.perf_counter() - t0
        best = t if best is None else min(best, t)
    return best, out


print(f"elevators n={n} d={d}, float64, {BASE}, BLAS threads {gpnum.backend.blas_threads()}",
      flush=True)
dense_mib = 8.0 * 3 * n * n / 2**20 + 64
runs = [("dense", model(dense_limit_mib=dense_mib), None),
        ("row blocks (before)", model(dense_limit_mib=0.0), row_blocks),
        ("tiles, 1 thread", model(dense_limit_mib=0.0, workers=1), None),
        ("tiles, 2 threads", model(dense_limit_mib=0.0, workers=2), None)]
times, values = {}, {}
for name, gp, make_op in runs:
    if make_op is None:
        t, (v, _) = timed(gp.log_marginal_likelihood_and_grad, REPS)
    else:
        op = make_op(gp)
        t, (v, _) = timed(lambda gp=gp, op=op: gp.cg_objective_and_grad(op), REPS)
    times[name], values[name] = t, float(v)
    print(f"{name}: step {t:.2f} s (best of {REPS}), LML {float(v):.4f} +- "
          f"{gp.cg_info['lml_std_error']:.2f}, CG iterations {gp.cg_info['num_iter']}",
          flush=True)
for name in times:
    print(f"{name} / dense: {times[name] / times['dense']:.2f}x")

# one product with 1 and 11 columns, in NumPy's BLAS pool as the CG path runs them
gp = model(dense_limit_mib=dense_mib)
K_dense, _ = _gpr_cg.kernel_operator(gp, gp.X, gp.cg_options, False)
gp_tiled = model(dense_limit_mib=0.0, workers=2)
tiled, _ = _gpr_cg.kernel_operator(gp_tiled, gp.X, gp_tiled.cg_options, False)
for k in (1, 11):
    V = np.random.default_rng(0).standard_normal((n, k))
    with blas_pool("numpy"):
        td, _ = timed(lambda V=V: K_dense @ V, REPS)
        tt, _ = timed(lambda V=V: tiled @ V, REPS)
    print(f"one product with {k} column(s): dense (K formed) {td * 1e3:.1f} ms, tiles "
          f"(2 threads) {tt:.3f} s", flush=True)
