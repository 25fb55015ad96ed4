"""Smoothed marginals ``H x_k`` at every step as a blocked scan (one series).

The blocked form of :mod:`gpnum.models._kalman_blocked` applied to the smoother: pass 1 and 2
of that module give every block's element and the filtered state before it; a forward run
inside every block (batched over the blocks) gives the filtered moments of every step; the
smoothed state at every block's end fuses its filtered ``N(m, P)`` with the information
``(eta_f, J_f)`` of all later data (the suffix scan of the elements; two-filter smoothing,
Fraser & Potter 1969):

    P_s = (I + P J_f)^{-1} P,   m_s = (I + P J_f)^{-1} (m + P eta_f);

and a backward RTS run inside every block from there (Rauch, Tung & Striebel 1965; Sarkka
2013, sec. 8.2) gives the rest. Python loops run over the ``L`` steps of a block only, as in
the likelihood, instead of the O(log n) levels of full-length arrays of the parallel
smoother (:func:`gpnum.models._kalman_smoother.smoothed_state`), which costs several times
more on a CPU.
"""

from __future__ import annotations

from gpnum.backend import device_of, get_namespace
from gpnum.models._kalman_blocked import (
    _mv,
    _slabs,
    _transitions,
    filtered_blocks,
    later_information,
)
from gpnum.models._kalman_scan import _outer, _sym, _t

__all__ = ["smoothed_marginals"]


def smoothed_marginals(form, dt, y, R, L=None):
    """Smoothed means and variances of ``f_k = H x_k`` at every step, (n,) each.

    Parameters
    ----------
    form : gpnum.kernels.StateSpaceForm
    dt : array (n,)
        Steps between the sorted inputs (float64), the first ignored (the prior).
    y : array (n,)
        Observations minus the mean (float64).
    R : array () or (n,)
        Observation noise variance (> 0), one or one per step.
    L : int, optional
        Steps per block (default :func:`gpnum.models._kalman_blocked.steps_per_block`).

    Returns
    -------
    mean, var : arrays (n,)
    """
    xp = get_namespace(dt)
    n = dt.shape[0]
    dev = device_of(dt)
    lay, h, P_inf, R, elems, _, m, P = filtered_blocks(form, dt, y, R, L)
    eta_f, J_f = later_information(elems, xp)
    # forward inside every block: the filtered moments after every step
    slabs = _slabs(lay)
    cache = {}
    A_all = [_transitions(form, lay, l0, l1, xp, cache=cache) for l0, l1 in slabs]
    ms, Ps = [], []
    for (l0, l1), As in zip(slabs, A_all, strict=True):
        for k in range(l0, l1):
            A = As[k - l0, ...]
            mp = _mv(A, m)
            Pp = A @ (P - P_inf) @ _t(A) + P_inf
            g = Pp @ h
            S = g @ h + (R if lay.R is None else lay.R[k, :])
            kg = (lay.w[k, :] / S)[:, None] * g
            m = mp + kg * (lay.y[k, :] - mp @ h)[:, None]
            P = _sym(Pp - _outer(kg, g))
            ms.append(m)
            Ps.append(P)
    # the smoothed state at every block's end: two-filter fusion with the later data
    eye = xp.eye(P.shape[-1], dtype=xp.float64, device=dev)
    sol = xp.linalg.solve(eye + P @ J_f, xp.concat([(m + _mv(P, eta_f))[..., None], P],
                                                   axis=-1))
    m_s, P_s = sol[..., 0], _sym(sol[..., 1:])
    mean, var = [None] * lay.L, [None] * lay.L
    mean[-1], var[-1] = m_s @ h, (P_s @ h) @ h
    # backward RTS inside every block, from its end
    for i in range(len(slabs) - 1, -1, -1):
        l0, l1 = slabs[i]
        for k in range(min(l1, lay.L - 1) - 1, l0 - 1, -1):
            # the transition into step k + 1: this slab's, or the next slab's first
            A = A_all[i][k + 1 - l0, ...] if k + 1 < l1 else A_all[i + 1][0, ...]
            mk, Pk = ms[k], Ps[k]
            AD = A @ (Pk - P_inf)
            Pp = _sym(AD @ _t(A) + P_inf)
            G = _t(xp.linalg.solve(Pp, A @ Pk))          # P_k A^T Pp^{-1}
            m_s = mk + _mv(G, m_s - _mv(A, mk))
            P_s = _sym(Pk + G @ (P_s - Pp) @ _t(G))
            mean[k], var[k] = m_s @ h, (P_s @ h) @ h
    mean = xp.reshape(_t(xp.stack(mean, axis=0)), (-1,))[:n]
    var = xp.reshape(_t(xp.stack(var, axis=0)), (-1,))[:n]
    return mean, var
