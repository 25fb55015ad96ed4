"""The Student-t pieces of the sparse variational Student-t process (Xu, Zeng & Paisley 2024).

- :func:`lgamma`, :func:`digamma`, :func:`trigamma`, :func:`trigamma_difference`: re-exported
  from :mod:`gpnum.special` (the project's one home of them), for the degrees of
  freedom of the prior and of ``q``.
- :func:`student_t_fisher` and :func:`student_t_fisher_solve`: the Fisher information of
  ``ST(nu, m, diag(sigma^2))`` (covariance form) in the order ``(m, sigma, nu)`` (Xu,
  Zeng & Paisley 2024; docs/svtp.md), and its O(M) inverse (Sherman-Morrison for the
  ``sigma`` block, a Schur complement for ``nu``). Tested against a Monte-Carlo Fisher.
- :func:`chi2_quantile_and_grad`: the chi-square draws of the Gaussian-scale-mixture
  reparameterisation ``u = m + sqrt((nu - 2) / r) S^(1/2) eps``, ``r ~ chi^2(nu)``, as the
  quantile ``r = F^-1(U; nu)`` of fixed uniforms ``U`` (common random numbers) with the implicit
  reparameterisation gradient ``dr/dnu = -(dF/dnu)(r; nu) / p(r; nu)`` (Figurnov, Mohamed & Mnih
  2018). Host-side (NumPy/SciPy) on a handful of scalars per step, like the likelihoods'
  host-side coefficient tables.
"""

from __future__ import annotations

import functools

import numpy as np

from gpnum.backend import asarray, get_namespace, is_array
from gpnum.special import digamma, lgamma, trigamma, trigamma_difference

__all__ = ["lgamma", "digamma", "trigamma", "trigamma_difference", "student_t_fisher",
           "student_t_fisher_solve", "chi2_quantile_and_grad"]


def _fisher_coefficients(df, sigma):
    """The scalars of the Fisher's blocks (docs/svtp.md), ``k = nu + M``, as 0-d arrays
    of ``sigma``'s dtype. Computed in float64 whatever that dtype: ``F_nunu`` keeps only
    ~16 - 2 log10(nu) digits, none in float32 once ``nu`` is in the thousands."""
    xp = get_namespace(df, sigma)
    M = sigma.shape[0]
    coeffs = _fisher_coefficients_f64(xp.astype(df, xp.float64), M)
    return tuple(xp.astype(c, sigma.dtype) for c in coeffs)


def _fisher_coefficients_f64(nu, M):
    M = float(M)
    k = nu + float(M)
    c_mm = nu * k / ((nu - 2.0) * (k + 2.0))                      # F_mm = c_mm / sigma^2
    d_ss = 2.0 * k / (k + 2.0)                                    # F_ss diagonal: d_ss / sigma^2
    c_ss = 2.0 / (k + 2.0)                                        # minus c_ss (1/s)(1/s)^T
    a_ns = 2.0 * (M + 2.0) / (k * (nu - 2.0) * (k + 2.0))         # F_nu,s_i = a_ns / sigma_i
    # The three terms of F_nunu are each ~ M / nu^2 and their sum ~ M^2 / nu^4: the trigamma
    # difference must be exact to the last digits (relative error of the sum ~ 1e-16 nu^2 / M).
    f_nn = (0.25 * trigamma_difference(0.5 * nu, 0.5 * M)
            + M * nu / (2.0 * (nu - 2.0) ** 2 * (k + 2.0)) - M / ((nu - 2.0) * k))
    return c_mm, d_ss, c_ss, a_ns, f_nn


def _check_fisher_args(df, sigma):
    """``(xp, df, sigma)`` with ``df`` a 0-d array of ``sigma``'s namespace, device and dtype
    (a Python number is accepted), after checking shapes."""
    if not is_array(sigma):
        raise TypeError(f"sigma: expected an array of shape (M,), got {type(sigma).__name__}")
    if isinstance(df, bool) or not (is_array(df) or isinstance(df, (int, float))):
        raise TypeError(f"df: expected a number or a 0-d array, got {type(df).__name__}")
    xp = get_namespace(df, sigma)
    if sigma.ndim != 1:
        raise ValueError(f"sigma: expected a vector (M,), got shape {tuple(sigma.shape)}")
    df = asarray(df, like=sigma)
    if df.ndim != 0:
        raise ValueError(f"df: expected a number or a 0-d array, got shape {tuple(df.shape)}")
    return xp, df, sigma


def student_t_fisher(df, sigma):
    """Dense Fisher information of ``ST(nu, m, diag(sigma^2))`` w.r.t. ``(m, sigma, nu)``.

    Covariance form: ``Cov = diag(sigma^2)`` for ``nu > 2`` (the density of Xu, Zeng &
    Paisley 2024, definition 1). With ``k = nu + M`` (docs/svtp.md; checked against a
    Monte-Carlo Fisher in the tests, not that paper's code, whose matrix differs):

    - ``F_mm = nu k / ((nu - 2)(k + 2)) diag(1 / sigma^2)``, no cross terms of ``m``;
    - ``F_ss = 2 / (k + 2) [k diag(1 / sigma^2) - (1 / sigma)(1 / sigma)^T]``;
    - ``F_nu,sigma_i = 2 (M + 2) / (k (nu - 2)(k + 2) sigma_i)``;
    - ``F_nunu = [psi'(nu/2) - psi'(k/2)] / 4 + M nu / (2 (nu - 2)^2 (k + 2)) - M / ((nu - 2) k)``.

    Parameters
    ----------
    df : float or 0-d array
        ``nu > 2``.
    sigma : array (M,)
        Positive scales.

    Returns
    -------
    F : array (2M + 1, 2M + 1)
        Rows and columns in the order ``m_1..m_M, sigma_1..sigma_M, nu``.
    """
    xp, df, sigma = _check_fisher_args(df, sigma)
    M = sigma.shape[0]
    c_mm, d_ss, c_ss, a_ns, f_nn = _fisher_coefficients(df, sigma)
    inv = 1.0 / sigma
    eye = xp.eye(M, dtype=sigma.dtype, device=sigma.device)
    zero = xp.zeros((M, M), dtype=sigma.dtype, device=sigma.device)
    zcol = xp.zeros((M, 1), dtype=sigma.dtype, device=sigma.device)
    F_mm = c_mm * eye * (inv * inv)[None, :]
    F_ss = d_ss * eye * (inv * inv)[None, :] - c_ss * (inv[:, None] * inv[None, :])
    f_ns = (a_ns * inv)[:, None]
    top = xp.concat([F_mm, zero, zcol], axis=1)
    mid = xp.concat([zero, F_ss, f_ns], axis=1)
    bot = xp.concat([xp.zeros((1, M), dtype=sigma.dtype, device=sigma.device), f_ns.T,
                     xp.reshape(f_nn, (1, 1))], axis=1)
    return xp.concat([top, mid, bot], axis=0)


def student_t_fisher_solve(df, sigma, v):
    """``F^{-1} v`` for the Fisher of :func:`student_t_fisher`, in O(M).

    ``F_mm`` is diagonal. ``F_ss = D - c u u^T`` (``D = d diag(1/sigma^2)``, ``u = 1/sigma``) is
    inverted by Sherman-Morrison (its denominator is ``1 - c u^T D^-1 u = nu / k > 0``); the
    ``nu`` row and column ``f = a u`` by the Schur complement
    ``s = F_nunu - f^T F_ss^-1 f``.

    Parameters
    ----------
    df : float or 0-d array
    sigma : array (M,)
    v : array (2M + 1,)
        In the order ``(m, sigma, nu)``.

    Returns
    -------
    x : array (2M + 1,)
    """
    xp, df, sigma = _check_fisher_args(df, sigma)
    M = sigma.shape[0]
    if v.shape != (2 * M + 1,):
        raise ValueError(f"v: expected shape ({2 * M + 1},), got {tuple(v.shape)}")
    c_mm, d_ss, c_ss, a_ns, f_nn = _fisher_coefficients(df, sigma)
    v_m, v_s, v_n = v[:M], v[M:2 * M], v[2 * M]
    x_m = v_m * (sigma * sigma) / c_mm
    s2 = sigma * sigma

    def ss_solve(b):
        # (D - c u u^T)^-1 b = D^-1 b + c D^-1 u (u^T D^-1 b) / (1 - c u^T D^-1 u)
        Db = b * s2 / d_ss
        Du = sigma / d_ss
        denom = 1.0 - c_ss * (float(M) / d_ss)
        return Db + c_ss * Du * xp.sum(b / sigma * s2 / d_ss) / denom

    y1 = ss_solve(v_s)
    f = a_ns / sigma
    y2 = ss_solve(f)
    schur = f_nn - xp.sum(f * y2)
    x_n = (v_n - xp.sum(f * y1)) / schur
    x_s = y1 - y2 * x_n
    return xp.concat([x_m, x_s, xp.reshape(x_n, (1,))])


@functools.lru_cache(maxsize=1)
def _tail_rule():
    """Nodes and weights of 16-point Gauss-Legendre on each of 40 unit panels of [0, 40)."""
    nodes, weights = np.polynomial.legendre.leggauss(16)
    k = np.arange(40, dtype=np.float64)[:, None]
    s_unit = (k + 0.5 * (nodes[None, :] + 1.0)).reshape(-1)
    w_unit = np.broadcast_to(0.5 * weights[None, :], (40, 16)).reshape(-1)
    return s_unit, w_unit


def chi2_quantile_and_grad(nu, u, *, grad=True):
    """Chi-square quantiles ``r = F^-1(u; nu)`` and ``dr/dnu`` at fixed ``u`` (host-side).

    ``r = 2 g`` with ``g = P^-1(nu/2, u)`` (SciPy's ``gammaincinv``). Differentiating
    ``P(nu/2, r/2) = u`` at fixed ``u`` gives ``dr/dnu = -(dP/da)(a, g) / p(g; a)`` with
    ``a = nu/2`` and ``p`` the Gamma(a, 1) density; ``dP/da`` by its power series
    ``P(a, x) = sum_n x^(a+n) e^-x / Gamma(a + n + 1)``, differentiated term by term:
    ``dP/da = sum_n t_n (log x - psi(a + n + 1))`` (O(sqrt(nu)) terms) for ``u <= 1/2``; for
    ``u > 1/2``, where that sum cancels, ``dP/da = -int_x^inf (log t - psi(a)) p(t; a) dt`` by
    panelled Gauss-Legendre quadrature. Both sums have terms of one sign.

    Parameters
    ----------
    nu : float
        Degrees of freedom, > 0.
    u : ndarray (S,)
        Uniforms in (0, 1).
    grad : bool
        Also return ``dr/dnu``.

    Returns
    -------
    r : ndarray (S,) float64
    dr_dnu : ndarray (S,) float64 or None
    """
    from scipy.special import digamma as _psi
    from scipy.special import gammaincinv, gammaln

    a = 0.5 * float(nu)
    u = np.asarray(u, dtype=np.float64)
    g = gammaincinv(a, u)
    if not grad:
        return 2.0 * g, None
    x = np.maximum(g, 1e-300)
    dP = np.empty_like(x)
    low = u <= 0.5
    if np.any(low):
        # Lower half: every term of the series is negative (log x < psi(a + 1)): no
        # cancellation. The terms rise while x / (a + n + 1) > 1 and fall like a Gaussian of
        # width sqrt(x) after their peak at n ~ x - a: 12 widths past it leave < 1e-30.
        xl = x[low]
        n_max = int(np.max(np.maximum(xl - a, 0.0) + 12.0 * np.sqrt(xl + 1.0)) + 40.0)
        n = np.arange(n_max, dtype=np.float64)[None, :]
        logx = np.log(xl)[:, None]
        t = np.exp((a + n) * logx - xl[:, None] - gammaln(a + n + 1.0))
        dP[low] = np.sum(t * (logx - _psi(a + n + 1.0)), axis=1)
    if np.any(~low):
        # Upper half: there the series cancels (P ~ 1, dP/da ~ 1 - u). Instead
        # dP/da = -dQ/da = -int_x^inf (log t - psi(a)) p(t; a) dt, a positive integrand
        # (x > median > exp(psi(a))), by 16-point Gauss-Legendre on 40 panels of the density's
        # decay length at x (density below e^-40 of its value at x beyond them).
        xu = x[~low]
        slope = 1.0 - (a - 1.0) / xu
        L = np.where(slope * np.sqrt(xu) > 1.0, 1.0 / np.maximum(slope, 1e-300), np.sqrt(xu))
        s_unit, w_unit = _tail_rule()
        tt = xu[:, None] + L[:, None] * s_unit[None, :]
        dens = np.exp((a - 1.0) * np.log(tt) - tt - gammaln(a))
        dP[~low] = -np.sum(w_unit[None, :] * (np.log(tt) - _psi(a)) * dens, axis=1) * L
    log_pdf = (a - 1.0) * np.log(x) - x - gammaln(a)
    # dg/da = -dP/da / p(g); r = 2 g and a = nu / 2 make dr/dnu = dg/da.
    dr = -dP / np.exp(log_pdf)
    return 2.0 * g, dr
