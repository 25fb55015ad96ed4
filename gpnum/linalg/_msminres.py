"""Multi-shift MINRES: ``(A + s_j I) X_j = B`` for every shift and column from one Krylov space.

Shift invariance of the Krylov space (``K(A + sI, b) = K(A, b)``) lets one Lanczos process per
column serve every shift: the shifted problem ``j`` only changes the tridiagonal ``T + s_j I``.
Each iteration therefore costs one product with ``A`` whatever the number of shifts (Paige &
Saunders 1975 for MINRES; Jegminat et al. 2016 and Pleiss et al. 2020, "Fast matrix square
roots with applications to Gaussian processes and Bayesian optimization", for the shifted form).

The textbook recurrence updates three (s, n, k) direction/solution arrays per iteration: a
memory-bound sweep that costs several matrix products by itself. Instead this module keeps the
Lanczos basis, runs only the Givens QR recurrences of the s small shifted tridiagonal
least-squares problems on (s, k) arrays (their residual norms ``|phibar|`` come for free, so the
stopping test needs no full vectors), and forms all solutions at the end with one batched
product ``X_j = V R_j^{-1} phi_j``. When the basis would exceed ``max_basis_bytes`` it is folded
into the running solution and two carried direction vectors per shift ("chunks"): the classic
low-memory recurrence is the limit of chunks of length one.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from gpnum.backend import asarray, device_of, get_namespace, is_array, to_numpy
from gpnum.errors import ConvergenceWarning, ShapeError, describe_shape
from gpnum.linalg._solver_result import IterativeResult
from gpnum.linalg._validation import (
    check_maxiter,
    check_tolerances,
    default_check_every,
    on_host,
    prepare_system,
)

__all__ = ["msminres", "MultiShiftResult", "Workspace"]

# Initial basis capacity (vectors); it doubles when full.
_INITIAL_CAPACITY = 8
# Rows per block of the transposed copy into the basis on the host: a blocked transpose stays
# in cache, where one strided copy does not.
_STORE_ROWS = 256


class Workspace:
    """Memory for the Lanczos basis of :func:`msminres`, kept between calls.

    A solve stores up to ``max_basis_bytes`` of basis vectors. Allocating that afresh in every
    call means touching fresh memory every iteration, which is slow where first touches are
    expensive (virtual machines: several times the cost of writing memory already in use;
    docs/benchmarks.md). Pass one ``Workspace`` to repeated calls (a
    training loop) to reuse the same buffer; it grows to the largest basis needed and holds
    on to it until :meth:`release` or until the workspace is dropped.
    """

    def __init__(self):
        self._buffer = None

    @property
    def nbytes(self) -> int:
        """Bytes currently held."""
        if self._buffer is None:
            return 0
        buf = self._buffer
        return int(buf.shape[0]) * get_namespace(buf).finfo(buf.dtype).bits // 8

    def release(self) -> None:
        """Drop the buffer."""
        self._buffer = None

    def take(self, xp, shape, dtype, device):
        """An uninitialised array of ``shape`` backed by the workspace buffer."""
        size = math.prod(shape)
        buf = self._buffer
        if (buf is None or get_namespace(buf) is not xp or buf.dtype != dtype
                or device_of(buf) != device or buf.shape[0] < size):
            buf = None
            self._buffer = None                       # free the old one before allocating
            buf = xp.empty((size,), dtype=dtype, device=device)
            self._buffer = buf
        return xp.reshape(buf[:size], shape)

    def __repr__(self):
        return f"Workspace({self.nbytes / 2**20:.1f} MiB)"


@dataclass(frozen=True, repr=False)
class MultiShiftResult(IterativeResult):
    """Outcome of :func:`msminres`.

    Attributes
    ----------
    x : array (s, n, k), or (s, n) for a one-dimensional right-hand side
        ``x[j] ~= (A + shifts[j] I)^{-1} B``. May be a strided view of the (k, s, n) array the
        final batched product writes (no copy is made).
    info : int
        0 converged; > 0 the number of iterations used without converging; < 0 breakdown
        (-1: the operator produced non-finite values).
    num_iter : int
        Lanczos iterations (products with ``A``) performed.
    residual_norm : array (s, k), or (s,)
        MINRES residual norms ``||B - (A + s_j I) x_j||`` from the QR recurrences (exact in exact
        arithmetic; the true residual agrees down to the attainable accuracy of the dtype).
    b_norm : array (k,), or 0-d
        Column norms of ``B``.
    converged : array of bool (s, k), or (s,)
        Which (shift, column) pairs met ``residual_norm <= max(rtol ||b||, atol)``.
    shifts : array (s,)
    message : str
    """

    shifts: object
    message: str


def _prepare_shifts(shifts, op):
    xp = op.xp
    if is_array(shifts):
        if get_namespace(shifts) is not xp:
            shifts = to_numpy(shifts)
    try:
        arr = asarray(shifts, dtype=op.dtype, xp=xp, device=op.device)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"shifts: expected a sequence of numbers, got {shifts!r}") from exc
    if arr.ndim == 0:
        arr = xp.reshape(arr, (1,))
    if arr.ndim != 1 or arr.shape[0] < 1:
        raise ShapeError(f"shifts: expected shape (s,) with s >= 1, got "
                         f"{describe_shape(arr.shape)}")
    if not bool(xp.all(xp.isfinite(arr))):
        raise ValueError(f"shifts: expected finite values, got {to_numpy(arr).tolist()}")
    if not bool(xp.all(arr >= 0.0)):
        raise ValueError(f"shifts: expected values >= 0 (A + s I must stay positive "
                         f"semi-definite), got {to_numpy(arr).tolist()}")
    return arr


def _back_substitute(xp, gamma, delta, eps, rhs):
    """Solve ``R y = rhs`` for the banded upper-triangular ``R`` of the MINRES QR.

    Column ``i`` of ``R`` holds ``gamma[i]`` on the diagonal, ``delta[i]`` one row above and
    ``eps[i]`` two rows above. All entries are (s, k) arrays (one system per shift and column);
    ``rhs`` is a list of (p, s, k) arrays, solved for p right-hand sides at once.

    Returns a list of (p, s, k) arrays ``y[i]``.
    """
    c = len(gamma)
    y = [None] * c
    for i in range(c - 1, -1, -1):
        r = rhs[i]
        if i + 1 < c:
            r = r - delta[i + 1] * y[i + 1]
        if i + 2 < c:
            r = r - eps[i + 2] * y[i + 2]
        y[i] = r / gamma[i]
    return y


def _combine_basis(xp, basis, c, coeffs):
    """``sum_i basis_i coeffs_i`` for every (p, shift, column) with one batched product.

    Parameters
    ----------
    basis : array (k, capacity, n)
        Lanczos vectors stored transposed; the first ``c`` are used.
    coeffs : list of c arrays (p, s, k)

    Returns
    -------
    array (p, s, n, k)
        A strided view of the (k, p*s, n) product: the layout the batched product writes.
        Copying it to row-major order would cost another pass over s * n * k values.
    """
    p, s, k = coeffs[0].shape
    n = basis.shape[2]
    Y = xp.permute_dims(xp.stack(coeffs, axis=-1), (2, 0, 1, 3))   # (k, p, s, c) view
    # Flattening materialises the view in row-major order: batched BLAS needs contiguous
    # operands (a strided one is far slower).
    Y = xp.reshape(xp.reshape(Y, (-1,)), (k, p * s, c))
    out = Y @ basis[:, :c, :]                           # (k, p*s, n)
    return xp.permute_dims(xp.reshape(out, (k, p, s, n)), (1, 2, 3, 0))


def msminres(A, B, shifts, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=None,
             max_basis_bytes=2**30, workspace=None, _combine=None):
    """Solve ``(A + shifts[j] I) X_j = B`` for all shifts and all columns of ``B`` at once.

    Parameters
    ----------
    A : LinearOperator, array (n, n) or callable
        Symmetric operator with ``A + shifts[j] I`` positive (semi-)definite for every shift.
    B : array (n,) or (n, k)
        Right-hand sides.
    shifts : sequence or array (s,)
        Non-negative shifts.
    rtol, atol : float
        Each (shift, column) stops when ``||b - (A + s I) x|| <= max(rtol ||b||, atol)``.
    maxiter : int, optional
        Most Lanczos iterations (default ``5 n``, as SciPy's ``minres``).
    check_every : int, optional
        Iterations between convergence tests (host synchronisations). Default 1 on the host,
        5 on an accelerator.
    max_basis_bytes : int
        Memory the stored Lanczos basis may take (``iterations * n * k * itemsize``); past it
        the basis is folded into the solutions and the run continues in chunks.
    workspace : Workspace, optional
        Reuse its memory for the basis (repeated calls: see :class:`Workspace`).

    Returns
    -------
    MultiShiftResult
        ``x`` of shape (s, n, k) (or (s, n) for a one-dimensional ``B``), ``info``,
        ``num_iter``, ``residual_norm`` (s, k), ``converged``, ``message``.

    Notes
    -----
    One product with ``A`` per iteration whatever the number of shifts; the per-iteration
    scalar work (the Givens QR of the s shifted tridiagonals) runs on (s, k) arrays. The
    stopping test uses the residual norm of every (shift, column), never a mean.

    The residual norms come from the QR recurrences. Down to the attainable accuracy of the
    dtype they are the true residuals; below it the true residual stagnates (in float32 near
    ``eps32 cond(A + sI)``: measured 5e-4 at cond 1e4, 5e-2 at cond 1e6). The stored-basis
    path attains about ``eps cond``; after folding (``max_basis_bytes`` exceeded) the short
    recurrence attains about ``eps cond^2`` (Sleijpen, van der Vorst & Modersitzki 2000).
    """
    op, B2, vector = prepare_system(A, B)
    xp = op.xp
    rtol, atol = check_tolerances(rtol, atol)
    shift_arr = _prepare_shifts(shifts, op)
    n, k = B2.shape
    s = shift_arr.shape[0]
    maxiter = check_maxiter(maxiter, 5 * n)
    check_every = default_check_every(xp, op.device, check_every)
    if isinstance(max_basis_bytes, bool) or not isinstance(max_basis_bytes, int) \
            or max_basis_bytes < 1:
        raise ValueError(f"max_basis_bytes: expected an integer >= 1, got {max_basis_bytes!r}")

    dtype, device = op.dtype, op.device
    finfo = xp.finfo(dtype)
    eps, tiny = float(finfo.eps), float(finfo.smallest_normal)
    itemsize = 4 if dtype == xp.float32 else 8
    # At least two basis vectors per chunk: folding carries the last two directions.
    chunk = max(2, min(maxiter, max_basis_bytes // (n * k * itemsize)))

    b_norm = xp.linalg.vector_norm(B2, axis=0)                      # (k,)
    tol = xp.maximum(rtol * b_norm, atol)                          # (k,)
    q = B2 * xp.where(b_norm > 0.0, 1.0 / xp.where(b_norm > 0.0, b_norm, 1.0), 0.0)
    q_prev = None
    beta = xp.zeros((k,), dtype=dtype, device=device)               # beta_i of the current step
    anorm = xp.zeros((k,), dtype=dtype, device=device)

    sigma = shift_arr[:, None]                                      # (s, 1)
    zeros_sk = xp.zeros((s, k), dtype=dtype, device=device)
    cs = zeros_sk - 1.0
    sn = zeros_sk
    dbar = zeros_sk
    epsln = zeros_sk
    phibar = zeros_sk + b_norm[None, :]

    # The basis starts at _INITIAL_CAPACITY iterations and doubles: a (k, capacity, n) buffer
    # is touched in every one of its k slabs by the first iteration, and with transparent
    # huge pages the kernel zero-fills whole 2 MiB pages there -- at m = 1000, k = 256 a
    # full-capacity buffer would make a first call that needs one iteration zero 400 MB, and
    # a 32-iteration one still 65 MB, a large share of the call (docs/benchmarks.md). The copies
    # of the doublings add up to less than the final basis.
    host = on_host(xp, device)
    fresh = op.fresh_products
    if workspace is not None:
        if not isinstance(workspace, Workspace):
            raise TypeError(f"workspace: expected a gpnum.linalg.Workspace, got "
                            f"{type(workspace).__name__}")
        basis = workspace.take(xp, (k, chunk, n), dtype, device)
    else:
        capacity = min(chunk, _INITIAL_CAPACITY)
        basis = xp.empty((k, capacity, n), dtype=dtype, device=device)
    gammas, deltas, epss, phis = [], [], [], []
    x = w_old = w_older = None       # folded solution and carried directions, (s, n, k)

    info, num_iter, state = maxiter, 0, "running"
    while num_iter < maxiter:
        # --- one Lanczos step per column (shared by every shift) ---
        w = op._matmat(q)
        # Updates run in place (saving sweeps of (n, k) memory) once w is known to be private:
        # the product of a gpnum operator is, a user's callable may return shared memory.
        if not fresh:
            w = w - beta * q_prev if q_prev is not None else xp.asarray(w, copy=True)
        elif q_prev is not None:
            w -= beta * q_prev
        alpha = xp.sum(q * w, axis=0)
        w -= alpha * q
        beta_next = xp.linalg.vector_norm(w, axis=0)
        anorm = xp.maximum(anorm, xp.sqrt(alpha * alpha + beta * beta + beta_next * beta_next))
        # Lucky breakdown (invariant subspace): the column is solved exactly; zero its vectors.
        alive = beta_next > eps * anorm
        beta_next = xp.where(alive, beta_next, 0.0)
        inv_beta = xp.where(alive, 1.0 / xp.where(alive, beta_next, 1.0), 0.0)

        c = len(gammas)
        if c == basis.shape[1]:
            grown = xp.empty((k, min(chunk, 2 * c), n), dtype=dtype, device=device)
            grown[:, :c, :] = basis[:, :c, :]
            basis = grown
        # Stored transposed, (k, c, n), so that the final batched product runs on unit
        # strides: one strided copy per step, cheaper than keeping the vectors as rows (whose
        # products X^T A^T run slower in BLAS than A X).
        if host:
            for r0 in range(0, n, _STORE_ROWS):
                basis[:, c, r0:r0 + _STORE_ROWS] = q[r0:r0 + _STORE_ROWS, :].T
        else:
            basis[:, c, :] = q.T
        w *= inv_beta
        q_prev, q, beta = q, w, beta_next

        # --- Givens QR of the s shifted tridiagonals, (s, k) arrays only ---
        alfa = alpha + sigma
        oldeps = epsln
        delta = cs * dbar + sn * alfa
        gbar = sn * dbar - cs * alfa
        epsln = sn * beta_next
        dbar = -cs * beta_next
        gamma = xp.maximum(xp.sqrt(gbar * gbar + beta_next * beta_next), tiny)
        cs = gbar / gamma
        sn = beta_next / gamma
        phi = cs * phibar
        phibar = sn * phibar
        gammas.append(gamma)
        deltas.append(delta)
        epss.append(oldeps)
        phis.append(phi)
        num_iter += 1

        if num_iter % check_every == 0 or num_iter == maxiter:
            # One host synchronisation: 2 = non-finite values, 1 = all converged, 0 = go on.
            flag = int(xp.astype(xp.any(~xp.isfinite(phibar)), xp.int32) * 2
                       + xp.astype(xp.all(phibar <= tol), xp.int32))
            if flag == 2:
                info, state = -1, "breakdown"
                break
            if flag == 1:
                info, state = 0, "converged"
                break
        if len(gammas) == chunk and num_iter < maxiter:
            x, w_old, w_older = _fold(xp, basis, gammas, deltas, epss, phis, x, w_old, w_older)
            gammas, deltas, epss, phis = [], [], [], []

    if gammas and x is None and _combine is not None:
        # A caller's own use of the basis and the coefficients (CIQ: the weighted sum over
        # the shifts without the (s, n, k) solutions; the basis is this call's, not shared).
        y = _back_substitute(xp, gammas, deltas, epss, [p[None, ...] for p in phis])
        x = _combine(basis[:, :len(gammas), :], [yi[0, ...] for yi in y])
    elif gammas:
        x = _finish(xp, basis, gammas, deltas, epss, phis, x, w_old, w_older)
    converged = phibar <= tol
    if state == "converged":
        message = f"converged in {num_iter} iterations"
    elif state == "breakdown":
        message = (f"breakdown after {num_iter} iterations: the operator produced non-finite "
                   "values (NaN or Inf in A or in its products)")
        warnings.warn(f"msminres: {message}", ConvergenceWarning, stacklevel=2)
    else:
        worst = float(xp.max(phibar / xp.where(b_norm > 0.0, b_norm, 1.0)))
        n_bad = int(xp.sum(xp.astype(~converged, xp.int32)))
        message = (f"did not converge in {num_iter} iterations: {n_bad} of {s * k} "
                   f"(shift, column) pairs above tolerance, worst relative residual "
                   f"{worst:.2e} > rtol {rtol:.1e}")
        warnings.warn(f"msminres: {message}", ConvergenceWarning, stacklevel=2)
    if vector:
        x, phibar, converged, b_norm = x[..., 0], phibar[:, 0], converged[:, 0], b_norm[0]
    return MultiShiftResult(x=x, info=info, num_iter=num_iter, residual_norm=phibar,
                            b_norm=b_norm, converged=converged, shifts=shift_arr,
                            message=message)


def _boundary(delta, eps, y0, y1):
    """Coefficients of the carried directions ``w_old``, ``w_older`` in ``W_chunk y``."""
    c_old = delta[0] * y0 + (eps[1] * y1 if y1 is not None else 0.0)
    c_older = eps[0] * y0
    return c_old, c_older


def _finish(xp, basis, gammas, deltas, epss, phis, x, w_old, w_older):
    """The solutions after the last chunk: ``x + W_chunk phi``."""
    c = len(gammas)
    y = _back_substitute(xp, gammas, deltas, epss, [p[None, ...] for p in phis])
    out = _combine_basis(xp, basis, c, y)[0, ...]          # (s, n, k)
    if x is None:
        return out
    c_old, c_older = _boundary(deltas, epss, y[0][0, ...], y[1][0, ...] if c > 1 else None)
    return x + out - c_old[:, None, :] * w_old - c_older[:, None, :] * w_older


def _fold(xp, basis, gammas, deltas, epss, phis, x, w_old, w_older):
    """Fold a full chunk into the solution and the last two MINRES directions."""
    c = len(gammas)
    zero = xp.zeros_like(phis[0])
    one = zero + 1.0
    # Right-hand sides: phi (solution), e_{c-1} (last direction), e_{c-2} (the one before).
    rhs = [xp.stack([phis[i], one if i == c - 1 else zero, one if i == c - 2 else zero])
           for i in range(c)]
    y = _back_substitute(xp, gammas, deltas, epss, rhs)
    out = _combine_basis(xp, basis, c, y)               # (3, s, n, k)
    if x is None:
        return out[0, ...], out[1, ...], out[2, ...]
    c_old, c_older = _boundary(deltas, epss, y[0], y[1])   # (3, s, k) each
    out = (out - c_old[:, :, None, :] * w_old[None, ...]
           - c_older[:, :, None, :] * w_older[None, ...])
    return x + out[0, ...], out[1, ...], out[2, ...]
