"""Renyi divergences between multivariate Gaussians, and the Bhattacharyya and Hellinger ones.

All three share one spectral core. Whitening by ``Lp`` turns ``Sp`` into ``I`` and ``Sq`` into
``C = A A^T`` with ``A = Lp^{-1} Lq``; with the SVD ``A = W diag(s) V^T`` the eigenvalues of
``C`` (those of ``Sp^{-1} Sq``) are ``c_i = s_i^2``, computed to the accuracy of singular values
rather than that of eigenvalues of a squared matrix. With ``beta = 1 - alpha``,
``x_i = c_i - 1``, ``g_i = 1 + beta x_i`` (eigenvalues of the whitened
``alpha Sp + (1 - alpha) Sq``) and ``b = W^T Lp^{-1} (mq - mp)``:

    D_alpha(Q || P) = sum_i [log1p(beta x_i) - beta log c_i] / (2 beta)
                      + alpha/2 sum_i b_i^2 / g_i.

Each term of the first sum is O(beta) on top and bottom and is computed without cancelling
large numbers, so the value is accurate uniformly in alpha, including alpha -> 1, where it tends
to KL(Q || P) (and equals it at alpha = 1). The Bhattacharyya distance is ``D_{1/2} / 2``, and the
squared Hellinger distance is ``1 - exp(-D_B)``, computed with ``expm1``.
"""

from __future__ import annotations

from gpnum.backend import solve_triangular, to_numpy
from gpnum.divergences._checks import check_alpha, mvn_args, namespace_of
from gpnum.divergences._matrix import gradient_entry, inv_sandwich

__all__ = ["renyi_mvn", "renyi_mvn_and_grad", "bhattacharyya_mvn", "bhattacharyya_mvn_and_grad",
           "hellinger_mvn", "hellinger_mvn_and_grad"]

_NAMES = ("mq", "mp", "Sq", "Lq", "Sp", "Lp")


def _renyi(mq, Sq, mp, Sp, Lq, Lp, alpha, validate, want_grad, kind="renyi"):
    alpha = check_alpha(alpha)
    xp, _ = namespace_of({"mq": mq, "Sq": Sq, "mp": mp, "Sp": Sp, "Lq": Lq, "Lp": Lp})
    _, cq, cp = mvn_args(xp, mq, mp, Sq, Sp, Lq, Lp, _NAMES, validate)
    A = xp.tril(solve_triangular(cp.L, cq.L))
    b = solve_triangular(cp.L, mq - mp)
    W, s, Vh = xp.linalg.svd(A, full_matrices=False)
    x = (s - 1.0) * (s + 1.0)
    log_c = 2.0 * xp.log(s)
    beta = 1.0 - alpha
    g = 1.0 + beta * x
    if validate and alpha > 1.0 and not bool(xp.all(g > 0.0)):
        c_max = float(to_numpy(xp.max(s)) ** 2)
        raise ValueError(
            f"alpha: D_alpha(Q || P) is infinite for alpha = {alpha!r}: alpha Sp + (1 - alpha) Sq "
            f"is not positive definite (largest eigenvalue of Sp^{{-1}} Sq is {c_max:.6g}); "
            f"choose alpha < {c_max / (c_max - 1.0):.6g}")
    if beta == 0.0:
        t1 = 0.5 * xp.sum(x - log_c)
    else:
        t1 = xp.sum(xp.log1p(beta * x) - beta * log_c) / (2.0 * beta)
    bw = W.T @ b
    value = t1 + 0.5 * alpha * xp.sum(bw * bw / g)
    if not want_grad:
        return _finish(xp, kind, value)
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
    return _finish(xp, kind, value, grads)


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
        Check values (one host synchronisation; one more for ``alpha > 1``). Without it, an
        ``alpha`` for which the divergence is infinite gives ``nan``.

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
    Computed from one SVD of ``Lp^{-1} Lq`` (module docstring), accurate uniformly in
    ``alpha`` including near 1.
    """
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, alpha, validate, False)


def renyi_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, alpha, Lq=None, Lp=None, validate=True):
    """:func:`renyi_mvn` and its gradients ``(value, grads)`` (no entry for ``alpha``).

    With ``u = S_a^{-1} (mq - mp)``:

    - ``d/dmq = alpha u = -d/dmp``
    - ``d/dSq = -alpha (1 - alpha)/2 u u^T + (S_a^{-1} - Sq^{-1}) / 2``
    - ``d/dSp = -alpha^2/2 u u^T + alpha/(2 (alpha - 1)) (Sp^{-1} - S_a^{-1})``

    evaluated in the whitened eigenbasis so that they stay accurate as ``alpha -> 1``.
    Factor gradients are ``tril(2 (d/dS) L)``.
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
    when it is small. (The seed's version has ``exp(+...)``; design notes 4.5.) Arguments, errors
    and returns as :func:`kl_mvn`.
    """
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, 0.5, validate, False, "hellinger")


def hellinger_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """:func:`hellinger_mvn` and its gradients ``(value, grads)``: ``exp(-D_B)`` times those of
    :func:`bhattacharyya_mvn_and_grad`."""
    return _renyi(mq, Sq, mp, Sp, Lq, Lp, 0.5, validate, True, "hellinger")
