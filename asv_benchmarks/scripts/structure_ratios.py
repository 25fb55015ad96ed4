"""Side-by-side timings of docs/structure.md, in one process (numpy; run with
OPENBLAS_NUM_THREADS=1): Toeplitz against dense products, grid and SKI training steps against
the dense-K CG step and Cholesky at n ~ 5,000.

Run: PYTHONPATH=. OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/structure_ratios.py
"""

import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import bench_structure as bs

from gpnum import backend as B
from gpnum.kernels import RBF, Grid, grid_operator
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR


def best(f, repeats=3):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return min(out)


def products(xp, m=10000):
    shape = bs._grid_shape(m)
    grid = Grid(tuple(B.asarray(np.arange(s) / s, dtype=xp.float64, xp=xp) for s in shape))
    op = grid_operator(bs._kernel("rbf", xp), grid)
    K = op.to_dense()
    V = np.random.default_rng(0).standard_normal((op.shape[0], 11))
    tt, td = best(lambda: op @ V), best(lambda: K @ V)
    print(f"products m={op.shape[0]} grid {shape}: toeplitz {tt:.4f} s, dense {td:.4f} s, "
          f"ratio dense/toeplitz {td / tt:.1f}", flush=True)


def steps(xp, n=5000):
    X, y = bs._grid_data(n, drop=0.03)
    Xc, yc = bs._grid_data(n)
    dense = {"dense_limit_mib": 8192.0}
    cases = [("grid_toeplitz", lambda: bs._gpr(xp, X, y, "rbf", "grid")),
             ("cg_dense", lambda: bs._gpr(xp, X, y, "rbf", "cg", cg_options=dense)),
             ("cholesky", lambda: bs._gpr(xp, X, y, "rbf", "cholesky")),
             ("grid_kronecker_complete", lambda: bs._gpr(xp, Xc, yc, "product", "grid")),
             ("cholesky_complete", lambda: bs._gpr(xp, Xc, yc, "product", "cholesky"))]
    t = {}
    for name, build in cases:
        model = build()
        t[name] = best(model.objective_and_grad, 2)
        print(f"step n={model.X.shape[0]} {name}: {t[name]:.3f} s", flush=True)
    print(f"ratios: cg_dense/grid_toeplitz {t['cg_dense'] / t['grid_toeplitz']:.1f}, "
          f"cholesky/grid_toeplitz {t['cholesky'] / t['grid_toeplitz']:.1f}, "
          f"cholesky/grid_kronecker {t['cholesky_complete'] / t['grid_kronecker_complete']:.1f}",
          flush=True)


def ski(n=5000):
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, (n, 2))
    y = np.sin(6 * X[:, 0]) * np.cos(4 * X[:, 1]) + 0.1 * rng.standard_normal(n)

    def build(solver, **kw):
        return GPR(RBF(lengthscale=[0.2, 0.2]), Gaussian(variance=0.05), X, y, solver=solver,
                   **kw)

    fast, dense = build("ski"), build("cg", cg_options={"dense_limit_mib": 8192.0})
    t_ski, t_cg = best(fast.objective_and_grad, 2), best(dense.objective_and_grad, 2)
    print(f"SKI n={n} grid {fast.grid_size}^2: {t_ski:.3f} s, cg_dense {t_cg:.3f} s, "
          f"ratio {t_cg / t_ski:.1f}", flush=True)


if __name__ == "__main__":
    xp = B.namespace_by_name("numpy")
    products(xp)
    steps(xp)
    ski()
