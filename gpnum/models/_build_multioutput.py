"""The multi-output GP that the scikit-learn estimator and ``gpnum fit --targets K`` build."""

from __future__ import annotations

from gpnum import backend as B
from gpnum import kernels, likelihoods
from gpnum.models._build import default_kernel
from gpnum.models._gpr_multioutput import MultiOutputGPR
from gpnum.models._specs import kernel_from_spec, kernel_spec, spec_classes

__all__ = ["MULTIOUTPUT_KINDS", "build_multioutput_model"]

MULTIOUTPUT_KINDS = ("icm", "independent")


def build_multioutput_model(X, Y, *, kernel="matern52", multioutput="icm", rank=1,
                            noise_variance=0.693, solver="auto"):
    """An exact multi-output GP (:class:`MultiOutputGPR`) for ``Y`` with one column per output.

    Parameters
    ----------
    X : array (n, d)
        Inputs; their namespace, dtype and device become the model's.
    Y : array (n, t)
        Targets, NaN where an output is not observed.
    kernel : str or gpnum kernel
        The latent kernel: an expression (``"matern52"``, ``"rbf + linear"``) with ``d`` ARD
        lengthscales (:func:`default_kernel`), or a kernel object (used as given for an ICM;
        copied for each output of independent outputs).
    multioutput : {"icm", "independent"}
        ``"icm"``: ``ICM(kernel, t, rank)``, the outputs correlated through
        ``B = W W^T + diag(kappa)`` (Bonilla, Chai & Williams 2008); ``"independent"``:
        ``IndependentOutputs`` of ``t`` copies of ``kernel``, each with its own parameters.
    rank : int
        Columns of ``W`` (ICM only).
    noise_variance : float
        Initial noise variance of every output (``t`` variances, learned unless held fixed);
        the default is :func:`default_likelihood`'s for ``"gaussian"``.
    solver : {"auto", "kronecker", "cholesky"}
        As for :class:`MultiOutputGPR`.

    Returns
    -------
    MultiOutputGPR
        Prior mean 0 for every output (learned unless held fixed).
    """
    if multioutput not in MULTIOUTPUT_KINDS:
        raise ValueError(f"multioutput: expected one of {', '.join(map(repr, MULTIOUTPUT_KINDS))},"
                         f" got {multioutput!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank: expected an integer >= 1, got {rank!r}")
    xp = B.get_namespace(X)
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"X, Y: expected 2-D arrays (n, d) and (n, t), got {X.ndim}-D and "
                         f"{Y.ndim}-D")
    kw = {"xp": xp, "dtype": X.dtype, "device": B.device_of(X)}
    t = Y.shape[1]

    def latent():
        if isinstance(kernel, str):
            return default_kernel(kernel, X.shape[1], **kw)
        if not isinstance(kernel, kernels.Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel or an expression such as "
                            f"'matern52', got {type(kernel).__name__}")
        # a copy with the same parameters, so that outputs never share a kernel object
        return kernel_from_spec(kernel_spec(kernel), kernel.parameters(), classes=spec_classes(kernel),
                                where="build_multioutput_model", **kw)

    if multioutput == "icm":
        multi = kernels.ICM(latent(), t, rank)
    else:
        multi = kernels.IndependentOutputs([latent() for _ in range(t)])
    likelihood = likelihoods.Gaussian(variance=[float(noise_variance)] * t, **kw)
    return MultiOutputGPR(multi, likelihood, X, Y, mean=0.0, solver=solver)
