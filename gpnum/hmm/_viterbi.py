"""Viterbi decoding of an HMM: the most probable state path.

The max-product recursion is a product of per-step matrices in the (max, +) semiring, so it
runs as a parallel prefix over time (Sarkka & Garcia-Fernandez 2021, "Temporal parallelization
of Bayesian smoothers", IEEE TAC 66(1)): :func:`_max_plus_chain`, the same two-level scheme as
the sum-product's, then the back-pointer maps composed by
:func:`gpnum.backend.associative_scan`. On a CPU long chains go to speculative blocks checked
against each other (:func:`_viterbi_blocked`). Viterbi needs no exponentials.
"""

from __future__ import annotations

import math

from gpnum.backend import associative_scan, device_of, get_namespace, vector_prefix_scan
from gpnum.hmm._chain import _range_t
from gpnum.hmm._inference import _auto_method, _check_inputs

__all__ = ["viterbi"]


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
    for _sweep in range(max_sweeps):
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
    for _sweep in range(max_sweeps):
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
    stride of a row per element, about 3x slower at (4000, 1250) in float64: docs/benchmarks.md)."""
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
