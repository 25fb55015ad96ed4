"""The stochastic harmonic oscillator (SHO) kernel of celerite (Foreman-Mackey et al. 2017).

A damped oscillator driven by white noise, ``f'' + (w0 / Q) f' + w0^2 f = w(t)``, has the
stationary covariance

    k(tau) = variance * exp(m |tau|) (C(|tau|) - m S(|tau|)),   m = -w0 / (2 Q),

with ``d = m^2 - w0^2 = w0^2 (1 / (4 Q^2) - 1)``, ``C(t) = cosh(sqrt(d) t)`` and
``S(t) = sinh(sqrt(d) t) / sqrt(d)`` (``cos`` and ``sin`` when ``d < 0``, the underdamped
``Q > 1/2``; ``C = 1``, ``S = t`` at critical damping ``Q = 1/2``). This is celerite's
``SHOTerm`` with ``variance = S0 w0 Q`` (Foreman-Mackey et al. 2017, eq. 23); its state
``(f, f')`` evolves by ``A(t) = exp(F t) = exp(m t) (C(t) I + S(t) N)`` with
``F = [[0, 1], [-w0^2, 2 m]]`` and ``N = F - m I`` (``N^2 = d I``), which the state-space
solver uses (:mod:`gpnum.kernels._state_space`).

Parameters: ``variance`` (``k(0)``), ``period`` (the undamped period ``2 pi / w0``, celerite2's
``rho``) and ``quality`` (``Q``).
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.kernels._lag import LagKernel

__all__ = ["SHO", "sho_functions"]

_TWO_PI = 2.0 * math.pi
# |d| t^2 below this: e^{mt} dS/dd from its series (the closed form (t C - S) / (2 d) cancels).
_SERIES_BELOW = 0.1
# (k + 1) / (2k + 3)!: dS/dd = t^3 sum_k c_k (d t^2)^k.
_DS_SERIES = tuple((k + 1) / math.factorial(2 * k + 3) for k in range(7))


def sho_functions(t, w0, quality, need_derivative=False):
    """``exp(m t) C(t)``, ``exp(m t) S(t)`` and (optionally) ``exp(m t) dS/dd`` at ``t >= 0``.

    Parameters
    ----------
    t : array (...)
        Non-negative lags.
    w0, quality : 0-d arrays
        Undamped angular frequency and quality factor.
    need_derivative : bool

    Returns
    -------
    EC, ES : arrays (...)
    EdS : array (...) or None
        ``exp(m t) dS/dd`` (``dC/dd = t S / 2`` needs nothing new).

    Notes
    -----
    Written so that nothing overflows for long lags (the overdamped ``cosh`` is combined with
    ``exp(m t)`` into two decaying exponentials, since ``m + sqrt(d) < 0``) and nothing
    cancels for ``sqrt(|d|) t`` small (``expm1`` differences and a series for ``dS/dd``).
    """
    xp = get_namespace(t)
    m = -w0 / (2.0 * quality)
    d = m * m - w0 * w0
    d_host = float(d)
    E = xp.exp(m * t)
    if d_host < 0.0:
        omega = xp.sqrt(-d)
        cos, sin = _cos_sin(omega * t)
        EC = E * cos
        ES = E * sin / omega
    elif d_host > 0.0:
        omega = xp.sqrt(d)
        x = omega * t
        small = x <= 1.0
        x_small = xp.where(small, x, xp.zeros_like(x))
        near = E * (xp.expm1(x_small) - xp.expm1(-x_small)) / (2.0 * omega)
        up, down = xp.exp((m + omega) * t), xp.exp((m - omega) * t)
        EC = 0.5 * (up + down)
        ES = xp.where(small, near, (up - down) / (2.0 * omega))
    else:
        EC = E
        ES = E * t
    if not need_derivative:
        return EC, ES, None
    u = d * (t * t)
    series = _DS_SERIES[-1]
    for c in _DS_SERIES[-2::-1]:
        series = c + u * series
    series = E * (t * t * t) * series
    use_series = xp.abs(u) < _SERIES_BELOW
    d_safe = d if d_host != 0.0 else xp.ones_like(d)
    closed = (t * EC - ES) / (2.0 * d_safe)
    return EC, ES, xp.where(use_series, series, closed)


def _cos_sin(x):
    """``cos x`` and ``sin x`` from one ``tan(x / 2)``: ``(1 - u^2) / (1 + u^2)`` and
    ``2 u / (1 + u^2)``.

    NumPy's float64 ``cos`` and ``sin`` are scalar library calls (about 6 ns an element each
    here, ten times its ``exp``); ``tan`` plus the arithmetic costs a third of the pair. The
    error is a few units in the last place of ``max(|cos x|, |sin x|)``: absolute, not
    relative, near a zero of ``cos``, where the argument's own rounding is larger anyway.
    ``|u|`` stays below about ``1.7e16``, so nothing overflows.
    """
    xp = get_namespace(x)
    u = xp.tan(0.5 * x)
    u2 = u * u
    inv = 1.0 / (1.0 + u2)
    return (1.0 - u2) * inv, (2.0 * u) * inv


def sho_parameter_derivatives(w0, quality, period):
    """``dm``, ``dd`` and ``d(w0^2)`` w.r.t. ``period`` and ``quality``: two dicts of 0-d arrays.

    ``w0 = 2 pi / period``, ``m = -w0 / (2 Q)``, ``d = m^2 - w0^2``.
    """
    m = -w0 / (2.0 * quality)
    dw0 = {"period": -w0 / period, "quality": 0.0 * w0}
    dm = {"period": -dw0["period"] / (2.0 * quality), "quality": w0 / (2.0 * quality * quality)}
    dw2 = {k: 2.0 * w0 * dw0[k] for k in dw0}
    dd = {k: 2.0 * m * dm[k] - dw2[k] for k in dw0}
    return m, dm, dd, dw2


class SHO(LagKernel):
    """celerite's stochastic harmonic oscillator kernel on one input (module notes).

    ``k(tau) = variance * exp(-w0 |tau| / (2 Q)) (C + w0 / (2 Q) S)``, ``w0 = 2 pi / period``:
    the covariance of a damped harmonic oscillator driven by white noise (Foreman-Mackey et
    al. 2017, eq. 20-23). Quasi-periodic with period near ``period`` for large ``quality``,
    like a Matern-3/2 (``quality`` = 1/2 is critical damping) for small.

    Parameters
    ----------
    variance : float or array ()
        Positive ``k(0)`` (celerite's ``S0 w0 Q``; celerite2's ``sigma^2``).
    period : float or array ()
        Positive undamped period ``2 pi / w0`` (celerite2's ``rho``).
    quality : float or array ()
        Positive quality factor ``Q``.
    active_dims : list of int, optional
        The one input column the kernel sees (default: the inputs must have one column).
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.

    References
    ----------
    Foreman-Mackey, D., Agol, E., Ambikasaran, S. & Angus, R. (2017). Fast and scalable
    Gaussian process modeling with applications to astronomical time series. AJ 154, 220.
    """

    _param_names = ("variance", "period", "quality")
    _positive = ("variance", "period", "quality")

    def __init__(self, variance=1.0, period=1.0, quality=1.0, *, active_dims=None, xp=None,
                 dtype=None, device=None):
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device, variance, period, quality)
        self.variance = variance
        self.period = period
        self.quality = quality
        for name in self._param_names:
            self._require_ndim(name, (0,))

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        t = xp.abs(self._lags(X1, X2))
        w0 = _TWO_PI / self.period
        EC, ES, _ = sho_functions(t, w0, self.quality)
        m = -w0 / (2.0 * self.quality)
        return self.variance * (EC - m * ES)

    def _diag(self, X):
        xp = get_namespace(X)
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + self.variance

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        tau = self._lags(X1, X2)
        t = xp.abs(tau)
        var, Q, rho = self.variance, self.quality, self.period
        w0 = _TWO_PI / rho
        EC, ES, EdS = sho_functions(t, w0, Q, need_derivative=True)
        m, dm, dd, _ = sho_parameter_derivatives(w0, Q, rho)
        h = EC - m * ES
        params = {"variance": xp.sum(G * h)}
        # A_00 = e^{mt} (C - m S): d/dtheta = t dm A_00 + (t S / 2 - m dS/dd) dd - S dm
        # (all with the e^{mt} factor); dC/dd = t S / 2.
        for name in ("period", "quality"):
            dh = (t * dm[name]) * h + (0.5 * t * ES - m * EdS) * dd[name] - ES * dm[name]
            params[name] = var * xp.sum(G * dh)
        # dk/dtau = sign(tau) var [A(t) F]_00 = -sign(tau) var w0^2 e^{mt} S(t)
        slope = (-var * w0 * w0) * ES * xp.sign(tau)
        W = G * slope
        return (params, *self._input_grads(W, X2))

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        return ({"variance": xp.sum(g), "period": xp.zeros_like(self.period),
                 "quality": xp.zeros_like(self.quality)}, xp.zeros_like(X))
