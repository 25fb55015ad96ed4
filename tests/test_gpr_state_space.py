"""GPR(solver="state_space"): the parallel Kalman filter and smoother against independent
references.

References: a sequential Kalman filter written here in NumPy (one step at a time, the textbook
recursion, Sarkka 2013 sec. 4.3), the dense Cholesky GPR with the same kernel (solver=
"cholesky"), central finite differences, and the dense posterior for Monte Carlo checks of the
samples. Inputs are irregular, unsorted and tied.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_model_grad

import gpnum
import gpnum.kernels as K
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

N = 500


def _kernels(**kw):
    return {
        "matern12": K.Matern12(lengthscale=1.7, variance=0.9, **kw),
        "matern32": K.Matern32(lengthscale=2.1, variance=1.2, **kw),
        "matern52": K.Matern52(lengthscale=2.6, variance=0.8, **kw),
        "sho": K.SHO(variance=1.1, period=6.0, quality=3.0, **kw),
        "sho_overdamped": K.SHO(variance=0.7, period=4.0, quality=0.3, **kw),
        "cosine_plus_matern": K.Cosine(lengthscale=9.0, variance=0.5, **kw)
        + K.Matern12(lengthscale=3.0, variance=0.4, **kw),
        "constant_plus_matern": K.Constant(variance=0.6, **kw)
        + K.Matern32(lengthscale=1.5, variance=0.7, **kw),
        "matern32_plus_sho": K.Matern32(lengthscale=3.0, variance=0.6, **kw)
        + K.SHO(variance=1.0, period=5.0, quality=4.0, **kw),
        "quasi_periodic": K.Matern52(lengthscale=15.0, variance=1.0, **kw)
        * K.Cosine(lengthscale=6.0, variance=1.0, **kw),
        "product_sum": K.Matern12(lengthscale=20.0, variance=1.0, **kw)
        * K.SHO(variance=0.8, period=7.0, quality=1.5, **kw)
        + K.Matern32(lengthscale=0.8, variance=0.3, **kw),
        "periodic_series": K.Matern32(lengthscale=25.0, variance=1.0, **kw)
        * K.PeriodicSeries(lengthscale=1.2, variance=1.0, period=7.0, order=4, **kw),
    }


KERNELS = list(_kernels())


def _data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 100.0, n)
    t[5] = t[6]  # ties, including three at once
    t[20:23] = t[-1]
    y = np.sin(0.9 * t) + 0.3 * np.cos(0.13 * t) + 0.3 * rng.standard_normal(n)
    return t, y


def _models(name, t, y, noise=0.09, mean=0.15):
    ss = GPR(_kernels()[name], Gaussian(variance=noise), t[:, None], y, mean=mean,
             solver="state_space")
    dense = GPR(_kernels()[name], Gaussian(variance=noise), t[:, None], y, mean=mean)
    return ss, dense


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# ------------------------------------------------------------- sequential reference
def sequential_lml(form, t, y, noise, mean):
    """The textbook Kalman filter, one step at a time (Sarkka 2013, sec. 4.3)."""
    order = np.argsort(t, kind="stable")
    t, y = t[order], y[order] - mean
    H, P_inf = np.asarray(form.H), np.asarray(form.P_inf)
    m, P = np.zeros(len(H)), P_inf.copy()
    total = 0.0
    for k in range(len(t)):
        if k > 0:
            A = np.asarray(form.transition(np.array([t[k] - t[k - 1]]))[0][0])
            m = A @ m
            P = A @ P @ A.T + (P_inf - A @ P_inf @ A.T)
        S = H @ P @ H + noise
        v = y[k] - H @ m
        total += -0.5 * (v * v / S + np.log(S) + np.log(2.0 * np.pi))
        Kg = P @ H / S
        m = m + Kg * v
        P = P - np.outer(Kg, Kg) * S
    return total


@pytest.mark.parametrize("steps", [None, 13])  # 13: an uneven split, a padded last block
@pytest.mark.parametrize("name", KERNELS)
def test_scan_matches_sequential_filter(name, steps, monkeypatch):
    from gpnum.models import _gpr_state_space

    monkeypatch.setattr(_gpr_state_space, "STEPS_PER_BLOCK", steps)
    t, y = _data()
    ss, _ = _models(name, t, y)
    ref = sequential_lml(K.state_space_form(ss.kernel), t, y, 0.09, 0.15)
    got = float(ss.log_marginal_likelihood())
    assert abs(got - ref) <= 1e-9 * abs(ref)


@pytest.mark.parametrize("name", KERNELS)
def test_lml_and_gradient_match_dense_gpr(name):
    t, y = _data()
    ss, dense = _models(name, t, y)
    v_ss, g_ss = ss.log_marginal_likelihood_and_grad()
    v_d, g_d = dense.log_marginal_likelihood_and_grad()
    assert abs(float(v_ss) - float(v_d)) <= 1e-9 * abs(float(v_d))
    assert set(g_ss) == set(g_d) == set(ss.parameters())
    for key in g_d:
        assert g_ss[key].shape == g_d[key].shape
        err = abs(float(np.reshape(g_ss[key], ())) - float(np.reshape(g_d[key], ())))
        scale = max(abs(float(np.reshape(g_d[key], ()))), 1e-3 * abs(float(v_d)) / N)
        assert err <= 1e-9 * scale, (key, g_ss[key], g_d[key])


@pytest.mark.parametrize("name", ["matern52", "sho_overdamped", "quasi_periodic",
                                  "product_sum", "periodic_series"])
def test_gradient_finite_differences(name):
    t, y = _data(n=60, seed=2)
    ss, _ = _models(name, t, y)
    _, grads = ss.log_marginal_likelihood_and_grad()
    check_model_grad(ss, grads, ss.log_marginal_likelihood, eps=1e-6)


@pytest.mark.parametrize("steps, slab, group", [(1, 1 << 16, 1 << 18), (7, 20, 50),
                                                 (500, 1 << 16, 1 << 18), (499, 300, 100)])
def test_blocks_slabs_and_groups_change_nothing(monkeypatch, steps, slab, group):
    # one block of every step (a sequential filter), one step per block (the scans do all
    # the work), and transitions and the gradient's pass in pieces
    from gpnum.models import _gpr_state_space, _kalman_blocked

    t, y = _data()
    v1, g1 = _models("matern32_plus_sho", t, y)[0].log_marginal_likelihood_and_grad()
    monkeypatch.setattr(_gpr_state_space, "STEPS_PER_BLOCK", steps)
    monkeypatch.setattr(_kalman_blocked, "SLAB", slab)
    monkeypatch.setattr(_kalman_blocked, "GROUP", group)
    v2, g2 = _models("matern32_plus_sho", t, y)[0].log_marginal_likelihood_and_grad()
    assert abs(float(v1) - float(v2)) <= 1e-11 * abs(float(v1))
    for key in g1:
        assert _rel(g2[key], g1[key]) < 1e-10


@pytest.mark.parametrize("name", ["matern52", "matern32_plus_sho", "periodic_series"])
def test_forms_without_terms_use_their_transitions(monkeypatch, name):
    # a registered form may give A(dt) only (no expansion A = sum_k c_k E_k): the pass then
    # forms its maps of A from the transitions themselves
    monkeypatch.setattr(K.StateSpaceForm, "transition_terms", lambda self, dt: None)
    t, y = _data()
    ss, dense = _models(name, t, y)
    v_ss, g_ss = ss.log_marginal_likelihood_and_grad()
    v_d, g_d = dense.log_marginal_likelihood_and_grad()
    assert abs(float(v_ss) - float(v_d)) <= 1e-9 * abs(float(v_d))
    ref = sequential_lml(K.state_space_form(ss.kernel), t, y, 0.09, 0.15)
    assert abs(float(v_ss) - ref) <= 1e-9 * abs(ref)
    for key in g_d:
        scale = max(abs(float(np.reshape(g_d[key], ()))), 1e-3 * abs(float(v_d)) / N)
        assert abs(float(np.reshape(g_ss[key], ())) - float(np.reshape(g_d[key], ()))) \
            <= 1e-9 * scale, key


# ------------------------------------------------------------- predictions and samples
def _new_inputs(t):
    rng = np.random.default_rng(5)
    return np.concatenate([rng.uniform(-10.0, 110.0, 40),   # interleaved, before, after
                           [-50.0, t.min() - 1e-3, t.max() + 0.5, 300.0],
                           t[[3, 5, -1]],                      # at data, tied data
                           np.full(2, t[7] + 1e-7)])


@pytest.mark.parametrize("name", KERNELS)
def test_predictions_match_dense_gpr(name):
    t, y = _data()
    ss, dense = _models(name, t, y)
    Xs = _new_inputs(t)[:, None]
    mu_ss, var_ss = ss.predict_f(Xs)
    mu_d, var_d = dense.predict_f(Xs)
    assert _rel(mu_ss, mu_d) < 1e-9
    np.testing.assert_allclose(var_ss, var_d, rtol=1e-9, atol=1e-12 * float(np.max(var_d)))
    _, yv = ss.predict_y(Xs)
    np.testing.assert_allclose(yv, np.asarray(var_ss) + 0.09, rtol=1e-12)


@pytest.mark.parametrize("name", ["matern52", "quasi_periodic", "constant_plus_matern"])
def test_full_covariance_matches_dense_gpr(name):
    t, y = _data()
    ss, dense = _models(name, t, y)
    Xs = _new_inputs(t)[:, None]
    mu_ss, cov_ss = ss.predict_f(Xs, full_cov=True)
    mu_d, cov_d = dense.predict_f(Xs, full_cov=True)
    assert _rel(mu_ss, mu_d) < 1e-9
    assert _rel(cov_ss, cov_d) < 1e-9


def test_sorted_inputs_skip_the_sort():
    # inputs in order (ties kept) take the path without a sort: same answers as the dense GPR
    t, y = _data()
    order = np.argsort(t, kind="stable")
    t, y = t[order], y[order]
    ss, dense = _models("matern32_plus_sho", t, y)
    v_ss, g_ss = ss.log_marginal_likelihood_and_grad()
    v_d, g_d = dense.log_marginal_likelihood_and_grad()
    assert abs(float(v_ss) - float(v_d)) <= 1e-9 * abs(float(v_d))
    for key in g_d:
        scale = max(abs(float(np.reshape(g_d[key], ()))), 1e-3 * abs(float(v_d)) / N)
        assert abs(float(np.reshape(g_ss[key], ())) - float(np.reshape(g_d[key], ()))) \
            <= 1e-9 * scale, key
    Xs = _new_inputs(t)[:, None]
    mu_ss, cov_ss = ss.predict_f(Xs, full_cov=True)
    mu_d, cov_d = dense.predict_f(Xs, full_cov=True)
    assert _rel(mu_ss, mu_d) < 1e-9
    assert _rel(cov_ss, cov_d) < 1e-9


def test_samples_match_the_dense_posterior():
    t, y = _data(n=80, seed=3)
    ss, dense = _models("matern32_plus_sho", t, y)
    Xs = np.array([-3.0, 10.0, t[4], 50.5, 120.0])[:, None]
    check_samples_against_dense(ss, dense, Xs, 4000)


def check_samples_against_dense(ss, dense, Xs, num):
    """``num`` draws of ``ss.sample_f`` at ``Xs`` (numpy) against the dense posterior: means and
    covariances within 4.5 Monte Carlo standard errors, and reproducible from the seed."""
    mean, cov = dense.predict_f(Xs, full_cov=True)
    S = np.asarray(ss.sample_f(Xs, num, seed=7))
    assert S.shape == (num, Xs.shape[0])
    se_mean = np.sqrt(np.diag(cov) / num)
    assert np.all(np.abs(S.mean(0) - mean) < 4.5 * se_mean)
    emp = np.cov(S.T)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov ** 2) / num)
    assert np.all(np.abs(emp - cov) < 4.5 * se_cov)
    np.testing.assert_array_equal(S, np.asarray(ss.sample_f(Xs, num, seed=7)))


# ------------------------------------------------------------- backends, dtypes
@pytest.mark.parametrize("in_order", [False, True])  # True: the path without a sort
def test_every_backend_against_float64_dense(xp, dtype, device, to_xp, in_order):
    t, y = _data(n=200, seed=4)
    if in_order:
        order = np.argsort(t, kind="stable")
        t, y = t[order], y[order]
    t32 = t.astype(np.float32).astype(np.float64)  # the inputs a float32 model sees
    kw = {"xp": xp, "dtype": dtype, "device": device}
    kern = _kernels(**kw)["matern32_plus_sho"]
    ss = GPR(kern, Gaussian(variance=0.09, **kw), to_xp(t[:, None]), to_xp(y), mean=0.15,
             solver="state_space")
    _, dense = _models("matern32_plus_sho", t32 if dtype == xp.float32 else t, y)
    check_backend_against_dense(ss, dense, to_xp(_new_inputs(t)[:, None]), xp, dtype)


def check_backend_against_dense(ss, dense, Xs, xp, dtype):
    """A state-space model on any backend and dtype against the float64 dense GPR ``dense``:
    the LML and gradients (1e-9 relative in float64, 1e-4 in float32), the predictions at
    ``Xs`` (an array of ``ss``'s namespace; 10x those), and the dtype of a few samples."""
    v, g = ss.log_marginal_likelihood_and_grad()
    assert v.dtype == dtype and v.shape == ()
    v_d, g_d = dense.log_marginal_likelihood_and_grad()
    tol = 1e-4 if dtype == xp.float32 else 1e-9
    assert abs(float(v) - float(v_d)) <= tol * abs(float(v_d))
    for key in g_d:
        assert g[key].dtype == dtype
        got = float(np.reshape(np.asarray(B.to_numpy(g[key]), dtype=np.float64), ()))
        want = float(np.reshape(np.asarray(B.to_numpy(g_d[key]), dtype=np.float64), ()))
        assert abs(got - want) <= tol * max(1.0, abs(want))
    mu, var = ss.predict_f(Xs)
    mu_d, var_d = dense.predict_f(np.asarray(B.to_numpy(Xs), dtype=np.float64))
    assert mu.dtype == dtype
    assert _rel(B.to_numpy(mu), mu_d) < tol * 10
    assert _rel(B.to_numpy(var), var_d) < tol * 10
    S = ss.sample_f(Xs[:3, :], 5, seed=1)
    assert S.shape == (5, 3) and S.dtype == dtype


def test_float32_long_series_stays_accurate():
    # float32 data and parameters; the filter runs in float64 (module notes), so a long
    # series loses nothing beyond the float32 rounding of its inputs.
    rng = np.random.default_rng(9)
    n = 20000
    t = np.sort(rng.uniform(0.0, 2000.0, n)).astype(np.float32)
    y = (np.sin(0.3 * t) + 0.2 * rng.standard_normal(n)).astype(np.float32)
    models = []
    for dt in (np.float32, np.float64):
        kern = (K.Matern32(lengthscale=3.0, variance=0.6, dtype=dt.__name__)
                + K.SHO(variance=1.0, period=20.0, quality=4.0, dtype=dt.__name__))
        models.append(GPR(kern, Gaussian(variance=0.04, dtype=dt.__name__), t[:, None].astype(dt),
                          y.astype(dt), solver="state_space"))
    v32, g32 = models[0].log_marginal_likelihood_and_grad()
    v64, g64 = models[1].log_marginal_likelihood_and_grad()
    assert abs(float(v32) - float(v64)) <= 1e-6 * abs(float(v64))
    for key in g64:
        assert abs(float(g32[key]) - float(g64[key])) <= 1e-5 * max(1.0, abs(float(g64[key])))


# ------------------------------------------------------------- solver choice, errors, fit
def test_auto_picks_state_space_for_one_column_and_a_form():
    t, y = _data()
    big = GPR(K.Matern32(), Gaussian(), t[:, None], y, solver="auto")
    assert big.uses_state_space and not big.uses_cg
    small = GPR(K.Matern32(), Gaussian(), t[:20, None], y[:20], solver="auto")
    assert not small.uses_state_space
    rbf = GPR(K.RBF(), Gaussian(), t[:, None], y, solver="auto")
    assert not rbf.uses_state_space
    two = GPR(K.Matern32(), Gaussian(), np.stack([t, t], axis=1), y, solver="auto")
    assert not two.uses_state_space


def test_clear_errors():
    t, y = _data(n=30)
    with pytest.raises(TypeError, match="RBF"):
        GPR(K.RBF(), Gaussian(), t[:, None], y, solver="state_space")
    with pytest.raises(ShapeError, match="one input column"):
        GPR(K.Matern32(), Gaussian(), np.stack([t, t], axis=1), y, solver="state_space")


def test_checkpoint_config_round_trip():
    t, y = _data(n=50)
    ss = GPR(K.Matern32() + K.SHO(), Gaussian(), t[:, None], y, solver="state_space")
    assert ss.config()["solver"] == "state_space"
    again = GPR.from_config(ss.kernel, ss.likelihood, ss.parameters(), ss.config(), ss.data())
    assert again.uses_state_space
    assert float(again.log_marginal_likelihood()) == float(ss.log_marginal_likelihood())


def test_fit_lbfgs_reaches_the_dense_optimum():
    # (a Matern-3/2: with an SHO on this nearly periodic signal the quality factor runs off
    # to infinity, and both optimisers stop at different points of a flat ridge)
    t, y = _data(n=150, seed=6)
    check_fit_reaches_dense(*_models("matern32", t, y), maxiter=500)


def check_fit_reaches_dense(ss, dense, maxiter):
    """L-BFGS-B from the same start: the state-space model ``ss`` gains, and reaches the dense
    model's optimum (LML to 1e-9, parameters to 1e-5)."""
    start = float(ss.log_marginal_likelihood())
    gpnum.fit(ss, optimizer="lbfgs", maxiter=maxiter)
    gpnum.fit(dense, optimizer="lbfgs", maxiter=maxiter)
    v_ss, v_d = float(ss.log_marginal_likelihood()), float(dense.log_marginal_likelihood())
    assert v_ss > start + 1.0
    assert abs(v_ss - v_d) <= 1e-9 * abs(v_d)
    for key, value in dense.parameters().items():
        assert _rel(ss.parameters()[key], value) < 1e-5, key
