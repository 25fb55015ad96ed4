"""Kernel gram matrices and their gradients (gram_vjp) for an (n, d) batch against m = 1000
inducing points, next to the floors measured in the same process: one GEMM of the same shape
((n, d) x (d, m), what the distance expansion itself costs) and one elementwise exp over an
(n, m) array (the memory-bound floor of any stationary kernel)."""

import time

import numpy as np

from gpnum import backend as B
from gpnum.kernels import ArcCosine, Matern52

from ._common import available_backends, make, sync, repeats

M = 1000


def _kernel(name, d, xp, dt):
    if name == "Matern52-ARD":
        return Matern52(np.linspace(0.5, 2.0, d), 1.3, xp=xp, dtype=dt)
    return ArcCosine(2, 1.6, 0.2, xp=xp, dtype=dt)


def _best_pair(f, g, reps=15, clock=time.perf_counter):
    """Minimum times of ``f`` and ``g``, timed alternately after one warm-up of each.

    Alternating the two and taking each minimum keeps a ratio usable while other processes load
    the CPU: both sides see the same conditions, and the minimum drops the preempted runs.
    """
    sync(f())
    sync(g())
    tf, tg = [], []
    for _ in range(repeats(reps)):
        for fn, ts in ((f, tf), (g, tg)):
            t0 = clock()
            sync(fn())
            ts.append(clock() - t0)
    return min(tf), min(tg)


def _ratio(f, g, reps=15):
    a, b = _best_pair(f, g, reps)
    return a / b


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


def main():
    """Print the table of docs/kernels.md, timed in CPU time (``time.process_time``) so that
    preemption by other jobs does not count; meaningful for single-threaded CPU runs:

        cd asv_benchmarks && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \\
            python -m benchmarks.bench_kernels
    """
    import itertools

    bench = KernelGram()
    print("backend dtype n d kernel | gram_ms vjp_ms | gram/exp gram/gemm vjp/gram")
    for combo in itertools.product(*KernelGram.params):
        backend, dtype, n, d, kernel = combo
        if backend == "cupy":
            continue  # CPU time says nothing about GPU work
        bench.setup(*combo)
        reps = 15 if n < 4000 else 5
        clock = time.process_time
        gram_e, exp = _best_pair(bench._gram, bench._exp, reps, clock)
        gram_m, gemm = _best_pair(bench._gram, bench._gemm, reps, clock)
        vjp, gram_v = _best_pair(bench._vjp, bench._gram, reps, clock)
        gram = min(gram_e, gram_m, gram_v)
        print(f"{backend} {dtype} {n} {d} {kernel} | {gram * 1e3:.2f} {vjp * 1e3:.2f} | "
              f"{gram_e / exp:.1f} {gram_m / gemm:.1f} {vjp / gram_v:.2f}", flush=True)


if __name__ == "__main__":
    main()


class SymmetricGramBlocked:
    """The gram matrix of one set of points with what its backward pass keeps (Matern-3/2 ARD,
    float64), built from its upper block rows (gpnum.kernels._stationary), against the same
    matrix through the two-set path, which makes whole (n, n) passes; and the backward pass
    against a rank-11 cotangent U V^T (conjugate-gradient training: 1 + 10 probes) by
    ``vjp.low_rank`` against forming U V^T and the two-set path's dense backward."""

    params = (available_backends(), [1000, 4000], [3, 18])
    param_names = ["backend", "n", "d"]
    timeout = 300

    def setup(self, backend, n, d):
        from gpnum.kernels import Matern32

        self.xp = B.namespace_by_name(backend)
        dt = self.xp.float64
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, d))
        self.X = make(self.xp, X, dt)
        self.X2 = make(self.xp, X.copy(), dt)
        self.U = make(self.xp, rng.normal(size=(n, 11)), dt)
        self.V = make(self.xp, rng.normal(size=(n, 11)), dt)
        self.k = Matern32(np.linspace(0.5, 2.0, d), 1.3, xp=self.xp, dtype=dt)
        self.vjp_same = self.k.gram_and_vjp(self.X)[1]
        self.vjp_two = self.k.gram_and_vjp(self.X, self.X2)[1]

    def _same(self):
        return self.k.gram_and_vjp(self.X)[0]

    def _two(self):
        return self.k.gram_and_vjp(self.X, self.X2)[0]

    def _low_rank(self):
        return self.vjp_same.low_rank(self.U, self.V)["params"]["variance"]

    def _dense(self):
        return self.vjp_two(self.U @ self.xp.matrix_transpose(self.V))["params"]["variance"]

    def time_gram_and_vjp_one_set(self, backend, n, d):
        sync(self._same())

    def time_low_rank_vjp(self, backend, n, d):
        sync(self._low_rank())

    def track_one_set_over_two_set_path(self, backend, n, d):
        """gram_and_vjp(X) time / gram_and_vjp(X, copy of X), best of 15 each, same process."""
        return _ratio(self._same, self._two)

    track_one_set_over_two_set_path.unit = "ratio"

    def track_low_rank_over_dense_cotangent(self, backend, n, d):
        """vjp.low_rank(U, V) time / forming U V^T and the dense backward, best of 15 each."""
        return _ratio(self._low_rank, self._dense)

    track_low_rank_over_dense_cotangent.unit = "ratio"
