"""Algorithm 2 of Wu (2023): inducing points and the regulariser's kernel, chosen together.

Greedy-variance selection (Burt, Rasmussen & van der Wilk 2020; :func:`gpnum.inducing.
greedy_variance`) alternating with type-II maximum likelihood of the kernel (an exact
:class:`gpnum.GPR` on the selected points and their responses), until the selected set stops
changing (Wu 2023, MSc thesis, UCL, after Wild et al. 2022; Algorithm "Prior Kernel Learning and Inducing Points Selection": "iterating
until the inducing points do not change", rather than Burt et al.'s ELBO test). It lives with the
optimisers because the type-II step is a training run (:func:`gpnum.fit`, L-BFGS-B).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from gpnum import backend as B
from gpnum.errors import ConvergenceWarning, NotPSDError
from gpnum.inducing import greedy_variance

__all__ = ["InducingSelection", "select_inducing"]


@dataclass
class InducingSelection:
    """What :func:`select_inducing` found.

    Attributes
    ----------
    inducing_points : array (m, d)
        ``Z``, rows of ``X``.
    indices : array (m,) of int64
        Their rows in ``X``.
    inducing_targets : array (m,)
        ``U = y[indices]``: the responses at ``Z`` (the posterior regulariser conditions on them).
    kernel, likelihood :
        The kernel and Gaussian likelihood, fitted in place by type-II maximum likelihood on
        ``(Z, U)``.
    mean : array ()
        The GPR's fitted constant mean.
    num_iter : int
        Selection / fitting rounds run.
    converged : bool
        Whether the set stopped changing within ``max_iter`` rounds.
    """

    inducing_points: object
    indices: object
    inducing_targets: object
    kernel: object
    likelihood: object
    mean: object
    num_iter: int
    converged: bool


def select_inducing(X, y, kernel, likelihood, num_inducing, *, max_iter=10, maxiter=200,
                    noise_floor=1e-4, method="gpr"):
    """Algorithm 2 of Wu (2023): greedy variance <-> type-II ML until the set is stable.

    ``Z_0 = GreedyVariance(X, k_theta0)``; then repeat: fit ``theta`` by maximising the exact GP
    marginal likelihood of ``(Z_t, y[Z_t])``; ``Z_{t+1} = GreedyVariance(X, k_theta)``; stop when
    ``Z_{t+1} = Z_t`` (as a set), or, with a warning, when a set recurs (the iteration cycles;
    the seed's stopping rule has no answer for that) or after ``max_iter`` rounds. Each round costs O(n m^2) for the selection and O(m^3) per
    L-BFGS-B iteration of the fit.

    Parameters
    ----------
    X : array (n, d)
    y : array (n,)
        Real responses (for classification pass a real encoding, e.g. ``2 y - 1``).
    kernel : gpnum.kernels kernel
        Fitted in place.
    likelihood : gpnum.likelihoods.Gaussian
        Fitted in place (its variance is the posterior regulariser's noise).
    num_inducing : int
        ``m``.
    max_iter : int
        Rounds of fitting and reselection at most.
    maxiter : int
        L-BFGS-B iterations per fit.
    method : {"gpr", "sgpr"}
        The type-II objective: ``"gpr"`` (the seed's) the exact marginal likelihood of the
        selected points and their responses, O(m^3); ``"sgpr"`` (Burt et al. 2020's own
        alternation) Titsias' collapsed bound on all ``n`` points with ``Z`` held at the
        selection, O(n m^2) per iteration: slower, but the kernel sees all the data.
    noise_floor : float
        Smallest noise variance, relative to the variance of ``y``: with few points the
        marginal likelihood can prefer interpolation (noise -> 0); the noise is then held at the
        floor and only the kernel is fitted.

    Returns
    -------
    InducingSelection
    """
    from gpnum.models import GPR, SGPR
    from gpnum.optim._fit import fit

    if method not in ("gpr", "sgpr"):
        raise ValueError(f"method: expected 'gpr' or 'sgpr', got {method!r}")

    xp = B.get_namespace(X)
    noise_floor = float(noise_floor) * float(xp.mean((y - xp.mean(y)) ** 2))
    _, idx = greedy_variance(X, num_inducing, kernel)
    mean = 0.0
    converged = cycled = False
    seen = {frozenset(B.to_numpy(idx).tolist())}
    rounds = 0
    for _ in range(int(max_iter)):
        rounds += 1
        X_sel = xp.take(X, idx, axis=0)
        if method == "gpr":
            gpr = GPR(kernel, likelihood, X_sel, xp.take(y, idx, axis=0), mean=mean)
            fixed = ()
        else:
            gpr = SGPR(kernel, likelihood, X, y, X_sel, mean=mean)
            fixed = ("inducing_points",)
        start = gpr.parameters()
        with warnings.catch_warnings():
            # A fit stopped by maxiter still improves the kernel; the set test decides.
            warnings.simplefilter("ignore", ConvergenceWarning)
            # L-BFGS-B's line search may try extreme hyper-parameters on so few points; the
            # overflow there is scored as an infinitely bad point, not worth a warning.
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                fit(gpr, maxiter=maxiter, progress=False, fixed=fixed)
            except (ValueError, NotPSDError):
                # m points can be interpolated: the marginal likelihood then drives the noise
                # to 0 (the kernel matrix stops being positive definite). Hold it at the floor
                # and fit the kernel alone.
                gpr.set_parameters({**start, "likelihood.variance": noise_floor})
                fit(gpr, maxiter=maxiter, progress=False,
                    fixed=fixed + ("likelihood.variance",))
        if float(likelihood.variance) < noise_floor:
            likelihood.variance = noise_floor
        mean = gpr.mean
        _, new = greedy_variance(X, num_inducing, kernel)
        key = frozenset(B.to_numpy(new).tolist())
        same = key == frozenset(B.to_numpy(idx).tolist())
        idx = new
        if same:
            converged = True
            break
        if key in seen:
            # A set seen before: the iteration is periodic and would never settle.
            cycled = True
            break
        seen.add(key)
    if not converged:
        why = "returned to an earlier set (a cycle)" if cycled else f"still changed after {rounds} rounds"
        warnings.warn(f"select_inducing: the inducing set {why}; keeping the last one",
                      ConvergenceWarning, stacklevel=2)
    return InducingSelection(inducing_points=xp.take(X, idx, axis=0), indices=idx,
                             inducing_targets=xp.take(y, idx, axis=0), kernel=kernel,
                             likelihood=likelihood, mean=mean, num_iter=rounds, converged=converged)
