"""gpnum: scalable Gaussian processes written once against the Python array API."""

from gpnum import (
    backend,
    ciq,
    datasets,
    distributed,
    divergences,
    hmm,
    inducing,
    kernels,
    likelihoods,
    linalg,
    optim,
    priors,
)
from gpnum.checkpoint import load, save
from gpnum.errors import BackendError, ConvergenceWarning, NotPSDError, ShapeError
from gpnum.models import GPR, GVI, SGPR, SVGP, SVTP, MarkovVGP


def fit(model, X=None, y=None, *, client=None, **kwargs):
    """Train a model: :func:`gpnum.optim.fit`, or with ``client=`` (a ``distributed.Client``)
    :func:`gpnum.distributed.fit` on dask arrays ``X``, ``y`` whose rows stay on the workers.

    Every keyword of :func:`gpnum.optim.fit` is accepted (see there); the distributed form
    trains with Adam.
    """
    if client is not None:
        return distributed.fit(model, X, y, client, **kwargs)
    return optim.fit(model, X, y, **kwargs)

__version__ = "0.1.0"

__all__ = ["BackendError", "ConvergenceWarning", "GPR", "GVI", "MarkovVGP", "NotPSDError", "SGPR", "SVGP", "SVTP",
           "ShapeError",
           "backend",
           "ciq", "datasets", "distributed", "divergences", "fit", "hmm", "inducing", "kernels", "likelihoods", "linalg",
           "load", "optim", "priors", "save", "__version__"]
