"""Sparse variational Gaussian processes."""

from gpnum.variational._gpr import GPR
from gpnum.variational._gvi import GVI
from gpnum.variational._sgpr import SGPR
from gpnum.variational._svgp import SVGP

__all__ = ["GPR", "GVI", "SGPR", "SVGP"]
