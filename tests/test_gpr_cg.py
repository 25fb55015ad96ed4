"""GPR(solver="cg"): BBMM against dense NumPy references (issue 33).

- blocked kernel products and their vjp against dense ones;
- the pivoted-Cholesky preconditioner's log-determinant against a dense one;
- block PCG's Lanczos tridiagonals: the quadrature of log det exact with orthogonal probes;
- the CG log marginal likelihood and gradient: to 1e-8 (value) and against finite differences
  of a dense NumPy LML with exactly orthogonal (Hadamard) probes and a tight tolerance; within
  their stated stochastic error with Rademacher probes (n = 300 on every backend, n = 2,000 once);
- LOVE variances and the cached mean against the exact posterior.
"""

import numpy as np
import pytest
from gradcheck import numerical_grad

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.linalg import (
    AddedDiag,
    KernelMatrix,
    lanczos_quadrature,
    pcg_lanczos,
    pivoted_cholesky_preconditioner,
    preconditioner_probes,
)
from gpnum.models import GPR, CGOptions
from gpnum.optim import fit_exact_gp

LS = np.array([0.7, 1.1, 1.6])


def matern32_np(X1, X2, ls, var):
    r = np.sqrt(np.maximum((((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(-1), 0.0))
    s = np.sqrt(3.0) * r
    return var * (1.0 + s) * np.exp(-s)


def dense_lml(X, y, ls, var, s2, c):
    Ky = matern32_np(X, X, ls, var) + s2 * np.eye(len(y))
    r = y - c
    return -0.5 * (r @ np.linalg.solve(Ky, r) + np.linalg.slogdet(Ky)[1]
                   + len(y) * np.log(2 * np.pi))


def data(n, seed=0, d=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def build(X, y, to_xp=None, xp=None, dtype=None, device=None, s2=0.05, c=0.1, **options):
    kw = {} if xp is None else {"xp": xp, "dtype": dtype, "device": device}
    kern = Matern32(lengthscale=LS[:X.shape[1]], variance=1.2, **kw)
    lik = Gaussian(variance=s2, **kw)
    if to_xp is not None:
        X, y = to_xp(X), to_xp(y)
    return GPR(kern, lik, X, y, mean=c, solver="cg", cg_options=options)


def host(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


# --------------------------------------------------------------------------- linear algebra
def test_blocked_product_and_vjp_against_dense(xp, dtype, device, to_xp):
    X, _ = data(23)
    kern = Matern32(lengthscale=LS, variance=1.2, xp=xp, dtype=dtype, device=device)
    Xx = to_xp(X)
    rng = np.random.default_rng(1)
    R, U, V = (rng.standard_normal((23, 4)) for _ in range(3))
    op = KernelMatrix(kern, Xx, block_size=5, compute_dtype=xp.float64)
    assert op.dtype == xp.float64
    K = matern32_np(X, X, LS, 1.2)
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    got = host(op @ B.asarray(R, dtype=xp.float64, xp=xp, device=device))
    np.testing.assert_allclose(got, K @ R, rtol=tol, atol=tol)
    g = op.param_vjp(B.asarray(U, dtype=xp.float64, xp=xp, device=device),
                     B.asarray(V, dtype=xp.float64, xp=xp, device=device))["kernel"]
    dense = kern.gram_vjp(to_xp(U @ V.T), Xx)["params"]
    for name in ("lengthscale", "variance"):
        np.testing.assert_allclose(host(g[name]), host(dense[name]), rtol=50 * tol, atol=50 * tol)
    # And against finite differences of sum(U V^T * K) in NumPy (float64 reference).
    f_ls = lambda ls: np.sum((U @ V.T) * matern32_np(X, X, ls, 1.2))  # noqa: E731
    np.testing.assert_allclose(host(g["lengthscale"]), numerical_grad(f_ls, LS),
                               rtol=1e-3 if dtype == xp.float32 else 1e-6)
    # products and backward pass in blocks of different sizes (GPR's blocked CG path)
    op2 = KernelMatrix(kern, Xx, block_size=3, vjp_block_size=8, compute_dtype=xp.float64)
    got = host(op2 @ B.asarray(R, dtype=xp.float64, xp=xp, device=device))
    np.testing.assert_allclose(got, K @ R, rtol=tol, atol=tol)
    g2 = op2.param_vjp(B.asarray(U, dtype=xp.float64, xp=xp, device=device),
                       B.asarray(V, dtype=xp.float64, xp=xp, device=device))["kernel"]
    for name in ("lengthscale", "variance"):
        np.testing.assert_allclose(host(g2[name]), host(dense[name]), rtol=50 * tol,
                                   atol=50 * tol)
    with pytest.raises(ValueError, match="vjp_block_size: expected an integer >= 1"):
        KernelMatrix(kern, Xx, block_size=3, vjp_block_size=0)


def test_preconditioner_logdet_against_dense(xp, dtype, device, to_xp):
    X, _ = data(40)
    kern = Matern32(lengthscale=LS, variance=1.2, xp=xp, dtype=dtype, device=device)
    A = AddedDiag(KernelMatrix(kern, to_xp(X), block_size=16, compute_dtype=xp.float64),
                  B.asarray(0.05, dtype=xp.float64, xp=xp, device=device))
    M = pivoted_cholesky_preconditioner(A, rank=12)
    F = host(M.lowrank.factor)
    P = F @ F.T + 0.05 * np.eye(40)
    np.testing.assert_allclose(float(M.logdet()), np.linalg.slogdet(P)[1], rtol=1e-10)
    v = np.random.default_rng(2).standard_normal((40, 2))
    np.testing.assert_allclose(host(M @ B.asarray(v, dtype=xp.float64, xp=xp, device=device)),
                               np.linalg.solve(P, v), rtol=1e-8, atol=1e-8)
    # The pivoted-Cholesky residual is positive semi-definite: P <= K + s2 I.
    K = matern32_np(X, X, LS, 1.2)
    tol = 1e-4 if dtype == xp.float32 else 1e-9
    assert np.linalg.eigvalsh(K - F @ F.T).min() > -tol


def test_pcg_lanczos_quadrature_exact_with_orthogonal_probes(xp, device):
    X, y = data(24)
    kern = Matern32(lengthscale=LS, variance=1.2, xp=xp, dtype=xp.float64, device=device)
    Xx = B.asarray(X, dtype=xp.float64, xp=xp, device=device)
    A = AddedDiag(KernelMatrix(kern, Xx, block_size=10),
                  B.asarray(0.05, dtype=xp.float64, xp=xp, device=device))
    M = pivoted_cholesky_preconditioner(A, rank=5)
    Z = preconditioner_probes(M, 1, design="hadamard")                # (24, 32)
    yb = B.asarray(y, dtype=xp.float64, xp=xp, device=device)
    res = pcg_lanczos(A, xp.concat([yb[:, None], Z], axis=1), M=M, rtol=1e-12, maxiter=24,
                      min_iter=24)
    Ky = matern32_np(X, X, LS, 1.2) + 0.05 * np.eye(24)
    np.testing.assert_allclose(host(res.x[:, 0]), np.linalg.solve(Ky, y), rtol=1e-8, atol=1e-8)
    quad = lanczos_quadrature(res.tridiag_alpha[1:, :], res.tridiag_beta[1:, :],
                              res.start_norm2[1:])
    est = float(M.logdet()) + float(xp.mean(quad))
    np.testing.assert_allclose(est, np.linalg.slogdet(Ky)[1], rtol=1e-9)


# --------------------------------------------------------------------------- GPR(solver="cg")
def test_cg_lml_and_grad_exact_with_hadamard_probes(xp, dtype, device, to_xp):
    n = 60
    X, y = data(n)
    model = build(X, y, to_xp, xp, dtype, device, probe_design="hadamard", precond_rank=10,
                  train_rtol=1e-11, min_iter=n, maxiter=n)
    value, grads = model.objective_and_grad()
    ref = dense_lml(X, y, LS, 1.2, 0.05, 0.1)
    f32 = dtype == xp.float32
    np.testing.assert_allclose(float(value), ref, rtol=1e-5 if f32 else 1e-8)
    rtol = 1e-3 if f32 else 1e-6
    checks = {
        "kernel.lengthscale": (lambda v: dense_lml(X, y, v, 1.2, 0.05, 0.1), LS),
        "kernel.variance": (lambda v: dense_lml(X, y, LS, v[0], 0.05, 0.1), np.array([1.2])),
        "likelihood.variance": (lambda v: dense_lml(X, y, LS, 1.2, v[0], 0.1), np.array([0.05])),
        "mean": (lambda v: dense_lml(X, y, LS, 1.2, 0.05, v[0]), np.array([0.1])),
    }
    for name, (f, x0) in checks.items():
        np.testing.assert_allclose(host(grads[name]).reshape(-1), numerical_grad(f, x0),
                                   rtol=rtol, err_msg=name)


def test_cg_lml_and_grad_within_stated_error(xp, device):
    # Rademacher probes: the estimates are unbiased; 4 stated standard errors, and the
    # gradients' mean over 6 seeds within 4 standard errors of their spread. A tight solve
    # (rtol 1e-6) isolates the probes' error from the loose training solve's.
    n = 300
    X, y = data(n, seed=3)
    ref = dense_lml(X, y, LS, 1.2, 0.05, 0.1)
    exact = GPR(Matern32(lengthscale=LS, variance=1.2), Gaussian(variance=0.05), X, y,
                mean=0.1).objective_and_grad()[1]
    to_xp = lambda a: B.asarray(a, dtype=xp.float64, xp=xp, device=device)  # noqa: E731
    vals, grads = [], []
    for seed in range(6):
        model = build(X, y, to_xp, xp, xp.float64, device, seed=seed, num_probes=8,
                      precond_rank=20, train_rtol=1e-6)
        v, g = model.objective_and_grad()
        info = model.cg_info
        assert abs(float(v) - ref) <= 4.0 * info["lml_std_error"] + 1e-6
        assert (abs(float(g["likelihood.variance"]) - float(exact["likelihood.variance"]))
                <= 4.0 * info["noise_grad_std_error"] + 1e-6)
        vals.append(float(v))
        grads.append(np.concatenate([host(g[k]).reshape(-1) for k in sorted(exact)]))
    grads = np.array(grads)
    want = np.concatenate([np.asarray(exact[k], dtype=float).reshape(-1) for k in sorted(exact)])
    spread = grads.std(axis=0, ddof=1) / np.sqrt(len(grads))
    assert np.all(np.abs(grads.mean(axis=0) - want) <= 4.0 * spread + 1e-3 * np.abs(want))
    # Seeded: the same seed gives the same estimate.
    again = build(X, y, to_xp, xp, xp.float64, device, seed=5, num_probes=8, precond_rank=20,
                  train_rtol=1e-6)
    assert float(again.log_marginal_likelihood()) == vals[5]


def test_cg_lml_n2000_within_stated_error():
    n = 2000
    X, y = data(n, seed=4)
    model = build(X, y, precond_rank=50, dense_limit_mib=0.0, memory_budget_mib=16.0)
    value, grads = model.objective_and_grad()
    info = model.cg_info
    ref = dense_lml(X, y, LS, 1.2, 0.05, 0.1)
    assert abs(float(value) - ref) <= 4.0 * info["lml_std_error"]
    exact = GPR(Matern32(lengthscale=LS, variance=1.2), Gaussian(variance=0.05), X, y,
                mean=0.1).objective_and_grad()[1]
    assert (abs(float(grads["likelihood.variance"]) - float(exact["likelihood.variance"]))
            <= 4.0 * info["noise_grad_std_error"])
    # The mean's gradient is sum(K^-1 r): no probes, only the solve's tolerance (rtol 1.0
    # after 20 preconditioned iterations).
    assert info["relative_residual"] <= 1.0
    np.testing.assert_allclose(float(grads["mean"]), float(exact["mean"]), rtol=0.1)


def test_love_variances_and_mean_against_exact(xp, dtype, device, to_xp):
    # LOVE with a full Krylov space (rank n) is exact; at rank 100 (n = 400, 2-D Matern-3/2,
    # noise 0.1) its variances are within 0.02 of the exact ones (measured max 0.010, an
    # under-estimate: docs/exact-gp.md). The mean within the prediction tolerance.
    X, y = data(400, seed=5, d=2)
    Xs, _ = data(30, seed=6, d=2)
    kw = dict(precond_rank=50, love_rank=100)
    model = build(X, y, to_xp, xp, dtype, device, s2=0.1, **kw)
    mean, var = model.predict_f(to_xp(Xs))
    K = matern32_np(X, X, LS[:2], 1.2) + 0.1 * np.eye(400)
    Ks = matern32_np(X, Xs, LS[:2], 1.2)
    mean_ref = 0.1 + Ks.T @ np.linalg.solve(K, y - 0.1)
    var_ref = 1.2 - np.einsum("ij,ij->j", Ks, np.linalg.solve(K, Ks))
    np.testing.assert_allclose(host(mean), mean_ref, atol=0.01 * np.abs(mean_ref).max())
    np.testing.assert_allclose(host(var), var_ref, atol=0.02)
    # full_cov: the same LOVE cache, the diagonal matches.
    _, cov = model.predict_f(to_xp(Xs[:5]), full_cov=True)
    np.testing.assert_allclose(np.diag(host(cov)), var_ref[:5], atol=0.02)
    full = build(X, y, to_xp, xp, dtype, device, s2=0.1, precond_rank=50, love_rank=400,
                 predict_rtol=1e-8)
    _, var_full = full.predict_f(to_xp(Xs))
    np.testing.assert_allclose(host(var_full), var_ref,
                               atol=1e-3 if dtype == xp.float32 else 1e-6)


def test_solver_argument_and_config():
    X, y = data(30)
    with pytest.raises(ValueError, match="solver"):
        GPR(Matern32(lengthscale=LS), Gaussian(), X, y, solver="lu")
    with pytest.raises(KeyError, match="num_probe"):
        GPR(Matern32(lengthscale=LS), Gaussian(), X, y, solver="cg", cg_options={"num_probe": 3})
    with pytest.raises(ValueError, match="num_probes"):
        CGOptions(num_probes=0)
    auto = GPR(Matern32(lengthscale=LS), Gaussian(), X, y, solver="auto")
    assert not auto.uses_cg
    cg = GPR(Matern32(lengthscale=LS), Gaussian(), X, y, solver="cg",
             cg_options={"num_probes": 4})
    rebuilt = GPR.from_config(cg.kernel, cg.likelihood, {"mean": cg.mean}, cg.config(), cg.data())
    assert rebuilt.uses_cg and rebuilt.cg_options.num_probes == 4


def test_fit_exact_gp_recipe_improves_the_exact_lml():
    X, y = data(300, seed=7)
    model = GPR(Matern32(lengthscale=np.ones(3)), Gaussian(variance=0.5), X, y,
                solver="cg", cg_options={"precond_rank": 20})
    before = dense_lml(X, y, np.ones(3), 1.0, 0.5, 0.0)
    fit_exact_gp(model, subset_size=100, lbfgs_maxiter=30, subset_adam_steps=2,
                 full_adam_steps=2, lr=0.01)
    p = {k: host(v) for k, v in model.parameters().items()}
    after = dense_lml(X, y, p["kernel.lengthscale"], float(p["kernel.variance"]),
                      float(p["likelihood.variance"]), float(p["mean"]))
    assert after > before + 50.0


def test_cg_objective_with_a_given_kernel_operator():
    # The seam of gpnum.distributed: any float64 operator for K_XX. A blocked KernelMatrix with
    # converged solves gives the model's own (dense, formed once) value and gradients.
    X, y = data(80)
    tight = dict(precond_rank=20, train_rtol=1e-12, maxiter=200)
    model = build(X, y, **tight)
    op = KernelMatrix(model.kernel, model.X, block_size=13, compute_dtype=np.float64)
    value, grads = model.cg_objective_and_grad(op)
    ref_value, ref_grads = model.objective_and_grad()
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-12)
    for k in ref_grads:
        np.testing.assert_allclose(host(grads[k]), host(ref_grads[k]), rtol=1e-9, atol=1e-12)
    small = KernelMatrix(model.kernel, model.X[:40], compute_dtype=np.float64)
    with pytest.raises(ShapeError, match=r"kernel_operator: expected shape \(80, 80\)"):
        model.cg_objective_and_grad(small)
    exact = GPR(Matern32(lengthscale=LS), Gaussian(variance=0.05), X, y)
    with pytest.raises(ValueError, match="solver resolves to Cholesky"):
        exact.cg_objective_and_grad(op)


def test_cg_refuses_a_vanishing_noise_in_one_line_and_a_jitter_floor_fixes_it():
    # The noise variance L-BFGS drives towards 0 on nearly noise-free targets (bike): the
    # CG path names the problem and the fix instead of overflowing in its preconditioner.
    from gpnum.errors import NotPSDError

    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2))
    y = np.sin(X[:, 0])
    gp = GPR(Matern32(lengthscale=np.ones(2)), Gaussian(variance=1e-300), X, y, solver="cg")
    with pytest.raises(NotPSDError, match=r"noise variance \+ jitter = 1e-300 .* jitter=1e-4"):
        gp.predict_y(X[:3])
    with pytest.raises(NotPSDError, match="solver='cholesky'"):
        gp.objective_and_grad(X, y)
    # with the floor, CG predicts what the Cholesky solve of the same K + 1e-4 I does
    gp = GPR(Matern32(lengthscale=np.ones(2)), Gaussian(variance=1e-300), X, y, solver="cg",
             jitter=1e-4, cg_options={"predict_rtol": 1e-10})
    K = Matern32(lengthscale=np.ones(2))(X)
    Ks = Matern32(lengthscale=np.ones(2))(X[:3], X)
    ref = Ks @ np.linalg.solve(K + (1e-300 + 1e-4) * np.eye(200), y)
    np.testing.assert_allclose(np.asarray(gp.predict_f(X[:3])[0]), ref, rtol=1e-6, atol=1e-8)


def _small_noise_problem():
    # bike's regime: a smooth target, signal variance 100, noise 1e-4
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, (400, 2))
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] ** 2
    Xs = rng.uniform(-2, 2, (50, 2))
    ls, var, s2 = np.array([1.5, 1.5]), 100.0, 1e-4
    K = matern32_np(X, X, ls, var) + s2 * np.eye(400)
    Ks = matern32_np(X, Xs, ls, var)
    mean = Ks.T @ np.linalg.solve(K, y)
    v = var - np.sum(Ks * np.linalg.solve(K, Ks), axis=0)

    def model(**options):
        return GPR(Matern32(lengthscale=ls, variance=var), Gaussian(variance=s2), X, y,
                   solver="cg", cg_options=options)

    return model, Xs, mean, v, s2


def test_default_predict_rtol_scales_with_the_noise_so_small_noise_means_stay_exact():
    # A residual r moves the mean at a new point by up to sqrt(k**) |r| / sigma: with a tiny
    # noise GPyTorch's fixed 0.01 leaves the means far from the exact ones.
    model, Xs, mean_ref, _, s2 = _small_noise_problem()
    loose = model(predict_rtol=0.01, precond_rank=20)
    auto = model(precond_rank=20)
    with pytest.warns(Warning):        # the variance check (next test); means are what count
        err_loose = np.max(np.abs(np.asarray(loose.predict_f(Xs)[0]) - mean_ref))
        err_auto = np.max(np.abs(np.asarray(auto.predict_f(Xs)[0]) - mean_ref))
    assert auto.cg_predict_info["rtol"] == pytest.approx(0.01 * np.sqrt(s2 / 100.0))
    assert loose.cg_predict_info["rtol"] == 0.01
    assert auto.cg_predict_info["relative_residual"] <= auto.cg_predict_info["rtol"]
    assert err_auto < 2e-4 and err_loose > 20 * err_auto
    # a noise as large as the signal keeps GPyTorch's 0.01
    X, y = data(60)
    big = GPR(Matern32(lengthscale=LS, variance=0.5), Gaussian(variance=1.0), X, y, solver="cg")
    big.predict_f(X[:2])
    assert big.cg_predict_info["rtol"] == 0.01
    with pytest.raises(ValueError, match="predict_rtol: expected a positive number"):
        CGOptions(predict_rtol=0.0)


def test_love_variances_are_checked_against_exact_solves_and_a_bad_cache_warns():
    from gpnum.errors import ConvergenceWarning

    # the preconditioner leaves most of K (variance 100) above the noise 1e-4: LOVE's
    # variances are wrong, and the check says so (the dense posterior confirms it)
    model, Xs, _, var_ref, s2 = _small_noise_problem()
    gp = model(precond_rank=20)
    with pytest.warns(ConvergenceWarning, match="LOVE predictive variances are off"):
        var = np.asarray(gp.predict_f(Xs)[1])
    assert gp.cg_predict_info["variance_check"] > 0.1
    assert np.max(np.abs(var - var_ref) / (var_ref + s2)) > 0.1
    # noise 0.05: rank 50 leaves LOVE's variances off by up to 0.8 of the predictive
    # variance at new points (dense reference), and the check warns; rank 150 gets them right
    # (0.0065) and does not warn
    X, y = data(300)
    Xs = np.random.default_rng(9).uniform(-2, 2, (20, 3))
    Ky = matern32_np(X, X, LS, 1.2) + 0.05 * np.eye(300)
    Ks = matern32_np(X, Xs, LS, 1.2)
    with pytest.warns(ConvergenceWarning, match="LOVE predictive variances are off"):
        var = np.asarray(build(X, y, precond_rank=50, love_rank=100).predict_f(Xs)[1])
    exact = 1.2 - np.sum(Ks * np.linalg.solve(Ky, Ks), axis=0)
    assert np.max(np.abs(var - exact) / (exact + 0.05)) > 0.3
    good = build(X, y, precond_rank=150, love_rank=150)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        var = np.asarray(good.predict_f(Xs)[1])
    exact = 1.2 - np.sum(Ks * np.linalg.solve(Ky, Ks), axis=0)
    assert good.cg_predict_info["variance_check"] < 0.1
    np.testing.assert_array_less(np.abs(var - exact) / (exact + 0.05), 0.1)
