"""Products with a sparse matrix of ``p`` nonzeros a row, kept as index and value arrays (the
interpolation weights of structured kernel interpolation), which the array API standard lacks:
compressed sparse rows (``scipy.sparse``) on NumPy, a gather and a scatter-add elsewhere."""

from __future__ import annotations

import array_api_compat

from gpnum.backend._convert import get_namespace
from gpnum.backend._parallel import run_row_split
from gpnum.backend._scatter import scatter_add
from gpnum.backend._threads import row_workers
from gpnum.errors import ShapeError, describe_shape

__all__ = ["SparseRows"]

#: Row pieces of a large ``W`` (at least :data:`_PIECE_MIN_NONZEROS` nonzeros each), for the
#: row threads of ``blas_pool(..., split_rows=True)``. Fixed, so that ``W^T X`` adds the same
#: partial sums in the same order whatever the number of threads.
_ROW_PIECES = 4
_PIECE_MIN_NONZEROS = 1 << 16


class SparseRows:
    """``W`` (n, m) with ``W[i, indices[i, a]] += weights[i, a]``: products ``W Y`` and
    ``W^T X`` in ``O(n p k)`` for ``k`` columns.

    On NumPy ``W`` is kept in compressed sparse row form (scipy.sparse, built once: ``O(n p)``),
    whose products with ``W`` and ``W^T`` run in compiled loops without the ``(n, p, k)``
    temporary of a gather; on other namespaces ``W Y`` gathers rows of ``Y`` and ``W^T X`` sums
    them back by :func:`gpnum.backend.scatter_add`. A large ``W`` is also kept in four pieces
    of rows, each restricted to the columns it touches, which the threads of
    ``blas_pool(..., split_rows=True)`` share (both products are single-threaded in SciPy).

    Parameters
    ----------
    indices : integer array (n, p)
        Columns in ``[0, m)``; repeats within a row add up.
    weights : array (n, p)
    m : int
        Columns of ``W``.
    """

    def __init__(self, indices, weights, m):
        xp = get_namespace(indices, weights)
        if indices.ndim != 2 or tuple(weights.shape) != tuple(indices.shape):
            raise ShapeError(f"weights: expected shape {describe_shape(indices.shape)} "
                             f"(indices' (n, p)), got {describe_shape(weights.shape)}")
        self.xp = xp
        self.indices = indices
        self.weights = weights
        self.shape = (int(indices.shape[0]), int(m))
        self._flat = xp.reshape(indices, (-1,))
        self._csr = self._transpose = self._pieces = None
        self._shifted = {}
        if array_api_compat.is_numpy_namespace(xp):
            import numpy as np
            import scipy.sparse

            n, p = indices.shape
            W = scipy.sparse.csr_array(
                (np.reshape(weights, (-1,)), np.reshape(indices, (-1,)),
                 np.arange(0, n * p + 1, p, dtype=np.int64)), shape=self.shape, copy=True)
            W.sum_duplicates()             # sorts in place: the copy keeps the inputs intact
            self._csr = W
            # W^T in compressed sparse columns (a view of W): its product scatters while it
            # reads X in order, faster than gathering X's rows through W^T in row form
            self._transpose = W.T
            self._pieces = self._row_pieces(W)

    @staticmethod
    def _row_pieces(W):
        """``[(rows, columns, W[rows, columns], its transpose)]``: ``W`` cut into
        :data:`_ROW_PIECES` runs of rows, each with the range of columns its nonzeros touch
        (narrow when the rows are ordered by grid cell, as the SKI training rows are), or
        None for a small ``W``."""
        import numpy as np
        import scipy.sparse

        n = W.shape[0]
        pieces = min(_ROW_PIECES, W.nnz // _PIECE_MIN_NONZEROS)
        if pieces < 2:
            return None
        out = []
        for j in range(pieces):
            start, stop = j * n // pieces, (j + 1) * n // pieces
            a, b = int(W.indptr[start]), int(W.indptr[stop])
            cols = W.indices[a:b]
            lo, hi = (int(cols.min()), int(cols.max()) + 1) if b > a else (0, 0)
            # The piece's values are a view of W's (set as attributes: the constructor copies
            # a view of a much larger array); only its shifted indices, in 32 bits, are new.
            index = np.int32 if max(b - a, hi - lo) < 2**31 else np.int64
            block = scipy.sparse.csr_array((stop - start, hi - lo), dtype=W.dtype)
            block.data = W.data[a:b]
            block.indices = (cols - lo).astype(index)
            block.indptr = (W.indptr[start:stop + 1] - a).astype(index)
            out.append((slice(start, stop), slice(lo, hi), block, block.T))
        return out

    def matmul(self, Y):
        """``W Y`` for ``Y`` (m, k): (n, k)."""
        xp = self.xp
        if self._pieces is not None:
            return self._split_matmul(Y)
        if self._csr is not None:
            return xp.asarray(self._csr @ Y, dtype=Y.dtype)
        n, p = self.indices.shape
        G = xp.reshape(xp.take(Y, self._flat, axis=0), (n, p, Y.shape[1]))
        return xp.sum(G * self.weights[:, :, None], axis=1)

    def rmatmul(self, X):
        """``W^T X`` for ``X`` (n, k): (m, k)."""
        xp = self.xp
        if self._pieces is not None:
            return self._split_rmatmul(X)
        if self._transpose is not None:
            return xp.asarray(self._transpose @ X, dtype=X.dtype)
        n, p = self.indices.shape
        values = xp.reshape(self.weights[:, :, None] * X[:, None, :], (n * p, X.shape[1]))
        return scatter_add(self._flat, values, self.shape[1])

    def _runs(self):
        """The pieces of each of :func:`row_workers`' threads (contiguous runs)."""
        count = len(self._pieces)
        workers = max(1, min(row_workers(), count))
        return workers, [self._pieces[w * count // workers:(w + 1) * count // workers]
                         for w in range(workers)]

    def _split_matmul(self, Y):
        import numpy as np

        workers, runs = self._runs()
        if workers == 1:   # no sums across pieces here: the whole W gives the same values
            return np.asarray(self._csr @ Y, dtype=Y.dtype)
        out = np.empty((self.shape[0], Y.shape[1]), dtype=Y.dtype)

        def work(w):
            for rows, cols, block, _ in runs[w]:
                out[rows] = block @ Y[cols]

        run_row_split(work, workers)
        return out

    def _split_rmatmul(self, X):
        import numpy as np

        X = np.asarray(X)
        workers, runs = self._runs()

        def work(w):
            return [(cols, block_t @ X[rows]) for rows, cols, _, block_t in runs[w]]

        out = np.zeros((self.shape[1], X.shape[1]), dtype=X.dtype)
        for part in run_row_split(work, workers):
            for cols, values in part:          # in row order: a fixed order of the sums
                out[cols] += values
        return out

    def rows_are_shifts(self, grid_shape):
        """Whether every row's columns, read as multi-indices on a grid of ``grid_shape``
        (row-major), are the first row's shifted by one offset (a stencil, as cubic
        interpolation's). Computed once per shape."""
        key = tuple(int(s) for s in grid_shape)
        if key not in self._shifted:
            xp = self.xp
            rest = self.indices
            same = self.indices.shape[0] > 0
            for size in reversed(key):
                if not same:
                    break
                digit = rest % size
                rest = rest // size
                rel = digit - digit[:, :1]
                same = not bool(xp.any(rel != rel[:1, :]))
            self._shifted[key] = same
        return self._shifted[key]
