"""gpnum.sklearn against scikit-learn's GaussianProcessRegressor, the native gpnum models,
Monte Carlo, and scikit-learn's composition tools (clone, pickle, Pipeline, GridSearchCV)."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process import kernels as sk
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import gpnum
from conftest import _BACKEND_PARAMS
from gpnum import backend as B
from gpnum.kernels import RBF, Matern12, Matern32, Matern52, Polynomial
from gpnum.sklearn import GPRegressor, SVGPClassifier, SVGPRegressor


def _data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    Xt = rng.uniform(-2.5, 2.5, (15, d))
    return X, y, Xt


# Each pair: a gpnum kernel and the same covariance written with scikit-learn's kernels.
PAIRS = [
    (lambda: RBF(lengthscale=0.8, variance=1.7),
     lambda: sk.ConstantKernel(1.7) * sk.RBF(0.8)),
    (lambda: Matern52(lengthscale=np.array([0.6, 1.9]), variance=0.9),
     lambda: sk.ConstantKernel(0.9) * sk.Matern([0.6, 1.9], nu=2.5)),
    (lambda: Matern32(lengthscale=1.1, variance=2.3),
     lambda: sk.ConstantKernel(2.3) * sk.Matern(1.1, nu=1.5)),
    (lambda: Matern12(lengthscale=0.7, variance=1.2),
     lambda: sk.ConstantKernel(1.2) * sk.Matern(0.7, nu=0.5)),
    (lambda: RBF(lengthscale=0.5, variance=0.3) + Matern52(lengthscale=2.0, variance=1.4),
     lambda: sk.ConstantKernel(0.3) * sk.RBF(0.5)
     + sk.ConstantKernel(1.4) * sk.Matern(2.0, nu=2.5)),
]


@pytest.mark.parametrize("normalize_y", [False, True])
@pytest.mark.parametrize("pair", PAIRS, ids=["rbf", "matern52-ard", "matern32", "matern12",
                                             "sum"])
def test_gpregressor_predict_equals_scikit_learn(pair, normalize_y):
    X, y, Xt = _data()
    ours = GPRegressor(pair[0](), alpha=1e-3, optimizer=None, normalize_y=normalize_y).fit(X, y)
    ref = GaussianProcessRegressor(pair[1](), alpha=1e-3, optimizer=None,
                                   normalize_y=normalize_y).fit(X, y)
    mean, std = ours.predict(Xt, return_std=True)
    ref_mean, ref_std = ref.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(std, ref_std, rtol=0, atol=1e-8)
    _, cov = ours.predict(Xt, return_cov=True)
    np.testing.assert_allclose(cov, ref.predict(Xt, return_cov=True)[1], rtol=0, atol=1e-8)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               ref.log_marginal_likelihood_value_, rtol=1e-10)


def test_gpregressor_default_alpha_matches_scikit_learn():
    # alpha = 1e-10 (both defaults): nearly noise-free interpolation, the hardest case.
    X, y, Xt = _data(n=25)
    ours = GPRegressor(RBF(lengthscale=0.9, variance=1.0), optimizer=None).fit(X, y)
    ref = GaussianProcessRegressor(sk.RBF(0.9), optimizer=None).fit(X, y)
    mean, std = ours.predict(Xt, return_std=True)
    ref_mean, ref_std = ref.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(std, ref_std, rtol=0, atol=1e-8)


@pytest.mark.parametrize("optimizer", ["lbfgs", "fmin_l_bfgs_b"])
def test_gpregressor_optimum_matches_scikit_learn(optimizer):
    # Both maximise the same log marginal likelihood from the same start by L-BFGS-B (gpnum.fit
    # in softplus-inverse coordinates, or scikit-learn's rule in logarithms); an interior
    # optimum is the same.
    X, y, Xt = _data(n=60)
    ours = GPRegressor(Matern52(lengthscale=np.ones(2), variance=1.0), alpha=0.01,
                       optimizer=optimizer).fit(X, y)
    ref = GaussianProcessRegressor(sk.ConstantKernel(1.0) * sk.Matern([1.0, 1.0], nu=2.5),
                                   alpha=0.01).fit(X, y)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               ref.log_marginal_likelihood_value_, rtol=0, atol=1e-5)
    fitted = ours.get_params()["kernel"]  # the constructor argument is untouched ...
    assert float(B.to_numpy(fitted.variance)) == 1.0
    np.testing.assert_allclose(B.to_numpy(ours.kernel_.lengthscale),  # ... kernel_ is fitted
                               ref.kernel_.k2.length_scale, rtol=2e-3)
    np.testing.assert_allclose(float(B.to_numpy(ours.kernel_.variance)),
                               ref.kernel_.k1.constant_value, rtol=2e-3)
    np.testing.assert_allclose(ours.predict(Xt), ref.predict(Xt), rtol=0, atol=1e-3)
    assert ours.n_iter_ >= 1


@pytest.mark.parametrize("optimizer", ["lbfgs", "fmin_l_bfgs_b"])
def test_gpregressor_restarts_keep_the_best_run(optimizer):
    X, y, _ = _data(n=30)
    kernel = RBF(lengthscale=20.0, variance=0.05)  # a poor start
    one = GPRegressor(kernel, alpha=0.01, optimizer=optimizer, random_state=0).fit(X, y)
    many = GPRegressor(kernel, alpha=0.01, optimizer=optimizer, n_restarts_optimizer=3,
                       random_state=0).fit(X, y)
    assert many.log_marginal_likelihood_value_ >= one.log_marginal_likelihood_value_ - 1e-8
    # The kept run's value is the model's: recomputed from its parameters.
    assert many.log_marginal_likelihood_value_ == pytest.approx(
        float(many.model_.log_marginal_likelihood()), rel=1e-12)


def test_learned_noise_matches_a_white_kernel_in_scikit_learn():
    # learn_noise=True is scikit-learn's ConstantKernel * RBF + WhiteKernel, alpha ~ 0.
    X, y, _ = _data(n=50)
    ours = GPRegressor(RBF(1.0, 1.0), alpha=0.1, learn_noise=True, optimizer="fmin_l_bfgs_b",
                       n_restarts_optimizer=1, random_state=0).fit(X, y)
    ref = GaussianProcessRegressor(sk.ConstantKernel(1.0) * sk.RBF(1.0) + sk.WhiteKernel(0.1),
                                   n_restarts_optimizer=1, random_state=0).fit(X, y)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               ref.log_marginal_likelihood_value_, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.noise_variance_, ref.kernel_.k2.noise_level, rtol=2e-3)
    with pytest.raises(ValueError, match="hyperparameter_bounds"):
        GPRegressor(hyperparameter_bounds=(2.0, 1.0)).fit(X, y)


def test_gpregressor_equals_native_gpr():
    X, y, Xt = _data()
    est = GPRegressor(RBF(lengthscale=1.0, variance=1.0), alpha=0.05, learn_noise=True).fit(X, y)
    native = gpnum.GPR(RBF(lengthscale=1.0, variance=1.0),
                       gpnum.likelihoods.Gaussian(variance=0.05), X, y, mean=0.0)
    gpnum.fit(native, fixed=["mean"], progress=False)
    mean, var = native.predict_f(Xt)
    got_mean, got_std = est.predict(Xt, return_std=True)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_std, np.sqrt(var), rtol=1e-12, atol=1e-12)
    assert est.noise_variance_ == pytest.approx(float(native.likelihood.variance), rel=1e-12)
    assert est.noise_variance_ != 0.05  # learned


def _seed(random_state):
    return int(np.random.RandomState(random_state).randint(np.iinfo(np.int32).max))


def test_svgp_regressor_equals_native_svgp():
    X, y, Xt = _data(n=80)
    est = SVGPRegressor(num_inducing=12, epochs=3, batch_size=32, random_state=3).fit(X, y)
    seed = _seed(3)
    mu, sd = y.mean(), y.std()
    native = gpnum.SVGP(gpnum.models.default_kernel("matern52", 2),
                        gpnum.models.default_likelihood("gaussian"),
                        gpnum.inducing.kmeans(X, 12, seed=seed), num_data=80, jitter=1e-6)
    gpnum.fit(native, X, (y - mu) / sd, epochs=3, batch_size=32, seed=seed, progress=False)
    mean, var = native.predict_f(Xt)
    got_mean, got_std = est.predict(Xt, return_std=True)
    np.testing.assert_allclose(got_mean, mean * sd + mu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_std, np.sqrt(var) * sd, rtol=1e-12, atol=1e-12)


def test_svgp_classifier_equals_native_svgp():
    X, y, Xt = _data(n=80)
    labels = np.where(y > np.median(y), "high", "low")
    est = SVGPClassifier(num_inducing=10, epochs=3, batch_size=32, random_state=1).fit(X, labels)
    assert list(est.classes_) == ["high", "low"]
    seed = _seed(1)
    native = gpnum.SVGP(gpnum.models.default_kernel("matern52", 2),
                        gpnum.likelihoods.Bernoulli(),
                        gpnum.inducing.kmeans(X, 10, seed=seed), num_data=80, jitter=1e-6)
    codes = (labels == "low").astype(float)  # classes_ sorted: "high" = 0, "low" = 1
    gpnum.fit(native, X, codes, epochs=3, batch_size=32, seed=seed, progress=False)
    p_low, _ = native.predict_y(Xt)
    proba = est.predict_proba(Xt)
    np.testing.assert_allclose(proba[:, 1], p_low, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(est.predict(Xt), np.where(p_low > 0.5, "low", "high"))


def test_svgp_classifier_many_classes():
    rng = np.random.default_rng(0)
    centres = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]])
    y = np.repeat([0, 1, 2], 30)
    X = centres[y] + 0.6 * rng.normal(size=(90, 2))
    est = SVGPClassifier(likelihood="robustmax", num_inducing=12, epochs=15, batch_size=30,
                         random_state=0).fit(X, y + 5)
    proba = est.predict_proba(X)
    assert proba.shape == (90, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert est.score(X, y + 5) > 0.9
    mean, _ = est.model_.predict_y(X)  # RobustMax's own class probabilities
    np.testing.assert_allclose(proba, mean / mean.sum(axis=1, keepdims=True), atol=1e-12)
    auto = SVGPClassifier(num_inducing=5, epochs=1, random_state=0).fit(X, y)
    expected = "Softmax" if hasattr(gpnum.likelihoods, "Softmax") else "RobustMax"
    assert type(auto.model_.likelihood).__name__ == expected


def test_gpregressor_sample_y_matches_the_posterior_by_monte_carlo():
    X, y, Xt = _data(n=20)
    est = GPRegressor(RBF(lengthscale=1.0, variance=1.0), alpha=0.01, optimizer=None,
                      normalize_y=True).fit(X, y)
    draws = est.sample_y(Xt[:4], n_samples=20000, random_state=0)
    assert draws.shape == (4, 20000)
    mean, cov = est.predict(Xt[:4], return_cov=True)
    se = np.sqrt(np.diag(cov) / 20000)
    assert np.all(np.abs(draws.mean(axis=1) - mean) < 5 * se)
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * np.max(np.diag(cov)))


def test_svgp_sample_y_matches_q_by_monte_carlo():
    X, y, Xt = _data(n=60)
    est = SVGPRegressor(num_inducing=10, epochs=2, random_state=0).fit(X, y)
    draws = est.sample_y(Xt[:3], n_samples=4000, random_state=1)
    assert draws.shape == (3, 4000)
    mean, cov = est.predict(Xt[:3], return_cov=True)
    se = np.sqrt(np.diag(cov) / 4000)
    assert np.all(np.abs(draws.mean(axis=1) - mean) < 5 * se)
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.1 * np.max(np.diag(cov)))


# ------------------------------------------------------------------ parameters, clone, pickle
def test_get_and_set_params_reach_into_gpnum_kernels():
    kernel = Matern52(lengthscale=np.array([1.0, 2.0]), variance=0.5)
    est = GPRegressor(kernel)
    params = est.get_params()
    np.testing.assert_array_equal(params["kernel__lengthscale"], [1.0, 2.0])
    assert params["kernel__variance"] == 0.5
    assert est.get_params(deep=False)["kernel"] is kernel
    est.set_params(kernel__variance=3.0, kernel__lengthscale=0.25, alpha=0.1)
    assert est.alpha == 0.1
    assert float(B.to_numpy(est.kernel.variance)) == 3.0
    assert est.kernel.lengthscale.shape == ()  # a scalar may replace an ARD lengthscale
    assert float(B.to_numpy(kernel.variance)) == 0.5  # the object passed in is unchanged

    summed = GPRegressor(RBF(1.0, 1.0) + Polynomial(degree=2))
    keys = set(summed.get_params())
    assert {"kernel__0__lengthscale", "kernel__0__variance", "kernel__1__variance",
            "kernel__1__offset", "kernel__1__degree"} <= keys
    summed.set_params(kernel__1__degree=3, kernel__0__lengthscale=4.0)
    assert summed.kernel.kernels[1].degree == 3
    assert float(B.to_numpy(summed.kernel.kernels[0].lengthscale)) == 4.0
    with pytest.raises(ValueError, match="kernel__bogus"):
        est.set_params(kernel__bogus=1.0)
    with pytest.raises(ValueError, match="kernel__7__variance"):
        summed.set_params(kernel__7__variance=1.0)
    # Replacing the kernel and setting its parameters in one call: the new kernel gets them.
    est.set_params(kernel=RBF(1.0, 1.0), kernel__lengthscale=2.0)
    assert type(est.kernel) is RBF and float(B.to_numpy(est.kernel.lengthscale)) == 2.0


def test_a_kernel_setting_that_cannot_be_read_back_is_refused():
    class Hidden(RBF):  # keeps its constructor argument under another name
        def __init__(self, scale=1.0, **kwargs):
            super().__init__(**kwargs)
            self._scale = scale

    with pytest.raises(TypeError, match="constructor argument 'scale'"):
        GPRegressor(Hidden(scale=2.0)).get_params()


def test_clone_and_fit_leave_the_kernel_argument_alone():
    kernel = RBF(lengthscale=1.0, variance=1.0)
    est = GPRegressor(kernel, alpha=0.01)
    twin = clone(est)
    assert twin.kernel is not kernel and repr(twin.kernel) == repr(kernel)
    X, y, _ = _data()
    est.fit(X, y)
    assert est.kernel is kernel and repr(kernel) == "RBF(lengthscale=1.0, variance=1.0)"
    assert est.kernel_ is not kernel and repr(est.kernel_) != repr(kernel)


@pytest.mark.parametrize("make", [
    lambda: GPRegressor(Matern32(lengthscale=np.ones(2)), alpha=0.01),
    lambda: SVGPRegressor(num_inducing=8, epochs=2, random_state=0),
    lambda: SVGPClassifier(num_inducing=8, epochs=2, random_state=0),
], ids=["gpr", "svgp-regressor", "svgp-classifier"])
def test_pickle_round_trip_predicts_the_same(make):
    X, y, Xt = _data()
    if isinstance(make(), SVGPClassifier):
        y = (y > np.median(y)).astype(int)
    est = make().fit(X, y)
    again = pickle.loads(pickle.dumps(est))
    if isinstance(est, SVGPClassifier):
        np.testing.assert_array_equal(again.predict_proba(Xt), est.predict_proba(Xt))
    else:
        np.testing.assert_array_equal(again.predict(Xt, return_std=True)[1],
                                      est.predict(Xt, return_std=True)[1])
    assert repr(again.kernel_) == repr(est.kernel_)
    unfitted = pickle.loads(pickle.dumps(make()))
    assert repr(unfitted.get_params()) == repr(make().get_params())


@pytest.mark.parametrize("backend", [p for p in _BACKEND_PARAMS if p.values[0] != "numpy"])
def test_backend_argument_gives_the_numpy_results(backend):
    X, y, Xt = _data()
    ref = GPRegressor(RBF(1.0, 1.0), alpha=0.01, optimizer=None).fit(X, y)
    est = GPRegressor(RBF(1.0, 1.0), alpha=0.01, optimizer=None, backend=backend).fit(X, y)
    assert est.model_.xp is B.namespace_by_name(backend)
    mean, std = est.predict(Xt, return_std=True)
    assert type(mean) is np.ndarray and type(std) is np.ndarray
    np.testing.assert_allclose(mean, ref.predict(Xt), rtol=0, atol=1e-10)
    np.testing.assert_allclose(std, ref.predict(Xt, return_std=True)[1], rtol=0, atol=1e-10)
    svgp = SVGPRegressor(num_inducing=6, epochs=1, backend=backend, random_state=0).fit(X, y)
    svgp_ref = SVGPRegressor(num_inducing=6, epochs=1, random_state=0).fit(X, y)
    np.testing.assert_allclose(svgp.predict(Xt), svgp_ref.predict(Xt), rtol=0, atol=1e-8)
    again = pickle.loads(pickle.dumps(est))
    assert again.model_.xp is est.model_.xp


def test_float32_dtype_is_close_to_float64():
    X, y, Xt = _data()
    ref = GPRegressor(RBF(1.0, 1.0), alpha=0.01, optimizer=None).fit(X, y)
    est = GPRegressor(RBF(1.0, 1.0), alpha=0.01, optimizer=None, dtype="float32").fit(X, y)
    assert est.model_.dtype == est.model_.xp.float32
    mean, std = est.predict(Xt, return_std=True)
    assert mean.dtype == np.float64  # NumPy float64 at the boundary, whatever the working dtype
    np.testing.assert_allclose(mean, ref.predict(Xt), rtol=0, atol=1e-4)
    np.testing.assert_allclose(std, ref.predict(Xt, return_std=True)[1], rtol=0, atol=1e-4)


# ------------------------------------------------------------------------- composition
def test_pipeline_grid_search_over_two_kernels_on_energy():
    ds = gpnum.datasets.load("energy", standardize=False, xp="numpy")
    X, y = ds.X_train[:150], ds.y_train[:150]
    pipe = make_pipeline(StandardScaler(), SVGPRegressor(num_inducing=20, epochs=10,
                                                         batch_size=50, lr=0.05, gamma=0.5,
                                                         random_state=0))
    kernels = [Matern52(lengthscale=np.ones(8)), RBF(lengthscale=np.ones(8))]
    search = GridSearchCV(pipe, {"svgpregressor__kernel": kernels}, cv=2).fit(X, y)
    assert repr(search.best_params_["svgpregressor__kernel"]) in {repr(k) for k in kernels}
    assert search.cv_results_["mean_test_score"].shape == (2,)
    assert search.score(ds.X_test, ds.y_test) > 0.8  # R^2 on held-out buildings


# ------------------------------------------------------------------------------- errors
def test_clear_errors():
    X, y, Xt = _data()
    with pytest.raises(ValueError, match="alpha: gpnum.GPR has one noise variance"):
        GPRegressor(alpha=np.full(40, 0.1)).fit(X, y)
    with pytest.raises(ValueError, match="alpha: expected a finite number > 0"):
        GPRegressor(alpha=0.0).fit(X, y)
    with pytest.raises(ValueError, match="optimizer"):
        GPRegressor(optimizer="adamw").fit(X, y)
    with pytest.raises(TypeError, match="kernel: expected a gpnum kernel"):
        GPRegressor(kernel=sk.RBF()).fit(X, y)
    with pytest.raises(RuntimeError, match="At most one of return_std or return_cov"):
        GPRegressor(optimizer=None).fit(X, y).predict(Xt, return_std=True, return_cov=True)
    with pytest.raises(ValueError, match="likelihood"):
        SVGPRegressor(likelihood="nonsense").fit(X, y)
    with pytest.raises(ValueError, match="binary; y has 3 classes"):
        SVGPClassifier(likelihood="bernoulli").fit(X, np.arange(40) % 3)
    with pytest.raises(ValueError, match="num_inducing"):
        SVGPRegressor(num_inducing=0).fit(X, y)


def test_import_gpnum_does_not_import_scikit_learn():
    code = "import sys, gpnum; sys.exit(int(any(m.startswith('sklearn') for m in sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ------------------------------------------------------------------ data-scaled SVGP defaults
def test_svgp_auto_defaults_follow_the_stated_rule():
    from gpnum.sklearn._svgp import auto_epochs, auto_num_inducing

    # m = min(500, n_distinct, ceil(4 sqrt(n))), worked by hand
    assert auto_num_inducing(426) == 83  # 4 * 20.64 = 82.6
    assert auto_num_inducing(3000) == 220  # 4 * 54.77 = 219.1
    assert auto_num_inducing(20000) == 500
    assert auto_num_inducing(100, num_distinct=7) == 7
    # below 3,000 rows: steps = max(100, ceil(n / 2)); epochs = ceil(steps / ceil(n / b))
    assert auto_epochs(60, 256) == 100  # one step per epoch
    assert auto_epochs(426, 256) == 107  # 213 steps, 2 per epoch
    assert auto_epochs(2999, 256) == 125  # 1500 steps, 12 per epoch
    # from 3,000 rows: gpnum.fit's recipe, max(20, ceil(1500 / steps per epoch))
    assert auto_epochs(3000, 256) == 125
    assert auto_epochs(12449, 256) == 31
    assert auto_epochs(100000, 256) == 20


def test_svgp_defaults_are_auto_and_used_by_fit():
    X, y, _ = _data(n=60)
    assert SVGPRegressor().num_inducing == "auto" and SVGPRegressor().epochs == "auto"
    assert SVGPClassifier().num_inducing == "auto" and SVGPClassifier().epochs == "auto"
    est = SVGPRegressor(random_state=0).fit(X, y)
    assert est.num_inducing_ == 31  # ceil(4 sqrt(60)) = ceil(30.98)
    assert est.epochs_ == 100 and len(est.history_.step_elbo) == 100
    clf = SVGPClassifier(random_state=0).fit(X, (y > np.median(y)).astype(int))
    assert clf.num_inducing_ == 31 and clf.epochs_ == 100
    # None keeps gpnum.fit's recipe: 1,500 steps at least
    assert SVGPRegressor(epochs=None).get_params()["epochs"] is None


@pytest.mark.parametrize("name,value", [("num_inducing", "all"), ("epochs", "many"),
                                        ("num_inducing", 0), ("epochs", 0)])
def test_svgp_auto_settings_refuse_other_values(name, value):
    X, y, _ = _data(n=20)
    with pytest.raises(ValueError, match=name):
        SVGPRegressor(**{name: value}).fit(X, y)


# ------------------------------------------------------------------------------------ verbose
def test_verbose_prints_the_fit_and_silent_by_default(capsys):
    X, y, _ = _data(n=30)
    GPRegressor(alpha=0.01, n_restarts_optimizer=1, random_state=0).fit(X, y)
    SVGPRegressor(num_inducing=5, epochs=2, random_state=0).fit(X, y)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    est = GPRegressor(alpha=0.01, n_restarts_optimizer=1, random_state=0, verbose=1).fit(X, y)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1].strip() for line in out] == ["run 0", "run 1"]
    assert out[est.optimizer_result_.best_run].endswith("(kept)")
    one = GPRegressor(alpha=0.01, random_state=0, verbose=2).fit(X, y)
    out = capsys.readouterr().out.splitlines()
    iterations = [line for line in out if ": iteration " in line]
    assert len(iterations) == one.n_iter_ == len(one.optimizer_result_.trace) > 0
    assert float(iterations[-1].rsplit(" ", 1)[1]) == pytest.approx(
        one.log_marginal_likelihood_value_, rel=1e-5)
    assert out[-1].startswith("GPRegressor: run 0:")
    SVGPRegressor(num_inducing=5, epochs=2, random_state=0, verbose=1).fit(X, y)
    captured = capsys.readouterr()
    assert "epoch 2/2" in captured.out + captured.err
    with pytest.raises(ValueError, match="verbose"):
        GPRegressor(alpha=0.01, verbose=-1).fit(X, y)


# -------------------------------------------------------------- n_jobs: fits in parallel threads
@pytest.mark.parametrize("make", [
    lambda: GPRegressor(Matern52(lengthscale=np.ones(2)), alpha=0.01, n_restarts_optimizer=1,
                        random_state=0),
    lambda: SVGPRegressor(num_inducing=8, epochs=5, batch_size=16, random_state=0),
    lambda: SVGPClassifier(num_inducing=8, epochs=5, batch_size=16, random_state=0),
], ids=["GPRegressor", "SVGPRegressor", "SVGPClassifier"])
def test_cross_val_score_in_threads_equals_sequential(make):
    from joblib import parallel_backend
    from sklearn.model_selection import cross_val_score

    X, y, _ = _data(n=48)
    if "Classifier" in type(make()).__name__:
        y = (y > np.median(y)).astype(int)
    sequential = cross_val_score(make(), X, y, cv=4)
    with parallel_backend("threading", n_jobs=2):
        threaded = cross_val_score(make(), X, y, cv=4, n_jobs=2)
    # Same arithmetic in every fold: BLAS thread counts change how work is shared, not sums
    # (blocked reductions may reorder, hence a tolerance at round-off level).
    np.testing.assert_allclose(threaded, sequential, rtol=1e-9, atol=1e-12)
