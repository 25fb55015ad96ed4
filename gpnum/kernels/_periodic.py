"""Periodic kernels: a stationary kernel of a periodised distance, and the cosine kernel."""

from __future__ import annotations

import math

from gpnum.backend import device_of, flat_dot, get_namespace
from gpnum.errors import ShapeError, describe_shape
from gpnum.kernels._nested import ParentKernel, check_children
from gpnum.kernels._stationary import LengthscaleVariance, Stationary

__all__ = ["Periodic", "Cosine"]

_PI = math.pi


def _columns(X1, X2):
    """Pairwise differences ``tau_k[i, j] = X1[i, k] - X2[j, k]`` for each column ``k``."""
    Xb = X1 if X2 is None else X2
    return [X1[:, k:k + 1] - Xb[:, k][None, :] for k in range(X1.shape[1])]


def _angle_difference(sin, cos, a, b):
    """``sin(a_i - b_j)`` (n1, n2) from the angles ``a`` (n1,) and ``b`` (n2,), as
    ``sin a_i cos b_j - cos a_i sin b_j``. Elementwise, each product rounded once: for
    ``b = a`` the result is then exactly antisymmetric (a product would fuse its rounding
    differently in the two triangles), so the gram matrix stays exactly symmetric."""
    sa, ca = sin(a), cos(a)
    sb, cb = (sa, ca) if b is a else (sin(b), cos(b))
    out = sa[:, None] * cb[None, :]
    out -= ca[:, None] * sb[None, :]
    return out


def _half_double_angle(xp, a, b):
    """``sin(a_i - b_j) cos(a_i - b_j) = sin(2 a_i - 2 b_j) / 2`` (n1, n2)."""
    a2 = 2.0 * a
    out = _angle_difference(xp.sin, xp.cos, a2, a2 if b is a else 2.0 * b)
    out *= 0.5
    return out


def _per_dim(p, k):
    """Entry ``k`` of a per-dimension parameter, or the shared scalar."""
    return p[k] if p.ndim == 1 else p


def _reduce(parts, p):
    """Gradient of a parameter of shape () or (d,) from its per-dimension parts."""
    xp = get_namespace(p)
    g = xp.stack(parts)
    return g if p.ndim == 1 else xp.sum(g)


def _check_per_dim(name, p, d, what):
    if p.ndim == 1 and p.shape[0] != d:
        raise ShapeError(f"{what}: expected {p.shape[0]} columns to match {name} of shape "
                         f"{describe_shape(p.shape)}, got {d}")


class Periodic(ParentKernel):
    """A stationary kernel evaluated at a periodic distance (MacKay 1998).

    ``k(x, x') = base.variance * h(r)`` with ``r^2 = sum_k (2 sin(pi (x_k - x'_k) / p_k) /
    l_k)^2``: ``base``'s profile ``h`` (and its lengthscale ``l`` and variance) applied to the
    distance of the points mapped to circles of circumference ``p_k``. With an RBF base this is
    ``variance * exp(-2 sum_k sin^2(pi tau_k / p_k) / l_k^2)`` (Rasmussen & Williams 2006,
    eq. 4.31; scikit-learn's ``ExpSineSquared``).

    Parameters
    ----------
    base : Stationary
        RBF, a Matern kernel or RationalQuadratic (without ``active_dims`` of its own); its
        parameters appear as ``"base.lengthscale"``, ``"base.variance"``...
    period : float or array () or (d,)
        Positive period, shared or one per input column.
    active_dims : list of int, optional
        The input columns the kernel sees (default all).

    Notes
    -----
    Gradients go through the base's ``dh/d(r^2)``. With a Matern-1/2 base the input gradient
    takes the zero subgradient where ``r = 0`` (as Matern-1/2 itself does).
    """

    _param_names = ("period",)
    _positive = ("period",)
    _children_arg = "base"

    def __init__(self, base=None, period=1.0, *, active_dims=None):
        if base is None:
            from gpnum.kernels._stationary import RBF

            base = RBF()
        check_children("Periodic", [base])
        if not isinstance(base, Stationary):
            raise TypeError(f"base: expected a stationary kernel (RBF, Matern12/32/52, "
                            f"RationalQuadratic), got {type(base).__name__}")
        if base.active_dims is not None:
            raise ValueError("base: expected no active_dims of its own (give active_dims to "
                             "Periodic)")
        self._set_active_dims(active_dims)
        self.base = base
        self._init_namespace(base.xp, base.dtype, base._device)
        self.period = period
        self._require_ndim("period", (0, 1))

    def _children(self):
        return [("base", self.base)]

    def _check_dim(self, d, name):
        self.base._check_dim(d, name)
        _check_per_dim("period", self.period, d, name)

    def __repr__(self):
        extra = "" if self.active_dims is None else f", active_dims={list(self.active_dims)}"
        period = self._host_repr(self.period)
        return f"Periodic({self.base!r}, period={period}{extra})"

    # ----------------------------------------------------------------------------- values
    def _sines(self, X1, X2):
        """Per column ``k``: ``r_k^2 = 4 s_k^2 / l_k^2`` (n1, n2) with ``s_k = sin(pi tau_k /
        p_k)``, and a function giving ``s_k cos(pi tau_k / p_k)`` (the backward's).

        ``s_k`` comes from the angle-difference identity ``sin(a_i - b_j) = sin a_i cos b_j -
        cos a_i sin b_j``: two transcendentals per point and two products per pair instead of
        a transcendental per pair (``sin`` and ``cos`` cost about ten elementwise products
        each), the angles taken from a common origin so that they stay small. Its rounding is
        absolute (about ``1e-16``); coincident points have equal angles and so an exact zero,
        which a Matern-1/2 base's zero subgradient at ``r = 0`` needs.
        """
        xp = get_namespace(X1)
        ell, per = self.base.lengthscale, self.period
        Xb = X1 if X2 is None else X2
        r2s, halves = [], []
        for k in range(X1.shape[1]):
            pk = _per_dim(per, k)
            lo = xp.minimum(xp.min(X1[:, k]), xp.min(Xb[:, k]))
            hi = xp.maximum(xp.max(X1[:, k]), xp.max(Xb[:, k]))
            origin = 0.5 * (lo + hi)
            a1 = (_PI / pk) * (X1[:, k] - origin)
            a2 = a1 if X2 is None else (_PI / pk) * (X2[:, k] - origin)
            s = _angle_difference(xp.sin, xp.cos, a1, a2)
            halves.append(lambda a1=a1, a2=a2: _half_double_angle(xp, a1, a2))
            r2 = s * s
            r2 *= 4.0 / _per_dim(ell, k) ** 2
            r2s.append(r2)
        return r2s, halves

    @staticmethod
    def _summed(r2s):
        r2 = r2s[0]
        if len(r2s) > 1:
            r2 = r2 + r2s[1]  # a new array: r2s[0] is kept for the backward
            for extra in r2s[2:]:
                r2 += extra
        return r2

    def _gram(self, X1, X2):
        r2s, _ = self._sines(X1, X2)
        K = self.base._profile(self._summed(r2s))
        K *= self.base.variance
        return K

    def _diag(self, X):
        return self.base._diag(X)

    def _gram_and_vjp(self, X1, X2):
        base = self.base
        r2s, halves = self._sines(X1, X2)
        r2 = self._summed(r2s)
        h, slope = base._profile_and_slope(r2)
        K = base.variance * h
        return K, lambda G: self._backward(G, X1, X2, r2s, halves, r2, h, slope)

    def _gram_vjp(self, G, X1, X2):
        return self._gram_and_vjp(X1, X2)[1](G)

    def _backward(self, G, X1, X2, r2s, halves, r2, h, slope):
        xp = get_namespace(G)
        base = self.base
        ell, per, var = base.lengthscale, self.period, base.variance
        Xb = X1 if X2 is None else X2
        W = G * slope
        W *= var  # cotangent of r^2
        g_ell, g_per, g1, g2 = [], [], [], []
        for k, half in enumerate(halves):
            lk, pk = _per_dim(ell, k), _per_dim(per, k)
            g_ell.append((-2.0 / lk) * flat_dot(W, r2s[k]))
            # d r_k^2 / d tau = 4 pi sin(2 pi tau / p) / (p l^2) = 8 pi s c / (p l^2)
            Wd = half()
            Wd *= W
            Wd *= 8.0 * _PI / (pk * lk * lk)
            rows, cols = xp.sum(Wd, axis=1), xp.sum(Wd, axis=0)
            # d r_k^2 / d p = -(tau / p) d r_k^2 / d tau, and sum_ij Wd_ij tau_ij is
            # sum_i x_i rows_i - sum_j x_j cols_j (from a common origin: no (n1, n2) tau)
            origin = X1[0, k]
            g_per.append(-(xp.sum((X1[:, k] - origin) * rows)
                           - xp.sum((Xb[:, k] - origin) * cols)) / pk)
            g1.append(rows)
            g2.append(-cols)
        gX1 = xp.stack(g1, axis=1)
        gX2 = xp.stack(g2, axis=1)
        own = {"lengthscale": _reduce(g_ell, ell), "variance": flat_dot(G, h)}
        own.update(base._extra_grads(G, r2, h))  # e.g. RationalQuadratic's alpha
        params = {"period": _reduce(g_per, per)}
        params.update({f"base.{n}": own[n] for n in base._param_names})
        if X2 is None:
            return params, gX1 + gX2, None
        return params, gX1, gX2

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        base_params, _ = self.base._diag_vjp(g, X)
        params = {"period": xp.zeros_like(self.period)}
        params.update({f"base.{n}": v for n, v in base_params.items()})
        return params, xp.zeros_like(X)


class Cosine(LengthscaleVariance):
    """Cosine kernel ``variance * cos(2 pi sum_k (x_k - x'_k) / lengthscale_k)``.

    A stationary kernel whose spectrum is a pair of spikes at frequencies ``+-1/lengthscale``
    (rank two: ``cos(a) cos(a') + sin(a) sin(a')`` with ``a = 2 pi sum_k x_k / l_k``).

    Parameters
    ----------
    lengthscale : float or array () or (d,)
        Positive period along each column.
    variance : float or array ()
        Positive variance.
    active_dims : list of int, optional
        The input columns the kernel sees (default all).
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.
    """

    def _phase(self, X1, X2):
        taus = _columns(X1, X2)
        z = None
        for k, tau in enumerate(taus):
            term = tau / _per_dim(self.lengthscale, k)
            z = term if z is None else z + term
        return taus, (2.0 * _PI) * z

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        return self.variance * xp.cos(self._phase(X1, X2)[1])

    def _diag(self, X):
        xp = get_namespace(X)
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + self.variance

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        ell = self.lengthscale
        taus, z = self._phase(X1, X2)
        Wz = G * xp.sin(z)
        Wz *= -2.0 * _PI * self.variance  # cotangent of sum_k tau_k / l_k
        g_ell, g1, g2 = [], [], []
        for k, tau in enumerate(taus):
            lk = _per_dim(ell, k)
            g_ell.append(-xp.sum(Wz * tau) / (lk * lk))
            g1.append(xp.sum(Wz, axis=1) / lk)
            g2.append(-xp.sum(Wz, axis=0) / lk)
        params = {"lengthscale": _reduce(g_ell, ell), "variance": xp.sum(G * xp.cos(z))}
        gX1, gX2 = xp.stack(g1, axis=1), xp.stack(g2, axis=1)
        if X2 is None:
            return params, gX1 + gX2, None
        return params, gX1, gX2

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        return ({"lengthscale": xp.zeros_like(self.lengthscale), "variance": xp.sum(g)},
                xp.zeros_like(X))
