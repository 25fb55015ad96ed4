"""GPR: the log marginal likelihood and predictions against dense NumPy formulas (Rasmussen &
Williams 2006, algorithm 2.1) with independently computed kernel matrices, gradients against
finite differences, the parameter plumbing, and bad input."""

import math

import numpy as np
import pytest
from gradcheck import check_grad
from kernel_refs_everyday import rbf_reference
from scipy.stats import norm

import gpnum
from gpnum import backend as B
from gpnum.kernels import RBF, Matern52
from gpnum.likelihoods import Bernoulli, Gaussian
from gpnum.models import GPR

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


def problem(seed=0, n=15, d=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.standard_normal(n)
    Xs = rng.uniform(-2.0, 2.0, (7, d))
    ys = np.sin(2.0 * Xs[:, 0]) + 0.5 * Xs[:, 1]
    return X, y, Xs, ys


def dense_lml(K, y, s2, c):
    Ky = K + s2 * np.eye(len(y))
    r = y - c
    return -0.5 * (r @ np.linalg.solve(Ky, r) + np.linalg.slogdet(Ky)[1]
                   + len(y) * np.log(2 * np.pi))


def dense_posterior(kfun, X, y, Xs, s2, c):
    Ky = kfun(X, X) + s2 * np.eye(len(y))
    Ks = kfun(X, Xs)
    mean = c + Ks.T @ np.linalg.solve(Ky, y - c)
    cov = kfun(Xs, Xs) - Ks.T @ np.linalg.solve(Ky, Ks)
    return mean, cov


def build(kernel_name, X, y, s2=0.2, c=0.3, xp=None, dtype=None, device=None, jitter=None):
    kw = {} if xp is None else {"xp": xp, "dtype": dtype, "device": device}
    kern = KERNELS[kernel_name][1](**kw)
    lik = Gaussian(variance=s2, **kw)
    if xp is not None:
        X = B.asarray(X, dtype=dtype, xp=xp, device=device)
        y = B.asarray(y, dtype=dtype, xp=xp, device=device)
    return GPR(kern, lik, X, y, mean=c, jitter=jitter)


def host(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


# ---------------------------------------------------------------- log marginal likelihood


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_lml_matches_dense_reference_float64(kernel_name):
    X, y, _, _ = problem()
    model = build(kernel_name, X, y)
    ref = dense_lml(KERNELS[kernel_name][0](X, X), y, 0.2, 0.3)
    got = float(host(model.log_marginal_likelihood()))
    assert abs(got - ref) <= 1e-10 * abs(ref)
    value, _ = model.log_marginal_likelihood_and_grad()
    assert abs(float(host(value)) - ref) <= 1e-10 * abs(ref)


def test_lml_on_every_backend(xp, dtype, device):
    X, y, _, _ = problem(1)
    model = build("sum", X, y, xp=xp, dtype=dtype, device=device)
    ref = dense_lml(KERNELS["sum"][0](X, X), y, 0.2, 0.3)
    value = model.log_marginal_likelihood()
    assert B.get_namespace(value) is xp and value.dtype == dtype and value.shape == ()
    rtol = 1e-10 if dtype == xp.float64 else 1e-4
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


def test_jitter_adds_to_the_noise():
    X, y, _, _ = problem(2)
    model = build("rbf_ard", X, y, s2=0.2, jitter=0.05)
    ref = dense_lml(KERNELS["rbf_ard"][0](X, X), y, 0.25, 0.3)
    assert abs(float(host(model.log_marginal_likelihood())) - ref) <= 1e-10 * abs(ref)
    assert model.config() == {"jitter": 0.05}


# ---------------------------------------------------------------- gradients


def fd_check_all(model, objective, rtol=1e-6):
    """Central differences of ``objective()`` w.r.t. every parameter (natural form)."""
    value, grads = model.objective_and_grad()
    params = {k: host(v).copy() for k, v in model.parameters().items()}
    assert set(grads) == set(params)
    for name, p0 in params.items():
        def f(p, name=name):
            model.set_parameters({name: p})
            try:
                return float(host(objective()))
            finally:
                model.set_parameters({name: params[name]})
        check_grad(f, p0, host(grads[name]), rtol=rtol, name=name)
    return value


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_gradients_finite_differences(kernel_name, xp, device):
    X, y, _, _ = problem(3, n=12)
    model = build(kernel_name, X, y, s2=0.15, c=-0.2, xp=xp, dtype=xp.float64, device=device)
    fd_check_all(model, model.log_marginal_likelihood)
    _, g1 = model.log_marginal_likelihood_and_grad()
    _, g2 = model.objective_and_grad()
    for name in g1:
        np.testing.assert_allclose(host(g1[name]), host(g2[name]), rtol=1e-12)


def test_unconstrained_gradients_finite_differences():
    # grad_to_unconstrained through the composed plumbing: central differences of the LML as a
    # function of each unconstrained value (softplus for positive parameters).
    X, y, _, _ = problem(4, n=10)
    model = build("sum", X, y, s2=0.3)
    _, grads = model.objective_and_grad()
    ugrads = model.grad_to_unconstrained(grads)
    u0 = {k: host(v).copy() for k, v in model.unconstrained().items()}
    assert set(ugrads) == set(u0) == set(model.parameters())
    for name, p0 in u0.items():
        def f(p, name=name):
            model.set_unconstrained({name: p})
            try:
                return float(host(model.log_marginal_likelihood()))
            finally:
                model.set_unconstrained({name: u0[name]})
        check_grad(f, p0, host(ugrads[name]), name=name)


# ---------------------------------------------------------------- predictions


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_predictions_match_dense_posterior(kernel_name, xp, dtype, device):
    X, y, Xs, ys = problem(5)
    s2, c = 0.2, 0.3
    model = build(kernel_name, X, y, s2=s2, c=c, xp=xp, dtype=dtype, device=device)
    mean_ref, cov_ref = dense_posterior(KERNELS[kernel_name][0], X, y, Xs, s2, c)
    var_ref = np.diag(cov_ref)
    Xb = B.asarray(Xs, dtype=dtype, xp=xp, device=device)
    yb = B.asarray(ys, dtype=dtype, xp=xp, device=device)
    rtol, atol = (1e-9, 1e-11) if dtype == xp.float64 else (1e-3, 1e-4)
    mean, var = model.predict_f(Xb)
    assert mean.shape == (7,) and var.shape == (7,) and mean.dtype == dtype
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
    assert lpd.shape == (7,)
    np.testing.assert_allclose(host(lpd), norm.logpdf(ys, mean_ref, np.sqrt(var_ref + s2)),
                               rtol=rtol, atol=atol)


def test_predictions_in_chunks(monkeypatch):
    # More test points than one prediction block (including a short last block).
    X, y, _, _ = problem(6)
    model = build("rbf_ard", X, y)
    monkeypatch.setattr(model, "_predict_chunk", 4)
    Xs = np.random.default_rng(7).uniform(-2, 2, (11, 2))
    mean_ref, cov_ref = dense_posterior(KERNELS["rbf_ard"][0], X, y, Xs, 0.2, 0.3)
    mean, var = model.predict_f(Xs)
    np.testing.assert_allclose(mean, mean_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(var, np.diag(cov_ref), rtol=1e-9, atol=1e-11)


# ---------------------------------------------------------------- model protocol


def test_objective_uses_given_data_of_the_same_shape():
    X, y, _, _ = problem(8)
    model = build("rbf_ard", X, y)
    y2 = y[::-1].copy()
    value, _ = model.objective_and_grad(X, y2)
    ref = dense_lml(KERNELS["rbf_ard"][0](X, X), y2, 0.2, 0.3)
    assert abs(float(value) - ref) <= 1e-10 * abs(ref)
    value, _ = model.objective_and_grad(model.data()["X"], model.data()["y"])
    ref = dense_lml(KERNELS["rbf_ard"][0](X, X), y, 0.2, 0.3)
    assert abs(float(value) - ref) <= 1e-10 * abs(ref)


def test_parameters_config_and_data():
    X, y, _, _ = problem(9)
    model = build("sum", X, y)
    assert model.full_batch is True
    assert list(model.parameters()) == ["mean", "kernel.0.lengthscale", "kernel.0.variance",
                                        "kernel.1.lengthscale", "kernel.1.variance",
                                        "likelihood.variance"]
    assert model.config() == {"jitter": 0.0}
    data = model.data()
    assert set(data) == {"X", "y"}
    np.testing.assert_array_equal(data["X"], X)
    np.testing.assert_array_equal(data["y"], y)
    model.set_parameters({"mean": 1.5, "kernel.1.variance": 0.7, "likelihood.variance": 0.4})
    assert float(model.mean) == 1.5 and float(model.kernel.kernels[1].variance) == 0.7
    assert float(model.likelihood.variance) == 0.4
    u = model.unconstrained()
    assert float(u["mean"]) == 1.5
    np.testing.assert_allclose(u["likelihood.variance"], math.log(math.expm1(0.4)))
    # Rebuilt from config() and data() with the same parameters, the model gives the same value.
    clone = GPR(KERNELS["sum"][1](), Gaussian(), **data, **model.config())
    clone.set_parameters({k: np.asarray(v) for k, v in model.parameters().items()})
    assert float(clone.log_marginal_likelihood()) == float(model.log_marginal_likelihood())


def test_set_parameters_is_all_or_nothing():
    X, y, _, _ = problem(10)
    model = build("rbf_ard", X, y)
    with pytest.raises(ValueError, match="variance: expected values > 0"):
        model.set_parameters({"mean": 2.0, "kernel.variance": 2.0, "likelihood.variance": -1.0})
    assert float(model.mean) == 0.3 and float(model.kernel.variance) == 1.3
    with pytest.raises(KeyError, match="unknown parameter 'noise'"):
        model.set_parameters({"noise": 1.0})
    with pytest.raises(KeyError, match=r"kernel\.period"):
        model.set_parameters({"kernel.period": 1.0})


# ---------------------------------------------------------------- bad input


def test_rejects_non_gaussian_likelihood():
    X, y, _, _ = problem()
    with pytest.raises(TypeError, match="expected gpnum.likelihoods.Gaussian, got Bernoulli"):
        GPR(RBF(), Bernoulli(), X, (y > 0).astype(float))


def test_rejects_1d_X():
    _, y, _, _ = problem()
    with pytest.raises(gpnum.ShapeError, match=r"X: expected a 2-D array of shape \(n, d\), "
                                               r"got shape \(15,\)"):
        GPR(RBF(), Gaussian(), y, y)


def test_rejects_empty_X():
    with pytest.raises(gpnum.ShapeError, match=r"X: expected at least one row .* got shape "
                                               r"\(0, 2\)"):
        GPR(RBF(), Gaussian(), np.zeros((0, 2)), np.zeros(0))


def test_rejects_y_of_wrong_length():
    X, y, _, _ = problem()
    with pytest.raises(gpnum.ShapeError, match=r"y: expected shape \(15,\) to match X, got "
                                               r"\(14,\)"):
        GPR(RBF(), Gaussian(), X, y[:14])


def test_rejects_nan_in_X():
    X, y, _, _ = problem()
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"X: expected finite values, got 1 NaN"):
        GPR(RBF(), Gaussian(), X, y)


def test_rejects_inf_in_y():
    X, y, _, _ = problem()
    y[0] = np.inf
    with pytest.raises(ValueError, match="y: expected finite values, got infinite"):
        GPR(RBF(), Gaussian(), X, y)


def test_rejects_non_scalar_mean():
    X, y, _, _ = problem()
    with pytest.raises(gpnum.ShapeError, match=r"mean: expected a scalar \(shape \(\)\), got "
                                               r"shape \(2,\)"):
        GPR(RBF(), Gaussian(), X, y, mean=np.zeros(2))


def test_rejects_negative_jitter():
    X, y, _, _ = problem()
    with pytest.raises(ValueError, match="jitter: expected a finite number >= 0"):
        GPR(RBF(), Gaussian(), X, y, jitter=-1e-6)


def test_rejects_kernel_of_another_dtype():
    X, y, _, _ = problem()
    with pytest.raises(TypeError, match="kernel: expected parameters of dtype float64"):
        GPR(RBF(dtype="float32"), Gaussian(), X, y)


def test_rejects_ard_lengthscale_of_wrong_length():
    X, y, _, _ = problem(d=3)
    with pytest.raises(gpnum.ShapeError, match="expected 2 columns to match lengthscale"):
        GPR(RBF(lengthscale=LS_ARD), Gaussian(), X, y)


def test_objective_rejects_data_of_another_shape():
    X, y, _, _ = problem()
    model = build("rbf_ard", X, y)
    with pytest.raises(gpnum.ShapeError, match=r"X: expected shape \(15, 2\) \(the training "
                                               r"data's: GPR is a full-batch model\), got "
                                               r"\(10, 2\)"):
        model.objective_and_grad(X[:10], y[:10])


def test_predict_rejects_wrong_columns():
    X, y, Xs, _ = problem()
    model = build("rbf_ard", X, y)
    with pytest.raises(gpnum.ShapeError, match=r"Xnew: expected shape \(n, 2\) with n >= 1, "
                                               r"got \(7, 3\)"):
        model.predict_f(np.ones((7, 3)))


def test_predict_rejects_nan():
    X, y, Xs, _ = problem()
    model = build("rbf_ard", X, y)
    Xs[2, 0] = np.nan
    with pytest.raises(ValueError, match="Xnew: expected finite values"):
        model.predict_f(Xs)


def test_log_predictive_density_rejects_wrong_length():
    X, y, Xs, ys = problem()
    model = build("rbf_ard", X, y)
    with pytest.raises(gpnum.ShapeError, match=r"ynew: expected shape \(7,\) to match Xnew"):
        model.log_predictive_density(Xs, ys[:5])


def test_not_psd_names_jitter():
    class Indefinite(RBF):
        def _gram(self, X1, X2):
            return -10.0 * super()._gram(X1, X2)

    X, y, _, _ = problem()
    model = GPR(Indefinite(), Gaussian(variance=0.1), X, y)
    with pytest.raises(gpnum.NotPSDError, match="jitter"):
        model.log_marginal_likelihood()


# ---------------------------------------------------------------- through the model protocol


def test_check_data_and_validate_flag():
    X, y, _, _ = problem(11)
    model = build("rbf_ard", X, y)
    Xc, yc = model.check_data(X.tolist(), y)
    assert isinstance(Xc, np.ndarray) and Xc.shape == (15, 2)
    with pytest.raises(gpnum.ShapeError, match=r"y: expected shape \(15,\)"):
        model.check_data(X, y[:3])
    yn = y.copy()
    yn[0] = np.nan
    with pytest.raises(ValueError, match="y: expected finite values"):
        model.objective_and_grad(X, yn)
    # validate=False trusts the data (checked once by the caller).
    value, _ = model.objective_and_grad(Xc, yc, validate=False)
    ref = dense_lml(KERNELS["rbf_ard"][0](X, X), y, 0.2, 0.3)
    assert abs(float(value) - ref) <= 1e-10 * abs(ref)


def test_fit_lbfgs_reaches_a_stationary_point():
    X, y, _, _ = problem(12, n=30)
    model = build("rbf_ard", X, y, s2=0.5, c=0.0)
    before = float(model.log_marginal_likelihood())
    gpnum.fit(model, optimizer="lbfgs", maxiter=200, progress=False)
    after = float(model.log_marginal_likelihood())
    assert after > before
    params = {k: host(v) for k, v in model.parameters().items()}
    ref = dense_lml(rbf_np(X, X, params["kernel.lengthscale"], params["kernel.variance"]), y,
                    params["likelihood.variance"], params["mean"])
    assert abs(after - ref) <= 1e-10 * abs(ref)
    _, grads = model.objective_and_grad()
    ugrads = model.grad_to_unconstrained(grads)
    assert max(np.max(np.abs(host(g))) for g in ugrads.values()) < 1e-3


def test_checkpoint_round_trip(tmp_path, xp, device):
    X, y, Xs, _ = problem(13)
    model = build("sum", X, y, jitter=1e-9, xp=xp, dtype=xp.float64, device=device)
    model.set_parameters({"mean": -0.4, "kernel.1.lengthscale": 0.25})
    path = tmp_path / "gpr.npz"
    gpnum.save(model, path)
    loaded = gpnum.load(path, xp=xp, device=device)
    assert type(loaded) is GPR and loaded.config() == {"jitter": 1e-9}
    assert float(host(loaded.log_marginal_likelihood())) == \
        float(host(model.log_marginal_likelihood()))
    Xb = B.asarray(Xs, dtype=xp.float64, xp=xp, device=device)
    for a, b in zip(loaded.predict_f(Xb), model.predict_f(Xb), strict=False):
        np.testing.assert_array_equal(host(a), host(b))


def test_float32_gradients_against_dense_differences(xp, device):
    # Small noise (cond(K_y) ~ 3e3): float32 values and gradients against central differences
    # of the dense float64 NumPy formula.
    from gradcheck import numerical_grad, relative_error

    rng = np.random.default_rng(14)
    X = rng.uniform(-1.5, 1.5, (40, 2))
    y = np.sin(2 * X[:, 0]) + 0.05 * rng.standard_normal(40)
    ls, kv, s2, c = np.array([1.0, 1.3]), 1.0, 0.01, 0.1

    def lml(ls=ls, kv=kv, s2=s2, c=c):
        return dense_lml(rbf_np(X, X, ls, float(kv)), y, float(s2), float(c))

    ref = {"mean": numerical_grad(lambda v: lml(c=v), np.array(c)),
           "kernel.lengthscale": numerical_grad(lambda v: lml(ls=v), ls),
           "kernel.variance": numerical_grad(lambda v: lml(kv=v), np.array(kv)),
           "likelihood.variance": numerical_grad(lambda v: lml(s2=v), np.array(s2))}
    f32 = xp.float32
    model = GPR(RBF(lengthscale=ls, variance=kv, xp=xp, dtype=f32, device=device),
                Gaussian(variance=s2, xp=xp, dtype=f32, device=device),
                B.asarray(X, dtype=f32, xp=xp, device=device),
                B.asarray(y, dtype=f32, xp=xp, device=device), mean=c)
    value, grads = model.objective_and_grad()
    assert value.dtype == f32
    assert abs(float(host(value)) - lml()) <= 1e-4 * abs(lml())
    for name, g in ref.items():
        assert grads[name].dtype == f32
        assert relative_error(host(grads[name]), g) < 1e-3, name
