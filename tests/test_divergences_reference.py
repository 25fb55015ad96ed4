"""Independent dense NumPy float64 references for the divergence tests, and their own checks.

The references are the textbook formulas written the naive way (explicit inverses, slogdet,
``scipy.linalg.sqrtm``, and the seed's eigenvalue form for GWI), deliberately unlike the library's
factor-based forms. The tests at the bottom check the references against each other and against
known values, so a wrong reference cannot silently bless a wrong implementation.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.stats

from gpnum import backend as B

# ---------------------------------------------------------------------------------------------
# data


def spd(M, rng, scale=1.0, floor=0.3):
    A = rng.standard_normal((M, M))
    return scale * (A @ A.T / M + floor * np.eye(M))


def problem(M, seed, scale_q=1.0, scale_p=1.0):
    """Means and covariances of a random pair (Q, P)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(M), spd(M, rng, scale_q), rng.standard_normal(M),
            spd(M, rng, scale_p))


def with_junk_above(L, rng):
    """A Cholesky factor with random entries above the diagonal (which must be ignored)."""
    return L + np.triu(rng.standard_normal(L.shape), 1)


def to(xp, device, a, dtype=None):
    dtype = xp.float64 if dtype is None else dtype
    return B.asarray(np.asarray(a, dtype=np.float64), dtype=dtype, xp=xp, device=device)


def num(x):
    return B.to_numpy(x).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# multivariate references


def _logdet(S):
    sign, ld = np.linalg.slogdet(S)
    assert sign > 0
    return ld


def ref_kl(mq, Sq, mp, Sp):
    d = mq - mp
    Pi = np.linalg.inv(Sp)
    return 0.5 * (np.trace(Pi @ Sq) + d @ Pi @ d - len(mq) + _logdet(Sp) - _logdet(Sq))


def ref_renyi(mq, Sq, mp, Sp, alpha):
    if alpha == 1.0:
        return ref_kl(mq, Sq, mp, Sp)
    d = mq - mp
    Sa = alpha * Sp + (1.0 - alpha) * Sq
    return (0.5 * alpha * d @ np.linalg.solve(Sa, d)
            - (_logdet(Sa) - (1.0 - alpha) * _logdet(Sq) - alpha * _logdet(Sp))
            / (2.0 * (alpha - 1.0)))


def ref_renyi_highprec(mq, Sq, mp, Sp, alpha, digits=40):
    """The textbook Renyi formula in 40-digit arithmetic (mpmath): exact even near alpha = 1."""
    import mpmath

    with mpmath.workdps(digits):
        a = mpmath.mpf(alpha)
        d = mpmath.matrix([mpmath.mpf(float(v)) for v in mq - mp])
        Q = mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in Sq])
        P = mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in Sp])
        Sa = a * P + (1 - a) * Q
        quad = (d.T * mpmath.lu_solve(Sa, d))[0]
        logs = mpmath.log(mpmath.det(Sa)) - (1 - a) * mpmath.log(mpmath.det(Q)) \
            - a * mpmath.log(mpmath.det(P))
        return float(a / 2 * quad - logs / (2 * (a - 1)))


def ref_bhattacharyya(mq, Sq, mp, Sp):
    d = mq - mp
    S = 0.5 * (Sq + Sp)
    return d @ np.linalg.solve(S, d) / 8.0 + 0.5 * (_logdet(S) - 0.5 * _logdet(Sq)
                                                     - 0.5 * _logdet(Sp))


def ref_hellinger(mq, Sq, mp, Sp):
    d = mq - mp
    S = 0.5 * (Sq + Sp)
    coef = np.linalg.det(Sq) ** 0.25 * np.linalg.det(Sp) ** 0.25 / np.sqrt(np.linalg.det(S))
    return 1.0 - coef * np.exp(-d @ np.linalg.solve(S, d) / 8.0)


def ref_wasserstein(mq, Sq, mp, Sp):
    d = mq - mp
    r = scipy.linalg.sqrtm(Sp).real
    cross = scipy.linalg.sqrtm(r @ Sq @ r).real
    return d @ d + np.trace(Sq) + np.trace(Sp) - 2.0 * np.trace(cross)


def ref_transport_map(Sq, Sp):
    """Optimal transport map from N(0, Sq) to N(0, Sp): T Sq T = Sp, T symmetric PD."""
    r = scipy.linalg.sqrtm(Sq).real
    ri = np.linalg.inv(r)
    return ri @ scipy.linalg.sqrtm(r @ Sp @ r).real @ ri


def ref_gwi(mq, Kq, mp, Kp, eigen_term=True):
    """Seed 001's batch estimate, written as in the seed (eigenvalues of the product)."""
    N = len(mq)
    value = np.mean((mp - mq) ** 2) + np.trace(Kp) / N + np.trace(Kq) / N
    if eigen_term:
        lam = np.linalg.eigvals(Kq @ Kp)
        assert np.max(np.abs(lam.imag)) < 1e-8 * np.max(np.abs(lam))
        value -= 2.0 / N * np.sum(np.sqrt(lam.real))
    return value


# ---------------------------------------------------------------------------------------------
# per-point references (design notes 4.5, with sq, sp standard deviations). Each is written once
# against a math module ``m``: NumPy (vectorised float64) or mpmath (40 digits, scalar).


def _kl_normal(m, mq, vq, mp, vp):
    sq, sp = m.sqrt(vq), m.sqrt(vp)
    return m.log(sp / sq) + (vq + (mq - mp) ** 2) / (2 * vp) - 0.5


def _wasserstein_normal(m, mq, vq, mp, vp):
    return (mq - mp) ** 2 + (m.sqrt(vp) - m.sqrt(vq)) ** 2


def _bhattacharyya_normal(m, mq, vq, mp, vp):
    sq, sp = m.sqrt(vq), m.sqrt(vp)
    return (mq - mp) ** 2 / (4 * (vp + vq)) + 0.5 * m.log((vp + vq) / (2 * sp * sq))


def _hellinger_normal(m, mq, vq, mp, vp):
    sq, sp = m.sqrt(vq), m.sqrt(vp)
    return 1 - m.sqrt(2 * sp * sq / (vp + vq)) * m.exp(-(mq - mp) ** 2 / (4 * (vp + vq)))


def _renyi_normal(m, mq, vq, mp, vp, alpha):
    if alpha == 1:
        return _kl_normal(m, mq, vq, mp, vp)
    sq, sp = m.sqrt(vq), m.sqrt(vp)
    va = alpha * vp + (1 - alpha) * vq
    return (m.log(sp / sq) + m.log(vp / va) / (2 * (alpha - 1))
            + alpha * (mq - mp) ** 2 / (2 * va))


def _squared_difference_normal(m, mq, vq, mp, vp):
    return (mq - mp) ** 2 + (vq - vp) ** 2


def ref_kl_normal(*a):
    return _kl_normal(np, *a)


def ref_wasserstein_normal(*a):
    return _wasserstein_normal(np, *a)


def ref_bhattacharyya_normal(*a):
    return _bhattacharyya_normal(np, *a)


def ref_hellinger_normal(*a):
    return _hellinger_normal(np, *a)


def ref_renyi_normal(mq, vq, mp, vp, alpha):
    return _renyi_normal(np, mq, vq, mp, vp, alpha)


def ref_squared_difference_normal(*a):
    return _squared_difference_normal(np, *a)


POINTWISE_FORMULAS = {
    "kl_normal": _kl_normal, "wasserstein_normal": _wasserstein_normal,
    "bhattacharyya_normal": _bhattacharyya_normal, "hellinger_normal": _hellinger_normal,
    "renyi_normal": _renyi_normal, "squared_difference_normal": _squared_difference_normal,
}


def ref_pointwise_highprec(name, arrays, alpha=None, digits=60, rel_perturbation=None):
    """Per-point values and partials (central differences) of the textbook formula in mpmath.

    Returns ``(values, partials, spread)``: float64 arrays (n,), and dicts ``mq, vq, mp, vp`` ->
    (n,). At 60 digits with a relative step of 1e-15 values and partials are exact to float64
    precision, even where the float64 textbook formula itself cancels badly (e.g.
    ``(vq + d^2) / vp`` with ``vq = 1e8``, ``d^2 = 1e-6``). ``spread`` (when
    ``rel_perturbation`` is given) is the sum over the four inputs of how much each partial moves
    when that input is scaled by ``1 + rel_perturbation``: the error that rounding the inputs to a
    working precision alone causes, i.e. the partial's conditioning, as a tolerance.
    """
    import mpmath

    formula = POINTWISE_FORMULAS[name]
    names = ("mq", "vq", "mp", "vp")
    n = len(arrays[0])
    values = np.empty(n)
    partials = {k: np.empty(n) for k in names}
    spread = {k: np.zeros(n) for k in names}
    with mpmath.workdps(digits):
        extra = () if alpha is None else (mpmath.mpf(alpha),)

        def partial(x, j):
            h = mpmath.mpf(10) ** -15 * max(abs(x[j]), mpmath.mpf(10) ** -10)
            up, down = list(x), list(x)
            up[j] += h
            down[j] -= h
            return (formula(mpmath, *up, *extra) - formula(mpmath, *down, *extra)) / (2 * h)

        for i in range(n):
            x = [mpmath.mpf(float(a[i])) for a in arrays]
            values[i] = float(formula(mpmath, *x, *extra))
            for j, k in enumerate(names):
                p = partial(x, j)
                partials[k][i] = float(p)
                if rel_perturbation is not None:
                    for jj in range(4):
                        y = list(x)
                        y[jj] *= 1 + mpmath.mpf(rel_perturbation)
                        spread[k][i] += float(abs(partial(y, j) - p))
    return values, partials, spread


# ---------------------------------------------------------------------------------------------
# checks of the references themselves


def test_references_agree_with_each_other_and_known_values():
    mq, Sq, mp, Sp = problem(3, 0)
    # Renyi tends to KL, alpha = 1/2 is twice Bhattacharyya, Hellinger = 1 - exp(-D_B)
    np.testing.assert_allclose(ref_renyi(mq, Sq, mp, Sp, 1.0 + 1e-7), ref_kl(mq, Sq, mp, Sp),
                               rtol=1e-5)
    np.testing.assert_allclose(ref_renyi(mq, Sq, mp, Sp, 0.5),
                               2.0 * ref_bhattacharyya(mq, Sq, mp, Sp), rtol=1e-12)
    for alpha in (0.3, 1.0 - 1e-3, 1.5):
        np.testing.assert_allclose(ref_renyi_highprec(mq, Sq, mp, Sp, alpha),
                                   ref_renyi(mq, Sq, mp, Sp, alpha), rtol=1e-9)
    np.testing.assert_allclose(ref_hellinger(mq, Sq, mp, Sp),
                               -np.expm1(-ref_bhattacharyya(mq, Sq, mp, Sp)), rtol=1e-12)
    # the GWI estimate with one batch is W2^2 / N
    np.testing.assert_allclose(ref_gwi(mq, Sq, mp, Sp), ref_wasserstein(mq, Sq, mp, Sp) / 3,
                               rtol=1e-10)
    # the transport map pushes Sq to Sp
    T = ref_transport_map(Sq, Sp)
    np.testing.assert_allclose(T @ Sq @ T, Sp, rtol=1e-10, atol=1e-12)
    # commuting (diagonal) covariances: W2 cross term is sum sqrt(products)
    a, b = np.array([1.0, 4.0]), np.array([9.0, 0.25])
    np.testing.assert_allclose(ref_wasserstein(np.zeros(2), np.diag(a), np.ones(2), np.diag(b)),
                               2.0 + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2), rtol=1e-12)
    # 1 x 1 multivariate equals the per-point forms
    args = (0.3, 2.0, -0.4, 0.5)
    m1 = (np.array([0.3]), np.array([[2.0]]), np.array([-0.4]), np.array([[0.5]]))
    for multi, point in ((ref_kl, ref_kl_normal), (ref_wasserstein, ref_wasserstein_normal),
                         (ref_bhattacharyya, ref_bhattacharyya_normal),
                         (ref_hellinger, ref_hellinger_normal)):
        np.testing.assert_allclose(multi(*m1), point(*args), rtol=1e-12)
    np.testing.assert_allclose(ref_renyi(*m1, 0.3), ref_renyi_normal(*args, 0.3), rtol=1e-12)


def test_reference_kl_matches_scipy_entropy_identity():
    # KL(Q||P) = cross-entropy - entropy, with scipy's closed-form Gaussian entropy
    mq, Sq, mp, Sp = problem(3, 1)
    ent = scipy.stats.multivariate_normal(mq, Sq).entropy()
    Pi = np.linalg.inv(Sp)
    cross = 0.5 * (3 * np.log(2 * np.pi) + _logdet(Sp) + np.trace(Pi @ Sq)
                   + (mq - mp) @ Pi @ (mq - mp))
    np.testing.assert_allclose(ref_kl(mq, Sq, mp, Sp), cross - ent, rtol=1e-12)
