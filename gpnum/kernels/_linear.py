"""The linear, constant and white-noise kernels."""

from __future__ import annotations

from gpnum.backend import device_of, get_namespace
from gpnum.errors import ShapeError, describe_shape
from gpnum.kernels._base import Kernel

__all__ = ["Linear", "Constant", "White"]


def _full(X, value):
    xp = get_namespace(X)
    return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + value


class _Scalar(Kernel):
    """A kernel with one positive parameter ``variance`` of shape ()."""

    _param_names = ("variance",)
    _positive = ("variance",)

    def __init__(self, variance=1.0, *, active_dims=None, xp=None, dtype=None, device=None):
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device, variance)
        self.variance = variance
        self._require_ndim("variance", self._variance_ndims)

    _variance_ndims = (0,)

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        return {"variance": xp.sum(g)}, xp.zeros_like(X)


class Linear(_Scalar):
    """Linear (dot-product) kernel ``k(x, x') = sum_k variance_k x_k x'_k``.

    The covariance of ``f(x) = w.x`` with ``w_k ~ N(0, variance_k)`` (Bayesian linear
    regression; Rasmussen & Williams 2006, section 2.1). Add a :class:`Constant` for an
    intercept: ``Constant(c) + Linear(v)`` is scikit-learn's ``DotProduct`` with
    ``sigma_0^2 = c`` when ``v = 1``.

    Parameters
    ----------
    variance : float or array () or (d,)
        Positive prior variance of the weights, shared or one per input column (ARD).
    active_dims : list of int, optional
        The input columns the kernel sees (default all).
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.
    """

    _variance_ndims = (0, 1)

    def _check_dim(self, d, name):
        v = self.variance
        if v.ndim == 1 and v.shape[0] != d:
            raise ShapeError(f"{name}: expected {v.shape[0]} columns to match variance of "
                             f"shape {describe_shape(v.shape)}, got {d}")

    def _gram(self, X1, X2):
        A = X1 * self.variance
        if X2 is None:
            S = A @ X1.T
            return (S + S.T) * 0.5  # exactly symmetric
        return A @ X2.T

    def _diag(self, X):
        xp = get_namespace(X)
        return xp.sum((X * self.variance) * X, axis=1)

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        v = self.variance
        if X2 is None:
            Gs = G + G.T
            GX = Gs @ X1
            per_dim = 0.5 * xp.sum(GX * X1, axis=0)
            g_var = per_dim if v.ndim == 1 else xp.sum(per_dim)
            return {"variance": g_var}, GX * v, None
        GX2 = G @ X2
        per_dim = xp.sum(GX2 * X1, axis=0)
        g_var = per_dim if v.ndim == 1 else xp.sum(per_dim)
        return {"variance": g_var}, GX2 * v, (G.T @ X1) * v

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        v = self.variance
        per_dim = xp.sum(g[:, None] * (X * X), axis=0)
        g_var = per_dim if v.ndim == 1 else xp.sum(per_dim)
        return {"variance": g_var}, (2.0 * g[:, None]) * (X * v)


class Constant(_Scalar):
    """Constant kernel ``k(x, x') = variance``: a random offset with prior variance ``variance``.

    Parameters
    ----------
    variance : float or array ()
        Positive variance.
    active_dims, xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.
    """

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        n2 = X1.shape[0] if X2 is None else X2.shape[0]
        return xp.zeros((X1.shape[0], n2), dtype=X1.dtype, device=device_of(X1)) + self.variance

    def _diag(self, X):
        return _full(X, self.variance)

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        return ({"variance": xp.sum(G)}, xp.zeros_like(X1),
                None if X2 is None else xp.zeros_like(X2))


class White(_Scalar):
    """White-noise kernel: ``variance`` on the diagonal of ``k(X, X)``, zero elsewhere.

    "The same set" is decided by the call, not by comparing values: ``k(X)`` (``X2`` omitted
    or None) is ``variance * I``, while ``k(X1, X2)`` with an explicit second set is all zeros,
    even when the two hold equal rows (``k(X, X)`` included), because noise on one set of
    observations is independent of noise on another. ``k.diag(X)`` is ``variance``. So in a
    GP model a White term is noise on the training targets that does not enter the cross-
    covariance with test points (as scikit-learn's and GPflow's white kernels do); the lazy
    :class:`gpnum.linalg.KernelMatrix` evaluates its diagonal blocks as ``k(X_b)`` for this.

    Parameters
    ----------
    variance : float or array ()
        Positive noise variance.
    active_dims, xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF` (the columns do not change the value).
    """

    _same_set_term = True

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        dev = device_of(X1)
        if X2 is not None:
            return xp.zeros((X1.shape[0], X2.shape[0]), dtype=X1.dtype, device=dev)
        return xp.eye(X1.shape[0], dtype=X1.dtype, device=dev) * self.variance

    def _diag(self, X):
        return _full(X, self.variance)

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        if X2 is not None:
            return {"variance": xp.zeros_like(self.variance)}, xp.zeros_like(X1), \
                xp.zeros_like(X2)
        return {"variance": xp.sum(xp.linalg.diagonal(G))}, xp.zeros_like(X1), None
