"""A parallel-prefix (associative) scan written against the array API.

The recursion of the odd/even (Blelloch-style) scan as in ``jax.lax.associative_scan``: combine
neighbouring pairs, scan the half-length sequence recursively, then fill in the even positions.
Depth O(log n) array operations, work O(n) combines. Each level is a handful of batched array
operations, so a GPU (or NumPy's vectorised loops) does the work of one level at once instead of
a Python loop over n steps. The hidden Markov models' forward-backward and Viterbi recursions
(:mod:`gpnum.hmm`) and the Kalman filter and smoother (Sarkka & Garcia-Fernandez 2021) are
written as such scans.
"""

from __future__ import annotations

from gpnum.backend import device_of

__all__ = ["associative_scan", "vector_prefix_scan"]


def _range(a, axis: int, start: int, stop: int, step: int = 1):
    """``a[..., start:stop:step, ...]`` along ``axis`` (negative); never runs past the end."""
    index = [slice(None)] * a.ndim
    index[axis] = slice(start, stop, step)
    return a[tuple(index)]


def _interleave(xp, even, odd, axis: int, n: int):
    """Merge ``even`` (positions 0, 2, ...) and ``odd`` (positions 1, 3, ...) into length ``n``.

    Written into a fresh buffer by two strided assignments: ``xp.stack`` on a new inner axis
    followed by a reshape is much slower in NumPy (a concatenate of many small blocks). Only the
    new buffer is written; no input is modified.
    """
    shape = list(even.shape)
    shape[axis] = n
    out = xp.empty(tuple(shape), dtype=even.dtype, device=device_of(even))
    index = [slice(None)] * even.ndim
    index[axis] = slice(0, n, 2)
    out[tuple(index)] = even
    index[axis] = slice(1, n, 2)
    out[tuple(index)] = odd
    return out


def associative_scan(xp, combine, elems, axes):
    """Inclusive prefix scan ``out_t = e_0 (+) e_1 (+) ... (+) e_t`` of an associative ``(+)``.

    Parameters
    ----------
    xp : namespace
        Array namespace of ``elems``.
    combine : callable
        ``combine(a, b) -> c`` for tuples of arrays holding ``m`` elements each along their
        scan axes, ``a`` the earlier and ``b`` the later operands (the operation need not
        commute). Must be associative.
    elems : tuple of arrays
        The elements; array ``i`` holds the sequence along axis ``axes[i]``.
    axes : tuple of int
        Negative axis of the sequence in each array of ``elems`` (leading axes batch).

    Returns
    -------
    tuple of arrays
        The prefixes, shaped like ``elems``.
    """
    elems = tuple(elems)
    n = elems[0].shape[axes[0]]
    if n < 2:
        return elems
    left = tuple(_range(e, ax, 0, n - 1, 2) for e, ax in zip(elems, axes, strict=False))
    right = tuple(_range(e, ax, 1, n, 2) for e, ax in zip(elems, axes, strict=False))
    odd = associative_scan(xp, combine, combine(left, right), axes)  # prefixes at 1, 3, 5, ...
    num_even_rest = (n + 1) // 2 - 1  # even positions 2, 4, ... below n
    first = tuple(_range(e, ax, 0, 1) for e, ax in zip(elems, axes, strict=False))
    if num_even_rest > 0:
        prev = tuple(_range(o, ax, 0, num_even_rest) for o, ax in zip(odd, axes, strict=False))
        here = tuple(_range(e, ax, 2, 2 * num_even_rest + 1, 2) for e, ax in zip(elems, axes, strict=False))
        rest = combine(prev, here)
        even = tuple(xp.concat([f, r], axis=ax) for f, r, ax in zip(first, rest, axes, strict=False))
    else:
        even = first
    return tuple(_interleave(xp, e, o, ax, n) for e, o, ax in zip(even, odd, axes, strict=False))


def _first(elems, axes):
    return tuple(_range(e, ax, 0, 1) for e, ax in zip(elems, axes, strict=False))


def vector_prefix_scan(xp, apply, combine, first, mats, vec_axes, mat_axes):
    """Prefixes ``p_0 = v``, ``p_t = p_{t-1} M_{t-1}`` of a vector times a sequence of matrices.

    The odd/even recursion of :func:`associative_scan` specialised to a sequence that starts
    with a vector: pairs of matrices are multiplied (matrix-matrix, about ``n`` products over
    all levels), but every fill-in is a vector-matrix product and the interleaved outputs are
    vectors, so the work is about half that of scanning full matrices and memory traffic far
    lower. Depth O(log n).

    Parameters
    ----------
    xp : namespace
    apply : callable
        ``apply(vecs, mats) -> vecs``: ``m`` vectors times ``m`` matrices, elementwise along
        the scan axes.
    combine : callable
        ``combine(a, b) -> ab``: ``m`` matrix products, ``a`` first (associative).
    first : tuple of arrays
        The vector ``p_0``, each array with a scan axis of length 1 at ``vec_axes[i]``.
    mats : tuple of arrays
        ``n`` matrices ``M_0 .. M_{n-1}`` along ``mat_axes``.
    vec_axes, mat_axes : tuple of int
        Negative scan axes of the vector and matrix arrays.

    Returns
    -------
    tuple of arrays
        ``p_0 .. p_n`` (``n + 1`` vectors) along ``vec_axes``.
    """
    n = mats[0].shape[mat_axes[0]]
    if n == 0:
        return tuple(first)
    p1 = apply(first, _first(mats, mat_axes))
    if n == 1:
        return tuple(xp.concat([f, p], axis=ax) for f, p, ax in zip(first, p1, vec_axes, strict=False))
    m = (n - 1) // 2  # matrix pairs (M_1 M_2), (M_3 M_4), ...
    if m > 0:
        pairs = combine(tuple(_range(M, ax, 1, 2 * m, 2) for M, ax in zip(mats, mat_axes, strict=False)),
                        tuple(_range(M, ax, 2, 2 * m + 1, 2) for M, ax in zip(mats, mat_axes, strict=False)))
        odd = vector_prefix_scan(xp, apply, combine, p1, pairs, vec_axes, mat_axes)  # p_1, p_3..
    else:
        odd = p1
    e = n // 2  # even positions 2, 4, ..., 2e: p_2k = p_{2k-1} M_{2k-1}
    rest = apply(tuple(_range(o, ax, 0, e) for o, ax in zip(odd, vec_axes, strict=False)),
                 tuple(_range(M, ax, 1, 2 * e, 2) for M, ax in zip(mats, mat_axes, strict=False)))
    even = tuple(xp.concat([f, r], axis=ax) for f, r, ax in zip(first, rest, vec_axes, strict=False))
    return tuple(_interleave(xp, ev, od, ax, n + 1) for ev, od, ax in zip(even, odd, vec_axes, strict=False))
