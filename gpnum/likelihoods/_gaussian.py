"""Gaussian observation noise, everything in closed form."""

from __future__ import annotations

import math

from gpnum.backend import get_namespace
from gpnum.likelihoods._base import Likelihood

__all__ = ["Gaussian"]

_LOG_2PI = math.log(2.0 * math.pi)


class Gaussian(Likelihood):
    """``p(y | f) = N(y; f, variance)``.

    Parameters
    ----------
    variance : float or array (), default 1.0
        Noise variance ``sigma^2 > 0`` (natural parameter ``"variance"``; softplus transform).
    xp, dtype, device : optional
        Namespace, dtype and device of the parameter (default: ``GPNUM_BACKEND``/``GPNUM_DTYPE``).

    Notes
    -----
    No quadrature: ``E[log N(y; f, s2)] = -log(2 pi s2)/2 - ((y - mu)^2 + var)/(2 s2)``,
    ``log E[N(y; f, s2)] = log N(y; mu, var + s2)``, and ``y | mu, var ~ N(mu, var + s2)``.
    """

    _param_names = ("variance",)
    _positive = ("variance",)

    def __init__(self, variance=1.0, *, xp=None, dtype=None, device=None):
        self._init_likelihood(None, xp, dtype, device)
        self.variance = variance

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        s2 = params["variance"]
        r = y - f
        logp = -0.5 * (_LOG_2PI + xp.log(s2)) - 0.5 * (r * r) / s2
        if not want_grad:
            return logp, None, None
        return logp, r / s2, {"variance": -0.5 / s2 + 0.5 * (r * r) / (s2 * s2)}

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Closed form: ``ve = -log(2 pi s2)/2 - ((y - mu)^2 + var)/(2 s2)``, with
        ``d/dmu = (y - mu)/s2``, ``d/dvar = -1/(2 s2)`` and
        ``d sum / d s2 = sum(-1/(2 s2) + ((y - mu)^2 + var)/(2 s2^2))``."""
        s2 = self._params_like(mu)["variance"]
        r = y - mu
        sq = r * r + var
        ve = -0.5 * (_LOG_2PI + xp.log(s2)) - 0.5 * sq / s2
        if not want_grad:
            return ve
        g_s2 = xp.sum(-0.5 / s2 + 0.5 * sq / (s2 * s2))
        grads = {"mu": r / s2, "var": xp.zeros_like(var) - 0.5 / s2,
                 "params": {"variance": xp.reshape(xp.asarray(g_s2), tuple(self.variance.shape))}}
        return ve, grads

    def predictive_log_density(self, y, mu, var, *, check=True):
        """Per-point ``log N(y; mu, var + variance)`` (n,)."""
        xp, yf = self._validate(y, mu, var, check)
        total = var + self._params_like(mu)["variance"]
        r = yf - mu
        return -0.5 * (_LOG_2PI + xp.log(total)) - 0.5 * (r * r) / total

    def predict_mean_and_var(self, mu, var, *, check=True):
        """``(mu, var + variance)``, each (n,)."""
        self._validate(None, mu, var, check)
        return mu, var + self._params_like(mu)["variance"]
