"""The spectral mixture kernel (Wilson & Adams 2013) and its initialiser from the data."""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.errors import ShapeError, check_int, describe_shape
from gpnum.kernels._base import Kernel
from gpnum.kernels._periodic import _columns

__all__ = ["SpectralMixture"]

_PI = math.pi


class SpectralMixture(Kernel):
    """Spectral mixture kernel: a Gaussian mixture spectral density (Wilson & Adams 2013).

    ``k(tau) = sum_q w_q exp(-2 pi^2 sum_k tau_k^2 s_qk^2) cos(2 pi sum_k tau_k mu_qk)`` with
    ``tau = x - x'``: component ``q`` has weight ``w_q``, mean frequency ``mu_q`` and frequency
    standard deviation ``s_q`` (one per input column). By Bochner's theorem this is the
    stationary kernel whose spectral density is the symmetrised mixture
    ``sum_q w_q [N(f; mu_q, diag(s_q^2)) + N(f; -mu_q, diag(s_q^2))] / 2``.

    Parameters
    ----------
    num_mixtures : int
        Number of components ``Q``.
    input_dim : int
        Number of input columns ``d`` the kernel sees.
    mixture_weights : array (Q,), optional
        Positive weights (default ``1/Q`` each).
    mixture_means : array (Q, d), optional
        Positive mean frequencies (cycles per unit of input; default ``(q + 1) / (2 Q)``).
    mixture_scales : array (Q, d), optional
        Positive frequency standard deviations (default 1/2).
    active_dims, xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.

    Notes
    -----
    :meth:`from_data` initialises the components from the data's empirical spectrum.
    """

    _param_names = ("mixture_weights", "mixture_means", "mixture_scales")
    _positive = ("mixture_weights", "mixture_means", "mixture_scales")

    def __init__(self, num_mixtures=1, input_dim=1, mixture_weights=None, mixture_means=None,
                 mixture_scales=None, *, active_dims=None, xp=None, dtype=None, device=None):
        Q = check_int(num_mixtures, "num_mixtures", minimum=1, expected="a positive integer")
        d = check_int(input_dim, "input_dim", minimum=1, expected="a positive integer")
        self.num_mixtures, self.input_dim = Q, d
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device, mixture_weights, mixture_means, mixture_scales)
        if mixture_weights is None:
            mixture_weights = [1.0 / Q] * Q
        if mixture_means is None:
            mixture_means = [[(q + 1.0) / (2.0 * Q)] * d for q in range(Q)]
        if mixture_scales is None:
            mixture_scales = [[0.5] * d for _ in range(Q)]
        self.mixture_weights = mixture_weights
        self.mixture_means = mixture_means
        self.mixture_scales = mixture_scales
        for name, shape in (("mixture_weights", (Q,)), ("mixture_means", (Q, d)),
                            ("mixture_scales", (Q, d))):
            arr = getattr(self, name)
            if tuple(arr.shape) != shape:
                raise ShapeError(f"{name}: expected shape {describe_shape(shape)} for "
                                 f"num_mixtures={Q}, input_dim={d}, got "
                                 f"{describe_shape(arr.shape)}")

    def _repr_extra(self):
        return [f"num_mixtures={self.num_mixtures}", f"input_dim={self.input_dim}"]

    def _check_dim(self, d, name):
        if d != self.input_dim:
            raise ShapeError(f"{name}: expected {self.input_dim} columns (input_dim), got {d}")

    # ----------------------------------------------------------------------------- values
    def _components(self, taus):
        """Per component: the Gaussian factor ``e_q`` and the phase ``2 pi tau.mu_q``."""
        xp = get_namespace(taus[0])
        mu, s = self.mixture_means, self.mixture_scales
        out = []
        for q in range(self.num_mixtures):
            quad, phase = None, None
            for k, tau in enumerate(taus):
                a = (tau * tau) * (s[q, k] * s[q, k])
                b = tau * mu[q, k]
                quad = a if quad is None else quad + a
                phase = b if phase is None else phase + b
            out.append((xp.exp((-2.0 * _PI * _PI) * quad), (2.0 * _PI) * phase))
        return out

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        w = self.mixture_weights
        K = None
        for q, (e, z) in enumerate(self._components(_columns(X1, X2))):
            term = (e * xp.cos(z)) * w[q]
            K = term if K is None else K + term
        return K

    def _diag(self, X):
        xp = get_namespace(X)
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + \
            xp.sum(self.mixture_weights)

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        w, mu, s = self.mixture_weights, self.mixture_means, self.mixture_scales
        taus = _columns(X1, X2)
        g_w, g_mu, g_s = [], [], []
        T = [None] * len(taus)  # cotangent of tau_k
        for q, (e, z) in enumerate(self._components(taus)):
            Ge = G * e
            c = xp.cos(z)
            g_w.append(xp.sum(Ge * c))
            Bq = Ge * c
            Bq *= (-4.0 * _PI * _PI) * w[q]  # d/d(tau_k^2 s_qk^2) of the Gaussian factor, x 2
            Dq = Ge * xp.sin(z)
            Dq *= (-2.0 * _PI) * w[q]  # d/d(tau.mu_q) of the cosine
            mus, ss = [], []
            for k, tau in enumerate(taus):
                Bt = Bq * tau
                ss.append(xp.sum(Bt * tau) * s[q, k])
                mus.append(xp.sum(Dq * tau))
                t = Bt * (s[q, k] * s[q, k]) + Dq * mu[q, k]
                T[k] = t if T[k] is None else T[k] + t
            g_mu.append(xp.stack(mus))
            g_s.append(xp.stack(ss))
        params = {"mixture_weights": xp.stack(g_w), "mixture_means": xp.stack(g_mu),
                  "mixture_scales": xp.stack(g_s)}
        g1 = xp.stack([xp.sum(t, axis=1) for t in T], axis=1)
        g2 = xp.stack([-xp.sum(t, axis=0) for t in T], axis=1)
        if X2 is None:
            return params, g1 + g2, None
        return params, g1, g2

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        params = {"mixture_weights": xp.zeros_like(self.mixture_weights) + xp.sum(g),
                  "mixture_means": xp.zeros_like(self.mixture_means),
                  "mixture_scales": xp.zeros_like(self.mixture_scales)}
        return params, xp.zeros_like(X)

    # ------------------------------------------------------------------------ initialiser
    @classmethod
    def from_data(cls, X, y, num_mixtures, *, num_frequencies=500, max_points=2000,
                  active_dims=None):
        """Initialise from the peaks of the data's empirical spectrum, column by column.

        For each input column ``k`` the power ``|sum_i (y_i - mean y) exp(-2 pi i f x_ik)|^2``
        (a periodogram for unevenly spaced inputs) is evaluated on ``num_frequencies``
        frequencies from ``1 / range`` to the Nyquist-like ``1 / (2 * median spacing)``. The
        ``Q`` highest local maxima give the mean frequencies, the weights are ``var(y)`` shared
        in proportion to the peaks' power, and the scales are the frequency resolution
        ``1 / range`` (the narrowest peak the data can show). Columns with fewer peaks than
        ``Q`` repeat their strongest ones. (Wilson & Adams 2013 fit a Gaussian mixture to the
        empirical spectrum; the peaks are a deterministic stand-in.)

        Parameters
        ----------
        X : array (n, D)
            Inputs (full width; ``active_dims`` picks the columns).
        y : array (n,)
            Targets.
        num_mixtures : int
        num_frequencies : int
            Frequencies on the grid per column.
        max_points : int
            At most this many evenly strided points enter the periodogram (cost O(n F d)).
        active_dims : list of int, optional

        Returns
        -------
        SpectralMixture
            On ``X``'s namespace, dtype and device.
        """
        xp = get_namespace(X, y)
        Q = check_int(num_mixtures, "num_mixtures", minimum=1, expected="a positive integer")
        if X.ndim != 2 or y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ShapeError(f"X, y: expected shapes (n, d) and (n,), got "
                             f"{describe_shape(X.shape)} and {describe_shape(y.shape)}")
        if active_dims is not None:
            X = xp.take(X, xp.asarray(list(active_dims), device=device_of(X)), axis=1)
        stride = max(1, X.shape[0] // max_points)
        Xs, ys = X[::stride, :], y[::stride]
        yc = ys - xp.mean(ys)
        dev, dt = device_of(X), X.dtype
        var_y = float(xp.mean(yc * yc))
        means, scales, weights = [], [], None
        for k in range(X.shape[1]):
            xk = xp.sort(Xs[:, k])
            span = float(xk[-1] - xk[0])
            gaps = xk[1:] - xk[:-1]
            gaps = gaps[gaps > 0.0] if bool(xp.any(gaps > 0.0)) else None
            if span <= 0.0 or gaps is None:
                raise ValueError(f"X: column {k} is constant; no spectrum to initialise from")
            spacing = float(xp.sort(gaps)[gaps.shape[0] // 2])
            fmin, fmax = 1.0 / span, 0.5 / spacing
            F = xp.linspace(fmin, max(fmax, 2.0 * fmin), num_frequencies, dtype=dt, device=dev)
            arg = (2.0 * _PI) * (F[:, None] * Xs[:, k][None, :])
            power = (xp.cos(arg) @ yc) ** 2 + (xp.sin(arg) @ yc) ** 2
            inner = (power[1:-1] > power[:-2]) & (power[1:-1] >= power[2:])
            peak_power = xp.where(inner, power[1:-1], xp.zeros_like(power[1:-1]))
            order = xp.argsort(-peak_power)
            npk = max(1, int(xp.sum(xp.astype(inner, xp.int32))))
            top = xp.take(order, xp.asarray([q % npk for q in range(Q)], device=dev))
            means.append(xp.take(F[1:-1], top))
            scales.append(xp.zeros((Q,), dtype=dt, device=dev) + fmin)
            if weights is None:
                p = xp.take(peak_power, top) + 1e-12
                weights = var_y * p / xp.sum(p)
        weights = xp.maximum(weights, 1e-6 * max(var_y, 1e-12))
        return cls(Q, X.shape[1], mixture_weights=weights,
                   mixture_means=xp.stack(means, axis=1),
                   mixture_scales=xp.stack(scales, axis=1), active_dims=active_dims,
                   xp=xp, dtype=dt, device=dev)
