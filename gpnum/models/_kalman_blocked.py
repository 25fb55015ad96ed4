"""The Kalman filter's log marginal likelihood as a blocked scan (three passes over blocks).

The steps of a chunk are cut into ``B`` contiguous blocks of ``L`` steps, and the Python loops
run over the ``L`` steps of a block, every operation batched over the ``B`` blocks (the blocked
form of a parallel scan; Blelloch 1990, "Prefix sums and their applications", sec. 1.4):

1. each block's Sarkka & Garcia-Fernandez (2021) element, folded step by step (one step's
   element has an information matrix of rank one, so each fold is a Sherman-Morrison update:
   :func:`_fold_step`);
2. an associative scan over the ``B`` block elements: the filtered state at every block's end;
3. the ordinary Kalman filter inside every block from the filtered state before it, which gives
   the innovations and the log marginal likelihood (Sarkka 2013, sec. 4.3 and 12.3.1).

The arrays of one step are (B, J, J): they stay in cache, and the work per step is that of one
combination and one filter step instead of the full scan's two combinations over arrays that
do not fit in cache. Forward-mode tangents (one per hyper-parameter) ride along exactly as in
:mod:`gpnum.models._kalman_scan`; pass 3's differential is that of the textbook filter step:

    m- = A m,  P- = A P A^T + Q,  g = P- h,  S = h^T g + R,  v = y - h^T m-,
    m = m- + g v / S,  P = P- - g g^T / S,
    dP- = dA P A^T + A dP A^T + A P dA^T + dQ,  dg = dP- h,  dS = h^T dg + dR,
    dm = dm- + (dg v + g dv - g v dS / S) / S,  dP = dP- - (dg g^T + g dg^T - g g^T dS / S) / S.

Padding steps (to fill the last block) are bare identities without an observation.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.models._kalman_scan import (
    _combine,
    _combine_with_tangents,
    _elements,
    _predict_first,
    associative_scan,
)

__all__ = ["chunk_terms_blocked"]

_LOG_2PI = math.log(2.0 * math.pi)


def _t(M):
    return get_namespace(M).matrix_transpose(M)


def _sym(M):
    return 0.5 * (M + _t(M))


def _mv(M, v):
    """Stacked matrix-vector products ``M v`` for (..., J, J) and (..., J)."""
    return (M @ v[..., None])[..., 0]


def _outer(u, v):
    return u[..., :, None] * v[..., None, :]


def _pad(x, count, value, axis):
    """``x`` with ``count`` copies of ``value`` (broadcast to one step) appended along
    ``axis``."""
    if count == 0:
        return x
    xp = get_namespace(x)
    shape = list(x.shape)
    shape[axis] = count
    fill = xp.broadcast_to(value, tuple(shape)) if hasattr(value, "shape") else \
        xp.full(tuple(shape), value, dtype=x.dtype, device=device_of(x))
    return xp.concat([x, xp.astype(fill, x.dtype, copy=True)], axis=axis)


def _dot(u, v):
    return get_namespace(u).sum(u * v, axis=-1)


def _fold_step(agg, A, Q, y, w, h, R, tangents=None):
    """``agg (+) e`` for a single step's element ``e`` (transition ``A``, noise ``Q``,
    observation ``y`` with weight ``w``): its ``J_e = a a^T w / S`` has rank one
    (``a = A^T h``), so ``(I + C J_e)^{-1}`` is a Sherman-Morrison update and the combination
    needs three matrix products instead of ten and an inverse. With ``c = C_i a``,
    ``rho = w / (S + w a^T c)``, ``A_e = A - K a^T`` (``K = Q h w / S``), ``u = A_i^T a``:

        A = A_e A_i - rho (A_e c) u^T,        b = T (b_i + c y w / S) + K y,
        C = A_e C_i A_e^T - rho (A_e c)(A_e c)^T + C_e,
        eta = eta_i + rho u (y - a^T b_i),    J = J_i + rho u u^T,

    ``T v = A_e v - rho (A_e c)(a^T v)``; ``tangents``, the tangents of ``agg`` followed by
    ``(dA, dQ, dy, dR)``, give the differential of each line."""
    Ai, bi, Ci, ei, Ji = agg[:5]
    bi, ei = bi[..., 0], ei[..., 0]
    QH = Q @ h
    S = QH @ h + R
    invS = w / S
    K = QH * invS[..., None]
    a = h @ A                                    # (B, J): A^T h
    Ae = A - _outer(K, a)
    c = _mv(Ci, a)
    ac = _dot(a, c)
    den = S + w * ac
    rho = w / den
    Aec = _mv(Ae, c)
    u = _mv(_t(Ai), a)
    yS = y * invS
    v = bi + c * yS[..., None]
    av = _dot(a, v)
    ab = _dot(a, bi)
    r1 = rho[..., None]
    A_new = Ae @ Ai - r1[..., None] * _outer(Aec, u)
    b_new = _mv(Ae, v) - Aec * (rho * av)[..., None] + K * y[..., None]
    AeCi = Ae @ Ci
    QQ = _outer(QH, QH)
    C_new = _sym(AeCi @ _t(Ae) - r1[..., None] * _outer(Aec, Aec) + Q
                 - QQ * invS[..., None, None])
    e_new = ei + u * (rho * (y - ab))[..., None]
    J_new = Ji + r1[..., None] * _outer(u, u)
    out = (A_new, b_new[..., None], C_new, e_new[..., None], J_new)
    if tangents is None:
        return out
    dAi, dbi, dCi, dei, dJi, dA, dQ, dy, dR = tangents
    dbi, dei = dbi[..., 0], dei[..., 0]
    dQH = dQ @ h
    dS = dQH @ h + dR[:, None]
    dinvS = -dS * (invS / S)
    dK = dQH * invS[..., None] + QH * dinvS[..., None]
    da = h @ dA
    dAe = dA - _outer(dK, a) - _outer(K, da)
    dc = _mv(dCi, a) + _mv(Ci, da)
    dden = dS + w * (_dot(da, c) + _dot(a, dc))
    drho = -rho * dden / den
    dAec = _mv(dAe, c) + _mv(Ae, dc)
    du = _mv(_t(dAi), a) + _mv(_t(Ai), da)
    dyS = dy * invS + y * dinvS
    dv = dbi + dc * yS[..., None] + c * dyS[..., None]
    dav = _dot(da, v) + _dot(a, dv)
    dab = _dot(da, bi) + _dot(a, dbi)
    dr1 = drho[..., None, None]
    dA_new = (dAe @ Ai + Ae @ dAi - dr1 * _outer(Aec, u)
              - r1[..., None] * (_outer(dAec, u) + _outer(Aec, du)))
    db_new = (_mv(dAe, v) + _mv(Ae, dv) - dAec * (rho * av)[..., None]
              - Aec * (drho * av + rho * dav)[..., None] + dK * y[..., None]
              + K * dy[..., None])
    cross = dAe @ _t(AeCi)
    cQ = _outer(dQH, QH)
    dAA = _outer(dAec, Aec)
    dC_new = _sym(cross + _t(cross) + Ae @ dCi @ _t(Ae) - dr1 * _outer(Aec, Aec)
                  - r1[..., None] * (dAA + _t(dAA)) + dQ - (cQ + _t(cQ)) * invS[..., None, None]
                  - QQ * dinvS[..., None, None])
    de_new = dei + du * (rho * (y - ab))[..., None] + u * (drho * (y - ab)
                                                           + rho * (dy - dab))[..., None]
    duu = _outer(du, u)
    dJ_new = dJi + dr1 * _outer(u, u) + r1[..., None] * (duu + _t(duu))
    return out + (dA_new, db_new[..., None], dC_new, de_new[..., None], dJ_new)


def chunk_terms_blocked(A, Q, h, R, Y, prior, tangents, num_blocks):
    """The log-likelihood terms of a chunk of steps, its last filtered state and (with
    ``tangents``) their derivatives: the blocked counterpart of
    :func:`gpnum.models._kalman_scan._chunk_terms` (same arguments, ``Y`` of one column),
    with ``num_blocks`` blocks at most."""
    xp = get_namespace(A)
    dev = device_of(A)
    n, J = A.shape[0], A.shape[-1]
    B = max(1, min(int(num_blocks), n))
    L = -(-n // B)
    B = -(-n // L)  # no empty block
    pad = B * L - n
    m_prev0, P_prev0 = prior
    with_t = tangents is not None
    y = Y[:, 0]
    eye = xp.eye(J, dtype=A.dtype, device=dev)
    if with_t:
        dA, dQ, dR, dY, (dm_prev0, dP_prev0) = tangents
        p = dA.shape[0]
        (m_first, P_first), (dm_first, dP_first) = _predict_first(
            A, Q, m_prev0, P_prev0, dA, dQ, dm_prev0, dP_prev0)
        dy = dY[:, :, 0]
    else:
        m_first, P_first = _predict_first(A, Q, m_prev0, P_prev0)
    # block b holds steps b L .. b L + L - 1; reorder so that step l of every block is a
    # contiguous (B, ...) slab: index l B + b <- b L + l
    order = xp.reshape(xp.arange(L, device=dev)[:, None] + L * xp.arange(B, device=dev)[None, :],
                       (-1,))

    def arrange(x, axis=0, fill=0.0):
        return xp.take(_pad(x, pad, fill, axis), order, axis=axis)

    obs = xp.take(_pad(xp.ones((n,), dtype=A.dtype, device=dev), pad, 0.0, 0), order)
    A3, Q3, y3 = arrange(A, fill=eye), arrange(Q), arrange(y)
    if with_t:
        dA3, dQ3, dy3 = arrange(dA, 1), arrange(dQ, 1), arrange(dy, 1)
    # ---- pass 1: every block's element. Step 0 of the chunk is conditioned on the chunk's
    # prior: A_0 = 0, Q_0 = its covariance, "observation" y_0 - h m_first, m_first added to b.
    zero = xp.zeros((1, J, J), dtype=A.dtype, device=dev)
    args = [xp.concat([zero, A3[1:B, ...]], axis=0),
            xp.concat([P_first[None, :, :], Q3[1:B, ...]], axis=0), h, R,
            xp.concat([y3[0:1] - h @ m_first[:, 0], y3[1:B]])[:, None]]
    if with_t:
        zt = xp.zeros((p, 1, J, J), dtype=A.dtype, device=dev)
        args += [xp.concat([zt, dA3[:, 1:B, ...]], axis=1),
                 xp.concat([dP_first[:, None, :, :], dQ3[:, 1:B, ...]], axis=1), dR,
                 xp.concat([dy3[:, 0:1] - (dm_first[:, :, 0] @ h)[:, None], dy3[:, 1:B]],
                           axis=1)[:, :, None]]
    agg = list(_elements(*args, obs=obs[0:B]))
    agg[1] = agg[1] + xp.concat([m_first[None, :, :],
                                 xp.zeros((B - 1, J, 1), dtype=A.dtype, device=dev)], axis=0)
    if with_t:
        agg[6] = agg[6] + xp.concat([dm_first[:, None, :, :],
                                     xp.zeros((p, B - 1, J, 1), dtype=A.dtype, device=dev)],
                                    axis=1)
    agg = tuple(agg)
    for j in range(1, L):
        sl = slice(j * B, (j + 1) * B)
        tl = None
        if with_t:
            tl = agg[5:] + (dA3[:, sl, ...], dQ3[:, sl, ...], dy3[:, sl], dR)
        agg = _fold_step(agg, A3[sl, ...], Q3[sl, ...], y3[sl], obs[sl], h, R, tl)
    combine = _combine_with_tangents if with_t else _combine
    # ---- pass 2: filtered state at the end of every block
    pre = associative_scan(combine, agg)
    m = xp.concat([m_prev0[None, :, 0], pre[1][:-1, :, 0]], axis=0)      # (B, J) before
    P = xp.concat([P_prev0[None, :, :], pre[2][:-1, :, :]], axis=0)      # each block
    last = (pre[1][-1, :, :], pre[2][-1, :, :])
    if with_t:
        dm = xp.concat([dm_prev0[:, None, :, 0], pre[6][:, :-1, :, 0]], axis=1)
        dP = xp.concat([dP_prev0[:, None, :, :], pre[7][:, :-1, :, :]], axis=1)
        last_t = (pre[6][:, -1, :, :], pre[7][:, -1, :, :])
        dvalue = xp.zeros((p,), dtype=A.dtype, device=dev)
    # ---- pass 3: the filter inside every block
    value = 0.0
    for j in range(L):
        sl = slice(j * B, (j + 1) * B)
        Al, Ql, yl, w = A3[sl, ...], Q3[sl, ...], y3[sl], obs[sl]
        mp = _mv(Al, m)
        AP = Al @ P
        Pp = _sym(AP @ _t(Al) + Ql)
        g = Pp @ h
        S = g @ h + R
        v = yl - mp @ h
        vS = v / S
        value = value + xp.sum(w * (-0.5 * (v * vS + xp.log(S) + _LOG_2PI)))
        wS = w / S
        if with_t:
            dAl, dQl, dyl = dA3[:, sl, ...], dQ3[:, sl, ...], dy3[:, sl]
            dmp = _mv(dAl, m) + _mv(Al, dm)
            cross = AP @ _t(dAl)
            dPp = _sym(cross + _t(cross) + Al @ dP @ _t(Al) + dQl)
            dg = dPp @ h
            dS = dg @ h + dR[:, None]
            dv = dyl - dmp @ h
            dvalue = dvalue + xp.sum(w * (-(vS * dv) - 0.5 * dS * (1.0 - v * vS) / S), axis=1)
            dm = dmp + wS[:, None] * (dg * v[:, None] + g * (dv - vS * dS)[..., None])
            gdg = _outer(dg, g)
            dP = dPp - wS[:, None, None] * (gdg + _t(gdg) - _outer(g, g) * (dS / S)[..., None,
                                                                                     None])
        m = mp + g * (wS * v)[:, None]
        P = Pp - _outer(g, g) * wS[:, None, None]
    if not with_t:
        return value, last, None
    return value, last, (dvalue, last_t)
