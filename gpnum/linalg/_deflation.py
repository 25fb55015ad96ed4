"""Leading eigenpairs by randomized subspace iteration, for deflating Krylov solvers.

Kernel matrices have fast-decaying spectra: a few large eigenvalues spread over many orders of
magnitude above a cluster at the jitter. Those leading eigenvalues are what make Krylov methods
slow (the condition number) and what loses Lanczos its orthogonality (converged Ritz values come
back as copies). Found once, as a block, they can be taken out of the iteration exactly: see
:func:`gpnum.ciq.inv_sqrt_matmul` (``deflate=``).

Randomized subspace iteration (Halko, Martinsson & Tropp 2011, algorithm 4.4; Saad 2011,
"Numerical methods for large eigenvalue problems", section 5.1) with a Rayleigh-Ritz step: every
product is a block product (GEMM-shaped), and each Ritz pair comes with its true residual norm,
so callers keep only the pairs that are accurate enough for their purpose.
"""

from __future__ import annotations

from gpnum.backend import default_rng, device_of, get_namespace, to_numpy
from gpnum.errors import NotPSDError, ShapeError, check_int, describe_shape
from gpnum.linalg._operators import LinearOperator, aslinearoperator

__all__ = ["SpectralPreconditioner", "default_block_size", "top_eigenpairs"]


def default_block_size(n: int) -> int:
    """Block size of gpnum's automatic eigenpair searches: ``min(384, n // 2)``, 0 below 128.

    384 columns with 3 subspace iterations find about 170-200 leading pairs of a Matern-5/2
    kernel matrix (jitter 1e-4) to 1e-4 at n = 1000-2000, for the products of about eight
    msMINRES or CG iterations with 256 right-hand sides (docs/ciq.md). A 256 block finds about
    130: as fast for a smooth right-hand side, but the rough cotangent of CIQ's backward pass
    then needs twice the iterations (69 against 34 at n = 1000 in an SVGP training step, which
    took 0.77x the CPU time with 384). Below n = 128 dense methods are cheaper anyway.
    """
    return min(384, n // 2) if n >= 128 else 0


def top_eigenpairs(A, block_size: int, *, power_iters: int = 3, seed: int = 0, start=None):
    """Leading eigenpairs of a symmetric operator by randomized subspace iteration.

    Parameters
    ----------
    A : LinearOperator or array (n, n)
        Symmetric; positive semi-definite for "leading" to mean "largest".
    block_size : int
        Number of probe vectors ``l`` (1 <= l <= n). Pairs well inside the block (``i`` with
        ``lambda_{l+1} / lambda_i`` small) converge first.
    power_iters : int
        Subspace iterations after the first product (each costs one product with ``l``
        columns and one orthonormalisation of an (n, l) block).
    seed : int
        Seed of the Gaussian start block (host PCG64: the same on every backend).
    start : array (n, j), optional
        Start block instead of Gaussian vectors: for example the Ritz vectors ``W`` of a search
        on a nearby operator (a training loop's previous step), from which fewer
        ``power_iters`` reach the same accuracy. Its first ``l`` columns are used; with
        ``j < l`` the rest are Gaussian.

    Returns
    -------
    theta : array (l,)
        Ritz values, in decreasing order.
    W : array (n, l)
        Orthonormal Ritz vectors (columns, matching ``theta``).
    residual : array (l,)
        ``||A w_i - theta_i w_i||`` for each pair (exact, from one extra block product).

    Notes
    -----
    Costs ``power_iters + 2`` products with ``l`` columns, ``power_iters + 1``
    orthonormalisations of (n, l) blocks and one (l, l) symmetric eigendecomposition. In
    float64 the blocks are orthonormalised by shifted Cholesky QR (Fukaya, Kannan, Nakatsukasa,
    Yamamoto & Yanagisawa 2020, "Shifted Cholesky QR for computing the QR factorization of
    ill-conditioned matrices"): Gram products and an (l, l) Cholesky factor instead of a
    Householder QR, several times faster (docs/benchmarks.md); one pass between the products (the
    subspace iteration needs a well-conditioned basis, not an orthonormal one), three or more
    (orthonormal to rounding) before the Rayleigh-Ritz step. In lower precision, or when the
    Cholesky factorisations keep failing, Householder QR.
    """
    theta, W, residual, _ = _top_eigenpairs(A, block_size, power_iters=power_iters, seed=seed,
                                            start=start)
    return theta, W, residual


def _start_block(op, ell, seed, start):
    """The (n, l) start block of a search: ``start``'s first columns, Gaussian ones after."""
    n, xp = op.shape[0], op.xp
    rng = default_rng(seed, xp=xp, device=op.device)
    if start is None:
        return rng.normal((n, ell), dtype=op.dtype)
    if get_namespace(start) is not xp or start.ndim != 2 or start.shape[0] != n:
        raise ShapeError(f"start: expected an array of shape ({n}, j) in the operator's "
                         f"namespace, got {describe_shape(start.shape)}")
    # (a slice's stop within the axis: the array API leaves out-of-bounds stops unspecified)
    start = xp.astype(start[:, :min(ell, start.shape[1])], op.dtype, copy=False)
    if start.shape[1] == ell:
        return start
    return xp.concat([start, rng.normal((n, ell - start.shape[1]), dtype=op.dtype)], axis=1)


def _top_eigenpairs(A, block_size, *, power_iters=3, seed=0, start=None):
    """:func:`top_eigenpairs`, also returning ``A W`` (n, l), which callers may reuse."""
    op = aslinearoperator(A)
    if op.shape[0] != op.shape[1]:
        raise ShapeError(f"A: expected a square operator, got {describe_shape(op.shape)}")
    n = op.shape[0]
    ell = check_int(block_size, "block_size", minimum=1)
    if ell > n:
        raise ValueError(f"block_size: expected an integer <= n = {n}, got {ell}")
    power_iters = check_int(power_iters, "power_iters", minimum=0)
    xp = op.xp
    Y = op @ _start_block(op, ell, seed, start)
    for _ in range(power_iters):
        Y = op @ _orthonormal_basis(xp, Y, exact=False)
    # The orthonormal basis as Q T (T upper triangular, or None for the identity): the last
    # Cholesky QR pass enters the Rayleigh-Ritz step through T instead of an (n, l) x (l, l)
    # product (Q T)^T A (Q T) = T^T (Q^T A Q) T, and W = Q (T U).
    Q, T = _orthonormal_factors(xp, Y)
    Z = op @ Q
    H = Q.T @ Z
    if T is not None:
        H = T.T @ H @ T
    theta, U = xp.linalg.eigh(0.5 * (H + H.T))
    order = xp.flip(xp.argsort(theta))  # decreasing
    theta = xp.take(theta, order)
    U = xp.take(U, order, axis=1)
    if T is not None:
        U = T @ U
    W = Q @ U
    AW = Z @ U
    R = AW - W * theta[None, :]
    residual = xp.sqrt(xp.sum(R * R, axis=0))
    return theta, W, residual, AW


def _orthonormal_basis(xp, Y, *, exact):
    """A basis of the columns of ``Y`` (n, l), n >= l: orthonormal to rounding if ``exact``,
    else only well conditioned.

    float64: Cholesky QR passes ``Y <- Y L^-T`` with ``L L^T = Y^T Y (+ shift I)``. The first
    pass is shifted by ``11 (n l + l (l + 1)) eps ||Y||_F^2``, which keeps its factorisation
    from failing for condition numbers up to about ``1 / eps`` and leaves a basis of condition
    number about ``1 / sqrt(eps)`` or better (Fukaya et al. 2020, theorem 3.3 and section 4;
    the Frobenius norm bounds the spectral one from above, which only enlarges the shift).
    That is all a subspace iteration needs between products (``exact=False``). For
    ``exact``, unshifted passes run until two in a row succeed (CholeskyQR2, orthonormal to
    rounding for condition numbers up to about ``1 / sqrt(eps)``: Yamamoto, Nakatsukasa,
    Yanagisawa & Fukaya 2015); a pass whose factorisation fails (a worse-conditioned block,
    or columns that barely span their space: a cluster of equal eigenvalues below the wanted
    ones makes them nearly dependent) is replaced by a shifted one, and the count starts
    again (sCholeskyQR3). Otherwise (lower precision, or a block still failing after five
    passes), Householder QR.
    """
    if float(xp.finfo(Y.dtype).eps) > 1e-10:
        return xp.linalg.qr(Y)[0]
    if not exact:
        Q = _shifted_pass(xp, Y, Y.T @ Y)
        return xp.linalg.qr(Y)[0] if Q is None else Q
    Y, T = _orthonormal_factors(xp, Y)
    return Y if T is None else Y @ T


def _shifted_pass(xp, Y, G):
    """One shifted Cholesky QR pass ``Y L^-T`` with ``L L^T = G + s I``, ``G = Y^T Y`` and
    ``s = 11 (n l + l (l + 1)) eps trace(G)`` (:func:`_orthonormal_basis`); None if even the
    shifted factorisation fails."""
    n, ell = Y.shape
    shift = 11.0 * (n * ell + ell * (ell + 1)) * float(xp.finfo(Y.dtype).eps)
    eye = xp.eye(ell, dtype=Y.dtype, device=device_of(Y))
    L = _cholesky_or_none(xp, G + shift * float(xp.linalg.trace(G)) * eye)
    return None if L is None else Y @ _lower_inverse(xp, L).T


def _orthonormal_factors(xp, Y):
    """``(Q, T)`` with ``Q T`` an orthonormal basis of the columns of ``Y`` (n, l), n >= l,
    orthonormal to rounding: :func:`_orthonormal_basis` with ``exact``, whose last Cholesky QR
    pass is returned as its (l, l) upper-triangular ``T`` instead of applied (``T`` None: ``Q``
    is the basis itself), so that a caller that multiplies the basis by small matrices anyway
    saves an (n, l) x (l, l) product."""
    if float(xp.finfo(Y.dtype).eps) > 1e-10:
        return xp.linalg.qr(Y)[0], None
    # Unshifted passes from the start (CholeskyQR2 where it applies: a block of condition
    # number up to about 1 / sqrt(eps), such as a subspace iteration's K Q, saving the shifted
    # pass); a failed factorisation (a worse block) falls back to a shifted pass.
    clean = 0
    for _ in range(5):
        G = Y.T @ Y
        L = _cholesky_or_none(xp, G)
        if L is not None:
            # Y L^-T through the (l, l) triangular inverse: one GEMM, faster than a
            # triangular solve with n right-hand sides (cond(L) = cond(Y) <= 1 / sqrt(eps)).
            T = _lower_inverse(xp, L).T
            clean += 1
            if clean == 2:
                return Y, T
            Y = Y @ T
        else:
            Y_next = _shifted_pass(xp, Y, G)
            if Y_next is None:
                break
            Y, clean = Y_next, 0
    return xp.linalg.qr(Y)[0], None


def _lower_inverse(xp, L, leaf=64):
    """``L^{-1}`` for a lower-triangular ``L`` by recursive 2 x 2 blocks (products only).

    ``[[A, 0], [C, D]]^{-1} = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]``, with ``xp.linalg.inv`` on the
    leaves: faster than NumPy's general ``inv``; LAPACK's trtri
    (``gpnum.backend.triangular_inverse``) runs in SciPy's BLAS thread pool, and mixed
    with this module's NumPy products the two pools slow the whole eigenpair search
    (docs/benchmarks.md).
    """
    n = L.shape[0]
    if n <= leaf:
        return xp.tril(xp.linalg.inv(L))  # LU's rounding leaves specks above the diagonal
    h = n // 2
    A_inv = _lower_inverse(xp, L[:h, :h], leaf)
    D_inv = _lower_inverse(xp, L[h:, h:], leaf)
    out = xp.zeros_like(L)
    out[:h, :h] = A_inv
    out[h:, h:] = D_inv
    out[h:, :h] = -(D_inv @ (L[h:, :h] @ A_inv))
    return out


def _cholesky_or_none(xp, G):
    """Lower Cholesky factor of ``G``, or None where it does not exist (or is not finite).

    Not ``gpnum.backend._raw_cholesky``, which has the same contract: on NumPy that is SciPy's
    potrf, in SciPy's BLAS pool, and beside this module's NumPy products the two pools made the
    eigenpair search several times slower (docs/benchmarks.md).
    """
    try:
        L = xp.linalg.cholesky(G)
    except Exception as exc:  # LinAlgError (numpy, array_api_strict), _LinAlgError (torch)
        if type(exc).__name__ in ("LinAlgError", "_LinAlgError"):
            return None
        raise
    # CuPy returns NaNs instead of raising.
    return L if bool(xp.all(xp.isfinite(L))) else None


class SpectralPreconditioner(LinearOperator):
    """``M = W (Theta^{-1} - 1/sigma) W^T + I / sigma``: a PCG preconditioner for ``A``.

    Maps the leading Ritz directions ``W`` to ``1/theta_i`` and the rest to ``1/sigma``, with
    ``sigma`` the smallest Ritz value of the search block, so that ``M A`` has its leading
    eigenvalues moved to about 1 and PCG sees the condition number ``lambda_{l+1} / lambda_min``
    (Frank & Vuik 2001, "On the construction of deflation-based preconditioners"). ``M`` is
    symmetric positive definite for any orthonormal ``W`` and positive ``theta``, so inexact
    Ritz pairs only cost iterations, never accuracy.

    Build it with :meth:`from_operator`.
    """

    symmetric = True
    fresh_products = True

    def __init__(self, theta, W, sigma):
        xp = get_namespace(W)
        super().__init__((W.shape[0], W.shape[0]), W.dtype, device_of(W), xp)
        self.W = W
        self.sigma = float(sigma)
        self._scale = 1.0 / theta - 1.0 / self.sigma  # (r,)

    @classmethod
    def from_operator(cls, A, block_size: int, *, power_iters: int = 2, seed: int = 0,
                      start=None):
        """Search ``block_size`` leading pairs of the SPD ``A`` (:func:`top_eigenpairs`).

        Costs ``power_iters + 2`` products with ``block_size`` columns. ``start`` (n, j): the
        search's start block instead of Gaussian vectors, for example the ``W`` of a
        preconditioner for a nearby operator (then fewer ``power_iters`` do).
        """
        theta, W, _ = top_eigenpairs(A, block_size, power_iters=power_iters, seed=seed,
                                     start=start)
        xp = get_namespace(theta)
        sigma = float(theta[-1])
        if not sigma > 0.0:
            raise NotPSDError(f"A: expected a positive-definite operator, but a Ritz value of "
                              f"{sigma:.3g} was found")
        keep = int(to_numpy(xp.sum(xp.astype(theta > sigma, xp.int32))))
        return cls(theta[:keep], W[:, :keep], sigma)

    def _matmat(self, X):
        return X / self.sigma + self.W @ (self._scale[:, None] * (self.W.T @ X))
