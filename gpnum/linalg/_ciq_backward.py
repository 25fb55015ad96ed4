"""Backward passes of CIQ: :func:`inv_sqrt_matmul_vjp` and :func:`sqrt_matmul_vjp`.

They reuse the forward's shifts, weights, deflation and per-shift solves (no new Lanczos): for
``x = sum_q w_q (K + s_q)^{-1} b`` and cotangent ``xbar``,
``bbar = sum_q w_q (K + s_q)^{-1} xbar`` (one more msMINRES) and the gradient w.r.t. the
parameters of ``K`` is ``-sum_q w_q param_vjp((K + s_q)^{-1} xbar, (K + s_q)^{-1} b)``
(Pleiss et al. 2020; the ``param_vjp`` convention of docs/linalg.md).
"""

from __future__ import annotations

import warnings

from gpnum.backend import get_namespace
from gpnum.errors import ConvergenceWarning, ShapeError, describe_shape
from gpnum.linalg._ciq import _as_operator
from gpnum.linalg._ciq_deflation import _complement_operator
from gpnum.linalg._ciq_result import CIQResult
from gpnum.linalg._ciq_solves import _DeferredSolves, _shifted_solves, _weighted_sum

__all__ = ["inv_sqrt_matmul_vjp", "sqrt_matmul_vjp"]


def _inv_sqrt_backward(result, A, B2, xbar2, rtol, maxiter, workspace=None):
    """(bbar (m, k), A.param_vjp dict) for ``x = K^{-1/2} B`` given ``xbar``."""
    xp = get_namespace(B2, xbar2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        complement = result.complement
        if result.deflation is not None and complement is None:
            complement = _complement_operator(A, result.deflation[1], None,
                                              result.eigen_bounds[0])
        # A short forward basis (at most q / 2 vectors a column: K_ZX after deflation) is
        # kept, and then the backward's basis too: the cotangent comes from the two bases,
        # with neither's (q, m, k) solves formed (_DeferredSolves.factors_against).
        forward = result._solves
        factored = (isinstance(forward, _DeferredSolves) and forward.basis is not None
                    and 2 * len(forward.coeffs) <= result.shifts.shape[0])
        U, res = _shifted_solves(A, xbar2, result.shifts, result.deflation, complement, rtol,
                                 maxiter, workspace, weights=result.weights if factored else None,
                                 keep_basis=factored)
    if res.info > 0:
        warnings.warn(f"CIQ backward: msMINRES stopped after {res.num_iter} iterations short of "
                      f"rtol={rtol:g} (info={res.info}).", ConvergenceWarning, stacklevel=3)
    w = result.weights
    if isinstance(U, _DeferredSolves):
        return U.weighted, A.param_vjp(*forward.factors_against(U, -w))
    # U (q, m, k): (K + s_q)^{-1} xbar (msMINRES folded its basis, or a long forward one)
    bbar = _weighted_sum(xp, w, U)
    q, m, k = U.shape
    # sum_q w_q param_vjp(U_q, V_q) as one call over q*k stacked columns. Any column order
    # will do if U and V share it: (k, q) order is the memory layout msMINRES writes (its
    # solutions are views of a (k, q, m) array), so on NumPy these are views, not copies of
    # q m k values each (docs/benchmarks.md, "Measurements behind implementation choices").
    # U is this call's own msMINRES output: scaled by -w_q in place (two fewer (q, m, k)
    # temporaries, which are fresh memory each step).
    U *= -w[:, None, None]
    Uw = xp.reshape(xp.permute_dims(U, (2, 0, 1)), (k * q, m)).T
    V = xp.reshape(xp.permute_dims(result.solves, (2, 0, 1)), (k * q, m)).T
    grads = A.param_vjp(Uw, V)
    return bbar, grads


def _vjp_inputs(result, B, x_bar):
    """Check the cotangent's shape; return (B was a vector, B as (m, k))."""
    if tuple(x_bar.shape) != tuple(result.x.shape):
        raise ShapeError(f"x_bar: expected shape {describe_shape(result.x.shape)}, got "
                         f"{describe_shape(x_bar.shape)}")
    vec = B.ndim == 1
    return vec, (B[:, None] if vec else B)


def _add_grads(g1, g2):
    """Sum two (possibly nested) gradient dicts with the same structure."""
    out = {}
    for key in g1:
        a, b = g1[key], g2[key]
        if isinstance(a, dict):
            out[key] = _add_grads(a, b)
        elif a is None:
            out[key] = None
        else:
            out[key] = a + b
    return out


def inv_sqrt_matmul_vjp(result: CIQResult, A, B, x_bar, *, rtol=None, maxiter: int = 200,
                        workspace=None):
    """Backward pass of :func:`inv_sqrt_matmul`.

    Parameters
    ----------
    result : CIQResult
        The forward result (its shifts, weights and per-shift solves are reused).
    A : LinearOperator (m, m)
        The same operator as in the forward call.
    B : array (m,) or (m, k)
        The forward right-hand sides.
    x_bar : array like ``result.x``
        Cotangent of ``x``.
    rtol : float, optional
        Tolerance of the one extra msMINRES solve; default 1e-3 or tighter as in the forward.

    Returns
    -------
    B_bar : array like ``B``
        Gradient w.r.t. ``B``.
    A_grads : dict
        Gradient w.r.t. the parameters of ``A``, as returned by ``A.param_vjp``.
    """
    A = _as_operator(A, B)
    vec, B2 = _vjp_inputs(result, B, x_bar)
    xb2 = x_bar[:, None] if vec else x_bar
    rtol = 1e-3 if rtol is None else rtol
    bbar, grads = _inv_sqrt_backward(result, A, B2, xb2, rtol, maxiter, workspace)
    return (bbar[:, 0] if vec else bbar), grads


def sqrt_matmul_vjp(result: CIQResult, A, B, x_bar, *, rtol=None, maxiter: int = 200,
                    workspace=None):
    """Backward pass of :func:`sqrt_matmul`; same conventions as :func:`inv_sqrt_matmul_vjp`.

    With ``y = K z`` and ``z = K^{-1/2} B``: ``zbar = K ybar`` and ``param_vjp(ybar, z)`` from the
    outer product, then the inverse-square-root backward for ``zbar``.
    """
    A = _as_operator(A, B)
    vec, B2 = _vjp_inputs(result, B, x_bar)
    yb = x_bar[:, None] if vec else x_bar
    z = result.inv_sqrt_x[:, None] if vec else result.inv_sqrt_x
    zbar = A @ yb
    g_outer = A.param_vjp(yb, z)
    rtol = 1e-3 if rtol is None else rtol
    bbar, g_inner = _inv_sqrt_backward(result, A, B2, zbar, rtol, maxiter, workspace)
    return (bbar[:, 0] if vec else bbar), _add_grads(g_outer, g_inner)
