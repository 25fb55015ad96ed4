"""Every hand-derived likelihood gradient against central finite differences in float64.

The Gauss-Hermite rule is differentiated exactly, so its gradients match finite differences of
its own values for any number of nodes, including coarse rules far from the true integral.
"""

import numpy as np
import pytest
from gradcheck import check_grad

from gpnum.likelihoods import Bernoulli, Gaussian, RobustMax, StudentT

RNG = np.random.default_rng(2024)


def _check_latent_grads(lik, y, mu, var):
    ve, grads = lik.variational_expectations_and_grad(y, mu, var)
    np.testing.assert_array_equal(ve, lik.variational_expectations(y, mu, var))
    c = RNG.uniform(0.5, 1.5, mu.shape[0])  # per-point cotangent: the Jacobian is diagonal
    cc = c if mu.ndim == 1 else c[:, None]
    check_grad(lambda m: np.sum(c * lik.variational_expectations(y, m, var)), mu,
               cc * grads["mu"], name=f"{lik!r} d/dmu")
    check_grad(lambda v: np.sum(c * lik.variational_expectations(y, mu, v)), var,
               cc * grads["var"], name=f"{lik!r} d/dvar")
    return grads


def _check_param_grads(make, params, y, mu, var):
    grads = make(**params).variational_expectations_and_grad(y, mu, var)[1]["params"]
    assert set(grads) == set(params)
    names = sorted(params)
    theta0 = np.array([params[k] for k in names])

    def total(theta):
        return np.sum(make(**dict(zip(names, theta, strict=False))).variational_expectations(y, mu, var))

    check_grad(total, theta0, np.array([float(grads[k]) for k in names]),
               name=f"params {names} at {theta0}")
    for k in names:
        assert np.shape(grads[k]) == ()


def test_gaussian_gradients():
    n = 7
    y, mu, var = RNG.normal(size=n), RNG.normal(size=n), RNG.uniform(0.05, 2.0, n)
    _check_latent_grads(Gaussian(0.4), y, mu, var)
    _check_param_grads(lambda variance: Gaussian(variance), {"variance": 0.4}, y, mu, var)


@pytest.mark.parametrize("df,scale", [(4.0, 0.5), (0.6, 1.3), (3e4, 0.2)])
@pytest.mark.parametrize("q", [5, 20])
def test_student_t_gradients(df, scale, q):
    n = 6
    y = RNG.normal(size=n)
    mu = y + np.array([0.0, 0.3, -1.2, 4.0, -25.0, 0.01])
    var = RNG.uniform(0.05, 2.0, n)
    _check_latent_grads(StudentT(df, scale, q), y, mu, var)
    _check_param_grads(lambda df, scale: StudentT(df, scale, q), {"df": df, "scale": scale},
                       y, mu, var)


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("q", [3, 20])
def test_bernoulli_gradients(link, q):
    # includes confident wrong predictions (mu = -30 for y = 1), deep in log_ndtr's tail
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    mu = np.array([-8.0, 8.0, 0.3, -30.0, -0.7, 2.0])
    var = np.array([0.01, 0.5, 2.0, 0.1, 1.0, 3.0])
    grads = _check_latent_grads(Bernoulli(link, q), y, mu, var)
    assert grads["params"] == {}


@pytest.mark.parametrize("q", [4, 20])
def test_robust_max_gradients(q):
    n, C = 5, 4
    mu = RNG.normal(size=(n, C))
    mu[0] = [0.2, 0.2, 0.2, 0.2]  # ties
    var = RNG.uniform(0.1, 2.0, (n, C))
    y = np.array([0, 3, 1, 2, 0])
    grads = _check_latent_grads(RobustMax(C, 0.02, q), y, mu, var)
    assert grads["params"] == {} and grads["mu"].shape == (n, C)
    # shifting every latent by the same amount leaves S unchanged: the mu-gradient rows sum to 0
    np.testing.assert_allclose(grads["mu"].sum(axis=1), 0.0, atol=1e-12)


def test_unconstrained_chain_rule_for_likelihood_parameters():
    y, mu, var = RNG.normal(size=4), RNG.normal(size=4), RNG.uniform(0.1, 1.0, 4)
    lik = StudentT(3.0, 0.8)
    grads = lik.variational_expectations_and_grad(y, mu, var)[1]["params"]
    g_u = lik.grad_to_unconstrained(grads)
    u0 = lik.unconstrained()

    def total(u):
        other = StudentT(1.0, 1.0)
        other.set_unconstrained({"df": np.asarray(u[0]), "scale": np.asarray(u[1])})
        return np.sum(other.variational_expectations(y, mu, var))

    check_grad(total, np.array([float(u0["df"]), float(u0["scale"])]),
               np.array([float(g_u["df"]), float(g_u["scale"])]))
