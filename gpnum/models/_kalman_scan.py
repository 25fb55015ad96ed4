"""The Kalman filter as a parallel (associative) scan, with forward-mode parameter derivatives.

Model (one scalar observation per step, ``r`` right-hand sides sharing the covariances):

    x_0 ~ N(0, P_inf),  x_k = A_k x_{k-1} + q_k,  q_k ~ N(0, Q_k),  y_k = H x_k + e_k,  e_k ~ N(0, R).

Written as ``A_0 = 0``, ``Q_0 = P_inf`` every step has the same form. Sarkka & Garcia-Fernandez
(2021, "Temporal parallelization of Bayesian smoothers", IEEE TAC 66(1), sec. IV, lemmas 7-8)
give each step an element ``(A, b, C, eta, J)``: ``p(x_k | x_{k-1}, y_k) = N(A x_{k-1} + b, C)``
and ``p(y_k | x_{k-1}) ∝ N_I(x_{k-1}; eta, J)`` (information form), with an associative
combination, so the filtering means and covariances are the prefixes of an associative scan:
O(log n) batched array operations, no Python loop over the steps.

Derivatives (forward mode). The filtered moments are a differentiable function of the
elements, and the elements of the model's ``A_k, Q_k, R, y_k``. Pushing a tangent through
the element construction and the combination (the differential of each formula, written out
below; ``d(M^{-1}) = -M^{-1} dM M^{-1}``) gives the tangents of every prefix; the tangent of an
associative operation is associative, so they ride in the same scan. With ``p`` directions (one
per hyper-parameter) the cost is about ``1 + 2p`` times that of the value. The log marginal
likelihood is the sum of the innovations' log densities (Sarkka 2013, "Bayesian filtering and
smoothing", sec. 12.3.1),

    log p(y) = -1/2 sum_k (v_k^2 / S_k + log S_k + log 2 pi),
    v_k = y_k - H A_k m_{k-1},  S_k = H (A_k P_{k-1} A_k^T + Q_k) H^T + R,

and its derivative follows from those of ``m_{k-1}``, ``P_{k-1}``, ``A_k``, ``Q_k``, ``R``, ``y``.

Long sequences run in chunks of steps, the filtered state (and its tangents) carried from one
chunk into the first element of the next: memory O(chunk J^2 p), a Python loop over chunks only.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace

__all__ = ["associative_scan", "kalman_filter", "log_marginal_likelihood"]

_LOG_2PI = math.log(2.0 * math.pi)


# ------------------------------------------------------------------------------ the scan
def _take(a, start, stop, step=1):
    """``a[..., start:stop:step, :, :]`` along the scan axis -3 (stop within bounds)."""
    return a[..., start:stop:step, :, :]


def _interleave(xp, even, odd, n):
    shape = list(even.shape)
    shape[-3] = n
    out = xp.empty(tuple(shape), dtype=even.dtype, device=device_of(even))
    out[..., 0:n:2, :, :] = even
    out[..., 1:n:2, :, :] = odd
    return out


def associative_scan(combine, elems):
    """Inclusive prefixes ``e_0 (+) ... (+) e_k`` of an associative ``(+)`` (odd/even recursion).

    Parameters
    ----------
    combine : callable
        ``combine(a, b)`` for tuples of arrays with equal lengths along axis -3, ``a`` earlier.
    elems : tuple of arrays
        Each (..., n, i, j): the sequence runs along axis -3 (leading axes batch).

    Returns
    -------
    tuple of arrays shaped like ``elems``.
    """
    elems = tuple(elems)
    xp = get_namespace(elems[0])
    n = elems[0].shape[-3]
    if n < 2:
        return elems
    pairs = combine(tuple(_take(e, 0, n - 1, 2) for e in elems),
                    tuple(_take(e, 1, n, 2) for e in elems))
    odd = associative_scan(combine, pairs)  # prefixes ending at 1, 3, 5, ...
    rest = (n + 1) // 2 - 1  # even positions 2, 4, ... below n
    first = tuple(_take(e, 0, 1) for e in elems)
    if rest > 0:
        filled = combine(tuple(_take(o, 0, rest) for o in odd),
                         tuple(_take(e, 2, 2 * rest + 1, 2) for e in elems))
        even = tuple(xp.concat([f, r], axis=-3) for f, r in zip(first, filled, strict=False))
    else:
        even = first
    return tuple(_interleave(xp, e, o, n) for e, o in zip(even, odd, strict=False))


# ------------------------------------------------------------------------------ helpers
def _t(M):
    return get_namespace(M).matrix_transpose(M)


def _sym(M):
    return 0.5 * (M + _t(M))


def _outer(u, v):
    return u[..., :, None] * v[..., None, :]


def _inverse(M):
    """Inverses of a stack of small matrices (closed forms for 1 x 1 and 2 x 2)."""
    xp = get_namespace(M)
    J = M.shape[-1]
    if J == 1:
        return 1.0 / M
    if J == 2:
        a, b, c, d = M[..., 0:1, 0:1], M[..., 0:1, 1:2], M[..., 1:2, 0:1], M[..., 1:2, 1:2]
        det = a * d - b * c
        return xp.concat([xp.concat([d, -b], axis=-1), xp.concat([-c, a], axis=-1)],
                         axis=-2) / det
    return xp.linalg.inv(M)


# ------------------------------------------------------------------------------ elements
def _elements(A, Q, h, R, Y, dA=None, dQ=None, dR=None, dY=None, obs=None):
    """Sarkka & Garcia-Fernandez (2021) lemma 7's elements of each step, and tangents.

    Shapes: A, Q (n, J, J); h (J,); R 0-d; Y (n, r); tangents with a leading axis p
    (dR (p,)); ``obs`` (n,) optional weights 1 (observed) or 0 (no observation: the element
    is the bare transition). Returns ``(Ae, be, Ce, eta, Je)`` ((n, J, J), (n, J, r),
    (n, J, J), (n, J, r), (n, J, J)) followed by their tangents when ``dA`` is given.
    """
    QH = Q @ h                                       # (n, J)
    S = QH @ h + R                                   # (n,)
    invS = 1.0 / S if obs is None else obs / S
    K = QH * invS[:, None]
    hA = h @ A                                       # (n, J): the row H A_k
    Ae = A - _outer(K, hA)
    be = K[:, :, None] * Y[:, None, :]
    QQ = _outer(QH, QH)
    Ce = _sym(Q - QQ * invS[:, None, None])
    YS = Y * invS[:, None]
    eta = hA[:, :, None] * YS[:, None, :]
    hAhA = _outer(hA, hA)
    Je = hAhA * invS[:, None, None]
    prim = (Ae, be, Ce, eta, Je)
    if dA is None:
        return prim
    dQH = dQ @ h                                     # (p, n, J)
    dS = dQH @ h + dR[:, None]                       # (p, n)
    dinvS = -dS * (invS / S)                         # d(1/S) = -dS / S^2
    dK = dQH * invS[:, None] + QH * dinvS[..., None]
    dhA = h @ dA
    dAe = dA - _outer(dK, hA) - _outer(K, dhA)
    dbe = dK[..., :, None] * Y[:, None, :] + K[:, :, None] * dY[..., None, :]
    cross = _outer(dQH, QH)
    dCe = _sym(dQ - (cross + _t(cross)) * invS[:, None, None] - QQ * dinvS[..., None, None])
    dYS = dY * invS[:, None] + Y * dinvS[..., None]
    deta = dhA[..., :, None] * YS[:, None, :] + hA[:, :, None] * dYS[..., None, :]
    crossJ = _outer(dhA, hA)
    dJe = (crossJ + _t(crossJ)) * invS[:, None, None] + hAhA * dinvS[..., None, None]
    return prim + (dAe, dbe, dCe, deta, dJe)


def _combine_values(a, b):
    """Lemma 8: ``a`` the earlier elements, ``b`` the later; tuples of 5 arrays."""
    Ai, bi, Ci, ei, Ji = a
    Aj, bj, Cj, ej, Jj = b
    xp = get_namespace(Ai)
    eye = xp.eye(Ai.shape[-1], dtype=Ai.dtype, device=device_of(Ai))
    Minv = _inverse(eye + Ci @ Jj)
    T = Aj @ Minv
    U = _t(Ai) @ _t(Minv)  # A_i^T (I + J_j C_i)^{-1}
    return (T @ Ai, T @ (bi + Ci @ ej) + bj, _sym(T @ Ci @ _t(Aj) + Cj),
            U @ (ej - Jj @ bi) + ei, _sym(U @ Jj @ Ai + Ji)), (Minv, T, U)


def _combine(a, b):
    return _combine_values(a, b)[0]


def _combine_with_tangents(a, b):
    """:func:`_combine` and its differential, tangents (p, m, ., .) after the 5 values."""
    Ai, bi, Ci = a[:3]
    Aj, ej, Jj = b[0], b[3], b[4]
    dAi, dbi, dCi, dei, dJi = a[5:]
    dAj, dbj, dCj, dej, dJj = b[5:]
    values, (Minv, T, U) = _combine_values(a[:5], b[:5])
    dMinv = -(Minv @ (dCi @ Jj + Ci @ dJj) @ Minv)
    dT = dAj @ Minv + Aj @ dMinv
    dU = _t(dAi) @ _t(Minv) + _t(Ai) @ _t(dMinv)
    v = bi + Ci @ ej
    dv = dbi + dCi @ ej + Ci @ dej
    w = ej - Jj @ bi
    dw = dej - dJj @ bi - Jj @ dbi
    CAt = Ci @ _t(Aj)
    JA = Jj @ Ai
    tangents = (dT @ Ai + T @ dAi,
                dT @ v + T @ dv + dbj,
                _sym(dT @ CAt + T @ (dCi @ _t(Aj) + Ci @ _t(dAj)) + dCj),
                dU @ w + U @ dw + dei,
                _sym(dU @ JA + U @ (dJj @ Ai + Jj @ dAi) + dJi))
    return values + tangents


# ------------------------------------------------------------------------------ the filter
def _shift(x, first):
    """``[first, x_0, ..., x_{n-2}]`` along axis -3."""
    xp = get_namespace(x)
    return xp.concat([first, x[..., :-1, :, :]], axis=-3)


def kalman_filter(A, Q, h, R, Y, *, prior=None, dA=None, dQ=None, dR=None, dY=None,
                  dprior=None):
    """Filtered means and covariances of every step by one associative scan.

    Parameters
    ----------
    A, Q : arrays (n, J, J)
        Transitions into each step and process noises; step 0's are replaced by the prior
        (``A_0 = 0``, ``Q_0`` = the prior covariance).
    h : array (J,)
    R : 0-d array
        Observation noise variance (> 0).
    Y : array (n, r)
        Observations minus the mean, ``r`` right-hand sides.
    prior : tuple (m, P), optional
        Mean (J, r) and covariance (J, J) of ``x_0`` before its observation (default: zero
        and ``Q[0]``).
    dA, dQ, dR, dY, dprior : optional
        Tangents with a leading axis p: (p, n, J, J), (p, n, J, J), (p,), (p, n, r) and
        ((p, J, r), (p, J, J)).

    Returns
    -------
    m : array (n, J, r), P : array (n, J, J)
        Filtered means and covariances; with tangents, ``dm`` (p, n, J, r) and ``dP``
        (p, n, J, J) follow.
    """
    xp = get_namespace(A)
    J = A.shape[-1]
    r = Y.shape[1]
    with_tangents = dA is not None
    zero_first = xp.zeros((1, J, J), dtype=A.dtype, device=device_of(A))
    if prior is None:
        m0 = xp.zeros((J, r), dtype=A.dtype, device=device_of(A))
        P0 = Q[0, :, :]
    else:
        m0, P0 = prior
    A = xp.concat([zero_first, A[1:, :, :]], axis=0)
    Q = xp.concat([P0[None, :, :], Q[1:, :, :]], axis=0)
    # The first element conditions the prior (m0, P0): its "observation" is y_0 - H m0 and
    # m0 is added back to its b.
    Y = xp.concat([Y[0:1, :] - (h @ m0)[None, :], Y[1:, :]], axis=0)
    if not with_tangents:
        elems = list(_elements(A, Q, h, R, Y))
        elems[1] = xp.concat([elems[1][0:1, :, :] + m0[None, :, :], elems[1][1:, :, :]], axis=0)
        out = associative_scan(_combine, tuple(elems))
        return out[1], out[2]
    p = dA.shape[0]
    if dprior is None:
        dm0 = xp.zeros((p, J, r), dtype=A.dtype, device=device_of(A))
        dP0 = dQ[:, 0, :, :]
    else:
        dm0, dP0 = dprior
    zero_t = xp.zeros((p, 1, J, J), dtype=A.dtype, device=device_of(A))
    dA = xp.concat([zero_t, dA[:, 1:, :, :]], axis=1)
    dQ = xp.concat([dP0[:, None, :, :], dQ[:, 1:, :, :]], axis=1)
    dY = xp.concat([dY[:, 0:1, :] - (h @ dm0)[:, None, :], dY[:, 1:, :]], axis=1)
    elems = list(_elements(A, Q, h, R, Y, dA, dQ, dR, dY))
    elems[1] = xp.concat([elems[1][0:1, :, :] + m0[None, :, :], elems[1][1:, :, :]], axis=0)
    elems[6] = xp.concat([elems[6][:, 0:1, :, :] + dm0[:, None, :, :], elems[6][:, 1:, :, :]],
                         axis=1)
    out = associative_scan(_combine_with_tangents, tuple(elems))
    return out[1], out[2], out[6], out[7]


def _chunk_terms(A, Q, h, R, Y, prior, tangents):
    """Filter one chunk and return its log-likelihood terms, the last filtered state and
    (with ``tangents``) their derivatives."""
    xp = get_namespace(A)
    r = Y.shape[1]
    m_prev0, P_prev0 = prior  # filtered state before the chunk (zeros and P = 0 at the start)
    if tangents is None:
        m, P = kalman_filter(A, Q, h, R, Y, prior=_predict_first(A, Q, m_prev0, P_prev0))
    else:
        dA, dQ, dR, dY, (dm_prev0, dP_prev0) = tangents
        prior_first, dprior_first = _predict_first(A, Q, m_prev0, P_prev0, dA, dQ, dm_prev0,
                                                   dP_prev0)
        m, P, dm, dP = kalman_filter(A, Q, h, R, Y, prior=prior_first, dA=dA, dQ=dQ, dR=dR,
                                     dY=dY, dprior=dprior_first)
    m_prev = _shift(m, m_prev0[None, :, :])
    P_prev = _shift(P, P_prev0[None, :, :])
    mp = A @ m_prev
    Pp = _sym(A @ P_prev @ _t(A) + Q)
    v = Y - h @ mp                                       # (n, r)
    S = (Pp @ h) @ h + R                                  # (n,)
    value = (-0.5 * xp.sum(v * v / S[:, None]) - 0.5 * r * xp.sum(xp.log(S))
             - 0.5 * Y.shape[0] * r * _LOG_2PI)
    last = (m[-1, :, :], P[-1, :, :])
    if tangents is None:
        return value, last, None
    dm_prev = _shift(dm, dm_prev0[:, None, :, :])
    dP_prev = _shift(dP, dP_prev0[:, None, :, :])
    dmp = dA @ m_prev + A @ dm_prev
    APdAt = A @ P_prev @ _t(dA)
    dPp = _sym(APdAt + _t(APdAt) + A @ dP_prev @ _t(A) + dQ)
    dv = dY - h @ dmp                                     # (p, n, r)
    dS = (dPp @ h) @ h + dR[:, None]                      # (p, n)
    resid2 = xp.sum(v * v, axis=1) / S                    # (n,)
    dvalue = (-xp.sum(xp.sum(v * dv, axis=2) / S, axis=1)
              - 0.5 * xp.sum(dS * ((r - resid2) / S), axis=1))
    return value, last, (dvalue, (dm[:, -1, :, :], dP[:, -1, :, :]))


def _predict_first(A, Q, m_prev, P_prev, dA=None, dQ=None, dm_prev=None, dP_prev=None):
    """The moments of a chunk's first state before its observation: ``A_0 m``,
    ``A_0 P A_0^T + Q_0`` from the filtered state before the chunk (and tangents)."""
    A0, Q0 = A[0, :, :], Q[0, :, :]
    m = A0 @ m_prev
    P = _sym(A0 @ P_prev @ _t(A0) + Q0)
    if dA is None:
        return m, P
    dA0, dQ0 = dA[:, 0, :, :], dQ[:, 0, :, :]
    dm = dA0 @ m_prev + A0 @ dm_prev
    cross = dA0 @ P_prev @ _t(A0)
    dP = _sym(cross + _t(cross) + A0 @ dP_prev @ _t(A0) + dQ0)
    return (m, P), (dm, dP)


def log_marginal_likelihood(n, h, R, steps, *, dR=None, chunk=None, chunk_terms=None):
    """``log p(Y)`` (summed over the ``r`` columns) and, with tangents, its derivatives.

    Parameters
    ----------
    n : int
        Number of steps.
    h : array (J,)
    R : 0-d array
        Observation noise variance.
    steps : callable
        ``steps(s, e)`` returns ``(A, Q, Y)`` for steps ``s:e`` as :func:`kalman_filter`
        takes them (step 0's ``Q`` the prior covariance ``P_inf``), followed by
        ``(dA, dQ, dY)`` when ``dR`` is given. Called once per chunk, so that the
        transitions and their tangents never exist for more than ``chunk`` steps at once.
    dR : array (p,), optional
        The tangents of ``R``: derivatives are wanted.
    chunk : int, optional
        Steps per scan (default: all at once). The result does not depend on it beyond
        round-off.
    chunk_terms : callable, optional
        The filter of one chunk (default: the associative scan, :func:`_chunk_terms`; the
        blocked scan is :func:`gpnum.models._kalman_blocked.chunk_terms_blocked`).

    Returns
    -------
    value : 0-d array
    dvalue : array (p,) or None
    """
    chunk = n if chunk is None else max(1, int(chunk))
    chunk_terms = _chunk_terms if chunk_terms is None else chunk_terms
    with_tangents = dR is not None
    state = state_t = None
    total = total_d = 0.0
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        parts = steps(s, e)
        A, Q, Y = parts[:3]
        if state is None:
            xp = get_namespace(A)
            J, r = A.shape[-1], Y.shape[1]
            state = (xp.zeros((J, r), dtype=A.dtype, device=device_of(A)),
                     xp.zeros((J, J), dtype=A.dtype, device=device_of(A)))
            if with_tangents:
                p = dR.shape[0]
                state_t = (xp.zeros((p, J, r), dtype=A.dtype, device=device_of(A)),
                           xp.zeros((p, J, J), dtype=A.dtype, device=device_of(A)))
        tangents = (parts[3], parts[4], dR, parts[5], state_t) if with_tangents else None
        value, state, dpart = chunk_terms(A, Q, h, R, Y, state, tangents)
        total = total + value
        if with_tangents:
            total_d = total_d + dpart[0]
            state_t = dpart[1]
    return total, (total_d if with_tangents else None)
