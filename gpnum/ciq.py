"""Contour integral quadrature (CIQ): ``K^{-1/2} B`` and ``K^{1/2} B`` with one msMINRES call.

The implementation lives in :mod:`gpnum.linalg` (``K^{-1/2} B`` by the rational quadrature of
Hale, Higham & Trefethen 2008 over shifted systems that share one Krylov space, Pleiss,
Jankowiak, Eriksson, Damle & Gardner 2020, "Fast matrix square roots with applications to
Gaussian processes and Bayesian optimization", NeurIPS); this module keeps its names importable
from ``gpnum.ciq``:

- :func:`inv_sqrt_matmul`, :func:`sqrt_matmul`: the forward calls, returning a
  :class:`CIQResult`;
- :func:`inv_sqrt_matmul_vjp`, :func:`sqrt_matmul_vjp`: their backward passes;
- :func:`sample_mvn`: draws of ``N(mean, K)`` as ``K^{1/2} eps``;
- :func:`ciq_quadrature`: the quadrature's shifts and weights;
- :class:`SearchStart`: where a deflation's eigenpair search ended, to warm-start the next.
"""

from gpnum.linalg import (
    CIQResult,
    SearchStart,
    ciq_quadrature,
    inv_sqrt_matmul,
    inv_sqrt_matmul_vjp,
    sample_mvn,
    sqrt_matmul,
    sqrt_matmul_vjp,
)

__all__ = [
    "CIQResult",
    "SearchStart",
    "ciq_quadrature",
    "inv_sqrt_matmul",
    "inv_sqrt_matmul_vjp",
    "sqrt_matmul",
    "sqrt_matmul_vjp",
    "sample_mvn",
]
