"""The Kalman filter as a parallel (associative) scan.

Model (one scalar observation per step, ``r`` right-hand sides sharing the covariances):

    x_0 ~ N(0, P_inf),  x_k = A_k x_{k-1} + q_k,  q_k ~ N(0, Q_k),  y_k = H x_k + e_k,  e_k ~ N(0, R).

Written as ``A_0 = 0``, ``Q_0 = P_inf`` every step has the same form. Sarkka & Garcia-Fernandez
(2021, "Temporal parallelization of Bayesian smoothers", IEEE TAC 66(1), sec. IV, lemmas 7-8)
give each step an element ``(A, b, C, eta, J)``: ``p(x_k | x_{k-1}, y_k) = N(A x_{k-1} + b, C)``
and ``p(y_k | x_{k-1}) ∝ N_I(x_{k-1}; eta, J)`` (information form), with an associative
combination, so the filtering means and covariances are the prefixes of an associative scan:
O(log n) batched array operations, no Python loop over the steps. The smoother
(:mod:`gpnum.models._kalman_smoother`) filters with it; the log marginal likelihood and its
gradient scan blocks of steps (:mod:`gpnum.models._kalman_blocked`) with the same combination.
"""

from __future__ import annotations

from gpnum.backend import associative_scan as scan
from gpnum.backend import device_of, get_namespace

__all__ = ["associative_scan", "kalman_filter"]


# ------------------------------------------------------------------------------ the scan
def associative_scan(combine, elems):
    """Inclusive prefixes ``e_0 (+) ... (+) e_k`` of an associative ``(+)`` over a sequence of
    small matrices: :func:`gpnum.backend.associative_scan` along axis -3 of every array.

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
    return scan(get_namespace(elems[0]), combine, elems, (-3,) * len(elems))


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
def _elements(A, Q, h, R, Y):
    """Sarkka & Garcia-Fernandez (2021) lemma 7's elements of each step.

    Shapes: A, Q (n, J, J); h (J,); R () or (n,); Y (n, r). Returns ``(Ae, be, Ce, eta, Je)``:
    (n, J, J), (n, J, r), (n, J, J), (n, J, r), (n, J, J).
    """
    QH = Q @ h                                       # (n, J)
    S = QH @ h + R                                   # (n,)
    invS = 1.0 / S
    K = QH * invS[:, None]
    hA = h @ A                                       # (n, J): the row H A_k
    Ae = A - _outer(K, hA)
    be = K[:, :, None] * Y[:, None, :]
    Ce = _sym(Q - _outer(QH, QH) * invS[:, None, None])
    eta = hA[:, :, None] * (Y * invS[:, None])[:, None, :]
    Je = _outer(hA, hA) * invS[:, None, None]
    return Ae, be, Ce, eta, Je


def _combine(a, b):
    """Lemma 8: ``a`` the earlier elements, ``b`` the later; tuples of 5 arrays."""
    Ai, bi, Ci, ei, Ji = a
    Aj, bj, Cj, ej, Jj = b
    xp = get_namespace(Ai)
    eye = xp.eye(Ai.shape[-1], dtype=Ai.dtype, device=device_of(Ai))
    Minv = _inverse(eye + Ci @ Jj)
    T = Aj @ Minv
    U = _t(Ai) @ _t(Minv)  # A_i^T (I + J_j C_i)^{-1}
    return (T @ Ai, T @ (bi + Ci @ ej) + bj, _sym(T @ Ci @ _t(Aj) + Cj),
            U @ (ej - Jj @ bi) + ei, _sym(U @ Jj @ Ai + Ji))


# ------------------------------------------------------------------------------ the filter
def kalman_filter(A, Q, h, R, Y):
    """Filtered means and covariances of every step by one associative scan.

    Parameters
    ----------
    A, Q : arrays (n, J, J)
        Transitions into each step and process noises; step 0's transition is replaced by
        ``A_0 = 0`` (its ``Q`` is the prior covariance).
    h : array (J,)
    R : array () or (n,)
        Observation noise variance (> 0), one for every step or one per step.
    Y : array (n, r)
        Observations minus the mean, ``r`` right-hand sides.

    Returns
    -------
    m : array (n, J, r), P : array (n, J, J)
        Filtered means and covariances.
    """
    xp = get_namespace(A)
    J = A.shape[-1]
    zero_first = xp.zeros((1, J, J), dtype=A.dtype, device=device_of(A))
    A = xp.concat([zero_first, A[1:, :, :]], axis=0)
    out = associative_scan(_combine, _elements(A, Q, h, R, Y))
    return out[1], out[2]
