"""Renyi divergences between multivariate Gaussians, and the Bhattacharyya and Hellinger ones.

With ``beta = 1 - alpha``, ``S_a = alpha Sp + beta Sq`` and ``d = mq - mp``,

    D_alpha(Q || P) = alpha/2 d^T S_a^{-1} d + [log|S_a| - beta log|Sq| - alpha log|Sp|] / (2 beta).

Two evaluations share this module:

- *Cholesky* (``|1 - alpha| >= 1/4``, Bhattacharyya and Hellinger included): one Cholesky of
  ``S_a`` and triangular solves, a few GEMMs' worth of work. The log-determinant bracket is
  divided by ``2 beta``, which amplifies its rounding error by at most a factor 2 here.
- *Spectral* (``|1 - alpha| < 1/4``): whitening by ``Lp`` turns ``Sp`` into ``I`` and ``Sq`` into
  ``C = A A^T``, ``A = Lp^{-1} Lq``. With the SVD ``A = W diag(s) V^T`` the eigenvalues of ``C``
  are ``c_i = s_i^2`` (to the accuracy of singular values), and with ``x_i = c_i - 1``,
  ``g_i = 1 + beta x_i`` and ``b = W^T Lp^{-1} d``

      D_alpha = sum_i [log1p(beta x_i) - beta log c_i] / (2 beta) + alpha/2 sum_i b_i^2 / g_i,

  where each term of the first sum is O(beta) above and below and is computed without cancelling
  large numbers: accurate uniformly as alpha -> 1, where it tends to KL(Q || P) (and equals it at
  alpha = 1). It costs one SVD (tens of GEMMs).

The Bhattacharyya distance is ``D_{1/2} / 2``, and the squared Hellinger distance is
``1 - exp(-D_B)``, computed with ``expm1``.
"""

from __future__ import annotations

from gpnum.backend import cho_solve, cholesky, solve_triangular, to_numpy
from gpnum.divergences._checks import check_alpha, mvn_args, namespace_of
from gpnum.divergences._matrix import eye_like, gradient_entry, inv_sandwich
from gpnum.errors import NotPSDError

__all__ = ["renyi_mvn", "renyi_mvn_and_grad", "bhattacharyya_mvn", "bhattacharyya_mvn_and_grad",
           "hellinger_mvn", "hellinger_mvn_and_grad"]

_NAMES = ("mq", "mp", "Sq", "Lq", "Sp", "Lp")

#: Orders with ``|1 - alpha|`` below this use the spectral evaluation (module docstring).
SPECTRAL_BELOW = 0.25


def _renyi(mq, Sq, mp, Sp, Lq, Lp, alpha, validate, want_grad, kind="renyi"):
    alpha = check_alpha(alpha)
    xp, _ = namespace_of({"mq": mq, "Sq": Sq, "mp": mp, "Sp": Sp, "Lq": Lq, "Lp": Lp})
    _, cq, cp = mvn_args(xp, mq, mp, Sq, Sp, Lq, Lp, _NAMES, validate)
    core = _spectral if abs(1.0 - alpha) < SPECTRAL_BELOW else _cholesky
    out = core(xp, mq - mp, cq, cp, alpha, validate, want_grad)
    return _finish(xp, kind, *out) if want_grad else _finish(xp, kind, out)


def _infinite(xp, cq, cp, alpha):
    """The error for an ``alpha > 1`` at which ``S_a`` is not positive definite."""
    s = xp.linalg.svdvals(solve_triangular(cp.L, cq.L))
    c_max = float(to_numpy(xp.max(s))) ** 2
    return ValueError(
        f"alpha: D_alpha(Q || P) is infinite for alpha = {alpha!r}: alpha Sp + (1 - alpha) Sq "
        f"is not positive definite (largest eigenvalue of Sp^{{-1}} Sq is {c_max:.6g}); "
        f"choose alpha < {c_max / (c_max - 1.0):.6g}")


def _cholesky(xp, delta, cq, cp, alpha, validate, want_grad):
    """``|1 - alpha| >= 1/4``: one Cholesky of ``S_a = alpha Sp + beta Sq``."""
    beta = 1.0 - alpha
    Sq_ = cq.S if cq.S is not None else cq.L @ cq.L.T
    Sp_ = cp.S if cp.S is not None else cp.L @ cp.L.T
    Sa = alpha * Sp_ + beta * Sq_
    try:
        # For alpha > 1 no jitter: an indefinite S_a means an infinite divergence, not noise.
        La = cholesky(Sa, max_tries=0 if alpha > 1.0 else 3)
    except NotPSDError:
        if alpha > 1.0:
            raise _infinite(xp, cq, cp, alpha) from None
        raise

    def logdet(L):
        return 2.0 * xp.sum(xp.log(xp.abs(xp.linalg.diagonal(L))))

    w = solve_triangular(La, delta)
    value = (0.5 * alpha * xp.sum(w * w)
             + (logdet(La) - beta * logdet(cq.L) - alpha * logdet(cp.L)) / (2.0 * beta))
    if not want_grad:
        return value
    u = solve_triangular(La, w, trans=True)            # S_a^{-1} d
    grads = {"mq": alpha * u, "mp": -alpha * u}
    # d/dSq = -alpha beta/2 u u^T + (S_a^{-1} - Sq^{-1}) / 2
    # d/dSp = -alpha^2/2 u u^T + alpha/(2 beta) (S_a^{-1} - Sp^{-1})
    # and for a factor, 2 (d/dS) L, in which tril(S^{-1} L) = tril(L^{-T}) = diag(1 / diag L).
    for cov, c_uu, c_inv in ((cq, -alpha * beta, 1.0), (cp, -alpha * alpha, alpha / beta)):
        if cov.is_factor:
            L = cov.L
            F = (c_uu * u[:, None] * (L.T @ u)[None, :]
                 + c_inv * xp.tril(cho_solve(La, L))
                 - c_inv * eye_like(xp, L) * (1.0 / xp.linalg.diagonal(L))[None, :])
            grads[cov.key] = gradient_entry(xp, cov, F_L=F)
        else:
            eye = eye_like(xp, La)
            G = (0.5 * c_uu * u[:, None] * u[None, :]
                 + 0.5 * c_inv * (inv_sandwich(La, eye) - inv_sandwich(cov.L, eye)))
            grads[cov.key] = gradient_entry(xp, cov, G_S=G)
    return value, grads


def _spectral(xp, delta, cq, cp, alpha, validate, want_grad):
    """``|1 - alpha| < 1/4``: one SVD of ``Lp^{-1} Lq``, accurate as alpha -> 1."""
    A = xp.tril(solve_triangular(cp.L, cq.L))
    b = solve_triangular(cp.L, delta)
    W, s, Vh = xp.linalg.svd(A, full_matrices=False)
    x = (s - 1.0) * (s + 1.0)
    log_c = 2.0 * xp.log(s)
    beta = 1.0 - alpha
    g = 1.0 + beta * x
    if validate and alpha > 1.0 and not bool(xp.all(g > 0.0)):
        raise _infinite(xp, cq, cp, alpha)
    if beta == 0.0:
        t1 = 0.5 * xp.sum(x - log_c)
    else:
        t1 = xp.sum(xp.log1p(beta * x) - beta * log_c) / (2.0 * beta)
    bw = W.T @ b
    value = t1 + 0.5 * alpha * xp.sum(bw * bw / g)
    if not want_grad:
        return value
    ut = W @ (bw / g)                              # Lp^T (alpha Sp + beta Sq)^{-1} (mq - mp)
    u = solve_triangular(cp.L, ut, trans=True)
    grads = {"mq": alpha * u, "mp": -alpha * u}
    uu = ut[:, None] * ut[None, :]
    # Whitened gradients (d/dS = Lp^{-T} M Lp^{-1}); see docs/divergences.md for the derivation.
    if cq.is_factor:
        # 2 (d/dSq) Lq = 2 Lp^{-T} M_q A with W^T A = diag(s) V^T.
        MqA = ((-0.5 * alpha * beta) * ut[:, None] * (A.T @ ut)[None, :]
               + (0.5 * alpha) * (W * (x / (g * s))[None, :]) @ Vh)
        grads[cq.key] = gradient_entry(xp, cq, F_L=2.0 * solve_triangular(cp.L, MqA, trans=True))
    else:
        Mq = (-0.5 * alpha * beta) * uu + (0.5 * alpha) * (W * (x / (g * s * s))[None, :]) @ W.T
        grads[cq.key] = gradient_entry(xp, cq, G_S=inv_sandwich(cp.L, Mq))
    Mp = (-0.5 * alpha * alpha) * uu - (0.5 * alpha) * (W * (x / g)[None, :]) @ W.T
    if cp.is_factor:
        grads[cp.key] = gradient_entry(xp, cp, F_L=2.0 * solve_triangular(cp.L, Mp, trans=True))
    else:
        grads[cp.key] = gradient_entry(xp, cp, G_S=inv_sandwich(cp.L, Mp))
    return value, grads


def _finish(xp, kind, renyi, grads=None):
    """Turn D_alpha (and its gradients) into the divergence named by ``kind``."""
    if kind == "renyi":
        value, scale = renyi, None
    elif kind == "bhattacharyya":      # D_B = D_{1/2} / 2
        value, scale = 0.5 * renyi, 0.5
    else:                              # H^2 = 1 - exp(-D_B)
        value, scale = -xp.expm1(-0.5 * renyi), 0.5 * xp.exp(-0.5 * renyi)
    value = xp.asarray(value)          # a 0-d array, not a NumPy scalar
    if grads is None:
        return value
    if scale is not None:
        grads = {k: scale * g for k, g in grads.items()}
    return value, grads


def renyi_mvn(mq, Sq=None, mp=None, Sp=None, *, alpha, Lq=None, Lp=None, validate=True):
    """Renyi divergence of order ``alpha``, ``D_alpha(Q || P)``, between multivariate Gaussians.

    ``D_alpha(Q || P) = 1/(alpha - 1) log int q^alpha p^(1 - alpha)
    = alpha/2 d^T S_a^{-1} d - 1/(2 (alpha - 1)) log(|S_a| / (|Sq|^(1 - alpha) |Sp|^alpha))``
    with ``d = mq - mp`` and ``S_a = alpha Sp + (1 - alpha) Sq`` (Gil, Alajaji & Linder 2013).
    It is finite when ``S_a`` is positive definite: always for ``0 < alpha < 1``, and for
    ``alpha > 1`` only when ``Sp^{-1} Sq`` has eigenvalues below ``alpha / (alpha - 1)``.
    ``alpha = 1`` gives :func:`kl_mvn` (the limit), ``alpha = 1/2`` twice the Bhattacharyya
    distance.

    Parameters
    ----------
    mq, mp : array (M,)
        Means of Q and P (``mp`` required).
    Sq, Sp : array (M, M), optional
        Covariances. Give exactly one of ``Sq``/``Lq`` and of ``Sp``/``Lp``.
    alpha : float, keyword-only
        Order, a Python number > 0.
    Lq, Lp : array (M, M), optional, keyword-only
        Lower Cholesky factors instead of covariances (only the lower triangle is read).
    validate : bool
        Check values (one host synchronisation). An ``alpha > 1`` at which the divergence is
        infinite raises whenever it is detected: always for ``alpha >= 5/4`` (the Cholesky of
        ``S_a`` fails), and for ``1 < alpha < 5/4`` only with ``validate`` (one more
        synchronisation), else the value is ``nan``.

    Returns
    -------
    value : array ()

    Raises
    ------
    ValueError
        ``alpha <= 0`` or not finite; ``alpha > 1`` with ``S_a`` not positive definite (infinite
        divergence); NaN or Inf in the arguments.
    TypeError
        ``alpha`` not a Python number; and as :func:`kl_mvn`.
    ShapeError, NotPSDError
        As :func:`kl_mvn`.

    Notes
    -----
    For ``|1 - alpha| >= 1/4`` one Cholesky of ``S_a`` and triangular solves (a few GEMMs);
    closer to 1, one SVD of ``Lp^{-1} Lq`` (tens of GEMMs), which stays accurate as
    ``alpha -> 1`` where the textbook form divides by ``alpha - 1`` (module docstring).
    """
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, alpha, validate, False)


def renyi_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, alpha, Lq=None, Lp=None, validate=True):
    """:func:`renyi_mvn` and its gradients ``(value, grads)`` (no entry for ``alpha``).

    With ``u = S_a^{-1} (mq - mp)``:

    - ``d/dmq = alpha u = -d/dmp``
    - ``d/dSq = -alpha (1 - alpha)/2 u u^T + (S_a^{-1} - Sq^{-1}) / 2``
    - ``d/dSp = -alpha^2/2 u u^T + alpha/(2 (alpha - 1)) (Sp^{-1} - S_a^{-1})``

    (near ``alpha = 1`` evaluated in the whitened eigenbasis so that they stay accurate as
    ``alpha -> 1``). Factor gradients are ``tril(2 (d/dS) L)``.
    """
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, alpha, validate, True)


def bhattacharyya_mvn(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """Bhattacharyya distance ``D_B(Q, P) = -log int sqrt(q p)`` between multivariate Gaussians.

    ``D_B = 1/8 d^T S^{-1} d + 1/2 log(|S| / sqrt(|Sq| |Sp|))``, ``S = (Sq + Sp) / 2``,
    ``d = mq - mp`` (Bhattacharyya 1943); symmetric in Q and P, equal to ``D_{1/2}(Q || P) / 2``
    and computed that way (see :func:`renyi_mvn`). Arguments, errors and returns as
    :func:`kl_mvn`.
    """
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, 0.5, validate, False, "bhattacharyya")


def bhattacharyya_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None,
                               validate=True):
    """:func:`bhattacharyya_mvn` and its gradients ``(value, grads)``: half those of
    :func:`renyi_mvn_and_grad` at ``alpha = 1/2``."""
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, 0.5, validate, True, "bhattacharyya")


def hellinger_mvn(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """Squared Hellinger distance ``H^2(Q, P) = 1 - int sqrt(q p)`` between multivariate Gaussians.

    ``H^2 = 1 - |Sq|^{1/4} |Sp|^{1/4} / |S|^{1/2} exp(-1/8 d^T S^{-1} d)``, ``S = (Sq + Sp) / 2``;
    symmetric, in [0, 1]. Computed as ``-expm1(-D_B)`` from :func:`bhattacharyya_mvn`, accurate
    when it is small. (Wu (2023) writes ``exp(+...)``; see docs/divergences.md.) Arguments, errors
    and returns as :func:`kl_mvn`.
    """
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, 0.5, validate, False, "hellinger")


def hellinger_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """:func:`hellinger_mvn` and its gradients ``(value, grads)``: ``exp(-D_B)`` times those of
    :func:`bhattacharyya_mvn_and_grad`."""
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, 0.5, validate, True, "hellinger")
