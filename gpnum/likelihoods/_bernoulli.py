"""Binary classification: Bernoulli observations through a probit or logit link."""

from __future__ import annotations

from gpnum.backend import device_of, get_namespace, to_numpy
from gpnum.likelihoods._base import Likelihood
from gpnum.special import log_ndtr, log_ndtr_and_grad, ndtr

__all__ = ["Bernoulli"]

_LINKS = ("probit", "logit")


def _log_sigmoid_and_sigmoid_minus(z):
    """``log sigmoid(z)`` and ``sigmoid(-z)`` from one ``exp(-|z|)``: no overflow, full
    relative accuracy in both tails, and cheaper than ``logaddexp`` (slow in NumPy)."""
    xp = get_namespace(z)
    e = xp.exp(-xp.abs(z))
    log_sig = xp.minimum(z, 0.0) - xp.log1p(e)
    inv = 1.0 / (1.0 + e)
    return log_sig, xp.where(z >= 0.0, e * inv, inv)


def _sigmoid_pair(z):
    """``sigmoid(z)`` and ``sigmoid(-z)``, each with full relative accuracy."""
    xp = get_namespace(z)
    e = xp.exp(-xp.abs(z))
    inv = 1.0 / (1.0 + e)
    small = e * inv
    pos = z >= 0.0
    return xp.where(pos, inv, small), xp.where(pos, small, inv)


class Bernoulli(Likelihood):
    """``p(y = 1 | f) = link(f)`` for labels ``y`` in {0, 1}.

    Parameters
    ----------
    link : {"probit", "logit"}, default "probit"
        ``Phi(f)`` (standard normal CDF) or ``sigmoid(f)``.
    num_gauss_hermite : int, default 20
        Nodes of the Gauss-Hermite rule.
    xp, dtype, device : optional
        Namespace, dtype and device (this likelihood has no parameters; ``params`` gradients
        are an empty dict).

    Notes
    -----
    ``log p(y | f) = log link(s f)`` with ``s = 2 y - 1``, evaluated in log space
    (:func:`~gpnum.likelihoods.log_ndtr`, ``-logaddexp(0, -s f)``) so that confident wrong
    predictions give large finite penalties instead of ``log(0)``.
    Variational expectations use Gauss-Hermite quadrature. Relative error against
    ``scipy.integrate.quad``, float64, ``|mu| <= 3``, 40 random points, 20 nodes (default):
    probit max 5e-12 at ``var = 0.5``, 7e-9 at ``var = 1`` (median 2e-11), 6e-7 at ``var = 2``;
    logit max 2e-14, 5e-11 and 3e-8 at the same variances; 100 nodes reach 1e-15 throughout.
    Probit predictions are exact: ``P(y = 1) = Phi(mu / sqrt(1 + var))``; logit predictions use
    the same rule (max relative error 4e-10 at ``var = 1``, 2e-7 at ``var = 2``, 20 nodes).
    """

    def __init__(self, link="probit", num_gauss_hermite=20, *, xp=None, dtype=None,
                 device=None):
        if link not in _LINKS:
            raise ValueError(f"link: expected one of {_LINKS}, got {link!r}")
        self.link = link
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)

    # -- targets -------------------------------------------------------------------------------

    def _targets_ok(self, xp, y):
        if xp.isdtype(y.dtype, "bool"):
            return xp.asarray(True, device=device_of(y))
        if xp.isdtype(y.dtype, "integral"):
            return xp.all((y == 0) | (y == 1))
        return xp.all((y == 0.0) | (y == 1.0))

    def _targets_message(self, xp, y):
        if xp.isdtype(y.dtype, "real floating") and not bool(xp.all(xp.isfinite(y))):
            return super()._targets_message(xp, y)
        zero, one = (0, 1) if xp.isdtype(y.dtype, "integral") else (0.0, 1.0)
        bad = (y != zero) & (y != one)
        n_bad = int(xp.sum(xp.astype(bad, xp.int32)))
        lo, hi = to_numpy(xp.min(y)).item(), to_numpy(xp.max(y)).item()
        return (f"y: expected labels in {{0, 1}}, got {n_bad} value(s) outside (y ranges over "
                f"[{lo}, {hi}])")

    # -- log-density at the nodes --------------------------------------------------------------

    def _log_density_and_grads(self, y, f, params, want_grad):
        s = 2.0 * y - 1.0
        z = s * f
        if self.link == "probit":
            if not want_grad:
                return log_ndtr(z), None, None
            logp, dlogp = log_ndtr_and_grad(z)
            return logp, s * dlogp, {}
        logp, sig_minus = _log_sigmoid_and_sigmoid_minus(z)
        if not want_grad:
            return logp, None, None
        return logp, s * sig_minus, {}

    # -- predictions ---------------------------------------------------------------------------

    def predictive_log_density(self, y, mu, var, *, check=True):
        """Per-point ``log P(y | mu, var)`` (n,); exact for probit,
        ``log Phi(s mu / sqrt(1 + var))``, Gauss-Hermite in log space for logit."""
        if self.link == "logit":
            return super().predictive_log_density(y, mu, var, check=check)
        xp, yf = self._validate(y, mu, var, check)
        return log_ndtr((2.0 * yf - 1.0) * mu / xp.sqrt(1.0 + var))

    def predict_mean_and_var(self, mu, var, *, check=True):
        """``(p, p (1 - p))`` with ``p = P(y = 1)``, each (n,).

        ``1 - p`` is computed as ``P(y = 0)`` directly, so ``p (1 - p)`` keeps its relative
        accuracy when ``p`` is close to one.
        """
        xp, _ = self._validate(None, mu, var, check)
        if self.link == "probit":
            z = mu / xp.sqrt(1.0 + var)
            p1, p0 = ndtr(z), ndtr(-z)
        else:
            def block(mb, vb):
                f, t, w, logw, sd = self._nodes(mb, vb)
                sig_plus, sig_minus = _sigmoid_pair(f)
                return sig_plus @ w, sig_minus @ w

            p1, p0 = self._map_blocks(block, (mu, var), self.num_gauss_hermite)
        return p1, p1 * p0

    def __repr__(self):
        return f"Bernoulli(link={self.link!r}, num_gauss_hermite={self.num_gauss_hermite})"
