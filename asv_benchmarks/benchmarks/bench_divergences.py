"""Multivariate Gaussian divergences at m in {100, 1000, 4000}, each next to one GEMM.

Covariances are passed as Cholesky factors (``Lq=``, ``Lp=``), so the times are those of the
divergences themselves; passing matrices adds one Cholesky per covariance
(``track_cholesky_over_gemm`` gives that cost in the same units). The ``track_*_over_gemm``
benchmarks divide the best of a few runs by the best of a few (m, m) x (m, m) GEMMs measured in
the same process, which survives other load on the machine better than absolute times.
"""

import time

from gpnum import backend as B
from gpnum import divergences as D

from ._common import available_backends, make, spd_matrix, sync, repeats

FUNCTIONS = {
    "kl_mvn": (D.kl_mvn, D.kl_mvn_and_grad, {}),
    "wasserstein_mvn": (D.wasserstein_mvn, D.wasserstein_mvn_and_grad, {}),
    "bhattacharyya_mvn": (D.bhattacharyya_mvn, D.bhattacharyya_mvn_and_grad, {}),
    "hellinger_mvn": (D.hellinger_mvn, D.hellinger_mvn_and_grad, {}),
    "renyi_mvn": (D.renyi_mvn, D.renyi_mvn_and_grad, {"alpha": 0.5}),
    # |1 - alpha| < 1/4 switches to the spectral (SVD) evaluation
    "renyi_mvn_alpha0.9": (D.renyi_mvn, D.renyi_mvn_and_grad, {"alpha": 0.9}),
}


def best(f, reps):
    """Minimum wall time of ``reps`` synchronised calls (other workers load the CPU)."""
    times = []
    for _ in range(repeats(reps)):
        t0 = time.perf_counter()
        out = f()
        sync(out[0] if isinstance(out, tuple) else out)
        times.append(time.perf_counter() - t0)
    return min(times)


def _reps(m):
    """More repeats where a call is short: the minimum then filters out other workers' load."""
    return 2 if m >= 4000 else (5 if m >= 1000 else 30)


class MultivariateDivergences:
    params = (available_backends(), ["float32", "float64"], [100, 1000, 4000], list(FUNCTIONS))
    param_names = ["backend", "dtype", "m", "divergence"]
    number = 1
    repeat = (1, 3, 60.0)
    warmup_time = 0.0
    timeout = 3600

    def setup(self, backend, dtype, m, divergence):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        Sq, Sp = 0.5 * spd_matrix(m, seed=0), spd_matrix(m, seed=1)
        self.S = make(self.xp, Sp, dt)
        self.args = dict(mq=make(self.xp, Sq[:, 0], dt), mp=make(self.xp, Sp[:, 1], dt),
                         Lq=B.cholesky(make(self.xp, Sq, dt)), Lp=B.cholesky(self.S))
        self.value, self.and_grad, self.kw = FUNCTIONS[divergence]

    def _value(self):
        return self.value(**self.args, **self.kw, validate=False)

    def _and_grad(self):
        return self.and_grad(**self.args, **self.kw, validate=False)

    def _gemm(self):
        return self.S @ self.S

    def time_value(self, backend, dtype, m, divergence):
        sync(self._value())

    def time_and_grad(self, backend, dtype, m, divergence):
        sync(self._and_grad()[0])

    def track_value_over_gemm(self, backend, dtype, m, divergence):
        """Value time / one (m, m) x (m, m) GEMM, both the best of a few runs in this process."""
        return best(self._value, _reps(m)) / best(self._gemm, _reps(m) + 3)

    track_value_over_gemm.unit = "ratio"

    def track_and_grad_over_gemm(self, backend, dtype, m, divergence):
        """Value-and-gradient time / one (m, m) x (m, m) GEMM (best of a few runs each)."""
        return best(self._and_grad, _reps(m)) / best(self._gemm, _reps(m) + 3)

    track_and_grad_over_gemm.unit = "ratio"


class CholeskyFloor:
    """One Cholesky in GEMM units: the extra cost per covariance passed as a matrix."""

    params = (available_backends(), ["float32", "float64"], [100, 1000, 4000])
    param_names = ["backend", "dtype", "m"]
    timeout = 600

    def setup(self, backend, dtype, m):
        self.xp = B.namespace_by_name(backend)
        self.S = make(self.xp, spd_matrix(m, seed=1), getattr(self.xp, dtype))

    def track_cholesky_over_gemm(self, backend, dtype, m):
        return (best(lambda: B.cholesky(self.S), _reps(m) + 3)
                / best(lambda: self.S @ self.S, _reps(m) + 3))

    track_cholesky_over_gemm.unit = "ratio"


class WhitenedKL:
    """The SVGP KL term: O(m^2), compared with one pass over L (``sum(L * L)``)."""

    params = (available_backends(), ["float32", "float64"], [100, 1000, 4000])
    param_names = ["backend", "dtype", "m"]

    def setup(self, backend, dtype, m):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        S = spd_matrix(m, seed=2)
        self.m_ = make(self.xp, S[:, 0], dt)
        self.L = B.cholesky(make(self.xp, S, dt))

    def time_kl_whitened_and_grad(self, backend, dtype, m):
        sync(D.kl_whitened_and_grad(self.m_, self.L, validate=False)[0])

    def track_kl_whitened_and_grad_over_pass(self, backend, dtype, m):
        """kl_whitened_and_grad time / one elementwise pass ``sum(L * L)`` over the factor."""
        xp = self.xp
        return (best(lambda: D.kl_whitened_and_grad(self.m_, self.L, validate=False), _reps(m) + 3)
                / best(lambda: xp.sum(self.L * self.L), _reps(m) + 3))

    track_kl_whitened_and_grad_over_pass.unit = "ratio"
