"""GPR on structure: data on a (possibly incomplete) Cartesian grid, and structured kernel
interpolation (SKI) for scattered low-dimensional inputs.

``solver="grid"``: the inputs are the cells of a grid (:func:`gpnum.kernels.grid_from_inputs`).
When every cell is observed and the kernel is a product over separate axes, ``K_XX`` is a
Kronecker product and the log marginal likelihood, its gradient and the predictions are exact
through the factors' eigendecompositions (Saatci 2012, chapter 5;
:class:`gpnum.linalg.KroneckerShiftedEig`):

    log p(y) = -1/2 r^T alpha - 1/2 sum log(Lambda + s) - n/2 log(2 pi),
    d/dtheta = 1/2 alpha^T dK alpha - 1/2 tr((K + s I)^{-1} dK).

Otherwise ``K_XX`` is the observed cells' part of the grid's Toeplitz or Kronecker operator
(:class:`gpnum.linalg.Masked`), exact as a matrix, and the BBMM machinery of ``solver="cg"``
runs on it (Gardner et al. 2018: batched PCG, stochastic Lanczos log-determinant, Hutchinson
trace; Pleiss et al. 2018: LOVE variances), products nearly linear in the grid size instead of
``O(n^2)``.

``solver="ski"``: ``K_XX ~= W K_UU W^T`` on a regular grid of ``grid_size`` points per input
column covering the data (Wilson & Nickisch 2015), cubic interpolation (Keys 1981), the same
BBMM machinery; its objective, predictions and samples live in ``_gpr_ski`` (this module
dispatches to it).
"""

from __future__ import annotations

import math

from gpnum.backend import blas_pool, cholesky, solve_triangular
from gpnum.kernels import grid_from_inputs, grid_operator
from gpnum.linalg import (
    Dense,
    Kronecker,
    KroneckerShiftedEig,
    Masked,
    Toeplitz,
    block_rows_for_budget,
    pcg,
)
from gpnum.models import _gpr_cg, _gpr_ski

__all__ = ["default_grid_size", "lml", "predict", "prediction_state"]

_LOG_2PI = math.log(2.0 * math.pi)
_in_numpy_pool = blas_pool("numpy")
#: Most input columns of solver="ski" (the grid has grid_size^d points).
SKI_MAX_DIM = 3


def default_grid_size(n, d):
    """Points per column of the SKI grid: about ``n`` grid points in all (at least 8 a column,
    at most 10^6 in all)."""
    per = math.ceil(min(n, 10 ** 6) ** (1.0 / d))
    return max(8, per + 3)


def _grid(model, X):
    """``(grid, cells)`` of ``X``, kept for the training inputs."""
    cached = getattr(model, "_grid_cells", None)
    if cached is not None and cached[0] is X:
        return cached[1]
    out = grid_from_inputs(X)
    model._grid_cells = (X, out)
    return out


def _structure(model, X):
    """The structured ``K_XX`` (float64) and, for a complete grid with a Kronecker kernel
    matrix, the permutation data of the exact path: ``(op, exact)`` where ``exact`` is None or
    ``(kron, cells)``."""
    xp = model.xp
    high = xp.float64
    if model.solver == "ski":
        return _gpr_ski.operator(model, X), None
    grid, cells = _grid(model, X)
    op = grid_operator(model.kernel, grid, compute_dtype=high)
    if X.shape[0] == grid.size and hasattr(op, "kernel_grads"):
        return op, (op, cells)
    return Masked(op, cells), None


def _shift(model):
    xp = model.xp
    return xp.astype(model.likelihood.variance, xp.float64, copy=False) + float(model.jitter)


@_in_numpy_pool
def lml(model, X, y, need_grad):
    """Log marginal likelihood and gradients (module notes): exact on a complete grid with a
    Kronecker kernel matrix, else BBMM on the structured operator."""
    if model.solver == "ski":
        return _gpr_ski.lml(model, X, y, need_grad)
    op, exact = _structure(model, X)
    if exact is None:
        return _gpr_cg.lml(model, X, y, need_grad, operator=op)
    xp = model.xp
    high = xp.float64
    kron, cells = exact
    n = X.shape[0]
    eig = KroneckerShiftedEig(kron, xp.reshape(_shift(model), ()))
    resid = xp.astype(y, high, copy=False) - xp.astype(model.mean, high, copy=False)
    to_grid = xp.argsort(cells)                       # grid cell -> row of X
    alpha_grid = eig.solve(xp.take(resid, to_grid))
    alpha = xp.take(alpha_grid, cells)
    value = model._scalar(-0.5 * xp.sum(resid * alpha) - 0.5 * eig.logdet()
                          - 0.5 * n * _LOG_2PI)
    model._cg_last = None
    if not need_grad:
        return value, None
    quad = kron._param_vjp(alpha_grid[:, None], alpha_grid[:, None])["kernel"]
    ld = eig.logdet_grad()
    trace = kron.kernel_grads(ld["factors"])
    g_kernel = {name: 0.5 * quad[name] - 0.5 * trace[name] for name in quad}
    g_noise = 0.5 * xp.sum(alpha * alpha) - 0.5 * ld["shift"]
    return value, model._pack_grads(alpha, g_kernel, g_noise)


@_in_numpy_pool
def prediction_state(model):
    """Mean cache ``alpha = K_y^{-1} r`` and variance cache, once per parameter value: the
    eigendecomposition (exact path) or PCG at ``predict_rtol`` and LOVE (BBMM paths)."""
    if model.solver == "ski":
        return _gpr_ski.prediction_state(model)
    return _grid_state(model)


@_gpr_cg.per_parameter_value("_grid_cache")
def _grid_state(model):
    xp = model.xp
    opts = model.cg_options
    high = xp.float64
    X = model.X
    n = X.shape[0]
    resid = xp.astype(model.y, high, copy=False) - xp.astype(model.mean, high, copy=False)
    op, exact = _structure(model, X)
    if exact is not None:
        kron, cells = exact
        eig = KroneckerShiftedEig(kron, xp.reshape(_shift(model), ()))
        to_grid = xp.argsort(cells)
        alpha = xp.take(eig.solve(xp.take(resid, to_grid)), cells)
        state = {"alpha": alpha, "eig": eig, "cells": cells, "to_grid": to_grid}
    else:
        A = _gpr_cg.noisy_operator(model, op)
        M = _gpr_cg._preconditioner(A, opts)
        rtol = _gpr_cg.predict_rtol(model, op)
        sol = pcg(A, resid[:, None], M=M, rtol=rtol, maxiter=opts.maxiter)
        state = {"alpha": sol.x[:, 0], "block": block_rows_for_budget(
            n, opts.memory_budget_mib * _gpr_cg._MIB, 8, copies=_gpr_cg._PREDICT_BLOCK_COPIES)}
        state.update(_gpr_cg._love_cache(A, M, resid, min(opts.love_rank, n)))
        state["precond"] = M
        model._cg_predict_last = _gpr_cg.solve_record(sol, rtol, M)
    return state


@_in_numpy_pool
def predict(model, Xnew, state, full_cov):
    """Posterior mean and (co)variance at ``Xnew``: ``c + K_*X alpha`` and
    ``K_** - K_*X K_y^{-1} K_X*``, the latter exact through the eigendecomposition on a
    complete grid, by LOVE otherwise."""
    if model.solver == "ski":
        return _gpr_ski.predict(model, Xnew, state, full_cov)
    xp = model.xp
    high = xp.float64
    on_grid = _cells_of(model, Xnew)
    if on_grid is not None:
        return _predict_on_grid(model, Xnew, on_grid, state, full_cov)
    if "eig" not in state:
        return _gpr_cg.predict(model, Xnew, state, full_cov)
    Ks = xp.astype(model.kernel(model.X, Xnew), high, copy=False)            # (n, b)
    mean = model.mean + xp.astype(Ks.T @ state["alpha"], model.dtype, copy=False)
    Ks_grid = xp.take(Ks, state["to_grid"], axis=0)
    S = state["eig"].solve(Ks_grid)                                           # K_y^{-1} K_X*
    if full_cov:
        cov = xp.astype(model.kernel(Xnew), high, copy=False) - Ks_grid.T @ S
    else:
        cov = (xp.astype(model.kernel.diag(Xnew), high, copy=False)
               - xp.sum(Ks_grid * S, axis=0))
    return mean, xp.astype(cov, model.dtype, copy=False)


def check_solver(model, solver, grid_size):
    """Validate the structured solvers' inputs at construction; returns the SKI grid size
    (None for other solvers)."""
    d = model.X.shape[1]
    if solver == "ski":
        if d > SKI_MAX_DIM:
            raise ValueError(f"solver='ski': expected inputs with at most {SKI_MAX_DIM} columns "
                             f"(the grid has grid_size^d points), got d = {d}; use "
                             "solver='cg'")
        if grid_size is None:
            return default_grid_size(model.X.shape[0], d)
        sizes = [grid_size] if isinstance(grid_size, int) else list(grid_size)
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 4 for s in sizes) \
                or len(sizes) not in (1, d):
            raise ValueError(f"grid_size: expected an integer >= 4 or {d} of them, got "
                             f"{grid_size!r}")
        return grid_size if isinstance(grid_size, int) else tuple(sizes)
    if grid_size is not None:
        raise ValueError(f"grid_size: only solver='ski' takes a grid size, got solver={solver!r}")
    if solver == "grid":
        _grid(model, model.X)          # raises now when two rows share a cell
    return None


def _cells_of(model, Xnew):
    """The training grid's cells of the rows of ``Xnew``, or None when a row is off the grid."""
    xp = model.xp
    grid, _ = _grid(model, model.X)
    cells = None
    for j, a in enumerate(grid.axes):
        col = xp.asarray(Xnew[:, j], copy=True)
        pos = xp.clip(xp.searchsorted(a, col), 0, a.shape[0] - 1)
        below = xp.clip(pos - 1, 0, a.shape[0] - 1)
        near = xp.where(xp.abs(xp.take(a, below) - col) < xp.abs(xp.take(a, pos) - col),
                        below, pos)
        scale = float(xp.max(xp.abs(a))) + 1.0
        tol = (1e-9 if a.dtype == xp.float64 else 1e-5) * scale
        if bool(xp.any(xp.abs(xp.take(a, near) - col) > tol)):
            return None
        cells = near if cells is None else cells * a.shape[0] + near
    return cells


def _predict_on_grid(model, Xnew, cells_new, state, full_cov):
    """Predictions at cells of the training grid: the cross-covariances are columns of the
    grid operator (gathered, no kernel evaluations), and the means for every cell come from
    one structured product ``K P^T alpha``, computed once per parameter value."""
    xp = model.xp
    high = xp.float64
    op, exact = _structure(model, model.X)
    full = exact[0] if exact is not None else op.operator
    cells = _grid(model, model.X)[1]
    if "grid_mean" not in state:
        embedded = (xp.take(state["alpha"], state["to_grid"]) if exact is not None
                    else op.embed(state["alpha"][:, None])[:, 0])
        state["grid_mean"] = full @ embedded
    mean = model.mean + xp.astype(xp.take(state["grid_mean"], cells_new), model.dtype,
                                  copy=False)
    m = Xnew.shape[0]
    step = max(1, min(m, _GATHER_ELEMENTS // full.shape[0]))
    if full_cov:
        Ks = xp.take(full.columns(cells_new), cells, axis=0)                 # (n, m)
        if exact is not None:
            Kg = xp.take(Ks, state["to_grid"], axis=0)
            quad = Kg.T @ state["eig"].solve(Kg)
        else:
            c, w, a = _gpr_cg._love_quad(state, Ks)[1:]
            quad = c.T @ c + w.T @ w - a.T @ a
        cov = xp.astype(model.kernel(Xnew), high, copy=False) - quad
        return mean, xp.astype(cov, model.dtype, copy=False)
    if exact is None and "precond" in state:
        if "grid_quad" not in state:
            state["grid_quad"] = _love_quad_all_cells(full, op, state)
        if state["grid_quad"] is not None:
            quad = xp.take(state["grid_quad"], cells_new)
            var = xp.astype(model.kernel.diag(Xnew), high, copy=False) - quad
            return mean, xp.astype(var, model.dtype, copy=False)
    quads = []
    for s in range(0, m, step):
        e = min(m, s + step)
        Ks = xp.take(full.columns(cells_new[s:e]), cells, axis=0)          # (n, b)
        if exact is not None:
            Kg = xp.take(Ks, state["to_grid"], axis=0)
            quads.append(xp.sum(Kg * state["eig"].solve(Kg), axis=0))
        else:
            quads.append(_gpr_cg._love_quad(state, Ks)[0])
    quad = quads[0] if len(quads) == 1 else xp.concat(quads)
    var = xp.astype(model.kernel.diag(Xnew), high, copy=False) - quad
    return mean, xp.astype(var, model.dtype, copy=False)


@_in_numpy_pool
def sample_f(model, Xnew, eps, diag, resid, rtol, rng):
    """Pathwise posterior samples (GPR.sample_f) at ``Xnew`` that are cells of the training
    grid, in float64 without the constant mean: the prior draw over every cell by circulant
    embedding (:func:`_gpr_ski.prior_root`), the solve exactly through the eigendecomposition
    (complete grid, Kronecker) or by PCG on the observed cells at ``rtol``, the update by one
    structured product. None when a new point is off the grid or the grid's kernel matrix has
    no structured square root (then the CG path samples)."""
    xp = model.xp
    cells_new = _cells_of(model, Xnew)
    if cells_new is None:
        return None
    grid, cells = _grid(model, model.X)
    n, k = model.X.shape[0], eps.shape[1]
    u = _gpr_ski.prior_root(model, grid, rng, k)                           # (cells, k)
    if u is None:
        return None
    noise = xp.sqrt(diag)[:, None] * eps
    rhs = resid[:, None] - (xp.take(u, cells, axis=0) + noise[:n, :])
    op, exact = _structure(model, model.X)
    if exact is not None:
        kron = exact[0]
        eig = KroneckerShiftedEig(kron, xp.reshape(_shift(model), ()))
        V = eig.solve(xp.take(rhs, xp.argsort(cells), axis=0))             # grid order
        update = kron @ V
    else:
        A = _gpr_cg.noisy_operator(model, op)
        M = _gpr_cg._preconditioner(A, model.cg_options)
        V = pcg(A, rhs, M=M, rtol=rtol, maxiter=model.cg_options.maxiter).x
        update = op.operator @ op.embed(V)
    return xp.take(u + update, cells_new, axis=0) + noise[n:, :]


def _squared(op):
    """The elementwise square of a grid operator (Toeplitz: the squared column; Kronecker: the
    Kronecker product of the squared factors), or None for other kinds."""
    if isinstance(op, Toeplitz):
        return Toeplitz(op.column * op.column)
    if isinstance(op, Kronecker):
        factors = [_squared(f) for f in op.factors]
        if any(f is None for f in factors):
            return None
        return Kronecker(*factors)
    A = op.to_dense() if op.shape[0] <= 4096 else None
    return None if A is None else Dense(A * A, symmetric=True)


def _love_quad_all_cells(full, masked, state):
    """LOVE's ``k_c^T K_y^{-1} k_c`` (_gpr_cg._love_quad) for every cell ``c`` of the grid at
    once, with ``k_c = P K e_c``, from structured products instead of one (n, k) product per
    cell. With the whitener ``W`` (``W^T W = P^{-1}``, the preconditioner's inverse
    ``D^{-1} - D^{-1} F S^{-1} F^T D^{-1}``, ``S = I + F^T D^{-1} F``):

        |W k_c|^2 = sum_i K[c, o_i]^2 / d - |L_S^{-1} (K P^T D^{-1} F)[c]|^2,
        Q^T W k_c = (K P^T W^T Q)[c],

    i.e. products of ``K`` with ``r + k`` columns and of ``K o K`` with one. None when the
    noise is not a constant or ``K o K`` has no structured form."""
    xp = full.xp
    M = state["precond"]
    d = M.lowrank.diag.diag
    squared = _squared(full)
    if d.ndim != 0 or squared is None:
        return None
    F = M.lowrank.factor
    ones = xp.ones((masked.shape[0], 1), dtype=full.dtype, device=full.device)
    quad = (squared @ masked.embed(ones))[:, 0] / d                     # sum_i K[c, o_i]^2 / d
    if F.shape[1] > 0:
        S = F.T @ F / d + xp.eye(F.shape[1], dtype=F.dtype, device=full.device)
        L_S = cholesky(S, what="the preconditioner's I + F^T D^-1 F")
        G = solve_triangular(L_S, _chunked(full, masked.embed(F / d)).T, lower=True)
        quad = quad - xp.sum(G * G, axis=0)
    _, apply_Wt = _gpr_cg._whitener(M)
    Wq = _chunked(full, masked.embed(apply_Wt(state["love_Q"])))            # (N, k)
    c = solve_triangular(state["love_L"], Wq.T, lower=True)
    return quad + xp.sum(c * c, axis=0) - xp.sum(Wq * Wq, axis=1)


def _chunked(op, B, width=16):
    """``op @ B`` in blocks of ``width`` columns (the FFT products' memory)."""
    xp = op.xp
    parts = [op @ B[:, s:min(B.shape[1], s + width)] for s in range(0, B.shape[1], width)]
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=1)


# Entries of the grid columns gathered at once in on-grid predictions (32 MiB of float64).
_GATHER_ELEMENTS = 2 ** 22

#: solver="auto" takes the grid path when the inputs fill at least this share of their grid.
AUTO_GRID_MIN_FILL = 0.5


def structured(model):
    """``"grid"`` or ``"ski"`` when the model runs a structured solver, else None:
    ``solver="grid"``/``"ski"`` as given; ``solver="auto"`` beyond Cholesky's sizes on inputs
    that fill at least ``AUTO_GRID_MIN_FILL`` of a Cartesian grid (one row a cell) takes
    ``"grid"``. Decided once per model (its inputs are fixed)."""
    if model.solver in ("grid", "ski"):
        return model.solver
    if model.solver != "auto" or not model.uses_cg:
        return None
    cached = getattr(model, "_auto_structured", None)
    if cached is not None:
        return cached[0]
    choice = None
    try:
        grid, _ = _grid(model, model.X)
    except ValueError:
        grid = None
    if grid is not None and model.X.shape[0] >= AUTO_GRID_MIN_FILL * grid.size:
        choice = "grid"
    model._auto_structured = (choice,)
    return choice
