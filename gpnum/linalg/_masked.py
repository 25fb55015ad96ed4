"""The rows and columns of an operator at a subset of indices: the observed cells of a grid.

``K_oo = P K P^T`` with ``P`` the (n_o, n) selection of the observed cells: products embed the
vector into the full grid with zeros at the missing cells, multiply by the structured ``K`` and
keep the observed rows, so an incomplete grid keeps the full grid's fast products and stays
exact (Wilson et al. 2014, "Fast kernel learning for multidimensional pattern extrapolation",
section 4: there by an imaginary-noise trick; here by conjugate gradients on ``K_oo`` itself).
"""

from __future__ import annotations

from gpnum.backend import get_namespace, is_array
from gpnum.errors import ShapeError
from gpnum.linalg._operators import LinearOperator, aslinearoperator

__all__ = ["Masked"]


class Masked(LinearOperator):
    """``K[indices][:, indices]`` of a square operator ``K`` (n, n), never formed.

    Parameters
    ----------
    operator : LinearOperator (n, n)
    indices : integer array (n_o,)
        Distinct positions in ``[0, n)`` (e.g. the observed cells of a grid, row-major), in the
        order of the result's rows.

    Notes
    -----
    ``param_vjp(U, V)`` is ``operator.param_vjp(P^T U, P^T V)``: the operator's own keys.
    """

    fresh_products = True

    def __init__(self, operator, indices):
        operator = aslinearoperator(operator)
        operator._require_square("Masked operator")
        xp = operator.xp
        if not is_array(indices) or get_namespace(indices) is not xp or indices.ndim != 1 \
                or not xp.isdtype(indices.dtype, "integral"):
            raise TypeError(f"indices: expected a one-dimensional integer array of namespace "
                            f"{xp.__name__}")
        n = operator.shape[0]
        n_o = indices.shape[0]
        if n_o < 1:
            raise ShapeError("indices: expected at least one index, got none")
        order = xp.argsort(indices)
        sorted_idx = xp.take(indices, order)
        if int(sorted_idx[0]) < 0 or int(sorted_idx[-1]) >= n:
            raise ShapeError(f"indices: expected positions in [0, {n}), got "
                             f"[{int(sorted_idx[0])}, {int(sorted_idx[-1])}]")
        if n_o > 1 and bool(xp.any(sorted_idx[1:] == sorted_idx[:-1])):
            raise ValueError("indices: expected distinct positions, got repeats")
        # full position -> its row in the result, or n_o (a zero row) where not selected
        cells = xp.arange(n, dtype=indices.dtype, device=operator.device)
        pos = xp.clip(xp.searchsorted(sorted_idx, cells), 0, n_o - 1)
        found = xp.take(sorted_idx, pos) == cells
        self._embed_index = xp.where(found, xp.take(order, pos),
                                     xp.full_like(pos, n_o))
        super().__init__((n_o, n_o), operator.dtype, operator.device, xp)
        self.operator = operator
        self.indices = indices
        self.symmetric = operator.symmetric

    def embed(self, X):
        """``P^T X``: rows of ``X`` (n_o, k) at their cells of the full (n, k), zeros elsewhere."""
        xp = self.xp
        padded = xp.concat([X, xp.zeros((1, X.shape[1]), dtype=X.dtype, device=self.device)],
                           axis=0)
        return xp.take(padded, self._embed_index, axis=0)

    def _matmat(self, X):
        return self.xp.take(self.operator._matmat(self.embed(X)), self.indices, axis=0)

    def _rmatmat(self, X):
        return self.xp.take(self.operator._rmatmat(self.embed(X)), self.indices, axis=0)

    def _diagonal(self):
        return self.xp.take(self.operator._diagonal(), self.indices)

    def to_dense(self):
        xp = self.xp
        if hasattr(self.operator, "entries"):
            n = self.shape[0]
            rows = xp.reshape(xp.broadcast_to(self.indices[:, None], (n, n)), (-1,))
            cols = xp.reshape(xp.broadcast_to(self.indices[None, :], (n, n)), (-1,))
            return xp.reshape(self.operator.entries(rows, cols), (n, n))
        return super().to_dense()

    def entries(self, rows, cols):
        """``K_oo[rows[i], cols[i]]`` (needs the operator's ``entries``)."""
        xp = self.xp
        return self.operator.entries(xp.take(self.indices, rows), xp.take(self.indices, cols))

    def columns(self, indices):
        idx = self._check_indices(indices)
        full = self.operator.columns(self.xp.take(self.indices, idx))
        return self.xp.take(full, self.indices, axis=0)

    def _param_vjp(self, U, V):
        return self.operator._param_vjp(self.embed(U), self.embed(V))

