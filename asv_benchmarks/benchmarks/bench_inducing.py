"""Inducing-point selection: k-means (per Lloyd iteration) and greedy variance, each next to one
GEMM of the same shape measured in the same process, and k-means next to SciPy's kmeans2.

On a shared machine, run with ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``: multi-threaded BLAS
and torch kernels on small problems slow down many-fold when other processes hold the cores.
"""

import time

import numpy as np

from gpnum import backend as B
from gpnum import inducing as _inducing
from gpnum.inducing import greedy_variance, kmeans

from ._common import available_backends, make, sync, repeats


def _best(f, reps=3):
    """Minimum wall time of ``reps`` calls: other work on the machine only ever adds time."""
    times = []
    for _ in range(repeats(reps)):
        t0 = time.perf_counter()
        sync(f())
        times.append(time.perf_counter() - t0)
    return min(times)


def _points(n, d, seed=0):
    # clustered data, as inputs of real regression sets tend to be
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-3, 3, size=(50, d))
    return centres[rng.integers(0, 50, n)] + 0.5 * rng.normal(size=(n, d))


class KMeans:
    """Lloyd iterations on n = 20,000 points in d = 8: each costs two (n, d+1) x (d+1, m) GEMMs
    (distances, one-hot sums) plus O(n m) elementwise work."""

    params = (available_backends(), ["float32", "float64"], [100, 500])
    param_names = ["backend", "dtype", "m"]
    timeout = 300
    n, d, iters = 20_000, 8, 10

    def setup(self, backend, dtype, m):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        X = _points(self.n, self.d)
        self.X = make(self.xp, X, dt)
        X = X - X.mean(0)
        self.X1 = make(self.xp, np.concatenate([X, np.ones((self.n, 1))], axis=1), dt)
        self.C = make(self.xp, X[:: self.n // m][:m], dt)
        self.chunk = max(1, _inducing._BLOCK_ELEMENTS // m)

    def _run(self, m, num_iter):
        # tol=0: no early stop, and no fixed point is reached in 10 iterations on this data
        return kmeans(self.X, m, seed=0, num_iter=num_iter, tol=0.0)

    def time_kmeans_10_iterations(self, backend, dtype, m):
        sync(self._run(m, self.iters))

    def time_kmeanspp_seeding(self, backend, dtype, m):
        sync(self._run(m, 0))

    def time_lloyd_iteration(self, backend, dtype, m):
        sync(_inducing._lloyd_step(self.xp, self.X1, self.C, self.chunk)[0])

    def track_iteration_over_gemm(self, backend, dtype, m):
        """One Lloyd iteration divided by one (n, d) x (d, m) GEMM, both measured here."""
        step = _best(lambda: _inducing._lloyd_step(self.xp, self.X1, self.C, self.chunk)[0])
        gemm = _best(lambda: self.X @ self.C.T, reps=10)
        return step / gemm

    track_iteration_over_gemm.unit = "ratio"


class KMeansVsSciPy:
    """gpnum.kmeans next to scipy.cluster.vq.kmeans2 on NumPy (the same data as KMeans):
    k-means++ seeding and 10 Lloyd iterations each."""

    params = (["float32", "float64"], [100, 500])
    param_names = ["dtype", "m"]
    timeout = 300
    n, d, iters = KMeans.n, KMeans.d, KMeans.iters

    def setup(self, dtype, m):
        self.X = _points(self.n, self.d).astype(dtype)

    def track_kmeans_over_scipy_kmeans2(self, dtype, m):
        """Time of gpnum.kmeans divided by that of scipy's kmeans2."""
        from scipy.cluster.vq import kmeans2

        ours = _best(lambda: kmeans(self.X, m, seed=0, num_iter=self.iters, tol=0.0))
        theirs = _best(lambda: kmeans2(self.X, m, iter=self.iters, minit="++", seed=0)[0])
        return ours / theirs

    track_kmeans_over_scipy_kmeans2.unit = "ratio"


class GreedyVariance:
    """Partial pivoted Cholesky of a Matern-5/2 kernel matrix on n = 10,000 points in d = 8:
    n m^2 / 2 multiply-adds in m matrix-vector products, plus m kernel columns."""

    params = (available_backends(), ["float32", "float64"], [100, 500])
    param_names = ["backend", "dtype", "m"]
    timeout = 300
    n, d = 10_000, 8

    def setup(self, backend, dtype, m):
        from gpnum.kernels import Matern52

        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        self.X = make(self.xp, _points(self.n, self.d), dt)
        self.kernel = Matern52(lengthscale=2.0, variance=1.0, xp=self.xp, dtype=dt)
        self.L = make(self.xp, np.random.default_rng(1).normal(size=(self.n, m)), dt)
        self.S = make(self.xp, np.random.default_rng(2).normal(size=(m, m)), dt)

    def time_greedy_variance(self, backend, dtype, m):
        sync(greedy_variance(self.X, m, self.kernel)[1])

    def track_over_gemm(self, backend, dtype, m):
        """greedy_variance divided by one (n, m) x (m, m) GEMM: the same n m^2 flop count
        (twice the pivoted Cholesky's), but as one BLAS-3 call."""
        ours = _best(lambda: greedy_variance(self.X, m, self.kernel)[1])
        gemm = _best(lambda: self.L @ self.S, reps=10)
        return ours / gemm

    track_over_gemm.unit = "ratio"
