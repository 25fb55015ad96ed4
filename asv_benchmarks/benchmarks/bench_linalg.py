"""Krylov solvers next to one GEMM of the same shape, and against SciPy's solvers looped.

The reference unit is one product ``K @ B`` with ``K`` (m, m) and ``B`` (m, 256): the floor of
one Krylov iteration on 256 right-hand sides. Ratios are measured in the same process,
interleaved with the solver runs, and use the minimum of several repeats, because other jobs
load this machine's two cores at the same time.

Problem: a Matern-5/2 kernel matrix on 2-d inputs plus 1e-2 I (``_common.spd_matrix``,
condition about 1e4..1e5), 256 Gaussian right-hand sides, and for msMINRES the 15 shifts of
contour integral quadrature for ``K^{-1/2}`` (Hale, Higham & Trefethen 2008) from
``eigen_bounds``.
"""

import time
import warnings

import numpy as np

from gpnum import backend as B
from gpnum.errors import ConvergenceWarning
from gpnum.linalg import Workspace, eigen_bounds, msminres, pcg

from ._common import available_backends, make, spd_matrix, sync, repeats as _repeats

K_COLS = 256
NUM_SHIFTS = 15
FIXED_ITERS = 40
RTOL = 1e-5


def ciq_shifts(lower, upper, q=NUM_SHIFTS):
    """The q quadrature shifts of CIQ for a spectrum inside [lower, upper] (host, float64)."""
    from scipy.special import ellipj, ellipk

    k2 = lower / upper
    kp = ellipk(1.0 - k2)
    u = (np.arange(1, q + 1) - 0.5) * kp / q
    sn, cn, _, _ = ellipj(u, 1.0 - k2)
    return lower * (sn / cn) ** 2


def best_of(f, repeats):
    """Minimum wall time of ``repeats`` calls of ``f`` (synchronised), and the last result."""
    times, out = [], None
    for _ in range(_repeats(repeats)):
        t0 = time.perf_counter()
        out = f()
        sync(out.x if hasattr(out, "x") else out)
        times.append(time.perf_counter() - t0)
    return min(times), out


class _Problem:
    params = (available_backends(), ["float32", "float64"], [500, 1000, 2000, 4000])
    param_names = ["backend", "dtype", "m"]
    timeout = 1800

    def setup(self, backend, dtype, m):
        self.xp = B.namespace_by_name(backend)
        dt = getattr(self.xp, dtype)
        K = spd_matrix(m)
        self.K = make(self.xp, K, dt)
        self.B = make(self.xp, np.random.default_rng(1).standard_normal((m, K_COLS)), dt)
        lower, upper = eigen_bounds(make(self.xp, K, self.xp.float64))
        self.shifts = ciq_shifts(lower, upper)
        warnings.simplefilter("ignore", ConvergenceWarning)
        # msminres reuses one Workspace, as a training loop would: the first touch of fresh
        # memory is expensive in a virtual machine (measured 17 ms per 4 MB basis vector here,
        # against 3 ms for memory in use). Each benchmark warms it up before timing.
        self.workspace = Workspace()

    def _solve(self, maxiter, rtol=0.0):
        raise NotImplementedError

    def time_gemm(self, backend, dtype, m):
        sync(self.K @ self.B)

    def time_fixed_iterations(self, backend, dtype, m):
        """FIXED_ITERS iterations (rtol = 0), including forming the solutions (asv's warm-up
        runs fill the workspace)."""
        sync(self._solve(FIXED_ITERS).x)

    def track_iteration_over_gemm(self, backend, dtype, m):
        """Time of one iteration (a FIXED_ITERS-iteration run / FIXED_ITERS) over one GEMM."""
        self._solve(FIXED_ITERS)                      # warm-up
        gemm = []
        solve = []
        for _ in range(_repeats(3)):
            gemm.append(best_of(lambda: self.K @ self.B, 3)[0])
            solve.append(best_of(lambda: self._solve(FIXED_ITERS), 1)[0])
        return min(solve) / FIXED_ITERS / min(gemm)

    track_iteration_over_gemm.unit = "ratio"

    def track_converged_iteration_over_gemm(self, backend, dtype, m):
        """Time of one iteration of a solve run to rtol 1e-5, over one GEMM (best of three
        solves, each between two sets of GEMMs)."""
        self._solve(None, RTOL)                       # warm-up
        gemm = [best_of(lambda: self.K @ self.B, 5)[0]]
        solve = []
        for _ in range(_repeats(3)):
            t, res = best_of(lambda: self._solve(None, RTOL), 1)
            solve.append(t / res.num_iter)
            gemm.append(best_of(lambda: self.K @ self.B, 5)[0])
        return min(solve) / min(gemm)

    track_converged_iteration_over_gemm.unit = "ratio"

    def track_iterations_to_rtol(self, backend, dtype, m):
        """Iterations to reach rtol 1e-5 on every (shift, column)."""
        return self._solve(None, RTOL).num_iter

    track_iterations_to_rtol.unit = "iterations"


class MultiShiftMINRES(_Problem):
    """msminres with k = 256 columns and s = 15 shifts."""

    def _solve(self, maxiter, rtol=0.0):
        return msminres(self.K, self.B, self.shifts, rtol=rtol, maxiter=maxiter,
                        workspace=self.workspace)


class ConjugateGradients(_Problem):
    """pcg (no preconditioner) with k = 256 columns."""

    def _solve(self, maxiter, rtol=0.0):
        return pcg(self.K, self.B, rtol=rtol, maxiter=maxiter)


class AgainstSciPy:
    """Time of SciPy's minres / cg looped over (shift, column) pairs over gpnum's block solve.

    SciPy solves one vector at a time, so the loop over all 256 columns x 15 shifts would take
    minutes; a subset of pairs is timed and scaled to the full count. Both reach a relative
    residual of 1e-5: SciPy's ``cg`` uses the same test as ``pcg``; SciPy's ``minres`` stops
    on ``rnorm <= rtol (Anorm ||x|| + ||b||)`` with its own estimates, so it gets
    ``rtol = 0.1 * 1e-5 / (1 + cond(A + sI))`` (bounds from ``eigen_bounds``); without the 0.1
    its true residuals were up to 3e-5, with it below 3.3e-6 (m = 500, measured), so SciPy
    over-solves somewhat (about 10% more iterations than needed). NumPy float64 only.
    """

    params = ([500, 1000, 2000, 4000],)
    param_names = ["m"]
    timeout = 1800
    SUBSET_COLS = 4
    SUBSET_SHIFTS = 3

    def setup(self, m):
        K = spd_matrix(m)
        self.K = K
        self.B = np.random.default_rng(1).standard_normal((m, K_COLS))
        lower, upper = eigen_bounds(K)
        self.shifts = ciq_shifts(lower, upper)
        self.scipy_rtol = 0.1 * RTOL / (1.0 + (upper + self.shifts) / (lower + self.shifts))
        warnings.simplefilter("ignore", ConvergenceWarning)
        self.workspace = Workspace()
        msminres(self.K, self.B, self.shifts, rtol=RTOL, workspace=self.workspace)   # warm-up

    def _scipy_minres_loop(self):
        from scipy.sparse.linalg import minres

        picks = np.linspace(0, NUM_SHIFTS - 1, self.SUBSET_SHIFTS).astype(int)
        t0 = time.perf_counter()
        for j in picks:
            for c in range(self.SUBSET_COLS):
                minres(self.K, self.B[:, c], shift=-self.shifts[j], rtol=self.scipy_rtol[j],
                       maxiter=5 * self.K.shape[0])
        per_pair = (time.perf_counter() - t0) / (self.SUBSET_COLS * self.SUBSET_SHIFTS)
        return per_pair * K_COLS * NUM_SHIFTS

    def _scipy_cg_loop(self):
        from scipy.sparse.linalg import cg

        t0 = time.perf_counter()
        for c in range(self.SUBSET_COLS):
            cg(self.K, self.B[:, c], rtol=RTOL, maxiter=10 * self.K.shape[0])
        return (time.perf_counter() - t0) / self.SUBSET_COLS * K_COLS

    def track_scipy_minres_loop_over_msminres(self, m):
        ours = best_of(lambda: msminres(self.K, self.B, self.shifts, rtol=RTOL,
                                        workspace=self.workspace), 1)[0]
        return self._scipy_minres_loop() / ours

    track_scipy_minres_loop_over_msminres.unit = "ratio"

    def track_scipy_cg_loop_over_pcg(self, m):
        ours = best_of(lambda: pcg(self.K, self.B, rtol=RTOL), 1)[0]
        return self._scipy_cg_loop() / ours

    track_scipy_cg_loop_over_pcg.unit = "ratio"
