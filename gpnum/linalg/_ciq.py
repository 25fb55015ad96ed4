"""Contour integral quadrature (CIQ): ``K^{-1/2} B`` and ``K^{1/2} B`` with one msMINRES call.

For a symmetric positive-definite ``K`` with spectrum in ``[lmin, lmax]``, the rational quadrature
of Hale, Higham & Trefethen (2008, "Computing A^alpha, log(A), and related matrix functions by
contour integrals", method 2 for ``z^{-1/2}``) gives

    K^{-1/2} B  ~=  sum_q w_q (K + s_q I)^{-1} B,        q = 1..Q,

with positive shifts ``s_q`` and weights ``w_q`` from Jacobi elliptic functions. All Q shifted
systems share one Krylov space, so multi-shift MINRES solves them for the price of one product
with ``K`` per iteration (Pleiss, Jankowiak, Eriksson, Damle & Gardner 2020, "Fast matrix square
roots with applications to Gaussian processes and Bayesian optimization", NeurIPS).
``K^{1/2} B = K (K^{-1/2} B)``.

The backward passes reuse the forward's shifts, weights and per-shift solves (no new Lanczos):
for ``x = sum_q w_q (K + s_q)^{-1} b`` and cotangent ``xbar``,
``bbar = sum_q w_q (K + s_q)^{-1} xbar`` (one more msMINRES) and the gradient w.r.t. the
parameters of ``K`` is ``-sum_q w_q param_vjp((K + s_q)^{-1} xbar, (K + s_q)^{-1} b)``, evaluated as
a single ``param_vjp`` over ``Q k`` stacked columns.

Never precondition the whitening solve: a preconditioned CIQ returns ``R`` with ``R R^T = K^{-1}``
but ``R^T R != K^{-1}``, which is not a valid whitening of the SVGP of Hensman, Matthews &
Ghahramani (2015, "Scalable variational Gaussian process classification", AISTATS).

Deflation (``deflate=``) accelerates the shifted solves without changing what is computed. Kernel
matrices have a few large, fast-decaying eigenvalues above a cluster at the jitter; they set the
condition number and, once Lanczos has found them, come back as spurious copies that stall it.
Leading Ritz pairs ``(theta_i, w_i)`` from randomized subspace iteration
(:func:`gpnum.linalg.top_eigenpairs`) whose residual is below ``rtol / 10`` relative are split off
exactly: ``(K + s I)^{-1} b = W (Theta + s I)^{-1} W^T b + (P K + s I)^{-1} P b`` with
``P = I - W W^T``, and msMINRES runs on ``P K`` restricted to the complement of ``W``, whose
condition number is ``lambda_{r+1} / lambda_min`` instead of ``lambda_1 / lambda_min``. The
quadrature and the per-shift solves (hence the backward passes) are the same as without
deflation; the error the split adds is of the order of the accepted Ritz residuals.
"""

from __future__ import annotations

import math
import warnings

from gpnum.backend import asarray, get_namespace
from gpnum.errors import ConvergenceWarning, NotPSDError, ShapeError, check_finite, describe_shape
from gpnum.linalg._ciq_deflation import _find_deflation
from gpnum.linalg._ciq_quadrature import ciq_quadrature
from gpnum.linalg._ciq_result import CIQResult
from gpnum.linalg._ciq_solves import _DeferredSolves, _shifted_solves, _weighted_sum
from gpnum.linalg._lanczos import eigen_bounds as lanczos_eigen_bounds
from gpnum.linalg._operators import Dense, LinearOperator

__all__ = ["inv_sqrt_matmul", "sqrt_matmul"]


def _as_operator(A, B):
    if isinstance(A, LinearOperator):
        return A
    if hasattr(A, "shape") and hasattr(A, "__matmul__"):
        return Dense(A, symmetric=True)
    raise TypeError(f"A: expected a LinearOperator or a square array, got {type(A).__name__}")


def _check_inputs(A, B):
    xp = get_namespace(B)
    if B.ndim not in (1, 2):
        raise ShapeError(f"B: expected shape (m,) or (m, k), got {describe_shape(B.shape)}")
    m = A.shape[0]
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"A: expected a square operator (m, m), got {describe_shape(A.shape)}")
    if B.shape[0] != m:
        raise ShapeError(f"B: expected shape ({m},) or ({m}, k) to match A, got "
                         f"{describe_shape(B.shape)}")
    check_finite(xp, B, "B")
    return xp


def _resolve_bounds(A, eigen_bounds, num_lanczos):
    if eigen_bounds is not None:
        lo, hi = (float(v) for v in eigen_bounds)
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"eigen_bounds: expected 0 < lower <= upper < inf, got {eigen_bounds}")
        return lo, hi
    # With a known positive floor (jitter in an AddedDiag) the first Lanczos run's bounds are
    # final: doubling the iterations could only lift the lower bound above the floor, and an
    # under-estimated lmin costs CIQ little (module notes), while the further 90 matrix-vector
    # products cost eight (m, m) x (m, 256) products' time at m = 2000 (memory-bound).
    floor = A._spectrum_floor()
    lo, hi = lanczos_eigen_bounds(A, num_iter=num_lanczos,
                                  max_iter=num_lanczos if floor > 0.0 else None)
    if not (hi > 0.0) or not (lo > 0.0):
        raise NotPSDError(
            f"A ({A.shape[0]} x {A.shape[0]}) is not positive definite, or its smallest "
            f"eigenvalue could not be bounded away from zero: Lanczos bounds its spectrum by "
            f"[{lo:.3g}, {hi:.3g}]. CIQ needs a positive-definite operator: add jitter as an "
            f"AddedDiag (whose diagonal floors the spectrum), or pass eigen_bounds.")
    return lo, hi


def inv_sqrt_matmul(A, B, *, num_quad: int = 15, rtol: float = 1e-3, maxiter: int = 200,
                    eigen_bounds=None, num_lanczos: int = 30, workspace=None,
                    deflate=None, deflate_start=None) -> CIQResult:
    """``K^{-1/2} B`` by contour integral quadrature and multi-shift MINRES.

    Parameters
    ----------
    A : LinearOperator or array (m, m)
        Symmetric positive-definite ``K``.
    B : array (m,) or (m, k)
        Right-hand sides.
    num_quad : int
        Quadrature nodes Q (15 is plenty up to condition numbers of about 1e6).
    rtol : float
        Relative residual tolerance of every shifted system (per shift and column).
    maxiter : int
        Maximum msMINRES iterations J.
    eigen_bounds : (float, float), optional
        Bounds ``lmin <= lambda(K) <= lmax``. Default: :func:`gpnum.linalg.eigen_bounds`
        (``num_lanczos`` Lanczos iterations, Ritz values widened by their residual bounds; for
        an operator with a known positive floor, such as an ``AddedDiag`` with jitter, the
        floor when the smallest Ritz value has not converged, without further iterations).
    workspace : gpnum.linalg.Workspace, optional
        Basis memory reused across calls (a training loop): see :func:`gpnum.linalg.msminres`.
    deflate : int, tuple or None
        Block size of the eigenpair search that deflates the solves (module notes); 0 turns
        deflation off (an integer searches once with that block). Default None: a block of
        ``min(384, m // 2)`` when ``m >= 128`` and ``k >= 16`` (where the search costs a few
        msMINRES iterations' worth of products), else off, followed by up to two further
        rounds on the complement of the pairs found while a round is predicted to save more
        products than it costs (slowly decaying spectra: short lengthscales).
        At most ``m // 2``. Or an earlier :class:`CIQResult` for the same operator, to reuse
        its pairs, its complement operator (for a held matrix, the deflated matrix) and, unless
        ``eigen_bounds`` is given, its eigenvalue bounds: for example over the chunks of a
        prediction. Or that result's ``deflation`` tuple (pass its ``eigen_bounds`` too).
    deflate_start : SearchStart, optional
        The ``search_start`` of an earlier result on a nearby operator (a training loop's
        previous step): the eigenpair search starts from its Ritz vectors instead of Gaussian
        ones, which converges more pairs for the same products, and runs at least its number
        of rounds. Pairs are accepted by the same residual test, so the accuracy does not
        change; fewer iterations are left to msMINRES.

    Returns
    -------
    CIQResult
        ``x`` (m, k) (or (m,) for a vector ``B``) and what the backward pass needs.

    Raises
    ------
    NotPSDError
        If Lanczos shows ``A`` is not positive definite.
    ValueError, ShapeError
        For NaN/Inf in ``B``, mismatched shapes, ``num_quad < 1``.

    Warns
    -----
    ConvergenceWarning
        If msMINRES stops at ``maxiter`` short of ``rtol`` (the result has ``info > 0``).
    """
    if int(num_quad) < 1:
        raise ValueError(f"num_quad: expected an integer >= 1, got {num_quad}")
    A = _as_operator(A, B)
    xp = _check_inputs(A, B)
    vec = B.ndim == 1
    B2 = B[:, None] if vec else B
    if isinstance(deflate, CIQResult) and eigen_bounds is None:
        eigen_bounds = deflate.eigen_bounds
    lo, hi = _resolve_bounds(A, eigen_bounds, num_lanczos)
    shifts_h, weights_h = ciq_quadrature(lo, hi, num_quad)
    shifts = asarray(shifts_h, dtype=B.dtype, like=B2)
    weights = asarray(weights_h, dtype=B.dtype, like=B2)
    deflation, spent, complement, search_start = _find_deflation(
        A, A.shape[0], B2.shape[1], deflate, rtol, float(xp.finfo(B.dtype).eps), lo,
        deflate_start)
    with warnings.catch_warnings():
        # Re-issued below with CIQ's context instead of msMINRES's.
        warnings.simplefilter("ignore", ConvergenceWarning)
        solves, res = _shifted_solves(A, B2, shifts, deflation, complement, rtol, maxiter,
                                      workspace, weights)
    if res.info > 0:
        warnings.warn(f"CIQ: msMINRES stopped after {res.num_iter} iterations (maxiter={maxiter}) "
                      f"before reaching rtol={rtol:g}; K^(-1/2) B is less accurate than asked "
                      f"(info={res.info}).", ConvergenceWarning, stacklevel=2)
    x = solves.weighted if isinstance(solves, _DeferredSolves) else _weighted_sum(xp, weights,
                                                                                   solves)
    return CIQResult(x=x[:, 0] if vec else x, shifts=shifts, weights=weights, _solves=solves,
                     inv_sqrt_x=x[:, 0] if vec else x, num_iter=int(res.num_iter),
                     info=int(res.info), eigen_bounds=(lo, hi), kind="inv_sqrt",
                     deflation=deflation, deflation_products=spent, complement=complement,
                     search_start=search_start)


def sqrt_matmul(A, B, *, num_quad: int = 15, rtol: float = 1e-3, maxiter: int = 200,
                eigen_bounds=None, num_lanczos: int = 30, workspace=None,
                deflate=None, deflate_start=None) -> CIQResult:
    """``K^{1/2} B = K (K^{-1/2} B)`` by contour integral quadrature; see :func:`inv_sqrt_matmul`.

    Returns a :class:`CIQResult` whose ``x`` is ``K^{1/2} B`` (m, k) and ``inv_sqrt_x`` is
    ``K^{-1/2} B``.
    """
    A = _as_operator(A, B)
    r = inv_sqrt_matmul(A, B, num_quad=num_quad, rtol=rtol, maxiter=maxiter,
                        eigen_bounds=eigen_bounds, num_lanczos=num_lanczos, workspace=workspace,
                        deflate=deflate, deflate_start=deflate_start)
    x = A @ r.inv_sqrt_x
    return CIQResult(x=x, shifts=r.shifts, weights=r.weights, _solves=r._solves,
                     inv_sqrt_x=r.inv_sqrt_x, num_iter=r.num_iter + 1, info=r.info,
                     eigen_bounds=r.eigen_bounds, kind="sqrt", deflation=r.deflation,
                     deflation_products=r.deflation_products, complement=r.complement,
                     search_start=r.search_start)
