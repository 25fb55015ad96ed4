"""Symmetric (multi-level) Toeplitz matrices with products by FFT through circulant embedding.

A stationary kernel on a regular grid of shape ``(n_1, ..., n_d)`` gives the matrix
``K[a, b] = c[|a_1 - b_1|, ..., |a_d - b_d|]`` over row-major multi-indices ``a, b``: Toeplitz
for d = 1, block Toeplitz with Toeplitz blocks for d > 1 (Wilson et al. 2014, "Fast kernel
learning for multidimensional pattern extrapolation", section 3; Saatci 2012, chapter 5). A
product embeds ``K`` in a d-level circulant of size ``prod_l m_l`` (``m_l >= 2 n_l - 2``, the
next size with prime factors 2, 3 and 5) and diagonalises
that by a d-dimensional FFT: ``O(m log m)`` for ``m`` grid cells, whatever the kernel.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace, is_array
from gpnum.errors import ShapeError, describe_shape
from gpnum.linalg._kronecker import _apply_along
from gpnum.linalg._operators import LinearOperator

__all__ = ["Toeplitz"]


def _fast_size(target):
    """The smallest ``2^a 3^b 5^c >= target``: sizes whose FFTs run fastest."""
    best = None
    p5 = 1
    while p5 < 2 * target:
        p35 = p5
        while p35 < 2 * target:
            size = p35
            while size < target:
                size *= 2
            best = size if best is None else min(best, size)
            p35 *= 3
        p5 *= 5
    return best


def _embedding(xp, c, axis):
    """A symmetric circulant's first column along ``axis`` that embeds the symmetric Toeplitz
    one ``c`` (length n): ``[c_0 .. c_{n-1}, 0 .. 0, c_{n-1} .. c_1]`` of a fast FFT length
    ``m >= 2 n - 2`` (any such m embeds it; with m = 2 n - 2 the two ``c_{n-1}`` coincide)."""
    n = c.shape[axis]
    if n <= 2:
        return c
    device = device_of(c)
    m = _fast_size(2 * n - 2)
    if m == 2 * n - 2:
        back = xp.take(c, xp.arange(n - 2, 0, -1, device=device), axis=axis)
        return xp.concat([c, back], axis=axis)
    back = xp.take(c, xp.arange(n - 1, 0, -1, device=device), axis=axis)
    shape = list(c.shape)
    shape[axis] = m - (2 * n - 1)
    zeros = xp.zeros(tuple(shape), dtype=c.dtype, device=device)
    return xp.concat([c, zeros, back], axis=axis)


#: Largest axis for which products go through dense one-dimensional factors (below).
_DENSE_FACTOR_MAX = 1024


def _line_toeplitz(xp, line):
    """The dense symmetric Toeplitz matrix of a one-dimensional first column."""
    n = line.shape[0]
    i = xp.arange(n, device=device_of(line))
    lags = xp.abs(i[:, None] - i[None, :])
    return xp.reshape(xp.take(line, xp.reshape(lags, (-1,))), (n, n))


def _dense_factors(xp, column):
    """Dense one-dimensional Toeplitz factors ``T_l`` with ``K = T_1 (x) ... (x) T_d`` when the
    column separates, ``c[j] = c_0^{1 - d} prod_l c_l[j_l]`` (``c_l`` the column along axis
    ``l``; any product of one-dimensional stationary kernels, e.g. RBF with ARD lengthscales)
    to within 64 rounding units of ``c_0``, and every axis has at most ``_DENSE_FACTOR_MAX``
    points: then a product costs ``O(m sum_l n_l)`` in matrix products, which beat the FFT's
    ``O(m log m)`` at these sizes by their constant. None otherwise."""
    d = column.ndim
    shape = tuple(column.shape)
    if any(s > _DENSE_FACTOR_MAX for s in shape):
        return None
    c0 = float(column[(0,) * d])
    if not c0 > 0.0:
        return None
    lines = [column[tuple(slice(None) if a == axis else 0 for a in range(d))]
             for axis in range(d)]
    if d > 1:
        sep = None
        for axis, line in enumerate(lines):
            view = [1] * d
            view[axis] = shape[axis]
            term = xp.reshape(line / c0, tuple(view))
            sep = term if sep is None else sep * term
        tol = 64.0 * float(xp.finfo(column.dtype).eps) * c0
        if float(xp.max(xp.abs(column - c0 * sep))) > tol:
            return None
    factors = [_line_toeplitz(xp, line / c0) for line in lines]
    factors[0] = factors[0] * c0
    return factors


class Toeplitz(LinearOperator):
    """Symmetric multi-level Toeplitz matrix ``K[a, b] = c[|a - b|]`` (componentwise lags).

    Parameters
    ----------
    column : array (n_1, ..., n_d)
        ``c``: for d = 1 the first column of a symmetric Toeplitz matrix; for a stationary
        kernel ``k`` on a grid with spacings ``h_l``, ``c[j] = k(j * h, 0)`` (the kernel must be
        even in each coordinate of the lag, as every isotropic or ARD kernel is). The operator
        has size ``n = prod n_l``.
    products : {"auto", "fft"}
        ``"fft"``: products always by FFT; ``"auto"`` (default): through dense factors where
        the column separates (Notes).

    Notes
    -----
    ``param_vjp(U, V)`` keys: ``{"column": g}`` with ``g`` of ``column``'s shape,
    ``g[j] = sum over the sign patterns s of r[s * j]`` (each distinct lag once) and
    ``r[t] = sum_i sum_b U[b + t, i] V[b, i]``, the cross-correlation, by FFT without wrap-around.
    Products and the vjp run in ``column``'s dtype (complex of its precision inside the FFT).
    When the column separates into a product over the axes (a product of one-dimensional
    stationary kernels, such as RBF with ARD lengthscales) and no axis is longer than 1,024,
    products go factor by factor through the dense one-dimensional Toeplitz factors instead
    (the Kronecker product they form, Saatci 2012, section 5.2.1): on a 100 x 100 grid an
    order of magnitude faster than the two-dimensional FFTs.
    """

    fresh_products = True
    symmetric = True

    def __init__(self, column, products="auto"):
        if products not in ("auto", "fft"):
            raise ValueError(f"products: expected 'auto' or 'fft', got {products!r}")
        if not is_array(column):
            raise TypeError(f"column: expected an array, got {type(column).__name__}")
        xp = get_namespace(column)
        if not xp.isdtype(column.dtype, "real floating"):
            raise TypeError(f"column: expected a real floating dtype, got {column.dtype}")
        if column.ndim < 1 or any(s < 1 for s in column.shape):
            raise ShapeError(f"column: expected a non-empty array of shape (n_1, ..., n_d), got "
                             f"{describe_shape(column.shape)}")
        self.grid_shape = tuple(int(s) for s in column.shape)
        n = math.prod(self.grid_shape)
        super().__init__((n, n), column.dtype, device_of(column), xp)
        self.column = column
        self._axes = tuple(range(column.ndim))
        emb = column
        for axis in self._axes:
            emb = _embedding(xp, emb, axis)
        self._embed_shape = tuple(emb.shape)
        # eigenvalues of the symmetric circulant embedding (real up to rounding)
        self._spectrum = xp.real(xp.fft.rfftn(emb, axes=self._axes))
        self._factors = _dense_factors(xp, column) if products == "auto" else None
        #: How products run: ``"dense"`` (one-dimensional factors) or ``"fft"``.
        self.products = "fft" if self._factors is None else "dense"

    def _to_grid(self, X):
        return self.xp.reshape(X, self.grid_shape + (X.shape[1],))

    def _crop(self, T):
        return T[tuple(slice(0, s) for s in self.grid_shape) + (slice(None),)]

    def _matmat(self, X):
        xp = self.xp
        if self._factors is not None:
            T = self._to_grid(X)
            for axis, A in enumerate(self._factors):
                T = _apply_along(xp, lambda B, A=A: A @ B, T, axis, A.shape[0])
            return xp.reshape(T, (self.shape[0], X.shape[1]))
        Xh = xp.fft.rfftn(self._to_grid(X), s=self._embed_shape, axes=self._axes)
        Y = xp.fft.irfftn(Xh * self._spectrum[..., None], s=self._embed_shape, axes=self._axes)
        Y = xp.reshape(self._crop(Y), (self.shape[0], X.shape[1]))
        return Y if Y.dtype == self.dtype else xp.astype(Y, self.dtype)

    @property
    def embedding_size(self):
        """Cells ``M = prod m_l`` of the circulant embedding."""
        return math.prod(self._embed_shape)

    def embedding_sqrt_matmul(self, E):
        """``S E`` with ``S S^T = K`` when the circulant embedding ``C`` is positive
        semi-definite: ``S`` is the rows of ``C^{1/2}`` (symmetric square root, by FFT) at the
        grid's cells, so that for standard normal ``E`` the columns are exact draws from
        ``N(0, K)`` in ``O(M log M)`` each (Dietrich & Newsam 1997, "Fast and exact simulation
        of stationary Gaussian processes through circulant embedding of the covariance matrix").

        Parameters
        ----------
        E : array (M, k)
            ``M = embedding_size``.

        Returns
        -------
        out : array (n, k)
        clipped : 0-d array
            Negative eigenvalues of ``C`` are set to zero (then ``S S^T = K + P (C_+ - C) P^T``
            instead of ``K``); their summed magnitude relative to the positive ones'. 0 when
            the embedding is positive semi-definite.
        """
        xp = self.xp
        lam = self._spectrum
        root = xp.sqrt(xp.where(lam > 0.0, lam, 0.0))
        T = xp.reshape(E, self._embed_shape + (E.shape[1],))
        Y = xp.fft.irfftn(xp.fft.rfftn(T, axes=self._axes) * root[..., None],
                          s=self._embed_shape, axes=self._axes)
        out = xp.reshape(self._crop(Y), (self.shape[0], E.shape[1]))
        out = out if out.dtype == self.dtype else xp.astype(out, self.dtype)
        negative = xp.sum(xp.where(lam < 0.0, -lam, 0.0))
        return out, negative / xp.sum(xp.where(lam > 0.0, lam, 0.0))

    def _diagonal(self):
        xp = self.xp
        c0 = xp.reshape(self.column, (-1,))[0]
        return xp.full((self.shape[0],), 1.0, dtype=self.dtype, device=self.device) * c0

    def _lags(self, rows, cols):
        """Flat indices into ``column`` of the entries ``(rows[i], cols[i])``."""
        xp = self.xp
        flat = None
        r, c = rows, cols
        stride = 1
        for size in reversed(self.grid_shape):
            lag = xp.abs(r % size - c % size)
            flat = lag * stride if flat is None else flat + lag * stride
            r, c = r // size, c // size
            stride *= size
        return flat

    def entries(self, rows, cols):
        """``K[rows[i], cols[i]]`` for integer arrays of one shape (r,)."""
        return self.xp.take(self.xp.reshape(self.column, (-1,)), self._lags(rows, cols))

    def to_dense(self):
        xp = self.xp
        n = self.shape[0]
        idx = xp.arange(n, device=self.device)
        rows = xp.reshape(xp.broadcast_to(idx[:, None], (n, n)), (-1,))
        cols = xp.reshape(xp.broadcast_to(idx[None, :], (n, n)), (-1,))
        return xp.reshape(self.entries(rows, cols), (n, n))

    def columns(self, indices):
        return self._columns_from_entries(indices)

    def _param_vjp(self, U, V):
        xp = self.xp
        full = tuple(_fast_size(2 * s - 1) for s in self.grid_shape)   # no wrap-around
        Uh = xp.fft.rfftn(self._to_grid(U), s=full, axes=self._axes)
        Vh = xp.fft.rfftn(self._to_grid(V), s=full, axes=self._axes)
        r = xp.fft.irfftn(xp.sum(Uh * xp.conj(Vh), axis=-1), s=full, axes=self._axes)
        # fold the lags t and -t of each axis onto |t| (lag 0 once)
        for axis, size in enumerate(self.grid_shape):
            lags = xp.arange(size, device=self.device)
            pos = xp.take(r, lags, axis=axis)
            neg = xp.take(r, (full[axis] - lags) % full[axis], axis=axis)
            shape = [1] * r.ndim
            shape[axis] = size
            keep = xp.reshape(lags > 0, tuple(shape))
            r = pos + xp.where(keep, neg, xp.zeros_like(neg))
        return {"column": r if r.dtype == self.dtype else xp.astype(r, self.dtype)}
