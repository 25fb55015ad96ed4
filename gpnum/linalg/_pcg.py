"""Preconditioned conjugate gradients on a block of right-hand sides, column by column."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from gpnum.backend import cg_direction, cg_update, column_dots, get_namespace, is_array
from gpnum.errors import ConvergenceWarning, ShapeError, check_finite, describe_shape
from gpnum.linalg._operators import aslinearoperator
from gpnum.linalg._solver_result import IterativeResult
from gpnum.linalg._validation import (
    check_maxiter,
    check_tolerances,
    default_check_every,
    prepare_system,
)

__all__ = ["pcg", "SolveResult"]

# Breakdown codes (info < 0) and what they mean.
_NEGATIVE_CURVATURE = -1
_INDEFINITE_PRECONDITIONER = -2
_NON_FINITE = -3


@dataclass(frozen=True, repr=False)
class SolveResult(IterativeResult):
    """Outcome of :func:`pcg`.

    Attributes
    ----------
    x : array (n, k), or (n,) for a one-dimensional right-hand side
    info : int
        0 converged; > 0 iterations used without converging; < 0 breakdown: -1 negative
        curvature (``p^T A p <= 0``: ``A`` is not positive definite), -2 the preconditioner is
        not positive definite (``r^T M r <= 0``), -3 non-finite values in the products.
    num_iter : int
        Iterations performed (products with ``A``, not counting the one for ``x0``).
    residual_norm : array (k,), or 0-d
        Norms of the recursively updated residuals ``b - A x``.
    b_norm : array (k,), or 0-d
    converged : array of bool (k,), or 0-d
    breakdown : array of bool (k,), or 0-d
        Columns stopped by a breakdown (their ``x`` is the last iterate before it).
    message : str
    """

    breakdown: object
    message: str


def _column_list(mask, xp, limit=8):
    from gpnum.backend import to_numpy

    idx = [int(i) for i in to_numpy(xp.nonzero(mask)[0])]
    shown = ", ".join(str(i) for i in idx[:limit])
    return f"[{shown}{', ...' if len(idx) > limit else ''}]"


def first_direction(precond, R, xp):
    """The start of a block PCG from the residual ``R`` (n, k): ``(scale, Z, P)``.

    ``Z = M R`` (``R`` itself without a preconditioner) and the first search direction ``P``,
    a block of the loop's own: the fused updates (:func:`gpnum.backend.cg_direction`) overwrite
    it, so it is a copy unless ``Z`` already is a fresh array. ``scale`` is ``M``'s diagonal
    when ``M`` is diagonal (no low-rank part; the vector updates then apply it themselves),
    else None.
    """
    scale = None if precond is None else precond.diagonal_scale()
    if precond is None:
        Z = R
    elif scale is not None:
        Z = R * (scale if scale.ndim == 0 else scale[:, None])
    else:
        Z = precond._matmat(R)
    P = Z if Z is not R and (scale is not None or precond.fresh_products) \
        else xp.asarray(Z, copy=True)
    return scale, Z, P


def pcg(A, B, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, x0=None, check_every=None):
    """Solve ``A X = B`` for symmetric positive-definite ``A`` by (preconditioned) CG.

    All columns iterate together (one block product with ``A`` and one with ``M`` per
    iteration); each column has its own step sizes and stops on its own residual.

    Parameters
    ----------
    A : LinearOperator, array (n, n) or callable ``X (n, k) -> A X``
        Symmetric positive definite.
    B : array (n,) or (n, k)
    rtol, atol : float
        Column ``j`` stops when ``||b_j - A x_j|| <= max(rtol ||b_j||, atol)``.
    maxiter : int, optional
        Default ``10 n`` (SciPy's default).
    M : LinearOperator, array or callable, optional
        Preconditioner approximating ``A^{-1}`` (SciPy's convention), symmetric positive
        definite; e.g. :func:`pivoted_cholesky_preconditioner`.
    x0 : array like ``B``, optional
        Starting guess (default zero).
    check_every : int, optional
        Iterations between convergence tests (host synchronisations); default 1 on the host,
        5 on an accelerator. Columns freeze as soon as they converge, whatever this value.

    Returns
    -------
    SolveResult
        ``x``, ``info``, ``num_iter``, ``residual_norm``, ``converged``, ``message``.
        Not converging warns with :class:`~gpnum.errors.ConvergenceWarning`; so does a
        breakdown (``info < 0``: negative curvature or an indefinite preconditioner).
    """
    op, B2, vector = prepare_system(A, B)
    xp = op.xp
    n, k = B2.shape
    rtol, atol = check_tolerances(rtol, atol)
    maxiter = check_maxiter(maxiter, 10 * n)
    check_every = default_check_every(xp, op.device, check_every)
    precond = None
    if M is not None:
        precond = aslinearoperator(M, like=B2)
        if precond.shape != op.shape or precond.dtype != op.dtype or precond.xp is not xp:
            raise ShapeError(f"M: expected an operator of shape {describe_shape(op.shape)} and "
                             f"dtype {op.dtype}, got {describe_shape(precond.shape)} "
                             f"{precond.dtype}")
    dtype, device = op.dtype, op.device

    # X, R and P are this loop's own blocks: cg_update and cg_direction overwrite them.
    if x0 is None:
        X = xp.zeros((n, k), dtype=dtype, device=device)
        R = xp.asarray(B2, copy=True)
    else:
        if not is_array(x0) or get_namespace(x0) is not xp or tuple(x0.shape) != tuple(B.shape):
            got = describe_shape(x0.shape) if is_array(x0) else type(x0).__name__
            raise ShapeError(f"x0: expected an array of B's shape {describe_shape(B.shape)}, "
                             f"got {got}")
        check_finite(xp, x0, "x0")
        X = xp.astype(x0[:, None] if vector else x0, dtype)
        R = B2 - op._matmat(X)

    b_norm = xp.linalg.vector_norm(B2, axis=0)
    tol = xp.maximum(rtol * b_norm, atol)
    r_norm = xp.linalg.vector_norm(R, axis=0)
    active = r_norm > tol
    bad = xp.zeros((k,), dtype=xp.int32, device=device)      # breakdown code per column
    scale, Z, P = first_direction(precond, R, xp)
    rz = column_dots(R, Z)
    prec_bad = active & (rz <= 0.0)
    bad = xp.where(prec_bad, _INDEFINITE_PRECONDITIONER, bad)
    active = active & ~prec_bad

    num_iter = 0
    state = "running"
    if not bool(xp.any(active)):
        state = "converged"
    while state == "running" and num_iter < maxiter:
        AP, pAp = op._matmat_dots(P)
        # A breakdown freezes its column: negative curvature or an indefinite preconditioner.
        curv_bad = active & (pAp <= 0.0)
        bad = xp.where(curv_bad, _NEGATIVE_CURVATURE, bad)
        active = active & ~curv_bad
        alpha = xp.where(active, rz / xp.where(active, pAp, 1.0), 0.0)
        X, R, rr, rz_new = cg_update(X, R, P, AP, alpha, scale)
        r_norm = xp.where(active, xp.sqrt(rr), r_norm)
        if precond is None:
            Z, rz_new = R, rr   # without a preconditioner r^T z is ||r||^2
        elif scale is not None:
            Z = R               # cg_direction scales it
        else:
            Z = precond._matmat(R)
            rz_new = column_dots(R, Z)
        still = active & (r_norm > tol)
        prec_bad = still & (rz_new <= 0.0)
        bad = xp.where(prec_bad, _INDEFINITE_PRECONDITIONER, bad)
        active = still & ~prec_bad
        beta = xp.where(active, rz_new / xp.where(active, rz, 1.0), 0.0)
        P = cg_direction(Z, P, beta, scale)
        rz = xp.where(active, rz_new, rz)
        num_iter += 1
        if num_iter % check_every == 0 or num_iter == maxiter:
            # One synchronisation: 2 = non-finite values, 1 = no column left, 0 = go on.
            flag = int(xp.astype(xp.any(~xp.isfinite(r_norm)), xp.int32) * 2
                       + xp.astype(~xp.any(active), xp.int32))
            if flag >= 2:
                state = "non-finite"
            elif flag == 1:
                state = "stopped"

    converged = r_norm <= tol
    broke = bad != 0
    info = 0
    if state == "non-finite":
        info = _NON_FINITE
        message = (f"breakdown after {num_iter} iterations: non-finite values in the products "
                   "(NaN or Inf in A, M or their outputs)")
    elif bool(xp.any(broke)):
        codes = [c for c in (_NEGATIVE_CURVATURE, _INDEFINITE_PRECONDITIONER)
                 if bool(xp.any(bad == c))]
        info = codes[0]
        parts = []
        if _NEGATIVE_CURVATURE in codes:
            parts.append(f"negative curvature (p^T A p <= 0) in column(s) "
                         f"{_column_list(bad == _NEGATIVE_CURVATURE, xp)}: A is not positive "
                         "definite")
        if _INDEFINITE_PRECONDITIONER in codes:
            parts.append(f"r^T M r <= 0 in column(s) "
                         f"{_column_list(bad == _INDEFINITE_PRECONDITIONER, xp)}: the "
                         "preconditioner M is not positive definite")
        message = f"breakdown after {num_iter} iterations: " + "; ".join(parts)
    elif bool(xp.all(converged)):
        message = f"converged in {num_iter} iterations"
    else:
        info = num_iter
        worst = float(xp.max(r_norm / xp.where(b_norm > 0.0, b_norm, 1.0)))
        n_bad = int(xp.sum(xp.astype(~converged, xp.int32)))
        message = (f"did not converge in {num_iter} iterations: {n_bad} of {k} column(s) above "
                   f"tolerance, worst relative residual {worst:.2e} > rtol {rtol:.1e}")
    if info != 0:
        warnings.warn(f"pcg: {message}", ConvergenceWarning, stacklevel=2)
    if vector:
        X, r_norm, b_norm, converged, broke = X[:, 0], r_norm[0], b_norm[0], converged[0], broke[0]
    return SolveResult(x=X, info=info, num_iter=num_iter, residual_norm=r_norm, b_norm=b_norm,
                       converged=converged, breakdown=broke, message=message)
