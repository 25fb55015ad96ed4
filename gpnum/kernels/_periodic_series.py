"""The periodic (exp-sine-squared) kernel as a truncated cosine series (Solin & Sarkka 2014).

The periodic kernel with a squared-exponential profile,
``k(tau) = variance exp(-2 sin^2(pi tau / period) / lengthscale^2)`` (MacKay 1998;
:class:`gpnum.kernels.Periodic` with an RBF base), is, with ``x = lengthscale^-2`` and
``w0 = 2 pi / period``, ``variance exp(-x) exp(x cos(w0 tau))``, whose Fourier series is

    k(tau) = variance sum_{j >= 0} c_j cos(j w0 tau),  c_0 = ive_0(x),  c_j = 2 ive_j(x),

``ive_j(x) = I_j(x) exp(-x)`` (Solin & Sarkka 2014, eq. 7; Abramowitz & Stegun 9.6.34).
:class:`PeriodicSeries` is this series truncated after ``order`` harmonics: a kernel of its
own (positive semi-definite: a sum of cosines with positive weights), whose state-space form
is exact (:mod:`gpnum.kernels._state_space`: a constant and ``order`` rotations, a state of
size ``2 order + 1``). As an approximation of the periodic kernel its error is, for every lag,
at most ``variance (1 - sum_{j <= order} c_j)`` (:meth:`PeriodicSeries.truncation_error`): the
weights are positive and sum to 1 over all ``j``. Short lengthscales need more harmonics.

References
----------
Solin, A. & Sarkka, S. (2014). Explicit link between periodic covariance functions and state
space models. AISTATS.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.errors import check_int
from gpnum.kernels._lag import LagKernel
from gpnum.special import bessel_ive_host

__all__ = ["PeriodicSeries", "series_coefficients"]

_TWO_PI = 2.0 * math.pi


def series_coefficients(lengthscale: float, order: int):
    """The weights ``c_0..c_order`` (module notes) and their derivatives w.r.t. the
    lengthscale, as Python floats (host: the weights depend on one scalar)."""
    x = 1.0 / (lengthscale * lengthscale)
    ive = bessel_ive_host(order, x)
    dx = -2.0 * x / lengthscale                     # d(l^-2)/dl
    c, dc = [ive[0]], [(ive[1] - ive[0]) * dx]
    for j in range(1, order + 1):
        c.append(2.0 * ive[j])
        dc.append(2.0 * (0.5 * (ive[j - 1] + ive[j + 1]) - ive[j]) * dx)
    return c, dc


class PeriodicSeries(LagKernel):
    """The periodic kernel's cosine series, truncated after ``order`` harmonics (module notes).

    ``k(tau) = variance sum_{j=0}^{order} c_j(lengthscale) cos(2 pi j tau / period)``, which
    approximates ``Periodic(RBF(lengthscale, variance), period)`` within
    :meth:`truncation_error` at every lag, and has an exact state-space form of size
    ``2 order + 1`` (``GPR(..., solver="state_space")``).

    Parameters
    ----------
    lengthscale, variance, period : float or array ()
        Positive: the periodic kernel's lengthscale (of ``2 sin(pi tau / period)``), its
        variance ``k(0)`` (of the untruncated kernel) and its period.
    order : int
        Number of harmonics kept (>= 0).
    active_dims : list of int, optional
        The one input column the kernel sees (default: the inputs must have one column).
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.

    References
    ----------
    Solin, A. & Sarkka, S. (2014). Explicit link between periodic covariance functions and
    state space models. AISTATS.
    """

    _param_names = ("lengthscale", "variance", "period")
    _positive = ("lengthscale", "variance", "period")

    def __init__(self, lengthscale=1.0, variance=1.0, period=1.0, order=6, *, active_dims=None,
                 xp=None, dtype=None, device=None):
        self._set_active_dims(active_dims)
        self.order = check_int(order, "order", minimum=0, expected="a non-negative integer")
        self._setup_namespace(xp, dtype, device, lengthscale, variance, period)
        self.lengthscale = lengthscale
        self.variance = variance
        self.period = period
        for name in self._param_names:
            self._require_ndim(name, (0,))

    def _repr_extra(self):
        return [f"order={self.order}"]

    def coefficients(self):
        """``(c, dc)``: the weights ``c_0..c_order`` and their lengthscale derivatives
        (Python floats)."""
        return series_coefficients(float(self.lengthscale), self.order)

    def truncation_error(self) -> float:
        """``variance (1 - sum_j c_j)``: the largest difference, over all lags, between this
        kernel and the untruncated periodic kernel."""
        c, _ = self.coefficients()
        return float(self.variance) * max(0.0, 1.0 - math.fsum(c))

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        c, _ = self.coefficients()
        phase = (_TWO_PI / self.period) * self._lags(X1, X2)
        out = xp.zeros_like(phase) + c[0]
        for j in range(1, self.order + 1):
            out = out + c[j] * xp.cos(j * phase)
        return self.variance * out

    def _diag(self, X):
        xp = get_namespace(X)
        c, _ = self.coefficients()
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + (
            self.variance * math.fsum(c))

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        c, dc = self.coefficients()
        var, w0 = self.variance, _TWO_PI / self.period
        tau = self._lags(X1, X2)
        phase = w0 * tau
        base = xp.zeros_like(phase) + c[0]
        dbase = xp.zeros_like(phase) + dc[0]
        slope = xp.zeros_like(phase)                   # sum_j c_j j sin(j phase)
        for j in range(1, self.order + 1):
            cos_j, sin_j = xp.cos(j * phase), xp.sin(j * phase)
            base = base + c[j] * cos_j
            dbase = dbase + dc[j] * cos_j
            slope = slope + (c[j] * j) * sin_j
        # dk/dtau = -var w0 slope; dk/dperiod = var slope tau w0 / period
        params = {"lengthscale": var * xp.sum(G * dbase), "variance": xp.sum(G * base),
                  "period": var * w0 / self.period * xp.sum(G * slope * tau)}
        W = G * ((-var * w0) * slope)
        return (params, *self._input_grads(W, X2))

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        c, dc = self.coefficients()
        return ({"lengthscale": self.variance * math.fsum(dc) * xp.sum(g),
                 "variance": math.fsum(c) * xp.sum(g),
                 "period": xp.zeros_like(self.period)}, xp.zeros_like(X))
