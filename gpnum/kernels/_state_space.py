"""State-space (linear SDE) forms of the kernels on one input that have an exact one.

A stationary GP ``f(t) = H x(t)`` whose state ``x`` (size J) solves a linear time-invariant SDE
has, for a step ``dt >= 0``, the transition ``A(dt) = exp(F dt)``, the stationary covariance
``P_inf`` and the process noise ``Q(dt) = P_inf - A(dt) P_inf A(dt)^T``, and its covariance is
``k(dt) = H A(dt) P_inf H^T`` (Hartikainen & Sarkka 2010; Sarkka & Solin 2019, ch. 12).
A form here gives ``H``, ``P_inf``, ``A(dt)`` for an array of steps, ``Q(dt)``, and their
derivatives w.r.t. every hyper-parameter of the kernel, derived by hand, and ``A(dt)`` as a
sum ``sum_k c_k(dt) E_k`` of constant matrices (:meth:`StateSpaceForm.transition_terms`):

- Matern-nu, nu = J - 1/2 (J = 1, 2, 3): ``F`` is the companion matrix of ``(s + lam)^J``,
  ``lam = sqrt(2 nu) / lengthscale``; ``N = F + lam I`` is nilpotent, so
  ``A(t) = exp(-lam t) sum_{k<J} t^k N^k / k!`` and ``dA/dlam = -t A + exp(-lam t) sum_k
  t^k d(N^k)/dlam / k!``. ``P_inf`` holds the derivatives of ``k`` at 0 (Solin 2016, sec. 4.2).
- Cosine: a rotation by ``omega dt``, ``omega = 2 pi / lengthscale``, ``P_inf = variance I``
  (no process noise).
- SHO: ``A = exp(m t) (C I + S N)`` (:mod:`gpnum.kernels._sho`), ``P_inf = diag(variance,
  w0^2 variance)``.
- Constant: ``A = 1``, ``P_inf = variance``.
- Sums: block-diagonal states; products: Kronecker products of the parts' ``H``, ``P_inf`` and
  ``A`` (Solin 2016, sec. 4.3; a product with a Cosine is the quasi-periodic case).

Forms are looked up by the exact class of each kernel (:func:`state_space_form`), so kernels
need no method of their own; :func:`register_state_space` adds one.

References
----------
Hartikainen, J. & Sarkka, S. (2010). Kalman filtering and smoothing solutions to temporal
Gaussian process regression models. MLSP.
Solin, A. (2016). Stochastic differential equation methods for spatio-temporal Gaussian process
regression. PhD thesis, Aalto University.
Sarkka, S. & Solin, A. (2019). Applied Stochastic Differential Equations. Cambridge.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.kernels._composite import Product, Sum
from gpnum.kernels._linear import Constant
from gpnum.kernels._periodic import Cosine
from gpnum.kernels._periodic_series import PeriodicSeries
from gpnum.kernels._sho import SHO, sho_functions, sho_parameter_derivatives
from gpnum.kernels._stationary import Matern12, Matern32, Matern52

__all__ = ["StateSpaceForm", "has_state_space_form", "register_state_space",
           "state_space_form"]

_TWO_PI = 2.0 * math.pi


class StateSpaceForm:
    """``H``, ``P_inf``, ``A(dt)``, ``Q(dt)`` of one kernel and their parameter derivatives.

    Attributes
    ----------
    names : tuple of str
        The kernel's parameter names (as in ``kernel.parameters()``) in the order of the
        leading axis ``p`` of every derivative array.
    H : array (J,)
        Observation vector: ``f(t) = H x(t)``.
    P_inf : array (J, J)
        Stationary state covariance.
    dP_inf : array (p, J, J)
        ``d P_inf / d theta`` for each parameter of ``names``.
    """

    def __init__(self, names, H, P_inf, dP_inf, transition, transition_vjp=None, terms=None):
        # terms: (coefficients, E): A(dt) = coefficients(dt)^T @ E over E's first axis, the
        # coefficients (K, n) one row per term (rows written whole, not strided columns)
        self.names = tuple(names)
        self.H = H
        self.P_inf = P_inf
        self.dP_inf = dP_inf
        self._transition = transition
        self._transition_vjp = transition_vjp
        self._terms = terms

    @property
    def state_dim(self) -> int:
        """``J``, the size of the state."""
        return self.H.shape[0]

    def transition(self, dt, need_grad=False):
        """``A(dt)`` for steps ``dt`` (n,) >= 0: (n, J, J), and ``dA/dtheta`` (p, n, J, J) or
        None."""
        return self._transition(dt, need_grad)

    def transition_terms(self, dt):
        """``A(dt) = sum_k c_k(dt) E_k``: the coefficients ``c`` (n, K) and the constant
        matrices ``E`` (K, J, J), or None for a form without such an expansion.

        Every form here has one (``exp(-lam t) t^k / k!`` and ``N^k`` for a Matern, ``cos``,
        ``sin`` and a rotation's parts, sums and products of them), so a solver forms all the
        transitions, or any fixed linear map of them, by one matrix product ``c @ E``. ``E``
        is the same array for every ``dt`` (formed with the form). ``c`` is the transpose of
        a (K, n) array (a view).
        """
        if self._terms is None:
            return None
        coefficients, basis = self._terms
        return get_namespace(dt).matrix_transpose(coefficients(dt)), basis

    def transition_vjp(self, dt, A_bar):
        """``sum_k <A_bar_k, dA(dt_k)/dtheta>`` for steps ``dt`` (n,) and adjoints ``A_bar``
        (n, J, J): (p,), in ``A_bar``'s dtype (the reverse-mode seam of the state-space
        likelihood)."""
        if self._transition_vjp is not None:
            return self._transition_vjp(dt, A_bar)
        xp = get_namespace(A_bar)
        _, dA = self.transition(dt, True)
        dA = xp.astype(dA, A_bar.dtype, copy=False)
        return xp.sum(dA * A_bar[None, ...], axis=(1, 2, 3))

    def process_noise(self, A, dA=None):
        """``Q = P_inf - A P_inf A^T`` (n, J, J) and (with ``dA``) ``dQ/dtheta`` (p, n, J, J).

        ``dQ = dP_inf - dA P_inf A^T - A dP_inf A^T - A P_inf dA^T``.
        """
        xp = get_namespace(A)
        # in A's dtype: float64 steps with a float32 kernel give float64 transitions
        P = xp.astype(self.P_inf, A.dtype, copy=False)
        AP = A @ P
        Q = _sym(P - AP @ _t(A))
        if dA is None:
            return Q, None
        dP = xp.astype(self.dP_inf, A.dtype, copy=False)[:, None, :, :]
        dAPAt = dA @ _t(AP)[None, ...]
        dQ = dP - dAPAt - _t(dAPAt) - A[None, ...] @ dP @ _t(A)[None, ...]
        return Q, _sym(dQ)

    def covariance(self, dt):
        """``k(dt) = H A(dt) P_inf H^T`` for steps ``dt`` (n,) >= 0: (n,)."""
        A, _ = self.transition(dt)
        xp = get_namespace(A)
        PH = xp.astype(self.P_inf @ self.H, A.dtype, copy=False)
        return (A @ PH) @ xp.astype(self.H, A.dtype, copy=False)


def _t(M):
    xp = get_namespace(M)
    return xp.matrix_transpose(M)


def _sym(M):
    return 0.5 * (M + _t(M))


def _scalar(p):
    """A parameter of shape () or (1,) as a 0-d array (1-D inputs: one lengthscale)."""
    xp = get_namespace(p)
    return xp.reshape(p, ()) if p.ndim else p


def _matrix(ref, rows):
    """A (J, J) array from rows of 0-d arrays or Python floats, in ``ref``'s namespace."""
    xp = get_namespace(ref)
    zero = xp.zeros_like(ref)
    return xp.stack([xp.stack([zero + v for v in row]) for row in rows])


def _zeros(ref, shape):
    xp = get_namespace(ref)
    return xp.zeros(shape, dtype=ref.dtype, device=device_of(ref))


def _eye(ref, n):
    xp = get_namespace(ref)
    return xp.eye(n, dtype=ref.dtype, device=device_of(ref))


# ------------------------------------------------------------------------------ Matern
def _matern_form(kernel, J):
    ell, var = _scalar(kernel.lengthscale), kernel.variance
    lam = math.sqrt(2.0 * J - 1.0) / ell
    dlam_dell = -lam / ell
    binom = [math.comb(J, k) for k in range(J)]
    # F: ones on the superdiagonal, last row -C(J, k) lam^(J-k); N = F + lam I.
    rows, drows = [], []
    for i in range(J - 1):
        rows.append([lam if j == i else (1.0 if j == i + 1 else 0.0) for j in range(J)])
        drows.append([1.0 if j == i else 0.0 for j in range(J)])
    rows.append([-binom[k] * lam ** (J - k) + (lam if k == J - 1 else 0.0) for k in range(J)])
    drows.append([-binom[k] * (J - k) * lam ** (J - k - 1) + (1.0 if k == J - 1 else 0.0)
                  for k in range(J)])
    N, dN = _matrix(var, rows), _matrix(var, drows)
    powers, dpowers = [_eye(var, J)], [_zeros(var, (J, J))]
    for _ in range(1, J):
        dpowers.append(dpowers[-1] @ N + powers[-1] @ dN)  # d(N^k) = d(N^{k-1}) N + N^{k-1} dN
        powers.append(powers[-1] @ N)
    if J == 1:
        P, dP_lam = _matrix(var, [[var]]), _zeros(var, (1, 1))
    elif J == 2:
        P = _matrix(var, [[var, 0.0], [0.0, lam * lam * var]])
        dP_lam = _matrix(var, [[0.0, 0.0], [0.0, 2.0 * lam * var]])
    else:
        kap, dkap = lam * lam * var / 3.0, 2.0 * lam * var / 3.0
        P = _matrix(var, [[var, 0.0, -kap], [0.0, kap, 0.0], [-kap, 0.0, lam ** 4 * var]])
        dP_lam = _matrix(var, [[0.0, 0.0, -dkap], [0.0, dkap, 0.0],
                               [-dkap, 0.0, 4.0 * lam ** 3 * var]])
    xp = get_namespace(var)
    dP = xp.stack([dP_lam * dlam_dell, P / var])

    def transition(dt, need_grad):
        e = xp.exp(-lam * dt)[:, None, None]
        tk = dt[:, None, None]
        poly, dpoly, fact = powers[0][None, ...], 0.0, 1.0
        term_t = tk
        for k in range(1, J):
            fact *= k
            poly = poly + (term_t / fact) * powers[k]
            if need_grad:
                dpoly = dpoly + (term_t / fact) * dpowers[k]
            term_t = term_t * tk
        A = e * poly
        if not need_grad:
            return A, None
        dA_lam = -tk * A + e * dpoly
        return A, xp.stack([dA_lam * dlam_dell, xp.zeros_like(A)])

    def coefficients(dt):
        # c_k = exp(-lam t) t^k / k!, E_k = N^k
        cols = [xp.exp(-lam * dt)]
        for k in range(1, J):
            cols.append(cols[-1] * (dt / float(k)))
        return xp.stack(cols, axis=0)

    H = xp.concat([xp.ones((1,), dtype=var.dtype, device=device_of(var)),
                   _zeros(var, (J - 1,))])
    return StateSpaceForm(("lengthscale", "variance"), H, P, dP, transition,
                          terms=(coefficients, xp.stack(powers)))


# ------------------------------------------------------------------------------ others
def _cosine_form(kernel):
    ell, var = _scalar(kernel.lengthscale), kernel.variance
    xp = get_namespace(var)
    omega = _TWO_PI / ell
    domega = -omega / ell
    P = var * _eye(var, 2)
    dP = xp.stack([_zeros(var, (2, 2)), _eye(var, 2)])

    def transition(dt, need_grad):
        c, s = xp.cos(omega * dt), xp.sin(omega * dt)
        A = xp.stack([xp.stack([c, -s], axis=-1), xp.stack([s, c], axis=-1)], axis=-2)
        if not need_grad:
            return A, None
        # dA/domega = t [[-s, -c], [c, -s]]
        g = dt * domega
        dA = xp.stack([xp.stack([-s * g, -c * g], axis=-1), xp.stack([c * g, -s * g], axis=-1)],
                      axis=-2)
        return A, xp.stack([dA, xp.zeros_like(A)])

    def coefficients(dt):
        return xp.stack([xp.cos(omega * dt), xp.sin(omega * dt)], axis=0)

    basis = xp.stack([_eye(var, 2), _matrix(var, [[0.0, -1.0], [1.0, 0.0]])])
    H = xp.asarray([1.0, 0.0], dtype=var.dtype, device=device_of(var))
    return StateSpaceForm(("lengthscale", "variance"), H, P, dP, transition,
                          terms=(coefficients, basis))


def _constant_form(kernel):
    var = kernel.variance
    xp = get_namespace(var)

    def transition(dt, need_grad):
        A = xp.ones((dt.shape[0], 1, 1), dtype=dt.dtype, device=device_of(dt))
        return A, (xp.zeros_like(A)[None, ...] if need_grad else None)

    def coefficients(dt):
        return xp.ones((1, dt.shape[0]), dtype=dt.dtype, device=device_of(dt))

    return StateSpaceForm(("variance",), xp.ones((1,), dtype=var.dtype, device=device_of(var)),
                          _matrix(var, [[var]]), _matrix(var, [[1.0]])[None, ...], transition,
                          terms=(coefficients, _matrix(var, [[1.0]])[None, ...]))


def _sho_form(kernel):
    var, rho, Q = kernel.variance, kernel.period, kernel.quality
    xp = get_namespace(var)
    w0 = _TWO_PI / rho
    m, dm, dd, dw2 = sho_parameter_derivatives(w0, Q, rho)
    N = _matrix(var, [[-m, 1.0], [-w0 * w0, m]])
    P = _matrix(var, [[var, 0.0], [0.0, w0 * w0 * var]])
    dP = xp.stack([_matrix(var, [[1.0, 0.0], [0.0, w0 * w0]]),
                   _matrix(var, [[0.0, 0.0], [0.0, dw2["period"] * var]]),
                   _zeros(var, (2, 2))])
    eye = _eye(var, 2)

    def transition(dt, need_grad):
        EC, ES, EdS = sho_functions(dt, w0, Q, need_derivative=need_grad)
        A = EC[:, None, None] * eye + ES[:, None, None] * N
        if not need_grad:
            return A, None
        t = dt[:, None, None]
        ES_, EdS_ = ES[:, None, None], EdS[:, None, None]
        grads = [xp.zeros_like(A)]
        for name in ("period", "quality"):
            dN = _matrix(var, [[-dm[name], 0.0], [-dw2[name], dm[name]]])
            grads.append((t * dm[name]) * A + (0.5 * t * ES_ * dd[name]) * eye
                         + (EdS_ * dd[name]) * N + ES_ * dN)
        return A, xp.stack(grads)

    def coefficients(dt):
        EC, ES, _ = sho_functions(dt, w0, Q)
        return xp.stack([EC, ES], axis=0)

    H = xp.asarray([1.0, 0.0], dtype=var.dtype, device=device_of(var))
    return StateSpaceForm(("variance", "period", "quality"), H, P, dP, transition,
                          terms=(coefficients, xp.stack([eye, N])))


def _periodic_series_form(kernel):
    """A constant (weight ``c_0``) and ``order`` rotations by ``j w0 dt`` (weights ``c_j``):
    the truncated cosine series is exact for :class:`PeriodicSeries` (Solin & Sarkka 2014)."""
    var, rho = kernel.variance, kernel.period
    xp = get_namespace(var)
    M = kernel.order
    c, dc = kernel.coefficients()
    w0 = _TWO_PI / rho
    dw0 = -w0 / rho
    J = 2 * M + 1
    weights = [c[0]] + [c[j] for j in range(1, M + 1) for _ in range(2)]
    dweights = [dc[0]] + [dc[j] for j in range(1, M + 1) for _ in range(2)]
    diag = xp.asarray(weights, dtype=var.dtype, device=device_of(var))
    ddiag = xp.asarray(dweights, dtype=var.dtype, device=device_of(var))
    eye = _eye(var, J)
    P = var * diag * eye
    dP = xp.stack([var * ddiag * eye, diag * eye, _zeros(var, (J, J))])
    H = xp.asarray([1.0] + [1.0, 0.0] * M, dtype=var.dtype, device=device_of(var))

    def rotations(dt):
        phases = [j * w0 * dt for j in range(1, M + 1)]
        return [(xp.cos(f), xp.sin(f)) for f in phases]

    def transition(dt, need_grad):
        blocks = [xp.ones((dt.shape[0], 1, 1), dtype=dt.dtype, device=device_of(dt))]
        for co, si in rotations(dt):
            blocks.append(xp.stack([xp.stack([co, -si], axis=-1), xp.stack([si, co], axis=-1)],
                                   axis=-2))
        A = _block_diag(blocks)
        if not need_grad:
            return A, None
        dA_period = [xp.zeros_like(blocks[0])]
        for j, (co, si) in enumerate(rotations(dt), start=1):
            g = (j * dw0) * dt
            dA_period.append(xp.stack([xp.stack([-si * g, -co * g], axis=-1),
                                       xp.stack([co * g, -si * g], axis=-1)], axis=-2))
        return A, xp.stack([xp.zeros_like(A), xp.zeros_like(A), _block_diag(dA_period)])

    def transition_vjp(dt, A_bar):
        # only the period moves A: sum over the rotation blocks of <A_bar, dR/dperiod>
        total = 0.0
        for j, (co, si) in enumerate(rotations(dt), start=1):
            i = 2 * j - 1
            a = [[A_bar[:, i + r, i + q] for q in range(2)] for r in range(2)]
            g = xp.astype((j * dw0) * dt, A_bar.dtype, copy=False)
            co, si = xp.astype(co, A_bar.dtype, copy=False), xp.astype(si, A_bar.dtype,
                                                                        copy=False)
            total = total + xp.sum(g * (-si * a[0][0] - co * a[0][1] + co * a[1][0]
                                        - si * a[1][1]))
        zero = xp.zeros((), dtype=A_bar.dtype, device=device_of(A_bar))
        return xp.stack([zero, zero, zero + total])

    # E: the constant's 1, then per rotation j its cos part (identity) and sin part
    one = _zeros(var, (J, J))
    one[0, 0] = 1.0
    basis = [one]
    for j in range(1, M + 1):
        i = 2 * j - 1
        cos_part, sin_part = _zeros(var, (J, J)), _zeros(var, (J, J))
        cos_part[i, i] = cos_part[i + 1, i + 1] = 1.0
        sin_part[i, i + 1], sin_part[i + 1, i] = -1.0, 1.0
        basis += [cos_part, sin_part]
    basis = xp.stack(basis)

    def coefficients(dt):
        cols = [xp.ones((dt.shape[0],), dtype=dt.dtype, device=device_of(dt))]
        for co, si in rotations(dt):
            cols += [co, si]
        return xp.stack(cols, axis=0)

    return StateSpaceForm(("lengthscale", "variance", "period"), H, P, dP, transition,
                          transition_vjp, (coefficients, basis))


# ---------------------------------------------------------------------- sums and products
def _prefixed(form, prefix):
    return StateSpaceForm([f"{prefix}.{n}" for n in form.names], form.H, form.P_inf,
                          form.dP_inf, form._transition, form._transition_vjp, form._terms)


def _block_diag(blocks):
    """Block-diagonal matrices from ``blocks`` (..., J_i, J_i) sharing leading dimensions."""
    xp = get_namespace(blocks[0])
    total = sum(b.shape[-1] for b in blocks)
    lead = tuple(blocks[0].shape[:-2])
    # written into one new array: a concatenation of zero blocks costs several times more
    out = xp.zeros(lead + (total, total), dtype=xp.result_type(*blocks),
                   device=device_of(blocks[0]))
    start = 0
    for b in blocks:
        stop = start + b.shape[-1]
        out[..., start:stop, start:stop] = b
        start = stop
    return out


def _sum_forms(forms):
    xp = get_namespace(forms[0].H)
    J = [f.state_dim for f in forms]
    names = [n for f in forms for n in f.names]
    P = _block_diag([f.P_inf for f in forms])
    dP = []
    for i, f in enumerate(forms):
        p = len(f.names)
        dP.append(_block_diag([f.dP_inf if j == i else _zeros(f.P_inf, (p, J[j], J[j]))
                               for j in range(len(forms))]))
    dP = xp.concat(dP, axis=0)

    def transition(dt, need_grad):
        parts = [f.transition(dt, need_grad) for f in forms]
        A = _block_diag([a for a, _ in parts])
        if not need_grad:
            return A, None
        n = dt.shape[0]
        dA = []
        for i, (_, da) in enumerate(parts):
            p = da.shape[0]
            dA.append(_block_diag([da if j == i else _zeros(da, (p, n, J[j], J[j]))
                                   for j in range(len(forms))]))
        return A, xp.concat(dA, axis=0)

    def transition_vjp(dt, A_bar):
        # A is block diagonal: only its diagonal blocks depend on the parts' parameters
        out, start = [], 0
        for f, size in zip(forms, J, strict=True):
            stop = start + size
            out.append(f.transition_vjp(dt, A_bar[:, start:stop, start:stop]))
            start = stop
        return xp.concat(out)

    terms = None
    if all(f._terms is not None for f in forms):
        # the parts' coefficients side by side, their matrices on the diagonal blocks
        def coefficients(dt):
            return xp.concat([f._terms[0](dt) for f in forms], axis=0)

        basis = []
        for i, f in enumerate(forms):
            E = f._terms[1]
            basis.append(_block_diag([E if j == i else _zeros(E, (E.shape[0], J[j], J[j]))
                                      for j in range(len(forms))]))
        terms = (coefficients, xp.concat(basis, axis=0))
    return StateSpaceForm(names, xp.concat([f.H for f in forms]), P, dP, transition,
                          transition_vjp, terms)


def _kron(X, Y):
    """Kronecker products of the trailing matrices (or vectors) of ``X`` and ``Y``, with their
    leading dimensions broadcast."""
    xp = get_namespace(X)
    if X.ndim == 1 and Y.ndim == 1:
        return xp.reshape(X[:, None] * Y[None, :], (-1,))
    prod = X[..., :, None, :, None] * Y[..., None, :, None, :]
    lead = tuple(prod.shape[:-4])
    return xp.reshape(prod, lead + (X.shape[-2] * Y.shape[-2], X.shape[-1] * Y.shape[-1]))


def _product_of_two(a, b):
    xp = get_namespace(a.H)
    P = _kron(a.P_inf, b.P_inf)
    dP = xp.concat([_kron(a.dP_inf, b.P_inf[None, ...]), _kron(a.P_inf[None, ...], b.dP_inf)],
                   axis=0)

    def transition(dt, need_grad):
        Aa, dAa = a.transition(dt, need_grad)
        Ab, dAb = b.transition(dt, need_grad)
        A = _kron(Aa, Ab)
        if not need_grad:
            return A, None
        return A, xp.concat([_kron(dAa, Ab[None, ...]), _kron(Aa[None, ...], dAb)], axis=0)

    terms = None
    if a._terms is not None and b._terms is not None:
        # A_a (x) A_b = sum_{k, l} c_k d_l (E_k (x) F_l)
        def coefficients(dt):
            c, d = a._terms[0](dt), b._terms[0](dt)
            return xp.reshape(c[:, None, :] * d[None, :, :], (-1, dt.shape[0]))

        EF = _kron(a._terms[1][:, None, ...], b._terms[1][None, ...])
        terms = (coefficients, xp.reshape(EF, (-1,) + tuple(EF.shape[-2:])))
    return StateSpaceForm(a.names + b.names, _kron(a.H, b.H), P, dP, transition,
                          terms=terms)


def _product_forms(forms):
    out = forms[0]
    for f in forms[1:]:
        out = _product_of_two(out, f)
    return out


# ------------------------------------------------------------------------------ registry
_REGISTRY = {
    Matern12: lambda k: _matern_form(k, 1),
    Matern32: lambda k: _matern_form(k, 2),
    Matern52: lambda k: _matern_form(k, 3),
    Cosine: _cosine_form,
    SHO: _sho_form,
    Constant: _constant_form,
    PeriodicSeries: _periodic_series_form,
    Sum: lambda k: _sum_forms([_prefixed(state_space_form(c), i)
                               for i, c in enumerate(k.kernels)]),
    Product: lambda k: _product_forms([_prefixed(state_space_form(c), i)
                                       for i, c in enumerate(k.kernels)]),
}


def register_state_space(cls, builder):
    """Register ``builder(kernel) -> StateSpaceForm`` for kernels of exactly class ``cls``."""
    _REGISTRY[cls] = builder


def _unsupported(kernel):
    """The first part of ``kernel`` without a form (a kernel), or None."""
    if type(kernel) not in _REGISTRY:
        return kernel
    if getattr(kernel, "active_dims", None) not in (None, (0,)):
        return kernel
    for _, child in kernel._children():
        bad = _unsupported(child)
        if bad is not None:
            return bad
    return None


def has_state_space_form(kernel) -> bool:
    """Whether :func:`state_space_form` can build an exact form for ``kernel``."""
    return _unsupported(kernel) is None


def state_space_form(kernel) -> StateSpaceForm:
    """The exact state-space form of a kernel on one input.

    Parameters
    ----------
    kernel : gpnum.kernels.Kernel
        Matern12 (Exponential), Matern32, Matern52, Cosine, SHO, Constant, or sums and
        products of them, on one input column (``active_dims`` None or ``[0]``; a lengthscale
        of shape () or (1,)).

    Returns
    -------
    StateSpaceForm

    Raises
    ------
    TypeError
        A kernel (or a part of it) without an exact state-space form, naming it.
    """
    bad = _unsupported(kernel)
    if bad is not None:
        if type(bad) in _REGISTRY:
            raise TypeError(f"state-space form: {bad!r} has active_dims "
                            f"{list(bad.active_dims)}; a state-space kernel sees the one input "
                            "column 0")
        raise TypeError(
            f"state-space form: {type(bad).__name__} ({bad!r}) has no exact state-space form; "
            f"kernels with one: {', '.join(sorted(c.__name__ for c in _REGISTRY))} "
            "(Matern12 is Exponential), and sums and products of them")
    for p in kernel.parameters().values():
        if p.ndim == 1 and p.shape[0] != 1:
            raise TypeError(f"state-space form: {kernel!r} has a parameter of shape "
                            f"{tuple(p.shape)}; a kernel on one input column needs () or (1,)")
    return _REGISTRY[type(kernel)](kernel)
