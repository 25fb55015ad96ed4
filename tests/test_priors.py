"""Hyper-parameter priors (gpnum.priors) and MAP fitting through gpnum.fit / gpnum.optim.lbfgs.

References: scipy.stats for the log densities; central finite differences for their gradients
and for the gradient of the objective the optimiser sees; a dense NumPy log marginal likelihood
plus scipy.stats log densities for the value of that objective.
"""

import warnings

import numpy as np
import pytest
import scipy.optimize
from gradcheck import check_grad
from scipy import stats

import gpnum
from gpnum import backend as B
from gpnum.kernels import ICM, RBF, Matern52
from gpnum.likelihoods import Gaussian
from gpnum.models import MultiOutputGPR
from gpnum.optim import lbfgs
from gpnum.priors import Gamma, HalfNormal, InverseGamma, LogNormal, Normal, Prior, log_prior

# Each prior with its scipy.stats reference and a point away from the mode.
CASES = [
    (LogNormal(-0.7, 1.3), stats.lognorm(s=1.3, scale=np.exp(-0.7))),
    (Gamma(2.5, 1.7), stats.gamma(2.5, scale=1.0 / 1.7)),
    (Gamma(0.6, 3.0), stats.gamma(0.6, scale=1.0 / 3.0)),
    (InverseGamma(3.2, 0.8), stats.invgamma(3.2, scale=0.8)),
    (HalfNormal(0.9), stats.halfnorm(scale=0.9)),
    (Normal(0.4, 2.1), stats.norm(0.4, 2.1)),
]
IDS = ["lognormal", "gamma", "gamma-shape-below-1", "inversegamma", "halfnormal", "normal"]
X_POS = np.array([[0.05, 0.37, 1.1], [2.9, 0.8, 6.3]])  # (2, 3): priors act elementwise


@pytest.mark.parametrize(("prior", "ref"), CASES, ids=IDS)
def test_log_density_matches_scipy(prior, ref, to_xp, dtype, xp):
    x = X_POS if prior.positive_support else X_POS - 1.5
    value, grad = prior.log_density_and_grad(to_xp(x))
    assert value.shape == () and value.dtype == dtype and tuple(grad.shape) == x.shape
    rtol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(float(value), ref.logpdf(x).sum(), rtol=rtol)
    np.testing.assert_allclose(float(prior.log_density(to_xp(x))), ref.logpdf(x).sum(),
                               rtol=rtol)


@pytest.mark.parametrize(("prior", "ref"), CASES, ids=IDS)
def test_gradient_against_finite_differences(prior, ref):
    x = X_POS if prior.positive_support else X_POS - 1.5
    _, grad = prior.log_density_and_grad(x)
    # the reference is scipy's density, not the code's own value
    check_grad(lambda z: ref.logpdf(z).sum(), x, grad, name=type(prior).__name__)


@pytest.mark.parametrize(("make", "err"), [
    (lambda: LogNormal(0.0, 0.0), ValueError), (lambda: LogNormal(float("nan"), 1.0), ValueError),
    (lambda: Gamma(-1.0, 1.0), ValueError), (lambda: Gamma(2.0, float("inf")), ValueError),
    (lambda: InverseGamma(1.0, 0.0), ValueError), (lambda: HalfNormal(-2.0), ValueError),
    (lambda: Normal(0.0, -1.0), ValueError), (lambda: Gamma("two", 1.0), TypeError),
    (lambda: LogNormal(None, 1.0), TypeError)])
def test_invalid_prior_parameters_are_refused(make, err):
    with pytest.raises(err, match="must be"):
        make()


def _data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 1))
    return X, np.sin(2.0 * X[:, 0]) + 0.3 * rng.standard_normal(n)


def _dense_lml(ls, s2, noise, mean, X, y):
    """Matern-5/2 + Gaussian noise, constant mean: the reference log marginal likelihood."""
    r = np.sqrt(5.0) * np.abs(X[:, None, 0] - X[None, :, 0]) / ls
    K = s2 * (1.0 + r + r * r / 3.0) * np.exp(-r) + noise * np.eye(len(y))
    return stats.multivariate_normal(np.full(len(y), mean), K).logpdf(y)


PRIORS = {"likelihood.variance": LogNormal(np.log(0.05), 0.5),
          "kernel.lengthscale": Gamma(3.0, 2.0), "mean": Normal(0.0, 0.3)}


def _posterior(theta, X, y):
    """Log posterior (up to a constant) at natural values (ls, s2, noise, mean), from
    independent references: the dense LML and scipy.stats' log densities."""
    ls, s2, noise, mean = theta
    return (_dense_lml(ls, s2, noise, mean, X, y)
            + stats.lognorm(s=0.5, scale=0.05).logpdf(noise)
            + stats.gamma(3.0, scale=0.5).logpdf(ls) + stats.norm(0.0, 0.3).logpdf(mean))


def _gpr(X, y):
    return gpnum.GPR(Matern52(lengthscale=0.7, variance=1.3), Gaussian(variance=0.2), X, y,
                     mean=0.1)


def _theta(model):
    p = model.parameters()
    return np.array([float(p[k]) for k in ("kernel.lengthscale", "kernel.variance",
                                           "likelihood.variance", "mean")])


@pytest.mark.parametrize("coordinates", ["log", "softplus"])
def test_the_optimisers_objective_is_the_log_posterior(monkeypatch, coordinates):
    """The function L-BFGS-B minimises: its value is -(LML + log prior) / n at the point, and
    its gradient (chained through the optimiser's coordinates) matches finite differences."""
    X, y = _data()
    model = _gpr(X, y)
    captured = {}
    real = scipy.optimize.minimize

    def spy(fun, x0, **kwargs):
        captured.setdefault("fun", fun)
        captured.setdefault("x0", np.array(x0))
        return real(fun, x0, **kwargs)

    monkeypatch.setattr(scipy.optimize, "minimize", spy)
    theta0 = _theta(model)
    lbfgs(model, coordinates=coordinates, maxiter=2, priors=PRIORS, warn=False)
    fun, x0, n = captured["fun"], captured["x0"], len(y)
    value, grad = fun(x0)
    np.testing.assert_allclose(-value * n, _posterior(theta0, X, y), rtol=1e-12)
    check_grad(lambda x: fun(x)[0], x0, grad, eps=1e-6, name=f"objective ({coordinates})")
    # without the priors the same function is the LML alone: the prior really entered
    captured.clear()
    model2 = _gpr(X, y)
    lbfgs(model2, coordinates=coordinates, maxiter=1, warn=False)
    assert abs(float(captured["fun"](x0)[0]) - value) > 1e-3


def test_fit_reaches_the_posterior_mode():
    """gpnum.fit with priors stops where the reference log posterior is stationary, and reports
    the log posterior, not the LML, as its objective."""
    X, y = _data(seed=2)
    model = _gpr(X, y)
    history = gpnum.fit(model, priors=PRIORS)
    theta = _theta(model)
    np.testing.assert_allclose(history.epoch_elbo[-1], _posterior(theta, X, y), rtol=1e-10)
    # stationary in log coordinates (the mean as it is): d/dlog p = p d/dp
    scale = np.array([theta[0], theta[1], theta[2], 1.0])
    g = [(_posterior(theta + h * e, X, y) - _posterior(theta - h * e, X, y)) / (2 * h)
         for e, h in ((np.eye(4)[i], 1e-6 * max(1.0, abs(theta[i]))) for i in range(4))]
    assert np.max(np.abs(np.array(g) * scale)) < 1e-3
    # and the prior moved the answer: the ML fit lands elsewhere
    ml = _gpr(X, y)
    gpnum.fit(ml)
    assert np.max(np.abs(np.log(_theta(ml)[:3] / theta[:3]))) > 0.05


def test_adam_path_adds_the_prior_to_each_step():
    """optimizer='adam' ascends the same log posterior: it approaches the L-BFGS-B mode."""
    X, y = _data(16, seed=3)
    mode = _gpr(X, y)
    gpnum.fit(mode, priors=PRIORS)
    model = _gpr(X, y)
    history = gpnum.fit(model, optimizer="adam", epochs=1500, lr=0.05, lr_schedule=None,
                        priors=PRIORS, progress=False)
    np.testing.assert_allclose(history.step_elbo[-1], _posterior(_theta(model), X, y),
                               rtol=1e-6, atol=1e-6)  # recorded before the last update
    np.testing.assert_allclose(_theta(model), _theta(mode), rtol=2e-2, atol=2e-3)
    assert model.training_state.priors == PRIORS


def test_multioutput_kappa_prior_keeps_own_variances_off_zero(tmp_path):
    """The failure the priors are for (docs/multioutput.md, fertility): an output with few
    entries whose own variance kappa type-II ML may put at 0; Gamma(2, .) has density 0 there,
    so the MAP estimate stays positive. Also: the objective is the LML plus the log prior, and
    the checkpoint of a model fitted with priors round-trips without them."""
    rng = np.random.default_rng(4)
    n, T = 20, 3
    X = np.linspace(-1.0, 1.0, n)[:, None]
    f = np.sin(3.0 * X[:, 0])
    Y = np.stack([f, 0.5 * f, -f], axis=1) + 0.05 * rng.standard_normal((n, T))
    Y[3:, 2] = np.nan  # the third output keeps three entries
    priors = {"kernel.coregion.kappa": Gamma(2.0, 2.0),
              "likelihood.variance": InverseGamma(2.0, 1e-3)}
    model = MultiOutputGPR(ICM(Matern52(lengthscale=0.5), T, 1), Gaussian(variance=np.full(T, 0.1)),
                           X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = gpnum.fit(model, priors=priors, maxiter=300)
    p = {k: B.to_numpy(v) for k, v in model.parameters().items()}
    # (by type-II ML alone, every kappa here ends below 1e-6 and the third noise near 1e-9)
    assert np.all(p["kernel.coregion.kappa"] > 1e-3)
    ref = (float(model.log_marginal_likelihood())
           + stats.gamma(2.0, scale=0.5).logpdf(p["kernel.coregion.kappa"]).sum()
           + stats.invgamma(2.0, scale=1e-3).logpdf(p["likelihood.variance"]).sum())
    np.testing.assert_allclose(history.epoch_elbo[-1], ref, rtol=1e-10)
    path = tmp_path / "mo.npz"
    gpnum.save(model, path)
    back = gpnum.load(path)
    for k, v in back.parameters().items():
        np.testing.assert_array_equal(B.to_numpy(v), p[k])


def test_checkpoints_do_not_carry_priors(tmp_path):
    X, y = _data(12, seed=5)
    model = _gpr(X, y)
    gpnum.fit(model, optimizer="adam", epochs=3, priors=PRIORS, progress=False)
    gpnum.save(model, tmp_path / "m.npz")
    back = gpnum.load(tmp_path / "m.npz")
    assert back.training_state.priors == {}
    # resuming with the priors passed again continues the same MAP objective
    history = gpnum.fit(back, optimizer="adam", epochs=5, priors=PRIORS, resume=True,
                        progress=False)
    assert back.training_state.priors == PRIORS and history.num_steps == 2


def test_unknown_and_unsuitable_parameter_paths_are_refused():
    X, y = _data(10)
    model = _gpr(X, y)
    with pytest.raises(KeyError, match="'kernel.lenghtscale' is not a parameter"):
        gpnum.fit(model, priors={"kernel.lenghtscale": Gamma(2.0, 1.0)})
    with pytest.raises(ValueError, match="density on positive values but 'mean'"):
        gpnum.fit(model, priors={"mean": Gamma(2.0, 1.0)})
    with pytest.raises(TypeError, match="expected a gpnum.priors.Prior"):
        gpnum.fit(model, priors={"likelihood.variance": stats.gamma(2.0)})
    with pytest.raises(TypeError, match="expected a dict"):
        gpnum.fit(model, priors=[Gamma(2.0, 1.0)])
    with pytest.raises(KeyError, match="not a parameter"):
        lbfgs(model, priors={"noise": Gamma(2.0, 1.0)})
    svgp = gpnum.SVGP(RBF(), Gaussian(), np.linspace(-1.0, 1.0, 4)[:, None], num_data=10)
    with pytest.raises(ValueError, match="variational parameter"):
        gpnum.fit(svgp, X, y, priors={"q_mu": Normal(0.0, 1.0)}, progress=False)


def test_log_prior_sums_the_priors_and_leaves_inputs_alone():
    params = {"a": np.array([0.5, 2.0]), "b": np.array(1.5), "c": np.array(3.0)}
    priors = {"a": Gamma(2.0, 1.0), "b": LogNormal(0.0, 1.0)}
    value, grads = log_prior(priors, params)
    np.testing.assert_allclose(value, stats.gamma(2.0).logpdf(params["a"]).sum()
                               + stats.lognorm(s=1.0).logpdf(1.5), rtol=1e-13)
    assert set(grads) == {"a", "b"}
    assert isinstance(Gamma(2.0, 1.0), Prior) and Gamma(2.0, 1.0) == Gamma(2, 1)
    assert repr(LogNormal(0.0, 1.0)) == "LogNormal(mu=0.0, sigma=1.0)"


@pytest.mark.parametrize("optimizer", ["ngd", "adam"])
def test_minibatch_steps_include_the_prior(optimizer, xp, to64, device):
    """SVGP on any backend: each step records its ELBO plus the log prior, and the step on a
    parameter with a prior follows the prior's gradient too (one Adam step, lr known)."""
    X, y = _data(16, seed=6)
    Z = np.linspace(-2.0, 2.0, 5)[:, None]
    # strong enough on the noise to reverse the sign of its gradient (the ELBO's is +120 here)
    priors = {"likelihood.variance": InverseGamma(50.0, 0.4), "kernel.lengthscale": Gamma(2.0, 1.0)}

    def build():
        kw = {"xp": xp, "dtype": xp.float64, "device": device}
        return gpnum.SVGP(Matern52(lengthscale=0.8, variance=1.1, **kw),
                          Gaussian(variance=0.3, **kw), to64(Z), num_data=16)

    ref = build()
    elbo, grads = ref.objective_and_grad(to64(X), to64(y))
    start = {k: B.to_numpy(v) for k, v in ref.parameters().items()}
    model = build()
    history = gpnum.fit(model, to64(X), to64(y), epochs=1, batch_size=16, optimizer=optimizer,
                        lr=1e-3, lr_schedule=None, priors=priors, progress=False)
    expected = (float(elbo) + stats.invgamma(50.0, scale=0.4).logpdf(0.3)
                + stats.gamma(2.0).logpdf(0.8))
    np.testing.assert_allclose(history.step_elbo[0], expected, rtol=1e-12)
    # Adam's first step moves every coordinate by lr * sign(gradient): the noise's gradient is
    # the ELBO's plus d/dx log p = (-(a + 1) + b / x) / x, in softplus coordinates
    g = float(grads["likelihood.variance"]) + (-(50.0 + 1.0) + 0.4 / 0.3) / 0.3
    assert g < 0.0 < float(grads["likelihood.variance"])
    u0 = float(gpnum.params.softplus_inverse(np.float64(start["likelihood.variance"])))
    u1 = float(gpnum.params.softplus_inverse(np.float64(B.to_numpy(model.likelihood.variance))))
    np.testing.assert_allclose(u1 - u0, 1e-3 * np.sign(g), rtol=1e-6)
