"""Laplace (double-exponential) observation noise, in closed form."""

from __future__ import annotations

import math

from gpnum.backend import get_namespace
from gpnum.likelihoods._base import Likelihood
from gpnum.special import log_ndtr, logsumexp, ndtr

__all__ = ["Laplace"]

_LOG_2 = math.log(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class Laplace(Likelihood):
    """``p(y | f) = exp(-|y - f| / b) / (2 b)``: robust regression with a learned scale.

    Parameters
    ----------
    scale : float or array (), default 1.0
        ``b > 0`` (learnable; natural parameter ``"scale"``, softplus); noise variance ``2 b^2``.
    xp, dtype, device : optional

    Notes
    -----
    Everything is in closed form (no quadrature: the density has a kink that a Gauss-Hermite
    rule resolves poorly). With ``r = y - mu``, ``s = sqrt(var)``, ``z = r/s``, the folded
    normal mean ``M = E|y - f| = r (2 Phi(z) - 1) + 2 s phi(z)`` gives
    ``E[log p] = -log(2 b) - M/b``, ``dM/dr = 2 Phi(z) - 1``, ``dM/dvar = phi(z)/s``.
    The predictive density is
    ``E[p] = exp(var/(2 b^2)) [e^{-r/b} Phi(z - s/b) + e^{r/b} Phi(-z - s/b)] / (2 b)``,
    evaluated in log space with :func:`~gpnum.likelihoods.log_ndtr`.
    """

    _param_names = ("scale",)
    _positive = ("scale",)

    def __init__(self, scale=1.0, *, xp=None, dtype=None, device=None):
        self._init_likelihood(None, xp, dtype, device)
        self.scale = scale

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        b = params["scale"]
        r = y - f
        logp = -_LOG_2 - xp.log(b) - xp.abs(r) / b
        if not want_grad:
            return logp, None, None
        return logp, xp.sign(r) / b, {"scale": -1.0 / b + xp.abs(r) / (b * b)}

    def _folded(self, y, mu, var):
        xp = get_namespace(mu)
        r = y - mu
        s = xp.sqrt(var)
        z = r / s
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * z * z)
        # 2 Phi(z) - 1 = Phi(z) - Phi(-z): accurate in both tails
        odd = ndtr(z) - ndtr(-z)
        return r * odd + 2.0 * s * pdf, odd, pdf / s

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Closed form: ``ve = -log(2 b) - E|y - f| / b`` (n,), with gradients ``"mu"``,
        ``"var"`` (n,) and ``"params": {"scale": ()}``."""
        b = self._params_like(mu)["scale"]
        M, dM_dr, dM_dvar = self._folded(y, mu, var)
        ve = -_LOG_2 - xp.log(b) - M / b
        if not want_grad:
            return ve
        g_b = xp.sum(-1.0 / b + M / (b * b))
        return ve, {"mu": dM_dr / b, "var": -dM_dvar / b,
                    "params": {"scale": xp.reshape(g_b, tuple(self.scale.shape))}}

    def predictive_log_density(self, y, mu, var, *, check=True):
        """Per-point ``log E[p(y | f)]`` (n,), closed form (see the class notes)."""
        xp, yf = self._validate(y, mu, var, check)
        b = self._params_like(mu)["scale"]
        r = yf - mu
        s = xp.sqrt(var)
        z = r / s
        base = 0.5 * var / (b * b) - _LOG_2 - xp.log(b)
        terms = xp.stack([-r / b + log_ndtr(z - s / b), r / b + log_ndtr(-z - s / b)], axis=1)
        return base + logsumexp(terms, axis=1)

    def predict_mean_and_var(self, mu, var, *, check=True):
        """``(mu, var + 2 b^2)``, each (n,)."""
        self._validate(None, mu, var, check)
        b = self._params_like(mu)["scale"]
        return mu, var + 2.0 * b * b
