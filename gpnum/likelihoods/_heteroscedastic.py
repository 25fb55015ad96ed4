"""Gaussian noise whose log-variance is a second latent function (chained GPs)."""

from __future__ import annotations

import math

from gpnum.likelihoods._base import Likelihood
from gpnum.special import logsumexp

__all__ = ["HeteroscedasticGaussian"]

_LOG_2PI = math.log(2.0 * math.pi)


class HeteroscedasticGaussian(Likelihood):
    """``p(y | f, g) = N(y; f, exp(g))`` with two latent functions per point (``num_latent = 2``):
    column 0 the mean ``f``, column 1 the log noise variance ``g``.

    Saul, Hensman, Vehtari & Lawrence (2016), "Chained Gaussian processes", AISTATS; Lazaro-Gredilla
    & Titsias (2011) for the variational heteroscedastic GP.

    Parameters
    ----------
    num_gauss_hermite : int, default 20
        Nodes of the Gauss-Hermite rule over ``g`` used by the predictive density.
    xp, dtype, device : optional
        (No parameters: the noise is a latent function.)

    Notes
    -----
    With independent ``f ~ N(mu_f, v_f)``, ``g ~ N(mu_g, v_g)``, ``Q = (y - mu_f)^2 + v_f`` and
    ``E = E[e^{-g}] = exp(-mu_g + v_g/2)``, the expectation is closed form:
    ``E[log p] = -log(2 pi)/2 - mu_g/2 - Q E / 2``, with ``d/dmu_f = (y - mu_f) E``,
    ``d/dv_f = -E/2``, ``d/dmu_g = (Q E - 1)/2``, ``d/dv_g = -Q E/4``.
    The predictive density ``log E_g[N(y; mu_f, v_f + e^g)]`` is a one-dimensional
    Gauss-Hermite rule in log space over ``g``; ``y`` has mean ``mu_f`` and variance
    ``v_f + exp(mu_g + v_g/2)``.
    """

    num_latent = 2

    def __init__(self, num_gauss_hermite=20, *, xp=None, dtype=None, device=None):
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)

    def log_density(self, y, f):
        """``log N(y; f[:, 0], exp(f[:, 1]))`` (n,) for targets ``y`` (n,) and ``f`` (n, 2)."""
        xp, n = self._check_latents(f, f)
        self._check_y_array(y, n)
        yf = y if y.dtype == f.dtype else xp.astype(y, f.dtype)
        r = yf - f[:, 0]
        return -0.5 * (_LOG_2PI + f[:, 1]) - 0.5 * r * r * xp.exp(-f[:, 1])

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Closed form of ``E[log p(y | f, g)]`` (n,) for ``mu``, ``var`` (n, 2), with
        gradients ``"mu"``, ``"var"`` (n, 2)."""
        r = y - mu[:, 0]
        Q = r * r + var[:, 0]
        E = xp.exp(0.5 * var[:, 1] - mu[:, 1])
        QE = Q * E
        ve = -0.5 * (_LOG_2PI + mu[:, 1]) - 0.5 * QE
        if not want_grad:
            return ve
        g_mu = xp.stack([r * E, 0.5 * (QE - 1.0)], axis=1)
        g_var = xp.stack([-0.5 * E, -0.25 * QE], axis=1)
        return ve, {"mu": g_mu, "var": g_var, "params": {}}

    def predictive_log_density(self, y, mu, var, *, check=True):
        """Per-point ``log E_g[N(y; mu_f, v_f + exp(g))]`` (n,), Gauss-Hermite over ``g``."""
        xp, yf = self._validate(y, mu, var, check)

        def block(yb, mb, vb):
            g, t, w, logw, sd = self._nodes(mb[:, 1], vb[:, 1])
            total = vb[:, 0:1] + xp.exp(g)
            r = (yb - mb[:, 0])[:, None]
            logp = -0.5 * (_LOG_2PI + xp.log(total)) - 0.5 * r * r / total
            return (logsumexp(logp + logw, axis=1),)

        return self._map_blocks(block, (yf, mu, var), self.num_gauss_hermite)[0]

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean ``mu_f`` and variance ``v_f + exp(mu_g + v_g/2)`` of ``y``, each (n,)."""
        xp, _ = self._validate(None, mu, var, check)
        return mu[:, 0], var[:, 0] + xp.exp(mu[:, 1] + 0.5 * var[:, 1])
