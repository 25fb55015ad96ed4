"""Structured kernel interpolation: ``K ~= W K_UU W^T`` with sparse interpolation weights ``W``
(Wilson & Nickisch 2015, "Kernel interpolation for scalable structured Gaussian processes
(KISS-GP)"), local cubic convolution weights (Keys 1981, "Cubic convolution interpolation for
digital image processing"), 4^d nonzeros a row kept as index and value arrays."""

from __future__ import annotations

from gpnum.backend import SparseRows, device_of, get_namespace, is_array, scatter_add
from gpnum.errors import ShapeError, describe_shape
from gpnum.linalg._kronecker import Kronecker
from gpnum.linalg._operators import LinearOperator, aslinearoperator
from gpnum.linalg._toeplitz import Toeplitz

__all__ = ["Interpolated", "cubic_interpolation_weights", "grid_points"]

# Keys (1981)'s free parameter a = -1/2: the choice whose interpolant is third-order accurate.
_KEYS_A = -0.5


def _keys_kernel(xp, s):
    """Keys' cubic convolution kernel at distances ``s`` (|s| <= 2)."""
    a = _KEYS_A
    t = xp.abs(s)
    near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    far = ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
    return xp.where(t <= 1.0, near, xp.where(t < 2.0, far, xp.zeros_like(t)))


def cubic_interpolation_weights(X, lower, spacing, sizes):
    """Cubic convolution weights of points ``X`` on a regular grid (Keys 1981).

    Parameters
    ----------
    X : array (n, d)
    lower : sequence of d floats
        The first grid coordinate of each dimension.
    spacing : sequence of d floats
        Grid spacing ``h_l > 0`` of each dimension.
    sizes : sequence of d ints
        Grid points per dimension, each >= 4; grid point ``j`` of dimension ``l`` lies at
        ``lower_l + j h_l``. Every point must lie in ``[lower_l + h_l, lower_l + (sizes_l - 2)
        h_l]`` so that its four neighbours exist.

    Returns
    -------
    indices : integer array (n, 4^d)
        Row-major flat grid indices of each point's stencil.
    weights : array (n, 4^d)
        Their weights (each row sums to 1; reproduces polynomials up to degree 2).
    """
    xp = get_namespace(X)
    if X.ndim != 2 or not (len(lower) == len(spacing) == len(sizes) == X.shape[1]):
        raise ShapeError(f"X: expected shape (n, {len(sizes)}) to match the grid's dimensions, "
                         f"got {describe_shape(X.shape)}")
    if any(int(s) < 4 for s in sizes):
        raise ValueError(f"sizes: cubic interpolation needs at least 4 grid points per "
                         f"dimension, got {list(sizes)}")
    device = device_of(X)
    n = X.shape[0]
    offsets = xp.arange(4, device=device)
    idx, wts = None, None
    for axis in range(X.shape[1]):
        size = int(sizes[axis])
        u = (X[:, axis] - float(lower[axis])) / float(spacing[axis])
        slack = 64.0 * float(xp.finfo(X.dtype).eps) * size       # rounding of u itself
        if bool(xp.any(u < 1.0 - slack)) or bool(xp.any(u > size - 2.0 + slack)):
            raise ValueError(f"X: column {axis} reaches outside the interpolation grid's interior "
                             f"[{lower[axis] + spacing[axis]}, "
                             f"{lower[axis] + (size - 2) * spacing[axis]}]")
        u = xp.clip(u, 1.0, size - 2.0)
        base = xp.clip(xp.astype(xp.floor(u), xp.int64) - 1, 0, size - 4)       # (n,)
        node = base[:, None] + offsets[None, :]                                 # (n, 4)
        w = _keys_kernel(xp, u[:, None] - xp.astype(node, X.dtype))
        if idx is None:
            idx, wts = node, w
        else:
            idx = xp.reshape(idx[:, :, None] * size + node[:, None, :], (n, -1))
            wts = xp.reshape(wts[:, :, None] * w[:, None, :], (n, -1))
    return idx, wts


def _translation_invariant_shape(op):
    """The grid shape over which ``op[a + s, b + s] = op[a, b]`` for every multi-index shift
    ``s`` that stays on the grid (multi-level Toeplitz, and Kronecker products of such), or
    None."""
    if isinstance(op, Toeplitz):
        return op.grid_shape
    if isinstance(op, Kronecker) and op.row_sizes == op.col_sizes:
        shapes = [_translation_invariant_shape(f) for f in op.factors]
        if all(sh is not None for sh in shapes):
            return tuple(s for sh in shapes for s in sh)
    return None


class Interpolated(LinearOperator):
    """``W K_UU W^T`` for sparse rows ``W`` (n, m) given by indices and weights.

    Products with ``W`` and ``W^T`` cost ``O(n p k)`` for ``k`` columns
    (:class:`gpnum.backend.SparseRows`: compressed sparse rows on NumPy, a gather and
    :func:`gpnum.backend.scatter_add` elsewhere), plus one product with ``K_UU`` (a
    :class:`gpnum.linalg.Toeplitz` or :class:`gpnum.linalg.Kronecker` on a grid: nearly
    linear).

    Parameters
    ----------
    indices : integer array (n, p)
        Columns of ``W``'s nonzeros in ``[0, m)`` (e.g. :func:`cubic_interpolation_weights`).
    weights : array (n, p)
        Their values, in ``K_UU``'s dtype.
    K_UU : LinearOperator or array (m, m)
    rows : gpnum.backend.SparseRows, optional
        ``W`` built beforehand from these ``indices`` and ``weights`` (kept by callers whose
        ``W`` outlives ``K_UU``, e.g. across training steps with fixed inputs).

    Notes
    -----
    ``param_vjp(U, V)`` keys: ``{"K_UU": K_UU.param_vjp(W^T U, W^T V), "weights": g}`` with
    ``g[i, a] = U[i] . (K_UU W^T V)[idx_ia] + V[i] . (K_UU^T W^T U)[idx_ia]`` (n, p).

    The diagonal ``sum_ab w_ia w_ib K_UU[idx_ia, idx_ib]`` costs ``O(n p^2)``; when ``K_UU`` is
    translation invariant on its grid (Toeplitz, Kronecker products of Toeplitz factors) and
    every row's stencil is one shape shifted (cubic interpolation), the ``p x p`` block
    ``C = K_UU[stencil, stencil]`` is the same for every row and the diagonal is
    ``rowsum((w C) * w)``, without reading ``n p^2`` entries.
    """

    fresh_products = True

    def __init__(self, indices, weights, K_UU, rows=None):
        K_UU = aslinearoperator(K_UU)
        K_UU._require_square("Interpolated K_UU")
        xp = K_UU.xp
        if not is_array(indices) or get_namespace(indices) is not xp \
                or not xp.isdtype(indices.dtype, "integral"):
            raise TypeError(f"indices: expected an integer array of namespace {xp.__name__}")
        if not is_array(weights) or get_namespace(weights) is not xp:
            raise TypeError(f"weights: expected an array of namespace {xp.__name__}")
        if indices.ndim != 2 or tuple(weights.shape) != tuple(indices.shape):
            raise ShapeError(f"weights: expected shape {describe_shape(indices.shape)} "
                             f"(indices' (n, p)), got {describe_shape(weights.shape)}")
        if weights.dtype != K_UU.dtype:
            raise TypeError(f"weights: expected dtype {K_UU.dtype} (K_UU's), got {weights.dtype}")
        n = indices.shape[0]
        m = K_UU.shape[0]
        if n and (int(xp.min(indices)) < 0 or int(xp.max(indices)) >= m):
            raise ShapeError(f"indices: expected columns in [0, {m}) (K_UU's size)")
        super().__init__((n, n), K_UU.dtype, K_UU.device, xp)
        self.indices = indices
        self.weights = weights
        self.K_UU = K_UU
        self.symmetric = K_UU.symmetric
        self._flat = xp.reshape(indices, (-1,))
        if rows is not None and (rows.indices is not indices or rows.weights is not weights
                                 or rows.shape != (n, m)):
            raise ValueError("rows: expected the SparseRows of these indices and weights")
        self.W = SparseRows(indices, weights, m) if rows is None else rows

    def interpolate(self, Y):
        """``W Y`` for ``Y`` (m, k): (n, k)."""
        return self.W.matmul(Y)

    def interpolate_transpose(self, X):
        """``W^T X`` for ``X`` (n, k): (m, k)."""
        return self.W.rmatmul(X)

    def _matmat(self, X):
        return self.interpolate(self.K_UU._matmat(self.interpolate_transpose(X)))

    def _rmatmat(self, X):
        return self.interpolate(self.K_UU._rmatmat(self.interpolate_transpose(X)))

    def _shared_stencil(self):
        """Whether ``K_UU[idx_ia, idx_ib]`` is the same for every row ``i`` (class notes)."""
        shape = _translation_invariant_shape(self.K_UU)
        return shape is not None and self.W.rows_are_shifts(shape)

    def _diagonal(self):
        # kept: the operator is immutable, and pivoted Cholesky and the solvers each ask
        if getattr(self, "_diag", None) is None:
            self._diag = self._compute_diagonal()
        return self._diag

    def _compute_diagonal(self):
        xp = self.xp
        n, p = self.indices.shape
        entries = getattr(self.K_UU, "entries", None)
        if entries is None:
            return super()._diagonal()
        if self._shared_stencil():
            first = self.indices[0, :]
            rows = xp.reshape(xp.broadcast_to(first[:, None], (p, p)), (-1,))
            cols = xp.reshape(xp.broadcast_to(first[None, :], (p, p)), (-1,))
            C = xp.reshape(entries(rows, cols), (p, p))
            return xp.sum((self.weights @ C) * self.weights, axis=1)
        # sum_{a, b} w_ia w_ib K_UU[idx_ia, idx_ib]
        rows = xp.reshape(xp.broadcast_to(self.indices[:, :, None], (n, p, p)), (-1,))
        cols = xp.reshape(xp.broadcast_to(self.indices[:, None, :], (n, p, p)), (-1,))
        K = xp.reshape(entries(rows, cols), (n, p, p))
        return xp.sum(self.weights[:, :, None] * K * self.weights[:, None, :], axis=(1, 2))

    def columns(self, indices):
        """``W K_UU (W^T e_j)`` for the chosen rows ``j``: ``W^T e_j`` has the ``p`` weights of
        row ``j``, so a column costs one ``K_UU`` product and one ``W`` product."""
        xp = self.xp
        idx = self._check_indices(indices)
        r = idx.shape[0]
        p = self.indices.shape[1]
        targets = xp.reshape(xp.take(self.indices, idx, axis=0), (-1,))           # (r p,)
        w = xp.take(self.weights, idx, axis=0)                                    # (r, p)
        eye = xp.eye(r, dtype=self.dtype, device=self.device)
        values = xp.reshape(w[:, :, None] * eye[:, None, :], (r * p, r))
        B = scatter_add(targets, values, self.K_UU.shape[0])                      # W^T E
        return self.interpolate(self.K_UU._matmat(B))

    def to_dense(self):
        xp = self.xp
        m = self.K_UU.shape[0]
        eye = xp.eye(m, dtype=self.dtype, device=self.device)
        Wd = self.interpolate(eye)                                  # (n, m)
        return Wd @ self.K_UU._matmat(Wd.T)

    def _param_vjp(self, U, V):
        xp = self.xp
        n, p = self.indices.shape
        WtU = self.interpolate_transpose(U)
        WtV = self.interpolate_transpose(V)
        KV = xp.reshape(xp.take(self.K_UU._matmat(WtV), self._flat, axis=0), (n, p, -1))
        KtU = xp.reshape(xp.take(self.K_UU._rmatmat(WtU), self._flat, axis=0), (n, p, -1))
        g = xp.sum(U[:, None, :] * KV, axis=2) + xp.sum(V[:, None, :] * KtU, axis=2)
        return {"K_UU": self.K_UU._param_vjp(WtU, WtV), "weights": g}


def grid_points(lower, spacing, sizes, xp, dtype, device):
    """The points of a regular grid, shape (prod sizes, d), row-major (last dimension fastest)."""
    axes = [float(lo) + float(h) * xp.arange(int(s), dtype=dtype, device=device)
            for lo, h, s in zip(lower, spacing, sizes, strict=False)]
    mesh = xp.meshgrid(*axes, indexing="ij")
    return xp.stack([xp.reshape(g, (-1,)) for g in mesh], axis=1) if axes else None

