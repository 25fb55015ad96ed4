"""PeriodicSeries: the periodic kernel's truncated cosine series (Solin & Sarkka 2014).

References: gpnum's Periodic(RBF) kernel (the untruncated kernel, evaluated directly), SciPy's
Bessel functions for the weights' derivatives by finite differences, and central finite
differences for every gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import gpnum.kernels as K
from gpnum import backend as B
from gpnum.models import kernel_from_spec, kernel_spec


@pytest.mark.parametrize("lengthscale, order", [(0.4, 6), (0.4, 20), (1.0, 4), (3.0, 2)])
def test_series_approximates_periodic_within_its_bound(lengthscale, order):
    t = np.random.default_rng(0).uniform(-6.0, 6.0, (40, 1))
    series = K.PeriodicSeries(lengthscale=lengthscale, variance=1.3, period=2.5, order=order)
    exact = K.Periodic(K.RBF(lengthscale=lengthscale, variance=1.3), period=2.5)
    err = np.max(np.abs(np.asarray(series(t)) - np.asarray(exact(t))))
    bound = series.truncation_error()
    assert err <= bound * (1.0 + 1e-9) + 1e-15
    # the bound is attained at lag 0 (every weight positive, every cosine 1)
    gap = float(exact(np.zeros((1, 1)))[0, 0]) - float(series(np.zeros((1, 1)))[0, 0])
    assert abs(gap - bound) <= 1e-12 + 1e-9 * bound
    if order == 20:
        assert bound < 1e-10  # 6 harmonics: ~1e-2 at this lengthscale


def test_gram_and_diag_vjp_finite_differences():
    rng = np.random.default_rng(3)
    X1, X2 = rng.uniform(0.0, 5.0, (7, 1)), rng.uniform(0.0, 5.0, (5, 1))
    G = rng.standard_normal((7, 5))
    base = {"lengthscale": 0.8, "variance": 1.3, "period": 2.1}
    kernel = K.PeriodicSeries(**base, order=5)
    out = kernel.gram_vjp(G, X1, X2)
    for name in base:
        def f(v, name=name):
            return np.sum(G * K.PeriodicSeries(**{**base, name: float(v)}, order=5)(X1, X2))

        check_grad(f, np.array(base[name]), out["params"][name], name=name, eps=1e-7)
    check_grad(lambda x: np.sum(G * kernel(x, X2)), X1, out["X1"], name="X1")
    check_grad(lambda x: np.sum(G * kernel(X1, x)), X2, out["X2"], name="X2")
    g = rng.standard_normal(7)
    d = kernel.diag_vjp(g, X1)
    for name in base:
        def fd(v, name=name):
            return np.sum(g * K.PeriodicSeries(**{**base, name: float(v)}, order=5).diag(X1))

        check_grad(fd, np.array(base[name]), d["params"][name], name=f"diag {name}",
                   eps=1e-7, atol=1e-12)


def test_spec_round_trip_keeps_the_order():
    kernel = K.PeriodicSeries(lengthscale=0.7, variance=1.1, period=3.0, order=9)
    again = kernel_from_spec(kernel_spec(kernel), kernel.parameters())
    assert again.order == 9
    t = np.linspace(0.0, 4.0, 6)[:, None]
    np.testing.assert_array_equal(np.asarray(again(t)), np.asarray(kernel(t)))


def test_bad_order_and_columns_are_named():
    with pytest.raises(ValueError, match="order"):
        K.PeriodicSeries(order=-1)
    with pytest.raises(Exception, match="one input column"):
        K.PeriodicSeries()(np.zeros((3, 2)))


def test_every_backend(xp, dtype, device, to_xp):
    t = np.random.default_rng(1).uniform(0.0, 5.0, (6, 1))
    kw = {"xp": xp, "dtype": dtype, "device": device}
    kernel = K.PeriodicSeries(lengthscale=0.9, variance=1.2, period=1.7, order=4, **kw)
    ref = K.PeriodicSeries(lengthscale=0.9, variance=1.2, period=1.7, order=4)
    out = kernel(to_xp(t))
    assert out.dtype == dtype
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(B.to_numpy(out), np.asarray(ref(t)), rtol=tol, atol=tol)
