"""What a kernel's matrix looks like on a Cartesian grid: Toeplitz, Kronecker or neither.

- A stationary kernel on a regular grid gives a (multi-level) symmetric Toeplitz matrix
  (Wilson et al. 2014, "Fast kernel learning for multidimensional pattern extrapolation").
- A product kernel whose parts see separate input columns (``active_dims``) gives the Kronecker
  product of the parts' matrices on their sub-grids (Saatci 2012, chapter 5).
- Anything else: the kernel matrix itself (:class:`gpnum.linalg.KernelMatrix`).

The operators' ``param_vjp`` returns ``{"kernel": {name: grad}}`` named like
``kernel.parameters()``, as :class:`gpnum.linalg.KernelMatrix` does, so the conjugate-gradient
machinery of ``GPR`` takes them in place of the dense kernel matrix. Structured kernel
interpolation (Wilson & Nickisch 2015) puts such an operator on an inducing grid between
sparse interpolation weights (:func:`ski_operator`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gpnum.backend import SparseRows, device_of, get_namespace
from gpnum.errors import ShapeError, describe_shape
from gpnum.kernels._composite import Product, Sum
from gpnum.kernels._linear import Constant
from gpnum.kernels._periodic import Cosine, Periodic
from gpnum.kernels._spectral import SpectralMixture
from gpnum.kernels._stationary import Stationary
from gpnum.linalg import (
    Interpolated,
    KernelMatrix,
    Kronecker,
    Toeplitz,
    cubic_interpolation_weights,
)

__all__ = ["Grid", "SkiInterpolation", "grid_from_inputs", "grid_operator", "ski_grid",
           "ski_interpolation", "ski_operator"]

# Relative spread of a grid axis's steps below which the axis counts as regular.
_REGULAR_RTOL = 1e-6


@dataclass(frozen=True)
class Grid:
    """A Cartesian grid: one ascending coordinate array per input column.

    Attributes
    ----------
    axes : tuple of arrays (n_l,)
    shape : tuple of ints
        ``(n_1, ..., n_d)``; cells are numbered row-major (the last axis fastest).
    """

    axes: tuple

    @property
    def shape(self):
        return tuple(int(a.shape[0]) for a in self.axes)

    @property
    def size(self):
        return math.prod(self.shape)

    def spacing(self, axis):
        """The step of a regular axis, or None when its steps differ (or it has one point)."""
        xp = get_namespace(self.axes[axis])
        a = self.axes[axis]
        if a.shape[0] < 2:
            return None
        steps = a[1:] - a[:-1]
        h = float(xp.mean(steps))
        spread = float(xp.max(xp.abs(steps - h)))
        return h if spread <= _REGULAR_RTOL * abs(h) else None

    def points(self, dims=None, origin_lags=False):
        """Grid points over axes ``dims`` (default all), full width ``d`` (zeros in the other
        columns), row-major, shape (prod n_dims, d). ``origin_lags``: the lags ``j h`` from the
        first point instead (regular axes)."""
        d = len(self.axes)
        dims = tuple(range(d)) if dims is None else tuple(dims)
        ref = self.axes[0]
        xp = get_namespace(ref)
        cols = []
        for j in dims:
            a = self.axes[j]
            cols.append(a - a[0] if origin_lags else a)
        mesh = xp.meshgrid(*cols, indexing="ij") if len(cols) > 1 else [cols[0]]
        flat = [xp.reshape(m, (-1,)) for m in mesh]
        n = flat[0].shape[0]
        zero = xp.zeros((n,), dtype=ref.dtype, device=device_of(ref))
        return xp.stack([flat[dims.index(j)] if j in dims else zero for j in range(d)], axis=1)


def grid_from_inputs(X):
    """The smallest Cartesian grid holding every row of ``X`` and each row's cell.

    Parameters
    ----------
    X : array (n, d)

    Returns
    -------
    grid : Grid
        Axis ``l`` holds the distinct values of ``X[:, l]``, ascending.
    cells : integer array (n,)
        Row-major cell of each row.

    Raises
    ------
    ValueError
        When two rows share a cell (the grid solvers take one observation per cell).
    """
    xp = get_namespace(X)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ShapeError(f"X: expected shape (n, d) with n >= 1, got {describe_shape(X.shape)}")
    axes, cells = [], None
    for j in range(X.shape[1]):
        col = xp.asarray(X[:, j], copy=True)          # contiguous (torch's searchsorted)
        a = xp.sort(xp.unique_values(col))
        step = _lattice_step(a)
        if step is None:
            pos = xp.searchsorted(a, col)
        else:
            # the values lie on a regular lattice with gaps: fill it, so that the axis stays
            # regular (Toeplitz) when some of its values are unobserved
            size = round(float(a[-1] - a[0]) / step) + 1
            pos = xp.astype(xp.round((col - a[0]) / step), xp.int64)
            a = a[0] + step * xp.arange(size, dtype=a.dtype, device=device_of(a))
        axes.append(a)
        cells = pos if cells is None else cells * a.shape[0] + pos
    grid = Grid(tuple(axes))
    if int(xp.unique_values(cells).shape[0]) != X.shape[0]:
        raise ValueError(f"X: rows repeat a grid cell ({X.shape[0]} rows, "
                         f"{int(xp.unique_values(cells).shape[0])} distinct cells); the grid "
                         "solvers take at most one observation per cell")
    return grid, cells


def _lattice_step(a):
    """The step ``h`` when the ascending distinct values ``a`` are ``a_0 + h k`` for integers
    ``k`` (gaps allowed, at most 4 times as many lattice points as values), else None."""
    xp = get_namespace(a)
    if a.shape[0] < 2:
        return None
    steps = a[1:] - a[:-1]
    h = float(xp.min(steps))
    ratio = steps / h
    tol = 1e-6 if a.dtype == xp.float64 else 1e-3
    if float(xp.max(xp.abs(ratio - xp.round(ratio)))) > tol:
        return None
    span = float(a[-1] - a[0]) / h
    return h if span + 1.0 <= 4.0 * a.shape[0] else None


# ----------------------------------------------------------------------- structured operators
class KernelToeplitz(Toeplitz):
    """A stationary kernel's matrix on a regular grid: ``Toeplitz(k(lags, 0))``.

    ``param_vjp`` keys: ``{"kernel": {name: grad}}``, the gradient through the kernel values at
    the lags (``kernel.gram_vjp`` of the folded lag cotangent).
    """

    def __init__(self, kernel, lags, grid_shape, compute_dtype):
        xp = kernel.xp
        self.kernel = kernel
        self.lags = lags
        self.origin = xp.zeros((1, lags.shape[1]), dtype=lags.dtype, device=device_of(lags))
        column = kernel(lags, self.origin)[:, 0]
        super().__init__(xp.reshape(xp.astype(column, compute_dtype), grid_shape))

    def _param_vjp(self, U, V):
        xp = self.xp
        g = super()._param_vjp(U, V)["column"]
        G = xp.astype(xp.reshape(g, (-1, 1)), self.lags.dtype)
        return {"kernel": self.kernel.gram_vjp(G, self.lags, self.origin)["params"]}


class KernelKronecker(Kronecker):
    """A product kernel's matrix on a grid: the Kronecker product of its parts' matrices on
    their sub-grids (part ``i`` sees the axes of factor ``i``).

    ``param_vjp`` keys: ``{"kernel": {"i.<name>": grad}}`` (:class:`gpnum.kernels.Product`'s
    names).
    """

    def __init__(self, kernel, factors):
        super().__init__(*factors)
        self.kernel = kernel

    def kernel_grads(self, factor_grads):
        """Merge per-factor ``{"kernel": {...}}`` dicts into the product's parameter names."""
        out = {}
        for i, g in enumerate(factor_grads):
            out.update({f"{i}.{name}": v for name, v in g["kernel"].items()})
        return out

    def _param_vjp(self, U, V):
        return {"kernel": self.kernel_grads(super()._param_vjp(U, V)["factors"])}


class _KernelMatrixEntries(KernelMatrix):
    """A small kernel matrix (a Kronecker factor on an irregular axis) with ``entries``."""

    def entries(self, rows, cols):
        xp = self.xp
        K = self.to_dense()
        return xp.take(xp.reshape(K, (-1,)), rows * self.shape[1] + cols)

    def _param_vjp(self, U, V):
        return {"kernel": super()._param_vjp(U, V)["kernel"]}


def _is_stationary(kernel):
    """Whether ``k(x, x')`` depends on ``x - x'`` only (by class; sums and products of such)."""
    if kernel.depends_on_same_set:
        return False
    if isinstance(kernel, (Sum, Product)):
        return all(_is_stationary(k) for k in kernel.kernels)
    return isinstance(kernel, (Stationary, Constant, Periodic, Cosine, SpectralMixture))


def _axis_even(kernel, lags, dims):
    """Whether ``k(t, 0) == k(s * t, 0)`` for every sign pattern ``s`` over the grid's lags:
    the evenness in each coordinate that a symmetric multi-level Toeplitz matrix needs."""
    xp = kernel.xp
    if len(dims) < 2:
        return True
    origin = xp.zeros((1, lags.shape[1]), dtype=lags.dtype, device=device_of(lags))
    base = kernel(lags, origin)[:, 0]
    scale = float(xp.max(xp.abs(base)))
    tol = (1e-5 if lags.dtype == xp.float32 else 1e-10) * max(scale, 1e-300)
    for signs in itertools.product((1.0, -1.0), repeat=len(dims) - 1):
        flip = [1.0] * lags.shape[1]
        for j, s in zip(dims[1:], signs, strict=False):
            flip[j] = s
        if all(s == 1.0 for s in signs):
            continue
        f = xp.asarray(flip, dtype=lags.dtype, device=device_of(lags))
        other = kernel(lags * f[None, :], origin)[:, 0]
        if float(xp.max(xp.abs(other - base))) > tol:
            return False
    return True


def _product_groups(kernel, dims):
    """For a Product whose parts see disjoint, consecutive runs of ``dims`` (in order), the run
    of each part; None otherwise."""
    if not isinstance(kernel, Product) or kernel.active_dims is not None or len(dims) < 2:
        return None
    groups, seen = [], set()
    for k in kernel.kernels:
        ad = k.active_dims
        if ad is None or not set(ad) <= set(dims) or set(ad) & seen:
            return None
        seen |= set(ad)
        groups.append(tuple(sorted(ad)))
    if seen != set(dims):
        return None
    order = sorted(range(len(groups)), key=lambda i: dims.index(groups[i][0]))
    flat = [j for i in order for j in groups[i]]
    if order != list(range(len(groups))) or flat != list(dims):
        return None
    return groups


def grid_operator(kernel, grid, dims=None, compute_dtype=None):
    """The kernel's matrix on the grid's cells (row-major) as a structured operator.

    Parameters
    ----------
    kernel : gpnum.kernels.Kernel
    grid : Grid
        Its axes in the kernel's namespace and dtype, one per input column.
    dims : tuple of ints, optional
        The grid axes spanned (default all); the other input columns are 0.
    compute_dtype : dtype, optional
        Dtype of the products (default the kernel's); the kernel is evaluated in its own.

    Returns
    -------
    LinearOperator (prod n_dims, prod n_dims)
        :class:`KernelKronecker` for a product of parts over separate axes (each factor built
        by this function again), else ``KernelToeplitz`` for a stationary kernel even in each
        coordinate on regular axes, else the kernel matrix of the grid points. ``param_vjp``
        gives ``{"kernel": {name: grad}}``.
    """
    d = len(grid.axes)
    dims = tuple(range(d)) if dims is None else tuple(dims)
    compute_dtype = kernel.dtype if compute_dtype is None else compute_dtype
    groups = _product_groups(kernel, dims)
    if groups is not None:
        factors = [grid_operator(k, grid, g, compute_dtype)
                   for k, g in zip(kernel.kernels, groups, strict=False)]
        return KernelKronecker(kernel, factors)
    shape = tuple(grid.shape[j] for j in dims)
    if _is_stationary(kernel) and all(grid.shape[j] == 1 or grid.spacing(j) is not None
                                      for j in dims):
        lags = grid.points(dims, origin_lags=True)
        if _axis_even(kernel, lags, dims):
            return KernelToeplitz(kernel, lags, shape, compute_dtype)
    pts = grid.points(dims)
    n = pts.shape[0]
    return _KernelMatrixEntries(kernel, pts, block_size=max(1, min(n, 2 ** 20 // max(n, 1))),
                                compute_dtype=compute_dtype)


# ------------------------------------------------------------------ structured interpolation
def ski_grid(X, grid_size):
    """A regular interpolation grid covering ``X`` for cubic interpolation.

    ``grid_size`` points per column (an int, or one per column; each >= 4), spaced
    ``h = (max - min) / (grid_size - 3)`` from ``min - h``, so that every point has two grid
    points on each side (Keys 1981's stencil). Returns ``(grid, lower, spacing, sizes)``.
    """
    xp = get_namespace(X)
    d = X.shape[1]
    sizes = [int(grid_size)] * d if isinstance(grid_size, int) else [int(s) for s in grid_size]
    if len(sizes) != d or any(s < 4 for s in sizes):
        raise ValueError(f"grid_size: expected an integer >= 4 or {d} of them, got {grid_size!r}")
    lower, spacing, axes = [], [], []
    for j in range(d):
        lo, hi = float(xp.min(X[:, j])), float(xp.max(X[:, j]))
        h = (hi - lo) / (sizes[j] - 3) if hi > lo else 1.0
        lower.append(lo - h)
        spacing.append(h)
        axes.append((lo - h) + h * xp.arange(sizes[j], dtype=X.dtype, device=device_of(X)))
    return Grid(tuple(axes)), lower, spacing, sizes


class KernelInterpolated(Interpolated):
    """``W K_UU W^T`` with a kernel's grid operator as ``K_UU``; ``param_vjp`` keys
    ``{"kernel": {name: grad}}`` (the weights are fixed by the inputs)."""

    def _param_vjp(self, U, V):
        WtU = self.interpolate_transpose(U)
        WtV = self.interpolate_transpose(V)
        return {"kernel": self.K_UU._param_vjp(WtU, WtV)["kernel"]}


@dataclass(frozen=True)
class SkiInterpolation:
    """The interpolation part of SKI for fixed inputs: the grid and ``W`` (which do not depend
    on the kernel's parameters, so training steps build them once).

    Attributes
    ----------
    grid : Grid
    lower, spacing, sizes : lists of d numbers
        :func:`ski_grid`'s grid description (for :func:`gpnum.linalg.cubic_interpolation_weights`).
    indices : integer array (n, 4^d)
    weights : array (n, 4^d)
    rows : gpnum.backend.SparseRows
        ``W`` (n, prod sizes).
    """

    grid: Grid
    lower: list
    spacing: list
    sizes: list
    indices: object
    weights: object
    rows: object

    def contains(self, X):
        """Whether every row of ``X`` lies where the grid interpolates it (within two grid
        points of each edge's inside: the training inputs' range)."""
        xp = get_namespace(X)
        for axis, (lo, h, size) in enumerate(zip(self.lower, self.spacing, self.sizes,
                                                 strict=True)):
            u = (X[:, axis] - float(lo)) / float(h)
            slack = 64.0 * float(xp.finfo(X.dtype).eps) * size
            if bool(xp.any(u < 1.0 - slack)) or bool(xp.any(u > size - 2.0 + slack)):
                return False
        return True

    def weights_at(self, X, dtype):
        """``(indices, weights)`` (b, 4^d) of new points ``X`` (each inside, see
        :meth:`contains`), the weights in ``dtype``."""
        xp = get_namespace(X)
        idx, w = cubic_interpolation_weights(X, self.lower, self.spacing, self.sizes)
        return idx, xp.astype(w, dtype)


def ski_interpolation(X, grid_size, compute_dtype=None):
    """The grid of :func:`ski_grid` and cubic convolution weights (Keys 1981) of ``X`` on it,
    the weights in ``compute_dtype`` (default ``X``'s)."""
    xp = get_namespace(X)
    compute_dtype = X.dtype if compute_dtype is None else compute_dtype
    grid, lower, spacing, sizes = ski_grid(X, grid_size)
    idx, w = cubic_interpolation_weights(X, lower, spacing, sizes)
    w = xp.astype(w, compute_dtype)
    return SkiInterpolation(grid, lower, spacing, sizes, idx, w,
                            SparseRows(idx, w, math.prod(sizes)))


def ski_operator(kernel, X, grid_size, compute_dtype=None, interpolation=None):
    """Structured kernel interpolation ``K_XX ~= W K_UU W^T`` (Wilson & Nickisch 2015) with
    cubic convolution weights (Keys 1981) on the grid of :func:`ski_grid` and ``K_UU`` from
    :func:`grid_operator`. Interpolation error ``O(h^3)`` in the grid spacing ``h``.
    ``interpolation``: the :class:`SkiInterpolation` of these ``X`` and ``grid_size`` built
    beforehand (its weights in ``compute_dtype``)."""
    compute_dtype = kernel.dtype if compute_dtype is None else compute_dtype
    if interpolation is None:
        interpolation = ski_interpolation(X, grid_size, compute_dtype)
    K_UU = grid_operator(kernel, interpolation.grid, compute_dtype=compute_dtype)
    return KernelInterpolated(interpolation.indices, interpolation.weights, K_UU,
                              rows=interpolation.rows)
