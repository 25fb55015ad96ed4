"""Per-point (projected) divergences: references, identities, reductions, gradients, float32 range."""

import numpy as np
import pytest
from gradcheck import check_grad
from test_divergences_reference import (
    num,
    ref_bhattacharyya_normal,
    ref_hellinger_normal,
    ref_kl_normal,
    ref_pointwise_highprec,
    ref_renyi_normal,
    ref_squared_difference_normal,
    ref_wasserstein_normal,
    to,
)

from gpnum import divergences as D

ARGS = ("mq", "vq", "mp", "vp")
CASES = [
    ("kl_normal", ref_kl_normal, {}),
    ("wasserstein_normal", ref_wasserstein_normal, {}),
    ("bhattacharyya_normal", ref_bhattacharyya_normal, {}),
    ("hellinger_normal", ref_hellinger_normal, {}),
    ("renyi_normal", lambda *a: ref_renyi_normal(*a, 0.4), {"alpha": 0.4}),
    ("renyi_normal", lambda *a: ref_renyi_normal(*a, 1.0), {"alpha": 1.0}),
    ("renyi_normal", lambda *a: ref_renyi_normal(*a, 1.8), {"alpha": 1.8}),
    ("squared_difference_normal", ref_squared_difference_normal, {}),
]
IDS = [name + "".join(f"-{k}{v}" for k, v in kw.items()) for name, _, kw in CASES]


def points(n=6, seed=0):
    rng = np.random.default_rng(seed)
    mq, mp = rng.standard_normal(n), rng.standard_normal(n)
    vq = rng.uniform(0.2, 1.0, n)       # vq < 1.8/0.8 vp keeps alpha = 1.8 finite
    vp = rng.uniform(0.5, 2.0, n)
    vq[0] = vp[0]                       # one point with equal variances
    return mq, vq, mp, vp


def conv(xp, device, dtype, arrays):
    return [to(xp, device, a, dtype) for a in arrays]


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_values_and_reductions_match_reference(xp, dtype, device, case):
    name, ref, kw = CASES[case]
    fn = getattr(D, name)
    arrs = points()
    expected = ref(*arrs)
    rtol = 1e-5 if dtype == xp.float32 else 1e-12
    x = conv(xp, device, dtype, arrs)
    per_point = fn(*x, reduction="none", **kw)
    assert per_point.shape == (6,) and per_point.dtype == dtype
    np.testing.assert_allclose(num(per_point), expected, rtol=rtol, atol=1e-7)
    total = fn(*x, **kw)                                  # default: sum
    assert total.shape == () and total.dtype == dtype
    np.testing.assert_allclose(num(total), expected.sum(), rtol=rtol)
    np.testing.assert_allclose(num(fn(*x, reduction="mean", **kw)), expected.mean(), rtol=rtol)


def test_identities(xp, dtype, device):
    mq, vq, mp, vp = conv(xp, device, dtype, points())
    atol = 1e-6 if dtype == xp.float32 else 1e-14
    for name, _, kw in CASES:
        same = num(getattr(D, name)(mq, vq, mq, vq, reduction="none", **kw))
        assert np.all(np.abs(same) <= atol), name
    for name in ("wasserstein_normal", "bhattacharyya_normal", "hellinger_normal",
                 "squared_difference_normal"):
        fn = getattr(D, name)
        np.testing.assert_allclose(num(fn(mq, vq, mp, vp, reduction="none")),
                                   num(fn(mp, vp, mq, vq, reduction="none")), rtol=1e-5, atol=atol)
    kl = num(D.kl_normal(mq, vq, mp, vp, reduction="none"))
    for alpha in (1.0 - 1e-6, 1.0 + 1e-6):
        np.testing.assert_allclose(num(D.renyi_normal(mq, vq, mp, vp, alpha=alpha,
                                                      reduction="none")), kl, rtol=1e-5)
    np.testing.assert_allclose(num(D.renyi_normal(mq, vq, mp, vp, alpha=0.5, reduction="none")),
                               2.0 * num(D.bhattacharyya_normal(mq, vq, mp, vp,
                                                                reduction="none")), rtol=1e-5)


def test_float32_finite_for_variances_1e_minus8_to_1e8(xp, device):
    """Float32 values and partials stay finite and accurate across 16 orders of magnitude."""
    grid = np.array([1e-8, 1e-4, 1.0, 1e4, 1e8])
    vq, vp, d = (a.ravel() for a in np.meshgrid(grid, grid, np.array([0.0, 1e-3, 30.0])))
    mp = np.linspace(-1.0, 1.0, vq.size)
    arrs32 = [np.asarray(a, dtype=np.float32) for a in (mp + d, vq, mp, vp)]
    exact = [a.astype(np.float64) for a in arrs32]   # references at the rounded inputs
    for name, _, kw in CASES + [("renyi_normal", None, {"alpha": 0.99})]:
        keep = slice(None)
        if kw.get("alpha", 0.0) > 1.0:                 # finite only where va > 0
            keep = np.flatnonzero(kw["alpha"] * exact[3] + (1.0 - kw["alpha"]) * exact[1] > 0.0)
        ref_v, ref_g, spread = _highprec(name, tuple(a[keep] for a in exact), kw.get("alpha"))
        xs = [to(xp, device, a[keep], xp.float32) for a in arrs32]
        value, grads = getattr(D, name + "_and_grad")(*xs, reduction="none", **kw)
        assert value.dtype == xp.float32
        v = num(value)
        assert np.all(np.isfinite(v)), name
        np.testing.assert_allclose(v, ref_v, rtol=2e-5, atol=1e-30, err_msg=name)
        for arg in ARGS:
            g = num(grads[arg])
            assert np.all(np.isfinite(g)), (name, arg)
            # A partial that is a small difference of large terms is ill-conditioned: rounding
            # the inputs to float32 alone moves it by about `spread`; allow 10 times that.
            err = np.abs(g - ref_g[arg])
            bound = 1e-4 * np.abs(ref_g[arg]) + 10.0 * spread[arg] + 1e-30
            assert np.all(err <= bound), (name, arg, np.flatnonzero(err > bound),
                                          g[err > bound], ref_g[arg][err > bound])


_HIGHPREC = {}


def _highprec(name, arrays, alpha):
    """High-precision references, computed once per session (they do not depend on backend)."""
    key = (name, alpha, sum(len(a) for a in arrays))
    if key not in _HIGHPREC:
        _HIGHPREC[key] = ref_pointwise_highprec(name, arrays, alpha,
                                                rel_perturbation=2.0**-24)
    return _HIGHPREC[key]


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_gradients_and_vjp_match_finite_differences(xp, device, case):
    name, _, kw = CASES[case]
    fn = getattr(D, name)
    arrs = points(n=4, seed=1)
    cot = np.random.default_rng(2).standard_normal(4)
    for reduction in ("sum", "mean"):
        value, grads = getattr(D, name + "_and_grad")(*conv(xp, device, xp.float64, arrs),
                                                     reduction=reduction, **kw)
        assert set(grads) == set(ARGS)
        for i, arg in enumerate(ARGS):
            def f(z, i=i, reduction=reduction):
                a = list(arrs)
                a[i] = z
                return float(num(fn(*conv(xp, device, xp.float64, a), reduction=reduction,
                                    validate=False, **kw)))

            check_grad(f, arrs[i], num(grads[arg]), name=f"{name} {reduction} d/d{arg}")
    vjp = getattr(D, name + "_vjp")(to(xp, device, cot), *conv(xp, device, xp.float64, arrs),
                                    **kw)
    for i, arg in enumerate(ARGS):
        def g(z, i=i):
            a = list(arrs)
            a[i] = z
            return float(np.sum(cot * num(fn(*conv(xp, device, xp.float64, a), reduction="none",
                                              **kw))))

        check_grad(g, arrs[i], num(vjp[arg]), name=f"{name} vjp d/d{arg}")
