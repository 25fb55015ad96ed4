"""The polynomial kernel ``(variance x.x' + offset)^degree``."""

from __future__ import annotations

from gpnum.backend import get_namespace
from gpnum.errors import check_int
from gpnum.kernels._base import Kernel

__all__ = ["Polynomial"]


def _inner(X1, X2):
    """``X1 X2^T``, exactly symmetric when ``X2`` is None."""
    if X2 is None:
        S = X1 @ X1.T
        return (S + S.T) * 0.5
    return X1 @ X2.T


class Polynomial(Kernel):
    """Polynomial kernel ``k(x, x') = (variance * x.x' + offset)^degree``.

    The feature space holds all monomials of the inputs up to ``degree`` (Rasmussen & Williams
    2006, section 4.2.2), so the kernel is positive semi-definite for integer degrees; a
    non-integer degree would not be (and would be undefined for negative ``x.x'``), hence the
    degree is a fixed positive integer, not a learned parameter.

    Parameters
    ----------
    degree : int
        Positive integer degree.
    variance : float or array ()
        Positive scale of the inner product.
    offset : float or array ()
        Positive constant added to the scaled inner product (weights the lower-order terms).
        Stored with the softplus transform like every positive parameter, so the homogeneous
        kernel (``offset = 0``) is reached only as a limit.
    active_dims : list of int, optional
        The input columns the kernel sees (default all), as for :class:`gpnum.kernels.RBF`.
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.
    """

    _param_names = ("variance", "offset")
    _positive = ("variance", "offset")

    def __init__(self, degree=2, variance=1.0, offset=1.0, *, active_dims=None, xp=None,
                 dtype=None, device=None):
        self._set_active_dims(active_dims)
        deg = check_int(degree, "degree", minimum=1, expected="a positive integer")
        self.degree = deg
        self._setup_namespace(xp, dtype, device, variance, offset)
        self.variance = variance
        self.offset = offset
        self._require_ndim("variance", (0,))
        self._require_ndim("offset", (0,))

    def _repr_extra(self):
        return [f"degree={self.degree}"]

    def _gram(self, X1, X2):
        return (self.variance * _inner(X1, X2) + self.offset) ** self.degree

    def _diag(self, X):
        xp = get_namespace(X)
        return (self.variance * xp.sum(X * X, axis=1) + self.offset) ** self.degree

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        S = _inner(X1, X2)
        base = self.variance * S + self.offset
        A = G * (self.degree * base ** (self.degree - 1))  # cotangent of the base
        params = {"variance": xp.sum(A * S), "offset": xp.sum(A)}
        if X2 is None:
            return params, self.variance * ((A + A.T) @ X1), None
        return params, self.variance * (A @ X2), self.variance * (A.T @ X1)

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        s = xp.sum(X * X, axis=1)
        a = g * (self.degree * (self.variance * s + self.offset) ** (self.degree - 1))
        params = {"variance": xp.sum(a * s), "offset": xp.sum(a)}
        return params, (2.0 * self.variance) * (a[:, None] * X)
