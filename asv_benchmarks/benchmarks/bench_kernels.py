"""Kernel gram matrices and their gradients (gram_vjp) for an (n, d) batch against m = 1000
inducing points, next to the floors measured in the same process: one GEMM of the same shape
((n, d) x (d, m), what the distance expansion itself costs) and one elementwise exp over an
(n, m) array (the memory-bound floor of any stationary kernel)."""

import time

import numpy as np

from gpnum import backend as B
from gpnum.kernels import ArcCosine, Matern52

from ._common import available_backends, make, sync

M = 1000


def _kernel(name, d, xp, dt):
    if name == "Matern52-ARD":
        return Matern52(np.linspace(0.5, 2.0, d), 1.3, xp=xp, dtype=dt)
    return ArcCosine(2, 1.6, 0.2, xp=xp, dtype=dt)


def _ratio(f, g, reps=15):
    """min time of ``f`` / min time of ``g``, timed alternately after one warm-up of each.

    Alternating the two and taking each minimum keeps a ratio usable while other processes load
    the CPU: both sides see the same conditions, and the minimum drops the preempted runs.
    """
    sync(f())
    sync(g())
    tf, tg = [], []
    for _ in range(reps):
        for fn, ts in ((f, tf), (g, tg)):
            t0 = time.perf_counter()
            sync(fn())
            ts.append(time.perf_counter() - t0)
    return min(tf) / min(tg)


class KernelGram:
    params = (available_backends(), ["float32", "float64"], [256, 1000, 4000], [2, 54],
              ["Matern52-ARD", "ArcCosine"])
    param_names = ["backend", "dtype", "n", "d", "kernel"]
    timeout = 300

    def setup(self, backend, dtype, n, d, kernel):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        rng = np.random.default_rng(0)
        self.X = make(self.xp, rng.normal(size=(n, d)), dt)
        self.Z = make(self.xp, rng.normal(size=(M, d)), dt)
        self.G = make(self.xp, rng.normal(size=(n, M)), dt)
        self.k = _kernel(kernel, d, self.xp, dt)

    def _gram(self):
        return self.k(self.X, self.Z)

    def _vjp(self):
        return self.k.gram_vjp(self.G, self.X, self.Z)["X2"]

    def _gemm(self):
        return self.X @ self.Z.T

    def _exp(self):
        return self.xp.exp(self.G)

    def time_gram(self, backend, dtype, n, d, kernel):
        sync(self._gram())

    def time_gram_vjp(self, backend, dtype, n, d, kernel):
        sync(self._vjp())

    def time_gemm_same_shape(self, backend, dtype, n, d, kernel):
        sync(self._gemm())

    def track_gram_over_exp(self, backend, dtype, n, d, kernel):
        """Gram time / one elementwise exp over (n, m), best of 15 each, same process."""
        return _ratio(self._gram, self._exp)

    track_gram_over_exp.unit = "ratio"

    def track_gram_over_gemm(self, backend, dtype, n, d, kernel):
        """Gram time / one (n, d) x (d, m) GEMM, best of 15 each, same process."""
        return _ratio(self._gram, self._gemm)

    track_gram_over_gemm.unit = "ratio"

    def track_vjp_over_gram(self, backend, dtype, n, d, kernel):
        """gram_vjp time (all parameter and input gradients) / gram time, best of 15 each."""
        return _ratio(self._vjp, self._gram)

    track_vjp_over_gram.unit = "ratio"
