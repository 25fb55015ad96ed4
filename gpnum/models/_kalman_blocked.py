"""The Kalman filter's log marginal likelihood as a blocked scan (three passes over blocks).

The steps of a chunk are cut into ``B`` contiguous blocks of ``L`` steps, and the Python loops
run over the ``L`` steps of a block, every operation batched over the ``B`` blocks (the blocked
form of a parallel scan; Blelloch 1990, "Prefix sums and their applications", sec. 1.4):

1. each block's Sarkka & Garcia-Fernandez (2021) element, folded step by step
   (:func:`gpnum.models._kalman_scan._combine`);
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
    # ---- pass 1 inputs: the elements, the first step conditioned on the chunk's prior
    zero = xp.zeros((1, J, J), dtype=A.dtype, device=dev)
    A_el = xp.concat([zero, A[1:, :, :]], axis=0)
    Q_el = xp.concat([P_first[None, :, :], Q[1:, :, :]], axis=0)
    y_el = xp.concat([y[0:1] - h @ m_first[:, 0], y[1:]])
    obs = _pad(xp.ones((n,), dtype=A.dtype, device=dev), pad, 0.0, 0)
    # block b holds steps b L .. b L + L - 1; reorder so that step l of every block is a
    # contiguous (B, ...) slab: index l B + b <- b L + l
    order = xp.reshape(xp.arange(L, device=dev)[:, None] + L * xp.arange(B, device=dev)[None, :],
                       (-1,))

    def arrange(x, axis=0, fill=0.0):
        return xp.take(_pad(x, pad, fill, axis), order, axis=axis)

    obs = xp.take(obs, order)
    args = [arrange(A_el, fill=eye), arrange(Q_el), h, R, arrange(y_el)[:, None]]
    if with_t:
        zt = xp.zeros((p, 1, J, J), dtype=A.dtype, device=dev)
        dA_el = xp.concat([zt, dA[:, 1:, :, :]], axis=1)
        dQ_el = xp.concat([dP_first[:, None, :, :], dQ[:, 1:, :, :]], axis=1)
        dy_el = xp.concat([dy[:, 0:1] - (dm_first[:, :, 0] @ h)[:, None], dy[:, 1:]], axis=1)
        args += [arrange(dA_el, 1), arrange(dQ_el, 1), dR, arrange(dy_el, 1)[:, :, None]]
    elems = list(_elements(*args, obs=obs))
    # b of the first step gets the prior mean back (its "observation" was y - h m_first)
    first_b = xp.concat([m_first[None, :, :],
                         xp.zeros((B * L - 1, J, 1), dtype=A.dtype, device=dev)], axis=0)
    elems[1] = elems[1] + first_b
    if with_t:
        first_db = xp.concat([dm_first[:, None, :, :],
                              xp.zeros((p, B * L - 1, J, 1), dtype=A.dtype, device=dev)],
                             axis=1)
        elems[6] = elems[6] + first_db

    def step(l):
        sl = slice(l * B, (l + 1) * B)
        return tuple(e[sl, ...] for e in elems[:5]) + tuple(e[:, sl, ...] for e in elems[5:])

    combine = _combine_with_tangents if with_t else _combine
    # ---- pass 1: fold every block's elements
    agg = step(0)
    for l in range(1, L):
        agg = combine(agg, step(l))
    # ---- pass 2: filtered state at the end of every block
    pre = associative_scan(combine, agg)
    m = xp.concat([m_prev0[None, :, 0], pre[1][:-1, :, 0]], axis=0)      # (B, J) before
    P = xp.concat([P_prev0[None, :, :], pre[2][:-1, :, :]], axis=0)      # each block
    last = (pre[1][-1, :, :], pre[2][-1, :, :])
    if with_t:
        dm = xp.concat([dm_prev0[:, None, :, 0], pre[6][:, :-1, :, 0]], axis=1)
        dP = xp.concat([dP_prev0[:, None, :, :], pre[7][:, :-1, :, :]], axis=1)
        last_t = (pre[6][:, -1, :, :], pre[7][:, -1, :, :])
    # ---- pass 3: the filter inside every block
    A3, Q3, y3 = arrange(A, fill=eye), arrange(Q), arrange(y)
    if with_t:
        dA3, dQ3, dy3 = arrange(dA, 1), arrange(dQ, 1), arrange(dy, 1)
        dvalue = xp.zeros((p,), dtype=A.dtype, device=dev)
    value = 0.0
    for l in range(L):
        sl = slice(l * B, (l + 1) * B)
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
