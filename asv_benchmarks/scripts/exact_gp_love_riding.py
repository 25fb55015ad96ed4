"""GPR(solver="cg")'s prediction cache on the blocked path: LOVE's Lanczos steps riding in the
prediction solve's kernel passes against run after it, side by side in one process (issue 49).

Synthetic data (26 inputs, as exact_gp_predict_dense_rule.py), Matern-3/2 ARD, noise 0.1,
dense_limit_mib=0 (the blocked path), default options (love_rank 100). "riding off" sets
KernelMatrix.fresh_products to False for the run, which makes the model take the path for
operators whose products are cheap (the Lanczos run after the solve). Counts and times the
kernel passes (KernelMatrix products).

Usage (quiet machine): PYTHONPATH=. python asv_benchmarks/scripts/exact_gp_love_riding.py [N]
"""

import sys
import time
import warnings

import numpy as np

import gpnum
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.linalg import KernelMatrix
from gpnum.models import _gpr_cg

warnings.simplefilter("ignore")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
d = 26
rng = np.random.default_rng(0)
X = rng.uniform(-1.0, 1.0, (n, d))
y = np.sin(3.0 * X[:, 0]) + 0.3 * rng.standard_normal(n)
passes = []
product = KernelMatrix._matmat


def counted(self, R):
    t0 = time.perf_counter()
    out = product(self, R)
    passes.append(time.perf_counter() - t0)
    return out


KernelMatrix._matmat = counted
for riding in (True, False, True):
    KernelMatrix.fresh_products = riding
    gp = gpnum.GPR(Matern32(lengthscale=np.full(d, 3.0)), Gaussian(variance=0.1), X, y,
                   solver="cg", cg_options={"dense_limit_mib": 0.0})
    passes.clear()
    time.sleep(0.5)
    t0 = time.perf_counter()
    _gpr_cg.prediction_state(gp)
    t = time.perf_counter() - t0
    print(f"riding {'on ' if riding else 'off'}: {t:.1f} s, {len(passes)} kernel passes "
          f"({sum(passes):.1f} s), prediction PCG iterations {gp.cg_predict_info['num_iter']}",
          flush=True)
