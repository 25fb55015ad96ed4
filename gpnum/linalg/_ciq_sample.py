"""Samples of ``N(mean, K)`` as ``K^{1/2} eps`` by contour integral quadrature."""

from __future__ import annotations

from gpnum.backend import default_rng
from gpnum.errors import ShapeError, describe_shape
from gpnum.linalg._ciq import _as_operator, sqrt_matmul

__all__ = ["sample_mvn"]


def sample_mvn(A, num_samples: int, seed, mean=None, *, num_quad: int = 15, rtol: float = 1e-3,
               maxiter: int = 200, eigen_bounds=None, xp=None, device=None, deflate=None):
    """Draw ``num_samples`` samples of ``N(mean, K)`` as ``K^{1/2} eps`` by CIQ.

    Works with a lazy ``KernelMatrix``: memory stays O(J n num_samples) (the Krylov basis), never
    O(n^2), so prior samples are possible at sizes where a dense Cholesky would not fit.

    Parameters
    ----------
    A : LinearOperator (n, n)
        Covariance ``K`` (positive definite: add jitter for smooth kernels).
    num_samples : int
    seed : int
        Seed of the standard-normal draws (:func:`gpnum.backend.default_rng`).
    mean : array (n,), optional
        Added to every sample.
    xp, device : optional
        Namespace and device of the draws (default: ``A``'s).
    deflate : int or None
        As in :func:`inv_sqrt_matmul`.

    Returns
    -------
    samples : array (n, num_samples)
    """
    num_samples = int(num_samples)
    if num_samples < 1:
        raise ValueError(f"num_samples: expected an integer >= 1, got {num_samples}")
    n = A.shape[0]
    A = _as_operator(A, None)
    if xp is None:
        xp = A.xp
        device = A.device if device is None else device
    rng = default_rng(seed, xp=xp, device=device)
    eps = rng.normal((n, num_samples), dtype=A.dtype)
    out = sqrt_matmul(A, eps, num_quad=num_quad, rtol=rtol, maxiter=maxiter,
                      eigen_bounds=eigen_bounds, deflate=deflate).x
    if mean is not None:
        if tuple(mean.shape) != (n,):
            raise ShapeError(f"mean: expected shape ({n},), got {describe_shape(mean.shape)}")
        out = out + mean[:, None]
    return out
