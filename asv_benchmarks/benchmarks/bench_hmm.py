"""HMMs: forward-backward (scan and blocked), Viterbi, one batch VB iteration, one SVI step.

Each next to the floor it is measured against in the same process: forward-backward against the
sequential recursions' arithmetic done as ``T`` GEMMs would be (one ``(T, K) @ (K, K)`` product,
i.e. the O(T K^2) of the textbook recursion with no loop overhead), reported as a ratio.

On a shared machine, run with ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``.
"""

import time

import numpy as np

from gpnum import backend as B
from gpnum.hmm import GaussianHMM, forward_backward, viterbi

from ._common import available_backends, make, sync, repeats


def _best(f, reps=3):
    """Minimum wall time of ``reps`` calls: other work on the machine only ever adds time."""
    times = []
    for _ in range(repeats(reps)):
        t0 = time.perf_counter()
        sync(f())
        times.append(time.perf_counter() - t0)
    return min(times)


def _inputs(T, K, seed=0):
    rng = np.random.default_rng(seed)
    return (np.log(rng.dirichlet(np.ones(K))), np.log(rng.dirichlet(np.ones(K), size=K)),
            2.0 * rng.normal(size=(T, K)))


def _chain(T, K=5, D=2, stay=0.98, seed=0):
    rng = np.random.default_rng(seed)
    runs, x, total = [], 0, 0
    while total < T:
        n = int(rng.geometric(1.0 - stay))
        runs.append(np.full(n, x))
        total += n
        x = int((x + rng.integers(1, K)) % K)
    states = np.concatenate(runs)[:T]
    angle = 2.0 * np.pi * np.arange(K) / K
    means = 3.0 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return means[states] + rng.normal(size=(T, D))


class ForwardBackward:
    """Forward-backward on one chain of T steps, K = 5: the parallel prefix ("scan") and the
    speculative blocks ("blocked", the default on a CPU from 16384 steps)."""

    params = (available_backends(), ["float32", "float64"], [10_000, 100_000],
              ["scan", "blocked"])
    param_names = ["backend", "dtype", "T", "method"]
    timeout = 300

    def setup(self, backend, dtype, T, method):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        self.args = tuple(make(self.xp, a, dt) for a in _inputs(T, 5))

    def time_forward_backward(self, backend, dtype, T, method):
        sync(forward_backward(*self.args, check=False, method=method).log_normalizer)

    def track_forward_backward_over_gemm(self, backend, dtype, T, method):
        """Forward-backward time over one (T, K) @ (K, K) GEMM (the sequential arithmetic)."""
        log_pi, log_A, log_lik = self.args
        fb = _best(lambda: forward_backward(log_pi, log_A, log_lik, check=False,
                                            method=method).log_normalizer)
        gemm = _best(lambda: log_lik @ log_A)
        return fb / gemm

    track_forward_backward_over_gemm.unit = "ratio"


class Viterbi:
    """Viterbi (scan) on one chain of T steps, K = 5."""

    params = (available_backends(), ["float32", "float64"], [10_000, 100_000])
    param_names = ["backend", "dtype", "T"]
    timeout = 300

    def setup(self, backend, dtype, T):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        self.args = tuple(make(self.xp, a, dt) for a in _inputs(T, 5))

    def time_viterbi(self, backend, dtype, T):
        sync(viterbi(*self.args, check=False)[1])


class Fit:
    """One batch VB iteration and one SVI step (S = 10 subchains of L = 100, no buffer and
    GrowBuf) of a 5-state, 2-D Gaussian HMM on a T-step chain."""

    params = (available_backends(), [100_000])
    param_names = ["backend", "T"]
    timeout = 600

    def setup(self, backend, T):
        self.xp = B.namespace_by_name(backend)
        self.Y = make(self.xp, _chain(T), self.xp.float64)
        self.model = GaussianHMM(5, 2, seed=0)
        self.model.fit(self.Y, max_iter=2)

    def time_vb_iteration(self, backend, T):
        self.model.fit(self.Y, max_iter=1, warm_start=True)

    def time_svi_step_no_buffer(self, backend, T):
        self._svi(0)

    def time_svi_step_growbuf(self, backend, T):
        self._svi("grow")

    def _svi(self, buffer):
        # fixed starts, so that every backend and run times the same work (no ELBO evaluation)
        starts = B.asarray(np.arange(0, 10 * 997, 997), dtype=self.xp.int64, xp=self.xp)
        stats, _ = self.model._subchain_statistics(self.Y, starts, 100, buffer, grow_step=25)
        self.model._global_step(stats, 0.1)
        sync(self.model.posterior_["A"])
