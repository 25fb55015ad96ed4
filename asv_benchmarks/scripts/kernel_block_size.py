"""The blocked gram of one set and its backward pass at several block sizes: best and median
of REPS calls, and the minor page faults per call.

The stationary kernels build ``k(X, X)`` from upper block rows of about ``_BLOCK_ELEMENTS``
elements (gpnum/kernels/_stationary.py); each block's temporaries are fresh arrays. Best-of
timings hide what their page faults cost on a typical call, so this prints the median too.
(Measured, not acted on yet: smaller blocks change the gradients at rounding level, which
moves L-BFGS-B's stopping point in tests/test_co2_fit.py by 1e-9 relative.)
RBF ARD on n uniform points in 3 dimensions, float64, the backward pass against the gram itself
as cotangent.

Usage (quiet machine, one BLAS thread, exclusive lock):
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. flock -x /tmp/cpu.lock \\
        python asv_benchmarks/scripts/kernel_block_size.py 2000 65536 16384 4096
Each block size runs in its own process (the allocator's state carries over between calls).
"""

import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

REPS = 12


def one(n, block):
    import gpnum.kernels._stationary as stationary
    from gpnum.kernels import RBF

    stationary._BLOCK_ELEMENTS = block
    X = np.random.default_rng(0).uniform(-2.0, 2.0, (n, 3))
    k = RBF(lengthscale=np.ones(3))
    times, faults = [], []
    for _ in range(REPS):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        K, back = k.gram_and_vjp(X)
        back(K)
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(f"n={n} block={block}: gram + backward best {min(times) * 1e3:.1f} ms, median "
          f"{statistics.median(times) * 1e3:.1f} ms, worst {max(times) * 1e3:.1f} ms; "
          f"minor page faults per call (median) {int(statistics.median(faults))}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        one(int(sys.argv[2]), int(sys.argv[3]))
    else:
        n = int(sys.argv[1])
        for block in sys.argv[2:] or ["65536", "16384", "4096"]:
            subprocess.run([sys.executable, __file__, "--one", str(n), block], check=True,
                           env=os.environ)
