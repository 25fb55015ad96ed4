"""Products with a sparse matrix of ``p`` nonzeros a row, kept as index and value arrays (the
interpolation weights of structured kernel interpolation), which the array API standard lacks:
compressed sparse rows (``scipy.sparse``) on NumPy, a gather and a scatter-add elsewhere."""

from __future__ import annotations

import array_api_compat

from gpnum.backend._convert import get_namespace
from gpnum.backend._scatter import scatter_add
from gpnum.errors import ShapeError, describe_shape

__all__ = ["SparseRows"]


class SparseRows:
    """``W`` (n, m) with ``W[i, indices[i, a]] += weights[i, a]``: products ``W Y`` and
    ``W^T X`` in ``O(n p k)`` for ``k`` columns.

    On NumPy ``W`` is kept in compressed sparse row form (scipy.sparse, built once: ``O(n p)``),
    whose products with ``W`` and ``W^T`` run in compiled loops without the ``(n, p, k)``
    temporary of a gather; on other namespaces ``W Y`` gathers rows of ``Y`` and ``W^T X`` sums them back
    by :func:`gpnum.backend.scatter_add`.

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
        self._csr = self._transpose = None
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

    def matmul(self, Y):
        """``W Y`` for ``Y`` (m, k): (n, k)."""
        xp = self.xp
        if self._csr is not None:
            return xp.asarray(self._csr @ Y, dtype=Y.dtype)
        n, p = self.indices.shape
        G = xp.reshape(xp.take(Y, self._flat, axis=0), (n, p, Y.shape[1]))
        return xp.sum(G * self.weights[:, :, None], axis=1)

    def rmatmul(self, X):
        """``W^T X`` for ``X`` (n, k): (m, k)."""
        xp = self.xp
        if self._transpose is not None:
            return xp.asarray(self._transpose @ X, dtype=X.dtype)
        n, p = self.indices.shape
        values = xp.reshape(self.weights[:, :, None] * X[:, None, :], (n * p, X.shape[1]))
        return scatter_add(self._flat, values, self.shape[1])

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
