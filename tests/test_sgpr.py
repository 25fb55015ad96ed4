"""SGPR: Titsias' collapsed bound against its dense formula, the exact-GP limit Z = X against
GPR and a dense log marginal likelihood, predictions against the dense optimal-q(u) posterior,
gradients (inducing points included) against finite differences, and bad input."""

import numpy as np
import pytest
from gradcheck import check_grad
from kernel_refs_everyday import rbf_reference
from scipy.stats import norm

import gpnum
from gpnum import backend as B
from gpnum.kernels import RBF, Matern52
from gpnum.likelihoods import Gaussian, StudentT
from gpnum.models import GPR, SGPR

# ---------------------------------------------------------------- independent NumPy reference

LS_ARD = np.array([0.6, 1.1])


rbf_np = rbf_reference


def matern52_np(X1, X2, ls, var):
    r = np.sqrt((((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(-1))
    s5 = np.sqrt(5.0) * r
    return var * (1.0 + s5 + s5**2 / 3.0) * np.exp(-s5)


# name -> (NumPy gram function, gpnum kernel builder)
KERNELS = {
    "rbf_ard": (lambda A, C: rbf_np(A, C, LS_ARD, 1.3),
                lambda **kw: RBF(lengthscale=LS_ARD, variance=1.3, **kw)),
    "sum": (lambda A, C: rbf_np(A, C, LS_ARD, 1.3) + matern52_np(A, C, 0.4, 0.5),
            lambda **kw: RBF(lengthscale=LS_ARD, variance=1.3, **kw)
            + Matern52(lengthscale=0.4, variance=0.5, **kw)),
}

JITTER = 1e-6


def problem(seed=0, n=40, m=8, d=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.standard_normal(n)
    Z = rng.uniform(-1.5, 1.5, (m, d))
    Xs = rng.uniform(-2.0, 2.0, (7, d))
    ys = np.sin(2.0 * Xs[:, 0]) + 0.5 * Xs[:, 1]
    return X, y, Z, Xs, ys


def titsias_dense(kfun, X, y, Z, s2, c, jitter=JITTER):
    """log N(y | c, Q_nn + s2 I) - tr(K_nn - Q_nn) / (2 s2), everything dense (n x n)."""
    n = len(y)
    Kzz = kfun(Z, Z) + jitter * np.eye(len(Z))
    Kzx = kfun(Z, X)
    Q = Kzx.T @ np.linalg.solve(Kzz, Kzx)
    Sigma = Q + s2 * np.eye(n)
    r = y - c
    log_n = -0.5 * (r @ np.linalg.solve(Sigma, r) + np.linalg.slogdet(Sigma)[1]
                    + n * np.log(2 * np.pi))
    return log_n - np.trace(kfun(X, X) - Q) / (2 * s2)


def dense_lml(K, y, s2, c):
    Ky = K + s2 * np.eye(len(y))
    r = y - c
    return -0.5 * (r @ np.linalg.solve(Ky, r) + np.linalg.slogdet(Ky)[1]
                   + len(y) * np.log(2 * np.pi))


def dense_q_posterior(kfun, X, y, Z, Xs, s2, c, jitter=JITTER):
    """Titsias' optimal q(u) = N(m_u, S_u) and the predictive p(f*) = int p(f* | u) q(u) du.

    m_u = K_ZZ M^{-1} K_ZX (y - c) / s2, S_u = K_ZZ M^{-1} K_ZZ, M = K_ZZ + K_ZX K_XZ / s2.
    """
    Kzz = kfun(Z, Z) + jitter * np.eye(len(Z))
    Kzx = kfun(Z, X)
    M = Kzz + Kzx @ Kzx.T / s2
    m_u = Kzz @ np.linalg.solve(M, Kzx @ (y - c)) / s2
    S_u = Kzz @ np.linalg.solve(M, Kzz)
    Ksz = kfun(Xs, Z)
    P = np.linalg.solve(Kzz, Ksz.T).T  # K_*Z K_ZZ^{-1}
    mean = c + P @ m_u
    cov = kfun(Xs, Xs) - P @ Ksz.T + P @ S_u @ P.T
    return mean, cov


def build(kernel_name, X, y, Z, s2=0.2, c=0.3, xp=None, dtype=None, device=None,
          jitter=JITTER):
    kw = {} if xp is None else {"xp": xp, "dtype": dtype, "device": device}
    kern = KERNELS[kernel_name][1](**kw)
    lik = Gaussian(variance=s2, **kw)
    if xp is not None:
        X, y, Z = (B.asarray(a, dtype=dtype, xp=xp, device=device) for a in (X, y, Z))
    return SGPR(kern, lik, X, y, Z, mean=c, jitter=jitter)


def host(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


# ---------------------------------------------------------------- the bound


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_bound_matches_titsias_dense_float64(kernel_name):
    X, y, Z, _, _ = problem()
    model = build(kernel_name, X, y, Z)
    ref = titsias_dense(KERNELS[kernel_name][0], X, y, Z, 0.2, 0.3)
    assert abs(float(host(model.elbo())) - ref) <= 1e-9 * abs(ref)
    value, _ = model.elbo_and_grad()
    assert abs(float(host(value)) - ref) <= 1e-9 * abs(ref)
    # A lower bound on the exact log marginal likelihood (Titsias 2009).
    assert ref < dense_lml(KERNELS[kernel_name][0](X, X), y, 0.2, 0.3)


def test_bound_on_every_backend(xp, dtype, device):
    X, y, Z, _, _ = problem(1)
    model = build("sum", X, y, Z, xp=xp, dtype=dtype, device=device)
    ref = titsias_dense(KERNELS["sum"][0], X, y, Z, 0.2, 0.3)
    value = model.elbo()
    assert B.get_namespace(value) is xp and value.dtype == dtype and value.shape == ()
    rtol = 1e-9 if dtype == xp.float64 else 1e-4
    assert abs(float(host(value)) - ref) <= rtol * abs(ref)
    value, grads = model.objective_and_grad()
    assert abs(float(host(value)) - ref) <= rtol * abs(ref)
    params = model.parameters()
    assert list(grads) == list(params)
    for name, g in grads.items():
        assert type(g) is type(params[name]), name  # genuine arrays, not NumPy scalars
        assert B.get_namespace(g) is xp and g.dtype == dtype, name
        assert tuple(g.shape) == tuple(params[name].shape), name
        assert B.device_of(g) == B.device_of(params[name]), name


def test_z_equal_x_is_the_exact_gp():
    # Q_nn = K_nn up to the jitter: the bound is the exact log marginal likelihood, and the
    # optimal q(u) gives the exact posterior.
    X, y, _, Xs, _ = problem(2, n=20)
    kfun = KERNELS["rbf_ard"][0]
    jitter = 1e-9
    sgpr = build("rbf_ard", X, y, X, s2=0.1, jitter=jitter)
    gpr = GPR(KERNELS["rbf_ard"][1](), Gaussian(variance=0.1), X, y, mean=0.3)
    ref = dense_lml(kfun(X, X), y, 0.1, 0.3)
    np.testing.assert_allclose(float(gpr.log_marginal_likelihood()), ref, rtol=1e-10)
    np.testing.assert_allclose(float(sgpr.elbo()), ref, rtol=1e-6)
    np.testing.assert_allclose(float(sgpr.elbo()), float(gpr.log_marginal_likelihood()),
                               rtol=1e-6)
    for a, b in zip(sgpr.predict_f(Xs, full_cov=True), gpr.predict_f(Xs, full_cov=True), strict=False):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- gradients


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_gradients_finite_differences(kernel_name, xp, device):
    X, y, Z, _, _ = problem(3, n=15, m=5)
    model = build(kernel_name, X, y, Z, s2=0.15, c=-0.2, xp=xp, dtype=xp.float64,
                  device=device)
    _, grads = model.elbo_and_grad()
    params = {k: host(v).copy() for k, v in model.parameters().items()}
    assert set(grads) == set(params)
    for name, p0 in params.items():
        def f(p, name=name):
            model.set_parameters({name: p})
            try:
                return float(host(model.elbo()))
            finally:
                model.set_parameters({name: params[name]})
        check_grad(f, p0, host(grads[name]), name=name)
    _, g2 = model.objective_and_grad()
    for name in grads:
        np.testing.assert_allclose(host(g2[name]), host(grads[name]), rtol=1e-12)


def test_gradients_with_noise_near_signal_and_poor_inducing_points():
    # A large trace term and B far from I (few inducing points in a corner, small noise).
    rng = np.random.default_rng(4)
    X, y, _, _, _ = problem(4, n=20)
    Z = rng.uniform(0.5, 1.5, (4, 2))
    model = build("rbf_ard", X, y, Z, s2=0.03, c=0.1)
    _, grads = model.objective_and_grad()
    params = {k: host(v).copy() for k, v in model.parameters().items()}
    for name, p0 in params.items():
        def f(p, name=name):
            model.set_parameters({name: p})
            try:
                return float(model.elbo())
            finally:
                model.set_parameters({name: params[name]})
        check_grad(f, p0, host(grads[name]), name=name)


def test_unconstrained_gradients_finite_differences():
    X, y, Z, _, _ = problem(5, n=12, m=4)
    model = build("sum", X, y, Z, s2=0.3)
    _, grads = model.objective_and_grad()
    ugrads = model.grad_to_unconstrained(grads)
    u0 = {k: host(v).copy() for k, v in model.unconstrained().items()}
    assert set(ugrads) == set(u0) == set(model.parameters())
    for name, p0 in u0.items():
        def f(p, name=name):
            model.set_unconstrained({name: p})
            try:
                return float(model.elbo())
            finally:
                model.set_unconstrained({name: u0[name]})
        check_grad(f, p0, host(ugrads[name]), name=name)


def test_no_n_by_n_matrix():
    # At n = 100000 an (n, n) float64 matrix would need 80 GB: the bound, its gradient and the
    # predictions must run in O(n m) memory.
    rng = np.random.default_rng(6)
    n = 100_000
    X = rng.uniform(-1.5, 1.5, (n, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    Z = rng.uniform(-1.5, 1.5, (6, 2))
    model = build("rbf_ard", X, y, Z)
    value, grads = model.elbo_and_grad()
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(host(g))) for g in grads.values())
    mean, var = model.predict_f(X[:5000])
    assert mean.shape == var.shape == (5000,)


# ---------------------------------------------------------------- predictions


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_predictions_match_dense_optimal_q(kernel_name, xp, dtype, device):
    X, y, Z, Xs, ys = problem(7)
    s2, c = 0.2, 0.3
    model = build(kernel_name, X, y, Z, s2=s2, c=c, xp=xp, dtype=dtype, device=device)
    mean_ref, cov_ref = dense_q_posterior(KERNELS[kernel_name][0], X, y, Z, Xs, s2, c)
    var_ref = np.diag(cov_ref)
    Xb = B.asarray(Xs, dtype=dtype, xp=xp, device=device)
    yb = B.asarray(ys, dtype=dtype, xp=xp, device=device)
    rtol, atol = (1e-8, 1e-10) if dtype == xp.float64 else (2e-3, 2e-4)
    mean, var = model.predict_f(Xb)
    assert mean.shape == (7,) and var.shape == (7,) and var.dtype == dtype
    np.testing.assert_allclose(host(mean), mean_ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(host(var), var_ref, rtol=rtol, atol=atol)
    mean, cov = model.predict_f(Xb, full_cov=True)
    assert cov.shape == (7, 7)
    np.testing.assert_allclose(host(mean), mean_ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(host(cov), cov_ref, rtol=rtol, atol=atol)
    my, vy = model.predict_y(Xb)
    np.testing.assert_allclose(host(my), mean_ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(host(vy), var_ref + s2, rtol=rtol, atol=atol)
    lpd = model.log_predictive_density(Xb, yb)
    np.testing.assert_allclose(host(lpd), norm.logpdf(ys, mean_ref, np.sqrt(var_ref + s2)),
                               rtol=rtol, atol=atol)


# ---------------------------------------------------------------- model protocol


def test_parameters_config_and_data():
    X, y, Z, _, _ = problem(8)
    model = build("rbf_ard", X, y, Z, jitter=None)
    assert model.full_batch is True and model.num_inducing == 8
    assert list(model.parameters()) == ["mean", "inducing_points", "kernel.lengthscale",
                                        "kernel.variance", "likelihood.variance"]
    assert model.config() == {"jitter": 1e-6}
    assert set(model.data()) == {"X", "y"}
    np.testing.assert_array_equal(model.parameters()["inducing_points"], Z)
    Z2 = Z + 0.1
    model.set_parameters({"inducing_points": Z2, "kernel.lengthscale": np.array([0.9, 0.5])})
    ref = titsias_dense(lambda A, C: rbf_np(A, C, np.array([0.9, 0.5]), 1.3), X, y, Z2, 0.2,
                        0.3)
    assert abs(float(model.elbo()) - ref) <= 1e-9 * abs(ref)
    with pytest.raises(gpnum.ShapeError, match=r"inducing_points: expected shape \(8, 2\)"):
        model.set_parameters({"inducing_points": Z[:4]})
    # Rebuilt from config() and data() with the same parameters, the model gives the same value.
    clone = SGPR(RBF(lengthscale=np.ones(2)), Gaussian(), Z=np.zeros((8, 2)), **model.data(),
                 **model.config())
    clone.set_parameters({k: np.asarray(v) for k, v in model.parameters().items()})
    assert float(clone.elbo()) == float(model.elbo())


def test_objective_uses_given_data_of_the_same_shape():
    X, y, Z, _, _ = problem(9)
    model = build("rbf_ard", X, y, Z)
    y2 = 2.0 * y
    value, _ = model.objective_and_grad(X, y2)
    ref = titsias_dense(KERNELS["rbf_ard"][0], X, y2, Z, 0.2, 0.3)
    assert abs(float(value) - ref) <= 1e-9 * abs(ref)


# ---------------------------------------------------------------- bad input


def test_rejects_non_gaussian_likelihood():
    X, y, Z, _, _ = problem()
    with pytest.raises(TypeError, match="expected gpnum.likelihoods.Gaussian, got StudentT"):
        SGPR(RBF(), StudentT(), X, y, Z)


def test_rejects_z_with_wrong_columns():
    X, y, Z, _, _ = problem()
    with pytest.raises(gpnum.ShapeError, match=r"Z: expected shape \(m, 2\) with m >= 1 \(the "
                                               r"2 columns of X\), got \(8, 3\)"):
        SGPR(RBF(), Gaussian(), X, y, np.ones((8, 3)))


def test_rejects_empty_z():
    X, y, _, _, _ = problem()
    with pytest.raises(gpnum.ShapeError, match=r"Z: expected shape \(m, 2\) with m >= 1"):
        SGPR(RBF(), Gaussian(), X, y, np.zeros((0, 2)))


def test_rejects_nan_in_z():
    X, y, Z, _, _ = problem()
    Z[1, 1] = np.nan
    with pytest.raises(ValueError, match="Z: expected finite values, got 1 NaN"):
        SGPR(RBF(), Gaussian(), X, y, Z)


def test_rejects_nan_in_X():
    X, y, Z, _, _ = problem()
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="X: expected finite values, got 1 NaN"):
        SGPR(RBF(), Gaussian(), X, y, Z)


def test_rejects_nan_in_y():
    X, y, Z, _, _ = problem()
    y[5] = np.nan
    with pytest.raises(ValueError, match="y: expected finite values, got 1 NaN"):
        SGPR(RBF(), Gaussian(), X, y, Z)


def test_rejects_y_of_wrong_shape():
    X, y, Z, _, _ = problem()
    with pytest.raises(gpnum.ShapeError, match=r"y: expected shape \(40,\) to match X, got "
                                               r"\(40, 1\)"):
        SGPR(RBF(), Gaussian(), X, y[:, None], Z)


def test_rejects_empty_X():
    with pytest.raises(gpnum.ShapeError, match="X: expected at least one row"):
        SGPR(RBF(), Gaussian(), np.zeros((0, 2)), np.zeros(0), np.zeros((3, 2)))


def test_rejects_likelihood_of_another_backend():
    pytest.importorskip("array_api_strict")
    X, y, Z, _, _ = problem()
    xp = B.namespace_by_name("array_api_strict")
    with pytest.raises(TypeError, match="likelihood: its parameter 'variance'"):
        SGPR(RBF(), Gaussian(xp=xp), X, y, Z)


def test_objective_rejects_data_of_another_shape():
    X, y, Z, _, _ = problem()
    model = build("rbf_ard", X, y, Z)
    with pytest.raises(gpnum.ShapeError, match=r"y: expected shape \(40,\) \(the training "
                                               r"data's: SGPR is a full-batch model\)"):
        model.objective_and_grad(y=y[:30])


def test_not_psd_kzz_names_jitter():
    class Indefinite(RBF):
        def _gram(self, X1, X2):
            K = super()._gram(X1, X2)
            return -K if X2 is None else K

    X, y, Z, _, _ = problem()
    model = SGPR(Indefinite(), Gaussian(), X, y, Z)
    with pytest.raises(gpnum.NotPSDError, match="jitter"):
        model.elbo()


# ---------------------------------------------------------------- through the model protocol


def test_fit_lbfgs_with_fixed_inducing_points():
    X, y, Z, _, _ = problem(10, n=40, m=6)
    model = build("rbf_ard", X, y, Z, s2=0.5, c=0.0)
    Z0 = host(model.inducing_points).copy()
    before = float(model.elbo())
    gpnum.fit(model, optimizer="lbfgs", maxiter=100, progress=False, fixed=["inducing_points"])
    after = float(model.elbo())
    assert after > before
    np.testing.assert_array_equal(host(model.inducing_points), Z0)
    params = {k: host(v) for k, v in model.parameters().items()}

    def kfun(A, C):
        return rbf_np(A, C, params["kernel.lengthscale"], params["kernel.variance"])

    ref = titsias_dense(kfun, X, y, Z0, params["likelihood.variance"], params["mean"])
    assert abs(after - ref) <= 1e-9 * abs(ref)


def test_checkpoint_round_trip(tmp_path, xp, device):
    X, y, Z, Xs, _ = problem(11)
    model = build("sum", X, y, Z, xp=xp, dtype=xp.float64, device=device)
    model.set_parameters({"mean": -0.4, "inducing_points": Z[::-1] * 0.9})
    path = tmp_path / "sgpr.npz"
    gpnum.save(model, path)
    loaded = gpnum.load(path, xp=xp, device=device)
    assert type(loaded) is SGPR and loaded.config() == model.config()
    np.testing.assert_array_equal(host(loaded.inducing_points), host(model.inducing_points))
    assert float(host(loaded.elbo())) == float(host(model.elbo()))
    Xb = B.asarray(Xs, dtype=xp.float64, xp=xp, device=device)
    for a, b in zip(loaded.predict_f(Xb), model.predict_f(Xb), strict=False):
        np.testing.assert_array_equal(host(a), host(b))


def test_float32_with_ill_conditioned_kzz(xp, device):
    # Inducing points packed together (cond(K_ZZ) ~ 8e7) and small noise: float32 values and
    # gradients against central differences of the dense float64 formula. The rounding of the
    # float32 kernel matrices alone, amplified by K_ZZ^{-1} and by 1 / s2 in the trace term,
    # leaves ~2e-3 in the value and a few percent in the inducing-point gradient.
    from gradcheck import numerical_grad, relative_error

    rng = np.random.default_rng(3)
    X = rng.uniform(-1.5, 1.5, (60, 2))
    y = np.sin(2 * X[:, 0]) + 0.05 * rng.standard_normal(60)
    Z = rng.uniform(-0.7, 0.7, (10, 2))
    ls, s2, c = np.array([1.0, 1.3]), 0.01, 0.1

    def bound(Z=Z, ls=ls, s2=s2):
        return titsias_dense(lambda A, C: rbf_np(A, C, ls, 1.0), X, y, Z, float(s2), c)

    ref = {"inducing_points": numerical_grad(lambda v: bound(Z=v), Z),
           "kernel.lengthscale": numerical_grad(lambda v: bound(ls=v), ls),
           "likelihood.variance": numerical_grad(lambda v: bound(s2=v), np.array(s2))}
    f32 = xp.float32
    model = SGPR(RBF(lengthscale=ls, xp=xp, dtype=f32, device=device),
                 Gaussian(variance=s2, xp=xp, dtype=f32, device=device),
                 *(B.asarray(a, dtype=f32, xp=xp, device=device) for a in (X, y, Z)), mean=c)
    value, grads = model.objective_and_grad()
    assert value.dtype == f32
    assert abs(float(host(value)) - bound()) <= 5e-3 * abs(bound())
    tols = {"inducing_points": 5e-2, "kernel.lengthscale": 1e-2, "likelihood.variance": 1e-2}
    for name, g in ref.items():
        assert grads[name].dtype == f32
        assert relative_error(host(grads[name]), g) < tols[name], name
