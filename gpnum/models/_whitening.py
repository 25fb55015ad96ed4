"""Whitening strategies of SVGP: how ``A = W^{-1} K_ZX`` is formed, differentiated and sampled.

``W`` is a square root of ``K_ZZ + jitter I``: its lower Cholesky factor ``L``
(:class:`CholeskyWhitening`) or its symmetric square root (:class:`CIQWhitening`, through
contour integral quadrature; Pleiss et al. 2020). Each strategy owns its forward pass, its
backward pass to ``(K_ZZ_bar, K_ZX_bar)``, how predictions are chunked and what one chunk can
hand the next, and a joint prior draw over ``[Z; X]`` for pathwise sampling. The model supplies
the kernel matrices and reads nothing else of the strategy. Hensman, Matthews & Ghahramani (2015);
Pleiss et al. (2020); docs/ciq.md.
"""

from __future__ import annotations

from gpnum.backend import (
    cholesky,
    cholesky_vjp_inner,
    device_of,
    get_namespace,
    lower_matmul,
    same_namespace_dtype_device,
    solve_triangular,
)
from gpnum.ciq import inv_sqrt_matmul, inv_sqrt_matmul_vjp, sqrt_matmul
from gpnum.linalg import AddedDiag, Dense, Diagonal, KernelMatrix, Workspace

__all__ = ["CholeskyWhitening", "CIQWhitening", "make_whitening"]

_CIQ_KEYS = ("num_quad", "rtol", "maxiter", "eigen_bounds", "num_lanczos", "deflate",
             "warm_start")


def check_ciq_options(options):
    """Raise ``ValueError`` naming any key of ``options`` that CIQ does not take."""
    unknown = set(options) - set(_CIQ_KEYS)
    if unknown:
        raise ValueError(f"ciq_options: unknown key(s) {sorted(unknown)}; expected "
                         f"{', '.join(_CIQ_KEYS)}")


class CholeskyWhitening:
    """``W = L``, the lower Cholesky factor of ``K_ZZ + jitter I``: O(m^3) per step.

    The factorisation and the triangular solves run in float64 whatever the working dtype
    (float32 Cholesky of a kernel matrix with a small jitter fails or loses most digits for m
    in the thousands); results are cast back.
    """

    name = "cholesky"
    #: The BLAS pool of the model's products (gpnum.backend.blas_pool): SciPy's, where its
    #: Cholesky and triangular solves run.
    blas_pool = "scipy"
    #: Prediction rows per chunk: memory O(m chunk).
    predict_chunk = 4096

    def whiten(self, Kzz, Kzx, jitter, reuse=None, slot=None):
        """``A = L^{-1} K_ZX`` (m, b) and the cache of :meth:`backward` (``slot``: unused, see
        :meth:`CIQWhitening.whiten`).

        Parameters
        ----------
        Kzz : array (m, m)
            ``K_ZZ`` without jitter.
        Kzx : array (m, b)
        jitter : float
        reuse : object, optional
            What :meth:`reusable` returned for the same ``K_ZZ``: its factor.
        """
        xp = get_namespace(Kzx)
        high = xp.float64
        if reuse is not None:
            L = reuse
        else:
            # The jitter as cholesky's shift: added in its own copy, no (m, m) temporaries.
            L = cholesky(xp.astype(Kzz, high, copy=False), shift=jitter, what="K_ZZ")
        A = xp.astype(solve_triangular(L, xp.astype(Kzx, high, copy=False), lower=True),
                      Kzx.dtype, copy=False)
        return A, {"L": L}

    def reusable(self, cache):
        """What a later :meth:`whiten` against the same ``K_ZZ`` can reuse: the factor."""
        return cache["L"]

    def backward(self, A, cache, A_bar):
        """``(K_ZZ_bar (m, m), K_ZX_bar (m, b))`` from the cotangent ``A_bar`` of ``A``.

        ``A = L^{-1} K_ZX`` gives ``K_ZX_bar = L^{-T} A_bar`` and ``L^T L_bar = -A_bar A^T``
        in factored form, from which the Cholesky backward (Murray 2016) starts without its own
        m^3 product. The cache's factor is consumed (its memory serves the backward pass).
        """
        xp = get_namespace(A, A_bar)
        high = xp.float64
        L = cache.pop("L")
        Ab = xp.astype(A_bar, high, copy=False)
        Kzx_bar = solve_triangular(L, Ab, lower=True, trans=True)
        # Only the symmetric part of K_ZZ_bar reaches the (symmetric) gram's backward pass, and
        # only the lower triangle of -A_bar A^T is read (lower_matmul: on SciPy's BLAS pool,
        # like the solves around it; see gpnum.backend.matmul).
        M = lower_matmul(-Ab, xp.astype(A, high, copy=False).T)
        Kzz_bar = cholesky_vjp_inner(L, M, symmetrize=False, overwrite_m=True,
                                     overwrite_l=True)
        return (xp.astype(Kzz_bar, A.dtype, copy=False),
                xp.astype(Kzx_bar, A.dtype, copy=False))

    def prior_draw(self, kernel, Z, X, jitter, eps):
        """``(K([Z; X]) + jitter I)^{1/2} eps`` (m + n, k) by a float64 Cholesky factor."""
        xp = get_namespace(Z, X, eps)
        K = kernel(xp.concat([Z, X], axis=0))
        L = cholesky(xp.astype(K, xp.float64), shift=jitter)
        return xp.astype(L @ xp.astype(eps, xp.float64), eps.dtype)


class CIQWhitening:
    """``W = (K_ZZ + jitter I)^{1/2}``, the symmetric root, by contour integral quadrature.

    No O(m^3) operation: msMINRES over ``num_quad`` shifts (:func:`gpnum.ciq.inv_sqrt_matmul`)
    forward, one more msMINRES and a ``param_vjp`` backward. Only the symmetric root gives a
    valid whitening with preconditioning, so the solves are not preconditioned (GPyTorch
    disables it there for the same reason).

    Parameters
    ----------
    options : dict, optional
        Keywords of :func:`gpnum.ciq.inv_sqrt_matmul`: ``num_quad``, ``rtol``, ``maxiter``,
        ``eigen_bounds``, ``num_lanczos``, ``deflate``; and ``warm_start`` (default True): each
        eigenpair search for the deflation starts from the Ritz vectors of the previous one on
        the same slot (``deflate_start``), which a training step's small change of ``K_ZZ``
        leaves close to the new ones. Results then depend on the previous steps only within
        the solves' tolerance (pairs are accepted by the same residual test); a restored
        checkpoint's first step searches from Gaussian vectors.
    """

    name = "ciq"
    #: NumPy's: the searches, msMINRES and their products all run there.
    blas_pool = "numpy"
    #: CIQ keeps the per-shift solves of a chunk ((q, m, chunk) values): smaller chunks.
    predict_chunk = 512

    def __init__(self, options=None):
        # The caller's dict itself (SVGP.ciq_options): later changes to it take effect.
        self.options = {} if options is None else options
        check_ciq_options(self.options)
        # Krylov-basis memory reused by every solve of this strategy (not a cache of results:
        # first touches of fresh memory cost more than the products on virtual machines).
        self.workspace = Workspace()
        # Ritz vectors of the last eigenpair search per slot (warm_start): not results, starts.
        self._search_start = {}

    def _operator(self, Kzz, jitter):
        # K_ZZ + jitter I as an AddedDiag, so that the Lanczos bounds know the jitter floors
        # the spectrum (a plain dense matrix could not certify its smallest eigenvalue).
        xp = get_namespace(Kzz)
        return AddedDiag(Dense(Kzz, symmetric=True),
                         Diagonal(xp.asarray(jitter, dtype=Kzz.dtype, device=device_of(Kzz)),
                                  Kzz.shape[0]))

    def whiten(self, Kzz, Kzx, jitter, reuse=None, slot=None):
        """``A = (K_ZZ + jitter I)^{-1/2} K_ZX`` (m, b) and the cache of :meth:`backward`.

        ``reuse``: what :meth:`reusable` returned for the same ``K_ZZ`` (its eigenvalue bounds
        and deflation), so that prediction chunks and sampling do the spectrum work once.
        ``slot``: which of the caller's matrices this is (a latent's own inducing points, a
        second prior): the eigenpair search starts from the last search on the same slot.
        """
        op = self._operator(Kzz, jitter) if reuse is None else reuse[0]
        opts = dict(self.options)
        warm = opts.pop("warm_start", True)
        if reuse is not None:
            # The earlier result: its eigenvalue bounds, pairs and complement operator.
            opts["deflate"] = reuse[1]
        elif warm:
            opts["deflate_start"] = self._warm_start(slot, Kzz)
        res = inv_sqrt_matmul(op, Kzx, workspace=self.workspace, **opts)
        if reuse is None and warm and res.search_start is not None:
            self._search_start[slot] = res.search_start
        return res.x, {"op": op, "res": res, "Kzx": Kzx}

    def _warm_start(self, slot, Kzz):
        """The slot's last Ritz vectors if they fit ``K_ZZ`` (rows, namespace, dtype)."""
        start = self._search_start.get(slot)
        if start is None:
            return None
        V = start.vectors
        if V.shape[0] != Kzz.shape[0] or not same_namespace_dtype_device(V, Kzz):
            return None
        return start

    def reusable(self, cache):
        """What a later :meth:`whiten` against the same ``K_ZZ`` can reuse."""
        return (cache["op"], cache["res"])

    def backward(self, A, cache, A_bar):
        """``(K_ZZ_bar (m, m), K_ZX_bar (m, b))`` by the CIQ backward pass (Pleiss et al. 2020;
        docs/ciq.md)."""
        Kzx_bar, g = inv_sqrt_matmul_vjp(cache["res"], cache["op"], cache["Kzx"], A_bar,
                                          rtol=self.options.get("rtol", 1e-3),
                                          maxiter=self.options.get("maxiter", 200),
                                          workspace=self.workspace)
        return g["operator"]["A"], Kzx_bar

    def prior_draw(self, kernel, Z, X, jitter, eps):
        """``(K([Z; X]) + jitter I)^{1/2} eps`` (m + n, k) by CIQ on a lazy kernel matrix:
        memory O((m + n) k) beyond the kernel blocks, no factorisation."""
        xp = get_namespace(Z, X, eps)
        n = Z.shape[0] + X.shape[0]
        op = AddedDiag(KernelMatrix(kernel, xp.concat([Z, X], axis=0)),
                       Diagonal(xp.asarray(jitter, dtype=eps.dtype, device=device_of(eps)), n))
        opts = {k: v for k, v in self.options.items() if k not in ("deflate", "warm_start")}
        return sqrt_matmul(op, eps, **opts).x


def make_whitening(name, ciq_options=None):
    """The strategy named ``"cholesky"`` or ``"ciq"``; ``ciq_options`` are checked for either
    (a model may switch whitening later and keep its options)."""
    if name == "cholesky":
        check_ciq_options(ciq_options or {})
        return CholeskyWhitening()
    if name == "ciq":
        return CIQWhitening(ciq_options)
    raise ValueError(f"whitening: expected 'cholesky' or 'ciq', got {name!r}")
