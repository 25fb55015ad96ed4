"""Exact inference in a hidden Markov model: forward-backward and Viterbi.

Both recursions are products of per-step matrices, and matrix products are associative, so
they run as parallel prefix computations over time (Sarkka & Garcia-Fernandez 2021, "Temporal
parallelization of Bayesian smoothers", IEEE TAC 66(1)) in O(log T) batched array operations
instead of a Python loop of T steps. The sequential recursions are kept
(``method="sequential"``) as the reference the tests compare against.

- Sum-product (:func:`forward_backward`): the one-step predictions obey
  ``pred_{t+1} = pred_t diag(p(y_t | .)) A`` and the backward messages
  ``beta_t^T = beta_{t+1}^T diag(p(y_{t+1} | .)) A^T``: one constant matrix with the data as row
  scales. :func:`_chain_products` computes all prefixes by a two-level (Brent) parallel prefix
  whose steps are GEMMs with that constant matrix, the block entries coming from the odd/even
  scan :func:`gpnum.hmm._scan.vector_prefix_scan`.
- Max-product (:func:`viterbi`): the same two-level scheme in the (max, +) semiring
  (:func:`_max_plus_chain`), then the back-pointer maps composed by
  :func:`gpnum.hmm._scan.associative_scan`.

Numerics. The sum-product works in the log domain with the log-sum-exp shift applied per row:
each vector or matrix row is stored normalised to sum 1 with its log scale kept separately, so
the log normaliser never under- or overflows however long the chain, and combining two
elements is a matmul, a row sum and K logarithms instead of K^3 exponentials of a naive
log-space matmul. What the stored form drops are probabilities more than ``1 / tiny`` (about
1e308 in float64, 1e38 in float32) below the largest one *in the same row*; with transition
matrices whose entries are bounded away from zero (as expected log parameters of a Dirichlet
posterior always are) such terms cannot affect a marginal. Viterbi needs no exponentials.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import array_api_compat

from gpnum.backend import device_of, get_namespace, is_array
from gpnum.errors import ShapeError, describe_shape
from gpnum.hmm._scan import associative_scan, vector_prefix_scan

__all__ = ["ForwardBackwardResult", "forward_backward", "viterbi"]


class ForwardBackwardResult(NamedTuple):
    """Posterior of the hidden states given the per-step log likelihoods.

    Attributes
    ----------
    marginals : array (..., T, K)
        ``q(x_t = k)``: each row sums to one.
    pairwise : array (..., K, K)
        ``sum_t w_t q(x_{t-1} = i, x_t = j)`` over ``t = 1 .. T-1`` (``w_t = 1`` unless
        ``transition_weights`` were given): the expected transition counts, summed from the
        pairwise marginals (not from products of single-site ones).
    log_normalizer : array (...)
        ``log sum_x pi(x_0) p(y_0|x_0) prod_t A(x_{t-1}, x_t) p(y_t|x_t)``.
    """

    marginals: object
    pairwise: object
    log_normalizer: object


# ------------------------------------------------------------------------------- checking
def _check_inputs(log_pi, log_A, log_lik, transition_weights=None):
    for name, a in (("log_pi", log_pi), ("log_A", log_A), ("log_lik", log_lik)):
        if not is_array(a):
            raise TypeError(f"{name}: expected an array, got {type(a).__name__}")
    xp = get_namespace(log_pi, log_A, log_lik)
    if log_lik.ndim < 2:
        raise ShapeError("log_lik: expected shape (..., T, K), got "
                         f"{describe_shape(log_lik.shape)}")
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    if K < 1:
        raise ValueError(f"log_lik: expected at least one state (K >= 1), got K = {K}")
    if T < 1:
        raise ValueError(f"log_lik: expected at least one time step, got T = {T}")
    if log_A.ndim != 2 or log_A.shape != (K, K):
        raise ShapeError(f"log_A: expected shape ({K}, {K}), got {describe_shape(log_A.shape)}")
    if log_pi.ndim < 1 or log_pi.shape[-1] != K:
        raise ShapeError(f"log_pi: expected shape (..., {K}), got {describe_shape(log_pi.shape)}")
    batch, pi_batch = log_lik.shape[:-2], log_pi.shape[:-1]
    if len(pi_batch) > len(batch) or any(
            p != 1 and p != b for p, b in zip(pi_batch[::-1], batch[::-1])):
        raise ShapeError("log_pi: expected a shape that broadcasts to "
                         f"{describe_shape(batch + (K,))}, got {describe_shape(log_pi.shape)}")
    for name, a in (("log_pi", log_pi), ("log_A", log_A), ("log_lik", log_lik)):
        if not xp.isdtype(a.dtype, "real floating"):
            raise TypeError(f"{name}: expected a real floating dtype, got {a.dtype}")
    # One reduction and one synchronisation at the boundary; -inf (probability 0) is allowed.
    if bool(xp.any(xp.isnan(log_lik)) | xp.any(xp.isnan(log_A)) | xp.any(xp.isnan(log_pi))):
        raise ValueError("log_pi, log_A, log_lik: expected no NaN values, got NaN")
    if transition_weights is not None:
        if not is_array(transition_weights):
            raise TypeError("transition_weights: expected an array of shape (..., T - 1), got "
                            f"{type(transition_weights).__name__}")
        if transition_weights.ndim < 1 or transition_weights.shape[-1] != T - 1:
            raise ShapeError(f"transition_weights: expected shape (..., {T - 1}), got "
                             f"{describe_shape(transition_weights.shape)}")
    return xp


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
    of an eighth of a block suffice, against the scan's O(n K^2) transfer matrices (in NumPy
    at n = 10^6, K = 5: about 0.075 s against 0.25 s). On a GPU the scan's O(log n) depth
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


#: Chains shorter than this run forward and backward in one sequential loop (the blocked
#: solver would have at most one block there, so it has nothing to speculate on).
_SHORT_CHAIN_STEPS = 128


def _short_chains(xp, log_pi, log_A, log_lik, lik, lik_shift):
    """Forward and backward recursions of short chains in one loop over time.

    The two directions are stacked on a leading axis of two and advanced together, one
    batched GEMM ``(2, chains, K) @ (2, K, K)`` per step, so a batch of short chains (SVI's
    subchains) costs ``T - 1`` sequential steps instead of ``2 (T - 1)``: the steps are
    call-bound there, not data-bound. Each step is :func:`_run_steps_lean`'s (the same
    scaling by :func:`_chain_setup`, log scales kept in float64 for float32 data).

    Returns ``(pred, c_pred, beta_rev)`` as the two chain calls of
    :func:`_forward_backward_scan` give them, or ``None`` when a message went to zero (the
    exact scan then keeps its ``-inf``).
    """
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    batch = log_lik.shape[:-2]
    S = math.prod(batch)
    dtype, dev = log_lik.dtype, device_of(log_lik)
    wide = xp.float64 if dtype == xp.float32 else dtype
    n = T - 1
    zeros = xp.zeros(batch + (K,), dtype=dtype, device=dev)
    fwd = _chain_setup(xp, log_pi, log_A, log_lik, lik, lik_shift)
    bwd = _chain_setup(xp, zeros, xp.matrix_transpose(log_A), xp.flip(log_lik, axis=-2),
                       xp.flip(lik, axis=-2), xp.flip(lik_shift, axis=-1))

    def flat(a, tail):
        return xp.reshape(xp.broadcast_to(a, batch + tail), (S,) + tail)

    V = xp.stack([flat(fwd[0], (K,)), flat(bwd[0], (K,))])  # (2, S, K)
    c = xp.astype(xp.stack([flat(fwd[1], ()), flat(bwd[1], ())]), wide)  # (2, S)
    M = xp.stack([fwd[2], bwd[2]])  # (2, K, K)
    L = xp.stack([flat(fwd[3], fwd[3].shape[-2:]), flat(bwd[3], bwd[3].shape[-2:])])
    shift = xp.astype(xp.stack([flat(fwd[4], fwd[4].shape[-1:]),
                                flat(bwd[4], bwd[4].shape[-1:])]), wide)  # (2, S, >= n)
    ones = xp.ones((K, 1), dtype=dtype, device=dev)
    one = xp.ones((1, 1), dtype=dtype, device=dev)
    out_v = xp.empty((T, 2, S, K), dtype=dtype, device=dev)
    out_c = xp.empty((T, 2, S), dtype=wide, device=dev)
    for j in range(n):
        out_v[j, ...] = V
        out_c[j, ...] = c
        u = xp.matmul(V * L[:, :, j, :], M)
        total = xp.matmul(u, ones)  # (2, S, 1): a row sum as a GEMV (faster in NumPy)
        total = xp.where(total > 0.0, total, one)
        V = u / total
        c = c + (xp.astype(xp.log(total[..., 0]), wide) + shift[:, :, j])
    out_v[n, ...] = V
    out_c[n, ...] = c
    if not bool(xp.min(xp.sum(V, axis=-1)) > 0.0):  # a message went to zero: need -inf
        return None
    pred = xp.reshape(xp.permute_dims(out_v[:, 0, ...], (1, 0, 2)), batch + (T, K))
    beta_rev = xp.reshape(xp.permute_dims(out_v[:, 1, ...], (1, 0, 2)), batch + (T, K))
    c_pred = xp.reshape(xp.permute_dims(xp.astype(out_c[:, 0, :], dtype), (1, 0)), batch + (T,))
    return pred, c_pred, beta_rev


def _forward_backward_scan(xp, log_pi, log_A, log_lik, transition_weights,
                           chain=_chain_products):
    """Forward and backward messages by prefix products (``chain``: :func:`_chain_products`
    or :func:`_chain_products_blocked`).

    Forward: the one-step predictions ``pred_t = alpha_{t-1} A`` obey ``pred_{t+1} =
    pred_t diag(p(y_t | .)) A`` with ``pred_0 = pi``; backward: ``beta_t^T = beta_{t+1}^T
    diag(p(y_{t+1} | .)) A^T`` with ``beta_{T-1} = 1``, run on the reversed sequence.
    """
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    batch = log_lik.shape[:-2]
    dev = device_of(log_lik)
    lik_shift = _finite_or_zero(xp, _row_max(xp, log_lik))
    lik = xp.exp(log_lik - lik_shift[..., None])  # (..., T, K), max 1 per step

    zeros = xp.zeros(batch + (K,), dtype=log_lik.dtype, device=dev)
    short = None
    if chain is _chain_products_blocked and 1 < T < _SHORT_CHAIN_STEPS:
        short = _short_chains(xp, log_pi, log_A, log_lik, lik, lik_shift)
        if short is None:
            chain = _chain_products  # a message went to zero: the scan keeps its -inf
    if short is not None:
        pred, c_pred, beta_rev = short
    else:
        # The chains take all T rows and num_steps = T - 1: the unused last row is padding
        # the blocked solver may read.
        pred, c_pred = chain(xp, log_pi, log_A, log_lik, rows=lik, rows_shift=lik_shift,
                             num_steps=T - 1)
        beta_rev, _ = chain(xp, zeros, xp.matrix_transpose(log_A), xp.flip(log_lik, axis=-2),
                            rows=xp.flip(lik, axis=-2), rows_shift=xp.flip(lik_shift, axis=-1),
                            num_steps=T - 1)
    beta = xp.flip(beta_rev, axis=-2)  # beta_t up to a per-t scale (irrelevant below)

    # alpha_t = pred_t lik_t and b_t = lik_t beta_t, each up to a per-t scale.
    last_sum = xp.sum(pred[..., T - 1, :] * lik[..., T - 1, :], axis=-1)
    log_normalizer = c_pred[..., T - 1] + lik_shift[..., T - 1] + _safe_log(xp, last_sum)
    b = lik * beta
    marginals = pred * b  # alpha_t beta_t, normalised in place below (a fresh array)
    z = _row_sum(xp, marginals)  # (..., T): pred_t . b_t
    marginals /= z[..., None]

    if T == 1:
        pairwise = xp.zeros(batch + (K, K), dtype=log_lik.dtype, device=dev)
    else:
        # xi_t(i, j) = a_{t-1}(i) A(i, j) b_t(j) / n_t, n_t = a_{t-1}^T A b_t. Since
        # a_{t-1}^T A = kappa_t pred_t with kappa_t = a_{t-1}^T A 1 (pred_t sums to 1),
        # n_t = kappa_t z_t: one matrix-vector product instead of a (T, K) @ (K, K) product
        # and a row sum. The sum over t is one (K, T) @ (T, K) product per batch. One global
        # shift of log_A here (a per-row shift would weight the rows).
        A = xp.exp(log_A - _finite_or_zero(xp, xp.max(log_A)))
        a_prev = _range_t(pred, 0, T - 1) * _range_t(lik, 0, T - 1)
        kappa = xp.matmul(a_prev, xp.sum(A, axis=-1))  # (..., T - 1)
        n = kappa * _range_t(z, 1, T, axis=-1)
        n = xp.where(n > 0.0, n, xp.ones_like(n))
        coef = 1.0 / n if transition_weights is None else transition_weights / n
        a_prev *= coef[..., None]
        pairwise = A * xp.matmul(xp.matrix_transpose(a_prev), _range_t(b, 1, T))
    return ForwardBackwardResult(marginals, pairwise, log_normalizer)


def _forward_backward_sequential(xp, log_pi, log_A, log_lik, transition_weights):
    """The textbook log-space recursions, one Python step per time step (the reference)."""
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    log_alpha = [log_pi + log_lik[..., 0, :]]
    for t in range(1, T):
        prev = log_alpha[-1]
        log_alpha.append(logsumexp(xp, prev[..., :, None] + log_A, axis=-2) + log_lik[..., t, :])
    zero = xp.zeros_like(log_lik[..., 0, :])
    log_beta = [zero]
    for t in range(T - 1, 0, -1):
        nxt = log_lik[..., t, :] + log_beta[0]
        log_beta.insert(0, logsumexp(xp, log_A + nxt[..., None, :], axis=-1))
    la = xp.stack(log_alpha, axis=-2)
    lb = xp.stack(log_beta, axis=-2)
    log_normalizer = logsumexp(xp, la[..., T - 1, :], axis=-1)
    marginals = xp.exp(la + lb - log_normalizer[..., None, None])
    pairwise = xp.zeros(log_lik.shape[:-2] + (K, K), dtype=log_lik.dtype,
                        device=device_of(log_lik))
    for t in range(1, T):
        log_xi = (la[..., t - 1, :][..., :, None] + log_A
                  + (log_lik[..., t, :] + lb[..., t, :])[..., None, :]
                  - log_normalizer[..., None, None])
        xi = xp.exp(log_xi)
        if transition_weights is not None:
            xi = xi * transition_weights[..., t - 1][..., None, None]
        pairwise = pairwise + xi
    return ForwardBackwardResult(marginals, pairwise, log_normalizer)


# The blocked solver is used on a CPU ("auto") for chains of at least _BLOCKED_MIN_STEPS steps
# and at least _BLOCKED_MIN_WORK steps over the whole batch: below that the scan's O(log T)
# depth beats the blocked solver's ~sqrt(T) + 64 sequential steps (measured in NumPy, K = 5:
# the scan is faster at T = 1000 alone or 10 x 200, the blocked solver from T = 4000 alone or
# 10 x 1000 on). Shorter chains in batches of at least _BLOCKED_MIN_BATCH (SVI's subchains)
# also go to the blocked solver, whose short chains are one sequential loop vectorised over
# the batch: O(T K^2) work against the scan's O(T K^3) (NumPy, K = 5: 1.5 against 4.0 ms at
# 50 x 20, 17 against 23 ms at 50 x 256, 2.0 against 5.7 ms at 200 x 20; at 5 x 100 they
# tie, at 1 x 100 the scan is faster).
_BLOCKED_MIN_STEPS = 512
_BLOCKED_MIN_WORK = 4096
_BLOCKED_MIN_BATCH = 16


def _auto_method(xp, log_lik):
    """``"blocked"`` for long chains, or batches of many short ones, on a CPU (NumPy, or
    torch on its CPU device), where a step's cost is its data; ``"scan"`` elsewhere, where
    kernel launches (depth) dominate."""
    T = log_lik.shape[-2]
    batch = math.prod(log_lik.shape[:-2])
    long_chains = T >= _BLOCKED_MIN_STEPS and batch * T >= _BLOCKED_MIN_WORK
    many_short = T >= 2 and batch >= _BLOCKED_MIN_BATCH
    if not (long_chains or many_short):
        return "scan"
    on_cpu = array_api_compat.is_numpy_namespace(xp) or (
        array_api_compat.is_torch_namespace(xp) and log_lik.device.type == "cpu")
    return "blocked" if on_cpu else "scan"


def forward_backward(log_pi, log_A, log_lik, *, transition_weights=None, method="auto",
                     check=True):
    """Posterior state marginals of a hidden Markov model, in log space, batched.

    Parameters
    ----------
    log_pi : array (..., K)
        Log initial-state weights (broadcast against the batch axes of ``log_lik``); need not
        be normalised (expected log parameters of a Dirichlet posterior are not).
    log_A : array (K, K)
        Log transition weights, ``log_A[i, j]`` for ``x_{t-1} = i -> x_t = j``; ``-inf``
        allowed (forbidden transitions).
    log_lik : array (..., T, K)
        ``log p(y_t | x_t = k)``; leading axes batch independent chains (e.g. many subchains).
    transition_weights : array (..., T - 1), optional
        Weights ``w_t`` of the pairwise marginals in ``pairwise`` (for scaled subchain
        statistics); default all ones.
    method : {"auto", "scan", "blocked", "sequential"}
        ``"scan"``: associative scans over time, O(log T) depth (Sarkka & Garcia-Fernandez
        2021), O(T K^2) elementwise work. ``"blocked"``: about ``sqrt(T)`` blocks run side by
        side from speculated entry messages, each checked against the previous block's exit
        (then exact; falls back to the scan when a chain mixes too slowly), O(T K) work and
        O(sqrt(T)) depth: about twice as fast as the scan on a CPU at T = 10^6, K = 5.
        ``"auto"`` (default): ``"blocked"`` on a CPU (NumPy, or torch on its CPU device) for
        chains of at least 512 steps and 4096 steps over the batch, and for batches of at
        least 16 shorter chains (SVI's subchains: one loop over time, vectorised over the
        batch), ``"scan"`` otherwise (a few short chains, and GPUs, where depth costs kernel
        launches). ``"sequential"``: the
        textbook log-space recursions with a Python loop over T, kept as the reference. All
        agree to rounding.
    check : bool
        Validate shapes, dtypes and NaN (one host synchronisation). Internal callers that have
        validated their data pass ``False``.

    Returns
    -------
    ForwardBackwardResult
        ``marginals`` (..., T, K), ``pairwise`` (..., K, K) (summed over t), ``log_normalizer``
        (...).

    Raises
    ------
    ShapeError, TypeError, ValueError
        Wrong shapes or dtypes, no states or steps, or NaN in the inputs.
    """
    if check:
        xp = _check_inputs(log_pi, log_A, log_lik, transition_weights)
    else:
        xp = get_namespace(log_pi, log_A, log_lik)
    if method == "auto":
        method = _auto_method(xp, log_lik)
    if method == "scan":
        return _forward_backward_scan(xp, log_pi, log_A, log_lik, transition_weights)
    if method == "blocked":
        return _forward_backward_scan(xp, log_pi, log_A, log_lik, transition_weights,
                                      chain=_chain_products_blocked)
    if method == "sequential":
        return _forward_backward_sequential(xp, log_pi, log_A, log_lik, transition_weights)
    raise ValueError(
        f"method: expected 'auto', 'scan', 'blocked' or 'sequential', got {method!r}")


# ------------------------------------------------------------------------------- Viterbi
def _max_plus(L1, L2):
    """(max, +) matrix product ``out(i, k) = max_j L1(i, j) + L2(j, k)`` of (..., m, K, K).

    A loop over the K middle indices keeps memory at O(m K^2) (a broadcast would need m K^3).
    """
    xp = get_namespace(L1)
    K = L1.shape[-1]
    out = L1[..., :, 0:1] + L2[..., 0:1, :]
    for j in range(1, K):
        out = xp.maximum(out, L1[..., :, j:j + 1] + L2[..., j:j + 1, :])
    return out


def _combine_max_plus(a, b):
    """(max, +) product of row-offset matrices ``r_i + M(i, j)``."""
    (M1, r1), (M2, r2) = a, b
    return _max_plus(M1 + r2[..., None, :], M2), r1


def _apply_max_plus(v, M):
    """Score vectors times row-offset matrices in (max, +): ``max_i v_i + r_i + M(i, j)``."""
    (v,), (M, r) = v, M
    xp = get_namespace(v)
    u = v + r
    K = u.shape[-1]
    out = u[..., 0:1] + M[..., 0, :]
    for i in range(1, K):
        out = xp.maximum(out, u[..., i:i + 1] + M[..., i, :])
    return (out,)


def _max_plus_chain(xp, v0, log_M, rows, block=None):
    """Prefixes ``p_0 = v0``, ``p_{k+1}(j) = max_i p_k(i) + rows_k(i) + log_M(i, j)``.

    The Viterbi forward recursion, by the same two-level parallel prefix as
    :func:`_chain_products` in the (max, +) semiring: blocks of ``C = ceil(log2(n + 1))``
    steps; (1) every block's (max, +) transfer matrix in ``C`` steps run in parallel over the
    blocks; (2) block entry scores by the odd/even scan over the blocks; (3) block interiors in
    ``C`` parallel steps. Memory O(n K + n K^2 / C) instead of the O(n K^2) of scanning all the
    step matrices.

    Parameters
    ----------
    v0 : array (..., K)
    log_M : array (K, K)
    rows : array (..., n, K)

    Returns
    -------
    array (..., n + 1, K)
    """
    n, K = rows.shape[-2], rows.shape[-1]
    batch = rows.shape[:-2]
    dev = device_of(rows)
    if n == 0:
        return v0[..., None, :]
    C = max(1, math.ceil(math.log2(n + 1))) if block is None else block
    num_blocks = -(-(n + 1) // C)
    pad = num_blocks * C - n
    if pad:  # padded steps only ever follow p_n; their outputs are sliced off
        rows = xp.concat([rows, xp.zeros(batch + (pad, K), dtype=rows.dtype, device=dev)],
                         axis=-2)
    nd = len(batch)
    lead = tuple(range(nd))
    # step-major (C, blocks, K), as in _chain_products
    R = xp.reshape(xp.permute_dims(xp.reshape(rows, batch + (num_blocks, C, K)),
                                   lead + (nd + 1, nd, nd + 2)), batch + (C * num_blocks, K))
    R = xp.reshape(R, batch + (C, num_blocks, K))

    def step(scores, r):
        """``max_i scores(..., i, .) + r(..., i) + log_M(i, .)`` over the state index i, where
        ``scores`` is (..., K) (a vector) or (..., K_rows, K) (a matrix, r broadcast)."""
        u = scores + r
        out = u[..., 0:1] + log_M[0, :]
        for i in range(1, K):
            out = xp.maximum(out, u[..., i:i + 1] + log_M[i, :])
        return out

    if num_blocks > 1:
        nb = num_blocks - 1
        zero = xp.zeros((K, K), dtype=rows.dtype, device=dev)
        eye = xp.eye(K, dtype=rows.dtype, device=dev)
        identity = xp.where(eye > 0.0, zero, xp.full_like(zero, -float("inf")))
        T_blk = xp.broadcast_to(identity, batch + (nb, K, K))
        for j in range(C):
            # matrix rows are the block's entry state: add r to the columns (the current state)
            T_blk = step(T_blk, R[..., j, :nb, :][..., None, :])
        offsets = xp.zeros(batch + (nb, K), dtype=rows.dtype, device=dev)
        (V,) = vector_prefix_scan(xp, _apply_max_plus, _combine_max_plus, (v0[..., None, :],),
                                  (T_blk, offsets), (-2,), (-3, -2))
    else:
        V = v0[..., None, :]
    out = xp.empty(batch + (C, num_blocks, K), dtype=rows.dtype, device=dev)
    out[..., 0, :, :] = V
    for j in range(C - 1):
        V = step(V, R[..., j, :, :])
        out[..., j + 1, :, :] = V
    out = xp.reshape(xp.permute_dims(out, lead + (nd + 1, nd, nd + 2)),
                     batch + (num_blocks * C, K))
    return _range_t(out, 0, n + 1)


def _compose_maps(a, b):
    """Composition of state maps (..., m, K) -> (..., m, K): apply ``a`` first, then ``b``."""
    (f,), (g,) = a, b
    xp = get_namespace(f)
    return (xp.take_along_axis(g, f, axis=-1),)


def viterbi(log_pi, log_A, log_lik, *, method="auto", check=True):
    """Most probable state path (max-product), batched over leading axes.

    Parameters
    ----------
    log_pi : array (..., K)
        Log initial-state weights.
    log_A : array (K, K)
        Log transition weights.
    log_lik : array (..., T, K)
        Per-step log likelihoods.
    method : {"auto", "scan", "blocked", "sequential"}
        ``"scan"``: the (max, +) prefix scan for the path scores and a scan of composed
        back-pointer maps for the back-tracking, both O(log T) depth. ``"blocked"``: about
        ``4 sqrt(T)`` blocks run side by side from speculated entry scores and exit states,
        each checked against its neighbour (then exact; falls back to the scan when the
        survivor paths of a chain do not merge within a block), O(T K^2) work and
        O(sqrt(T)) depth: 10-30x faster than the scan on a CPU at T = 10^6, K = 5.
        ``"auto"`` (default): ``"blocked"`` on a CPU for long chains (the rule of
        :func:`forward_backward`), ``"scan"`` otherwise. ``"sequential"``: the textbook loop
        (reference). All give the same path up to rounding (exact ties go to the lower state
        index in every method).
    check : bool
        Validate the inputs (one host synchronisation).

    Returns
    -------
    path : array (..., T) of int64
        The maximising state sequence (ties broken towards the lower state index).
    log_prob : array (...)
        ``max_x log [pi(x_0) p(y_0|x_0) prod_t A(x_{t-1}, x_t) p(y_t|x_t)]``.
    """
    if check:
        xp = _check_inputs(log_pi, log_A, log_lik)
    else:
        xp = get_namespace(log_pi, log_A, log_lik)
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    batch = log_lik.shape[:-2]
    if method == "sequential":
        deltas = [log_pi + log_lik[..., 0, :]]
        pointers = []
        for t in range(1, T):
            scores = deltas[-1][..., :, None] + log_A  # (..., K, K)
            pointers.append(xp.argmax(scores, axis=-2))
            deltas.append(xp.max(scores, axis=-2) + log_lik[..., t, :])
        state = xp.argmax(deltas[-1], axis=-1)
        path = [state]
        for t in range(T - 1, 0, -1):
            state = xp.squeeze(xp.take_along_axis(pointers[t - 1], state[..., None], axis=-1),
                               axis=-1)
            path.insert(0, state)
        return xp.astype(xp.stack(path, axis=-1), xp.int64), xp.max(deltas[-1], axis=-1)
    if method == "auto":
        method = _auto_method(xp, log_lik)
    if method == "blocked":
        result = _viterbi_blocked(xp, log_pi, log_A, log_lik)
        if result is not None:
            return result
        method = "scan"
    if method != "scan":
        raise ValueError(
            f"method: expected 'auto', 'scan', 'blocked' or 'sequential', got {method!r}")

    # Best scores of paths into each state before its emission: pred_{t+1} = pred_t (x) G_t
    # with G_t(i, j) = log p(y_t | i) + log A(i, j), pred_0 = log pi.
    pred = _max_plus_chain(xp, xp.broadcast_to(log_pi, batch + (K,)), log_A,
                           _range_t(log_lik, 0, T - 1))
    delta = pred + log_lik  # (..., T, K): best score of a path ending in each state
    last = xp.argmax(delta[..., T - 1, :], axis=-1)  # (...)
    log_prob = xp.max(delta[..., T - 1, :], axis=-1)
    if T == 1:
        return xp.astype(last[..., None], xp.int64), log_prob
    # Back-pointer maps bp_t(k) = argmax_i delta_{t-1}(i) + A(i, k), t = 1 .. T-1, and their
    # suffix compositions G_t = bp_{t+1} o ... o bp_{T-1} by a scan of the reversed maps.
    # A loop over the K previous states keeps memory at O(T K); strict ">" breaks ties towards
    # the lower index, like argmax.
    prev = _range_t(delta, 0, T - 1)
    best = prev[..., 0:1] + log_A[0, :]
    pointers = xp.zeros(best.shape, dtype=xp.int64, device=device_of(log_lik))
    for i in range(1, K):
        candidate = prev[..., i:i + 1] + log_A[i, :]
        better = candidate > best
        best = xp.where(better, candidate, best)
        pointers = xp.where(better, xp.full_like(pointers, i), pointers)
    (composed,) = associative_scan(xp, _compose_maps, (xp.flip(pointers, axis=-2),), (-2,))
    composed = xp.flip(composed, axis=-2)  # G_0 .. G_{T-2}
    last64 = xp.astype(last, xp.int64)
    index = xp.broadcast_to(last64[..., None, None], composed.shape[:-1] + (1,))
    head = xp.squeeze(xp.take_along_axis(composed, index, axis=-1), axis=-1)
    path = xp.concat([head, last64[..., None]], axis=-1)
    return path, log_prob


# ---------------------------------------------------------------------- blocked Viterbi
def _viterbi_block_shape(T, block=None):
    """``(B, C)``: ``B = ceil(T / C)`` blocks of ``C`` steps, the last one padded.

    ``C`` is about ``sqrt(T) / 4`` and at least 64 steps: the blocks run side by side, so the
    Python loop has ``C`` steps each over ``B`` blocks, and a short block keeps the per-call
    overhead small next to the data (NumPy, K = 5, T = 10^6: 250 steps over 4000 blocks).
    Among the lengths within 25% of that, the one that pads least is taken (no padding when
    ``T`` has a divisor there), since padding costs a copy of the chain.
    """
    if block is not None:
        C = min(max(1, block), T)
    else:
        C0 = min(max(64, math.isqrt(T) // 4), T)
        C = min(range(max(1, C0 * 4 // 5), min(T, C0 * 5 // 4) + 1),
                key=lambda c: (-(-T // c) * c - T, abs(c - C0)))
    return -(-T // C), C


def _max_plus_step(xp, d, A_rows):
    """``out(k, n) = max_i d(i, n) + A(i, k)`` for scores ``d`` (K, N): K elementwise maxima of
    (K, N) slabs (a (K, K, N) broadcast and a reduction is slower in NumPy)."""
    out = d[0:1, :] + A_rows[0]
    for i in range(1, len(A_rows)):
        out = xp.maximum(out, d[i:i + 1, :] + A_rows[i])
    return out


def _max_plus_argmax_step(xp, d, A_rows, index_dtype):
    """:func:`_max_plus_step` and its back-pointers ``argmax_i d(i, n) + A(i, k)`` (K, N),
    ties to the lower ``i`` (as ``argmax``). A later ``i`` is taken only when strictly better,
    and then it exceeds every earlier pointer, so the pointers are a running maximum."""
    best = d[0:1, :] + A_rows[0]
    pointer = None
    for i in range(1, len(A_rows)):
        candidate = d[i:i + 1, :] + A_rows[i]
        step = xp.astype(candidate > best, index_dtype) * i
        pointer = step if pointer is None else xp.maximum(pointer, step)
        best = xp.maximum(best, candidate)
    if pointer is None:
        pointer = xp.zeros(best.shape, dtype=index_dtype, device=device_of(d))
    return best, pointer


def _viterbi_blocked(xp, log_pi, log_A, log_lik, block=None, max_sweeps=4, warmup=None):
    """Viterbi by speculative blocks: O(T K^2) work, about ``sqrt(T) / 2`` sequential steps.

    The (max, +) analogue of :func:`_chain_products_blocked`. The chain is cut into ``B``
    blocks of ``C`` steps, laid out state-major as lanes ``(C, K, N)``, ``N`` = chains x
    blocks. Forward: each block's entry scores (known only up to a constant) are guessed by
    running the last ``warmup`` steps of the previous block from zeros; the maximising paths
    into every state then merge (survivor paths coalesce), after which the normalised scores
    no longer depend on the start. All blocks run from their guesses at once, storing the
    back-pointers, and the result is accepted when every block's normalised exit equals the
    next block's guess to ``256 eps`` of the scores' size (block 0 starts from the exact
    ``log_pi``, so by induction every block started from its exact prefix, up to a constant);
    otherwise the blocks rerun from the exits (a sweep). Backtracking: every block is traced
    back at once from a guessed state of the next block's first step (the last block's end
    state is exact), and accepted when each guess is the state that the next block's trace
    reached; otherwise the tracks are redone from the corrected states until they merge into
    the earlier ones. Both checks are exact criteria, so the result is the sequential
    recursion's path (ties to the lower state index, as there) up to rounding; a chain whose
    survivors do not merge within a few sweeps is handed to the scan.

    Returns ``(path, log_prob)`` as :func:`viterbi`, or ``None`` when the caller should use
    the scan (no coalescence, or a block with no path of positive probability).
    """
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    batch = log_lik.shape[:-2]
    nb = math.prod(batch)
    dtype, dev = log_lik.dtype, device_of(log_lik)
    B, C = _viterbi_block_shape(T, block)
    N = nb * B
    pad = B * C - T
    inf = float("inf")
    # Back-pointers in the narrowest integer type: a fresh (C, K, N) buffer costs its page
    # faults, 8x fewer than a float64 one.
    index_dtype = xp.int8 if K <= 127 else (xp.int16 if K <= 32767 else xp.int32)
    # Lanes: R[j, k, b * B + l] = log_lik of chain b at step l * C + j, state k, contiguous
    # per step: a strided view would read each of its K N entries from its own cache line at
    # every step of every sweep (T = 10^6, K = 5: 160 us a step, half of the whole solve). The
    # padded steps (after T - 1, in the last block of each chain) are zeros, never read back.
    flat = xp.reshape(log_lik, (nb, T, K))
    if pad:
        flat = xp.concat([flat, xp.zeros((nb, pad, K), dtype=dtype, device=dev)], axis=1)
    R = xp.reshape(_transpose_tiled(xp, xp.reshape(flat, (N, C * K))), (C, K, N))
    A_rows = [log_A[i, :][:, None] for i in range(K)]  # (K, 1) each: A(i, .) as a column

    # Block 0's entry: log_pi shifted to maximum 0, its shift kept for the score.
    pi = xp.reshape(xp.broadcast_to(log_pi, batch + (K,)), (nb, K))
    pi_shift = xp.max(pi, axis=-1)  # (nb,)
    if not bool(xp.all(xp.isfinite(pi_shift))):
        return None
    pi_entry = xp.permute_dims(pi - pi_shift[:, None], (1, 0))  # (K, nb)
    lane = xp.arange(N, dtype=xp.int64, device=dev)
    first = xp.reshape(lane % B == 0, (1, N))
    is_last = lane % B == B - 1
    pi_lanes = xp.reshape(xp.broadcast_to(pi_entry[:, :, None], (K, nb, B)), (K, N))

    def normalise(X):
        top = xp.max(X, axis=0)
        return X - top, top

    def entries_from(G):
        # lane n + 1 starts from lane n's exit (guess); the first block of a chain from pi
        shifted = xp.concat([G[:, :1], G[:, :N - 1]], axis=1)
        return xp.where(first, pi_lanes, shifted)

    # Forward: scores relative to each lane's entry; pointers[j] are the back-pointers of
    # the transition out of step j.
    eps = float(xp.finfo(dtype).eps)
    if B > 1:
        w = min(C, max(32, C // 4)) if warmup is None else min(max(1, warmup), C)
        G = xp.zeros((K, N), dtype=dtype, device=dev)
        for j in range(C - w, C):
            G = _max_plus_step(xp, G + R[j, :, :], A_rows)
        G, _ = normalise(G)
    else:
        G = xp.zeros((K, N), dtype=dtype, device=dev)
    jl = C - 1 - pad  # the last block's last real step
    pointers = xp.empty((C, K, N), dtype=index_dtype, device=dev)
    previous = inf
    for sweep in range(max_sweeps):
        V = entries_from(G)
        for j in range(C):
            d = V + R[j, :, :]
            if j == jl:
                final = d[:, B - 1::B]  # (K, nb): delta_{T-1} of every chain, relative
            V, pointers[j, :, :] = _max_plus_argmax_step(xp, d, A_rows, index_dtype)
        X, gain = normalise(V)
        if not bool(xp.all(xp.isfinite(gain))):
            return None  # a block with no path of positive probability: the scan copes
        if B == 1:
            break
        size = float(xp.max(xp.abs(gain)))
        gap = xp.where(X == G, xp.zeros_like(X), xp.abs(X - G))  # equal -inf entries match
        gap = xp.where(is_last[None, :], xp.zeros_like(gap), gap)  # the last block feeds none
        mismatch = float(xp.max(gap))
        if mismatch <= 256.0 * eps * max(1.0, size):
            break
        if mismatch > 1e-2 * previous:
            return None  # no progress: survivor paths do not merge within a block
        previous = mismatch
        G = X
    else:
        return None

    # Score: the lane offsets are the running sums of the blocks' gains.
    gains = xp.reshape(gain, (nb, B))
    log_prob = pi_shift + xp.max(final, axis=0)
    if B > 1:
        log_prob = log_prob + xp.sum(gains[:, :B - 1], axis=1)
    end_state = xp.astype(_argmax_rows(xp, final), index_dtype)  # (nb,): ties to the lower
    last_states = xp.reshape(xp.broadcast_to(end_state[:, None], (nb, B)), (N,))
    flat_pointers = xp.reshape(pointers, (C, K * N))

    def back(j, s):
        """States at step j of every lane, given the states ``s`` at step j + 1."""
        return xp.take(flat_pointers[j, :], xp.astype(s, xp.int64) * N + lane)

    def trace(guess_next, path=None):
        """Trace every lane back from the guessed state of the next lane's first step. Given
        the ``path`` of an earlier trace, the tracks stop as soon as they have all merged
        into it (the earlier steps are then unchanged): a fix-up costs the merge depth."""
        fresh = path is None
        if fresh:
            path = xp.empty((C, N), dtype=index_dtype, device=dev)
        s = back(C - 1, guess_next)
        for j in range(C - 1, -1, -1):
            if j == jl:
                s = xp.where(is_last, last_states, s)
            if not fresh and j < jl and (C - 1 - j) % 8 == 0 and bool(xp.all(path[j, :] == s)):
                return path
            path[j, :] = s
            if j:
                s = back(j - 1, s)
        return path

    # First guess: the best state of the next lane's entry scores.
    guess = xp.astype(_argmax_rows(xp, X), index_dtype)
    path = None
    for sweep in range(max_sweeps):
        path = trace(guess, path)
        reached = xp.concat([path[0, 1:], path[0, :1]])  # lane n + 1's first state
        reached = xp.where(is_last, guess, reached)  # no successor lane: nothing to check
        if bool(xp.all(reached == guess)):
            break
        guess = reached
    else:
        return None
    path = xp.reshape(xp.permute_dims(xp.reshape(path, (C, nb, B)), (1, 2, 0)), (nb, B * C))
    return (xp.reshape(xp.astype(path[:, :T], xp.int64), batch + (T,)),
            xp.reshape(log_prob, batch))


def _transpose_tiled(xp, M, tile=256):
    """A contiguous copy of ``M.T`` for a 2-D ``M``, tile by tile: each (tile, tile) piece is
    read and written while in cache (NumPy's own transposing copy reads the source with a
    stride of a row per element: 43 ms against 15 ms for a (4000, 1250) float64 matrix)."""
    n, m = M.shape
    out = xp.empty((m, n), dtype=M.dtype, device=device_of(M))
    for r0 in range(0, n, tile):
        r1 = min(n, r0 + tile)  # in-bounds stops: the standard leaves others unspecified
        for c0 in range(0, m, tile):
            c1 = min(m, c0 + tile)
            out[c0:c1, r0:r1] = xp.matrix_transpose(M[r0:r1, c0:c1])
    return out


def _argmax_rows(xp, cand):
    """``argmax(cand, axis=0)`` of a (K, N) array, ties to the lower index, as int64.

    As whole-array passes: the column maxima, then the largest of ``K - i`` over the rows
    ``i`` that attain them (NumPy's argmax over a leading axis copies the array and then
    works row by row, 1.5-2x slower at K = 5).
    """
    K = cand.shape[0]
    dev = device_of(cand)
    top = xp.max(cand, axis=0)
    weight = xp.reshape(xp.arange(K, 0, -1, dtype=xp.int64, device=dev), (K, 1))
    zero = xp.zeros((1, 1), dtype=xp.int64, device=dev)
    return K - xp.max(xp.where(cand == top, weight, zero), axis=0)
