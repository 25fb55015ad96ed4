"""The stationary kernels' blocked paths at one size, against whole (n, n) passes (issue 33).

Matern-3/2 ARD on n standard-normal points with d inputs, float64. Times (best of REPS, quiet
machine): ``gram_and_vjp(X)`` -- the gram of one set built from its upper block rows, with the
slope the backward pass keeps -- against ``gram_and_vjp(X, copy of X)``, the two-set path that
makes whole (n, n) passes; and the backward pass against a rank-11 cotangent ``U V^T`` (one
residual and 10 probes of conjugate-gradient training) by ``vjp.low_rank(U, V)`` against
forming ``U V^T`` and the dense backward of the two-set path. The parameter gradients of the
two must agree (printed).

Usage (from the repository root):
    PYTHONPATH=. python asv_benchmarks/scripts/stationary_blocked_vs_whole.py [N] [D] [REPS]
"""

import sys
import time

import numpy as np

from gpnum.kernels import Matern32

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
d = int(sys.argv[2]) if len(sys.argv) > 2 else 18
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
rng = np.random.default_rng(0)
X = rng.standard_normal((n, d))
U, V = rng.standard_normal((n, 11)), rng.standard_normal((n, 11))
k = Matern32(lengthscale=np.linspace(0.5, 2.0, d), variance=1.3)


def best(f):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return min(ts), out


def one_set():
    return k.gram_and_vjp(X)


def two_set():
    return k.gram_and_vjp(X, X.copy())


t_one, (K1, vjp1) = best(one_set)
del K1
t_two, (K2, vjp2) = best(two_set)
del K2
t_lr, g_lr = best(lambda: vjp1.low_rank(U, V)["params"])
t_dense, g_dense = best(lambda: vjp2(U @ V.T)["params"])
print(f"Matern32 ARD, n={n}, d={d}, float64, best of {reps}")
print(f"gram_and_vjp: one set (upper block rows) {t_one:.3f} s, two-set path (whole passes) "
      f"{t_two:.3f} s: {t_two / t_one:.2f}x")
print(f"backward, rank 11: low_rank {t_lr:.3f} s, U V^T + dense {t_dense:.3f} s: "
      f"{t_dense / t_lr:.2f}x")
for name in g_lr:
    a, b = np.asarray(g_lr[name]), np.asarray(g_dense[name])
    print(f"  {name}: max relative difference {np.max(np.abs(a - b)) / np.max(np.abs(b)):.1e}")
