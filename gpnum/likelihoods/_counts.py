"""Count data: Poisson and negative-binomial observations with a log link."""

from __future__ import annotations

from gpnum.backend import device_of, get_namespace
from gpnum.likelihoods._base import Likelihood
from gpnum.likelihoods._targets import describe_bad
from gpnum.special import digamma, lgamma

__all__ = ["Poisson", "NegativeBinomial"]


class _CountTargets:
    """Targets are non-negative integers (any real, integer or boolean dtype)."""

    def _targets_ok(self, xp, y):
        if xp.isdtype(y.dtype, "bool"):
            return xp.asarray(True, device=device_of(y))
        if xp.isdtype(y.dtype, "integral"):
            return xp.all(y >= 0)
        return xp.all(xp.isfinite(y) & (y >= 0.0) & (xp.floor(y) == y))

    def _targets_message(self, xp, y):
        if xp.isdtype(y.dtype, "integral"):
            bad = y < 0
        else:
            bad = ~(xp.isfinite(y) & (y >= 0.0) & (xp.floor(y) == y))
        return describe_bad(self, xp, y, bad, "non-negative integer counts")


def _log_mean_moments(mu, var):
    """``E[exp(f)]``, ``E[exp(2 f)]`` for ``f ~ N(mu, var)`` (log-normal moments)."""
    xp = get_namespace(mu)
    return xp.exp(mu + 0.5 * var), xp.exp(2.0 * mu + 2.0 * var)


class Poisson(_CountTargets, Likelihood):
    """``y ~ Poisson(exp(f))`` for counts ``y`` in {0, 1, 2, ...}.

    Parameters
    ----------
    num_gauss_hermite : int, default 20
        Nodes of the Gauss-Hermite rule of the predictive density (the variational expectation
        is in closed form).
    xp, dtype, device : optional
        Namespace, dtype and device (no parameters: ``params`` gradients are an empty dict).

    Notes
    -----
    ``log p(y | f) = y f - exp(f) - log y!``, so under ``f ~ N(mu, var)``
    ``E[log p] = y mu - exp(mu + var/2) - log y!`` exactly (the log-normal mean), with
    ``d/dmu = y - exp(mu + var/2)`` and ``d/dvar = -exp(mu + var/2)/2``. The predictive
    density ``log E[p(y | f)]`` has no closed form (a Poisson-log-normal) and uses
    Gauss-Hermite quadrature in log space. ``y`` has mean ``E[e^f] = exp(mu + var/2)`` and
    variance ``E[e^f] + Var[e^f]``.
    """

    def __init__(self, num_gauss_hermite=20, *, xp=None, dtype=None, device=None):
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        rate = xp.exp(f)
        logp = y * f - rate - lgamma(y + 1.0)
        if not want_grad:
            return logp, None, None
        return logp, y - rate, {}

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Closed form: ``ve = y mu - exp(mu + var/2) - log y!``, with gradients
        ``"mu"`` ``y - exp(mu + var/2)`` and ``"var"`` ``-exp(mu + var/2)/2`` (n,)."""
        mean_rate = xp.exp(mu + 0.5 * var)
        ve = y * mu - mean_rate - lgamma(y + 1.0)
        if not want_grad:
            return ve
        return ve, {"mu": y - mean_rate, "var": -0.5 * mean_rate, "params": {}}

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean ``exp(mu + var/2)`` and variance ``mean + (exp(var) - 1) mean^2`` of ``y``, (n,)."""
        xp, _ = self._validate(None, mu, var, check)
        m1, _ = _log_mean_moments(mu, var)
        return m1, m1 + xp.expm1(var) * m1 * m1


class NegativeBinomial(_CountTargets, Likelihood):
    """Negative-binomial counts with mean ``exp(f)`` and variance ``m + dispersion m^2``.

    ``p(y | f) = Gamma(y + r) / (Gamma(r) y!) (r / (r + m))^r (m / (r + m))^y``, ``m = exp(f)``,
    ``r = 1 / dispersion`` (the NB2 parametrisation; dispersion -> 0 is the Poisson).

    Parameters
    ----------
    dispersion : float or array (), default 1.0
        ``alpha > 0`` (learnable; natural parameter ``"dispersion"``, softplus).
    num_gauss_hermite : int, default 20
        Nodes of the Gauss-Hermite rule.
    xp, dtype, device : optional
        Namespace, dtype and device of the parameter.

    Notes
    -----
    With ``L = log(r + e^f)`` (computed as a log-add-exp) and ``s = e^f / (r + e^f)``:
    ``log p = lgamma(y + r) - lgamma(r) - lgamma(y + 1) + r log r + y f - (r + y) L``,
    ``d/df = y - (r + y) s`` and ``d/dr = psi(y + r) - psi(r) + log r + 1 - L - (r + y)/(r + e^f)``;
    ``d/dalpha = -r^2 d/dr``. Expectations use the differentiated Gauss-Hermite rule
    (docs/likelihoods.md). ``y`` has mean ``exp(mu + var/2)`` and variance
    ``E[m] + alpha E[m^2] + Var[m]``.
    """

    _param_names = ("dispersion",)
    _positive = ("dispersion",)

    def __init__(self, dispersion=1.0, num_gauss_hermite=20, *, xp=None, dtype=None,
                 device=None):
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)
        self.dispersion = dispersion

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        alpha = params["dispersion"]
        r = 1.0 / alpha
        log_r = -xp.log(alpha)
        # L = log(r + e^f) = max(log r, f) + log1p(exp(-|f - log r|))
        d = f - log_r
        e = xp.exp(-xp.abs(d))
        L = xp.maximum(f, log_r) + xp.log1p(e)
        logp = (lgamma(y + r) - lgamma(r) - lgamma(y + 1.0) + r * log_r + y * f
                - (r + y) * L)
        if not want_grad:
            return logp, None, None
        inv = 1.0 / (1.0 + e)
        s = xp.where(d >= 0.0, inv, e * inv)  # sigmoid(f - log r) = e^f / (r + e^f)
        d_f = y - (r + y) * s
        # (r + y) / (r + e^f) = (r + y) (1 - s) / r
        d_r = digamma(y + r) - digamma(r) + log_r + 1.0 - L - (r + y) * (1.0 - s) / r
        return logp, d_f, {"dispersion": -(r * r) * d_r}

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean ``exp(mu + var/2)`` and variance ``E[m] + alpha E[m^2] + Var[m]`` of ``y``, (n,)."""
        xp, _ = self._validate(None, mu, var, check)
        alpha = self._params_like(mu)["dispersion"]
        m1, m2 = _log_mean_moments(mu, var)
        return m1, m1 + alpha * m2 + xp.expm1(var) * m1 * m1
