"""Exact inference with ``Sigma = kron(K, B) + kron(I_n, D)`` through two eigendecompositions.

Entries are ordered input-major (``vec(R)`` of an (n, t) array ``R`` in C order), so that
``(P kron Q) vec(R) = vec(P R Q^T)``. With ``s = sqrt(diag D)``,
``B~ = D^{-1/2} B D^{-1/2} = U_B diag(l_B) U_B^T`` and ``K = U_K diag(l_K) U_K^T``,

    Sigma = (I kron D^{1/2}) (U_K kron U_B) diag(E) (U_K kron U_B)^T (I kron D^{1/2}),
    E[p, c] = l_K[p] l_B[c] + 1

(Rakitsch et al. 2013, section 3; Stegle et al. 2011, "Efficient inference in matrix-variate
Gaussian models with iid observation noise", section 2). For the residual ``R`` (n, t) and
``S = U_K^T (R / s) U_B``:

    r^T Sigma^{-1} r = sum(S^2 / E),      log|Sigma| = sum(log E) + n sum(log s^2),
    A := Sigma^{-1} r = (U_K (S / E) U_B^T) / s                           (as an (n, t) array).

Gradient (R&W eq. 5.9 with ``Sigma_bar = 1/2 (a a^T - Sigma^{-1})``, contracted with
``dSigma/dK = . kron B``, ``dSigma/dB = K kron .`` and ``dSigma/dD_aa``):

    dK = 1/2 A B A^T - 1/2 U_K diag(w_K) U_K^T,              w_K[p] = sum_c l_B[c] / E[p, c]
       = 1/2 A B A^T - 1/2 w_0 I + 1/2 U_K diag(w_0 - w_K) U_K^T,   w_0 = sum_c l_B[c]
    dB = 1/2 A^T K A - 1/2 D^{-1/2} U_B diag(w_B) U_B^T D^{-1/2}, w_B[c] = sum_p l_K[p] / E[p, c]
    dD_aa = 1/2 sum_i A[i, a]^2 - 1/2 (sum_c U_B[a, c]^2 v[c]) / s_a^2,  v[c] = sum_p 1 / E[p, c]

(the traces use ``sum_i U_K[i, p]^2 = 1``). Every function takes the factor matrices, not an
operator object. All arrays float64.

Null directions of ``K`` (``subset=True`` in :func:`kronecker_factors`): only the ``r``
eigenpairs of ``K`` with ``l_K > tau = eps ||K||_F`` are computed (``eps`` float64's); the rest
count as ``l_K = 0``, so ``E = 1`` there and their eigenvectors enter only through the
projector ``I - U_r U_r^T``: with ``G = (R / s) U_B`` and ``S_r = U_r^T G``,

    r^T Sigma^{-1} r = sum(S_r^2 / E_r) + ||G - U_r S_r||_F^2,   log|Sigma| = sum(log E_r) + ...,
    A = (U_r (S_r / E_r) + G - U_r S_r) U_B^T / s,   v[c] = sum_p 1 / E_r[p, c] + (n - r),

and ``w_B``, ``d`` (above) sum over the ``r`` only. Setting an eigenvalue ``l <= tau`` to zero
moves each ``E[p, c]`` by at most ``tau l_B[c]``; ``K`` is known no better than that, since
each of its entries carries a relative rounding error of about ``eps`` from its formation, and
by Weyl's inequality its eigenvalues move by up to ``||dK||_2 <= ||dK||_F ~ eps ||K||_F``
(Golub & Van Loan 2013, Theorem 8.1.5), as does a backward-stable eigensolver's output. The
change of the log marginal likelihood is at most ``1/2 (n - r) tau sum(l_B)`` (log-determinant)
plus ``1/2 tau max(l_B) ||R / s||_F^2`` (quadratic form), that of ``dK`` at most
``(n - r) tau``-sized in trace: the same order as the full decomposition's own rounding.
"""

from __future__ import annotations

import math

from gpnum.backend import eigh, get_namespace, matmul, outer_self
from gpnum.errors import NotPSDError
from gpnum.kernels import Kernel
from gpnum.likelihoods import Gaussian

__all__ = ["check_latent_kernels", "gaussian_log_density", "kronecker_factors", "kronecker_lml", "kronecker_predict"]

_LOG_2PI = math.log(2.0 * math.pi)


def kronecker_factors(K, B, noise, rtol=1e-8, *, subset=False):
    """Eigendecompositions of ``K`` (n, n) and ``D^{-1/2} B D^{-1/2}`` (t, t), ``D = diag(noise)``.

    Returns ``{"UK", "lK", "UB", "lB", "s", "E"}`` (``s = sqrt(noise)``, ``E`` (r, t) as in the
    module notes, ``UK`` (n, r), ``lK`` (r,)). Eigenvalues of the PSD ``K`` and ``B~`` that
    round-off leaves below zero are set to zero (they are zero in exact arithmetic; the noise
    keeps ``E >= 1``); one below ``-rtol`` times the largest raises :class:`gpnum.NotPSDError`
    (an indefinite matrix). ``subset``: only the eigenpairs of ``K`` above ``eps ||K||_F``
    (``r <= n``; see the module notes), else all (``r = n``). ``K`` must be exactly symmetric
    (the kernel forms it so; LAPACK reads one triangle); the small ``B~`` is symmetrised.
    """
    xp = get_namespace(K, B, noise)
    if not bool(xp.all(noise > 0.0)):
        raise NotPSDError("the noise variances must be > 0 for the Kronecker path")
    s = xp.sqrt(noise)
    n = K.shape[0]
    if subset:
        lK, UK = eigh(K, floor=float(xp.finfo(xp.float64).eps))
    else:
        lK, UK = eigh(K)
    Bt = B / (s[:, None] * s[None, :])
    lB, UB = eigh(0.5 * (Bt + Bt.T))
    tol_K = -rtol * float(xp.max(xp.abs(lK)))
    tol_B = -rtol * float(xp.max(xp.abs(lB)))
    if float(xp.min(lK)) < tol_K or float(xp.min(lB)) < tol_B:
        raise NotPSDError(f"an indefinite kernel or coregionalisation matrix (smallest "
                          f"eigenvalues {float(xp.min(lK)):.3g}, {float(xp.min(lB)):.3g})")
    lK = xp.clip(lK[n - UK.shape[1]:], min=0.0)
    lB = xp.clip(lB, min=0.0)
    E = lK[:, None] * lB[None, :] + 1.0
    return {"UK": UK, "lK": lK, "UB": UB, "lB": lB, "s": s, "E": E}


def kronecker_lml(f, R, K, B, need_grad, *, alpha=False):
    """Log marginal likelihood of the residual ``R`` (n, t) under ``N(0, Sigma)``.

    Parameters
    ----------
    f : dict
        :func:`kronecker_factors` of ``K`` and ``B``.
    R : array (n, t)
    K, B : arrays (n, n), (t, t)
        The matrices factorised (for the gradient's ``A B A^T`` and ``A^T K A``).
    need_grad : bool
    alpha : bool
        Return ``{"A": Sigma^{-1} r}`` (n, t) only (the prediction state), without gradients.

    Returns
    -------
    value : 0-d array
    grads : dict or None
        ``{"K": (n, n), "B": (t, t), "noise": (t,), "mean": (t,), "A": (n, t)}``: the
        gradients w.r.t. ``K``, ``B``, the noise variances and a constant mean per output
        (``sum_i A[i, a]``).
    """
    xp = get_namespace(R)
    UK, lK, UB, lB, s, E = f["UK"], f["lK"], f["UB"], f["lB"], f["s"], f["E"]
    n, t = R.shape
    r = UK.shape[1]
    G = (R / s[None, :]) @ UB                                           # (n, t)
    S = matmul(xp.matrix_transpose(UK), G)                              # (r, t)
    quad = xp.sum(S * S / E)
    G_null = None
    if r < n:
        # G's part in the span of the eigenvectors left out (E = 1 there), by the projector
        G_null = G - matmul(UK, S)
        quad = quad + xp.sum(G_null * G_null)
    value = (-0.5 * quad - 0.5 * xp.sum(xp.log(E))
             - 0.5 * n * xp.sum(xp.log(s * s)) - 0.5 * n * t * _LOG_2PI)
    if not (need_grad or alpha):
        return value, None
    AU = matmul(UK, S / E)
    if G_null is not None:
        AU = AU + G_null
    A = (AU @ UB.T) / s[None, :]
    if not need_grad:
        return value, {"A": A}
    invE = 1.0 / E
    w_B = lK @ invE                                                     # (t,)
    v = xp.sum(invE, axis=0) + float(n - r)                            # (t,)
    # U_K diag(w_K) U_K^T = w_0 I - U_K diag(d) U_K^T with w_0 = sum(l_B) (the weight of a
    # zero eigenvalue, as sum_p u_p u_p^T = I) and d_p = w_0 - w_K[p] = l_K[p] sum_c
    # l_B[c]^2 / E[p, c] >= 0, increasing with l_K. The columns whose d_p is below the
    # rounding of w_0 (the numerically null directions of a smooth kernel's K, often a
    # third or more of them) drop out of the (n, n) product.
    w_0 = xp.sum(lB)
    d = lK * (invE @ (lB * lB))                                         # (r,), ascending
    eps = float(xp.finfo(d.dtype).eps)
    first = r - int(xp.sum(xp.astype(d > eps * w_0, xp.int64)))
    V = UK[:, first:] * xp.sqrt(0.5 * d[first:])[None, :]
    # dK = 1/2 A B A^T - 1/2 w_0 I + V V^T in one (n, n) array: V V^T by a symmetric product
    # (half a general one's multiply-adds), the 1/2 on the thin (n, t) operand
    dK = outer_self(V, plus=((0.5 * A) @ B, A), shift=-0.5 * float(w_0))
    KA = matmul(K, A)
    dB = (0.5 * (xp.matrix_transpose(A) @ KA)
          - 0.5 * (((UB * w_B[None, :]) @ UB.T) / (s[:, None] * s[None, :])))
    d_noise = 0.5 * xp.sum(A * A, axis=0) - 0.5 * ((UB * UB) @ v) / (s * s)
    return value, {"K": dK, "B": dB, "noise": d_noise, "mean": xp.sum(A, axis=0), "A": A}


def kronecker_predict(f, A, B, Ks, prior, how):
    """Posterior of ``kron(k, B)`` at new inputs from the factors of the training data.

    Parameters
    ----------
    f : dict
        :func:`kronecker_factors` of the training ``K`` and ``B``, all eigenpairs
        (``subset=False``).
    A : array (n, t)
        ``Sigma^{-1} r`` as an array.
    B : array (t, t)
    Ks : array (m, n)
        ``k(Xnew, X)``.
    prior : array (m,) or (m, m)
        ``k(Xnew)``'s diagonal, or the full matrix when ``how == "full"``.
    how : {"var", "output", "full"}

    Returns
    -------
    mean : array (m, t)
        ``Ks A B`` (zero prior mean).
    cov : array (m, t) variances, (m, t, t) output covariances, or (m t, m t) joint.

    Notes
    -----
    With ``P = Ks U_K`` and ``Q = B D^{-1/2} U_B``, the reduction of the prior covariance is
    ``(P kron Q) diag(1/E) (P kron Q)^T``: at one input ``Q diag(h_i) Q^T`` with
    ``h_i = (P[i]^2) @ (1/E)``; jointly ``sum_c kron(P diag(1/E[:, c]) P^T, q_c q_c^T)``.
    """
    xp = get_namespace(A, Ks)
    UK, UB, s, E = f["UK"], f["UB"], f["s"], f["E"]
    mean = matmul(Ks, A @ B)
    P = matmul(Ks, UK)                                                  # (m, n)
    Q = (B / s[None, :]) @ UB                                           # (t, t)
    invE = 1.0 / E
    m, t = Ks.shape[0], B.shape[0]
    if how == "var":
        H = (P * P) @ invE                                              # (m, t)
        return mean, prior[:, None] * xp.linalg.diagonal(B)[None, :] - H @ (Q * Q).T
    if how == "output":
        H = (P * P) @ invE
        reduction = xp.matmul(Q[None, :, :] * H[:, None, :], Q.T[None, :, :])
        return mean, prior[:, None, None] * B[None, :, :] - reduction
    cov = xp.reshape(prior[:, None, :, None] * B[None, :, None, :], (m * t, m * t))
    for c in range(t):
        Pc = matmul(P * invE[None, :, c], xp.matrix_transpose(P))       # (m, m)
        qq = Q[:, c:c + 1] * Q[None, :, c]                              # (t, t)
        cov = cov - xp.reshape(Pc[:, None, :, None] * qq[None, :, None, :], (m * t, m * t))
    return mean, cov


def gaussian_log_density(y, mean, var):
    """Elementwise ``log N(y; mean, var)`` (any matching shapes): the per-entry predictive
    densities of the multi-output models."""
    xp = get_namespace(y, mean, var)
    r = y - mean
    return -0.5 * (math.log(2.0 * math.pi) + xp.log(var)) - 0.5 * r * r / var


def check_latent_kernels(kernels, likelihood):
    """The latent kernels of a mixing model (OILMM, LMCSVGP) as a list, after checking that
    they are gpnum kernels and that the likelihood is Gaussian (the models' closed forms)."""
    kernels = list(kernels)
    if not kernels or not all(isinstance(k, Kernel) for k in kernels):
        raise TypeError("kernels: expected a non-empty sequence of gpnum kernels")
    if not isinstance(likelihood, Gaussian):
        raise TypeError(f"likelihood: expected gpnum.likelihoods.Gaussian, got "
                        f"{type(likelihood).__name__}")
    return kernels
