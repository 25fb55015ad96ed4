"""Proportions in (0, 1): beta observations with mean ``sigmoid(f)`` and a learned precision."""

from __future__ import annotations

from gpnum.backend import get_namespace
from gpnum.likelihoods._base import Likelihood
from gpnum.likelihoods._targets import describe_bad
from gpnum.special import digamma, lgamma

__all__ = ["Beta"]


def _sigmoid_pair(f):
    xp = get_namespace(f)
    e = xp.exp(-xp.abs(f))
    inv = 1.0 / (1.0 + e)
    pos = f >= 0.0
    return xp.where(pos, inv, e * inv), xp.where(pos, e * inv, inv)


class Beta(Likelihood):
    """``y ~ Beta(m phi, (1 - m) phi)`` with ``m = sigmoid(f)``, for ``y`` strictly in (0, 1).

    Parameters
    ----------
    precision : float or array (), default 10.0
        ``phi > 0`` (learnable; natural parameter ``"precision"``, softplus): given ``f``,
        ``Var[y] = m (1 - m) / (1 + phi)``.
    num_gauss_hermite : int, default 20
    xp, dtype, device : optional

    Notes
    -----
    With ``a = m phi``, ``b = (1 - m) phi``:
    ``log p = lgamma(phi) - lgamma(a) - lgamma(b) + (a - 1) log y + (b - 1) log(1 - y)``,
    ``d/df = phi m (1 - m) (psi(b) - psi(a) + log y - log(1 - y))``,
    ``d/dphi = psi(phi) - m psi(a) - (1 - m) psi(b) + m log y + (1 - m) log(1 - y)``.
    Expectations by the differentiated Gauss-Hermite rule (docs/likelihoods.md); the moments of
    ``y`` by the same rule. Targets of exactly 0 or 1 have zero density for every ``f``
    and are refused (squeeze them, e.g. ``(y (n - 1) + 1/2) / n``, Smithson & Verkuilen 2006).
    """

    _param_names = ("precision",)
    _positive = ("precision",)

    def __init__(self, precision=10.0, num_gauss_hermite=20, *, xp=None, dtype=None,
                 device=None):
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)
        self.precision = precision

    def _targets_ok(self, xp, y):
        if not xp.isdtype(y.dtype, "real floating"):
            return xp.all(y != y)  # integers and booleans are never strictly inside (0, 1)
        return xp.all((y > 0.0) & (y < 1.0))

    def _targets_message(self, xp, y):
        inside = (y > 0.0) & (y < 1.0) if xp.isdtype(y.dtype, "real floating") else (y != y)
        return describe_bad(self, xp, y, ~inside, "strictly between 0 and 1")

    def _log_density_and_grads(self, y, f, params, want_grad):
        xp = get_namespace(f)
        phi = params["precision"]
        m, m1 = _sigmoid_pair(f)
        a, b = m * phi, m1 * phi
        logy, log1my = xp.log(y), xp.log1p(-y)
        logp = lgamma(phi) - lgamma(a) - lgamma(b) + (a - 1.0) * logy + (b - 1.0) * log1my
        if not want_grad:
            return logp, None, None
        psi_a, psi_b = digamma(a), digamma(b)
        d_f = phi * m * m1 * (psi_b - psi_a + logy - log1my)
        d_phi = digamma(phi) - m * psi_a - m1 * psi_b + m * logy + m1 * log1my
        return logp, d_f, {"precision": d_phi}

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean ``E[m]`` and variance ``E[m (1 - m)]/(1 + phi) + Var[m]`` of ``y``, each (n,),
        by the Gauss-Hermite rule."""
        xp, _ = self._validate(None, mu, var, check)
        phi = self._params_like(mu)["precision"]

        def block(mb, vb):
            f, t, w, logw, sd = self._nodes(mb, vb)
            m, m1 = _sigmoid_pair(f)
            mean = m @ w
            # Var[m] = E[(m - mean)^2]: centred, no cancellation
            centred = m - mean[:, None]
            return mean, ((m * m1) @ w) / (1.0 + phi) + (centred * centred) @ w

        return self._map_blocks(block, (mu, var), self.num_gauss_hermite)
