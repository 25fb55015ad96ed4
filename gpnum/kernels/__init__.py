"""Covariance functions with hand-derived gradients w.r.t. hyper-parameters and inputs.

Every kernel gives ``k(X1, X2)`` / ``k.gram(X1, X2)`` (n1, n2), ``k.diag(X)`` (n,),
``k.gram_vjp(G, X1, X2)`` and ``k.diag_vjp(g, X)``; parameters are natural-form
(:class:`gpnum.params.Parameterised`, softplus-transformed for the optimisers); every kernel
takes ``active_dims=`` (the input columns it sees). :func:`from_expression` builds a kernel from
a string such as ``"rbf + rbf*periodic + rq + white"``. See ``docs/kernels.md``.
"""

from gpnum.kernels._arccos import ArcCosine
from gpnum.kernels._base import Kernel
from gpnum.kernels._changepoints import ChangePoints
from gpnum.kernels._composite import Product, Sum
from gpnum.kernels._coregion import Coregion
from gpnum.kernels._expression import KERNEL_NAMES, from_expression
from gpnum.kernels._group import SameGroup
from gpnum.kernels._linear import Constant, Linear, White
from gpnum.kernels._multioutput import ICM, LMC, IndependentOutputs, MultiOutputKernel
from gpnum.kernels._nested import ParentKernel
from gpnum.kernels._periodic import Cosine, Periodic
from gpnum.kernels._periodic_series import PeriodicSeries
from gpnum.kernels._polynomial import Polynomial
from gpnum.kernels._rq import RationalQuadratic
from gpnum.kernels._sho import SHO
from gpnum.kernels._spectral import SpectralMixture
from gpnum.kernels._state_space import (
    StateSpaceForm,
    has_state_space_form,
    register_state_space,
    state_space_form,
)
from gpnum.kernels._stationary import RBF, Matern12, Matern32, Matern52, Stationary
from gpnum.kernels._structure import (
    Grid,
    SkiInterpolation,
    grid_from_inputs,
    grid_operator,
    ski_interpolation,
    ski_operator,
)

#: Another name of :class:`Matern12` (the exponential, Ornstein-Uhlenbeck kernel).
Exponential = Matern12

__all__ = [
    "ArcCosine",
    "ChangePoints",
    "Constant",
    "Coregion",
    "Cosine",
    "Exponential",
    "Grid",
    "SkiInterpolation",
    "ICM",
    "IndependentOutputs",
    "LMC",
    "MultiOutputKernel",
    "KERNEL_NAMES",
    "Kernel",
    "Linear",
    "Matern12",
    "Matern32",
    "Matern52",
    "ParentKernel",
    "Periodic",
    "PeriodicSeries",
    "Polynomial",
    "Product",
    "RBF",
    "RationalQuadratic",
    "SHO",
    "SameGroup",
    "SpectralMixture",
    "StateSpaceForm",
    "Stationary",
    "Sum",
    "White",
    "from_expression",
    "grid_from_inputs",
    "grid_operator",
    "has_state_space_form",
    "register_state_space",
    "ski_interpolation",
    "ski_operator",
    "state_space_form",
]
