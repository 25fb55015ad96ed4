"""The quadrature rule of contour integral quadrature: shifts and weights for ``z^{-1/2}``.

Hale, Higham & Trefethen (2008), "Computing A^alpha, log(A), and related matrix functions by
contour integrals", SIAM J. Numer. Anal. 46(5), method 2; nodes from Jacobi elliptic functions
(see :mod:`gpnum.linalg._ciq`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ciq_quadrature"]


def _elliptic_agm(k2: float, frac):
    """``K(m)`` and ``sn, cn, dn(u | m)`` at ``u = frac K(m)`` for the parameter ``m = 1 - k2``,
    ``0 < k2 <= 1``.

    The arithmetic-geometric mean method (Abramowitz & Stegun 16.4 and 17.6), started from
    ``b_0 = sqrt(k2)`` so that parameters within ``1e-16`` of 1 (condition numbers beyond
    1e16) keep full precision; one AGM gives ``K`` and the functions (``u`` in units of ``K``:
    ``2^n a_n u = 2^(n-1) pi frac``). Host float64; ``frac`` an ndarray. (Here rather than from
    ``scipy.special``, whose import costs a CIQ call's worth of time on first use.)
    """
    a, b, c = 1.0, math.sqrt(k2), math.sqrt(1.0 - k2)
    aa, cc = [a], [c]
    for _ in range(64):
        if abs(c) <= 1e-16 * a:
            break
        a, b, c = 0.5 * (a + b), math.sqrt(a * b), 0.5 * (a - b)
        aa.append(a)
        cc.append(c)
    n = len(aa) - 1
    phi = (2.0 ** (n - 1) * math.pi) * np.asarray(frac, dtype=np.float64)
    for j in range(n, 0, -1):
        phi = 0.5 * (phi + np.arcsin(np.clip(cc[j] / aa[j] * np.sin(phi), -1.0, 1.0)))
    sn, cn = np.sin(phi), np.cos(phi)
    # dn^2 = 1 - m sn^2 = k2 + m cn^2: no cancellation where sn is near 1 (cn near 0).
    dn = np.sqrt(k2 + (1.0 - k2) * cn * cn)
    return math.pi / (2.0 * aa[n]), sn, cn, dn


def ciq_quadrature(lmin: float, lmax: float, num_quad: int):
    """Shifts and weights of the Hale-Higham-Trefethen rule for ``z^{-1/2}`` on ``[lmin, lmax]``.

    Computed on the host in float64 (Jacobi elliptic functions by the AGM method).

    Returns
    -------
    shifts, weights : ndarray (num_quad,)
        Positive, with ``sum_q w_q / (z + s_q) ~= z^{-1/2}`` for ``z`` in ``[lmin, lmax]``; the
        relative error falls like ``exp(-2 pi^2 Q / (log(lmax/lmin) + 3))``.
    """
    num_quad = int(num_quad)
    if num_quad < 1:
        raise ValueError(f"num_quad: expected an integer >= 1, got {num_quad}")
    if not (0.0 < lmin <= lmax and math.isfinite(lmax)):
        raise ValueError(f"eigen_bounds: expected 0 < lmin <= lmax < inf, got ({lmin}, {lmax})")
    if lmin == lmax:  # a multiple of the identity: the rule below degenerates
        lmax = lmin * (1.0 + 1e-8)
    k2 = lmin / lmax
    frac = (np.arange(1, num_quad + 1, dtype=np.float64) - 0.5) / num_quad
    kp, sn, cn, dn = _elliptic_agm(k2, frac)
    shifts = lmin * (sn / cn) ** 2
    weights = 2.0 * math.sqrt(lmin) * kp * dn / (math.pi * num_quad * cn**2)
    return shifts, weights
