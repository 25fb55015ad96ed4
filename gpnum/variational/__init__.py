"""Sparse variational Gaussian processes."""

from gpnum.variational._svgp import SVGP

__all__ = ["SVGP"]
