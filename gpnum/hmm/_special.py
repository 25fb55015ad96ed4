"""``digamma`` and ``lgamma`` on any array namespace, for Dirichlet and Wishart expectations.

The standard has neither. The variational updates need them only on small parameter arrays
((K,), (K, K), (K, D)), but those live on the device of the data, so they are computed there by
series rather than round-tripped through SciPy. Both shift the argument up to ``x + 12`` by the
recurrences ``psi(x) = psi(x + 1) - 1/x`` and ``lgamma(x) = lgamma(x + 1) - log x`` and then use
the asymptotic (Stirling) series, whose first omitted term at ``x >= 12`` is below 2e-13.
Arguments must be positive (all uses here are Dirichlet, Gamma and Wishart parameters).
"""

from __future__ import annotations

import math

from gpnum.backend import get_namespace

__all__ = ["digamma", "lgamma", "multigammaln", "multidigamma"]

_SHIFT = 12
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def digamma(x):
    """``psi(x) = d/dx log Gamma(x)`` elementwise for ``x > 0``."""
    xp = get_namespace(x)
    acc = xp.zeros_like(x)
    z = x
    for _ in range(_SHIFT):
        acc = acc - 1.0 / z
        z = z + 1.0
    inv2 = 1.0 / (z * z)
    series = inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 * (1.0 / 252.0 - inv2 * (
        1.0 / 240.0 - inv2 * (1.0 / 132.0)))))
    return acc + xp.log(z) - 0.5 / z - series


def lgamma(x):
    """``log Gamma(x)`` elementwise for ``x > 0``."""
    xp = get_namespace(x)
    acc = xp.zeros_like(x)
    z = x
    for _ in range(_SHIFT):
        acc = acc - xp.log(z)  # a sum of logs, not the log of a product: no overflow
        z = z + 1.0
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 * (
        1.0 / 1680.0))))
    return acc + (z - 0.5) * xp.log(z) - z + _HALF_LOG_2PI + series


def multigammaln(a, dim: int):
    """Log multivariate gamma ``log Gamma_D(a)`` elementwise, for ``a > (D - 1) / 2``."""
    out = (dim * (dim - 1) / 4.0) * math.log(math.pi)
    for d in range(dim):
        out = out + lgamma(a - 0.5 * d)
    return out


def multidigamma(a, dim: int):
    """``sum_{d=0}^{D-1} psi(a - d / 2)`` elementwise (the derivative of ``multigammaln``)."""
    out = digamma(a)
    for d in range(1, dim):
        out = out + digamma(a - 0.5 * d)
    return out
