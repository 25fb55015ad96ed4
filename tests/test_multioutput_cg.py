"""MultiOutputGPR(solver="cg"): conjugate gradients on the observed entries (Kronecker products
and a mask) against the dense NumPy Cholesky reference of tests/test_multioutput.py.

With Hadamard probes (exactly orthogonal, so that the stochastic trace and log-determinant
estimates are exact) and a tight CG tolerance the estimates equal the exact values up to the
solver's tolerance: the algebra is checked at 1e-8. With the default Rademacher probes the log
marginal likelihood is checked within its reported standard error."""

import warnings

import numpy as np
import pytest
from gradcheck import check_grad, numerical_grad, relative_error
from test_multioutput import T, data, lml_np, make_model, posterior_np, start

from gpnum import backend as B
from gpnum.errors import ConvergenceWarning, NotPSDError
from gpnum.models import MultiOutputGPR

# exact estimates: 2^m >= N_o + precond_rank Hadamard probes, CG to rounding level
EXACT = {"probe_design": "hadamard", "train_rtol": 1e-11, "maxiter": 2000, "precond_rank": 10,
         "predict_rtol": 1e-12, "love_rank": 1000}


def _cg_model(kind, p, X, Y, xp, dtype, device, opts=EXACT):
    return make_model(kind, p, X, Y, xp, dtype, device, solver="cg", cg_options=opts)


# a memory limit no n x n array fits in: the latent grams become blocked KernelMatrix products
BLOCKED = {**EXACT, "dense_limit_mib": 1e-6}


def _assert_blocked(model, blocked):
    from gpnum.linalg import KernelMatrix
    from gpnum.models._multioutput_cg import _factors

    grams = _factors(model, model._X, True)[0]
    assert all(isinstance(K, KernelMatrix) == blocked for K in grams)


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("kind", ["icm", "lmc"])
def test_cg_lml_and_gradient_match_dense_cholesky(kind, blocked, xp, device):
    X, Y, _, rng = data(n=40, missing=0.3)
    p = start(kind, rng)
    model = _cg_model(kind, p, X, Y, xp, xp.float64, device, BLOCKED if blocked else EXACT)
    assert model.uses_cg and not model.uses_kronecker
    _assert_blocked(model, blocked)
    value, grads = model.log_marginal_likelihood_and_grad()
    ref = lml_np(kind, p, X, Y)
    assert abs(float(value) - ref) <= 1e-9 * abs(ref)
    assert abs(float(model.log_marginal_likelihood()) - ref) <= 1e-9 * abs(ref)
    assert set(grads) == set(model.parameters())
    for name, v in p.items():
        v = np.array(v, dtype=np.float64)
        g = B.to_numpy(grads[name])
        assert g.shape == v.shape, name
        check_grad(lambda x, name=name: lml_np(kind, {**p, name: x}, X, Y), v, g, name=name)


def test_cg_gradient_finite_differences_of_its_own_objective():
    # With exact probes the CG objective is a smooth function of the parameters: its gradient
    # against central differences of the CG objective itself (not of the reference).
    X, Y, _, rng = data(n=30, missing=0.3)
    p = start("icm", rng)
    model = _cg_model("icm", p, X, Y, np, np.float64, "cpu")
    _, grads = model.log_marginal_likelihood_and_grad()
    base = {k: np.array(v, dtype=np.float64) for k, v in model.parameters().items()}
    for name in ("kernel.kernel.lengthscale", "kernel.coregion.W", "likelihood.variance"):
        def f(x, name=name):
            model.set_parameters({**base, name: x})
            return float(model.log_marginal_likelihood())

        check_grad(f, base[name], grads[name], name=name, rtol=1e-6)
        model.set_parameters(base)


def test_cg_isotopic_matches_kronecker_path():
    X, Y, _, rng = data(n=30)
    p = start("icm", rng)
    kron = make_model("icm", p, X, Y, np, np.float64, "cpu")
    cg = _cg_model("icm", p, X, Y, np, np.float64, "cpu")
    assert kron.uses_kronecker and cg.uses_cg
    v0, g0 = kron.log_marginal_likelihood_and_grad()
    v1, g1 = cg.log_marginal_likelihood_and_grad()
    assert abs(float(v0) - float(v1)) <= 1e-9 * abs(float(v0))
    for name in g0:
        assert relative_error(np.asarray(g1[name]), np.asarray(g0[name])) < 1e-7, name


def test_cg_rademacher_probes_within_stated_error():
    # the default estimator (10 Rademacher probes, rtol 1, 20 CG iterations) at n = 60 with
    # 30% missing: the LML within four of its reported standard errors of the exact value;
    # the gradient, unbiased when the solves converge (E[u v^T] = Sigma^-1 for probes of
    # covariance P), averaged over 10 seeds within four Monte-Carlo standard errors
    X, Y, _, rng = data(n=60, missing=0.3)
    p = start("icm", rng)
    ref = lml_np("icm", p, X, Y)
    exact = make_model("icm", p, X, Y, np, np.float64, "cpu", solver="cholesky")
    _, g_ref = exact.log_marginal_likelihood_and_grad()
    draws = {name: [] for name in g_ref}
    for seed in range(10):
        model = _cg_model("icm", p, X, Y, np, np.float64, "cpu", opts={"seed": seed})
        value, grads = model.log_marginal_likelihood_and_grad()
        info = model.cg_info
        assert info["lml_std_error"] > 0.0
        assert abs(float(value) - ref) <= 4.0 * info["lml_std_error"] + 1e-6 * abs(ref)
        for name in draws:
            draws[name].append(np.asarray(grads[name], dtype=np.float64))
    for name, values in draws.items():
        values = np.stack(values)
        se = values.std(axis=0, ddof=1) / np.sqrt(values.shape[0])
        err = np.abs(values.mean(axis=0) - np.asarray(g_ref[name]))
        assert np.all(err <= 4.0 * se + 1e-8 * np.abs(g_ref[name]).max()), (name, err, se)


def test_cg_float32_smoke(xp, device):
    X, Y, _, rng = data(n=40, missing=0.3)
    p = start("icm", rng)
    opts = {**EXACT, "train_rtol": 1e-5, "predict_rtol": 1e-5}
    model = _cg_model("icm", p, X, Y, xp, xp.float32, device, opts=opts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        value, grads = model.log_marginal_likelihood_and_grad()
        mean, var = model.predict_f(B.asarray(X[:5], xp=xp, dtype=xp.float32, device=device))
    assert value.dtype == xp.float32 and grads["kernel.coregion.W"].dtype == xp.float32
    ref = lml_np("icm", p, X, Y)
    assert abs(float(value) - ref) <= 1e-3 * abs(ref)
    num = numerical_grad(lambda x: lml_np("icm", {**p, "kernel.kernel.lengthscale": x}, X, Y),
                         p["kernel.kernel.lengthscale"])
    assert relative_error(B.to_numpy(grads["kernel.kernel.lengthscale"]), num) < 1e-2
    assert mean.dtype == xp.float32 and tuple(var.shape) == (5, T)


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("kind", ["icm", "lmc"])
def test_cg_predictions_match_dense_posterior(kind, blocked, xp, device):
    X, Y, Xs, rng = data(n=40, missing=0.3)
    p = start(kind, rng)
    model = _cg_model(kind, p, X, Y, xp, xp.float64, device, BLOCKED if blocked else EXACT)
    _assert_blocked(model, blocked)
    model._predict_chunk = 2 * T    # two test inputs per block: the blocks are stitched
    mean_ref, cov_ref = posterior_np(kind, p, X, Y, Xs)
    m = Xs.shape[0]
    Xn = B.asarray(Xs, xp=xp, dtype=xp.float64, device=device)
    mean, var = model.predict_f(Xn)
    np.testing.assert_allclose(B.to_numpy(mean), mean_ref, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(B.to_numpy(var), np.diagonal(cov_ref).reshape(m, T),
                               rtol=1e-7, atol=1e-8)
    _, out = model.predict_f(Xn, full_output_cov=True)
    blocks = np.stack([cov_ref[i * T:(i + 1) * T, i * T:(i + 1) * T] for i in range(m)])
    np.testing.assert_allclose(B.to_numpy(out), blocks, rtol=1e-7, atol=1e-8)
    _, full = model.predict_f(Xn, full_cov=True)
    np.testing.assert_allclose(B.to_numpy(full), cov_ref, rtol=1e-7, atol=1e-8)


def test_auto_switches_to_cg_beyond_the_cholesky_limit(monkeypatch):
    X, Y, _, rng = data(n=30, missing=0.3)
    p = start("lmc", rng)
    model = make_model("lmc", p, X, Y, np, np.float64, "cpu", cg_options=EXACT)
    n_obs = int(np.sum(~np.isnan(Y)))
    assert not model.uses_cg and model.blas_pool == "scipy"
    monkeypatch.setattr(MultiOutputGPR, "cholesky_limit", n_obs - 1)
    assert model.uses_cg and model.blas_pool == "numpy"
    value, _ = model.log_marginal_likelihood_and_grad()
    assert abs(float(value) - lml_np("lmc", p, X, Y)) <= 1e-9 * abs(float(value))
    monkeypatch.setattr(MultiOutputGPR, "cholesky_limit", n_obs)
    assert not model.uses_cg


def test_cg_config_round_trip_and_errors():
    X, Y, _, rng = data(n=20, missing=0.3)
    p = start("icm", rng)
    model = _cg_model("icm", p, X, Y, np, np.float64, "cpu")
    config = model.config()
    assert config["solver"] == "cg" and config["cg_options"]["probe_design"] == "hadamard"
    again = MultiOutputGPR.from_config(model.kernel, model.likelihood, model.parameters(),
                                       config, {"X": X, "y": Y})
    assert again.cg_options == model.cg_options and again.uses_cg
    with pytest.raises(ValueError, match="'cg'"):
        make_model("icm", p, X, Y, np, np.float64, "cpu", solver="lanczos")
    with pytest.raises(KeyError, match="unknown"):
        make_model("icm", p, X, Y, np, np.float64, "cpu", solver="cg", cg_options={"rank": 3})
    tiny = {**p, "likelihood.variance": np.full(T, 1e-14)}
    with pytest.raises(NotPSDError, match="jitter"):
        _cg_model("icm", tiny, X, Y, np, np.float64, "cpu").log_marginal_likelihood()


def test_cg_warns_when_the_solve_stops_short():
    X, Y, _, rng = data(n=30, missing=0.3)
    p = start("icm", rng)
    model = _cg_model("icm", p, X, Y, np, np.float64, "cpu",
                      opts={"train_rtol": 1e-12, "maxiter": 3, "min_iter": 1,
                            "precond_rank": 0})
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        model.log_marginal_likelihood_and_grad()
    assert model.cg_info["num_iter"] == 3 and model.cg_info["relative_residual"] > 1e-12
