"""Jittered Cholesky and triangular solves, each next to one GEMM of the same size."""

import time

from gpnum import backend as B

from ._common import available_backends, make, spd_matrix, sync, repeats


class CholeskySolve:
    params = (available_backends(), ["float32", "float64"], [500, 1000, 2000])
    param_names = ["backend", "dtype", "m"]

    def setup(self, backend, dtype, m):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        self.K = make(self.xp, spd_matrix(m), dt)
        self.Bm = make(self.xp, spd_matrix(m)[:, :256], dt)
        self.L = B.cholesky(self.K)

    def time_cholesky(self, backend, dtype, m):
        sync(B.cholesky(self.K))

    def time_solve_triangular_k256(self, backend, dtype, m):
        sync(B.solve_triangular(self.L, self.Bm))

    def time_gemm_k256(self, backend, dtype, m):
        sync(self.K @ self.Bm)

    def track_cholesky_over_gemm(self, backend, dtype, m):
        """Cholesky time divided by one (m, m) x (m, 256) GEMM, measured in the same run."""
        def best(f, reps=5):
            ts = []
            for _ in range(repeats(reps)):
                t0 = time.perf_counter()
                sync(f())
                ts.append(time.perf_counter() - t0)
            return min(ts)

        return best(lambda: B.cholesky(self.K)) / best(lambda: self.K @ self.Bm)

    track_cholesky_over_gemm.unit = "ratio"
