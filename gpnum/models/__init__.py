"""The Gaussian-process models: exact GPR, collapsed SGPR, and the inducing-point models SVGP, GVI
and SVTP. Each implements the model protocol (``docs/models.md``)."""

from gpnum.models._build import (build_model, default_kernel, default_likelihood,
                                 inducing_jitter)
from gpnum.models._gpr import GPR
from gpnum.models._gpr_cg import CGOptions
from gpnum.models._gpr_multioutput import MultiOutputGPR
from gpnum.models._svgp_multioutput import LMCSVGP, stack_outputs
from gpnum.models._gvi import GVI
from gpnum.models._oilmm import OILMM
from gpnum.models._sgpr import SGPR
from gpnum.models._svgp import SVGP
from gpnum.models._svtp import SVTP
from gpnum.models._student_t_math import student_t_fisher, student_t_fisher_solve

__all__ = ["CGOptions", "GPR", "GVI", "SGPR", "SVGP", "SVTP", "build_model", "default_kernel",
           "default_likelihood", "inducing_jitter", "student_t_fisher", "student_t_fisher_solve"]
__all__ += ["LMCSVGP", "MultiOutputGPR", "OILMM", "stack_outputs"]
