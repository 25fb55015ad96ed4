"""The Gaussian-process models: exact GPR, collapsed SGPR, the inducing-point models SVGP, GVI
and SVTP, and the Markovian variational GP over time (MarkovVGP). Each implements the model
protocol, written once as :class:`gpnum.models.Model`."""

from gpnum.models._build import (
                                 BuildOptionError,
                                 build_model,
                                 check_build_options,
                                 default_kernel,
                                 default_likelihood,
                                 inducing_jitter,
)
from gpnum.models._build_multioutput import MULTIOUTPUT_KINDS, build_multioutput_model
from gpnum.models._distributions import precision_to_q_sqrt, project_latents, q_sqrt_to_precision
from gpnum.models._gpr import GPR
from gpnum.models._gpr_cg import CGOptions
from gpnum.models._gpr_multioutput import MultiOutputGPR
from gpnum.models._gvi import GVI
from gpnum.models._gvi_parts import VARIATIONAL_KERNELS, VARIATIONAL_MEANS
from gpnum.models._markov_vgp import MarkovVGP
from gpnum.models._oilmm import OILMM
from gpnum.models._protocol import Model, ModelDefaults, check_model, model_members
from gpnum.models._sgpr import SGPR
from gpnum.models._specs import (
                                 kernel_from_spec,
                                 kernel_spec,
                                 likelihood_from_spec,
                                 likelihood_spec,
                                 spec_classes,
)
from gpnum.models._student_t_math import student_t_fisher, student_t_fisher_solve
from gpnum.models._svgp import SVGP
from gpnum.models._svgp_multioutput import LMCSVGP, stack_outputs
from gpnum.models._svtp import SVTP

__all__ = ["BuildOptionError", "CGOptions", "GPR", "GVI", "Model", "VARIATIONAL_KERNELS",
           "VARIATIONAL_MEANS", "ModelDefaults", "SGPR", "SVGP", "SVTP", "build_model",
           "check_build_options", "check_model", "default_kernel", "default_likelihood",
           "inducing_jitter", "kernel_from_spec", "kernel_spec", "likelihood_from_spec",
           "likelihood_spec", "model_members", "precision_to_q_sqrt", "project_latents",
           "q_sqrt_to_precision", "spec_classes", "student_t_fisher", "student_t_fisher_solve"]
__all__ += ["LMCSVGP", "MULTIOUTPUT_KINDS", "MarkovVGP", "MultiOutputGPR", "OILMM", "build_multioutput_model",
            "stack_outputs"]
