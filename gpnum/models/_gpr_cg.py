"""GPR without a factorisation: BBMM conjugate gradients, stochastic log-determinants, LOVE.

Gardner et al. (2018, BBMM) for the log marginal likelihood and its gradient; Pleiss et al.
(2018, LOVE) for predictive variances; Wang et al. (2019) for the partitioned kernel products
that keep memory O(n) instead of O(n^2).

With ``K_y = K_XX + (sigma^2 + jitter) I``, residual ``r = y - c``, a rank-k pivoted-Cholesky
preconditioner ``P = L_k L_k^T + (sigma^2 + jitter) I`` and t probes ``z_i`` with covariance
``P`` (:func:`gpnum.linalg.preconditioner_probes`), one block PCG on ``K_y [a, u_1..u_t] =
[r, z_1..z_t]`` (:func:`gpnum.linalg.pcg_lanczos`) gives

    log p(y) ~= -1/2 r^T a - 1/2 (log det P + (1/t) sum_i (z_i^T P^{-1} z_i) e_1^T log(T_i) e_1)
                - n/2 log(2 pi),
    d log p / d K_y ~= 1/2 (a a^T - (1/t) sum_i u_i (P^{-1} z_i)^T),

the second a low-rank cotangent contracted with the kernel's ``gram_vjp`` one row block at a time
(:meth:`gpnum.linalg.KernelMatrix.param_vjp`). Both are stochastic (Hutchinson's estimator
through the probes; the log-determinant's standard error is reported per call) and seeded: with
a fixed seed the probes are the same at every evaluation, so an optimiser sees a deterministic
function of the parameters.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass, fields

from gpnum.backend import (
    available_memory,
    blas_pool,
    cholesky,
    default_rng,
    default_workers,
    device_of,
    get_namespace,
    solve_triangular,
    to_numpy,
)
from gpnum.errors import ConvergenceWarning, NotPSDError
from gpnum.linalg import (
    AddedDiag,
    Dense,
    KernelMatrix,
    LinearOperator,
    block_rows_for_budget,
    lanczos,
    lanczos_quadrature,
    pcg,
    pcg_lanczos,
    pivoted_cholesky_preconditioner,
    preconditioner_probes,
)

__all__ = ["CGOptions"]

_LOG_2PI = math.log(2.0 * math.pi)
_MIB = 1024.0 * 1024.0
# Elements of one kernel tile of the blocked path (4 MiB in float64): the dozen elementwise
# passes of a kernel evaluation then run in cache, not in main memory.
_PRODUCT_BLOCK_ELEMENTS = 2 ** 19
# (n, b) arrays alive at once in a prediction block: the kernel block and its evaluation's
# temporaries (~4), the whitened block and LOVE's products (~4). Sized for 2, the n = 40,000
# run's prediction peaked at 1.2 GiB beyond the data on a 256 MiB budget (training: 407 MiB).
_PREDICT_BLOCK_COPIES = 8
# The share of the available memory (gpnum.backend.available_memory) that the dense kernel
# matrix and its backward temporaries may take when cg_options.dense_limit_mib is None, and the
# limit where the system does not say what is available.
_DENSE_MEMORY_FRACTION = 0.25
_DENSE_FALLBACK_MIB = 2048.0
# (n, n) float64 arrays of the dense path: K, and the slope and distances its backward keeps;
# without the backward (predictions, samples) K alone, and the kernel's float32 K beside its
# float64 copy for a float32 model.
_DENSE_COPIES = 3
_DENSE_COPIES_NO_VJP = 1.5
# The relative error of LOVE's predictive variance (noise included) at the checked training
# inputs (cg_options.variance_checks) that warns.
_VARIANCE_CHECK_WARN = 0.1


#: The entry points below run the kernel's products in NumPy's BLAS pool, where CG, Lanczos
#: and their products run (gpnum.backend.blas_pool: one busy pool, not two, on two cores).
_in_numpy_pool = blas_pool("numpy")

@dataclass(frozen=True)
class CGOptions:
    """Settings of ``GPR(..., solver="cg")`` (Gardner et al. 2018's defaults where they have one).

    Attributes
    ----------
    num_probes : int
        Probe vectors t of the stochastic log-determinant and trace (10 in GPyTorch).
    precond_rank : int
        Rank k of the pivoted-Cholesky preconditioner (the paper's k ~ 100; 0 for none).
    train_rtol : float
        Relative residual tolerance of the training solves (1.0: the paper's; the Lanczos
        depth ``min_iter`` then sets the accuracy).
    train_stop : {"all", "mean"}
        When the training solves stop (:func:`gpnum.linalg.pcg_lanczos`' ``stop``):
        ``"all"`` (default) once every column (the residual's and each probe's) is at or
        below ``train_rtol``; ``"mean"`` once their mean is, GPyTorch's rule, weaker (fewer
        iterations, some probes' solves and tridiagonals stop above the tolerance).
    predict_rtol : float or None
        Relative residual tolerance of the prediction solve. ``None`` (default): GPyTorch's
        0.01 scaled by the noise-to-signal ratio of amplitudes,
        ``0.01 * min(1, sqrt((noise + jitter) / mean(diag K)))``. Why: a residual ``r`` moves
        the predictive mean at a new point by up to ``sqrt(k(x, x)) |r| / sigma`` (the
        solution error's RKHS norm), so with a tiny noise a fixed 0.01 leaves predictions far
        from the exact ones (bike, noise 1e-4 and signal variance 900: test RMSE 0.19 at 0.01,
        0.0019 at the scaled 3.3e-6, which equals Cholesky's; docs/exact-gp.md).
    min_iter : int
        Fewest CG iterations of a training step (the Lanczos quadrature's depth; 20 as
        GPyTorch's ``max_lanczos_quadrature_iterations``).
    maxiter : int
        Most CG iterations.
    love_rank : int
        Lanczos steps of the LOVE variance cache (Pleiss et al. 2018). On the blocked path
        they share the prediction solve's kernel passes: the cache costs
        ``max(PCG iterations, love_rank)`` passes.
    memory_budget_mib : float
        Memory for kernel blocks (MiB). Row blocks of ``k(X_b, X)`` are sized so that the block
        and the temporaries of its backward pass fit.
    dense_limit_mib : float or None
        When the whole ``n x n`` kernel matrix (and its backward temporaries, about 3 copies;
        1.5 for predictions and samples) fits in this many MiB, it is formed once per step and
        reused by every CG iteration instead of being recomputed block by block (0 disables).
        ``None`` (default): a quarter of the memory available when the step or prediction
        starts (:func:`gpnum.backend.available_memory`: ``MemAvailable`` of ``/proc/meminfo``
        on Linux, the free device memory on a GPU; 2048 MiB where the system does not say). On
        a machine with 22 GiB available the dense path then holds up to n ~ 15,500 in
        training and n ~ 22,000 in prediction.
    workers : int or None
        Threads of the blocked path's kernel tiles (:class:`gpnum.linalg.KernelMatrix`).
        ``None`` (default): every usable core on NumPy, 1 on other namespaces
        (:func:`gpnum.backend.default_workers`). The blocked path is the one part of gpnum
        that uses all cores by default, whatever ``GPNUM_BLAS_THREADS`` says (that setting
        sizes BLAS pools, which do not thread the kernel's elementwise passes).
    variance_checks : int
        Kernel columns at random training inputs that the prediction solve carries along to
        check LOVE's variances against exact quadratic forms (0 disables the check). They
        ride along in the solve's products, which then carry more columns (their cost on
        bike and elevators: docs/exact-gp.md); set 0 where the variances are not used.
    seed : int
        Seed of the probes (fixed: the same probes at every evaluation).
    probe_design : {"rademacher", "hadamard"}
        ``"hadamard"``: exactly orthogonal +-1 probes, ``2^m >= n + precond_rank`` of them
        (:func:`gpnum.linalg.preconditioner_probes`), which make the estimates exact up to the
        CG tolerance: for checking, not for large n.
    """

    num_probes: int = 10
    precond_rank: int = 100
    train_rtol: float = 1.0
    train_stop: str = "all"
    predict_rtol: float | None = None
    min_iter: int = 20
    maxiter: int = 1000
    love_rank: int = 100
    memory_budget_mib: float = 256.0
    dense_limit_mib: float | None = None
    workers: int | None = None
    seed: int = 0
    probe_design: str = "rademacher"
    variance_checks: int = 4

    def __post_init__(self):
        for name in ("num_probes", "min_iter", "maxiter", "love_rank"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"cg_options.{name}: expected an integer >= 1, got {v!r}")
        for name in ("precond_rank", "variance_checks"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"cg_options.{name}: expected an integer >= 0, got {v!r}")
        for name in ("train_rtol", "predict_rtol", "memory_budget_mib"):
            v = getattr(self, name)
            if name == "predict_rtol" and v is None:
                continue
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"cg_options.{name}: expected a positive number, got {v!r}")
        if self.train_stop not in ("all", "mean"):
            raise ValueError(f"cg_options.train_stop: expected 'all' or 'mean', got "
                             f"{self.train_stop!r}")
        if self.probe_design not in ("rademacher", "hadamard"):
            raise ValueError(f"cg_options.probe_design: expected 'rademacher' or 'hadamard', "
                             f"got {self.probe_design!r}")
        limit = self.dense_limit_mib
        if limit is not None and not (isinstance(limit, (int, float))
                                      and not isinstance(limit, bool) and limit >= 0):
            raise ValueError(f"cg_options.dense_limit_mib: expected a number >= 0 or None, got "
                             f"{limit!r}")
        w = self.workers
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise ValueError(f"cg_options.workers: expected an integer >= 1 or None, got {w!r}")

    @classmethod
    def coerce(cls, value):
        """``None`` (defaults), a dict of fields or a :class:`CGOptions`."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise KeyError(f"cg_options: unknown field(s) {unknown}; expected some of "
                               f"{sorted(known)}")
            return cls(**value)
        raise TypeError(f"cg_options: expected None, a dict or CGOptions, got "
                        f"{type(value).__name__}")

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------- operators
def dense_limit_bytes(opts, xp=None, device=None):
    """The memory the dense path's ``n x n`` matrices may take: ``cg_options.dense_limit_mib``
    when given, else :data:`_DENSE_MEMORY_FRACTION` of the available memory."""
    if opts.dense_limit_mib is not None:
        return opts.dense_limit_mib * _MIB
    free = available_memory(xp, device)
    if free is None:
        return _DENSE_FALLBACK_MIB * _MIB
    return _DENSE_MEMORY_FRACTION * free


def dense_fits(n, opts, xp=None, device=None, need_vjp=True, matrices=1):
    """Whether the dense path's ``n x n`` float64 matrices fit (:func:`dense_limit_bytes`):
    three of them for a training step, one and a half without the backward pass, for each of
    ``matrices`` kernel matrices (a multi-output model's latent grams)."""
    copies = _DENSE_COPIES if need_vjp else _DENSE_COPIES_NO_VJP
    return matrices * copies * 8.0 * n * n <= dense_limit_bytes(opts, xp, device)


def kernel_operator(model, X, opts, need_vjp):
    """``K_XX`` as an operator in float64: dense (formed once) when it fits
    (:func:`dense_fits`), else a blocked :class:`KernelMatrix` whose tiles ``cg_options.workers``
    threads share. Returns ``(op, dense_vjp)``; ``dense_vjp`` is the gram's backward function on
    the dense path (None otherwise)."""
    xp = model.xp
    n = X.shape[0]
    high = xp.float64
    if dense_fits(n, opts, xp, model.device, need_vjp):
        if need_vjp:
            K, vjp = model.kernel.gram_and_vjp(X)
        else:
            K, vjp = model.kernel(X), None
        return Dense(xp.astype(K, high, copy=False), symmetric=True), vjp
    rows = min(block_rows_for_budget(n, opts.memory_budget_mib * _MIB, 8), n)
    return tiled_kernel_matrix(model, X, rows), None


def tiled_kernel_matrix(model, X, rows, kernel=None):
    """The blocked ``k(X, X)`` in float64 (``k``: ``kernel``, default ``model.kernel``):
    cache-sized tiles, one per worker, at most ``rows`` rows' worth of elements (the memory
    budget's); ``cg_options.workers`` threads."""
    xp = model.xp
    n = X.shape[0]
    opts = model.cg_options
    workers = default_workers(xp) if opts.workers is None else opts.workers
    # products and backward pass in cache-sized tiles: faster than the budget's larger ones,
    # whose diagonal tiles (evaluated whole) are also a larger share of the work
    # (docs/exact-gp.md)
    tile_rows = min(rows, max(1, _PRODUCT_BLOCK_ELEMENTS * workers // n))
    return KernelMatrix(model.kernel if kernel is None else kernel, X, block_size=tile_rows,
                        vjp_block_size=tile_rows,
                        compute_dtype=xp.float64, workers=workers)


def noisy_operator(model, Kop):
    """``K + (sigma^2 + jitter) I``, refused when the shift is too small for conjugate
    gradients: below ``1e-10`` of the kernel's mean diagonal the preconditioner's Woodbury
    inverse overflows (its ``F^T F / sigma^2``) and CG cannot reach any tolerance, so the
    solver would fail with a message about an unnamed matrix or return a wrong answer."""
    xp = model.xp
    noise = (xp.astype(model.likelihood.variance, xp.float64, copy=False)
             + float(model.jitter))
    shift = float(noise)
    scale = float(xp.mean(Kop.diagonal()))
    if not shift > 1e-10 * scale:
        raise NotPSDError(
            f"GPR(solver='cg'): noise variance + jitter = {shift:.3g} is below 1e-10 of the "
            f"kernel matrix's mean diagonal ({scale:.3g}): conjugate gradients need a larger "
            "shift. Pass a fixed jitter (GPR(..., jitter=1e-4): GPyTorch's noise floor, as "
            "in Wang et al. 2019) or use solver='cholesky'")
    return AddedDiag(Kop, xp.reshape(noise, ()))


def predict_rtol(model, Kop=None):
    """The prediction solves' relative tolerance: ``cg_options.predict_rtol`` when given, else
    ``0.01 * min(1, sqrt((noise + jitter) / mean(diag K)))`` (see :class:`CGOptions`)."""
    opts = model.cg_options
    if opts.predict_rtol is not None:
        return float(opts.predict_rtol)
    xp = model.xp
    if Kop is None:
        scale = float(xp.mean(xp.astype(model.kernel.diag(model.X), xp.float64, copy=False)))
    else:
        scale = float(xp.mean(Kop.diagonal()))
    shift = float(model.likelihood.variance) + float(model.jitter)
    return 0.01 * min(1.0, math.sqrt(shift / scale)) if scale > 0 else 0.01


def _preconditioner(A, opts):
    from gpnum.linalg import LowRank, WoodburyInverse

    if opts.precond_rank == 0:
        xp = A.xp
        empty = xp.zeros((A.shape[0], 0), dtype=A.dtype, device=A.device)
        return WoodburyInverse(LowRank(empty, A.diag))
    return pivoted_cholesky_preconditioner(A, rank=opts.precond_rank)


# ------------------------------------------------------------------------ objective
@_in_numpy_pool
def lml(model, X, y, need_grad, operator=None):
    """Stochastic BBMM log marginal likelihood and gradients (module notes). A given
    ``operator`` (float64 ``K_XX``: products, diagonal, columns and ``param_vjp``)
    replaces the in-memory one (GPR.cg_objective_and_grad)."""
    xp = model.xp
    opts = model.cg_options
    n = X.shape[0]
    high = xp.float64
    if operator is None:
        Kop, dense_vjp = kernel_operator(model, X, opts, need_grad)
    else:
        Kop, dense_vjp = operator, None
    A = noisy_operator(model, Kop)
    M = _preconditioner(A, opts)
    resid = xp.astype(y, high, copy=False) - xp.astype(model.mean, high, copy=False)
    Z = preconditioner_probes(M, opts.num_probes, seed=opts.seed, design=opts.probe_design)
    t = Z.shape[1]
    res = pcg_lanczos(A, xp.concat([resid[:, None], Z], axis=1), M=M, rtol=opts.train_rtol,
                      min_iter=opts.min_iter, maxiter=opts.maxiter, stop=opts.train_stop)
    alpha = res.x[:, 0]
    U = res.x[:, 1:]
    quad = lanczos_quadrature(res.tridiag_alpha[1:, :], res.tridiag_beta[1:, :],
                              res.start_norm2[1:])
    logdet = M.logdet() + xp.mean(quad)
    value = -0.5 * xp.sum(resid * alpha) - 0.5 * logdet - 0.5 * n * _LOG_2PI
    stderr = (xp.std(quad, correction=1) / math.sqrt(t)) if t > 1 else xp.asarray(
        float("nan"), dtype=high, device=model.device)
    model._cg_last = {"num_iter": res.num_iter,
                      "relative_residual": float(xp.max(res.relative_residual)),
                      "logdet_std_error": float(stderr),
                      "lml_std_error": 0.5 * float(stderr)}
    value = model._scalar(value)
    if not need_grad:
        return value, None
    V = M @ Z                                                   # P^{-1} z_i
    # Cotangent of K_y: 1/2 (a a^T - (1/t) sum_i u_i v_i^T), kept as two (n, t+1) factors.
    left = xp.concat([0.5 * alpha[:, None], (-0.5 / t) * U], axis=1)
    right = xp.concat([alpha[:, None], V], axis=1)
    if dense_vjp is not None:
        # the (n, n) cotangent L R^T is never formed: the kernel goes through it in blocks of
        # rows beside the K and slope it kept (only its symmetric part reaches the parameters)
        g_kernel = dense_vjp.low_rank(xp.astype(left, model.dtype, copy=False),
                                      xp.astype(right, model.dtype, copy=False))["params"]
    else:
        g_kernel = Kop.param_vjp(left, right)["kernel"]
    g_noise = xp.sum(left * right)
    if t > 1:
        # The noise gradient's trace term per probe: its spread is the gradient's stated error.
        per_probe = xp.sum(U * V, axis=0)
        model._cg_last["noise_grad_std_error"] = float(
            0.5 * xp.std(per_probe, correction=1) / math.sqrt(t))
    return value, model._pack_grads(alpha, g_kernel, g_noise)


# ------------------------------------------------------------------------ predictions
def _fingerprint(model):
    return tuple((k, to_numpy(v).tobytes()) for k, v in sorted(model.parameters().items())) + (
        float(model.jitter),)


def per_parameter_value(attr):
    """Decorator of ``state(model)``: the result is kept on ``model.<attr>`` with the
    parameters' (and jitter's) values it was computed for, and computed again only when they
    change (the prediction caches of the CG, grid and SKI paths)."""
    def wrap(fn):
        @functools.wraps(fn)
        def cached(model):
            key = _fingerprint(model)
            hit = getattr(model, attr, None)
            if hit is not None and hit[0] == key:
                return hit[1]
            state = fn(model)
            setattr(model, attr, (key, state))
            return state
        return cached
    return wrap


@_in_numpy_pool
@per_parameter_value("_cg_cache")
def prediction_state(model):
    """The mean cache ``a = K_y^{-1} r`` (PCG at ``predict_rtol``) and the LOVE cache ``R``
    (n, k) with ``R R^T ~= K_y^{-1}``, both computed once per parameter value and kept."""
    xp = model.xp
    opts = model.cg_options
    high = xp.float64
    Kop, _ = kernel_operator(model, model.X, opts, False)
    A = noisy_operator(model, Kop)
    M = _preconditioner(A, opts)
    resid = xp.astype(model.y, high, copy=False) - xp.astype(model.mean, high, copy=False)
    rtol = predict_rtol(model, Kop)
    # The mean's solve carries cg_options.variance_checks kernel columns along (one product
    # with a few more columns): their exact quadratic forms check LOVE below.
    n = model.X.shape[0]
    checks = min(opts.variance_checks, n)
    rhs = resid[:, None]
    if checks:
        idx = default_rng(opts.seed + 1, xp=xp, device=model.device).permutation(n)[:checks]
        Kc = Kop.columns(idx)                                           # (n, c)
        rhs = xp.concat([rhs, Kc], axis=1)
    k = min(opts.love_rank, n)
    if Kop.fresh_products:
        # every product re-evaluates the kernel: LOVE's Lanczos steps ride along in the
        # solve's products, then finish alone
        steps = _LanczosSteps(M, resid, k)
        sol = pcg(_Riding(A, steps), rhs, M=M, rtol=rtol, maxiter=opts.maxiter)
        love = steps.finish(A)
    else:
        sol = pcg(A, rhs, M=M, rtol=rtol, maxiter=opts.maxiter)
        love = _love_cache(A, M, resid, k)
    state = {"alpha": sol.x[:, 0], "block": block_rows_for_budget(
        n, opts.memory_budget_mib * _MIB, 8, copies=_PREDICT_BLOCK_COPIES)}
    state.update(love)
    check = None
    if checks:
        noise = float(A.diag.diag)
        prior = xp.take(Kop.diagonal(), idx)
        exact = prior - xp.sum(Kc * sol.x[:, 1:], axis=0)
        love = prior - _love_quad(state, Kc)[0]
        check = float(xp.max(xp.abs(love - exact)
                             / (xp.where(exact > 0.0, exact, 0.0) + noise)))
    model._cg_predict_last = solve_record(sol, rtol, M, check)
    if check is not None and check > _VARIANCE_CHECK_WARN:
        warnings.warn(
            f"GPR(solver='cg'): LOVE predictive variances are off by up to {check:.2g} of the "
            f"predictive variance at {checks} training inputs checked against exact solves "
            f"(tolerance {_VARIANCE_CHECK_WARN}); the means are not affected. The preconditioner "
            f"(rank {M.lowrank.factor.shape[1]}) leaves too much of K above the noise: raise "
            "cg_options.precond_rank and love_rank, or take variances from "
            "solver='cholesky' where n allows", ConvergenceWarning, stacklevel=5)
    return state


def solve_record(sol, rtol, M, variance_check=None):
    """What ``GPR.cg_predict_info`` reports of the prediction solve ``sol`` (a PCG result run
    to ``rtol`` with the pivoted-Cholesky preconditioner ``M``)."""
    xp = get_namespace(sol.relative_residual)
    return {"num_iter": int(sol.num_iter), "rtol": rtol,
            "relative_residual": float(xp.max(sol.relative_residual)),
            "precond_rank": int(M.lowrank.factor.shape[1]), "variance_check": variance_check}


def _whitener(M):
    """``W`` with ``W P W^T = I`` for the preconditioner ``P = F F^T + D`` (``M = P^{-1}``):
    ``W = C D^{-1/2}``, ``C = I + U ((1 + s^2)^{-1/2} - 1) U^T`` from the thin SVD
    ``D^{-1/2} F = U diag(s) V^T`` (through the eigen-decomposition of the r x r ``F^T D^{-1} F``).
    Returns ``(apply_W, apply_Wt)`` on (n, b) blocks."""
    xp = M.xp
    F = M.lowrank.factor
    d = M.lowrank.diag.diag
    dmh = 1.0 / xp.sqrt(d)
    dmh_col = dmh if d.ndim == 0 else dmh[:, None]
    if F.shape[1] == 0:
        return (lambda X: X * dmh_col), (lambda X: X * dmh_col)
    G = F * dmh_col                                                # D^{-1/2} F
    s2, Vr = xp.linalg.eigh(G.T @ G)
    keep = s2 > 1e-12 * xp.max(s2)
    s2 = xp.where(keep, s2, 1.0)
    Ur = (G @ Vr) / xp.sqrt(s2)[None, :]
    shrink = xp.where(keep, 1.0 / xp.sqrt(1.0 + s2) - 1.0, 0.0)

    def apply_C(X):
        return X + Ur @ (shrink[:, None] * (Ur.T @ X))

    return (lambda X: apply_C(X * dmh_col)), (lambda X: apply_C(X) * dmh_col)


def _love_cache(A, M, start, k):
    """Preconditioned LOVE: k Lanczos steps on ``B = W K_y W^T`` (``W`` whitens the
    preconditioner, so B's spectrum clusters at 1) from ``W r``: ``B Q ~= Q T``. Then for
    ``w = W k_*``,

        k_*^T K_y^{-1} k_* = w^T B^{-1} w ~= |L_T^{-1} Q^T w|^2 + |w|^2 - |Q^T w|^2,

    the Krylov part exact on span(Q) (Pleiss et al. 2018) and ``B^{-1} ~= I`` on its
    complement (where the preconditioner already captured ``K_y``). O(n k) per test point."""

    apply_W, apply_Wt = _whitener(M)

    def B(X):
        return apply_W(A @ apply_Wt(X))

    lz = lanczos(B, apply_W(start[:, None])[:, 0], k)
    L_T = cholesky(lz.tridiagonal())
    return {"love_Q": lz.basis, "love_L": L_T, "love_W": apply_W}


class _LanczosSteps:
    """:func:`_love_cache`'s Lanczos process (full reorthogonalisation, Gram-Schmidt twice) one
    step at a time, so that its products can share another solver's (:class:`_Riding`).
    Stops after ``k`` steps or at an invariant subspace (the cache is then exact there)."""

    def __init__(self, M, start, k):
        self.apply_W, self.apply_Wt = _whitener(M)
        self.xp = xp = get_namespace(start)
        v = self.apply_W(start[:, None])[:, 0]
        self.basis = [v / xp.linalg.vector_norm(v)]
        self.alpha, self.beta, self.k, self.done = [], [], k, False

    def pending(self):
        """``W^T q_j`` (n, 1): the column whose product with ``K_y`` the next step needs."""
        return self.apply_Wt(self.basis[-1][:, None])

    def advance(self, Av):
        """One step from ``Av = K_y W^T q_j`` (n, 1)."""
        xp = self.xp
        w = self.apply_W(Av)[:, 0]                                  # B q_j
        q = self.basis[-1]
        a = xp.sum(q * w)
        w = w - a * q
        if self.beta:
            w = w - self.beta[-1] * self.basis[-2]
        Q = xp.stack(self.basis, axis=1)                            # (n, j)
        for _ in range(2):
            w = w - Q @ (xp.matrix_transpose(Q) @ w)
        self.alpha.append(a)
        b = xp.linalg.vector_norm(w)
        if len(self.alpha) == self.k or not float(b) > 1e-12 * float(xp.abs(a)):
            self.done = True
            return
        self.beta.append(b)
        self.basis.append(w / b)

    def finish(self, A):
        """The remaining steps with ``A`` alone; returns :func:`_love_cache`'s dictionary."""
        while not self.done:
            self.advance(A @ self.pending())
        xp = self.xp
        j = len(self.alpha)
        alpha = xp.stack(self.alpha)
        dev = device_of(alpha)
        T = alpha[:, None] * xp.eye(j, dtype=alpha.dtype, device=dev)
        if j > 1:
            rows = xp.arange(j, device=dev)
            upper = xp.astype(rows[:, None] + 1 == rows[None, :], alpha.dtype)
            off = xp.concat([xp.stack(self.beta[:j - 1]),
                             xp.zeros((1,), dtype=alpha.dtype, device=dev)])
            T = T + upper * off[:, None] + xp.matrix_transpose(upper * off[:, None])
        return {"love_Q": xp.stack(self.basis[:j], axis=1), "love_L": cholesky(T),
                "love_W": self.apply_W}


class _Riding(LinearOperator):
    """``K_y`` for a solver, each of whose products also carries the next Lanczos column of a
    :class:`_LanczosSteps`: one kernel pass serves both (the blocked path's products cost the
    kernel's evaluation, nearly whatever the number of columns)."""

    fresh_products = True

    def __init__(self, A, steps):
        super().__init__(A.shape, A.dtype, A.device, A.xp)
        self.A, self.steps = A, steps

    def _matmat(self, X):
        if self.steps.done:
            return self.A @ X
        Y = self.A @ self.xp.concat([X, self.steps.pending()], axis=1)
        self.steps.advance(Y[:, -1:])
        return Y[:, :-1]

    def _diagonal(self):
        return self.A.diagonal()


def _love_quad(state, Ks):
    """``k_*^T K_y^{-1} k_*`` for the columns of ``Ks`` (n, b), from :func:`_love_cache`."""
    xp = get_namespace(Ks)
    w = state["love_W"](Ks)
    a = state["love_Q"].T @ w                                      # (k, b)
    c = solve_triangular(state["love_L"], a, lower=True)
    return xp.sum(c * c, axis=0) + xp.sum(w * w, axis=0) - xp.sum(a * a, axis=0), c, w, a


@_in_numpy_pool
def predict(model, Xnew, state, full_cov):
    xp = model.xp
    high = xp.float64
    m = Xnew.shape[0]
    step = max(1, min(m, state["block"]))
    means, proj = [], []
    for s in range(0, m, step):
        e = min(m, s + step)
        Ks = xp.astype(model.kernel(model.X, Xnew[s:e, :]), high, copy=False)   # (n, b)
        means.append(Ks.T @ state["alpha"])
        # only the (b,) quadratic forms are kept for variances: the (n, b) whitened block of
        # every test block held to the end took O(n m) memory (640 MB at n = 40,000, m = 2,000)
        proj.append(_love_quad(state, Ks)[0] if not full_cov else _love_quad(state, Ks)[1:])
    mean = means[0] if len(means) == 1 else xp.concat(means)
    mean = model.mean + xp.astype(mean, model.dtype, copy=False)
    if full_cov:
        c, w, a = (xp.concat([p[i] for p in proj], axis=1) for i in range(3))
        cov = (xp.astype(model.kernel(Xnew), high, copy=False)
               - (c.T @ c + w.T @ w - a.T @ a))
    else:
        quad = proj[0] if len(proj) == 1 else xp.concat(proj)
        cov = xp.astype(model.kernel.diag(Xnew), high, copy=False) - quad
    return mean, xp.astype(cov, model.dtype, copy=False)


# ------------------------------------------------------------------------ posterior samples
@_in_numpy_pool
def sample_f(model, Xnew, eps, diag, resid, rtol):
    """Pathwise posterior samples at ``Xnew`` (m, d) without a factorisation (GPR.sample_f).

    ``eps`` (n + m, k) standard normals, ``diag`` (n + m,) the joint draw's added diagonal
    (noise on the training rows, jitter on the new ones), ``resid = y - c`` (n,). The prior
    draw ``(K([X; Xnew]) + diag(diag))^{1/2} eps`` by CIQ on a lazy kernel matrix, then one
    preconditioned CG solve ``K_y^{-1} (r - f_X - e)`` for all k columns and the blocked product
    ``K_*X`` with it, both at ``rtol``. Returns ``f_* + K_*X K_y^{-1} (r - f_X - e)`` (m, k) in float64 (without
    the constant mean).
    """
    from gpnum.ciq import sqrt_matmul
    from gpnum.linalg import Diagonal

    xp = model.xp
    opts = model.cg_options
    high = xp.float64
    n, m = model.X.shape[0], Xnew.shape[0]
    Xall = xp.concat([model.X, Xnew], axis=0)
    rows = block_rows_for_budget(n + m, opts.memory_budget_mib * _MIB, 8,
                                 copies=_PREDICT_BLOCK_COPIES)
    joint = AddedDiag(tiled_kernel_matrix(model, Xall, min(rows, n + m)), Diagonal(diag))
    prior = sqrt_matmul(joint, eps, rtol=rtol, maxiter=opts.maxiter).x
    # K_y (with the preconditioner) exactly as the prediction solve builds it.
    Kop, _ = kernel_operator(model, model.X, opts, False)
    A = noisy_operator(model, Kop)
    M = _preconditioner(A, opts)
    sol = pcg(A, resid[:, None] - prior[:n, :], M=M, rtol=rtol, maxiter=opts.maxiter)
    V = sol.x                                                          # (n, k)
    step = max(1, min(m, block_rows_for_budget(n, opts.memory_budget_mib * _MIB, 8,
                                               copies=_PREDICT_BLOCK_COPIES)))
    parts = []
    for s in range(0, m, step):
        e = min(m, s + step)
        Ks = xp.astype(model.kernel(Xnew[s:e, :], model.X), high, copy=False)   # (b, n)
        parts.append(Ks @ V)
    update = parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
    return prior[n:, :] + update
