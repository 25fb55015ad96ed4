"""Several series sharing hyper-parameters: kernels.SameGroup and GPR(solver="state_space")
on ``k_t * SameGroup(active_dims=[1])`` with inputs ``[time, label]``.

References: SameGroup against a NumPy indicator matrix; the state-space path against the
dense Cholesky GPR with the same product kernel, against the sum of independent single-series
GPRs (one per label, the time kernel alone), against central finite differences, and its
samples against the dense posterior by Monte Carlo. The series have different lengths (one of
a single point), irregular, unsorted and interleaved times, ties within a series and equal
times across series, and labels that are not integers.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad, check_model_grad
from test_gpr_state_space import (
    check_backend_against_dense,
    check_fit_reaches_dense,
    check_samples_against_dense,
)

import gpnum.kernels as K
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

LABELS = (2.5, -1.0, 7.0)
SIZES = (41, 17, 1)
NOISE, MEAN = 0.09, 0.15


def _time_kernels(**kw):
    return {
        "matern32_plus_sho": K.Matern32(lengthscale=3.0, variance=0.6, active_dims=[0], **kw)
        + K.SHO(variance=1.0, period=5.0, quality=4.0, active_dims=[0], **kw),
        "quasi_periodic": K.Matern52(lengthscale=15.0, variance=1.0, active_dims=[0], **kw)
        * K.Cosine(lengthscale=6.0, variance=1.0, active_dims=[0], **kw),
        "matern12": K.Matern12(lengthscale=1.7, variance=0.9, active_dims=[0], **kw),
        "constant_plus_matern": K.Sum(K.Constant(variance=0.6, **kw),
                                      K.Matern32(lengthscale=1.5, variance=0.7, **kw),
                                      active_dims=[0]),
    }


TIME_KERNELS = list(_time_kernels())


def _kernel(name, group_first=False, **kw):
    time = _time_kernels(**kw)[name]
    group = K.SameGroup(active_dims=[1], **kw)
    return group * time if group_first else time * group


def _data(sizes=SIZES, seed=0):
    """Rows ``[time, label]`` of the series, shuffled together, and targets."""
    rng = np.random.default_rng(seed)
    ts, labs = [], []
    for lab, n in zip(LABELS, sizes, strict=True):
        t = rng.uniform(0.0, 40.0, n)
        if n > 4:
            t[2] = t[3]          # a tie within the series
        ts.append(t)
        labs.append(np.full(n, lab))
    t, lab = np.concatenate(ts), np.concatenate(labs)
    t[sizes[0]] = t[0]           # the same time in two series
    perm = rng.permutation(t.shape[0])
    X = np.c_[t, lab][perm]
    y = np.sin(0.9 * X[:, 0]) + 0.4 * X[:, 1] + 0.3 * rng.standard_normal(X.shape[0])
    return X, y


def _models(name, X, y, group_first=False):
    ss = GPR(_kernel(name, group_first), Gaussian(variance=NOISE), X, y, mean=MEAN,
             solver="state_space")
    dense = GPR(_kernel(name, group_first), Gaussian(variance=NOISE), X, y, mean=MEAN)
    return ss, dense


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _scalar(v):
    return float(np.reshape(np.asarray(B.to_numpy(v), dtype=np.float64), ()))


# ------------------------------------------------------------------------ the kernel
def test_same_group_against_numpy(xp, dtype, device, to_xp):
    rng = np.random.default_rng(1)
    lab1 = np.array([0.5, -3.0, 1e6, 0.5, 2.0, -3.0])
    lab2 = np.array([2.0, 0.5, 7.0, -3.0])
    X1, X2 = np.c_[rng.normal(size=6), lab1], np.c_[rng.normal(size=4), lab2]
    k = K.SameGroup(active_dims=[1], xp=xp, dtype=dtype, device=device)
    ref12 = (lab1[:, None] == lab2[None, :]).astype(np.float64)
    ref11 = (lab1[:, None] == lab1[None, :]).astype(np.float64)
    K12, K11 = k(to_xp(X1), to_xp(X2)), k(to_xp(X1))
    assert K12.dtype == dtype and K12.shape == (6, 4)
    np.testing.assert_array_equal(B.to_numpy(K12), ref12)
    np.testing.assert_array_equal(B.to_numpy(K11), ref11)
    np.testing.assert_array_equal(B.to_numpy(k.diag(to_xp(X1))), np.ones(6))
    assert k.parameters() == {} and repr(k) == "SameGroup(active_dims=[1])"
    g = k.gram_vjp(to_xp(rng.normal(size=(6, 4))), to_xp(X1), to_xp(X2))
    assert g["params"] == {}
    np.testing.assert_array_equal(B.to_numpy(g["X1"]), np.zeros((6, 2)))
    np.testing.assert_array_equal(B.to_numpy(g["X2"]), np.zeros((4, 2)))
    gd = k.diag_vjp(to_xp(np.ones(6)), to_xp(X1))
    assert gd["params"] == {}
    np.testing.assert_array_equal(B.to_numpy(gd["X"]), np.zeros((6, 2)))
    # a product with a time kernel: the time kernel's matrix masked by the labels
    prod = K.Matern32(0.8, 1.3, active_dims=[0], xp=xp, dtype=dtype, device=device) * k
    d = np.abs(X1[:, :1] - X2[:, 0][None, :]) * np.sqrt(3.0) / 0.8
    ref = 1.3 * (1.0 + d) * np.exp(-d) * ref12
    tol = 1e-5 if dtype == xp.float32 else 1e-13
    np.testing.assert_allclose(B.to_numpy(prod(to_xp(X1), to_xp(X2))), ref, rtol=tol,
                               atol=tol)


def test_same_group_product_gradients_by_finite_differences():
    rng = np.random.default_rng(2)
    X = np.c_[rng.uniform(0.0, 5.0, 7), [1.0, 2.0, 1.0, 1.0, 3.0, 2.0, 1.0]]
    G = rng.normal(size=(7, 7))
    kern = K.Matern52(0.9, 1.4, active_dims=[0]) * K.SameGroup(active_dims=[1])
    g = kern.gram_vjp(G, X)
    for key, value in kern.parameters().items():
        x0 = np.asarray(value, dtype=np.float64)

        def f(x, key=key, x0=x0):
            kern.set_parameters({key: x})
            out = float(np.sum(G * kern(X)))
            kern.set_parameters({key: x0})
            return out

        check_grad(f, x0, g["params"][key], name=key)
    # the inputs: the labels are piecewise constant (zero gradient), the times are not
    check_grad(lambda x: float(np.sum(G * kern(x))), X, g["X1"], name="X")
    assert np.all(np.asarray(g["X1"])[:, 1] == 0.0)


def test_same_group_errors():
    X = np.c_[np.arange(4.0), np.arange(4.0)]
    with pytest.raises(ShapeError, match="one label column"):
        K.SameGroup()(X)
    with pytest.raises(ShapeError, match="active_dims"):
        K.SameGroup(active_dims=[2])(X)
    bad = X.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        K.SameGroup(active_dims=[1])(bad)


# ------------------------------------------------------------------------ likelihood
@pytest.mark.parametrize("group_first", [False, True])
@pytest.mark.parametrize("name", TIME_KERNELS)
def test_lml_and_gradient_match_dense_gpr(name, group_first):
    X, y = _data()
    ss, dense = _models(name, X, y, group_first)
    assert ss.uses_state_space
    v_ss, g_ss = ss.log_marginal_likelihood_and_grad()
    v_d, g_d = dense.log_marginal_likelihood_and_grad()
    assert abs(float(v_ss) - float(v_d)) <= 1e-9 * abs(float(v_d))
    assert set(g_ss) == set(g_d) == set(ss.parameters())
    for key in g_d:
        assert g_ss[key].shape == g_d[key].shape
        err = abs(_scalar(g_ss[key]) - _scalar(g_d[key]))
        scale = max(abs(_scalar(g_d[key])), 1e-3 * abs(float(v_d)) / X.shape[0])
        assert err <= 1e-9 * scale, (key, g_ss[key], g_d[key])


def test_lml_and_gradient_are_the_sums_over_single_series():
    X, y = _data()
    ss, _ = _models("matern32_plus_sho", X, y)
    v_ss, g_ss = ss.log_marginal_likelihood_and_grad()
    total, grads = 0.0, {}
    for lab in LABELS:
        rows = X[:, 1] == lab
        one = GPR(_time_kernels()["matern32_plus_sho"], Gaussian(variance=NOISE),
                  X[rows, :1], y[rows], mean=MEAN)   # dense, one column: an independent path
        v, g = one.log_marginal_likelihood_and_grad()
        total += float(v)
        for key, value in g.items():
            # the time kernel is factor 0 of the product: "kernel.x" -> "kernel.0.x"
            key = key.replace("kernel.", "kernel.0.", 1)
            grads[key] = grads.get(key, 0.0) + _scalar(value)
    assert abs(float(v_ss) - total) <= 1e-9 * abs(total)
    assert set(grads) == set(g_ss)
    for key, value in grads.items():
        assert abs(_scalar(g_ss[key]) - value) <= 1e-9 * max(abs(value), 1e-3), key


@pytest.mark.parametrize("steps, slab, group", [(1, 1 << 16, 1 << 18), (3, 5, 4),
                                                 (59, 1 << 16, 1 << 18), (7, 2, 1)])
def test_blocks_slabs_and_groups_change_nothing(monkeypatch, steps, slab, group):
    # series starts fall at block starts, inside blocks and beside the padding; slabs and
    # groups cut the restart mask as they cut the steps
    from gpnum.models import _gpr_state_space, _kalman_blocked

    X, y = _data()
    _, dense = _models("quasi_periodic", X, y)
    v_d, g_d = dense.log_marginal_likelihood_and_grad()
    monkeypatch.setattr(_gpr_state_space, "STEPS_PER_BLOCK", steps)
    monkeypatch.setattr(_kalman_blocked, "SLAB", slab)
    monkeypatch.setattr(_kalman_blocked, "GROUP", group)
    v, g = _models("quasi_periodic", X, y)[0].log_marginal_likelihood_and_grad()
    assert abs(float(v) - float(v_d)) <= 1e-9 * abs(float(v_d))
    for key in g_d:
        assert abs(_scalar(g[key]) - _scalar(g_d[key])) <= 1e-9 * max(
            abs(_scalar(g_d[key])), 1e-2), key


def test_the_blocked_scan_ignores_the_steps_into_a_restart():
    # A restart's transition is 0 whatever its step: its value and its gradient (the adjoint
    # of A is dropped there; dA/dtheta at a zero step vanishes anyway, so the restarts' steps
    # are made non-zero here to see it)
    from gpnum.models._kalman_blocked import lml_blocked

    X, y = _data()
    ss, _ = _models("matern32_plus_sho", X, y)
    form = K.state_space_form(_time_kernels()["matern32_plus_sho"])
    order = np.lexsort((X[:, 0], X[:, 1]))
    t, lab = X[order, 0], X[order, 1]
    reset = np.r_[True, lab[1:] != lab[:-1]]
    dt = np.r_[0.0, np.diff(t)]
    dt_zero = np.where(reset, 0.0, dt)
    dt_other = np.where(reset, 1.7, dt)
    resid = y[order] - MEAN
    for L in (None, 4):
        v0, g0 = lml_blocked(form, dt_zero, resid, np.asarray(NOISE), True, L=L, reset=reset)
        v1, g1 = lml_blocked(form, dt_other, resid, np.asarray(NOISE), True, L=L, reset=reset)
        assert abs(float(v1) - float(v0)) <= 1e-12 * abs(float(v0))
        assert abs(float(v0) - float(ss.log_marginal_likelihood())) <= 1e-9 * abs(float(v0))
        for a, b in zip(g1, g0, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["matern32_plus_sho", "quasi_periodic"])
def test_gradient_finite_differences(name):
    X, y = _data(sizes=(13, 6, 1), seed=3)
    ss, _ = _models(name, X, y, group_first=True)
    _, grads = ss.log_marginal_likelihood_and_grad()
    check_model_grad(ss, grads, ss.log_marginal_likelihood, eps=1e-6)


# ------------------------------------------------------------------------ predictions
def _new_points(X):
    """For every series: before its data, between, at a data point, at a tie, after; and a
    label without data."""
    rows = []
    for lab in LABELS:
        t = np.sort(X[X[:, 1] == lab, 0])
        mids = (t[:-1] + t[1:]) / 2.0 if t.shape[0] > 1 else t
        rows += [(t[0] - 3.0, lab), (t[0] - 1e-3, lab), (t[-1] + 0.5, lab), (t[-1] + 40.0, lab),
                 (t[0], lab), (mids[0], lab), (mids[-1], lab)]
    rows += [(10.0, 4.0), (-5.0, 100.0), (X[0, 0], 3.0)]
    rows += [(X[5, 0], X[5, 1]), (X[5, 0] + 1e-7, X[5, 1])]
    return np.array(rows)


@pytest.mark.parametrize("name", TIME_KERNELS)
def test_predictions_match_dense_gpr(name):
    X, y = _data()
    ss, dense = _models(name, X, y)
    Xs = _new_points(X)
    mu_ss, var_ss = ss.predict_f(Xs)
    mu_d, var_d = dense.predict_f(Xs)
    assert _rel(mu_ss, mu_d) < 1e-9
    np.testing.assert_allclose(var_ss, var_d, rtol=1e-9, atol=1e-12 * float(np.max(var_d)))
    # a label without data: the prior
    no_data = np.isin(Xs[:, 1], LABELS, invert=True)
    np.testing.assert_allclose(np.asarray(mu_ss)[no_data], MEAN, rtol=1e-12)
    prior = np.asarray(B.to_numpy(ss.kernel.diag(Xs)))[no_data]
    np.testing.assert_allclose(np.asarray(var_ss)[no_data], prior, rtol=1e-12)


@pytest.mark.parametrize("name", ["matern32_plus_sho", "constant_plus_matern"])
def test_full_covariance_matches_dense_gpr(name):
    X, y = _data()
    ss, dense = _models(name, X, y)
    Xs = _new_points(X)
    mu_ss, cov_ss = ss.predict_f(Xs, full_cov=True)
    mu_d, cov_d = dense.predict_f(Xs, full_cov=True)
    assert _rel(mu_ss, mu_d) < 1e-9
    assert _rel(cov_ss, cov_d) < 1e-9


def test_samples_match_the_dense_posterior():
    X, y = _data(sizes=(30, 12, 1), seed=4)
    ss, dense = _models("matern32_plus_sho", X, y)
    t1 = X[X[:, 1] == LABELS[2], 0][0]
    Xs = np.array([[-3.0, LABELS[0]], [10.0, LABELS[0]], [10.0, LABELS[1]], [X[4, 0], X[4, 1]],
                   [t1 + 0.3, LABELS[2]], [50.0, LABELS[1]], [5.0, 9.0]])
    check_samples_against_dense(ss, dense, Xs, 3000)


# ------------------------------------------------------------------------ backends, dtypes
def test_every_backend_against_float64_dense(xp, dtype, device, to_xp):
    X, y = _data(seed=5)
    X32 = X.astype(np.float32).astype(np.float64)   # the inputs a float32 model sees
    kw = {"xp": xp, "dtype": dtype, "device": device}
    ss = GPR(_kernel("matern32_plus_sho", **kw), Gaussian(variance=NOISE, **kw), to_xp(X),
             to_xp(y), mean=MEAN, solver="state_space")
    _, dense = _models("matern32_plus_sho", X32 if dtype == xp.float32 else X, y)
    check_backend_against_dense(ss, dense, to_xp(_new_points(X)), xp, dtype)


# ------------------------------------------------------------------------ solver choice, errors
def test_auto_takes_state_space_for_several_series():
    X, y = _data(sizes=(120, 60, 1))
    big = GPR(_kernel("matern12"), Gaussian(), X, y, solver="auto")
    assert big.uses_state_space and not big.uses_cg
    small = GPR(_kernel("matern12"), Gaussian(), X[:40], y[:40], solver="auto")
    assert not small.uses_state_space
    rbf = GPR(K.RBF(active_dims=[0]) * K.SameGroup(active_dims=[1]), Gaussian(), X, y,
              solver="auto")
    assert not rbf.uses_state_space
    unrestricted = GPR(K.Matern32() * K.SameGroup(active_dims=[1]), Gaussian(), X, y,
                       solver="auto")   # the Matern sees both columns: no time kernel
    assert not unrestricted.uses_state_space


def test_clear_errors():
    X, y = _data()
    with pytest.raises(TypeError, match="time factor has no state-space form.*RBF"):
        GPR(K.RBF(active_dims=[0]) * K.SameGroup(active_dims=[1]), Gaussian(), X, y,
            solver="state_space")
    with pytest.raises(ShapeError, match="needs at least 2 columns"):
        GPR(_kernel("matern12"), Gaussian(), X[:, :1], y, solver="state_space")
    with pytest.raises(TypeError, match="active_dims=\\[0\\]"):
        GPR(K.Matern32() * K.SameGroup(active_dims=[1]), Gaussian(), X, y,
            solver="state_space")
    with pytest.raises(ValueError, match="time column"):
        GPR(K.Matern32(active_dims=[0]) * K.SameGroup(active_dims=[0]), Gaussian(), X, y,
            solver="state_space")
    with pytest.raises(TypeError, match="uses SameGroup, but not as"):
        GPR(K.Matern32(active_dims=[0]) + K.SameGroup(active_dims=[1]), Gaussian(), X, y,
            solver="state_space")
    with pytest.raises(TypeError, match="uses SameGroup, but not as"):
        GPR(K.Product(K.Matern32(active_dims=[0]), K.Cosine(active_dims=[0]),
                      K.SameGroup(active_dims=[1])), Gaussian(), X, y, solver="state_space")
    bad = X.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="finite"):
        GPR(_kernel("matern12"), Gaussian(), bad, y, solver="state_space")
    from gpnum.models._gpr_state_space import check_state_space

    with pytest.raises(ValueError, match="series' labels.*infinite"):
        check_state_space(_kernel("matern12"), bad)
    with pytest.raises(ShapeError, match="labels are column 1"):
        check_state_space(_kernel("matern12"), X[:, :1])
    ss = GPR(_kernel("matern12"), Gaussian(), X, y, solver="state_space")
    with pytest.raises(ShapeError, match=r"\(n, 2\)"):
        ss.predict_f(X[:, :1])


def test_checkpoint_round_trip_and_cg(tmp_path):
    from gpnum.checkpoint import load, save

    X, y = _data()
    ss, dense = _models("matern32_plus_sho", X, y)
    path = tmp_path / "series.npz"
    save(ss, path)
    again = load(path)
    assert again.uses_state_space and type(again.kernel.kernels[1]) is K.SameGroup
    assert float(again.log_marginal_likelihood()) == float(ss.log_marginal_likelihood())
    # the ordinary kernel machinery: the CG path's predictive mean agrees with the dense one
    cg = GPR(_kernel("matern32_plus_sho"), Gaussian(variance=NOISE), X, y, mean=MEAN,
             solver="cg", cg_options={"predict_rtol": 1e-10})
    Xs = _new_points(X)
    assert _rel(cg.predict_f(Xs)[0], dense.predict_f(Xs)[0]) < 1e-6


def test_gpregressor_fits_several_series_like_the_dense_path():
    pytest.importorskip("sklearn")
    import warnings

    from gpnum.errors import ConvergenceWarning
    from gpnum.sklearn import GPRegressor

    X, y = _data(sizes=(30, 12, 1), seed=6)
    fitted = []
    for solver in ("state_space", "cholesky"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fitted.append(GPRegressor(_kernel("matern32_plus_sho"), alpha=NOISE, solver=solver,
                                      maxiter=8).fit(X, y))
    ss, dense = fitted
    assert abs(ss.log_marginal_likelihood_value_ - dense.log_marginal_likelihood_value_) <= \
        1e-7 * abs(dense.log_marginal_likelihood_value_)
    Xs = _new_points(X)
    assert _rel(ss.predict(Xs), dense.predict(Xs)) < 1e-6


def test_fit_lbfgs_reaches_the_dense_optimum():
    X, y = _data(sizes=(40, 25, 1), seed=8)
    check_fit_reaches_dense(*_models("matern12", X, y), maxiter=300)
