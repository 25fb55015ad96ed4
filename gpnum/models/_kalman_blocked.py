"""The Kalman filter's log marginal likelihood and its gradient as a blocked scan.

Model (scalar observations): ``x_0 ~ N(0, P_inf)``, ``x_k = A_k x_{k-1} + q_k``,
``q_k ~ N(0, P_inf - A_k P_inf A_k^T)``, ``y_k = h^T x_k + e_k``, ``e_k ~ N(0, R)``. The
predicted covariance is written ``A (P - P_inf) A^T + P_inf`` so that neither the process
noise nor its derivative is ever formed (and the prior is the step with ``A_0 = 0``).

The ``n`` steps are cut into ``B`` blocks of ``L`` steps (``B L >= n``; padding steps are
identities without an observation). Python loops run over the ``L`` steps of a block (about
``sqrt(n)``), every array operation batched over the ``B`` blocks (the blocked form of a
parallel scan; Blelloch 1990, sec. 1.4); the scans over the ``B`` block summaries are the
associative odd/even recursion of :mod:`gpnum.models._kalman_scan`.

**Value.** Pass 1 filters every block conditioned on the state ``x`` just before it:
``x_k | x, y = N(Phi_k x + b_k, C_k)``; each observation then has the scalar innovation
``y_k - h^T A_k b_{k-1}`` with variance ``S_k`` (independent of ``x``) and loading
``u_k = (h^T A_k Phi_{k-1})^T``, so

    log p(y_block | x) = c - 1/2 x^T Jm x + eta^T x,
    c = -1/2 sum_k (r_k^2 / S_k + log S_k + log 2 pi),  Jm = sum_k u_k u_k^T / S_k,
    eta = sum_k u_k r_k / S_k,

and ``(Phi, b, C, eta, Jm)`` at the block's end is its Sarkka & Garcia-Fernandez (2021,
lemma 7-8) element. Pass 2 scans the elements: the filtered state ``N(mu, Sigma)`` before
every block. The block's share of the log marginal likelihood is the Gaussian integral

    c + log E_{x ~ N(mu, Sigma)} exp(-1/2 x^T Jm x + eta^T x)
      = c - 1/2 log|I + Sigma Jm| + 1/2 g^T (I + Sigma Jm)^{-1} Sigma g + eta^T mu
        - 1/2 mu^T Jm mu,  g = eta - Jm mu,

so the value needs no second pass over the steps. Every update has a scalar innovation:
gains are vectors and divisions, not solves.

**Gradient (reverse mode, by hand).** The log marginal likelihood is a chain of ordinary
filter steps; its adjoint is the filter's recursion run backwards (Giles 2008, "Collected
matrix derivative results for forward and reverse mode algorithmic differentiation").
Blocks decouple once the adjoint of the filtered state at every block's end is known, and
that adjoint is closed-form: with ``(eta_f, J_f)`` the information about the state from all
later data (a suffix scan of the elements), the later data contribute
``f(m, P) = log E_{x ~ N(m, P)} exp(-1/2 x^T J_f x + eta_f^T x)``, whose gradient is

    df/dm = nu,  df/dP = 1/2 (nu nu^T - (I + J_f P)^{-1} J_f),
    nu = (I + J_f P)^{-1} (eta_f - J_f m)

(the derivatives of a Gaussian expectation w.r.t. its mean and covariance: Bonnet's and
Price's theorems, as used by Opper & Archambeau 2009, "The variational Gaussian approximation
revisited"). Pass 3 runs the filter in every block from its filtered start (batched over
blocks), and the backward pass from the end adjoints gives the adjoints of every
``A_k``, ``P_inf``, ``R`` and ``y_k``, contracted with ``dA/dtheta`` by the kernel's form
(:meth:`gpnum.kernels.StateSpaceForm.transition_vjp`). The cost is about three times the
value's, independent of the number of hyper-parameters.
"""

from __future__ import annotations

import math

import array_api_compat

from gpnum.backend import device_of, get_namespace
from gpnum.errors import ShapeError, describe_shape
from gpnum.models._kalman_scan import _combine, _outer, _sym, _t, associative_scan

__all__ = ["filtered_blocks", "later_information", "lml_blocked", "steps_per_block"]

_LOG_2PI = math.log(2.0 * math.pi)
#: Steps (times blocks) whose transitions are formed at once: memory O(SLAB J^2), small
#: enough that a slab's transitions stay in a core's cache while its steps use them.
SLAB = 1 << 13
#: Steps whose filtered states pass 3 keeps at once (the gradient's memory).
GROUP = 1 << 20
#: Most blocks a step's arrays hold (see :func:`steps_per_block`).
MAX_BLOCKS = 512


def steps_per_block(n):
    """The block length ``L`` for ``n`` steps: about ``sqrt(n / 2)`` (the Python steps of
    pass 1 and the scans over the ``B`` block elements cost alike), and at least ``n /
    MAX_BLOCKS`` so that one step's arrays (B, J, 2J + 1) stay in a core's cache."""
    return max(1, min(n, max(int(round(math.sqrt(n / 2.0))), -(-n // MAX_BLOCKS))))


def _mv(M, v):
    return (M @ v[..., None])[..., 0]


class _Layout:
    """Steps in block-major order ``b L + k`` stored step-major: row ``k``, column ``b``."""

    def __init__(self, xp, dt, y, L, reset=None, R=None):
        n = dt.shape[0]
        self.xp, self.n, self.L = xp, n, L
        self.B = -(-n // L)
        pad = self.B * L - n
        dev = device_of(dt)
        self.dev = dev
        zeros = xp.zeros((pad,), dtype=dt.dtype, device=dev)
        ones = xp.ones((n,), dtype=dt.dtype, device=dev)
        # (L, B): column b holds block b's steps
        self.dt = _t(xp.reshape(xp.concat([dt, zeros]), (self.B, L)))
        self.y = _t(xp.reshape(xp.concat([y, zeros]), (self.B, L)))
        self.w = _t(xp.reshape(xp.concat([ones, zeros]), (self.B, L)))
        # per-step noise (n,): padded with ones (padding steps carry no observation, w = 0)
        self.R = None if R is None or R.ndim == 0 else _t(xp.reshape(
            xp.concat([R, xp.ones((pad,), dtype=dt.dtype, device=dev)]), (self.B, L)))
        # the first step of the whole series is the prior: A_0 = 0
        first = xp.concat([xp.zeros((1,), dtype=dt.dtype, device=dev),
                           xp.ones((self.B - 1,), dtype=dt.dtype, device=dev)])
        self.keep0 = first[:, None, None]
        self.first_is_prior = True
        # several series: every series' first step restarts from the prior too (A = 0)
        self.keep = None if reset is None else _t(xp.reshape(xp.concat(
            [xp.astype(~reset, dt.dtype), xp.ones((pad,), dtype=dt.dtype, device=dev)]),
            (self.B, L)))


def _transition_maps(form, dt, maps, first_zero, xp, cache=None, out=None):
    """``[M(A(dt_k)) for every step k]`` for linear maps ``M`` of a (J, J) matrix (``maps``:
    callables on stacks (..., J, J)), float64, each (n,) + the map's shape; ``first_zero``:
    ``A = 0`` for the first step.

    With the form's expansion ``A = sum_k c_k E_k`` (:meth:`StateSpaceForm.transition_terms`)
    a map costs one product ``c @ M(E)`` (``M(E)`` kept in the dict ``cache`` for the next
    call, ``E`` being the same); without, ``M`` runs on the formed transitions. ``out``
    (NumPy, one map): a flat float64 buffer that the product is written into, when it is
    long enough (no fresh array per call).
    """
    n = dt.shape[0]
    terms = form.transition_terms(dt)
    if terms is None:
        A, _ = form.transition(dt)
        A = xp.astype(A, xp.float64, copy=False)
        if first_zero:
            A = xp.concat([A[:1, ...] * 0.0, A[1:, ...]], axis=0)
        return [M(A) for M in maps]
    c = xp.astype(terms[0], xp.float64, copy=False)
    if first_zero:
        c = xp.concat([c[:1, :] * 0.0, c[1:, :]], axis=0)
    cache = {} if cache is None else cache
    if "maps" not in cache:
        E = xp.astype(terms[1], xp.float64, copy=False)
        ME = [M(E) for M in maps]
        cache["maps"] = [(xp.reshape(m, (E.shape[0], -1)), tuple(m.shape[1:])) for m in ME]
    if out is not None:
        (m, shape), = cache["maps"]
        xp.matmul(c, m, out=out[:n, :])
        return [xp.reshape(out[:n, :], (n,) + shape)]
    return [xp.reshape(c @ m, (n,) + shape) for m, shape in cache["maps"]]


def _transitions(form, lay, l0, l1, xp, maps=None, cache=None, out=None):
    """``A`` (l1 - l0, B, J, J) in float64 for steps ``l0:l1`` of every block (or the
    linear ``maps`` of it, :func:`_transition_maps`, with its ``out``), ``A_0 = 0`` for the
    series' first."""
    dt = xp.reshape(lay.dt[l0:l1, :], (-1,))
    # row 0 of the slab is block 0's first step when the slab starts the blocks
    first_zero = l0 == 0 and lay.first_is_prior
    res = _transition_maps(form, dt, [lambda A: A] if maps is None else maps, first_zero, xp,
                           cache, out)
    res = [xp.reshape(M, (l1 - l0, lay.B) + tuple(M.shape[1:])) for M in res]
    if lay.keep is not None:  # every map is linear: M(0) = 0 at the restarts
        if out is not None:
            res[0] *= lay.keep[l0:l1, :, None, None]
        else:
            res = [M * lay.keep[l0:l1, :, None, None] for M in res]
    return res[0] if maps is None else res


def _slabs(lay):
    size = max(1, SLAB // lay.B)
    return [(l0, min(lay.L, l0 + size)) for l0 in range(0, lay.L, size)]


# ------------------------------------------------------------------------ pass 1
def _block_elements(form, lay, h, P_inf, R, xp):
    """Every block's element ``(Phi, b, C, eta, Jm)`` and constant ``c`` (pass 1).

    The covariance rides as ``D = C - P_inf`` and beside ``Phi`` and ``b`` in one array
    ``W = [D | Phi | b]`` (B, J, 2J + 1), so that a step is one product ``[A; h^T A] W``,
    one ``(A D) A^T`` of the first J columns (its last row ``h^T A D A^T``: the innovation's
    row comes with the products) and one rank-one update; the sums ``Jm``,
    ``eta`` and ``sum r^2 / S`` come from one product of the stored
    ``z_k = [u_k, -r_k] = [h^T A_k Phi_{k-1}, h^T A_k b_{k-1} - y_k]`` after each slab of steps.
    """
    if array_api_compat.is_numpy_namespace(xp):
        return _block_elements_numpy(form, lay, h, P_inf, R)
    B, J = lay.B, P_inf.shape[-1]
    dev = lay.dev
    W = xp.broadcast_to(xp.concat([-P_inf, xp.eye(J, dtype=xp.float64, device=dev),
                                   xp.zeros((J, 1), dtype=xp.float64, device=dev)], axis=1),
                        (B, J, 2 * J + 1))
    hP = h @ P_inf
    Z = xp.zeros((B, J + 1, J + 1), dtype=xp.float64, device=dev)
    logS = xp.zeros((B,), dtype=xp.float64, device=dev)

    # what h^T [D- | A Phi | A b] lacks: h^T P_inf, and -y_k in the last column
    off = xp.concat([xp.broadcast_to(hP, (B, J)), xp.zeros((B, J + 1), dtype=xp.float64,
                                                           device=dev)], axis=1)

    def with_h(A):  # [A; h^T A]: the product with it also gives the innovation's row
        return xp.concat([A, (h @ A)[..., None, :]], axis=-2)

    cache = {}
    for l0, l1 in _slabs(lay):
        # [A; h^T A] and A^T of the slab, both stored contiguously
        Ah, At = _transitions(form, lay, l0, l1, xp, maps=[with_h, _t], cache=cache)
        zs, Ss = [], []
        for k in range(l0, l1):
            # U is a new array of this step: updated in place (no copy)
            U = Ah[k - l0, ...] @ W                  # [A D | A Phi | A b] and h^T of it
            U[:, :, :J] = U[:, :, :J] @ At[k - l0, ...]          # [D- | A Phi | A b]
            off[:, 2 * J] = -lay.y[k, :]
            gz = U[:, J, :] + off                                # [g | z]
            S = gz[:, :J] @ h + (R if lay.R is None else lay.R[k, :])
            kg = (lay.w[k, :] / S)[:, None] * gz[:, :J]
            W = U[:, :J, :] - kg[:, :, None] * gz[:, None, :]
            zs.append(gz[:, J:])
            Ss.append(S)
        # Z += sum_k (w_k / S_k) z_k z_k^T per block, over the slab's steps
        z = xp.stack(zs, axis=0)                                  # (l1 - l0, B, J + 1)
        S = xp.stack(Ss, axis=0)                                  # (l1 - l0, B)
        w = lay.w[l0:l1, :]
        zw = z * (w / S)[:, :, None]
        Z = Z + xp.permute_dims(z, (1, 2, 0)) @ xp.permute_dims(zw, (1, 0, 2))
        logS = logS + xp.sum(w * xp.log(S), axis=0)
    c = -0.5 * (Z[:, J, J] + logS)
    Phi, b = W[:, :, J:2 * J], W[:, :, 2 * J:]
    return (Phi, b, _sym(W[:, :, :J] + P_inf), -Z[:, :J, J:], _sym(Z[:, :J, :J])), c


def _block_elements_numpy(form, lay, h, P_inf, R):
    """:func:`_block_elements` on NumPy: the same recursion in preallocated buffers.

    NumPy pays about 45 ns for each small matrix of a stacked product and its page faults for
    each fresh array of a step's size (over 128 KiB), so a step is three stacked products
    written with ``out=`` into two buffers. The state ``W = [slot 0 | slot 1 | Phi | -b]``
    (B, J + 1, 3J + 1) keeps the covariance ``D`` in one slot and, in its last row, the
    constants the innovation's row needs (``h^T P_inf`` under both slots, ``y_k`` under
    ``-b``). A step: ``D A^T`` into the other slot; ``U = [A 0; h^T A 1] W``, whose slot is
    ``A D A^T`` and whose last row is ``[g | u, r]`` (``r_k`` the innovation); then the
    update as a product, ``W = [I | -k] U``. The stale slot is carried along unused.
    """
    import numpy as np

    B, J = lay.B, P_inf.shape[-1]
    h = np.asarray(h, dtype=np.float64)
    hP = h @ P_inf
    W = np.zeros((B, J + 1, 3 * J + 1))
    W[:, :J, :J] = -P_inf                      # D = C - P_inf with C = 0 (x given)
    W[:, :J, 2 * J:3 * J] = np.eye(J)          # Phi = I
    W[:, J, :2 * J] = np.concatenate([hP, hP])
    U = np.empty((B, J + 1, 3 * J + 1))
    M = np.zeros((B, J, J + 1))
    M[:, :, :J] = np.eye(J)
    Z = np.zeros((B, J + 1, J + 1))
    logS = np.zeros((B,))
    p = 0  # the slot holding D (0 or 1)
    cache = {}
    slabs = _slabs(lay)
    rows = slabs[0][1] - slabs[0][0]
    # reused by every slab: the transitions [A^T A^T h; 0 1] (their constant last row written
    # once), z_k and S_k, (w_k / S_k) z_k
    ext = np.empty((rows * B, J + 1, J + 1))
    ext[:, J, :J], ext[:, J, J] = 0.0, 1.0
    ext_top = np.reshape(ext, (rows * B, (J + 1) ** 2))[:, :J * (J + 1)]
    z_buf, S_buf, zw_buf = (np.empty((rows, B, J + 1)), np.empty((rows, B)),
                            np.empty((rows, B, J + 1)))
    # fixed views of the buffers (a view costs as much as a small operation)
    D_slot = (W[:, :J, :J], W[:, :J, J:2 * J])
    g_slot = (U[:, J, :J], U[:, J, J:2 * J])
    W_top, W_y, U_z, M_k = W[:, :J, :], W[:, J, 3 * J], U[:, J, 2 * J:], M[:, :, J]
    R_rows = lay.R  # None: one noise variance R for every step
    for l0, l1 in slabs:
        # [A^T A^T h; 0 1] (l1 - l0, B, J + 1, J + 1): its transpose is the second product's
        # left factor, its block A^T (unit column stride) the first's right factor (a
        # transposed view there would take NumPy's slower path)
        top = _transitions(form, lay, l0, l1, np, maps=[_with_h_t(h)], cache=cache,
                           out=ext_top)[0]
        AT = np.reshape(ext[:(l1 - l0) * B], (l1 - l0, B, J + 1, J + 1))
        if not np.shares_memory(top, ext):  # a form without the expansion: formed anew
            AT[:, :, :J, :] = top
        A_ext, A_t = np.swapaxes(AT, 2, 3), AT[:, :, :J, :J]
        z, S, zw = z_buf[:l1 - l0], S_buf[:l1 - l0], zw_buf[:l1 - l0]
        neg_w = -lay.w[l0:l1, :]
        for i in range(l1 - l0):
            k, q = l0 + i, 1 - p
            g, Sk = g_slot[q], S[i]
            np.matmul(D_slot[p], A_t[i], out=D_slot[q])                # D A^T
            W_y[...] = lay.y[k]
            np.matmul(A_ext[i], W, out=U)               # [A 0; h^T A 1] W: A D A^T, [g | z]
            np.matmul(g, h, out=Sk)
            Sk += R if R_rows is None else R_rows[k]
            np.multiply(g, (neg_w[i] / Sk)[:, None], out=M_k)
            np.matmul(M, U, out=W_top)                                 # W = U - k [g | z]
            z[i] = U_z
            p = q
        w = lay.w[l0:l1, :]
        np.multiply(z, (w / S)[:, :, None], out=zw)
        Z += np.transpose(z, (1, 2, 0)) @ np.transpose(zw, (1, 0, 2))
        logS += np.sum(w * np.log(S), axis=0)
    c = -0.5 * (Z[:, J, J] + logS)
    # W's last column holds -b, z_k's last entry r_k (the sign of y_k in W's last row)
    Phi, b = W[:, :J, 2 * J:3 * J], -W[:, :J, 3 * J:]
    return (Phi, b, _sym(D_slot[p] + P_inf), Z[:, :J, J:], _sym(Z[:, :J, :J])), c


def _with_h_t(h):
    """The linear map ``A -> [A^T | A^T h]`` (..., J, J + 1) of a stack of transitions."""
    def with_h_t(A):
        xp = get_namespace(A)
        return xp.concat([_t(A), (h @ A)[..., :, None]], axis=-1)
    return with_h_t


def _starts(elems, xp):
    """Filtered mean (B, J) and covariance (B, J, J) before every block (pass 2)."""
    pre = associative_scan(_combine, elems)
    J = elems[0].shape[-1]
    dev = device_of(elems[0])
    mu = xp.concat([xp.zeros((1, J), dtype=xp.float64, device=dev), pre[1][:-1, :, 0]], axis=0)
    Sig = xp.concat([xp.zeros((1, J, J), dtype=xp.float64, device=dev), pre[2][:-1, ...]],
                    axis=0)
    return mu, Sig


def _gaussian_log_integral(mu, Sig, eta, Jm, xp):
    """``log E_{x ~ N(mu, Sig)} exp(-1/2 x^T Jm x + eta^T x)`` for stacks (B, ...)."""
    J = Jm.shape[-1]
    eye = xp.eye(J, dtype=xp.float64, device=device_of(Jm))
    M = eye + Sig @ Jm
    g = eta - _mv(Jm, mu)
    q = xp.linalg.solve(M, (Sig @ g[..., None]))[..., 0]
    _, logdet = xp.linalg.slogdet(M)
    return (-0.5 * logdet + 0.5 * xp.sum(g * q, axis=-1) + xp.sum(eta * mu, axis=-1)
            - 0.5 * xp.sum(mu * _mv(Jm, mu), axis=-1))


# ------------------------------------------------------------------------ gradient
def later_information(elems, xp):
    """``(eta_f (B, J), J_f (B, J, J))``: the information about the state at every block's
    end from all later blocks (a suffix scan of the elements; zero after the last block)."""
    zero_eta = xp.zeros_like(elems[3][:1, :, 0])
    zero_J = xp.zeros_like(elems[4][:1, ...])
    if elems[0].shape[0] == 1:
        return zero_eta, zero_J
    later = tuple(xp.flip(e[1:, ...], axis=0) for e in elems)
    suf = associative_scan(lambda a, b: _combine(b, a), later)
    eta_f = xp.concat([xp.flip(suf[3][..., 0], axis=0), zero_eta], axis=0)
    J_f = xp.concat([xp.flip(suf[4], axis=0), zero_J], axis=0)
    return eta_f, J_f


def _end_adjoints(elems, mu, Sig, xp):
    """Adjoints ``(m_bar, P_bar)`` of the filtered state at every block's end: the gradient
    of the later data's log-likelihood ``f(m, P)`` (module notes); zero after the last block,
    where no data follow (``J_f = 0``, ``eta_f = 0``)."""
    J = mu.shape[-1]
    dev = device_of(mu)
    eta_f, J_f = later_information(elems, xp)
    # the filtered state at every block's end: before the next block (any value after the last)
    m = xp.concat([mu[1:, :], xp.zeros((1, J), dtype=xp.float64, device=dev)], axis=0)
    P = xp.concat([Sig[1:, ...], xp.zeros((1, J, J), dtype=xp.float64, device=dev)], axis=0)
    eye = xp.eye(J, dtype=xp.float64, device=dev)
    W = xp.linalg.solve(eye + J_f @ P, xp.concat([(eta_f - _mv(J_f, m))[..., None], J_f],
                                                  axis=-1))
    nu, JM = W[..., 0], W[..., 1:]
    return nu, 0.5 * (_outer(nu, nu) - _sym(JM))


def _filter_and_adjoint(form, lay, h, P_inf, R, mu, Sig, m_end, P_end, cols, xp):
    """Pass 3 on blocks ``cols`` (a slice): the filter from ``(mu, Sig)``, then its adjoint
    from ``(m_end, P_end)``. Returns the gradient w.r.t. the kernel's parameters (through
    ``A``), ``P_inf`` (J, J), ``R`` and the sum of the observations' adjoints."""
    sub = _Sub(lay, cols)
    cache = {}
    A_all = [_transitions(form, sub, l0, l1, xp, cache=cache) for l0, l1 in _slabs(sub)]
    slabs = _slabs(sub)
    m, P = mu, Sig
    ms, Ps = [], []
    for (l0, l1), As in zip(slabs, A_all, strict=True):
        for k in range(l0, l1):
            A = As[k - l0, ...]
            ms.append(m)
            Ps.append(P)
            mp = _mv(A, m)
            Pp = A @ (P - P_inf) @ _t(A) + P_inf
            g = Pp @ h
            S = g @ h + (R if sub.R is None else sub.R[k, :])
            kap = sub.w[k, :] / S
            v = sub.y[k, :] - mp @ h
            kg = kap[:, None] * g
            m = mp + kg * v[:, None]
            P = _sym(Pp - _outer(kg, g))
    m_bar, P_bar = m_end, P_end
    Pinf_bar = xp.zeros_like(P_inf)
    R_bar = 0.0
    R_bars = []  # per step (B,), when every step has its own noise
    y_bar = 0.0
    grad = 0.0
    for (l0, l1), As in zip(reversed(slabs), reversed(A_all), strict=True):
        A_bar = []
        for k in range(l1 - 1, l0 - 1, -1):
            A = As[k - l0, ...]
            m, P = ms[k], Ps[k]
            w, y = sub.w[k, :], sub.y[k, :]
            mp = _mv(A, m)
            AD = A @ (P - P_inf)
            Pp = AD @ _t(A) + P_inf
            g = Pp @ h
            S = g @ h + (R if sub.R is None else sub.R[k, :])
            kap = w / S
            v = y - mp @ h
            Pg = _mv(P_bar, g)
            gm = xp.sum(g * m_bar, axis=-1)
            v_bar = -kap * v + kap * gm
            kap_bar = v * gm - xp.sum(g * Pg, axis=-1)
            S_bar = 0.5 * kap * (v * v / S - 1.0) - kap_bar * kap / S
            g_bar = (kap * v)[:, None] * m_bar - (2.0 * kap)[:, None] * Pg + S_bar[:, None] * h
            y_bar = y_bar + xp.sum(w * v_bar)
            if sub.R is None:
                R_bar = R_bar + xp.sum(S_bar)
            else:
                R_bars.append(w * S_bar)
            mp_bar = m_bar - v_bar[:, None] * h
            Pp_bar = P_bar + _sym(_outer(g_bar, h))
            A_bar.append(_outer(mp_bar, m) + 2.0 * (Pp_bar @ AD))
            D_bar = _t(A) @ Pp_bar @ A
            Pinf_bar = Pinf_bar + xp.sum(Pp_bar - D_bar, axis=0)
            m_bar = _mv(_t(A), mp_bar)
            P_bar = D_bar
        A_bar = xp.stack(A_bar[::-1], axis=0)            # (l1 - l0, B, J, J)
        if l0 == 0:  # A_0 = 0 of the first block is no function of the parameters
            A_bar = xp.concat([(A_bar[0, ...] * sub.keep0)[None, ...], A_bar[1:, ...]], axis=0)
        if sub.keep is not None:  # nor the A = 0 of every series' first step
            A_bar = A_bar * sub.keep[l0:l1, :, None, None]
        dt = xp.reshape(sub.dt[l0:l1, :], (-1,))
        J = A_bar.shape[-1]
        grad = grad + form.transition_vjp(dt, xp.reshape(A_bar, (-1, J, J)))
    if sub.R is not None:  # (L, B) of this group's blocks, in step order
        R_bar = xp.stack(R_bars[::-1], axis=0)
    return grad, Pinf_bar, R_bar, y_bar


class _Sub:
    """The columns (blocks) ``cols`` of a :class:`_Layout`."""

    def __init__(self, lay, cols):
        self.L, self.dev = lay.L, lay.dev
        self.dt, self.y, self.w = lay.dt[:, cols], lay.y[:, cols], lay.w[:, cols]
        self.R = None if lay.R is None else lay.R[:, cols]
        self.B = self.dt.shape[1]
        self.keep0 = lay.keep0[cols, ...]
        self.keep = None if lay.keep is None else lay.keep[:, cols]
        self.first_is_prior = cols.start in (None, 0)


# ------------------------------------------------------------------------ entry point
def filtered_blocks(form, dt, y, R, L=None, reset=None):
    """Passes 1 and 2 (module notes), shared by the likelihood and the blocked smoother.

    Returns ``(lay, h, P_inf, R, elems, c, mu, Sig)``: the block layout, ``H`` and ``P_inf``
    and ``R`` in float64 (``R`` () or (n,), checked), every block's element and constant, and
    the filtered mean (B, J) and covariance (B, J, J) before every block. ``dt``, ``y``,
    ``L`` and ``reset`` as for :func:`lml_blocked`.
    """
    xp = get_namespace(dt)
    n = dt.shape[0]
    R = xp.asarray(R, dtype=xp.float64, device=device_of(dt))
    if R.ndim != 0 and tuple(R.shape) != (n,):
        raise ShapeError(f"R: expected the noise variance as a scalar or one per step, shape "
                         f"() or ({n},), got {describe_shape(R.shape)}")
    L = steps_per_block(n) if L is None else max(1, min(int(L), n))
    lay = _Layout(xp, dt, y, L, reset, R)
    h = xp.astype(form.H, xp.float64, copy=False)
    P_inf = xp.astype(form.P_inf, xp.float64, copy=False)
    elems, c = _block_elements(form, lay, h, P_inf, R, xp)
    mu, Sig = _starts(elems, xp)
    return lay, h, P_inf, R, elems, c, mu, Sig


def lml_blocked(form, dt, y, R, need_grad, L=None, reset=None):
    """``log p(y)`` of the state-space model and (``need_grad``) its gradient.

    Parameters
    ----------
    form : gpnum.kernels.StateSpaceForm
    dt : array (n,)
        Steps between the sorted inputs (float64), the first ignored (the prior).
    y : array (n,)
        Observations minus the mean (float64).
    R : array () or (n,)
        Observation noise variance (float64, > 0): one for every step, or one per step
        (heteroscedastic noise; the Gaussian sites of :class:`gpnum.models.MarkovVGP`).
    need_grad : bool
    L : int, optional
        Steps per block (default :func:`steps_per_block`); the result does not depend on it
        beyond rounding.
    reset : array (n,) of bool, optional
        Steps that restart from the prior (``A = 0``), as the first always does: the first
        step of every series when several independent series are concatenated
        (:mod:`gpnum.models._state_space_series`); their ``dt`` (>= 0) is ignored.

    Returns
    -------
    value : 0-d array
    grad : None, or a tuple ``(d_kernel (p,), d_R, d_y_sum)``: the derivatives w.r.t. the
        form's parameters (``form.names``), ``R`` (shaped like ``R``: per step for a vector),
        and the sum of the derivatives w.r.t. every ``y_k`` (the negative of the derivative
        w.r.t. a constant mean).
    """
    xp = get_namespace(dt)
    n = dt.shape[0]
    lay, h, P_inf, R, elems, c, mu, Sig = filtered_blocks(form, dt, y, R, L, reset)
    value = (xp.sum(c) + xp.sum(_gaussian_log_integral(mu, Sig, elems[3][..., 0], elems[4], xp))
             - 0.5 * n * _LOG_2PI)
    if not need_grad:
        return value, None
    m_end, P_end = _end_adjoints(elems, mu, Sig, xp)
    group = max(1, GROUP // lay.L)
    grad = Pinf_bar = R_bar = y_bar = 0.0
    R_cols = []
    for s in range(0, lay.B, group):
        cols = slice(s, min(lay.B, s + group))
        g, pb, rb, yb = _filter_and_adjoint(form, lay, h, P_inf, R, mu[cols, ...],
                                            Sig[cols, ...], m_end[cols, ...],
                                            P_end[cols, ...], cols, xp)
        grad, Pinf_bar, y_bar = grad + g, Pinf_bar + pb, y_bar + yb
        if lay.R is None:
            R_bar = R_bar + rb
        else:
            R_cols.append(rb)
    if lay.R is not None:  # (L, B) step-major back to the steps' order b L + k
        R_bar = xp.reshape(_t(xp.concat(R_cols, axis=1)), (-1,))[:n]
    dP = xp.astype(form.dP_inf, xp.float64, copy=False)
    grad = grad + xp.sum(dP * Pinf_bar[None, ...], axis=(1, 2))
    return value, (grad, R_bar, y_bar)
