"""Multivariate divergences: values against dense NumPy float64 references, and identities."""

import numpy as np
import pytest
from kernel_refs_everyday import rbf_reference
from test_divergences_reference import (
    num,
    problem,
    ref_bhattacharyya,
    ref_gwi,
    ref_hellinger,
    ref_kl,
    ref_renyi,
    ref_renyi_highprec,
    ref_wasserstein,
    spd,
    to,
    with_junk_above,
)

from gpnum import divergences as D

FORMS = ("SS", "LL", "SL")


def call(fn, xp, device, dtype, mq, Sq, mp, Sp, form="SS", cov="S", **kw):
    """Call ``fn`` with each covariance as a matrix (S) or as a factor with junk above (L)."""
    rng = np.random.default_rng(7)
    args = {}
    for which, S, f in (("q", Sq, form[0]), ("p", Sp, form[1])):
        if f == "S":
            args[cov + which] = to(xp, device, S, dtype)
        else:
            args["L" + which] = to(xp, device, with_junk_above(np.linalg.cholesky(S), rng), dtype)
    return fn(to(xp, device, mq, dtype), mp=to(xp, device, mp, dtype), **args, **kw)


def rtol_for(xp, dtype):
    return 2e-4 if dtype == xp.float32 else 1e-9


CASES = [
    (D.kl_mvn, ref_kl, {}),
    (D.wasserstein_mvn, ref_wasserstein, {}),
    (D.bhattacharyya_mvn, ref_bhattacharyya, {}),
    (D.hellinger_mvn, ref_hellinger, {}),
    (D.renyi_mvn, lambda *a: ref_renyi(*a, 0.3), {"alpha": 0.3}),
    (D.renyi_mvn, lambda *a: ref_renyi(*a, 0.8), {"alpha": 0.8}),
    (D.renyi_mvn, lambda *a: ref_renyi(*a, 1.0), {"alpha": 1.0}),
    (D.renyi_mvn, lambda *a: ref_renyi(*a, 1.2), {"alpha": 1.2}),
    (D.renyi_mvn, lambda *a: ref_renyi(*a, 3.0), {"alpha": 3.0}),
]


@pytest.mark.parametrize("form", FORMS)
def test_values_match_dense_reference(xp, dtype, device, form):
    # Sq smaller than Sp keeps the alpha = 3 Renyi divergence finite.
    mq, Sq, mp, Sp = problem(4, 3, scale_q=0.2, scale_p=1.5)
    for fn, ref, kw in CASES:
        got = num(call(fn, xp, device, dtype, mq, Sq, mp, Sp, form, **kw))
        np.testing.assert_allclose(got, ref(mq, Sq, mp, Sp), rtol=rtol_for(xp, dtype),
                                   err_msg=f"{fn.__name__} {kw}")


def test_zero_for_equal_distributions_and_symmetry(xp, dtype, device):
    mq, Sq, mp, Sp = problem(4, 4)
    atol = 1e-5 if dtype == xp.float32 else 1e-12
    for fn, _, kw in CASES:
        for form in ("SS", "LL"):
            same = num(call(fn, xp, device, dtype, mq, Sq, mq, Sq, form, **kw))
            assert abs(same) < atol, (fn.__name__, kw, form, same)
    rtol = rtol_for(xp, dtype)
    for fn in (D.wasserstein_mvn, D.bhattacharyya_mvn, D.hellinger_mvn):
        qp = num(call(fn, xp, device, dtype, mq, Sq, mp, Sp))
        pq = num(call(fn, xp, device, dtype, mp, Sp, mq, Sq))
        np.testing.assert_allclose(qp, pq, rtol=rtol, err_msg=fn.__name__)
    # KL is not symmetric: the direction matters (and matches the reference's direction)
    qp = num(call(D.kl_mvn, xp, device, dtype, mq, Sq, mp, Sp))
    pq = num(call(D.kl_mvn, xp, device, dtype, mp, Sp, mq, Sq))
    assert abs(qp - pq) > 0.1 * qp
    np.testing.assert_allclose(pq, ref_kl(mp, Sp, mq, Sq), rtol=rtol)


def test_renyi_tends_to_kl(xp, dtype, device):
    mq, Sq, mp, Sp = problem(4, 5)
    kl = ref_kl(mq, Sq, mp, Sp)
    # Accurate uniformly in alpha: even |alpha - 1| = 1e-7 in float32 matches a 40-digit
    # reference (the textbook form divides a log-determinant difference by alpha - 1 there).
    rtol = 5e-6 if dtype == xp.float32 else 1e-12
    previous = None
    for alpha in (1.0 - 1e-3, 1.0 - 1e-5, 1.0 - 1e-7, 1.0 + 1e-7, 1.0 + 1e-5, 1.0 + 1e-3):
        got = num(call(D.renyi_mvn, xp, device, dtype, mq, Sq, mp, Sp, alpha=alpha))
        np.testing.assert_allclose(got, ref_renyi_highprec(mq, Sq, mp, Sp, alpha), rtol=rtol,
                                   err_msg=f"alpha={alpha}")
        np.testing.assert_allclose(got, kl, rtol=abs(alpha - 1.0) * 10.0 + rtol)
        if previous is not None and dtype == xp.float64:
            assert got >= previous  # Renyi divergences increase with the order
        previous = got
    exact = num(call(D.renyi_mvn, xp, device, dtype, mq, Sq, mp, Sp, alpha=1.0))
    np.testing.assert_allclose(exact, kl, rtol=rtol_for(xp, dtype))
    # and alpha = 1/2 is twice the Bhattacharyya distance
    half = num(call(D.renyi_mvn, xp, device, dtype, mq, Sq, mp, Sp, alpha=0.5))
    np.testing.assert_allclose(half, 2.0 * ref_bhattacharyya(mq, Sq, mp, Sp),
                               rtol=rtol_for(xp, dtype))


def test_one_by_one_equals_pointwise(xp, dtype, device):
    rng = np.random.default_rng(8)
    mq, mp = rng.standard_normal(1), rng.standard_normal(1)
    vq, vp = np.array([0.7]), np.array([2.3])
    pairs = [(D.kl_mvn, D.kl_normal, {}), (D.wasserstein_mvn, D.wasserstein_normal, {}),
             (D.bhattacharyya_mvn, D.bhattacharyya_normal, {}),
             (D.hellinger_mvn, D.hellinger_normal, {}),
             (D.renyi_mvn, D.renyi_normal, {"alpha": 0.7}),
             (D.renyi_mvn, D.renyi_normal, {"alpha": 1.4})]
    for multi, point, kw in pairs:
        a = num(call(multi, xp, device, dtype, mq, vq[:, None], mp, vp[:, None], **kw))
        b = num(point(*(to(xp, device, v, dtype) for v in (mq, vq, mp, vp)), **kw))
        np.testing.assert_allclose(a, b, rtol=rtol_for(xp, dtype), err_msg=multi.__name__)


def test_hellinger_range_and_far_apart(xp, dtype, device):
    mq, Sq, mp, Sp = problem(3, 9)
    far = num(call(D.hellinger_mvn, xp, device, dtype, mq, Sq, mp + 1e3, Sp))
    assert far == pytest.approx(1.0, abs=1e-6)
    h = num(call(D.hellinger_mvn, xp, device, dtype, mq, Sq, mp, Sp))
    assert 0.0 < h < 1.0


def test_widely_scaled_covariances_stay_finite(xp, dtype, device):
    # covariance scales 1e-4 and 1e4 (eigenvalues of Sp^{-1} Sq near 1e-8) in float32 too
    rng = np.random.default_rng(10)
    mq, mp = rng.standard_normal(3), rng.standard_normal(3)
    Sq, Sp = spd(3, rng, 1e-4), spd(3, rng, 1e4)
    for fn, ref, kw in CASES[:6]:
        for a, b in ((Sq, Sp), (Sp, Sq)):
            got = num(call(fn, xp, device, dtype, mq, a, mp, b, "LL", **kw))
            assert np.isfinite(got)
            np.testing.assert_allclose(got, ref(mq, a, mp, b),
                                       rtol=1e-3 if dtype == xp.float32 else 1e-8,
                                       err_msg=fn.__name__)


def test_kl_whitened_matches_reference(xp, dtype, device):
    rng = np.random.default_rng(11)
    M = 5
    m = rng.standard_normal(M)
    L = np.tril(rng.standard_normal((M, M))) + 2.0 * np.eye(M)
    L[1, 1] = -0.7  # any non-zero diagonal is a valid factor
    ref = ref_kl(m, L @ L.T, np.zeros(M), np.eye(M))
    got = D.kl_whitened(to(xp, device, m, dtype), to(xp, device, with_junk_above(L, rng), dtype))
    assert got.shape == () and got.dtype == dtype
    np.testing.assert_allclose(num(got), ref, rtol=rtol_for(xp, dtype))
    zero = D.kl_whitened(to(xp, device, np.zeros(M), dtype), to(xp, device, np.eye(M), dtype))
    assert num(zero) == 0.0


def _kernel(X, variance, lengthscale):
    return rbf_reference(X, X, lengthscale, variance)


def test_gwi_matches_seed_formula(xp, dtype, device):
    rng = np.random.default_rng(12)
    N = 6
    X = rng.uniform(size=(N, 2))
    Kp = _kernel(X, 1.5, 0.4) + 0.1 * np.eye(N)
    Kq = _kernel(X, 0.5, 0.2) + 0.05 * np.eye(N)
    mq, mp = rng.standard_normal(N), 0.1 * rng.standard_normal(N)
    for eigen_term in (True, False):
        ref = ref_gwi(mq, Kq, mp, Kp, eigen_term)
        for form in FORMS:
            got = num(call(D.wasserstein_gwi, xp, device, dtype, mq, Kq, mp, Kp, form, cov="K",
                           eigen_term=eigen_term))
            np.testing.assert_allclose(got, ref, rtol=rtol_for(xp, dtype),
                                       err_msg=f"{form} eigen_term={eigen_term}")


def test_results_keep_namespace_dtype_device(xp, dtype, device):
    mq, Sq, mp, Sp = problem(3, 13, scale_q=0.2, scale_p=1.5)
    for fn, _, kw in CASES:
        out = call(fn, xp, device, dtype, mq, Sq, mp, Sp, "SL", **kw)
        assert out.shape == () and out.dtype == dtype
        value, grads = call(getattr(D, fn.__name__ + "_and_grad"), xp, device, dtype, mq, Sq, mp,
                            Sp, "SL", **kw)
        assert num(value) == pytest.approx(num(out), rel=1e-6 if dtype == xp.float32 else 1e-14)
        assert set(grads) == {"mq", "mp", "Sq", "Lp"}
        for g in grads.values():
            assert g.dtype == dtype and np.all(np.isfinite(num(g)))
        assert grads["mq"].shape == (3,) and grads["Sq"].shape == (3, 3)
