"""The rational quadratic kernel, a scale mixture of RBF kernels."""

from __future__ import annotations

from gpnum.backend import flat_dot, get_namespace
from gpnum.kernels._distance import sqdist
from gpnum.kernels._stationary import Stationary

__all__ = ["RationalQuadratic"]


class RationalQuadratic(Stationary):
    """Rational quadratic kernel ``variance * (1 + r^2 / (2 alpha))^(-alpha)``.

    ``r^2 = sum_k (x_k - x'_k)^2 / lengthscale_k^2``. An infinite scale mixture of RBF kernels
    with Gamma-distributed inverse squared lengthscales of shape ``alpha`` (Rasmussen &
    Williams 2006, eq. 4.19); it tends to the RBF kernel as ``alpha -> infinity``. Matches
    scikit-learn's ``RationalQuadratic(length_scale, alpha)`` times ``variance``.

    Parameters
    ----------
    lengthscale : float or array () or (d,)
        Positive lengthscale, shared or one per input column (ARD).
    alpha : float or array ()
        Positive shape (scale-mixture) parameter.
    variance : float or array ()
        Positive signal variance.
    active_dims : list of int, optional
        The input columns the kernel sees (default all).
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.
    """

    _param_names = ("lengthscale", "alpha", "variance")
    _positive = ("lengthscale", "alpha", "variance")

    def __init__(self, lengthscale=1.0, alpha=1.0, variance=1.0, *, active_dims=None, xp=None,
                 dtype=None, device=None):
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device, lengthscale, alpha, variance)
        self.lengthscale = lengthscale
        self.alpha = alpha
        self.variance = variance
        self._require_ndim("lengthscale", (0, 1))
        self._require_ndim("alpha", (0,))
        self._require_ndim("variance", (0,))

    def _profile(self, r2):
        xp = get_namespace(r2)
        r2 *= 0.5 / self.alpha
        r2 += 1.0
        return xp.exp(-self.alpha * xp.log(r2))

    def _profile_and_slope(self, r2):
        xp = get_namespace(r2)
        u = 1.0 + r2 * (0.5 / self.alpha)
        h = xp.exp(-self.alpha * xp.log(u))
        return h, -0.5 * h / u

    def _extra_grads(self, G, r2, h):
        xp = get_namespace(r2)
        alpha = self.alpha
        u = 1.0 + r2 * (0.5 / alpha)
        # d h / d alpha = h (r^2 / (2 alpha u) - log u)
        return {"alpha": self.variance * xp.sum((G * h) * (r2 / (2.0 * alpha * u) - xp.log(u)))}

    def _gram_and_vjp(self, X1, X2):
        xp = get_namespace(X1)
        alpha, var = self.alpha, self.variance
        A, B = self._scaled(X1, X2)
        r2 = sqdist(A, B)
        u = r2 * (0.5 / alpha)
        u += 1.0
        log_u = xp.log(u)
        h = log_u * (-alpha)
        h = xp.exp(h)

        def inner(G, inputs=True):
            # One (n1, n2) temporary, reused: with W the cotangent of r^2, G var dh/dr^2 =
            # -var G h / (2 u), the lengthscale's sum(W r^2) and alpha's gradient share
            # sum(G h r^2 / u):  d h / d alpha = h (r^2 / (2 alpha u) - log u).
            Gh = G * h
            g_var = xp.sum(Gh)
            t_log = flat_dot(Gh, log_u)
            Gh /= u
            t_ratio = flat_dot(Gh, r2)
            g_alpha = var * (t_ratio / (2.0 * alpha) - t_log)
            Gh *= -0.5 * var  # now W
            params, gA, gB = self._grads_from_r2_cotangent(Gh, A, B, r2, g_var, inputs=inputs)
            return ({"lengthscale": params["lengthscale"], "alpha": g_alpha, "variance": g_var},
                    gA, gB)

        inner.params_only = lambda G: inner(G, inputs=False)[0]
        return var * h, inner

    def _gram_vjp(self, G, X1, X2):
        return self._gram_and_vjp(X1, X2)[1](G)

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        params = {"lengthscale": xp.zeros_like(self.lengthscale),
                  "alpha": xp.zeros_like(self.alpha), "variance": xp.sum(g)}
        return params, xp.zeros_like(X)
