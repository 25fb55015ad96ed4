"""Log multivariate gamma and its derivative on any array namespace, for Wishart expectations.

``digamma`` and ``lgamma`` themselves are the project's one implementation,
:mod:`gpnum.likelihoods._special` (shift by recurrence, then the Stirling series), re-exported
here. The variational updates need them only on small parameter arrays ((K,), (K, K), (K, D)),
but those live on the device of the data, so they are computed there rather than round-tripped
through SciPy (NumPy arrays, already on the host, go to SciPy's compiled functions: one call
instead of about 30 array operations, paid once per SVI step). Arguments must be positive (all
uses here are Dirichlet, Gamma and Wishart parameters).
"""

from __future__ import annotations

import math

from gpnum.likelihoods._special import digamma, lgamma

__all__ = ["digamma", "lgamma", "multigammaln", "multidigamma"]


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
