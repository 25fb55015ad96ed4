"""The RTS smoother as a parallel scan, predictions between the data, and prior draws.

Smoother (Sarkka & Garcia-Fernandez 2021, sec. V, lemmas 9-10): given the filtered moments
``(m_k, P_k)``, step ``k``'s element is ``x_k = E_k x_{k+1} + g_k + N(0, L_k)`` with

    E_k = P_k A_{k+1}^T (A_{k+1} P_k A_{k+1}^T + Q_{k+1})^{-1},  g_k = m_k - E_k A_{k+1} m_k,
    L_k = P_k - E_k A_{k+1} P_k,

(the last step ``E = 0``, ``g = m``, ``L = P``), and the smoothed moments are the suffixes of
the associative ``(E_i, g_i, L_i) (+) (E_j, g_j, L_j) = (E_i E_j, E_i g_j + g_i,
E_i L_j E_i^T + L_i)``: one scan over the reversed sequence.

A new input ``t*`` between the data (sorted inputs ``t_k <= t* < t_{k+1}``) is predicted from
the filtered ``x_k`` and smoothed by one RTS step from the smoothed ``x_{k+1}`` (the new point
carries no observation, so the other data enter only through these two; Sarkka 2013, sec. 8.2
and 10.2): vectorised over all new inputs. Before the data the prediction starts from the
prior ``N(0, P_inf)``; after them there is no smoothing step.
"""

from __future__ import annotations

from gpnum.backend import device_of, get_namespace
from gpnum.models._kalman_scan import associative_scan, kalman_filter

__all__ = ["predict_at", "prior_draw", "smoothed_state"]


def _t(xp, M):
    return xp.matrix_transpose(M)


def _sym(xp, M):
    return 0.5 * (M + xp.matrix_transpose(M))


def _transitions(form, dt, xp, reset=None):
    """``A(dt)``, ``Q(dt)`` in float64 for steps ``dt`` (n,); ``A = 0``, ``Q = P_inf`` at the
    steps ``reset`` (n,) bool that restart from the prior."""
    A, _ = form.transition(dt)
    if reset is not None:
        A = xp.where(reset[:, None, None], xp.zeros_like(A), A)
    Q, _ = form.process_noise(A)
    return xp.astype(A, xp.float64, copy=False), xp.astype(Q, xp.float64, copy=False)


def _steps(xp, t, reset=None):
    zero = xp.zeros((1,), dtype=t.dtype, device=device_of(t))
    dt = xp.concat([zero, t[1:] - t[:-1]]) if t.shape[0] > 1 else zero
    # a restart's step goes back in time to another series: no step at all
    return dt if reset is None else xp.where(reset, xp.zeros_like(dt), dt)


def _combine_general(a, b):
    # a: later in time (earlier in the reversed sequence), b: earlier in time
    Ea, ga, La = a
    Eb, gb, Lb = b
    xp = get_namespace(Ea)
    ELE = Eb @ La @ xp.matrix_transpose(Eb)
    return Eb @ Ea, Eb @ ga + gb, _sym(xp, ELE) + Lb


def smoothed_state(form, t, Y, R, xp, reset=None):
    """Filtered and smoothed moments at sorted inputs ``t`` (n,) for data ``Y`` (n, r).

    ``R``: the observation noise variance (> 0), shape () or (n,) (one per point: the
    Gaussian sites of :class:`gpnum.models.MarkovVGP`).

    ``reset`` (n,) bool, optional: the first step of each of several independent series
    concatenated in ``t`` (each sorted); there the recursion restarts from the prior, so
    that nothing passes between the series (neither forwards nor in the smoother, whose
    ``E`` vanishes before a restart).

    Returns a dict with ``t``, ``m``, ``P`` (filtered) and ``ms``, ``Ps`` (smoothed), shapes
    (n, J, r) and (n, J, J), and ``P_inf``, ``h`` in float64.
    """
    high = xp.float64
    P_inf = xp.astype(form.P_inf, high, copy=False)
    h = xp.astype(form.H, high, copy=False)
    A, Q = _transitions(form, _steps(xp, t, reset), xp, reset)
    Q = xp.concat([P_inf[None, :, :], Q[1:, :, :]], axis=0)
    m, P = kalman_filter(A, Q, h, R, Y)
    n, J = A.shape[0], A.shape[-1]
    if n > 1:
        A1, Q1 = A[1:, :, :], Q[1:, :, :]
        Pk, mk = P[:-1, :, :], m[:-1, :, :]
        APk = A1 @ Pk
        Pp = _sym(xp, APk @ _t(xp, A1) + Q1)
        E = _t(xp, xp.linalg.solve(Pp, APk))              # P_k A^T Pp^{-1} (Pp symmetric)
        g = mk - E @ (A1 @ mk)
        L = _sym(xp, Pk - E @ APk)
        zero = xp.zeros((1, J, J), dtype=high, device=device_of(A))
        E = xp.concat([E, zero], axis=0)
        g = xp.concat([g, m[-1:, :, :]], axis=0)
        L = xp.concat([L, P[-1:, :, :]], axis=0)
    else:
        E, g, L = xp.zeros_like(P), m, P
    rev = associative_scan(_combine_general,
                           tuple(xp.flip(a, axis=-3) for a in (E, g, L)))
    ms, Ps = xp.flip(rev[1], axis=-3), xp.flip(rev[2], axis=-3)
    return {"t": t, "m": m, "P": P, "ms": ms, "Ps": Ps, "P_inf": P_inf, "h": h}


def predict_at(form, state, tnew, xp, at=None):
    """Smoothed mean ``H x(t*)`` (m, r) and variance (m,) at new inputs ``tnew`` (m,), any
    order, from :func:`smoothed_state`'s ``state``.

    ``at``, optional: ``(idx, before, has_next)`` (m,) each, the data point before every new
    input, whether there is none, and whether ``idx + 1`` follows it in the same series
    (:func:`gpnum.models._state_space_series.locate`; default: one series, by ``t``).
    """
    t = state["t"]
    n = t.shape[0]
    high = xp.float64
    if at is None:
        idx = xp.searchsorted(t, tnew, side="right")  # number of data at or before t*
        idx = xp.astype(idx, xp.int64) - 1
        before = idx < 0
        has_next = idx < n - 1
    else:
        idx, before, has_next = at
    k = xp.clip(idx, 0, n - 1)
    kn = xp.clip(idx + 1, 0, n - 1)
    t_k, t_kn = xp.take(t, k), xp.take(t, kn)
    zero = xp.zeros_like(tnew)
    # prediction from the filtered x_k (from the prior N(0, P_inf) before the data)
    A1, Q1 = _transitions(form, xp.where(before, zero, tnew - t_k), xp)
    m_k, P_k = xp.take(state["m"], k, axis=0), xp.take(state["P"], k, axis=0)
    mp = A1 @ m_k
    Pp = _sym(xp, A1 @ P_k @ _t(xp, A1) + Q1)
    P_inf = state["P_inf"]
    b3 = before[:, None, None]
    mp = xp.where(b3, xp.zeros_like(mp), mp)
    Pp = xp.where(b3, xp.broadcast_to(P_inf, Pp.shape), Pp)
    # one RTS step from the smoothed x_{k+1}
    A2, Q2 = _transitions(form, xp.where(has_next, t_kn - tnew, zero), xp)
    Pn = _sym(xp, A2 @ Pp @ _t(xp, A2) + Q2)
    n3 = has_next[:, None, None]
    eye = xp.eye(Pn.shape[-1], dtype=high, device=device_of(Pn))
    Pn = xp.where(n3, Pn, xp.broadcast_to(eye, Pn.shape))  # unused after the data
    G = _t(xp, xp.linalg.solve(Pn, A2 @ Pp))
    ms_n, Ps_n = xp.take(state["ms"], kn, axis=0), xp.take(state["Ps"], kn, axis=0)
    ms = mp + G @ (ms_n - A2 @ mp)
    Ps = _sym(xp, Pp + G @ (Ps_n - Pn) @ _t(xp, G))
    ms = xp.where(n3, ms, mp)
    Ps = xp.where(n3, Ps, Pp)
    h = state["h"]
    return h @ ms, (Ps @ h) @ h


def _combine_affine(a, b):
    Aa, wa = a
    Ab, wb = b
    return Ab @ Aa, Ab @ wa + wb


def prior_draw(form, times, num_samples, rng, xp, arrangement=None):
    """``num_samples`` joint prior draws of f at ``times`` (N,), any order: (N, num_samples).

    The state recursion ``x_k = A_k x_{k-1} + Q_k^{1/2} z_k`` (``x_0 = P_inf^{1/2} z_0``) over
    the sorted times as an associative scan of affine maps; ``Q^{1/2}`` from an eigenvalue
    decomposition (the process noise may be singular: cosines, constants, ties).
    ``arrangement``, optional: ``(order, reset)`` for several independent series (the
    permutation sorting by series and time, and each series' first step, as
    :func:`smoothed_state`'s ``reset``); default one series sorted by time.
    """
    high = xp.float64
    order, reset = (xp.argsort(times, stable=True), None) if arrangement is None \
        else arrangement
    ts = xp.take(times, order)
    P_inf = xp.astype(form.P_inf, high, copy=False)
    A, Q = _transitions(form, _steps(xp, ts, reset), xp, reset)
    N, J = A.shape[0], A.shape[-1]
    Q = xp.concat([P_inf[None, :, :], Q[1:, :, :]], axis=0)
    A = xp.concat([xp.zeros((1, J, J), dtype=high, device=device_of(A)), A[1:, :, :]], axis=0)
    w, V = xp.linalg.eigh(Q)
    root = V * xp.sqrt(xp.clip(w, 0.0, None))[:, None, :]
    z = rng.normal((N, J, num_samples), dtype=high)
    x = associative_scan(_combine_affine, (A, root @ z))[1]
    f_sorted = xp.astype(form.H, high, copy=False) @ x          # (N, k)
    inverse = xp.argsort(order)
    return xp.take(f_sorted, inverse, axis=0)
