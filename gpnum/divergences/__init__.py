"""Closed-form divergences between Gaussians, each with hand-derived gradients.

Multivariate, between ``Q = N(mq, Sq)`` and ``P = N(mp, Sp)`` with each covariance given either
as a matrix (``Sq=``, ``Sp=``) or as a lower Cholesky factor (``Lq=``, ``Lp=``):
:func:`kl_mvn`, :func:`kl_whitened` (the whitened SVGP term), :func:`wasserstein_mvn` (squared),
:func:`bhattacharyya_mvn`, :func:`hellinger_mvn` (squared), :func:`renyi_mvn`, and the GWI batch
estimate :func:`wasserstein_gwi`.

Per point ("projected"; J. Wu 2023, "Generalised variational inference for Gaussian
processes", MSc thesis, UCL, section 6), elementwise over means and variances (n,):
:func:`kl_normal`, :func:`wasserstein_normal`, :func:`bhattacharyya_normal`,
:func:`hellinger_normal`, :func:`renyi_normal`, :func:`squared_difference_normal`.

Every function ``f`` has ``f_and_grad`` returning ``(value, grads)`` with ``grads`` keyed by
argument name (docs/gradients.md); the per-point ones also have ``f_vjp``.
"""

from gpnum.divergences._kl import kl_mvn, kl_mvn_and_grad, kl_whitened, kl_whitened_and_grad
from gpnum.divergences._pointwise import (
    bhattacharyya_normal,
    bhattacharyya_normal_and_grad,
    bhattacharyya_normal_vjp,
    hellinger_normal,
    hellinger_normal_and_grad,
    hellinger_normal_vjp,
    kl_normal,
    kl_normal_and_grad,
    kl_normal_vjp,
    renyi_normal,
    renyi_normal_and_grad,
    renyi_normal_vjp,
    squared_difference_normal,
    squared_difference_normal_and_grad,
    squared_difference_normal_vjp,
    wasserstein_normal,
    wasserstein_normal_and_grad,
    wasserstein_normal_vjp,
)
from gpnum.divergences._renyi import (
    bhattacharyya_mvn,
    bhattacharyya_mvn_and_grad,
    hellinger_mvn,
    hellinger_mvn_and_grad,
    renyi_mvn,
    renyi_mvn_and_grad,
)
from gpnum.divergences._wasserstein import (
    wasserstein_gwi,
    wasserstein_gwi_and_grad,
    wasserstein_mvn,
    wasserstein_mvn_and_grad,
)

__all__ = [
    "bhattacharyya_mvn",
    "bhattacharyya_mvn_and_grad",
    "bhattacharyya_normal",
    "bhattacharyya_normal_and_grad",
    "bhattacharyya_normal_vjp",
    "hellinger_mvn",
    "hellinger_mvn_and_grad",
    "hellinger_normal",
    "hellinger_normal_and_grad",
    "hellinger_normal_vjp",
    "kl_mvn",
    "kl_mvn_and_grad",
    "kl_normal",
    "kl_normal_and_grad",
    "kl_normal_vjp",
    "kl_whitened",
    "kl_whitened_and_grad",
    "renyi_mvn",
    "renyi_mvn_and_grad",
    "renyi_normal",
    "renyi_normal_and_grad",
    "renyi_normal_vjp",
    "squared_difference_normal",
    "squared_difference_normal_and_grad",
    "squared_difference_normal_vjp",
    "wasserstein_gwi",
    "wasserstein_gwi_and_grad",
    "wasserstein_mvn",
    "wasserstein_mvn_and_grad",
    "wasserstein_normal",
    "wasserstein_normal_and_grad",
    "wasserstein_normal_vjp",
]
