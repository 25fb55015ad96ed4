"""gpnum: scalable Gaussian processes written once against the Python array API."""

from gpnum import backend
from gpnum.errors import BackendError, ConvergenceWarning, NotPSDError, ShapeError
from gpnum import ciq, datasets, divergences, kernels, likelihoods, linalg  # noqa: E402
from gpnum.variational import GPR, SGPR, SVGP  # noqa: E402
from gpnum.variational import SVTP  # noqa: E402
from gpnum import hmm, inducing, optim  # noqa: E402
from gpnum.optim import fit  # noqa: E402
from gpnum.checkpoint import load, save  # noqa: E402

__version__ = "0.1.0"

__all__ = ["BackendError", "ConvergenceWarning", "GPR", "NotPSDError", "SGPR", "SVGP", "SVTP", "ShapeError",
           "backend",
           "ciq", "datasets", "divergences", "fit", "hmm", "inducing", "kernels", "likelihoods", "linalg",
           "load", "optim", "save", "__version__"]
