"""The likelihoods of issue 34 (counts, positive, bounded, ordinal, softmax, heteroscedastic)
against independent references: Monte Carlo with 1e6 draws from SciPy's densities, central
finite differences (tests/gradcheck.py), adaptive quadrature, product Gauss-Hermite rules.

Monte-Carlo references use Stein's identities, so that only the reference density enters:
``d/dmu_j E[g] = E[g eps_j] / s_j`` and ``d/dvar_j E[g] = E[g (eps_j^2 - 1)] / (2 var_j)`` with
``f = mu + s eps``; each estimate must lie within 5 of its own standard errors.
"""

import math
import warnings

import numpy as np
import pytest
import scipy.integrate as si
import scipy.special as sp
import scipy.stats as st
from gradcheck import check_grad

from gpnum import backend as B
from gpnum.likelihoods import (
    Bernoulli,
    Beta,
    Exponential,
    Gamma,
    HeteroscedasticGaussian,
    Laplace,
    NegativeBinomial,
    Ordinal,
    Poisson,
    Softmax,
    from_name,
)

F64 = dict(xp=np, dtype=np.float64)


def _ordinal_ref(edges, sigma):
    b = np.concatenate([[-np.inf], edges, [np.inf]])

    def logp(y, f):
        yi = y.astype(int)
        return np.log(st.norm.cdf((b[yi + 1] - f) / sigma) - st.norm.cdf((b[yi] - f) / sigma))
    return logp


def _softmax_ref(y, f):  # f (..., K)
    return np.take_along_axis(f, y.astype(int)[..., None], axis=-1)[..., 0] - sp.logsumexp(
        f, axis=-1)


# name: (likelihood, reference log p(y | f) (y broadcast, f (...) or (..., L)), y, mu, var)
CASES = {
    "poisson": (lambda: Poisson(**F64), lambda y, f: st.poisson.logpmf(y, np.exp(f)),
                [0.0, 3.0, 12.0, 1.0], [0.3, 1.2, 2.0, -1.0], [0.2, 0.8, 0.1, 1.5]),
    "negbin": (lambda: NegativeBinomial(0.4, **F64),
               lambda y, f: st.nbinom.logpmf(y, 1 / 0.4, (1 / 0.4) / (1 / 0.4 + np.exp(f))),
               [0.0, 3.0, 12.0, 1.0], [0.3, 1.2, 2.0, -1.0], [0.2, 0.8, 0.1, 1.5]),
    "exponential": (lambda: Exponential(**F64),
                    lambda y, f: st.expon.logpdf(y, scale=np.exp(f)),
                    [0.5, 2.0, 0.1, 4.0], [0.0, 0.5, -1.0, 1.0], [0.3, 0.6, 0.2, 1.0]),
    "gamma": (lambda: Gamma(2.5, **F64),
              lambda y, f: st.gamma.logpdf(y, 2.5, scale=np.exp(f) / 2.5),
              [0.5, 2.0, 0.1, 4.0], [0.0, 0.5, -1.0, 1.0], [0.3, 0.6, 0.2, 1.0]),
    "beta": (lambda: Beta(6.0, **F64),
             lambda y, f: st.beta.logpdf(y, 6.0 * sp.expit(f), 6.0 * sp.expit(-f)),
             [0.2, 0.7, 0.95, 0.5], [-1.0, 0.5, 2.0, 0.1], [0.3, 0.5, 0.2, 1.0]),
    "laplace": (lambda: Laplace(0.7, **F64),
                lambda y, f: st.laplace.logpdf(y, loc=f, scale=0.7),
                [0.0, 1.0, -2.0, 0.4], [0.2, 1.1, 0.5, -0.3], [0.3, 0.05, 1.2, 0.5]),
    "logit": (lambda: Bernoulli("logit", **F64),
              lambda y, f: -np.logaddexp(0.0, -(2 * y - 1) * f),
              [0.0, 1.0, 1.0, 0.0], [0.5, -1.0, 2.0, -0.2], [0.4, 1.0, 0.3, 2.0]),
    "ordinal": (lambda: Ordinal(4, bin_edges=[-1.0, 0.2, 1.5], scale=0.6, **F64),
                _ordinal_ref(np.array([-1.0, 0.2, 1.5]), 0.6),
                [0.0, 1.0, 2.0, 3.0], [-0.5, 0.0, 0.9, 1.0], [0.3, 0.5, 0.2, 0.8]),
    "heteroscedastic": (lambda: HeteroscedasticGaussian(**F64),
                        lambda y, f: st.norm.logpdf(y, f[..., 0], np.exp(0.5 * f[..., 1])),
                        [0.3, -1.0, 2.0, 0.0],
                        [[0.0, -1.0], [-0.5, 0.5], [1.0, -2.0], [0.2, 0.0]],
                        [[0.2, 0.3], [0.5, 0.1], [0.1, 0.6], [1.0, 0.4]]),
    "softmax": (lambda: Softmax(3, **F64), _softmax_ref,
                [0.0, 1.0, 2.0, 1.0],
                [[0.5, -0.2, 0.1], [1.0, 0.0, -1.0], [0.0, 0.3, 0.9], [-0.4, 0.4, 0.0]],
                [[0.3, 0.6, 0.2], [1.0, 0.5, 0.8], [0.2, 0.2, 0.2], [0.9, 0.1, 0.4]]),
}


def _arrays(case):
    make, ref, y, mu, var = CASES[case]
    return make, ref, np.array(y), np.array(mu), np.array(var)


@pytest.mark.parametrize("case", sorted(CASES))
def test_against_monte_carlo(case):
    make, ref, y, mu, var = _arrays(case)
    lik = make()
    ve, g = lik.variational_expectations_and_grad(y, mu, var)
    pld = lik.predictive_log_density(y, mu, var)
    rng = np.random.default_rng(7)
    draws = 1_000_000
    for i in range(y.shape[0]):
        shape = (draws,) + mu.shape[1:]
        eps = rng.standard_normal(shape)
        s = np.sqrt(var[i])
        logp = ref(np.full(draws, y[i]), mu[i] + s * eps)
        checks = [(ve[i], logp, "ve")]
        e = eps if mu.ndim == 1 else eps.T
        for j, (ej, sj) in enumerate(zip(np.atleast_2d(e), np.atleast_1d(s), strict=False)):
            gm = np.atleast_1d(g["mu"][i])[j]
            gv = np.atleast_1d(g["var"][i])[j]
            checks.append((gm, logp * ej / sj, f"d/dmu[{j}]"))
            checks.append((gv, logp * (ej * ej - 1.0) / (2 * sj * sj), f"d/dvar[{j}]"))
        for got, samples, what in checks:
            est, se = samples.mean(), samples.std() / math.sqrt(draws)
            assert abs(got - est) < 5 * se + 1e-12, (case, i, what, got, est, se)
        p = np.exp(logp)
        est, se = p.mean(), p.std() / math.sqrt(draws)
        assert abs(np.exp(pld[i]) - est) < 5 * se, (case, i, "predictive", np.exp(pld[i]), est)


def _param_values(lik):
    return {k: B.to_numpy(v).astype(np.float64) for k, v in lik.parameters().items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_against_finite_differences(case):
    make, _, y, mu, var = _arrays(case)
    lik = make()
    ve, g = lik.variational_expectations_and_grad(y, mu, var)
    np.testing.assert_array_equal(ve, lik.variational_expectations(y, mu, var))
    c = np.random.default_rng(3).uniform(0.5, 1.5, y.shape[0])
    cc = c if mu.ndim == 1 else c[:, None]
    check_grad(lambda m: np.sum(c * lik.variational_expectations(y, m, var)), mu,
               cc * g["mu"], name=f"{case} d/dmu")
    check_grad(lambda v: np.sum(c * lik.variational_expectations(y, mu, v)), var,
               cc * g["var"], name=f"{case} d/dvar")
    assert set(g["params"]) == set(lik.parameters())
    for name, value in _param_values(lik).items():
        def total(theta, name=name):
            other = make()
            other.set_parameters({name: theta})
            return np.sum(other.variational_expectations(y, mu, var))
        check_grad(total, value, g["params"][name], name=f"{case} d/d{name}")
        assert np.shape(g["params"][name]) == value.shape


def _expect(fun, mu, var):
    sd = math.sqrt(var)
    dens = lambda f: np.exp(-0.5 * ((f - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))  # noqa
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", si.IntegrationWarning)
        return si.quad(lambda f: fun(f) * dens(f), mu - 14 * sd, mu + 14 * sd, epsabs=0.0,
                       epsrel=1e-13, limit=500)[0]


def test_poisson_closed_form_is_exact():
    y = np.array([0.0, 1.0, 7.0, 40.0])
    mu = np.array([-2.0, 0.1, 1.9, 3.6])
    var = np.array([0.05, 1.0, 0.4, 2.0])
    ve = Poisson(**F64).variational_expectations(y, mu, var)
    for i in range(4):
        want = _expect(lambda f, i=i: st.poisson.logpmf(y[i], np.exp(f)), mu[i], var[i])
        assert abs(ve[i] - want) <= 1e-11 * max(1.0, abs(want)), (i, ve[i], want)


def test_laplace_closed_forms_against_quadrature():
    lik = Laplace(0.4, **F64)
    y, mu, var = np.array([0.0, 3.0, -1.0]), np.array([0.1, 0.0, 0.5]), np.array([0.01, 2.0, 0.3])
    ve = lik.variational_expectations(y, mu, var)
    pld = lik.predictive_log_density(y, mu, var)
    for i in range(3):
        lp = lambda f, i=i: st.laplace.logpdf(y[i], f, 0.4)  # noqa: E731
        np.testing.assert_allclose(ve[i], _expect(lp, mu[i], var[i]), rtol=1e-9)
        np.testing.assert_allclose(pld[i], np.log(_expect(lambda f, lp=lp: np.exp(lp(f)), mu[i],
                                                          var[i])), rtol=1e-9)


def _gh2(fun, mu, var, q=60):
    t, w = np.polynomial.hermite.hermgauss(q)
    w = w / math.sqrt(math.pi)
    x0 = mu[0] + math.sqrt(2 * var[0]) * t[:, None]
    x1 = mu[1] + math.sqrt(2 * var[1]) * t[None, :]
    return np.sum(w[:, None] * w[None, :] * fun(x0, x1))


def test_softmax_two_classes_against_product_rule_and_logit():
    lik = Softmax(2, **F64)
    y = np.array([0.0, 1.0, 1.0, 0.0])
    mu = np.array([[0.3, -0.5], [1.0, 1.5], [-2.0, 1.0], [0.0, 0.0]])
    var = np.array([[0.2, 0.7], [1.0, 0.3], [0.5, 0.5], [2.0, 1.0]])
    ve, g = lik.variational_expectations_and_grad(y, mu, var)
    pld = lik.predictive_log_density(y, mu, var)
    probs = lik.predict_mean_and_var(mu, var)[0]
    logit = Bernoulli("logit", num_gauss_hermite=100, **F64)
    d_mu, d_var = mu[:, 1] - mu[:, 0], var[:, 0] + var[:, 1]
    ve_b, g_b = logit.variational_expectations_and_grad(y, d_mu, d_var)
    for i in range(4):
        def logp(f0, f1, i=i):
            f = np.stack(np.broadcast_arrays(f0, f1), axis=-1)
            return _softmax_ref(np.full(f.shape[:-1], y[i]), f)
        want = _gh2(logp, mu[i], var[i])
        # the cubature's deterministic error: 1e-4 of the spread of log p at 1024 points
        assert abs(ve[i] - want) < 2e-4, (i, ve[i], want)
        assert abs(np.exp(pld[i]) - _gh2(lambda a, b: np.exp(logp(a, b)), mu[i], var[i])) < 2e-4
        assert abs(probs[i, 1] - _gh2(lambda a, b: sp.expit(b - a), mu[i], var[i])) < 2e-4
    # at K = 2 the likelihood is a logit on f_1 - f_0 ~ N(mu_1 - mu_0, var_0 + var_1)
    np.testing.assert_allclose(ve, ve_b, atol=2e-4)
    np.testing.assert_allclose(g["mu"][:, 1], g_b["mu"], atol=2e-4)
    np.testing.assert_allclose(g["mu"][:, 0], -g_b["mu"], atol=2e-4)
    # the variance gradient is a second-moment estimate: the cubature's error is larger (6e-4)
    np.testing.assert_allclose(g["var"][:, 0], g_b["var"], atol=1e-3)
    np.testing.assert_allclose(g["var"][:, 1], g_b["var"], atol=1e-3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)


def test_predictive_moments_against_monte_carlo():
    rng = np.random.default_rng(11)
    mu, var = np.array([0.4, -0.3]), np.array([0.3, 0.8])
    draws = 1_000_000
    cases = [
        (Poisson(**F64), lambda f: rng.poisson(np.exp(f))),
        (NegativeBinomial(0.5, **F64),
         lambda f: rng.negative_binomial(2.0, 2.0 / (2.0 + np.exp(f)))),
        (Exponential(**F64), lambda f: rng.exponential(np.exp(f))),
        (Gamma(3.0, **F64), lambda f: rng.gamma(3.0, np.exp(f) / 3.0)),
        (Beta(5.0, **F64), lambda f: rng.beta(5.0 * sp.expit(f), 5.0 * sp.expit(-f))),
        (Laplace(0.5, **F64), lambda f: rng.laplace(f, 0.5)),
    ]
    for lik, sample in cases:
        m, v = lik.predict_mean_and_var(mu, var)
        for i in range(2):
            yy = sample(mu[i] + math.sqrt(var[i]) * rng.standard_normal(draws))
            se_m = yy.std() / math.sqrt(draws)
            assert abs(m[i] - yy.mean()) < 5 * se_m, (lik, i, m[i], yy.mean())
            c2 = (yy - yy.mean()) ** 2
            assert abs(v[i] - c2.mean()) < 5 * c2.std() / math.sqrt(draws), (lik, i, v[i])


def test_ordinal_probabilities_are_exact_and_sum_to_one():
    lik = Ordinal(4, bin_edges=[-1.0, 0.2, 1.5], scale=0.6, **F64)
    mu, var = np.array([-0.5, 0.3, 2.0]), np.array([0.2, 1.0, 0.5])
    p, _ = lik.predict_mean_and_var(mu, var)
    ref = _ordinal_ref(np.array([-1.0, 0.2, 1.5]), np.sqrt(0.36 + var[:, None]))
    want = np.exp(ref(np.arange(4)[None, :] + 0 * mu[:, None], mu[:, None]))
    np.testing.assert_allclose(p, want, rtol=1e-12)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-13)
    np.testing.assert_allclose(lik.bin_edges(), [-1.0, 0.2, 1.5], rtol=1e-15)


def test_heteroscedastic_predictive_against_quadrature():
    lik = HeteroscedasticGaussian(num_gauss_hermite=40, **F64)
    y = np.array([0.3, -1.0])
    mu, var = np.array([[0.0, -1.0], [-0.5, 0.5]]), np.array([[0.2, 0.3], [0.5, 0.1]])
    pld = lik.predictive_log_density(y, mu, var)
    for i in range(2):
        want = _expect(lambda g, i=i: st.norm.pdf(y[i], mu[i, 0], np.sqrt(var[i, 0] + np.exp(g))),
                       mu[i, 1], var[i, 1])
        np.testing.assert_allclose(pld[i], np.log(want), rtol=1e-10)


BAD = [
    (lambda: Poisson(**F64), [1.0, -2.0, 3.0], "Poisson"),
    (lambda: Poisson(**F64), [1.0, 2.5], "Poisson"),
    (lambda: NegativeBinomial(**F64), [0.0, -1.0], "NegativeBinomial"),
    (lambda: Exponential(**F64), [1.0, 0.0], "Exponential"),
    (lambda: Gamma(**F64), [-1.0, 2.0], "Gamma"),
    (lambda: Beta(**F64), [0.5, 1.0], "Beta"),
    (lambda: Beta(**F64), [0.0, 0.5], "Beta"),
    (lambda: Softmax(3, **F64), [0.0, 3.0], "Softmax"),
    (lambda: Softmax(3, **F64), [0.0, 1.5], "Softmax"),
    (lambda: Ordinal(3, **F64), [-1.0, 1.0], "Ordinal"),
]


@pytest.mark.parametrize("make,y,name", BAD)
def test_bad_targets_get_a_one_line_error_naming_the_likelihood(make, y, name):
    lik = make()
    with pytest.raises(ValueError) as info:
        lik.check_targets(np.array(y))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(name + ":"), msg
    with pytest.raises(ValueError, match=name):
        shape = (len(y),) if lik.num_latent == 1 else (len(y), lik.num_latent)
        lik.variational_expectations(np.array(y), np.zeros(shape), np.ones(shape))


def test_integer_counts_and_labels_are_accepted():
    Poisson(**F64).check_targets(np.array([0, 4, 9]))
    Softmax(4, **F64).check_targets(np.array([0, 3, 1]))
    with pytest.raises(ValueError, match="Poisson"):
        Poisson(**F64).check_targets(np.array([0, -4]))


def test_from_name():
    assert isinstance(from_name("negative_binomial", **F64), NegativeBinomial)
    assert from_name("bernoulli-logit", **F64).link == "logit"
    assert from_name("softmax", num_classes=5, **F64).num_latent == 5
    with pytest.raises(ValueError, match="num_classes"):
        from_name("softmax", **F64)
    with pytest.raises(ValueError, match="unknown name"):
        from_name("poison", **F64)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_backend_and_dtype(case, xp, dtype, device, to_xp):
    """Each backend and dtype reproduces the float64 NumPy values (a reference the tests
    above pin down against Monte Carlo and quadrature)."""
    make, _, y, mu, var = _arrays(case)
    ref = make()
    ve0, g0 = ref.variational_expectations_and_grad(y, mu, var)
    pld0 = ref.predictive_log_density(y, mu, var)
    m0, v0 = ref.predict_mean_and_var(mu, var)
    lik = make()
    params = _param_values(lik)
    lik = type(lik).__new__(type(lik))
    lik.__dict__.update(make().__dict__)
    lik._init_namespace(xp, dtype, device)
    if hasattr(lik, "_rules"):
        lik._rules = {}
    if hasattr(lik, "_points"):
        lik._points = {}
    for k, v in params.items():
        setattr(lik, k, v)
    Y, M, V = to_xp(y), to_xp(mu), to_xp(var)
    ve, g = lik.variational_expectations_and_grad(Y, M, V)
    rtol = 2e-4 if dtype == xp.float32 else 1e-10
    atol = 2e-4 if dtype == xp.float32 else 1e-11
    for got, want in [(ve, ve0), (g["mu"], g0["mu"]), (g["var"], g0["var"]),
                      (lik.predictive_log_density(Y, M, V), pld0),
                      (lik.predict_mean_and_var(M, V)[0], m0),
                      (lik.predict_mean_and_var(M, V)[1], v0)]:
        assert got.dtype == dtype
        np.testing.assert_allclose(B.to_numpy(got), want, rtol=rtol, atol=atol)
    for k, v in g["params"].items():
        np.testing.assert_allclose(B.to_numpy(v), g0["params"][k], rtol=10 * rtol,
                                   atol=10 * atol)


CHECKPOINTED = {
    "poisson": lambda kw: Poisson(num_gauss_hermite=15, **kw),
    "negbin": lambda kw: NegativeBinomial(0.3, **kw),
    "exponential": lambda kw: Exponential(**kw),
    "gamma": lambda kw: Gamma(2.0, **kw),
    "beta": lambda kw: Beta(4.0, **kw),
    "laplace": lambda kw: Laplace(0.5, **kw),
    "ordinal": lambda kw: Ordinal(4, bin_edges=[-1.0, 0.0, 2.0], scale=0.3, **kw),
    "softmax": lambda kw: Softmax(3, num_points=64, **kw),
    "heteroscedastic": lambda kw: HeteroscedasticGaussian(**kw),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINTED))
def test_checkpoint_round_trip(case, tmp_path):
    import gpnum
    from gpnum.kernels import RBF

    lik = CHECKPOINTED[case](F64)
    rng = np.random.default_rng(5)
    model = gpnum.SVGP(RBF(lengthscale=0.8, **F64), lik, rng.standard_normal((6, 2)),
                       num_data=40)
    new = {}
    for k, v in model.unconstrained().items():
        step = 0.3 * rng.standard_normal(np.shape(v))
        new[k] = v + (np.tril(step) if k == "q_sqrt" else step)
    model.set_unconstrained(new)
    Xs = rng.standard_normal((5, 2))
    before = model.predict_y(Xs)
    gpnum.save(model, tmp_path / "m.npz")
    loaded = gpnum.load(tmp_path / "m.npz", xp=np)
    assert repr(loaded.likelihood) == repr(model.likelihood)
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(loaded.parameters()[k], v, err_msg=k)
    for a, b in zip(before, loaded.predict_y(Xs), strict=False):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", ["ordinal", "heteroscedastic", "gamma"])
def test_svgp_elbo_gradients_reach_the_new_likelihoods(case):
    """The model's ELBO gradient w.r.t. q_mu and the likelihood's parameters (vector edges
    included) against central finite differences of the model's ELBO."""
    import gpnum
    from gpnum.kernels import RBF

    rng = np.random.default_rng(9)
    lik = CHECKPOINTED[case](F64)
    model = gpnum.SVGP(RBF(lengthscale=0.9, **F64), lik, rng.standard_normal((5, 2)),
                       num_data=30)
    X = rng.standard_normal((12, 2))
    y = {"ordinal": rng.integers(0, 4, 12).astype(float),
         "heteroscedastic": rng.standard_normal(12),
         "gamma": rng.gamma(2.0, 1.0, 12)}[case]
    model.q_mu = 0.3 * rng.standard_normal(np.shape(model.q_mu))
    _, grads = model.elbo_and_grad(X, y)
    for name in ["q_mu"] + [f"likelihood.{k}" for k in lik.parameters()]:
        x0 = np.array(model.parameters()[name], dtype=np.float64)

        def elbo(x, name=name):
            old = np.array(model.parameters()[name])
            model.set_parameters({name: x})
            try:
                return float(model.elbo(X, y))
            finally:
                model.set_parameters({name: old})
        check_grad(elbo, x0, grads[name], name=f"{case} {name}")
