"""The L-BFGS-B driver (gpnum.optim.lbfgs) against SciPy on a hand-written dense NumPy log
marginal likelihood; its log-coordinate gradient against finite differences; restarts, the
stop reason and its warning; gpnum.fit and GPRegressor through it."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

import gpnum
from gpnum import backend as B
from gpnum.errors import ConvergenceWarning
from gpnum.kernels import RBF
from gpnum.likelihoods import Gaussian
from gpnum.optim import lbfgs


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (n, 2))
    y = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=n)
    return X, y


def _dense_lml(theta, X, y):
    """ARD RBF + Gaussian noise, zero mean, in log parameters: (l1, l2, variance, noise)."""
    ls, s2, noise = np.exp(theta[:2]), np.exp(theta[2]), np.exp(theta[3])
    D = ((X[:, None, :] - X[None, :, :]) / ls) ** 2
    K = s2 * np.exp(-0.5 * D.sum(-1)) + noise * np.eye(len(y))
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return -0.5 * y @ a - np.log(np.diag(L)).sum() - 0.5 * len(y) * np.log(2 * np.pi)


def _gpr(X, y, lengthscale=(1.0, 1.0), variance=1.0, noise=0.5):
    return gpnum.GPR(RBF(lengthscale=np.array(lengthscale), variance=variance),
                     Gaussian(variance=noise), X, y, mean=0.0)


def test_the_driver_reaches_the_dense_optimum():
    X, y = _data()
    ref = max((minimize(lambda t: -_dense_lml(t, X, y), t0, method="L-BFGS-B")
               for t0 in (np.zeros(4), np.array([0.5, 0.5, 0.0, -2.0]))),
              key=lambda r: -r.fun)
    model = _gpr(X, y)
    result = lbfgs(model, fixed=["mean"])
    assert result.converged and result.stop_reason.startswith("CONVERGENCE")
    assert result.objective >= -ref.fun - 1e-6
    np.testing.assert_allclose(result.objective, -ref.fun, rtol=0, atol=1e-5)
    p = model.parameters()
    theta = np.log(np.concatenate([B.to_numpy(p["kernel.lengthscale"]),
                                   [B.to_numpy(p["kernel.variance"]),
                                    B.to_numpy(p["likelihood.variance"])]]))
    np.testing.assert_allclose(_dense_lml(theta, X, y), result.objective, rtol=1e-10)
    assert result.num_eval >= result.num_iter >= 1 and len(result.trace) == result.num_iter


def test_log_coordinate_gradient_against_finite_differences():
    from gpnum.optim._lbfgs import _Coordinates

    X, y = _data(20, seed=1)
    model = _gpr(X, y, lengthscale=(0.7, 1.9), variance=1.3, noise=0.2)
    names = [k for k in model.parameters() if k != "mean"]
    coords = _Coordinates(model, names, "log")
    x0 = coords.current()
    value, grads = model.objective_and_grad(X, y)
    g = coords.gradient(grads)
    h = 1e-6
    for i in range(x0.size):
        e = np.zeros_like(x0)
        e[i] = h
        coords.assign(x0 + e)
        up = float(model.objective_and_grad(X, y)[0])
        coords.assign(x0 - e)
        down = float(model.objective_and_grad(X, y)[0])
        fd = (up - down) / (2 * h)
        assert abs(g[i] - fd) <= 1e-6 * max(abs(fd), 1.0), (i, g[i], fd)
    coords.assign(x0)
    np.testing.assert_allclose(coords.current(), x0, rtol=1e-15, atol=1e-15)


def test_restarts_keep_the_best_run():
    X, y = _data(30, seed=2)
    one = _gpr(X, y, lengthscale=(30.0, 30.0), variance=0.05)  # a poor start
    r1 = lbfgs(one, fixed=["mean"], warn=False)
    many = _gpr(X, y, lengthscale=(30.0, 30.0), variance=0.05)
    r4 = lbfgs(many, fixed=["mean"], n_restarts=3, seed=0, restart_bounds=(0.1, 10.0),
               warn=False)
    assert len(r4.runs) == 4
    assert r4.objective == pytest.approx(max(r["objective"] for r in r4.runs), abs=1e-9)
    assert r4.objective >= r1.objective - 1e-9
    assert r4.runs[r4.best_run]["objective"] == pytest.approx(r4.objective, abs=1e-9)
    # the value kept is the model's, recomputed at its parameters
    assert r4.objective == pytest.approx(float(many.log_marginal_likelihood()), rel=1e-12)
    assert r4.num_iter == sum(r["num_iter"] for r in r4.runs)
    # same seed, same draws
    again = _gpr(X, y, lengthscale=(30.0, 30.0), variance=0.05)
    r4b = lbfgs(again, fixed=["mean"], n_restarts=3, seed=0, restart_bounds=(0.1, 10.0),
                warn=False)
    assert r4b.objective == r4.objective


def test_the_stop_reason_is_recorded_and_warned():
    X, y = _data()
    model = _gpr(X, y)
    with pytest.warns(ConvergenceWarning, match="ITERATIONS REACHED LIMIT"):
        result = lbfgs(model, fixed=["mean"], maxiter=2)
    assert not result.converged and "LIMIT" in result.stop_reason and result.num_iter == 2
    model = _gpr(X, y)
    with pytest.warns(ConvergenceWarning, match="stopped without converging after 2"):
        history = gpnum.fit(model, maxiter=2, progress=False)
    assert history.num_iter == 2 and "LIMIT" in history.stop_reason
    assert history.stopped.startswith("L-BFGS-B:")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        history = gpnum.fit(_gpr(X, y), progress=False)
    assert history.stopped is None and history.stop_reason.startswith("CONVERGENCE")


def test_coordinates_and_bounds():
    X, y = _data(25, seed=3)
    log = _gpr(X, y)
    soft = _gpr(X, y)
    r_log = lbfgs(log, fixed=["mean"])
    r_soft = lbfgs(soft, fixed=["mean"], coordinates="softplus")
    assert r_soft.objective == pytest.approx(r_log.objective, abs=1e-4)
    boxed = _gpr(X, y)
    lbfgs(boxed, fixed=["mean"], bounds=(0.3, 3.0), warn=False)
    for k in boxed.positive_names():
        v = B.to_numpy(boxed.parameters()[k])
        assert np.all(v >= 0.3 * (1 - 1e-12)) and np.all(v <= 3.0 * (1 + 1e-12)), k
    with pytest.raises(ValueError, match="coordinates"):
        lbfgs(_gpr(X, y), coordinates="exp")
    with pytest.raises(ValueError, match="bounds: only with coordinates='log'"):
        lbfgs(_gpr(X, y), coordinates="softplus", bounds=(0.1, 1.0))
    svgp = gpnum.SVGP(RBF(), Gaussian(), X[:5], num_data=25)
    with pytest.raises(ValueError, match="full-batch"):
        lbfgs(svgp, X, y)


def test_gpregressor_maxiter_and_the_deprecated_spelling():
    pytest.importorskip("sklearn")
    from gpnum.sklearn import GPRegressor

    X, y = _data(20)
    est = GPRegressor(RBF(np.ones(2)), alpha=0.01, maxiter=3)
    with pytest.warns(ConvergenceWarning):
        est.fit(X, y)
    assert est.optimizer_result_.num_iter == 3 == est.n_iter_
    with pytest.warns(DeprecationWarning, match="max_iter"):
        old = GPRegressor(RBF(np.ones(2)), alpha=0.01, max_iter=50).fit(X, y)
    assert old.n_iter_ <= 50


def test_a_capped_cg_fit_reports_its_stop():
    X, y = _data(60, seed=4)
    model = gpnum.GPR(RBF(np.ones(2)), Gaussian(variance=0.3), X, y, solver="cg")
    with pytest.warns(ConvergenceWarning, match="L-BFGS-B stopped"):
        history = gpnum.fit(model, maxiter=3, progress=False)
    assert history.stopped is not None and "LIMIT" in history.stop_reason


def test_a_cg_fit_that_passes_scipys_test_far_from_stationarity_is_reported():
    # CG's inexact solves (train_rtol=1.0) give a gradient that is not that of the values:
    # SciPy's relative-reduction test then passes after 2 iterations with a large gradient
    # left (issue 48: "stopped=None and no warning").
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, (100, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=100)
    X = X + 0.01 * np.random.default_rng(1).normal(size=X.shape)
    model = gpnum.GPR(RBF(np.ones(2)), Gaussian(variance=0.5), X, y, solver="cg",
                      cg_options={"min_iter": 5})
    with pytest.warns(ConvergenceWarning, match="projected gradient is"):
        history = gpnum.fit(model, progress=False)
    assert history.stopped is not None and "RELATIVE REDUCTION" in history.stop_reason
    # the gradient it reports, recomputed: d LML / d log p per data point
    _, grads = model.objective_and_grad()
    p = model.parameters()
    g = max(float(np.max(np.abs(B.to_numpy(grads[k] * p[k])))) for k in model.positive_names())
    assert g / 100 > 1e-3


def test_trial_points_silence_numpy_without_touching_the_warning_filters():
    """NumPy's floating-point warnings at L-BFGS-B's trial points are silenced through NumPy's
    per-thread error state: the process-wide warning filters are never modified during a fit
    (fits in parallel threads would race on them), a trial point's overflow raises no warning,
    and the start keeps NumPy's state as the caller set it."""
    X, y = _data()
    model = _gpr(X, y)
    inner = model.objective_and_grad
    seen = {"calls": 0, "filters": [], "start_errstate": None}

    def watched(*args, **kwargs):
        seen["calls"] += 1
        seen["filters"].append(list(warnings.filters))
        if seen["calls"] == 1:
            seen["start_errstate"] = np.geterr()
        elif seen["calls"] == 2:
            np.exp(np.full(3, 1e3))  # an overflow at the first trial point
        return inner(*args, **kwargs)

    model.objective_and_grad = watched
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught, np.errstate(over="warn"):
        warnings.simplefilter("always")
        outer = list(warnings.filters)
        lbfgs(model, maxiter=5, warn=False)
    assert list(warnings.filters) == before
    assert seen["calls"] > 1
    assert all(f == outer for f in seen["filters"])
    assert seen["start_errstate"]["over"] == "warn"
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
