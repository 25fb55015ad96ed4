"""GPR(solver="grid") and GPR(solver="ski") against the dense Cholesky GPR (issue 49).

- complete grid, product kernel over separate axes: the exact Kronecker path's log marginal
  likelihood, gradient and predictions against dense Cholesky (1e-9), its gradient against
  finite differences of itself;
- incomplete grid (Toeplitz and Kronecker operators on the observed cells): BBMM with exactly
  orthogonal (Hadamard) probes and a tight CG tolerance, which make the stochastic estimates
  exact up to that tolerance, against dense Cholesky on the observed cells;
- SKI on scattered inputs: within the interpolation error of the dense GPR.
"""

import numpy as np
import pytest
from gradcheck import check_grad
from test_linalg_cases import torch_single_thread  # noqa: F401

from gpnum import backend as B
from gpnum.kernels import RBF, Matern52, Product
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

EXACT_CG = {"probe_design": "hadamard", "train_rtol": 1e-7, "maxiter": 500, "precond_rank": 3,
            "predict_rtol": 1e-11, "variance_checks": 0}


def host(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


def grid_data(shape=(5, 4), seed=0, drop=0):
    rng = np.random.default_rng(seed)
    axes = [np.linspace(0.0, 2.0, shape[0]), np.linspace(-1.0, 1.0, shape[1])]
    mesh = np.meshgrid(*axes, indexing="ij")
    X = np.stack([m.reshape(-1) for m in mesh], axis=1)
    order = rng.permutation(X.shape[0])[:X.shape[0] - drop]     # shuffled, maybe incomplete
    X = X[order]
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(X.shape[0])
    return X, y


def product_kernel(xp, dtype, device):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    return Product(RBF(lengthscale=0.7, variance=1.3, active_dims=[0], **kw),
                   Matern52(lengthscale=0.9, variance=0.8, active_dims=[1], **kw))


def ard_kernel(xp, dtype, device):
    return RBF(lengthscale=[0.8, 1.1], variance=1.2, xp=xp, dtype=dtype, device=device)


def models(kernel_fn, X, y, to_xp, xp, device, solver, **kw):
    out = []
    for s in ("cholesky", solver):
        k = kernel_fn(xp, xp.float64, device)
        lik = Gaussian(variance=0.05, xp=xp, dtype=xp.float64, device=device)
        out.append(GPR(k, lik, to_xp(X), to_xp(y), mean=0.2, solver=s,
                       **(kw if s == solver else {})))
    return out


def _compare(dense, fast, rtol, atol):
    v0, g0 = dense.log_marginal_likelihood_and_grad()
    v1, g1 = fast.log_marginal_likelihood_and_grad()
    np.testing.assert_allclose(host(v1), host(v0), rtol=rtol)
    assert set(g0) == set(g1)
    for name in g0:
        np.testing.assert_allclose(host(g1[name]), host(g0[name]), rtol=rtol, atol=atol,
                                   err_msg=name)


def test_complete_grid_kronecker_is_exact(to_xp, xp, dtype, device):
    if dtype != xp.float64:
        pytest.skip("the 1e-9 comparison runs in float64")
    X, y = grid_data((6, 5))
    dense, fast = models(product_kernel, X, y, to_xp, xp, device, "grid")
    _compare(dense, fast, 1e-9, 1e-11)
    assert fast.cg_info is None                      # no stochastic estimate on this path
    Xs = to_xp(np.array([[0.3, 0.1], [1.7, -0.6], [2.5, 1.4]]))
    m0, v0 = dense.predict_f(Xs)
    m1, v1 = fast.predict_f(Xs)
    np.testing.assert_allclose(host(m1), host(m0), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(host(v1), host(v0), rtol=1e-9, atol=1e-11)
    c0 = dense.predict_f(Xs, full_cov=True)[1]
    c1 = fast.predict_f(Xs, full_cov=True)[1]
    np.testing.assert_allclose(host(c1), host(c0), rtol=1e-9, atol=1e-11)


def test_complete_grid_gradient_matches_finite_differences(to_xp, xp, dtype, device):
    if dtype != xp.float64 or xp.__name__ != "array_api_compat.numpy":
        pytest.skip("finite differences once, in float64 NumPy")
    X, y = grid_data((5, 4), seed=1)
    _, fast = models(product_kernel, X, y, to_xp, xp, device, "grid")
    _, grads = fast.log_marginal_likelihood_and_grad()
    params = {k: host(v) for k, v in fast.parameters().items()}
    for name in grads:
        def f(v, name=name):
            fast.set_parameters({**{k: to_xp(p) for k, p in params.items()}, name: to_xp(v)})
            return float(host(fast.log_marginal_likelihood()))

        check_grad(f, params[name], host(grads[name]), name=name)


@pytest.mark.parametrize("kernel_fn", [product_kernel, ard_kernel], ids=["kronecker", "toeplitz"])
def test_incomplete_grid_matches_dense_on_observed_cells(kernel_fn, to_xp, xp, dtype, device):
    """Hadamard probes (2^m >= n + rank, exactly orthogonal) make the stochastic
    log-determinant and trace exact; what remains is the CG tolerance's."""
    if dtype != xp.float64:
        pytest.skip("the dense comparison runs in float64")
    X, y = grid_data((5, 5), seed=2, drop=4)         # 21 of 25 cells observed
    dense, fast = models(kernel_fn, X, y, to_xp, xp, device, "grid", cg_options=EXACT_CG)
    _compare(dense, fast, 1e-6, 1e-7)
    Xs = to_xp(np.array([[0.3, 0.1], [1.7, -0.6]]))
    m0, v0 = dense.predict_f(Xs)
    m1, v1 = fast.predict_f(Xs)
    np.testing.assert_allclose(host(m1), host(m0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(host(v1), host(v0), rtol=1e-6, atol=1e-8)


def test_ski_within_interpolation_error(to_xp, xp, dtype, device):
    if dtype != xp.float64:
        pytest.skip("the dense comparison runs in float64")
    rng = np.random.default_rng(4)
    X = rng.uniform(0.0, 3.0, size=(50, 2))
    y = np.sin(2.0 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(50)
    errors = []
    for g in (16, 32):
        dense, fast = models(ard_kernel, X, y, to_xp, xp, device, "ski", cg_options=EXACT_CG,
                             grid_size=g)
        v0, g0 = dense.log_marginal_likelihood_and_grad()
        v1, g1 = fast.log_marginal_likelihood_and_grad()
        errors.append(abs(float(host(v1)) - float(host(v0))))
        for name in g0:
            np.testing.assert_allclose(host(g1[name]), host(g0[name]), rtol=2e-2, atol=1e-2,
                                       err_msg=name)
        m0, _ = dense.predict_f(to_xp(X[:5]))
        m1, _ = fast.predict_f(to_xp(X[:5]))
        np.testing.assert_allclose(host(m1), host(m0), atol=2e-2)
    assert errors[1] < 2e-3 and errors[1] < errors[0] / 4.0, errors


def test_structured_solver_errors(to_xp, xp, dtype, device):
    if dtype != xp.float64:
        pytest.skip("errors checked once per backend")
    X, y = grid_data((3, 3))
    k = ard_kernel(xp, xp.float64, device)
    lik = Gaussian(variance=0.05, xp=xp, dtype=xp.float64, device=device)
    with pytest.raises(ValueError, match="repeat a grid cell"):
        GPR(k, lik, to_xp(np.concatenate([X, X[:1]])), to_xp(np.append(y, 0.0)), solver="grid")
    with pytest.raises(ValueError, match="only solver='ski' takes a grid size"):
        GPR(k, lik, to_xp(X), to_xp(y), solver="grid", grid_size=10)
    with pytest.raises(ValueError, match="grid_size: expected an integer >= 4"):
        GPR(k, lik, to_xp(X), to_xp(y), solver="ski", grid_size=3)
    X4 = np.random.default_rng(0).normal(size=(10, 4))
    k4 = RBF(lengthscale=1.0, xp=xp, dtype=xp.float64, device=device)
    with pytest.raises(ValueError, match="at most 3 columns"):
        GPR(k4, lik, to_xp(X4), to_xp(X4[:, 0]), solver="ski")


@pytest.mark.parametrize("kernel_fn,drop", [(product_kernel, 0), (ard_kernel, 3)],
                         ids=["kronecker-exact", "toeplitz-cg"])
def test_float32_data_agree_with_float64(kernel_fn, drop, to_xp, xp, dtype, device):
    """float32 data: kernels evaluated in float32, the solvers in float64; the results in
    float32 and within float32 rounding of the float64 model's."""
    if dtype != xp.float32:
        pytest.skip("float32 against float64")
    X, y = grid_data((6, 5), drop=drop)
    results = []
    for dt in (xp.float32, xp.float64):
        m = GPR(kernel_fn(xp, dt, device), Gaussian(variance=0.05, xp=xp, dtype=dt,
                                                    device=device),
                B.asarray(X, dtype=dt, xp=xp, device=device),
                B.asarray(y, dtype=dt, xp=xp, device=device), solver="grid",
                cg_options={"probe_design": "hadamard", "train_rtol": 1e-6})
        v, g = m.log_marginal_likelihood_and_grad()
        mu, var = m.predict_f(B.asarray(X[:3], dtype=dt, xp=xp, device=device))
        assert v.dtype == dt and mu.dtype == dt and var.dtype == dt
        assert all(a.dtype == dt for a in g.values())
        results.append((host(v), {k: host(a) for k, a in g.items()}, host(mu), host(var)))
    (v32, g32, m32, s32), (v64, g64, m64, s64) = results
    np.testing.assert_allclose(v32, v64, rtol=1e-5)
    for k in g64:
        np.testing.assert_allclose(g32[k], g64[k], rtol=1e-4, atol=1e-4, err_msg=k)
    np.testing.assert_allclose(m32, m64, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s32, s64, rtol=1e-3, atol=1e-5)


def test_auto_takes_the_grid_solver_on_grids_beyond_cholesky(monkeypatch, to_xp, xp, dtype,
                                                            device):
    if dtype != xp.float64 or xp.__name__ != "array_api_compat.numpy":
        pytest.skip("once")
    from gpnum.models import _gpr_grid

    monkeypatch.setattr(GPR, "AUTO_CHOLESKY_MAX_N", 10)        # "beyond Cholesky" at n = 30
    X, y = grid_data((6, 5))
    dense, auto = models(product_kernel, X, y, to_xp, xp, device, "auto")
    assert _gpr_grid.structured(auto) == "grid"
    np.testing.assert_allclose(host(auto.log_marginal_likelihood()),
                               host(dense.log_marginal_likelihood()), rtol=1e-9)
    rng = np.random.default_rng(5)
    scattered = GPR(product_kernel(xp, xp.float64, device), Gaussian(variance=0.05),
                    to_xp(rng.uniform(size=(30, 2))), to_xp(y), solver="auto")
    assert _gpr_grid.structured(scattered) is None and scattered.uses_cg


@pytest.mark.parametrize("kernel_fn,drop", [(product_kernel, 0), (ard_kernel, 5)],
                         ids=["kronecker-exact", "toeplitz-cg"])
def test_predictions_at_grid_cells(kernel_fn, drop, to_xp, xp, dtype, device):
    """New points on cells of the training grid (observed and missing ones): means from one
    structured product, cross-covariances gathered from the grid operator; against dense."""
    if dtype != xp.float64:
        pytest.skip("the dense comparison runs in float64")
    Xall, _ = grid_data((5, 5), seed=3)
    X, y = grid_data((5, 5), seed=3, drop=drop)
    dense, fast = models(kernel_fn, X, y, to_xp, xp, device, "grid", cg_options=EXACT_CG)
    Xs = to_xp(Xall[:9])
    m0, v0 = dense.predict_f(Xs)
    m1, v1 = fast.predict_f(Xs)
    np.testing.assert_allclose(host(m1), host(m0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(host(v1), host(v0), rtol=1e-6, atol=1e-8)
    c0 = dense.predict_f(Xs, full_cov=True)[1]
    c1 = fast.predict_f(Xs, full_cov=True)[1]
    np.testing.assert_allclose(host(c1), host(c0), rtol=1e-6, atol=1e-8)


def test_sample_f_off_the_grid_matches_the_posterior(to_xp, xp, dtype, device):
    """Pathwise samples at points off the grid (the CG path's CIQ draw and solve) against the
    grid model's own posterior: sample means within 5 Monte Carlo standard errors, variances
    within 10%."""
    if dtype != xp.float64 or xp.__name__ != "array_api_compat.numpy":
        pytest.skip("once")
    X, y = grid_data((5, 4), drop=3)
    _, fast = models(ard_kernel, X, y, to_xp, xp, device, "grid")
    Xs = to_xp(X[:4] + 0.05)
    S = host(fast.sample_f(Xs, 4000, seed=1))
    mu, var = (host(a) for a in fast.predict_f(Xs))
    assert np.all(np.abs(S.mean(0) - mu) < 5.0 * np.sqrt(var / 4000))
    np.testing.assert_allclose(S.var(0), var, rtol=0.1)


@pytest.mark.parametrize("kernel_fn,drop", [(product_kernel, 0), (ard_kernel, 5)],
                         ids=["kronecker-exact", "toeplitz-cg"])
def test_sample_f_at_grid_cells_matches_the_dense_posterior(kernel_fn, drop, to_xp, xp, dtype,
                                                            device):
    """Samples at cells of the grid (observed and missing: the circulant-embedding prior draw
    over every cell, the exact or PCG solve) against the dense Cholesky GPR's posterior:
    means within 5 Monte Carlo standard errors, covariances within 5 standard errors of a
    covariance entry, sqrt((S_ii S_jj + S_ij^2) / N)."""
    Xall, _ = grid_data((5, 5), seed=3)
    X, y = grid_data((5, 5), seed=3, drop=drop)
    kw = {"cg_options": {**EXACT_CG, "predict_rtol": 1e-10}} if drop else {}

    def build(solver, dt, **extra):
        lik = Gaussian(variance=0.05, xp=xp, dtype=dt, device=device)
        return GPR(kernel_fn(xp, dt, device), lik, to_xp(X, dtype=dt), to_xp(y, dtype=dt),
                   mean=0.2, solver=solver, **extra)

    dense, fast = build("cholesky", xp.float64), build("grid", dtype, **kw)   # data in dtype
    Xs = Xall[[0, 1, 7, 13]]
    num = 2000
    S = host(fast.sample_f(to_xp(Xs), num, seed=2))
    mean, cov = (host(a) for a in dense.predict_f(to_xp(Xs, dtype=xp.float64), full_cov=True))
    d = np.diag(cov)
    assert np.all(np.abs(S.mean(0) - mean) < 5.0 * np.sqrt(d / num))
    se = np.sqrt((d[:, None] * d[None, :] + cov ** 2) / num)
    assert np.all(np.abs(np.cov(S.T) - cov) < 5.0 * se)


@pytest.mark.parametrize("kernel_fn", [product_kernel, ard_kernel], ids=["kronecker", "toeplitz"])
def test_love_variances_for_all_cells_equal_the_per_point_ones(kernel_fn, to_xp, xp, dtype,
                                                               device):
    """LOVE's quadratic forms for every grid cell at once (structured products) equal the
    per-point ones (_gpr_cg._love_quad on gathered kernel columns), at a low LOVE rank where
    both differ from the exact variance."""
    if dtype != xp.float64:
        pytest.skip("float64")
    from gpnum.models import _gpr_cg, _gpr_grid

    X, y = grid_data((5, 5), seed=3, drop=5)
    opts = dict(EXACT_CG, love_rank=5, precond_rank=3)
    _, fast = models(kernel_fn, X, y, to_xp, xp, device, "grid", cg_options=opts)
    state = _gpr_grid.prediction_state(fast)
    op, _ = _gpr_grid._structure(fast, fast.X)
    every = _gpr_grid._love_quad_all_cells(op.operator, op, state)
    cells = _gpr_grid._grid(fast, fast.X)[1]
    per_point = _gpr_cg._love_quad(state, xp.take(op.operator.to_dense(), cells, axis=0))[0]
    np.testing.assert_allclose(host(every), host(per_point), rtol=1e-10, atol=1e-12)
