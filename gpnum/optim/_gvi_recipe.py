"""The GVI pipeline of J. Wu (2023), "Generalised variational inference for Gaussian
processes", MSc thesis, UCL (after Wild et al. 2022), in one call: its Algorithm 2 fits the
regulariser, then a GVI is built."""

from __future__ import annotations

from gpnum import backend as B
from gpnum import likelihoods
from gpnum.models import GVI
from gpnum.optim._select import select_inducing

__all__ = ["gvi_by_selection"]


def gvi_by_selection(X, y, kernel, likelihood, num_inducing, *, method="gpr", max_rounds=5,
                     noise_variance=0.1, **options):
    """A GVI model whose regulariser ``P`` is fitted by Algorithm 2 of Wu (2023).

    :func:`select_inducing` alternates greedy-variance selection of ``Z`` with type-II maximum
    likelihood of ``kernel`` (fitted in place) on real responses: ``y`` itself for a Gaussian
    likelihood, ``2 y - 1`` for Bernoulli labels in {0, 1}. The GVI then holds that kernel and
    ``Z``; with ``mode="posterior"`` also the responses at ``Z``, the fitted noise variance
    (floored at 1e-4) and the fitted constant mean.

    Parameters
    ----------
    X : array (n, d)
    y : array (n,)
    kernel : gpnum kernel
        The regulariser's kernel, fitted in place.
    likelihood : gpnum.likelihoods.Gaussian or Bernoulli
        Q's likelihood (learned by GVI).
    num_inducing : int
        ``m``.
    method : {"gpr", "sgpr"}
        Algorithm 2's type-II objective (see :func:`select_inducing`).
    max_rounds : int
        Rounds of Algorithm 2 at most.
    noise_variance : float
        Initial noise variance of the type-II fit.
    **options
        Any other argument of :class:`gpnum.GVI` (``divergence``, ``mode``, ...).

    Returns
    -------
    model : gpnum.GVI
    selection : InducingSelection
        Algorithm 2's result (``num_iter``, ``converged``, ...).
    """
    if isinstance(likelihood, likelihoods.Gaussian):
        y_reg = y
    elif isinstance(likelihood, likelihoods.Bernoulli):
        y_reg = 2.0 * y - 1.0  # type-II ML needs real responses
    else:
        raise ValueError(f"gvi_by_selection: Algorithm 2 fits a Gaussian or Bernoulli "
                         f"likelihood's data, not {type(likelihood).__name__}")
    noise = likelihoods.Gaussian(variance=float(noise_variance), xp=kernel.xp,
                                 dtype=kernel.dtype, device=B.device_of(X))
    sel = select_inducing(X, y_reg, kernel, noise, num_inducing, max_iter=max_rounds,
                          method=method, maxiter=200 if method == "gpr" else 100)
    if options.get("mode", "prior") == "posterior":
        options.setdefault("inducing_targets", sel.inducing_targets)
        options.setdefault("regulariser_noise", max(float(noise.variance), 1e-4))
        options.setdefault("prior_mean", float(sel.mean))
    options.setdefault("num_data", X.shape[0])
    return GVI(sel.kernel, likelihood, sel.inducing_points, **options), sel
