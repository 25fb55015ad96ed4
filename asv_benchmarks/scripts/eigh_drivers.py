"""One symmetric eigendecomposition of an (n, n) RBF kernel matrix (3-d inputs, lengthscale 1)
by each LAPACK driver SciPy offers, NumPy's eigh, gpnum.backend.eigh and (if installed) torch's,
with the same number of BLAS threads for all (threadpoolctl; torch.set_num_threads): the floor
of MultiOutputGPR's Kronecker path (docs/multioutput.md, "Speed"). Best of three. Also the
subsets that path needs, the eigenvectors of the eigenvalues above eps ||K||_F: gpnum's
(``eigh(K, floor=eps)``: ?sytrd, ?stevd, ?ormqr on those columns) and SciPy's ?syevr with
that value range (``subset_by_value``; one run, it is slow).

Usage (under the exclusive lock): flock -x /tmp/cpu.lock python eigh_drivers.py 2000 1
"""

import sys
import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from gpnum.backend import blas_pool, eigh, set_blas_threads

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rng = np.random.default_rng(0)
X = rng.uniform(-2.0, 2.0, (n, 3))
K = np.exp(-0.5 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))


def best(fn, reps=3):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


rows = []
with threadpool_limits(threads):
    rows.append(("numpy.linalg.eigh", best(lambda: np.linalg.eigh(K))))
    for driver in ("evd", "evr", "ev"):
        rows.append((f"scipy.linalg.eigh driver={driver!r}",
                     best(lambda driver=driver: scipy.linalg.eigh(K, driver=driver,
                                                                   check_finite=False))))
    set_blas_threads(threads)
    eps = float(np.finfo(np.float64).eps)
    with blas_pool("scipy"):
        rows.append(("gpnum.backend.eigh", best(lambda: eigh(K))))
        r = eigh(K, floor=eps)[1].shape[1]
        rows.append((f"gpnum.backend.eigh(floor=eps): {r} vectors",
                     best(lambda: eigh(K, floor=eps))))
    above = eps * float(np.linalg.norm(K))
    rows.append((f"scipy evr subset_by_value: {r} vectors",
                 best(lambda: scipy.linalg.eigh(K, driver="evr", check_finite=False,
                                                subset_by_value=(above, np.inf)), 1)))
    try:
        import torch

        torch.set_num_threads(threads)
        Kt = torch.from_numpy(K)
        rows.append((f"torch.linalg.eigh ({torch.__version__})",
                     best(lambda: torch.linalg.eigh(Kt))))
    except ImportError:
        pass
    rows.append(("one GEMM K @ K (reference)", best(lambda: K @ K)))
for name, seconds in rows:
    print(f"n={n} threads={threads}: {name:40s} {seconds:.3f} s")
