"""gpnum: scalable Gaussian processes written once against the Python array API."""

from gpnum import backend
from gpnum.errors import BackendError, ConvergenceWarning, NotPSDError, ShapeError

__version__ = "0.1.0"

__all__ = ["BackendError", "ConvergenceWarning", "NotPSDError", "ShapeError", "backend",
           "__version__"]
