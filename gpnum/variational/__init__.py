"""Sparse variational Gaussian processes."""

from gpnum.variational._gpr import GPR
from gpnum.variational._gvi import GVI
from gpnum.variational._sgpr import SGPR
from gpnum.variational._svgp import SVGP
from gpnum.variational._svtp import SVTP
from gpnum.variational._student_t_math import student_t_fisher, student_t_fisher_solve

__all__ = ["GPR", "GVI", "SGPR", "SVGP", "SVTP", "student_t_fisher", "student_t_fisher_solve"]
