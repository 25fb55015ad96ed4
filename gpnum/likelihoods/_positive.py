"""Positive data (durations, sizes): exponential and gamma observations with mean ``exp(f)``."""

from __future__ import annotations

from gpnum.backend import get_namespace
from gpnum.likelihoods._base import Likelihood
from gpnum.likelihoods._targets import describe_bad
from gpnum.special import digamma, lgamma

__all__ = ["Exponential", "Gamma"]


class _PositiveTargets:
    def _targets_ok(self, xp, y):
        if not xp.isdtype(y.dtype, "real floating"):
            return xp.all(y > 0)
        return xp.all(xp.isfinite(y) & (y > 0.0))

    def _targets_message(self, xp, y):
        if not xp.isdtype(y.dtype, "real floating"):
            return describe_bad(self, xp, y, ~(y > 0), "positive")
        return describe_bad(self, xp, y, ~(xp.isfinite(y) & (y > 0.0)), "positive and finite")


class Exponential(_PositiveTargets, Likelihood):
    """``y ~ Exponential`` with mean ``exp(f)``: ``p(y | f) = exp(-f) exp(-y exp(-f))``, ``y > 0``.

    Parameters
    ----------
    num_gauss_hermite : int, default 20
        Nodes of the Gauss-Hermite rule of the predictive density.
    xp, dtype, device : optional
        Namespace, dtype and device (no parameters).

    Notes
    -----
    ``E[log p] = -mu - y exp(-mu + var/2)`` in closed form (log-normal moment of ``e^-f``), so
    ``d/dmu = -1 + y exp(-mu + var/2)``, ``d/dvar = -y exp(-mu + var/2)/2``. The predictive
    density uses Gauss-Hermite quadrature. ``y`` has mean ``exp(mu + var/2)`` and variance
    ``E[e^{2f}] + Var[e^f]``.
    """

    def __init__(self, num_gauss_hermite=20, *, xp=None, dtype=None, device=None):
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        t = y * xp.exp(-f)
        logp = -f - t
        return (logp, None, None) if not want_grad else (logp, t - 1.0, {})

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Closed form: ``ve = -mu - y exp(-mu + var/2)`` (n,), with gradients ``"mu"``,
        ``"var"`` (n,)."""
        t = y * xp.exp(0.5 * var - mu)
        ve = -mu - t
        return ve if not want_grad else (ve, {"mu": t - 1.0, "var": -0.5 * t, "params": {}})

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean ``exp(mu + var/2)`` and variance ``E[e^{2f}] + Var[e^f]`` of ``y``, each (n,)."""
        xp, _ = self._validate(None, mu, var, check)
        m1 = xp.exp(mu + 0.5 * var)
        return m1, m1 * m1 * (xp.exp(var) + xp.expm1(var))


class Gamma(_PositiveTargets, Likelihood):
    """Gamma observations with shape ``k`` and mean ``exp(f)`` (scale ``exp(f)/k``), ``y > 0``.

    ``log p(y | f) = k log k - lgamma(k) - k f + (k - 1) log y - k y exp(-f)``.

    Parameters
    ----------
    shape : float or array (), default 1.0
        ``k > 0`` (learnable; natural parameter ``"shape"``, softplus). ``k = 1`` is
        :class:`Exponential`; the coefficient of variation of ``y`` given ``f`` is ``1/sqrt(k)``.
    num_gauss_hermite : int, default 20
        Nodes of the Gauss-Hermite rule of the predictive density.
    xp, dtype, device : optional

    Notes
    -----
    Closed-form expectation: ``E[log p] = k log k - lgamma(k) - k mu + (k-1) log y
    - k y exp(-mu + var/2)``; ``d/dk = log k + 1 - psi(k) - mu + log y - y exp(-mu + var/2)``
    (summed over points). ``y`` has mean ``exp(mu + var/2)`` and variance
    ``E[e^{2f}]/k + Var[e^f]``.
    """

    _param_names = ("shape",)
    _positive = ("shape",)

    def __init__(self, shape=1.0, num_gauss_hermite=20, *, xp=None, dtype=None, device=None):
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)
        self.shape = shape

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        k = params["shape"]
        t = y * xp.exp(-f)
        logy = xp.log(y)
        logp = k * xp.log(k) - lgamma(k) - k * f + (k - 1.0) * logy - k * t
        if not want_grad:
            return logp, None, None
        d_k = xp.log(k) + 1.0 - digamma(k) - f + logy - t
        return logp, k * (t - 1.0), {"shape": d_k}

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Closed form (see the class notes) (n,), with gradients ``"mu"``, ``"var"`` (n,) and
        ``"params": {"shape": ()}``."""
        k = self._params_like(mu)["shape"]
        t = y * xp.exp(0.5 * var - mu)
        logy = xp.log(y)
        logk = xp.log(k)
        ve = k * logk - lgamma(k) - k * mu + (k - 1.0) * logy - k * t
        if not want_grad:
            return ve
        g_k = xp.sum(logk + 1.0 - digamma(k) - mu + logy - t)
        return ve, {"mu": k * (t - 1.0), "var": -0.5 * k * t,
                    "params": {"shape": xp.reshape(g_k, tuple(self.shape.shape))}}

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean ``exp(mu + var/2)`` and variance ``E[e^{2f}]/k + Var[e^f]`` of ``y``, each (n,)."""
        xp, _ = self._validate(None, mu, var, check)
        k = self._params_like(mu)["shape"]
        m1 = xp.exp(mu + 0.5 * var)
        return m1, m1 * m1 * (xp.exp(var) / k + xp.expm1(var))
