"""The linear-operator protocol and the structured operators built on it.

A :class:`LinearOperator` is a two-dimensional matrix known through its products. Solvers only
need ``op @ X``; everything else (``diagonal``, ``to_dense``, ``columns``) has a generic fallback
through products and a fast path where the structure allows one. Batching goes through the
columns of the right-hand side.

The gradient seam is :meth:`LinearOperator.param_vjp`: the gradient, w.r.t. the operator's
parameters, of ``sum_i u_i^T K v_i`` for the columns of ``U`` and ``V``. Every matrix-function
backward pass (inverse quadratic forms, log-determinants, contour integral quadrature) reduces to
it (the convention of docs/linalg.md).
"""

from __future__ import annotations

from gpnum.backend import asarray, column_dots, device_of, get_namespace, is_array, row_dots
from gpnum.errors import ShapeError, describe_shape

__all__ = [
    "LinearOperator",
    "Dense",
    "Diagonal",
    "AddedDiag",
    "LowRank",
    "Sum",
    "Scaled",
    "Transposed",
    "aslinearoperator",
]

# Rows of the identity materialised at once by the generic ``diagonal``/``to_dense`` fallbacks.
_PROBE_BLOCK = 256


def transpose_copy(xp, X):
    """``X^T`` of a 2-d array as a new row-major array (a flat reshape forces the copy)."""
    return xp.reshape(xp.reshape(X.T, (-1,)), (X.shape[1], X.shape[0]))


class LinearOperator:
    """A two-dimensional matrix known through its products with blocks of vectors.

    Subclasses call ``super().__init__(shape, dtype, device, xp)`` and implement
    :meth:`_matmat` (and :meth:`_rmatmat` unless symmetric). The generic methods below fall
    back on products; subclasses override them where their structure is cheaper.

    Attributes
    ----------
    shape : tuple (n_rows, n_cols)
    dtype : the floating dtype of the products
    device : the device of the products
    xp : the array namespace
    symmetric : bool
        Whether ``K == K^T`` (then ``op.T`` is ``op`` itself).
    """

    symmetric = False
    #: Whether ``_matmat`` always returns a new array that shares memory with nothing (solvers
    #: may then update it in place). True for every operator defined here; False by default.
    fresh_products = False

    def __init__(self, shape, dtype, device, xp):
        if len(shape) != 2:
            raise ShapeError(f"shape: expected two dimensions (n_rows, n_cols), got "
                             f"{describe_shape(shape)}")
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = dtype
        self.device = device
        self.xp = xp

    ndim = 2

    # --- products ------------------------------------------------------------------------

    def _matmat(self, X):
        """``K @ X`` for ``X`` of shape (n_cols, k); returns (n_rows, k)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _matmat")

    def _matmat_dots(self, X):
        """``(K X, sum(X * (K X), axis=0))`` for a square operator: a CG step's product and
        its curvatures ``p^T K p``, which an operator may compute in one pass."""
        KX = self._matmat(X)
        return KX, column_dots(X, KX)

    def _rmatmat(self, X):
        """``K^T @ X`` for ``X`` of shape (n_rows, k); returns (n_cols, k)."""
        if self.symmetric:
            return self._matmat(X)
        raise NotImplementedError(f"{type(self).__name__} does not define _rmatmat")

    def _check_rhs(self, X, n, name="X"):
        if not is_array(X):
            raise TypeError(f"{name}: expected an array, got {type(X).__name__}")
        if get_namespace(X) is not self.xp:
            raise TypeError(f"{name}: expected an array of the operator's namespace "
                            f"{self.xp.__name__}, got {type(X).__module__}.{type(X).__name__}; "
                            "convert it with gpnum.backend.asarray(x, like=...)")
        if X.ndim not in (1, 2) or X.shape[0] != n:
            raise ShapeError(f"{name}: expected shape ({n},) or ({n}, k), got "
                             f"{describe_shape(X.shape)}")
        if X.dtype != self.dtype:
            raise TypeError(f"{name}: expected dtype {self.dtype} (the operator's), got {X.dtype}")

    def __matmul__(self, X):
        """``K @ X`` for ``X`` of shape (n_cols,) or (n_cols, k)."""
        if isinstance(X, LinearOperator):
            return NotImplemented
        self._check_rhs(X, self.shape[1])
        if X.ndim == 1:
            return self._matmat(X[:, None])[:, 0]
        return self._matmat(X)

    def rmatmat(self, X):
        """``K^T @ X`` for ``X`` of shape (n_rows,) or (n_rows, k)."""
        self._check_rhs(X, self.shape[0])
        if X.ndim == 1:
            return self._rmatmat(X[:, None])[:, 0]
        return self._rmatmat(X)

    @property
    def T(self):
        """The transpose (``self`` for symmetric operators)."""
        return self if self.symmetric else Transposed(self)

    # --- structure -----------------------------------------------------------------------

    def _eye_block(self, start, stop, n):
        """Columns ``start:stop`` of the (n, n) identity."""
        xp = self.xp
        rows = xp.arange(n, device=self.device)[:, None]
        cols = xp.arange(start, stop, device=self.device)[None, :]
        return xp.astype(rows == cols, self.dtype)

    def _require_square(self, what):
        if self.shape[0] != self.shape[1]:
            raise ShapeError(f"{what}: expected a square operator, got shape "
                             f"{describe_shape(self.shape)}")

    def diagonal_scale(self):
        """``d`` (n,) or 0-d when the operator is the diagonal matrix ``diag(d)`` (``d I``
        for 0-d), else None: a solver then applies it by scaling rows within its own passes
        over memory instead of calling its product."""
        return None

    def diagonal(self):
        """The main diagonal, shape (n,), of a square operator."""
        self._require_square("diagonal")
        return self._diagonal()

    def _diagonal(self):
        # Generic fallback: blocks of identity columns, O(n^2) work but O(n * block) memory.
        xp = self.xp
        n = self.shape[0]
        parts = []
        for start in range(0, n, _PROBE_BLOCK):
            stop = min(n, start + _PROBE_BLOCK)
            E = self._eye_block(start, stop, n)
            parts.append(xp.sum(E * self._matmat(E), axis=0))
        return xp.concat(parts)

    def to_dense(self):
        """The whole matrix as an array of shape ``shape`` (O(n^2) memory)."""
        xp = self.xp
        n = self.shape[1]
        parts = [self._matmat(self._eye_block(s, min(n, s + _PROBE_BLOCK), n))
                 for s in range(0, n, _PROBE_BLOCK)]
        return xp.concat(parts, axis=1)

    def columns(self, indices):
        """Columns ``K[:, indices]``, shape (n_rows, r), for an integer array ``indices`` (r,).

        Used by pivoted Cholesky; the default takes products with one-hot vectors.
        """
        xp = self.xp
        idx = self._check_indices(indices)
        onehot = xp.astype(xp.arange(self.shape[1], device=self.device)[:, None] == idx[None, :],
                           self.dtype)
        return self._matmat(onehot)

    def _columns_from_entries(self, indices):
        """``columns`` for operators with an elementwise ``entries(rows, cols)`` (structured
        operators whose entries cost O(1) each): every row of the chosen columns at once."""
        xp = self.xp
        idx = self._check_indices(indices)
        n, r = self.shape[0], idx.shape[0]
        rows = xp.reshape(xp.broadcast_to(xp.arange(n, device=self.device)[:, None], (n, r)),
                          (-1,))
        cols = xp.reshape(xp.broadcast_to(idx[None, :], (n, r)), (-1,))
        return xp.reshape(self.entries(rows, cols), (n, r))

    def _check_indices(self, indices):
        xp = self.xp
        if not is_array(indices) or get_namespace(indices) is not xp or indices.ndim != 1:
            raise TypeError(f"indices: expected a one-dimensional integer array of namespace "
                            f"{xp.__name__}, got {type(indices).__name__}")
        if not xp.isdtype(indices.dtype, "integral"):
            raise TypeError(f"indices: expected an integer dtype, got {indices.dtype}")
        return indices

    def _spectrum_floor(self) -> float:
        """A lower bound on the smallest eigenvalue, assuming the PSD parts are PSD (default 0)."""
        return 0.0

    # --- gradients -----------------------------------------------------------------------

    def param_vjp(self, U, V) -> dict:
        """Gradient of ``sum_i u_i^T K v_i`` w.r.t. the operator's parameters.

        Parameters
        ----------
        U : array (n_rows, k) or (n_rows,)
        V : array (n_cols, k) or (n_cols,)

        Returns
        -------
        dict
            Keyed by parameter name; each subclass documents its keys.
        """
        U2, V2 = self._check_uv(U, V)
        return self._param_vjp(U2, V2)

    def _check_uv(self, U, V):
        self._check_rhs(U, self.shape[0], "U")
        self._check_rhs(V, self.shape[1], "V")
        U2 = U[:, None] if U.ndim == 1 else U
        V2 = V[:, None] if V.ndim == 1 else V
        if U2.shape[1] != V2.shape[1]:
            raise ShapeError(f"V: expected shape ({self.shape[1]}, {U2.shape[1]}) to match U's "
                             f"{U2.shape[1]} columns, got {describe_shape(V.shape)}")
        return U2, V2

    def _param_vjp(self, U, V) -> dict:
        raise TypeError(f"{type(self).__name__} has no parameters to differentiate")

    # --- algebra -------------------------------------------------------------------------

    def __add__(self, other):
        if isinstance(other, Diagonal) and not isinstance(self, Diagonal):
            return AddedDiag(self, other)
        if isinstance(other, LinearOperator):
            return Sum(self, other)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, LinearOperator):
            return Sum(other, self)
        return NotImplemented

    def __mul__(self, scale):
        if isinstance(scale, (int, float)) and not isinstance(scale, bool):
            return Scaled(self, float(scale))
        if is_array(scale) and scale.ndim == 0:
            return Scaled(self, scale)
        return NotImplemented

    __rmul__ = __mul__

    def __neg__(self):
        return Scaled(self, -1.0)

    def __repr__(self):
        return (f"<{type(self).__name__} {self.shape[0]}x{self.shape[1]} {self.dtype} "
                f"on {self.xp.__name__}>")


def _as_2d_array(A, name):
    if not is_array(A):
        raise TypeError(f"{name}: expected an array, got {type(A).__name__}")
    xp = get_namespace(A)
    if not xp.isdtype(A.dtype, "real floating"):
        raise TypeError(f"{name}: expected a real floating dtype, got {A.dtype}")
    return xp


class Dense(LinearOperator):
    """A matrix held as an array.

    Parameters
    ----------
    A : array (n_rows, n_cols)
    symmetric : bool
        Declare ``A == A^T`` (not checked); then ``.T`` is the operator itself.

    Notes
    -----
    ``param_vjp`` keys: ``{"A": U V^T}`` (the gradient w.r.t. every entry of ``A``; for a
    symmetric parameterisation symmetrise it).
    """

    fresh_products = True

    def __init__(self, A, *, symmetric: bool = False):
        xp = _as_2d_array(A, "A")
        if A.ndim != 2:
            raise ShapeError(f"A: expected a matrix of shape (n, m), got {describe_shape(A.shape)}")
        if symmetric and A.shape[0] != A.shape[1]:
            raise ShapeError(f"A: symmetric=True needs a square matrix, got "
                             f"{describe_shape(A.shape)}")
        super().__init__(A.shape, A.dtype, device_of(A), xp)
        self.A = A
        self.symmetric = bool(symmetric)

    def _matmat(self, X):
        if self.symmetric and X.shape[1] > 1:
            return self._rmatmat(X)
        return self.A @ X

    def _rmatmat(self, X):
        # A^T X as (X^T A)^T: OpenBLAS multiplies a row-major (n, n) matrix by a few columns
        # about 2x faster this way (n = 10,000, 11 columns: docs/benchmarks.md)
        if X.shape[1] > 1:
            return (transpose_copy(self.xp, X) @ self.A).T
        return self.A.T @ X

    def _diagonal(self):
        return self.xp.linalg.diagonal(self.A)

    def to_dense(self):
        return self.A

    def columns(self, indices):
        return self.xp.take(self.A, self._check_indices(indices), axis=1)

    def _param_vjp(self, U, V):
        return {"A": U @ V.T}


class Diagonal(LinearOperator):
    """A diagonal matrix ``diag(d)``, or a constant diagonal ``c I``.

    Parameters
    ----------
    diag : array (n,), or a 0-d array for the constant diagonal ``c I`` (then ``n`` is required)
    n : int, optional
        Size, for a constant diagonal.

    Notes
    -----
    ``param_vjp`` keys: ``{"diag": sum(U * V, axis=1)}`` of shape (n,), or its total (0-d) for
    a constant diagonal.
    """

    fresh_products = True

    symmetric = True

    def __init__(self, diag, n=None):
        if isinstance(diag, (int, float)) and not isinstance(diag, bool):
            diag = asarray(float(diag))  # a constant c I in the default namespace
        xp = _as_2d_array(diag, "diag")
        if diag.ndim == 1:
            if n is not None and int(n) != diag.shape[0]:
                raise ShapeError(f"diag: expected shape ({int(n)},), got "
                                 f"{describe_shape(diag.shape)}")
            n = diag.shape[0]
        elif diag.ndim == 0:
            if n is None:
                raise ShapeError("n: a constant (0-d) diagonal needs the size n, got None")
            n = int(n)
        else:
            raise ShapeError(f"diag: expected shape (n,) or (), got {describe_shape(diag.shape)}")
        if n < 1:
            raise ShapeError(f"n: expected a size >= 1, got {n}")
        super().__init__((n, n), diag.dtype, device_of(diag), xp)
        self.diag = diag

    @property
    def is_constant(self) -> bool:
        """Whether the diagonal is a single value times the identity."""
        return self.diag.ndim == 0

    def _scale_rows(self, X):
        return X * (self.diag if self.is_constant else self.diag[:, None])

    def diagonal_scale(self):
        return self.diag

    def _matmat(self, X):
        return self._scale_rows(X)


    def _diagonal(self):
        xp = self.xp
        if self.is_constant:
            return xp.full((self.shape[0],), 1.0, dtype=self.dtype, device=self.device) * self.diag
        return self.diag

    def to_dense(self):
        return self.xp.eye(self.shape[0], dtype=self.dtype, device=self.device) * self._diagonal()

    def columns(self, indices):
        idx = self._check_indices(indices)
        return self._eye_block_at(idx) * self.xp.take(self._diagonal(), idx)[None, :]

    def _eye_block_at(self, idx):
        xp = self.xp
        return xp.astype(xp.arange(self.shape[0], device=self.device)[:, None] == idx[None, :],
                         self.dtype)

    def _spectrum_floor(self) -> float:
        return float(self.xp.min(self.diag))

    def _param_vjp(self, U, V):
        xp = self.xp
        g = row_dots(U, V)
        return {"diag": xp.sum(g) if self.is_constant else g}

    def __add__(self, other):
        if isinstance(other, Diagonal):
            return Sum(self, other)
        if isinstance(other, LinearOperator):
            return AddedDiag(other, self)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, LinearOperator):
            return AddedDiag(other, self)
        return NotImplemented


class _Function(LinearOperator):
    """A symmetric operator given by a callable ``X (n, k) -> A X (n, k)`` (no parameters)."""

    symmetric = True

    def __init__(self, fn, n, dtype, device, xp):
        super().__init__((n, n), dtype, device, xp)
        self.fn = fn

    def _matmat(self, X):
        out = self.fn(X)
        if not is_array(out) or tuple(out.shape) != tuple(X.shape):
            got = describe_shape(out.shape) if is_array(out) else type(out).__name__
            raise ShapeError(f"A: the callable must map an (n, k) block to shape "
                             f"{describe_shape(X.shape)}, got {got}")
        return out

    def _param_vjp(self, U, V):
        raise TypeError("A: an operator given as a plain callable has no parameters; wrap the "
                        "matrix in a gpnum.linalg operator to differentiate through it")


def aslinearoperator(A, *, like=None):
    """``A`` as a :class:`LinearOperator`.

    Parameters
    ----------
    A : LinearOperator, array (n_rows, n_cols), or callable
        Arrays are wrapped in :class:`Dense`. A callable ``X (n, k) -> A X`` is taken as a
        symmetric (n, n) operator without parameters; it needs ``like``.
    like : array (n,) or (n, k), optional
        A right-hand side giving a callable's size, dtype, device and namespace.
    """
    if isinstance(A, LinearOperator):
        return A
    if is_array(A):
        return Dense(A)
    if callable(A):
        if like is None or not is_array(like):
            raise TypeError("A: a callable operator needs a right-hand side to give its size")
        return _Function(A, like.shape[0], like.dtype, device_of(like), get_namespace(like))
    raise TypeError(f"A: expected a LinearOperator, an array or a callable, got "
                    f"{type(A).__name__}")


# The operators built from others subclass LinearOperator, whose algebra (``+``, ``*``, ``.T``)
# returns them: imported last, once LinearOperator, Dense and Diagonal exist, so that both
# modules' names resolve and every operator stays importable from here.
from gpnum.linalg._composite import AddedDiag, LowRank, Scaled, Sum, Transposed  # noqa: E402
