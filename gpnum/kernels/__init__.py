"""Covariance functions with hand-derived gradients w.r.t. hyper-parameters and inputs.

Every kernel gives ``k(X1, X2)`` / ``k.gram(X1, X2)`` (n1, n2), ``k.diag(X)`` (n,),
``k.gram_vjp(G, X1, X2)`` and ``k.diag_vjp(g, X)``; parameters are natural-form
(:class:`gpnum.params.Parameterised`, softplus-transformed for the optimisers). See
``docs/kernels.md``.
"""

from gpnum.kernels._arccos import ArcCosine
from gpnum.kernels._base import Kernel
from gpnum.kernels._composite import Product, Sum
from gpnum.kernels._polynomial import Polynomial
from gpnum.kernels._stationary import RBF, Matern12, Matern32, Matern52, Stationary

__all__ = [
    "ArcCosine",
    "Kernel",
    "Matern12",
    "Matern32",
    "Matern52",
    "Polynomial",
    "Product",
    "RBF",
    "Stationary",
    "Sum",
]
