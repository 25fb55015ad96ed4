"""Side-by-side timings of docs/structure.md, in one process (numpy; run with
OPENBLAS_NUM_THREADS=1): Toeplitz against dense products, grid and SKI training steps against
the dense-K CG step and Cholesky at n ~ 5,000."""
import time, sys
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from benchmarks import bench_structure as bs
from gpnum import backend as B
from gpnum.kernels import Grid, grid_operator
xp = B.namespace_by_name("numpy")

def best(f, r=3):
    out = []
    for _ in range(r):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return min(out)

# (a) products, m ~ 10,000 cells of a 10 x 32 x 32 grid, 11 columns
shape = bs._grid_shape(10000)
grid = Grid(tuple(B.asarray(np.arange(s) / s, dtype=xp.float64, xp=xp) for s in shape))
op = grid_operator(bs._kernel("rbf", xp), grid)
K = op.to_dense()
V = np.random.default_rng(0).standard_normal((op.shape[0], 11))
tt, td = best(lambda: op @ V), best(lambda: K @ V)
print(f"products m={op.shape[0]} grid {shape}: toeplitz {tt:.4f} s, dense {td:.4f} s, ratio dense/toeplitz {td/tt:.1f}", flush=True)
del K

# (b), (c) training steps at n ~ 5,000
n = 5000
X, y = bs._grid_data(n, drop=0.03)
Xc, yc = bs._grid_data(n)
steps = {}
for name, model in [("grid_toeplitz", bs._gpr(xp, X, y, "rbf", "grid")),
                    ("cg_dense", bs._gpr(xp, X, y, "rbf", "cg", cg_options={"dense_limit_mib": 8192.0})),
                    ("cholesky", bs._gpr(xp, X, y, "rbf", "cholesky")),
                    ("grid_kronecker_complete", bs._gpr(xp, Xc, yc, "product", "grid")),
                    ("cholesky_complete", bs._gpr(xp, Xc, yc, "product", "cholesky"))]:
    steps[name] = best(lambda: model.objective_and_grad(), 2)
    print(f"step n={model.X.shape[0]} {name}: {steps[name]:.3f} s", flush=True)
print(f"ratios: cg_dense/grid_toeplitz {steps['cg_dense']/steps['grid_toeplitz']:.1f}, "
      f"cholesky/grid_toeplitz {steps['cholesky']/steps['grid_toeplitz']:.1f}, "
      f"cholesky/grid_kronecker {steps['cholesky_complete']/steps['grid_kronecker_complete']:.1f}", flush=True)

# (d) SKI at n = 5,000 (2-d) against dense-K CG
from gpnum.kernels import RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR
rng = np.random.default_rng(0)
Xs = rng.uniform(0.0, 1.0, (n, 2)); ys = np.sin(6 * Xs[:, 0]) * np.cos(4 * Xs[:, 1]) + 0.1 * rng.standard_normal(n)
def mk(solver, **kw):
    return GPR(RBF(lengthscale=[0.2, 0.2]), Gaussian(variance=0.05), Xs, ys, solver=solver, **kw)
ski, cgd = mk("ski"), mk("cg", cg_options={"dense_limit_mib": 8192.0})
t_ski, t_cg = best(lambda: ski.objective_and_grad(), 2), best(lambda: cgd.objective_and_grad(), 2)
print(f"SKI n={n} grid {ski.grid_size}^2: {t_ski:.3f} s, cg_dense {t_cg:.3f} s, ratio {t_cg/t_ski:.1f}", flush=True)
