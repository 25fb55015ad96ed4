"""Prior densities on hyper-parameters, for maximum a posteriori (MAP) fitting.

``gpnum.fit(model, priors={"likelihood.variance": LogNormal(-4.0, 2.0)})`` maximises the
model's objective plus ``sum_k log p_k(theta_k)`` over its parameters instead of the objective
alone. Each prior is a density on the parameter's *natural* (constrained) value, applied
elementwise to every entry of the parameter and summed, so the estimate is the mode of the
posterior density of the natural values: it does not depend on the coordinates the optimiser
works in (log or softplus), because no Jacobian of the transform is added (as GPyTorch's
priors on constrained values; GPflow adds the log-Jacobian by default, which moves the mode
with the transform).

Every density here and its derivative with respect to the natural value ``x`` are written in
closed form; the optimisers chain the derivative through the transform they use
(``d/d log x = x d/dx``; ``d/d u = sigmoid(u) d/dx`` for ``x = softplus(u)``), exactly as they
chain the model's own gradients (:mod:`gpnum.params`).

A prior whose density is zero at 0 (:class:`Gamma` with shape > 1, any :class:`InverseGamma`)
keeps a variance off the boundary where type-II maximum likelihood can put it: the "boundary-avoiding" priors of Chung, Rabe-Hesketh, Dorie,
Gelman & Liu (2013), "A nondegenerate penalized likelihood estimator for variance parameters
in multilevel models", Psychometrika 78(4), 685-709 (who put a Gamma(2, rate) density on a
standard deviation).
"""

from __future__ import annotations

import math

from gpnum.backend import get_namespace

__all__ = ["Prior", "LogNormal", "Gamma", "InverseGamma", "HalfNormal", "Normal",
           "check_priors", "log_prior", "add_log_prior"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _positive_float(owner, name, value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{owner}: {name} must be finite and > 0, got {value!r}")
    return v


def _finite_float(owner, name, value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{owner}: {name} must be finite, got {value!r}")
    return v


class Prior:
    """A univariate density applied to every entry of a parameter.

    Subclasses define ``positive_support`` (True: the density lives on ``x > 0``) and
    ``_logpdf_and_grad(x)`` returning ``log p(x)`` and ``d log p / d x`` elementwise.
    """

    positive_support: bool = True

    def log_density_and_grad(self, x):
        """``sum log p(x_i)`` over every entry of ``x`` and its gradient ``d/dx``.

        Parameters
        ----------
        x : array, any shape
            Natural values (``> 0`` for a prior on positive values).

        Returns
        -------
        value : 0-d array
            The summed log density, in ``x``'s namespace and dtype.
        grad : array, shape of ``x``
            ``d value / d x``.
        """
        xp = get_namespace(x)
        logp, grad = self._logpdf_and_grad(xp, x)
        return xp.sum(logp), grad

    def log_density(self, x):
        """``sum log p(x_i)`` over every entry of ``x`` (a 0-d array)."""
        return self.log_density_and_grad(x)[0]

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(vars(self).items()))))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class LogNormal(Prior):
    """``log x ~ N(mu, sigma^2)``: ``p(x) = exp(-(log x - mu)^2 / (2 sigma^2)) /
    (x sigma sqrt(2 pi))`` for ``x > 0`` (median ``exp(mu)``).

    ``d log p / dx = -(1 + (log x - mu) / sigma^2) / x``. SciPy: ``lognorm(s=sigma,
    scale=exp(mu))``.
    """

    def __init__(self, mu, sigma):
        self.mu = _finite_float("LogNormal", "mu", mu)
        self.sigma = _positive_float("LogNormal", "sigma", sigma)

    def _logpdf_and_grad(self, xp, x):
        logx = xp.log(x)
        z = (logx - self.mu) / self.sigma
        logp = -logx - math.log(self.sigma) - _HALF_LOG_2PI - 0.5 * z * z
        return logp, -(1.0 + z / self.sigma) / x


class Gamma(Prior):
    """Shape ``alpha``, rate ``beta``: ``p(x) = beta^alpha x^(alpha - 1) exp(-beta x) /
    Gamma(alpha)`` for ``x > 0`` (mean ``alpha / beta``, mode ``(alpha - 1) / beta`` for
    ``alpha >= 1``). With ``alpha > 1`` the density is 0 at ``x = 0``, so a MAP estimate stays
    off the boundary (Chung et al. 2013).

    ``d log p / dx = (alpha - 1) / x - beta``. SciPy: ``gamma(alpha, scale=1/beta)``.
    """

    def __init__(self, alpha, beta):
        self.alpha = _positive_float("Gamma", "alpha (shape)", alpha)
        self.beta = _positive_float("Gamma", "beta (rate)", beta)

    def _logpdf_and_grad(self, xp, x):
        a, b = self.alpha, self.beta
        const = a * math.log(b) - math.lgamma(a)
        return const + (a - 1.0) * xp.log(x) - b * x, (a - 1.0) / x - b


class InverseGamma(Prior):
    """Shape ``alpha``, scale ``beta``: ``p(x) = beta^alpha x^(-alpha - 1) exp(-beta / x) /
    Gamma(alpha)`` for ``x > 0`` (mode ``beta / (alpha + 1)``); 0 at ``x = 0`` for every
    ``alpha``, with a heavy right tail.

    ``d log p / dx = -(alpha + 1) / x + beta / x^2``. SciPy: ``invgamma(alpha, scale=beta)``.
    """

    def __init__(self, alpha, beta):
        self.alpha = _positive_float("InverseGamma", "alpha (shape)", alpha)
        self.beta = _positive_float("InverseGamma", "beta (scale)", beta)

    def _logpdf_and_grad(self, xp, x):
        a, b = self.alpha, self.beta
        const = a * math.log(b) - math.lgamma(a)
        inv = 1.0 / x
        return const - (a + 1.0) * xp.log(x) - b * inv, (-(a + 1.0) + b * inv) * inv


class HalfNormal(Prior):
    """Scale ``sigma``: ``p(x) = 2 exp(-x^2 / (2 sigma^2)) / (sigma sqrt(2 pi))`` for
    ``x > 0``; largest at 0, so it shrinks towards 0 rather than away from it.

    ``d log p / dx = -x / sigma^2``. SciPy: ``halfnorm(scale=sigma)``.
    """

    def __init__(self, sigma):
        self.sigma = _positive_float("HalfNormal", "sigma", sigma)

    def _logpdf_and_grad(self, xp, x):
        s = self.sigma
        const = math.log(2.0) - _HALF_LOG_2PI - math.log(s)
        return const - 0.5 * (x / s) ** 2, -x / (s * s)


class Normal(Prior):
    """``N(mu, sigma^2)`` on an unconstrained parameter (a constant mean, mixing weights
    ``W``): ``d log p / dx = -(x - mu) / sigma^2``. SciPy: ``norm(mu, sigma)``."""

    positive_support = False

    def __init__(self, mu, sigma):
        self.mu = _finite_float("Normal", "mu", mu)
        self.sigma = _positive_float("Normal", "sigma", sigma)

    def _logpdf_and_grad(self, xp, x):
        s = self.sigma
        z = (x - self.mu) / s
        return -math.log(s) - _HALF_LOG_2PI - 0.5 * z * z, -z / s


def check_priors(priors, model) -> dict:
    """Validate ``{parameter name: Prior}`` against a model; returns it as a plain dict.

    Raises ``TypeError`` for a value that is not a :class:`Prior`, ``KeyError`` for a name
    that is not one of ``model.parameters()``, and ``ValueError`` for a prior on positive values
    given to a parameter that is not constrained positive, or any prior on the parameters
    natural gradients own (``model.natural_gradient_names``: q's prior is the model's own).
    """
    if priors is None:
        return {}
    if not hasattr(priors, "items"):
        raise TypeError(f"priors: expected a dict {{parameter name: Prior}}, got "
                        f"{type(priors).__name__}")
    params = model.parameters()
    positive = set(model.positive_names())
    q_names = set(getattr(model, "natural_gradient_names", ()) or ())
    out = {}
    for name, prior in priors.items():
        if not isinstance(prior, Prior):
            raise TypeError(f"priors[{name!r}]: expected a gpnum.priors.Prior (LogNormal, "
                            f"Gamma, InverseGamma, HalfNormal, Normal), got {prior!r}")
        if name not in params:
            raise KeyError(f"priors: {name!r} is not a parameter of "
                           f"{type(model).__name__}; its parameters are {sorted(params)}")
        if name in q_names:
            raise ValueError(f"priors: {name!r} is a variational parameter; its prior is the "
                             "model's own and takes no hyper-prior")
        if prior.positive_support and name not in positive:
            raise ValueError(f"priors: {type(prior).__name__} is a density on positive "
                             f"values but {name!r} is not constrained positive (positive "
                             f"parameters: {sorted(positive)}); use Normal")
        out[name] = prior
    return out


def log_prior(priors: dict, params: dict):
    """The summed log prior density and its gradients w.r.t. the natural parameters.

    Parameters
    ----------
    priors : dict
        ``{name: Prior}``, checked by :func:`check_priors`.
    params : dict
        ``{name: array}`` natural values (at least the names in ``priors``).

    Returns
    -------
    value : 0-d array or None
        ``sum_k log p_k(params[k])`` (None when ``priors`` is empty).
    grads : dict
        ``{name: d value / d params[name]}`` for the names in ``priors``.
    """
    value, grads = None, {}
    for name, prior in priors.items():
        v, g = prior.log_density_and_grad(params[name])
        value = v if value is None else value + v
        grads[name] = g
    return value, grads


def add_log_prior(priors: dict, params: dict, value, grads: dict):
    """``(value + log prior, grads + its gradients)``: new objects, the inputs untouched.

    ``grads`` is keyed like ``params`` (the model's ``objective_and_grad``); a parameter with a
    prior and no gradient entry gets the prior's gradient alone.
    """
    if not priors:
        return value, grads
    lp, lg = log_prior(priors, params)
    out = dict(grads)
    for name, g in lg.items():
        out[name] = out[name] + g if name in out else g
    return value + lp, out
