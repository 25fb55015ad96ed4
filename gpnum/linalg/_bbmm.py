"""Batched preconditioned CG that also returns Lanczos tridiagonals (BBMM), and the stochastic
log-determinant and trace estimates built on it.

Gardner, Pleiss, Bindel, Weinberger & Wilson (2018), "GPyTorch: Blackbox matrix-matrix Gaussian
process inference with GPU acceleration", NeurIPS: one block CG over ``[y, z_1 .. z_t]`` gives
``K^{-1} y``, the solves ``K^{-1} z_i`` of the Hutchinson trace estimate and, from the CG step
sizes, the Lanczos tridiagonal of each probe for stochastic Lanczos quadrature (SLQ) of
``log det K``: all three from the same products with ``K``.

With a preconditioner ``M = P^{-1}`` (``P`` symmetric positive definite), CG on ``A X = B``
is Lanczos on ``P^{-1/2} A P^{-1/2}`` started at ``P^{-1/2} b``; the tridiagonal of column ``b``
follows from CG's step sizes ``a_j`` and ``b_j`` (Saad 2003, section 6.7.3):

    T[0, 0] = 1 / a_0,    T[j, j] = 1 / a_j + b_{j-1} / a_{j-1},    T[j, j+1] = sqrt(b_j) / a_j.

Drawing probes ``z ~ (0, P)`` makes ``w = P^{-1/2} z`` isotropic, so that

    log det A = log det P + E[ (z^T P^{-1} z) e_1^T log(T_z) e_1 ],
    tr(A^{-1} dA) = E[ (A^{-1} z)^T dA (P^{-1} z) ]

(Gardner et al. 2018, section 4 and appendix). ``log det P`` is exact (Woodbury).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from gpnum.backend import cg_direction, cg_update, column_dots, default_rng
from gpnum.errors import ConvergenceWarning, NotPSDError
from gpnum.linalg._lanczos import tridiagonal
from gpnum.linalg._operators import aslinearoperator
from gpnum.linalg._pcg import first_direction
from gpnum.linalg._pivoted_cholesky import WoodburyInverse
from gpnum.linalg._validation import prepare_system

__all__ = ["pcg_lanczos", "PCGLanczosResult", "preconditioner_probes", "lanczos_quadrature"]


@dataclass(frozen=True, repr=False)
class PCGLanczosResult:
    """Outcome of :func:`pcg_lanczos`.

    Attributes
    ----------
    x : array (n, k)
        Approximate solutions of ``A x_j = b_j``.
    tridiag_alpha : array (k, j)
        Diagonals of the Lanczos tridiagonals (one per column) of the preconditioned operator;
        iterations after a column stopped are decoupled padding (diagonal 1, off-diagonal 0),
        which Gauss quadrature gives zero weight.
    tridiag_beta : array (k, j - 1)
        Off-diagonals.
    steps : array of int (k,)
        Lanczos steps recorded per column.
    start_norm2 : array (k,)
        ``b_j^T M b_j`` (the squared norm of the preconditioned start vector).
    num_iter : int
    relative_residual : array (k,)
    converged : bool
        The stopping rule met: every column at or below ``rtol`` (``stop="all"``), or
        their mean (``stop="mean"``).
    """

    x: object
    tridiag_alpha: object
    tridiag_beta: object
    steps: object
    start_norm2: object
    num_iter: int
    relative_residual: object
    converged: bool

    def __repr__(self):
        return (f"PCGLanczosResult(num_iter={self.num_iter}, converged={self.converged})")


_STOP_RULES = ("all", "mean")


def pcg_lanczos(A, B, *, M=None, rtol=1e-2, maxiter=1000, min_iter=10, check_every=None,
                stop="all"):
    """Block preconditioned CG on ``A X = B`` that also returns each column's Lanczos tridiagonal.

    All columns iterate together (one block product with ``A`` and one with ``M`` per
    iteration). The run stops once at least ``min_iter`` iterations are done and every column's
    relative residual ``||b_j - A x_j|| / ||b_j||`` is at most ``rtol``; a column whose residual
    falls to rounding level (``1e-12`` relative, or a zero right-hand side) freezes earlier, and
    its tridiagonal ends there.

    Parameters
    ----------
    A : LinearOperator, array (n, n) or callable
        Symmetric positive definite.
    B : array (n, k)
    M : LinearOperator, optional
        Symmetric positive definite preconditioner ``~ A^{-1}``.
    rtol : float
        Relative residual tolerance (Gardner et al. 2018 train with 1.0 and at least ``min_iter``
        iterations: the tridiagonals, not the solves, set the accuracy there).
    maxiter : int
        Most iterations; stopping there warns (:class:`~gpnum.errors.ConvergenceWarning`).
    min_iter : int
        Fewest iterations (the Lanczos quadrature's depth when ``rtol`` is loose).
    check_every : int, optional
        Iterations between stopping tests (host synchronisations); default 1.
    stop : {"all", "mean"}
        ``"all"`` (default): stop once every column's relative residual is at most ``rtol``.
        ``"mean"``: once the mean of the columns' relative residuals is, GPyTorch's rule
        (its ``linear_cg``): weaker, some columns may stop above ``rtol`` (their solves and
        tridiagonals are then shallower), for comparisons with GPyTorch at equal work.

    Returns
    -------
    PCGLanczosResult

    Raises
    ------
    NotPSDError
        Negative curvature ``p^T A p <= 0`` or ``r^T M r <= 0``.
    """
    op, B2, _ = prepare_system(A, B)
    xp = op.xp
    n, k = B2.shape
    precond = None if M is None else aslinearoperator(M, like=B2)
    rtol = float(rtol)
    if not rtol > 0.0:
        raise ValueError(f"rtol: expected a positive number, got {rtol!r}")
    for name, value in (("maxiter", maxiter), ("min_iter", min_iter)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    check_every = 1 if check_every is None else int(check_every)
    if stop not in _STOP_RULES:
        raise ValueError(f"stop: expected 'all' or 'mean', got {stop!r}")
    maxiter = min(maxiter, n)
    min_iter = min(min_iter, maxiter)
    dtype, device = op.dtype, op.device
    eps_freeze = 1e-12 if dtype == xp.float64 else 1e-6

    # X, R and P are this loop's own blocks: cg_update and cg_direction overwrite them.
    X = xp.zeros((n, k), dtype=dtype, device=device)
    R = xp.asarray(B2, copy=True)
    b_norm = xp.linalg.vector_norm(B2, axis=0)
    safe_b = xp.where(b_norm > 0.0, b_norm, 1.0)
    scale, Z, P = first_direction(precond, R, xp)
    rz = column_dots(R, Z)
    start_norm2 = rz
    live = (b_norm > 0.0)
    diag_list, off_list = [], []
    prev_alpha = xp.ones((k,), dtype=dtype, device=device)
    prev_beta = xp.zeros((k,), dtype=dtype, device=device)
    steps = xp.zeros((k,), dtype=xp.int64, device=device)
    rel = b_norm / safe_b
    num_iter = 0
    while num_iter < maxiter:
        AP, pAp = op._matmat_dots(P)
        if bool(xp.any(live & (pAp <= 0.0))):
            raise NotPSDError(f"pcg_lanczos: p^T A p <= 0 at iteration {num_iter}: A is not "
                              "positive definite (add jitter or raise the noise variance)")
        a = xp.where(live, rz / xp.where(live, pAp, 1.0), 0.0)
        X, R, rr, rz_new = cg_update(X, R, P, AP, a, scale)
        if precond is None:
            Z, rz_new = R, rr
        elif scale is not None:
            Z = R                   # cg_direction scales it
        else:
            Z = precond._matmat(R)
            rz_new = column_dots(R, Z)
        if bool(xp.any(live & (rz_new < 0.0))):
            raise NotPSDError("pcg_lanczos: r^T M r < 0: the preconditioner is not positive "
                              "definite")
        b = xp.where(live, rz_new / xp.where(live, rz, 1.0), 0.0)
        # The tridiagonal entries of this step (decoupled padding for frozen columns).
        safe_a = xp.where(live, a, 1.0)
        diag = xp.where(live, 1.0 / safe_a + prev_beta / prev_alpha, 1.0)
        diag_list.append(diag)
        steps = steps + xp.astype(live, xp.int64)
        prev_alpha = xp.where(live, a, prev_alpha)
        prev_beta = xp.where(live, b, prev_beta)
        rel = xp.sqrt(rr) / safe_b
        live = live & (rel > eps_freeze)
        # A column frozen now is decoupled from its padding.
        off_list.append(xp.where(live, xp.sqrt(xp.where(live, b, 0.0)) / safe_a, 0.0))
        P = cg_direction(Z, P, xp.where(live, b, 0.0), scale)
        rz = xp.where(live, rz_new, rz)
        num_iter += 1
        if num_iter >= min_iter and (num_iter % check_every == 0 or num_iter == maxiter):
            if bool(_stopped(xp, rel, rtol, stop) | ~xp.any(live)):
                break
    converged = bool(_stopped(xp, rel, rtol, stop))
    if not converged:
        what = "worst" if stop == "all" else "mean"
        value = xp.max(rel) if stop == "all" else xp.mean(rel)
        warnings.warn(f"pcg_lanczos: did not converge in {num_iter} iterations: {what} "
                      f"relative residual {float(value):.2e} > rtol {rtol:.1e}",
                      ConvergenceWarning, stacklevel=2)
    alpha_T = xp.stack(diag_list, axis=1)                     # (k, j)
    # The last off-diagonal couples to the step not taken: drop it.
    beta_T = xp.stack(off_list[:-1], axis=1) if num_iter > 1 else \
        xp.zeros((k, 0), dtype=dtype, device=device)
    return PCGLanczosResult(x=X, tridiag_alpha=alpha_T, tridiag_beta=beta_T, steps=steps,
                            start_norm2=start_norm2, num_iter=num_iter, relative_residual=rel,
                            converged=converged)


def _stopped(xp, rel, rtol, stop):
    """Whether the relative residuals ``rel`` (k,) meet the stopping rule (0-d bool)."""
    return xp.all(rel <= rtol) if stop == "all" else xp.mean(rel) <= rtol


def lanczos_quadrature(alpha, beta, start_norm2, fn=None):
    """Gauss quadrature ``||w||^2 e_1^T f(T) e_1`` for each tridiagonal (Golub & Meurant 2010).

    Parameters
    ----------
    alpha : array (k, j)
    beta : array (k, j - 1)
    start_norm2 : array (k,)
        ``||w||^2`` of the start vectors.
    fn : callable, optional
        ``f`` applied elementwise to the Ritz values (default ``log``).

    Returns
    -------
    array (k,)

    Raises
    ------
    NotPSDError
        A Ritz value with weight <= 0 (for ``log``).
    """
    from gpnum.backend import get_namespace

    xp = get_namespace(alpha)
    T = tridiagonal(alpha, beta)
    theta, S = xp.linalg.eigh(T)
    weights = S[:, 0, :] * S[:, 0, :]
    used = weights > 0.0
    if fn is None:
        if not bool(xp.all(xp.where(used, theta, 1.0) > 0.0)):
            raise NotPSDError(f"a Ritz value {float(xp.min(theta)):.3e} <= 0: the operator is "
                              "not positive definite, its log-determinant is undefined")
        values = xp.log(xp.where(used, theta, 1.0))
    else:
        values = fn(theta)
    return start_norm2 * xp.sum(weights * values, axis=1)


def _hadamard_rows(rows, xp, dtype, device):
    """The first ``rows`` rows of a Sylvester Hadamard matrix of order ``t = 2^m >= rows``:
    entries +-1 and ``H H^T = t I`` exactly."""
    H = xp.ones((1, 1), dtype=dtype, device=device)
    while H.shape[0] < rows:
        H = xp.concat([xp.concat([H, H], axis=1), xp.concat([H, -H], axis=1)], axis=0)
    return H[:rows, :]


def preconditioner_probes(M, num_probes, *, seed=0, design="rademacher"):
    """Probe vectors ``z = F g_1 + D^{1/2} g_2`` with covariance ``P = F F^T + D`` (Rademacher
    ``g_1``, ``g_2``), for a :class:`WoodburyInverse` preconditioner ``M = P^{-1}``.

    ``E[z z^T] = P`` makes ``P^{-1/2} z`` isotropic, which the preconditioned stochastic
    Lanczos quadrature and trace estimates need (module notes). Seeded: the same seed gives
    the same probes, so the stochastic objective is a deterministic function of the parameters.

    With ``design="hadamard"`` the stacked ``[g_1; g_2]`` are the rows of a Sylvester Hadamard
    matrix of order ``t = 2^m >= n + r`` (``num_probes`` is then ignored): their outer products
    sum to ``t I`` exactly, so the estimates built on them are exact up to the solver's
    tolerance -- a check of the machinery, at the cost of ``t > n`` probes.

    Returns
    -------
    array (n, num_probes), or (n, t) for the Hadamard design
    """
    if design not in ("rademacher", "hadamard"):
        raise ValueError(f"design: expected 'rademacher' or 'hadamard', got {design!r}")
    if not isinstance(M, WoodburyInverse):
        raise TypeError(f"M: expected a WoodburyInverse, got {type(M).__name__}")
    if isinstance(num_probes, bool) or not isinstance(num_probes, int) or num_probes < 1:
        raise ValueError(f"num_probes: expected an integer >= 1, got {num_probes!r}")
    xp = M.xp
    n = M.shape[0]
    F = M.lowrank.factor
    d = M.lowrank.diag.diag
    r = F.shape[1]
    if design == "hadamard":
        H = _hadamard_rows(n + r, xp, M.dtype, M.device)
        g2, g1 = H[:n, :], H[n:, :]
    else:
        rng = default_rng(seed, xp=xp, device=M.device)
        g2 = rng.rademacher((n, num_probes), dtype=M.dtype)
        g1 = rng.rademacher((r, num_probes), dtype=M.dtype) if r > 0 else None
    scale = xp.sqrt(d)
    Z = g2 * (scale if d.ndim == 0 else scale[:, None])
    if r > 0:
        Z = Z + F @ g1
    return Z

