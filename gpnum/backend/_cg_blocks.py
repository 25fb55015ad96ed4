"""The vector work of block conjugate gradients on tall ``(n, k)`` blocks: the updates of the
iterate, the residual and the search direction, with the residual's column reductions.

Between two products with the operator, CG reads and writes its ``(n, k)`` blocks several
times (Hestenes & Stiefel 1952; Saad 2003, algorithm 9.1): ``x + a p``, ``r - a (A p)``,
``r^T r``, ``r^T M r`` and ``z + b p``. Written as array expressions, each is a pass over
memory that allocates a fresh block, and on a block larger than the cache the passes, not
the arithmetic, set the time. On NumPy these functions instead walk the rows in chunks that
stay in the cache, do all of a step's updates on a chunk before moving on, overwrite the
caller's blocks in place, and, within ``blas_pool(..., split_rows=True)``, split the chunks
over :func:`gpnum.backend.blas_threads` threads. Elsewhere they are the array expressions (torch and CuPy fuse or parallelise their
own elementwise work).

The column reductions add the chunks' partial sums in chunk order, and the chunks depend on
``n`` and ``k`` only, so the results do not depend on the number of threads.
"""

from __future__ import annotations

import array_api_compat

from gpnum.backend._convert import get_namespace
from gpnum.backend._parallel import run_row_split
from gpnum.backend._threads import row_workers

__all__ = ["cg_direction", "cg_update", "scaled_add"]

#: Elements of one chunk of one block: the chunks of the four blocks a step reads stay in
#: a core's L2 cache together.
_CHUNK_ELEMENTS = 1 << 15


def _chunks(n, k):
    rows = max(1, _CHUNK_ELEMENTS // max(k, 1))
    return [(s, min(n, s + rows)) for s in range(0, n, rows)]


def _numpy_blocks(*arrays):
    """Whether the fast path applies: NumPy float arrays of one dtype (0-d and 1-d scales
    included)."""
    xp = get_namespace(*arrays)
    if not array_api_compat.is_numpy_namespace(xp):
        return False
    dtype = arrays[0].dtype
    return all(a.dtype == dtype for a in arrays) and dtype in (xp.float32, xp.float64)


def _split(n, k, body, reductions):
    """Run ``body(s, e, out)`` on every row chunk ``[s, e)``, the chunks divided into
    contiguous runs over :func:`row_workers` threads; ``out`` is the chunk's row of a
    ``(chunks, reductions, k)`` array of partial sums, which come back added in chunk
    order."""
    import numpy as np

    chunks = _chunks(n, k)
    partial = np.empty((len(chunks), reductions, k))
    workers = max(1, min(row_workers(), len(chunks)))

    def run(w):
        for c in range(w * len(chunks) // workers, (w + 1) * len(chunks) // workers):
            s, e = chunks[c]
            body(s, e, partial[c])

    run_row_split(run, workers)
    return np.sum(partial, axis=0)


def _scaled(scale, s, e):
    """The rows ``s:e`` of a scale (0-d: itself) broadcast against a chunk's columns."""
    return scale if scale.ndim == 0 else scale[s:e, None]


def cg_update(X, R, P, AP, alpha, scale=None):
    """``X + alpha P``, ``R - alpha AP`` and the new residual's column reductions.

    Parameters
    ----------
    X, R, P, AP : arrays (n, k)
        The iterate, the residual, the search direction and its product with the operator.
        On NumPy ``X`` and ``R`` are overwritten with the results: pass blocks the caller
        owns.
    alpha : array (k,)
        The step of each column.
    scale : array (n,) or 0-d, optional
        A diagonal preconditioner ``M = diag(scale)``.

    Returns
    -------
    X, R : arrays (n, k)
        The updated blocks (on NumPy the inputs themselves).
    rr : array (k,)
        ``sum(R * R, axis=0)`` of the new residual.
    rz : array (k,) or None
        ``sum(R * scale * R, axis=0)`` (``r^T M r``) with ``scale``, else None.
    """
    if not _numpy_blocks(X, R, P, AP, alpha, *(() if scale is None else (scale,))):
        xp = get_namespace(X, R, P, AP)
        X = X + alpha * P
        R = R - alpha * AP
        rr = xp.sum(R * R, axis=0)
        if scale is None:
            return X, R, rr, None
        if scale.ndim == 0:
            return X, R, rr, scale * rr
        return X, R, rr, xp.sum(R * (scale[:, None] * R), axis=0)
    import numpy as np

    n, k = X.shape
    with_rz = scale is not None and scale.ndim == 1

    def body(s, e, out):
        x, r = X[s:e], R[s:e]
        t = np.multiply(P[s:e], alpha)
        x += t
        np.multiply(AP[s:e], alpha, out=t)
        r -= t
        out[0] = np.einsum("ij,ij->j", r, r)
        if with_rz:
            np.multiply(r, scale[s:e, None], out=t)
            out[1] = np.einsum("ij,ij->j", t, r)

    sums = _split(n, k, body, 2 if with_rz else 1)
    rr = sums[0].astype(X.dtype, copy=False)
    if scale is None:
        return X, R, rr, None
    return X, R, rr, (sums[1].astype(X.dtype, copy=False) if with_rz else scale * rr)


def cg_direction(Z, P, beta, scale=None):
    """The next search direction ``scale Z + beta P`` (``Z + beta P`` without ``scale``).

    Parameters
    ----------
    Z : array (n, k)
        The preconditioned residual (or, with ``scale``, the residual).
    P : array (n, k)
        The search direction; on NumPy it is overwritten with the result: pass a block the
        caller owns, distinct from ``Z``.
    beta : array (k,)
    scale : array (n,) or 0-d, optional
        A diagonal preconditioner applied to ``Z`` on the way.

    Returns
    -------
    array (n, k)
    """
    if not _numpy_blocks(Z, P, beta, *(() if scale is None else (scale,))):
        return (Z if scale is None else _scaled(scale, 0, Z.shape[0]) * Z) + beta * P
    import numpy as np

    n, k = P.shape

    def body(s, e, out):
        p = P[s:e]
        p *= beta
        if scale is None:
            p += Z[s:e]
        else:
            p += np.multiply(Z[s:e], _scaled(scale, s, e))

    _split(n, k, body, 0)
    return P


def scaled_add(Y, X, scale, dots=False):
    """``Y + scale X`` for a 0-d or (n,) ``scale`` (a diagonal matrix times a block), and
    with ``dots`` the column dot products of ``X`` with the result (CG's ``p^T A p`` for
    ``A = K + D``, in the same pass).

    Parameters
    ----------
    Y : array (n, k)
        On NumPy overwritten with the result: pass a block the caller owns (e.g. a fresh
        product).
    X : array (n, k)
    scale : array (n,) or 0-d
    dots : bool

    Returns
    -------
    array (n, k)
        The sum (on NumPy ``Y`` itself).
    array (k,)
        With ``dots``: ``sum(X * (Y + scale X), axis=0)``.
    """
    if not _numpy_blocks(Y, X, scale):
        xp = get_namespace(Y, X)
        Y = Y + _scaled(scale, 0, Y.shape[0]) * X
        return (Y, xp.sum(X * Y, axis=0)) if dots else Y
    import numpy as np

    n, k = Y.shape

    def body(s, e, out):
        y, x = Y[s:e], X[s:e]
        y += np.multiply(x, _scaled(scale, s, e))
        if dots:
            out[0] = np.einsum("ij,ij->j", x, y)

    sums = _split(n, k, body, 1 if dots else 0)
    return (Y, sums[0].astype(Y.dtype, copy=False)) if dots else Y
