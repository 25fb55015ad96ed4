"""Sum-product prefix products of an HMM's chain of step matrices, in the log domain.

The one-step predictions of forward-backward obey ``pred_{t+1} = pred_t diag(p(y_t | .)) A``
(and the backward messages the same with ``A^T``): one constant matrix with the data as row
scales. :func:`_chain_products` computes all prefixes by a two-level (Brent) parallel prefix
(Sarkka & Garcia-Fernandez 2021) whose steps are GEMMs with that matrix;
:func:`_chain_products_blocked` by speculative blocks checked against each other. Rows are
stored normalised with their log scales apart (see :mod:`gpnum.hmm._inference`).
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace, vector_prefix_scan

__all__: list[str] = []


# ------------------------------------------------------------------------------ utilities
def _safe_log(xp, x):
    """``log(x)`` for ``x >= 0`` with ``log(0) = -inf`` and no divide-by-zero warning."""
    positive = x > 0.0
    return xp.where(positive, xp.log(xp.where(positive, x, xp.ones_like(x))),
                    xp.full_like(x, -float("inf")))


def _finite_or_zero(xp, m):
    return xp.where(xp.isfinite(m), m, xp.zeros_like(m))


def logsumexp(xp, a, axis=-1):
    """``log(sum(exp(a), axis))`` without overflow; all ``-inf`` gives ``-inf``."""
    m = _finite_or_zero(xp, xp.max(a, axis=axis, keepdims=True))
    s = xp.sum(xp.exp(a - m), axis=axis)
    return _safe_log(xp, s) + xp.squeeze(m, axis=axis)


# ------------------------------------------------------------------- the (sum, x) scan
def _combine_product(a, b):
    """Product ``E_a @ E_b`` of row-scaled elements ``(P, c)``: ``E(i, j) = exp(c_i) P(i, j)``.

    ``P`` is (..., m, K, K) with rows summing to 1 (or an all-zero row, ``c = -inf``), ``c``
    (..., m, K). The later operand's row scales are folded into the matmul relative to their
    maximum, and the result's rows are renormalised to sum 1.
    """
    P1, c1 = a
    P2, c2 = b
    xp = get_namespace(P1)
    shift = _finite_or_zero(xp, xp.max(c2, axis=-1, keepdims=True))  # (..., m, 1)
    middle = xp.exp(c2 - shift)  # weights of the summed-over index, <= 1
    P = xp.matmul(P1 * middle[..., None, :], P2)
    return _normalise_rows(xp, P, c1 + shift)


def _range_t(a, start, stop, axis=-2):
    index = [slice(None)] * a.ndim
    index[axis] = slice(start, stop)
    return a[tuple(index)]


def _apply_product(v, M):
    """Row vectors times row-scaled matrices: ``(u, c) = (v, c_v) @ (P, r)``.

    ``v`` (..., m, K) with rows summing to 1 and log scale ``c_v`` (..., m); the matrix is
    ``exp(r_i) P(i, j)``. The result is renormalised to sum 1, its scale folded into ``c``.
    """
    (v, cv), (P, r) = v, M
    xp = get_namespace(v)
    shift = _finite_or_zero(xp, xp.max(r, axis=-1, keepdims=True))
    w = v * xp.exp(r - shift)
    out = xp.matmul(w[..., None, :], P)[..., 0, :]  # 4x faster in NumPy than a broadcast sum
    return _normalise_rows(xp, out, cv + shift[..., 0])


def _row_sum(xp, u):
    """``sum(u, axis=-1)`` as one matrix-vector product: NumPy reduces a short last axis
    several times slower than BLAS multiplies by a vector of ones."""
    K = u.shape[-1]
    ones = xp.ones((K, 1), dtype=u.dtype, device=device_of(u))
    return xp.reshape(xp.matmul(xp.reshape(u, (-1, K)), ones), u.shape[:-1])


def _row_max(xp, u):
    """``max(u, axis=-1)``; for short rows as K - 1 elementwise maxima (faster in NumPy)."""
    K = u.shape[-1]
    if K > 16:
        return xp.max(u, axis=-1)
    out = u[..., 0]
    for k in range(1, K):
        out = xp.maximum(out, u[..., k])
    return out


def _normalise_rows(xp, u, c):
    """Rows of ``u`` scaled to sum 1, their log sums added to ``c`` (``-inf`` for zero rows)."""
    total = _row_sum(xp, u)
    nonzero = total > 0.0
    safe = xp.where(nonzero, total, xp.ones_like(total))
    c = xp.where(nonzero, c + xp.log(safe), xp.full_like(c, -float("inf")))
    return u / safe[..., None], c


def _times_matrix(xp, V, M):
    """``V @ M`` for V (..., K) or (..., K, K) and one (K, K) matrix, as a single GEMM."""
    K = M.shape[-1]
    flat = xp.reshape(V, (-1, K))
    return xp.reshape(xp.matmul(flat, M), V.shape)


def _chain_setup(xp, log_v0, log_M, log_rows, rows, rows_shift):
    """Scaled operands shared by :func:`_chain_products` and :func:`_chain_products_blocked`.

    Returns ``(v0, c0, M, L, step_shift)``: the normalised start vector (..., K) and its log
    scale (...), a step matrix ``M`` with entries <= 1, and step rows ``L`` (..., n, K) <= 1
    with log scales ``step_shift`` (..., n) such that ``diag(exp(log_rows_k)) exp(log_M) =
    exp(step_shift_k) diag(L_k) M``.
    """
    K = log_rows.shape[-1]
    batch = log_rows.shape[:-2]
    shift0 = _finite_or_zero(xp, xp.max(log_v0, axis=-1))
    v0, c0 = _normalise_rows(xp, xp.exp(log_v0 - shift0[..., None]), shift0)
    v0 = xp.broadcast_to(v0, batch + (K,))
    c0 = xp.broadcast_to(c0, batch)
    row_shift = _finite_or_zero(xp, xp.max(log_M, axis=-1))
    M = xp.exp(log_M - row_shift[:, None])  # rows of M with maximum 1
    top = xp.max(row_shift)
    weights = xp.exp(row_shift - top)  # (K,): the row shifts as factors <= 1
    # One synchronisation per call (on K numbers): can the row shifts stay in M (the given
    # rows then used as they are, no pass over them) without losing range?
    if rows is not None and bool(xp.min(weights) >= xp.finfo(weights.dtype).smallest_normal ** 0.5):
        return v0, c0, M * weights[:, None], rows, rows_shift + top
    shifted = log_rows + row_shift
    step_shift = _finite_or_zero(xp, _row_max(xp, shifted))  # (..., n)
    return v0, c0, M, xp.exp(shifted - step_shift[..., None]), step_shift


def _step_major(xp, L, step_shift, C):
    """Step rows (..., n, K) padded after ``p_n`` with ones to ``blocks * C >= n + 1`` rows and
    laid out step-major (..., C, blocks, K): the rows used together at step ``j`` of every
    block are then contiguous (a broadcast product with a strided operand is 3x slower in
    NumPy when the blocks are many and short). Returns ``(L, step_shift, num_blocks)``."""
    n, K = L.shape[-2], L.shape[-1]
    batch = L.shape[:-2]
    dev = device_of(L)
    num_blocks = -(-(n + 1) // C)
    pad = num_blocks * C - n
    if pad:  # padded steps use L = 1: finite values, sliced off by the caller
        L = xp.concat([L, xp.ones(batch + (pad, K), dtype=L.dtype, device=dev)], axis=-2)
        step_shift = xp.concat(
            [step_shift, xp.zeros(batch + (pad,), dtype=L.dtype, device=dev)], axis=-1)
    nd = len(batch)
    lead = tuple(range(nd))
    L = xp.reshape(xp.permute_dims(xp.reshape(L, batch + (num_blocks, C, K)),
                                   lead + (nd + 1, nd, nd + 2)), batch + (C * num_blocks, K))
    L = xp.reshape(L, batch + (C, num_blocks, K))
    step_shift = xp.reshape(xp.permute_dims(xp.reshape(step_shift, batch + (num_blocks, C)),
                                            lead + (nd + 1, nd)), batch + (C, num_blocks))
    return L, step_shift, num_blocks


def _run_steps(xp, V, c, M, L, step_shift, out_v, out_c, step_axis):
    """Run ``C`` steps from ``(V, c)`` (..., [blocks,] K), all blocks at once.

    ``L`` and ``step_shift`` hold the steps along ``step_axis`` (negative, counted on ``L``);
    step ``j``'s input vector is written to position ``j`` of ``out_v`` / ``out_c`` along the
    same axis. Returns the exit ``(V, c)``, the vector after the last step.
    """
    C = L.shape[step_axis]
    for j in range(C):
        at = (Ellipsis, j) + (slice(None),) * (-step_axis - 1)
        at_c = (Ellipsis, j) + (slice(None),) * (-step_axis - 2)
        out_v[at] = V
        out_c[at_c] = c
        V, c = _normalise_rows(xp, _times_matrix(xp, V * L[at], M), c + step_shift[at_c])
    return V, c


def _run_steps_lean(xp, V, c, M, L, step_shift, out_v, out_c, step_axis):
    """:func:`_run_steps` with the fewest array operations per step (the blocked solver's
    steps are short and call-bound). A row that sums to zero is left at zero with a finite
    log scale instead of ``-inf``: it stays zero, so it shows in the exit, which the caller
    checks (and then uses the exact scan).
    """
    C = L.shape[step_axis]
    shape = V.shape
    K = shape[-1]
    dev = device_of(V)
    ones = xp.ones((K, 1), dtype=V.dtype, device=dev)
    one = xp.ones((1, 1), dtype=V.dtype, device=dev)
    for j in range(C):
        at = (Ellipsis, j) + (slice(None),) * (-step_axis - 1)
        at_c = (Ellipsis, j) + (slice(None),) * (-step_axis - 2)
        out_v[at] = V
        out_c[at_c] = c
        u = xp.matmul(xp.reshape(V * L[at], (-1, K)), M)
        total = xp.matmul(u, ones)  # (N, 1): a row sum as a GEMV (faster in NumPy)
        total = xp.where(total > 0.0, total, one)
        V = xp.reshape(u / total, shape)
        c = c + (xp.reshape(xp.log(total), shape[:-1]) + step_shift[at_c])
    return V, c


def _run_blocks(xp, V, c, M, Lb, sb, out_v, out_c, tile=16):
    """:func:`_run_steps_lean` over time-major blocks ``Lb`` (..., B, C, K), ``sb`` (..., B, C).

    Step ``j`` touches one row of every block, ``B`` rows far apart in memory; done one step
    at a time that costs a TLB miss per block and step. So ``tile`` steps of rows are first
    gathered into a step-major (tile, B, K) buffer, run there, and written back at once.
    """
    batch = Lb.shape[:-3]
    B, C, K = Lb.shape[-3:]
    nd = len(batch)
    lead = tuple(range(nd))
    for j0 in range(0, C, tile):
        j1 = min(C, j0 + tile)
        # The reshape of the permuted view makes the one (C-order) copy.
        Lt = xp.reshape(xp.reshape(xp.permute_dims(Lb[..., j0:j1, :], lead + (nd + 1, nd, nd + 2)),
                                   batch + ((j1 - j0) * B, K)), batch + (j1 - j0, B, K))
        st = xp.reshape(xp.reshape(xp.permute_dims(sb[..., j0:j1], lead + (nd + 1, nd)),
                                   batch + ((j1 - j0) * B,)), batch + (j1 - j0, B))
        tv = xp.empty(Lt.shape, dtype=out_v.dtype, device=device_of(Lt))
        tc = xp.empty(st.shape, dtype=out_c.dtype, device=device_of(Lt))
        V, c = _run_steps_lean(xp, V, c, M, Lt, st, tv, tc, step_axis=-3)
        out_v[..., j0:j1, :] = xp.permute_dims(tv, lead + (nd + 1, nd, nd + 2))
        out_c[..., j0:j1] = xp.permute_dims(tc, lead + (nd + 1, nd))
    return V, c


def _chain_products(xp, log_v0, log_M, log_rows, block=None, *, rows=None, rows_shift=None,
                    num_steps=None):
    """Normalised prefixes of ``p_0 = exp(log_v0)``, ``p_{k+1} = p_k diag(exp(log_rows_k)) M``.

    The sum-product forward (``M = A``) and backward (``M = A^T``, reversed time) recursions of
    an HMM share this form: every step matrix is one constant ``M`` with the data as row scales.
    Work-efficient two-level parallel prefix (Brent): the ``n`` steps are cut into blocks of
    ``C = ceil(log2(n + 1))``; (1) each block's transfer matrix is built in ``C`` steps run in
    parallel over all blocks, each step one GEMM ``(blocks * K, K) @ (K, K)``; (2) the block
    entry vectors come from the odd/even scan over the blocks (:func:`vector_prefix_scan`);
    (3) the block interiors are filled in ``C`` parallel steps of one GEMM each. Depth
    ``O(C + log(n / C)) = O(log n)``; every step renormalises, so nothing under- or overflows.

    Parameters
    ----------
    log_v0 : array (..., K)
    log_M : array (K, K)
    log_rows : array (..., n, K)
    block : int, optional
        Block length ``C`` (default ``ceil(log2(n + 1))``).
    rows, rows_shift : arrays (..., n, K) and (..., n), optional
        The same rows already exponentiated, ``exp(log_rows) = rows * exp(rows_shift)`` with
        ``rows <= 1``: saves three passes over (n, K) (a row maximum and an exponential) when
        the caller has them, as forward-backward does. Used unless the row shifts of ``M``
        span more than half the dtype's exponent range (then ``log_rows`` is used).
    num_steps : int, optional
        ``n``, when the row arrays hold more rows than steps (the rest are ignored here;
        :func:`_chain_products_blocked` may read one more as padding).

    Returns
    -------
    V : array (..., n + 1, K)
        ``p_k`` normalised to sum 1.
    c : array (..., n + 1)
        ``log sum_j p_k(j)``.
    """
    if num_steps is not None and num_steps != log_rows.shape[-2]:
        log_rows = _range_t(log_rows, 0, num_steps)
        if rows is not None:
            rows = _range_t(rows, 0, num_steps)
            rows_shift = _range_t(rows_shift, 0, num_steps, axis=-1)
    n, K = log_rows.shape[-2], log_rows.shape[-1]
    batch = log_rows.shape[:-2]
    dev = device_of(log_rows)
    v0, c0, M, L, step_shift = _chain_setup(xp, log_v0, log_M, log_rows, rows, rows_shift)
    if n == 0:
        return v0[..., None, :], c0[..., None]
    C = max(1, math.ceil(math.log2(n + 1))) if block is None else block
    L, step_shift, num_blocks = _step_major(xp, L, step_shift, C)
    # (1) transfer matrices of blocks 0 .. num_blocks - 2 (the last block's is never needed)
    if num_blocks > 1:
        nb = num_blocks - 1
        T_blk = xp.broadcast_to(xp.eye(K, dtype=L.dtype, device=dev), batch + (nb, K, K))
        r_blk = xp.zeros(batch + (nb, K), dtype=L.dtype, device=dev)
        for j in range(C):
            prod = _times_matrix(xp, T_blk * L[..., j, :nb, :][..., None, :], M)
            T_blk, r_blk = _normalise_rows(xp, prod, r_blk + step_shift[..., j, :nb][..., None])
        # (2) block entry vectors by the odd/even scan over the blocks
        V, c = vector_prefix_scan(xp, _apply_product, _combine_product,
                                  (v0[..., None, :], c0[..., None]), (T_blk, r_blk), (-2, -1),
                                  (-3, -2))
    else:
        V, c = v0[..., None, :], c0[..., None]
    # (3) block interiors, all blocks at once, written step-major into fresh buffers (no input
    # is modified), then brought back to time order by one transposing copy
    out_v = xp.empty(L.shape, dtype=L.dtype, device=dev)
    out_c = xp.empty(step_shift.shape, dtype=L.dtype, device=dev)
    _run_steps(xp, V, c, M, L, step_shift, out_v, out_c, step_axis=-3)
    nd = len(batch)
    lead = tuple(range(nd))
    V = xp.reshape(xp.permute_dims(out_v, lead + (nd + 1, nd, nd + 2)),
                   batch + (num_blocks * C, K))
    c = xp.reshape(xp.permute_dims(out_c, lead + (nd + 1, nd)), batch + (num_blocks * C,))
    return _range_t(V, 0, n + 1), _range_t(c, 0, n + 1, axis=-1)


def _blocked_shape(N, block=None):
    """``(B, C)``: ``B`` blocks of ``C`` steps covering at most ``N`` outputs (the rest run
    after them as a tail, one vector per step).

    ``C`` is about ``sqrt(N)`` and at least 64 steps (long enough for a filter to forget its
    start); among the block counts within 25% of ``N / C`` the one leaving the shortest tail
    is taken (none when ``N`` has a divisor there, e.g. ``N = 10^6``).
    """
    if block is not None:
        return N // block, block
    B0 = N // max(64, math.isqrt(N))
    if B0 < 2:
        return B0, max(64, math.isqrt(N))
    best = min(range(max(1, B0 * 4 // 5), B0 * 5 // 4 + 1),
               key=lambda b: (N - b * (N // b), abs(b - B0)))
    return best, N // best


def _chain_products_blocked(xp, log_v0, log_M, log_rows, block=None, *, rows=None,
                            rows_shift=None, num_steps=None, max_sweeps=4, warmup=None):
    """:func:`_chain_products` by speculative blocks: O(n K) work instead of O(n K^2).

    The steps are cut into ``B`` full blocks of ``C`` steps (default about ``sqrt(n)``) and a
    shorter tail. The blocks all run at once, one GEMM ``(B, K) @ (K, K)`` per step. A block's
    entry vector is the previous block's exit, not known in advance; but a normalised forward
    (or backward) message forgets where it started (the step maps contract in Hilbert's
    projective metric when ``M`` is positive), so each entry is first *guessed* by running the
    last ``warmup`` steps of the previous block from the uniform vector. The blocks then run
    from their guesses, and the result is accepted when every exit equals the next block's
    entry to ``256 * eps`` (absolute, on sum-1 vectors): block 0 starts from the exact ``p_0``,
    so by induction every block then started from its exact prefix. If the check fails, the
    blocks rerun from the exits just computed (a sweep, checked again). The exact two-level
    scan :func:`_chain_products` is used instead after ``max_sweeps`` sweeps, or as soon as a
    sweep shrinks the largest mismatch less than 100-fold: chains that forget much more
    slowly than a block's length (near-identity transitions, uninformative data) are still
    exact, at the scan's price plus two sweeps. The tail runs from the last exit.

    Cost: one sweep is ``C`` sequential steps of O(B K) work; usually one sweep and a warm-up
    of an eighth of a block suffice, against the scan's O(n K^2) transfer matrices (about 3x
    faster in NumPy at n = 10^6, K = 5: docs/benchmarks.md). On a GPU the scan's O(log n) depth
    means far fewer kernel launches, which is why both are kept.

    Parameters and returns as :func:`_chain_products`; ``max_sweeps`` bounds the sweeps after
    the warm-up, ``warmup`` (default ``max(32, C // 8)``) is its length in steps. When the row
    arrays hold a row beyond ``num_steps``, the blocks may read it (into the last block's
    unused exit) and then cover all ``n + 1`` outputs, so that no tail has to be appended
    by a copy of the whole result.
    """
    avail, K = log_rows.shape[-2], log_rows.shape[-1]
    n = avail if num_steps is None else num_steps
    batch = log_rows.shape[:-2]
    v0, c0, M, L, step_shift = _chain_setup(xp, log_v0, log_M, log_rows, rows, rows_shift)
    dtype, dev = L.dtype, device_of(L)

    def exact():
        return _chain_products(xp, log_v0, log_M, log_rows, rows=rows, rows_shift=rows_shift,
                               num_steps=n)

    # Log scales accumulate over up to n steps in sequence (the scan adds them in a tree):
    # in float32 that alone costs ~1e-6 relative, so they are kept in float64 and cast back.
    wide = xp.float64 if dtype == xp.float32 else dtype
    c0 = xp.astype(c0, wide)
    # outputs p_0 .. p_{B C - 1} in blocks (reading rows up to B C - 1), the rest after
    B, C = _blocked_shape(min(n + 1, avail), block)
    parts_v, parts_c = [], []
    V, c = v0, c0
    if B > 0:
        # Time-major views (..., B, C, K): a strided step operand costs little next to the
        # per-step call overhead here, and saves two transposing copies of the whole chain.
        Lb = xp.reshape(_range_t(L, 0, B * C), batch + (B, C, K))
        sb = xp.reshape(_range_t(step_shift, 0, B * C, axis=-1), batch + (B, C))
        out_v = xp.empty(batch + (B, C, K), dtype=dtype, device=dev)
        out_c = xp.empty(batch + (B, C), dtype=wide, device=dev)
        zero_c = xp.zeros(batch + (B,), dtype=wide, device=dev)
        G = None  # guessed entries of blocks 1 .. B - 1
        if B > 1:
            w = min(C, max(32, C // 8)) if warmup is None else min(max(1, warmup), C)
            G = xp.full(batch + (B - 1, K), 1.0 / K, dtype=dtype, device=dev)
            for j in range(C - w, C):
                G, _ = _normalise_rows(xp, _times_matrix(xp, G * Lb[..., :B - 1, j, :], M),
                                       sb[..., :B - 1, j])
        tol = 256.0 * float(xp.finfo(dtype).eps)
        previous = math.inf
        for _ in range(max_sweeps):
            entries = v0[..., None, :] if G is None else xp.concat([v0[..., None, :], G], axis=-2)
            # Local log scales start at 0 in every block; the global offsets follow below.
            X, gain = _run_blocks(xp, entries, zero_c, M, Lb, sb, out_v, out_c)
            if G is None:
                break
            mismatch = float(xp.max(xp.abs(X[..., :B - 1, :] - G)))
            if mismatch <= tol:
                break
            if mismatch > 1e-2 * previous:
                return exact()  # a sweep gained less than 100x: the chain barely forgets
            previous = mismatch
            G = X[..., :B - 1, :]
        else:
            return exact()
        if not bool(xp.min(xp.sum(X, axis=-1)) > 0.0):  # a message went to zero: need -inf
            return exact()
        # Block b's entry carries the log scale c0 + the gains of blocks 0 .. b - 1.
        offset = xp.cumulative_sum(gain, axis=-1) + c0[..., None]  # after block b
        start = xp.concat([c0[..., None], offset[..., :B - 1]], axis=-1)
        parts_v.append(xp.reshape(out_v, batch + (B * C, K)))
        parts_c.append(xp.reshape(out_c + start[..., None], batch + (B * C,)))
        V, c = X[..., B - 1, :], offset[..., B - 1]
    if B * C == n + 1:
        return parts_v[0], xp.astype(parts_c[0], dtype, copy=False)
    # The tail: p_{B C} .. p_n from the exact exit of the last block.
    r = n - B * C
    tail_v = xp.empty(batch + (r + 1, K), dtype=dtype, device=dev)
    tail_c = xp.empty(batch + (r + 1,), dtype=wide, device=dev)
    V, c = _run_steps_lean(xp, V, c, M, _range_t(L, B * C, n),
                           _range_t(step_shift, B * C, n, axis=-1), tail_v, tail_c, step_axis=-2)
    if r > 0 and not bool(xp.min(xp.sum(V, axis=-1)) > 0.0):
        return exact()
    tail_v[..., r, :] = V
    tail_c[..., r] = c
    parts_v.append(tail_v)
    parts_c.append(tail_c)
    V = tail_v if len(parts_v) == 1 else xp.concat(parts_v, axis=-2)
    c = tail_c if len(parts_c) == 1 else xp.concat(parts_c, axis=-1)
    return V, xp.astype(c, dtype, copy=False)
