"""Peak memory of GPR(solver="cg") predictions at n = 40,000 (issue 33), without the training.

The prediction blocks of exact_gp_memory.py in isolation: 40,000 precip training rows, a
pivoted-Cholesky preconditioner, a 2-step LOVE cache and a random mean cache (the memory does
not depend on their values), then predictions at 2,000 test points; prints the peak resident
memory beyond the loaded data. About a minute.

Usage: PYTHONPATH=. python asv_benchmarks/scripts/exact_gp_predict_memory.py
"""
import time, numpy as np, gpnum
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR, _gpr_cg
from gpnum.linalg import block_rows_for_budget
def st(f):
    for line in open("/proc/self/status"):
        if line.startswith(f + ":"): return int(line.split()[1]) / 1024
d = gpnum.datasets.load("precip", xp="numpy", dtype="float64")
X, y = gpnum.datasets.random_subset(d.X_train, d.y_train, 40000, seed=0)
Xt, _ = gpnum.datasets.random_subset(d.X_test, d.y_test, 2000, seed=1)
X, y, Xt = (np.ascontiguousarray(a) for a in (X, y, Xt)); del d
base = st("VmRSS")
m = GPR(Matern32(lengthscale=np.ones(3)), Gaussian(variance=0.1), X, y, solver="cg", jitter=1e-4,
        cg_options={"dense_limit_mib": 0, "love_rank": 20})
opts = m.cg_options
Kop, _ = _gpr_cg.kernel_operator(m, X, opts, False)
A = _gpr_cg.noisy_operator(m, Kop); M = _gpr_cg._preconditioner(A, opts)
t = time.time()
state = {"alpha": np.random.default_rng(0).normal(size=40000),
         "block": block_rows_for_budget(40000, opts.memory_budget_mib * 2**20, 8, copies=_gpr_cg._PREDICT_BLOCK_COPIES)}
state.update(_gpr_cg._love_cache(A, M, y - 0.0, 2))
print(f"setup {time.time()-t:.0f} s; peak beyond loading so far {st('VmHWM') - base:.0f} MiB", flush=True)
t = time.time()
mean, var = _gpr_cg.predict(m, Xt, state, False)
print(f"predict 2000 points, blocks of {state['block']} rows: {time.time()-t:.1f} s; peak beyond loading {st('VmHWM') - base:.0f} MiB")
