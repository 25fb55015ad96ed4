"""The model protocol's split of a minibatch objective: data term (a sum over rows) + prior term."""

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Bernoulli, Gaussian


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli"])
def test_chunks_plus_prior_equal_the_objective(xp, device, likelihood):
    opts = dict(xp=xp, dtype=xp.float64, device=device)
    bern = likelihood == "bernoulli"
    likelihood = Bernoulli(**opts) if bern else Gaussian(variance=0.3, **opts)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (90, 2))
    y = (np.sin(3 * X[:, 0]) > 0).astype(float) if bern else X[:, 0]
    m = 12
    model = gpnum.SVGP(Matern52(lengthscale=np.ones(2), **opts), likelihood,
                       B.asarray(X[:m], **opts), num_data=900)
    model.set_parameters({"q_mu": rng.standard_normal(m),
                          "q_sqrt": np.tril(0.2 * rng.standard_normal((m, m))) + np.eye(m)})
    Xx, yx = B.asarray(X, **opts), B.asarray(y, **opts)
    value, grads = model.objective_and_grad(Xx, yx)
    p_value, p_grads = model.prior_term_and_grad()
    # the prior term is -KL(q || N(0, I)) in closed form, with its gradients w.r.t. q only
    q_mu = B.to_numpy(model.parameters()["q_mu"])
    L = np.tril(B.to_numpy(model.parameters()["q_sqrt"]))
    kl = 0.5 * (np.sum(L * L) + q_mu @ q_mu - m) - np.sum(np.log(np.abs(np.diag(L))))
    assert abs(float(p_value) + kl) < 1e-10 * kl
    np.testing.assert_allclose(B.to_numpy(p_grads["q_mu"]), -q_mu, rtol=1e-12)
    np.testing.assert_allclose(B.to_numpy(p_grads["q_sqrt"]),
                               -(L - np.diag(1.0 / np.diag(L))), rtol=1e-10, atol=1e-12)
    assert set(p_grads) == {"q_mu", "q_sqrt"}
    total = float(p_value)
    gsum = {k: B.to_numpy(p_grads.get(k, 0.0 * v)) for k, v in grads.items()}
    for idx in np.array_split(np.arange(90), 4):
        v, g = model.objective_and_grad(Xx[idx[0]:idx[-1] + 1, ...], yx[idx[0]:idx[-1] + 1],
                                        scale=900 / 90)
        total += float(v) - float(p_value)
        for k in grads:
            gsum[k] = gsum[k] + B.to_numpy(g[k]) - B.to_numpy(p_grads.get(k, 0.0 * g[k]))
    assert abs(total - float(value)) < 1e-10 * abs(float(value))
    for k in grads:
        np.testing.assert_allclose(gsum[k], B.to_numpy(grads[k]), rtol=1e-9, atol=1e-11,
                                   err_msg=k)
