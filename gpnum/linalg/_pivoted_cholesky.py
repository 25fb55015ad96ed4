"""Pivoted Cholesky low-rank factors and the Woodbury preconditioner built on them."""

from __future__ import annotations

import math

from gpnum.backend import cho_solve, cholesky, solve_triangular
from gpnum.linalg._operators import (
    AddedDiag,
    LinearOperator,
    LowRank,
    aslinearoperator,
    transpose_copy,
)
from gpnum.linalg._validation import default_check_every

__all__ = ["pivoted_cholesky", "WoodburyInverse", "pivoted_cholesky_preconditioner"]


def pivoted_cholesky(A, rank, tol=1e-6, *, return_pivots=False, check_every=None):
    """Greedy pivoted Cholesky: ``A ~= L L^T`` with ``L`` of shape (n, r), ``r <= rank``.

    Each step picks the largest remaining diagonal entry of ``A - L L^T`` as pivot, reads one
    column of ``A`` (``A.columns``: for a :class:`KernelMatrix` one kernel evaluation of
    O(n d)) and updates the residual diagonal: O(n r^2) work and O(n r) memory in all, never
    the whole matrix (Harbrecht, Peters & Schneider 2012; Gardner et al. 2018 use it as a
    preconditioner).

    Parameters
    ----------
    A : LinearOperator or array (n, n)
        Symmetric positive semi-definite.
    rank : int
        Largest rank r.
    tol : float
        Stop once ``trace(A - L L^T) <= tol * trace(A)`` (checked every ``check_every`` steps).
        Pivots below ``eps * trace(A)`` are never taken: they would only add rounding noise.
    return_pivots : bool
        Also return the pivot indices (an int64 array (r,)).
    check_every : int, optional
        Steps between stopping tests (host synchronisations); default 1 on the host, 5 on an
        accelerator.

    Returns
    -------
    L : array (n, r)
    pivots : array (r,), only if ``return_pivots``
    """
    op = aslinearoperator(A)
    op._require_square("pivoted_cholesky")
    xp = op.xp
    n = op.shape[0]
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank: expected an integer >= 1, got {rank!r}")
    tol = float(tol)
    if not tol >= 0.0 or math.isinf(tol):
        raise ValueError(f"tol: expected a finite number >= 0, got {tol!r}")
    check_every = default_check_every(xp, op.device, check_every)
    rank = min(rank, n)
    dtype, device = op.dtype, op.device
    eps = float(xp.finfo(dtype).eps)

    d = op.diagonal()
    if not bool(xp.all(xp.isfinite(d))):
        raise ValueError("A: expected a finite diagonal, got NaN or Inf")
    if not bool(xp.all(d >= 0.0)):
        raise ValueError(f"A: expected a non-negative diagonal (a PSD matrix), got a minimum of "
                         f"{float(xp.min(d)):.3e}")
    trace = xp.sum(d)
    stop_below = tol * trace
    pivot_floor = eps * trace
    L = xp.zeros((n, rank), dtype=dtype, device=device)
    pivots = []
    r = 0
    while r < rank:
        p = xp.reshape(xp.argmax(d), (1,))                   # stays on the device
        col = op.columns(p)[:, 0]
        if r > 0:
            col = col - L[:, :r] @ xp.take(L[:, :r], p, axis=0)[0, :]
        piv = xp.take(d, p)[0]
        ok = piv > pivot_floor
        # A pivot at rounding level ends the factor: its column would be noise.
        l_col = xp.where(ok, col / xp.sqrt(xp.where(ok, piv, 1.0)), 0.0)
        L[:, r] = l_col
        d = xp.maximum(d - l_col * l_col, 0.0)
        pivots.append(p)
        r += 1
        if r % check_every == 0 or r == rank:
            if bool(~ok | (xp.sum(d) <= stop_below)):
                break
    # A rounding-level pivot leaves an exactly zero column (and every later one): drop them.
    keep = r
    if keep > 0:
        norms = xp.linalg.vector_norm(L[:, :keep], axis=0)
        keep = int(xp.sum(xp.astype(norms > 0.0, xp.int32)))
    L = L[:, :keep]
    if return_pivots:
        piv = (xp.concat(pivots[:keep]) if keep > 0
               else xp.zeros((0,), dtype=xp.int64, device=device))
        return L, piv
    return L


class WoodburyInverse(LinearOperator):
    """``(F F^T + D)^{-1}`` applied through the Woodbury identity, for a low-rank-plus-diagonal.

    ``(F F^T + D)^{-1} = D^{-1} - D^{-1} F C^{-1} F^T D^{-1}`` with ``C = I + F^T D^{-1} F``
    (r x r, factorised once by Cholesky). Applying it to k vectors costs O(n r k).

    Parameters
    ----------
    lowrank : LowRank
        ``F F^T + D`` with a positive diagonal ``D``.

    Notes
    -----
    ``param_vjp(U, V)`` gives the gradient w.r.t. the parameters of ``lowrank``
    (``{"factor", "diag"}``): ``d(u^T K^{-1} v) = -(K^{-1} u)^T dK (K^{-1} v)``.
    """

    fresh_products = True

    symmetric = True

    def __init__(self, lowrank):
        if not isinstance(lowrank, LowRank) or lowrank.diag is None:
            raise TypeError(f"lowrank: expected a LowRank operator with a diagonal, got "
                            f"{type(lowrank).__name__}")
        super().__init__(lowrank.shape, lowrank.dtype, lowrank.device, lowrank.xp)
        xp = self.xp
        d = lowrank.diag.diag
        if not bool(xp.all(d > 0.0)):
            raise ValueError("lowrank: the Woodbury inverse needs a positive diagonal, got "
                             f"a minimum of {float(xp.min(d)):.3e}")
        self.lowrank = lowrank
        self._dinv = 1.0 / d
        F = lowrank.factor
        self._Fd = F * (self._dinv if d.ndim == 0 else self._dinv[:, None])     # D^{-1} F
        r = F.shape[1]
        C = xp.eye(r, dtype=self.dtype, device=self.device) + F.T @ self._Fd
        # a tiny positive diagonal (a vanishing noise variance) overflows C: name the matrix
        self._chol = cholesky(C, what="WoodburyInverse: I + F^T D^-1 F") if r > 0 else None
        # C^{-1} applied as two GEMMs with the explicit inverse of its (r x r) Cholesky factor:
        # inside a Krylov loop a LAPACK triangular solve on NumPy goes through SciPy's own
        # BLAS, whose threads then spin beside NumPy's and halve the speed of the n x n
        # products (docs/benchmarks.md). The error is
        # that of the triangular solve, about cond(L) eps = sqrt(cond(C)) eps.
        self._linv = (solve_triangular(self._chol, xp.eye(r, dtype=self.dtype,
                                                          device=self.device), lower=True)
                      if r > 0 else None)

    def diagonal_scale(self):
        # without a low-rank part the inverse is D^{-1}
        return self._dinv if self._chol is None else None

    def _scale(self, X):
        dinv = self._dinv
        return X * (dinv if dinv.ndim == 0 else dinv[:, None])

    def _matmat(self, X):
        out = self._scale(X)
        if self._chol is None:
            return out
        T = self._linv @ (self._Fd.T @ X)
        return out - self._Fd @ (self._linv.T @ T)

    def _diagonal(self):
        xp = self.xp
        n = self.shape[0]
        base = xp.zeros((n,), dtype=self.dtype, device=self.device) + self._dinv
        if self._chol is None:
            return base
        # diag(Fd C^{-1} Fd^T) = rowsum(Fd * (Fd C^{-1})), C^{-1} applied through its factor.
        G = transpose_copy(self.xp, cho_solve(self._chol, self._Fd.T))      # (n, r)
        return base - xp.sum(self._Fd * G, axis=1)

    def logdet(self):
        """``log det (F F^T + D)`` (0-d array): ``log det D + log det C``."""
        xp = self.xp
        d = self.lowrank.diag.diag
        out = xp.sum(xp.log(d)) if d.ndim == 1 else self.shape[0] * xp.log(d)
        if self._chol is not None:
            out = out + 2.0 * xp.sum(xp.log(xp.linalg.diagonal(self._chol)))
        return out

    def _spectrum_floor(self) -> float:
        return 0.0

    def _param_vjp(self, U, V):
        return self.lowrank._param_vjp(-self._matmat(U), self._matmat(V))


def pivoted_cholesky_preconditioner(A, rank=20, tol=1e-6):
    """Woodbury preconditioner ``M = (L L^T + D)^{-1} ~= A^{-1}`` for PCG on ``A = K + D``.

    ``L`` is the rank-``rank`` pivoted Cholesky factor of the kernel part ``K``; the diagonal
    ``D`` (noise, jitter) is taken exactly. The preconditioned spectrum clusters around 1 as
    the rank captures the large eigenvalues of ``K``.

    Parameters
    ----------
    A : AddedDiag
        A kernel-plus-diagonal operator with a positive diagonal.
    rank, tol : see :func:`pivoted_cholesky`.

    Returns
    -------
    WoodburyInverse
        Pass it as ``pcg(A, B, M=...)``.
    """
    if not isinstance(A, AddedDiag):
        raise TypeError(f"A: expected an AddedDiag operator (kernel plus diagonal), got "
                        f"{type(A).__name__}; build it as KernelMatrix(...) + Diagonal(...)")
    L = pivoted_cholesky(A.operator, rank, tol)
    return WoodburyInverse(LowRank(L, A.diag))
