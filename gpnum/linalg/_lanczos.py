"""Lanczos tridiagonalisation with full reorthogonalisation, and spectrum bounds from it."""

from __future__ import annotations

from dataclasses import dataclass

from gpnum.backend import default_rng, device_of, get_namespace
from gpnum.errors import describe_shape
from gpnum.linalg._operators import aslinearoperator, transpose_copy
from gpnum.linalg._validation import prepare_system

__all__ = ["lanczos", "LanczosResult", "eigen_bounds"]


@dataclass(frozen=True, repr=False)
class LanczosResult:
    """Outcome of :func:`lanczos`: ``A Q ~= Q T`` per start vector.

    Shapes are for a block of k start vectors; for a single start vector the leading k axis
    is absent.

    Attributes
    ----------
    basis : array (k, n, j)
        Orthonormal Lanczos vectors ``Q`` (columns), ``Q[:, 0]`` the normalised start vector.
    alpha : array (k, j)
        Diagonal of the tridiagonal ``T``.
    beta : array (k, j - 1)
        Off-diagonal of ``T``.
    beta_last : array (k,)
        ``beta_{j+1}``: ``A Q = Q T + beta_last q_{j+1} e_j^T``. Zero after an invariant
        subspace was found.
    start_norm : array (k,)
        Norms of the start vectors.
    num_iter : int
        ``j``.
    """

    basis: object
    alpha: object
    beta: object
    beta_last: object
    start_norm: object
    num_iter: int

    def tridiagonal(self):
        """The symmetric tridiagonal ``T``, shape (k, j, j) (or (j, j))."""
        return tridiagonal(self.alpha, self.beta)

    def __repr__(self):
        return (f"LanczosResult(num_iter={self.num_iter}, basis shape "
                f"{describe_shape(self.basis.shape)})")


def tridiagonal(alpha, beta):
    """Symmetric tridiagonal matrices from diagonals ``alpha`` (..., j) and ``beta`` (..., j-1)."""
    xp = get_namespace(alpha)
    j = alpha.shape[-1]
    dtype, device = alpha.dtype, device_of(alpha)
    T = alpha[..., None, :] * xp.eye(j, dtype=dtype, device=device)
    if j > 1:
        # Pad beta to length j so that it broadcasts against the (j, j) shifted identities.
        pad = xp.concat([beta, xp.zeros(beta.shape[:-1] + (1,), dtype=dtype, device=device)],
                        axis=-1)
        T = (T + pad[..., :, None] * xp.eye(j, k=1, dtype=dtype, device=device)
             + pad[..., None, :] * xp.eye(j, k=-1, dtype=dtype, device=device))
    return T


def _lanczos_rows(op, Vt, num_iter, reorthogonalize):
    """Lanczos on the rows of ``Vt`` (k, n). Returns (basis (k, j, n), alpha (k, j),
    beta (k, j) with beta[:, i] = beta_{i+1}, start norms (k,))."""
    xp = op.xp
    k, n = Vt.shape
    dtype, device = op.dtype, op.device
    eps = float(xp.finfo(dtype).eps)
    v_norm = xp.linalg.vector_norm(Vt, axis=1)
    q = Vt / v_norm[:, None]
    q_prev = None
    beta = xp.zeros((k,), dtype=dtype, device=device)
    anorm = xp.zeros((k,), dtype=dtype, device=device)
    live = xp.ones((k,), dtype=xp.bool, device=device)
    basis = xp.empty((k, num_iter, n), dtype=dtype, device=device)
    alphas, betas = [], []
    alpha_first = None
    for i in range(num_iter):
        basis[:, i, :] = q
        w = transpose_copy(xp, op._matmat(q.T))
        if q_prev is not None:
            w = w - beta[:, None] * q_prev
        alpha = xp.vecdot(q, w, axis=-1)
        w = w - alpha[:, None] * q
        if reorthogonalize:
            # Classical Gram-Schmidt twice against every stored vector ("twice is enough").
            V = basis[:, :i + 1, :]
            for _ in range(2):
                h = V @ w[:, :, None]                                   # (k, i+1, 1)
                w = w - (xp.permute_dims(h, (0, 2, 1)) @ V)[:, 0, :]
        beta_next = xp.linalg.vector_norm(w, axis=1)
        anorm = xp.maximum(anorm, xp.abs(alpha) + beta + beta_next)
        if alpha_first is None:
            alpha_first = alpha
        # After an invariant subspace is found the column's vectors are zero; its trailing
        # diagonal repeats alpha_1 (a Rayleigh quotient, inside the spectrum) and decouples
        # (beta = 0), so it moves neither the extreme Ritz values nor the quadrature.
        alphas.append(xp.where(live, alpha, alpha_first))
        alive = live & (beta_next > 10.0 * eps * anorm)
        beta_next = xp.where(alive, beta_next, 0.0)
        betas.append(beta_next)
        inv = xp.where(alive, 1.0 / xp.where(alive, beta_next, 1.0), 0.0)
        q_prev, q, beta, live = q, w * inv[:, None], beta_next, alive
    return basis, xp.stack(alphas, axis=1), xp.stack(betas, axis=1), v_norm


def lanczos(A, v0, num_iter, *, reorthogonalize=True):
    """Lanczos tridiagonalisation ``A Q = Q T + beta q e_j^T`` from one or k start vectors.

    Parameters
    ----------
    A : LinearOperator, array (n, n) or callable
        Symmetric operator.
    v0 : array (n,) or (n, k)
        Start vector(s); each column runs its own, independent Lanczos process (all k share
        each product with ``A``). Columns must be non-zero.
    num_iter : int
        Iterations j, ``1 <= j <= n``.
    reorthogonalize : bool
        Full reorthogonalisation (classical Gram-Schmidt, twice) against all previous vectors:
        O(j n k) extra work per step, keeps the basis orthonormal to working precision so that
        no spurious copies of converged Ritz values appear.

    Returns
    -------
    LanczosResult
        ``basis`` (k, n, j), ``alpha`` (k, j), ``beta`` (k, j-1), ``beta_last`` (k,),
        ``tridiagonal()`` (k, j, j); without the k axis for a one-dimensional ``v0``.

    References
    ----------
    Golub & Van Loan, Matrix Computations (4th ed.), section 10.1; Paige (1976) on the loss
    of orthogonality that reorthogonalisation prevents.
    """
    op, V, vector = prepare_system(A, v0, "v0")
    xp = op.xp
    n, k = V.shape
    if isinstance(num_iter, bool) or not isinstance(num_iter, int) or not 1 <= num_iter <= n:
        raise ValueError(f"num_iter: expected an integer in [1, {n}], got {num_iter!r}")
    v_norm = xp.linalg.vector_norm(V, axis=0)
    if not bool(xp.all(v_norm > 0.0)):
        raise ValueError("v0: expected non-zero start vectors, got a zero column")
    basis, alpha, beta, v_norm = _lanczos_rows(op, transpose_copy(xp, V), num_iter,
                                               bool(reorthogonalize))
    basis = xp.permute_dims(basis, (0, 2, 1))                  # (k, n, j)
    out = dict(basis=basis, alpha=alpha, beta=beta[:, :-1], beta_last=beta[:, -1],
               start_norm=v_norm)
    if vector:
        out = {key: value[0, ...] for key, value in out.items()}
    return LanczosResult(num_iter=num_iter, **out)


def eigen_bounds(A, num_iter=40, *, max_iter=None, seed=0, v0=None):
    """Lower and upper bounds of the spectrum of a symmetric positive semi-definite operator.

    Runs :func:`lanczos` (with reorthogonalisation) from a random start and widens the extreme
    Ritz values ``theta`` by their residual bounds ``r = |beta_last s_j|`` (an eigenvalue lies
    in every ``[theta - r, theta + r]``) and by ``10 eps upper`` for rounding:

    - ``upper = theta_max + r_max``: Lanczos finds the top of the spectrum first.
    - ``lower = max(floor, theta_min - r_min)`` where ``floor`` is what the operator knows
      about its spectrum (a :class:`Diagonal`; the diagonal of an :class:`AddedDiag` or
      :class:`LowRank` over PSD parts; 0 otherwise). While ``theta_min`` is far from converged,
      ``theta_min - r_min`` is negative; the iterations are then doubled (up to ``max_iter``)
      before falling back on the floor. The lower bound is therefore never raised by an
      unconverged Ritz value: an over-estimated lower bound costs contour integral
      quadrature its accuracy on the smallest directions.

    Parameters
    ----------
    A : LinearOperator, array (n, n) or callable
        Symmetric positive semi-definite.
    num_iter : int
        Lanczos iterations of the first attempt (capped at n; with n iterations the Ritz
        values are the eigenvalues).
    max_iter : int, optional
        Most iterations when the smallest Ritz value has not converged; default
        ``min(n, 4 num_iter)``.
    seed : int
        Seed of the random start vector.
    v0 : array (n,), optional
        Start vector instead of a random one.

    Returns
    -------
    (lower, upper) : tuple of Python floats
        ``0 <= lower <= lambda_min`` and ``upper >= lambda_max``. ``lower`` is 0.0 when no
        positive bound could be established (a singular or barely regular operator without a
        known diagonal floor: add jitter). A Lanczos bound cannot see an eigenvector
        orthogonal to the start vector; with a random start this has probability zero.
    """
    if v0 is None:
        op = aslinearoperator(A)
        rng = default_rng(seed, xp=op.xp, device=op.device)
        v0 = rng.normal((op.shape[0],), dtype=op.dtype)
    op, V, _ = prepare_system(A, v0, "v0")
    xp = op.xp
    n = op.shape[0]
    if isinstance(num_iter, bool) or not isinstance(num_iter, int) or num_iter < 1:
        raise ValueError(f"num_iter: expected an integer >= 1, got {num_iter!r}")
    max_iter = min(n, 4 * num_iter) if max_iter is None else max_iter
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter: expected an integer >= 1, got {max_iter!r}")
    eps = float(xp.finfo(op.dtype).eps)
    floor = max(op._spectrum_floor(), 0.0)
    j = min(num_iter, max_iter, n)
    while True:
        res = lanczos(op, V[:, 0], j)
        theta, S = xp.linalg.eigh(res.tridiagonal())
        resid = xp.abs(res.beta_last * S[-1, :])           # residual bound per Ritz value
        theta_min, theta_max = float(theta[0]), float(theta[-1])
        r_min, r_max = float(resid[0]), float(resid[-1])
        slack = 10.0 * eps * max(abs(theta_max), abs(theta_min))
        estimate = theta_min - r_min - slack
        if estimate > 0.0 or j >= min(max_iter, n):
            break
        j = min(2 * j, max_iter, n)
    upper = theta_max + r_max + slack
    lower = max(floor - slack, estimate, 0.0)
    return lower, upper
