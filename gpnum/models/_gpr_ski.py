"""GPR(solver="ski"): structured kernel interpolation ``K_XX ~= W K_UU W^T`` (Wilson & Nickisch
2015, "Kernel interpolation for scalable structured Gaussian processes (KISS-GP)") with cubic
convolution weights (Keys 1981) on a regular grid covering the inputs.

- Training: the BBMM machinery of ``solver="cg"`` on the interpolated operator; ``W`` depends
  on the inputs only and is built once per model.
- Predictions use the SKI kernel ``k(x, x') = w(x)^T K_UU w(x')`` throughout (a GP with that
  kernel, as KISS-GP): the mean ``c + w_*^T (K_UU W^T alpha)`` from an (m,) cache, and LOVE
  variances (Pleiss et al. 2018, "Constant-time predictive distributions for Gaussian
  processes"): ``k Lanczos steps on K_y`` give ``K_y^{-1} ~= Q T^{-1} Q^T``, so
  ``k_*^T K_y^{-1} k_* ~= |R^T w_*|^2`` with the (m, k) cache ``R = K_UU W^T Q L_T^{-T}``
  (``T = L_T L_T^T``): ``O(4^d k)`` a test point, whatever n. New points outside the training
  inputs' range (where the grid does not interpolate) take the exact cross-covariances
  ``k(X_*, X)`` with the same caches instead (``O(n)`` a point).
- Posterior samples, pathwise (Wilson et al. 2020, "Efficiently sampling functions from
  Gaussian process posteriors"): the prior draw ``[W; W_*] K_UU^{1/2} z`` by circulant
  embedding of ``K_UU`` (Dietrich & Newsam 1997; the grid is padded until the embedding is
  positive semi-definite), then one PCG solve for all samples and the update
  ``W_* K_UU W^T K_y^{-1} (r - f_X - e)``.
"""

from __future__ import annotations

import math
import warnings

from gpnum.backend import (
    SparseRows,
    blas_pool,
    cholesky,
    device_of,
    get_namespace,
    solve_triangular,
)
from gpnum.errors import ConvergenceWarning
from gpnum.kernels import (
    Grid,
    SkiInterpolation,
    grid_operator,
    ski_interpolation,
    ski_operator,
)
from gpnum.linalg import Interpolated, Kronecker, Toeplitz, lanczos, pcg
from gpnum.models import _gpr_cg

__all__ = ["covers", "lml", "predict", "prediction_state", "prior_root", "sample_f"]

_in_numpy_pool = blas_pool("numpy")
#: Accepted negative eigenvalue mass (relative) of the circulant embedding of a prior draw.
_EMBEDDING_CLIP_TOL = 1e-8
#: Grid paddings tried for a positive semi-definite circulant embedding (per axis).
_EMBEDDING_PADS = (1, 2, 4, 8)


def training(model):
    """``(interp, order)``: the training rows ordered by their interpolation cell
    (``X[order]``) and their :class:`gpnum.kernels.SkiInterpolation` (float64), built once.
    In that order the rows of ``W`` that follow one another touch neighbouring grid points, so
    the products with ``W`` and ``W^T`` read and write memory in nearly sequential order; the
    log marginal likelihood and the predictions do not depend on the order of the rows."""
    cached = getattr(model, "_ski_training", None)
    if cached is not None and cached[0] is model.X:
        return cached[1]
    xp = model.xp
    first = ski_interpolation(model.X, model.grid_size, compute_dtype=xp.float64)
    order = xp.argsort(first.indices[:, 0], stable=True)
    idx = xp.take(first.indices, order, axis=0)
    w = xp.take(first.weights, order, axis=0)
    interp = SkiInterpolation(first.grid, first.lower, first.spacing, first.sizes, idx, w,
                              SparseRows(idx, w, first.rows.shape[1]))
    model._ski_training = (model.X, (interp, order))
    return interp, order


def interpolation(model):
    """The training rows' interpolation (in :func:`training`'s order)."""
    return training(model)[0]


def operator(model, X):
    """``K_XX ~= W K_UU W^T`` in float64; for the training inputs in :func:`training`'s order."""
    interp = interpolation(model) if X is model.X else None
    return ski_operator(model.kernel, X, model.grid_size, compute_dtype=model.xp.float64,
                        interpolation=interp)


def lml(model, X, y, need_grad):
    """The BBMM log marginal likelihood and gradients (``solver="cg"``'s) on the SKI operator
    (the training rows in :func:`training`'s order). Its time goes to memory-bound passes
    (the products with ``W`` and ``W^T``, CG's vector work): GPR opens its BLAS block with
    ``split_rows=True`` (:attr:`GPR.split_rows <gpnum.GPR.split_rows>`)."""
    op = operator(model, X)
    if X is model.X:
        order = training(model)[1]
        X, y = model.xp.take(X, order, axis=0), model.xp.take(y, order, axis=0)
    return _gpr_cg.lml(model, X, y, need_grad, operator=op)


def covers(model, Xnew):
    """Whether the training grid interpolates every row of ``Xnew``."""
    return interpolation(model).contains(Xnew)


@_in_numpy_pool
@_gpr_cg.per_parameter_value("_ski_cache")
def prediction_state(model):
    """``alpha = K_y^{-1} r`` (PCG at ``predict_rtol``), the mean cache ``K_UU W^T alpha`` (m,)
    and the LOVE caches (module notes), once per parameter value; ``alpha`` and LOVE's basis
    in :func:`training`'s order of the rows (``state["X"]``)."""
    xp = model.xp
    opts = model.cg_options
    high = xp.float64
    n = model.X.shape[0]
    order = training(model)[1]
    resid = xp.astype(xp.take(model.y, order), high, copy=False) - xp.astype(model.mean, high,
                                                                             copy=False)
    op = operator(model, model.X)
    A = _gpr_cg.noisy_operator(model, op)
    M = _gpr_cg._preconditioner(A, opts)
    rtol = _gpr_cg.predict_rtol(model, op)
    sol = pcg(A, resid[:, None], M=M, rtol=rtol, maxiter=opts.maxiter)
    alpha = sol.x[:, 0]
    K_UU = op.K_UU
    lz = lanczos(A, resid, min(opts.love_rank, n))
    L_T = cholesky(lz.tridiagonal(), what="LOVE's Lanczos tridiagonal matrix of K_y")
    C = K_UU @ op.interpolate_transpose(lz.basis)                           # (m, k)
    state = {"alpha": alpha, "K_UU": K_UU, "X": xp.take(model.X, order, axis=0),
             "mean_cache": (K_UU @ op.interpolate_transpose(alpha[:, None]))[:, 0],
             "love_R": solve_triangular(L_T, C.T, lower=True).T,              # C L_T^{-T}
             "love_Q": lz.basis, "love_L": L_T, "precond": M}
    model._cg_predict_last = _gpr_cg.solve_record(sol, rtol, M)
    return state


@_in_numpy_pool
def predict(model, Xnew, state, full_cov):
    """Mean and (co)variance of the SKI GP at ``Xnew`` (module notes)."""
    xp = model.xp
    high = xp.float64
    interp = interpolation(model)
    if not interp.contains(Xnew):
        return _predict_exact_cross(model, Xnew, state, full_cov)
    K_UU = state["K_UU"]
    idx, w = interp.weights_at(Xnew, high)
    rows = SparseRows(idx, w, K_UU.shape[0])
    mean = rows.matmul(state["mean_cache"][:, None])[:, 0]
    mean = model.mean + xp.astype(mean, model.dtype, copy=False)
    G = rows.matmul(state["love_R"])                                          # (b, k)
    if full_cov:
        b = Xnew.shape[0]
        eye = xp.eye(b, dtype=high, device=model.device)
        prior = rows.matmul(K_UU @ rows.rmatmul(eye))
        cov = prior - G @ G.T
    else:
        prior = Interpolated(idx, w, K_UU, rows=rows).diagonal()
        cov = prior - xp.sum(G * G, axis=1)
    return mean, xp.astype(cov, model.dtype, copy=False)


def _predict_exact_cross(model, Xnew, state, full_cov):
    """Points the grid does not reach: ``k(X_*, X) alpha`` and LOVE's ``|L_T^{-1} Q^T k_*|^2``
    with the exact kernel, in blocks of rows."""
    xp = model.xp
    high = xp.float64
    n, m = model.X.shape[0], Xnew.shape[0]
    step = max(1, min(m, (2 ** 22) // max(n, 1)))
    means, proj = [], []
    for s in range(0, m, step):
        e = min(m, s + step)
        Ks = xp.astype(model.kernel(state["X"], Xnew[s:e, :]), high, copy=False)  # (n, b)
        means.append(Ks.T @ state["alpha"])
        proj.append(solve_triangular(state["love_L"], state["love_Q"].T @ Ks, lower=True))
    mean = means[0] if len(means) == 1 else xp.concat(means)
    c = proj[0] if len(proj) == 1 else xp.concat(proj, axis=1)                  # (k, m)
    mean = model.mean + xp.astype(mean, model.dtype, copy=False)
    if full_cov:
        cov = xp.astype(model.kernel(Xnew), high, copy=False) - c.T @ c
    else:
        cov = xp.astype(model.kernel.diag(Xnew), high, copy=False) - xp.sum(c * c, axis=0)
    return mean, xp.astype(cov, model.dtype, copy=False)


# ------------------------------------------------------------------------ posterior samples
def _embedding_root(op):
    """``(M, apply)`` with ``apply(E)`` (M, r) -> (n, r) a square root ``S`` (``S S^T = op``) of a
    grid operator, and the clipped negative eigenvalue mass: circulant embedding for Toeplitz
    parts, factor by factor for Kronecker products, eigendecompositions of small dense ones."""
    xp = op.xp
    if isinstance(op, Toeplitz):
        return op.embedding_size, op.embedding_sqrt_matmul
    if isinstance(op, Kronecker):
        parts = [_embedding_root(f) for f in op.factors]
        if any(p is None for p in parts):
            return None
        sizes = tuple(p[0] for p in parts)

        def apply(E):
            r = E.shape[1]
            T = xp.reshape(E, sizes + (r,))
            clipped = xp.zeros((), dtype=op.dtype, device=op.device)
            for axis, ((_, fn), n_l) in enumerate(zip(parts, op.row_sizes, strict=True)):
                moved = xp.moveaxis(T, axis, 0)
                rest = tuple(moved.shape[1:])
                out, c = fn(xp.reshape(moved, (moved.shape[0], math.prod(rest))))
                T = xp.moveaxis(xp.reshape(out, (n_l,) + rest), 0, axis)
                clipped = xp.maximum(clipped, c)
            return xp.reshape(T, (op.shape[0], r)), clipped

        return math.prod(sizes), apply
    if op.shape[0] > 4096:
        return None
    lam, Q = xp.linalg.eigh(op.to_dense())
    scale = xp.max(xp.abs(lam))
    B = Q * xp.sqrt(xp.where(lam > 0.0, lam, 0.0))[None, :]
    clipped = xp.sum(xp.where(lam < 0.0, -lam, 0.0)) / scale
    return op.shape[0], lambda E: (B @ E, clipped)


def _padded_grid(grid, factor):
    """The grid extended ``factor`` times along each axis from its first point."""
    xp = get_namespace(grid.axes[0])
    axes = []
    for j, a in enumerate(grid.axes):
        h = grid.spacing(j)
        size = a.shape[0] * factor
        axes.append(a[0] + h * xp.arange(size, dtype=a.dtype, device=device_of(a)))
    return Grid(tuple(axes))


def prior_root(model, grid, rng, k):
    """``K_UU^{1/2} z`` (cells, k) for standard normal ``z`` and the kernel's matrix on the
    grid's cells, by circulant embedding with the grid padded (regular axes) until the
    embedding's negative eigenvalues are negligible; None when the grid operator has no
    structured square root."""
    xp = model.xp
    high = xp.float64
    sizes = grid.shape
    regular = all(s == 1 or grid.spacing(j) is not None for j, s in enumerate(sizes))
    pads = _EMBEDDING_PADS if regular else (1,)
    for pad in pads:
        big = _padded_grid(grid, pad) if pad > 1 else grid
        root = _embedding_root(grid_operator(model.kernel, big, compute_dtype=high))
        if root is None:
            return None
        size, apply = root
        draw, clipped = apply(rng.normal((size, k), dtype=high))
        if float(clipped) <= _EMBEDDING_CLIP_TOL:
            break
    if float(clipped) > _EMBEDDING_CLIP_TOL:
        warnings.warn(f"GPR.sample_f: the circulant embedding of the grid's kernel matrix "
                      f"keeps negative eigenvalues of {float(clipped):.2g} of its positive "
                      f"mass on a grid padded {pad} times; the prior draws' covariance is off "
                      "by about that much (a lengthscale long against the grid)",
                      ConvergenceWarning, stacklevel=4)
    if pad == 1:
        return draw
    T = xp.reshape(draw, tuple(s * pad for s in sizes) + (k,))
    T = T[tuple(slice(0, s) for s in sizes) + (slice(None),)]
    return xp.reshape(T, (math.prod(sizes), k))


@_in_numpy_pool
def sample_f(model, Xnew, eps, diag, resid, rtol, rng):
    """Pathwise posterior samples at ``Xnew`` (inside the grid, :func:`covers`) in float64,
    without the constant mean; ``eps`` (n + m, k) and ``diag`` (n + m,) as for
    ``solver="cg"`` (the noise and the new points' jitter), ``rng`` draws the grid's normals.
    None when ``K_UU`` has no structured square root (then the CG path samples)."""
    xp = model.xp
    opts = model.cg_options
    high = xp.float64
    n, k = model.X.shape[0], eps.shape[1]
    interp, order = training(model)
    resid = xp.take(resid, order)               # the rows in the interpolation's order
    u = prior_root(model, interp.grid, rng, k)                              # K_UU^{1/2} z
    if u is None:
        return None
    idx, w = interp.weights_at(Xnew, high)
    rows_new = SparseRows(idx, w, u.shape[0])
    noise = xp.sqrt(diag)[:, None] * eps
    prior_X = interp.rows.matmul(u) + noise[:n, :]
    prior_new = rows_new.matmul(u) + noise[n:, :]
    op = operator(model, model.X)
    A = _gpr_cg.noisy_operator(model, op)
    M = _gpr_cg._preconditioner(A, opts)
    V = pcg(A, resid[:, None] - prior_X, M=M, rtol=rtol, maxiter=opts.maxiter).x   # (n, k)
    return prior_new + rows_new.matmul(op.K_UU @ op.interpolate_transpose(V))
