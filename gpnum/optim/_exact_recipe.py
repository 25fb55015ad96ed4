"""Wang et al. (2019)'s training recipe for exact GPs on large data: pretrain the
hyper-parameters on a random subset, then a few Adam steps on all of the data."""

from __future__ import annotations

import warnings

from gpnum import backend as B
from gpnum.optim._fit import fit

__all__ = ["fit_exact_gp"]


def fit_exact_gp(model, *, subset_size=2000, lbfgs_maxiter=100, subset_adam_steps=10,
                 full_adam_steps=3, lr=0.01, seed=0, progress=False):
    """Train a :class:`gpnum.GPR` (typically ``solver="cg"``) as Wang et al. (2019) do.

    1. A Cholesky GPR on a random subset of ``subset_size`` training points, **sharing the
       model's kernel and likelihood objects**, is trained by L-BFGS-B (``lbfgs_maxiter``
       iterations), then by ``subset_adam_steps`` Adam steps;
    2. its constant mean is copied to ``model``;
    3. ``full_adam_steps`` Adam steps on all of the data with ``model``'s own solver (for CG:
       stochastic gradients with fixed, seeded probes).

    Parameters
    ----------
    model : gpnum.GPR
    subset_size : int
        Points of the pretraining subset (Wang et al.: 10,000 on GPUs; a Cholesky GPR on one
        CPU is quick up to a few thousand).
    lbfgs_maxiter, subset_adam_steps, full_adam_steps : int
    lr : float
        Adam's learning rate (both Adam phases).
    seed : int
        Seed of the subset.
    progress : bool
        Progress bars of :func:`gpnum.fit`.

    Returns
    -------
    dict
        ``{"subset": History of L-BFGS, "subset_adam": History, "full": History}``.

    References
    ----------
    Wang, Pleiss, Gardner, Tyree, Weinberger & Wilson (2019), "Exact Gaussian processes on a
    million data points", NeurIPS, section 5 (pretraining on a subset, then fine-tuning).
    """
    from gpnum.models import GPR

    if not isinstance(model, GPR):
        raise TypeError(f"model: expected a gpnum.GPR, got {type(model).__name__}")
    for name, value in (("subset_size", subset_size), ("lbfgs_maxiter", lbfgs_maxiter),
                        ("subset_adam_steps", subset_adam_steps),
                        ("full_adam_steps", full_adam_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected an integer >= 0, got {value!r}")
    X, y = model.X, model.y
    xp = model.xp
    n = X.shape[0]
    out = {}
    if subset_size > 0 and (lbfgs_maxiter > 0 or subset_adam_steps > 0):
        if subset_size < n:
            idx = B.default_rng(seed, xp=xp, device=model.device).permutation(n)[:subset_size]
            Xs, ys = xp.take(X, idx, axis=0), xp.take(y, idx, axis=0)
        else:
            Xs, ys = X, y
        sub = GPR(model.kernel, model.likelihood, Xs, ys, mean=model.mean, jitter=model.jitter)
        if lbfgs_maxiter > 0:
            start = dict(sub.parameters())
            try:
                out["subset"] = fit(sub, optimizer="lbfgs", maxiter=lbfgs_maxiter,
                                    progress=progress)
            except ValueError as err:
                # L-BFGS-B's start can be refused (a kernel matrix that is not positive
                # definite in float32); Adam's small steps then go on from the start.
                warnings.warn(f"fit_exact_gp: L-BFGS-B on the subset stopped ({err}); "
                              "continuing with Adam from the initial values", RuntimeWarning,
                              stacklevel=2)
                sub.set_parameters(start)
                subset_adam_steps = max(subset_adam_steps, 100)
        if subset_adam_steps > 0:
            out["subset_adam"] = fit(sub, optimizer="adam", epochs=subset_adam_steps, lr=lr,
                                     progress=progress)
        model.set_parameters({"mean": sub.mean})
    if full_adam_steps > 0:
        out["full"] = fit(model, optimizer="adam", epochs=full_adam_steps, lr=lr,
                          progress=progress)
    return out
