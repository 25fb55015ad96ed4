"""OILMM against the exact LMC it is (Bruinsma et al. 2020): the dense (n t) Gaussian
log-likelihood with covariance sum_i kron(K_i, h_i h_i^T) + kron(I, sigma^2 I + H D H^T), the
dense posterior, and gradients against finite differences of that reference."""

import numpy as np
import pytest
from gradcheck import check_grad
from kernel_refs_everyday import matern32_reference, rbf_reference

import gpnum
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import RBF, Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import OILMM

T, Q = 4, 2
LS = np.array([0.7, 1.3])


rbf_np = rbf_reference  # the tests' shared dense references
matern32_np = matern32_reference


def grams(p, X1, X2):
    return [rbf_np(X1, X2, p["kernel.0.lengthscale"], p["kernel.0.variance"]),
            matern32_np(X1, X2, p["kernel.1.lengthscale"], p["kernel.1.variance"])]


def mixing_np(p):
    M = p["mixing"]
    lam, V = np.linalg.eigh(M.T @ M)
    U = M @ V @ np.diag(lam ** -0.5) @ V.T
    return U * np.sqrt(p["scales"])[None, :]


def dense(p, X):
    n = X.shape[0]
    H = mixing_np(p)
    noise = p["likelihood.variance"] * np.eye(T) + H @ np.diag(p["latent_noise"]) @ H.T
    S = sum(np.kron(K, np.outer(H[:, i], H[:, i])) for i, K in enumerate(grams(p, X, X)))
    return S + np.kron(np.eye(n), noise), H


def lml_np(p, X, Y):
    S, _ = dense(p, X)
    r = (Y - p["mean"][None, :]).reshape(-1)
    return -0.5 * (r @ np.linalg.solve(S, r) + np.linalg.slogdet(S)[1]
                   + r.size * np.log(2 * np.pi))


def problem(seed=0, n=9):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, 2))
    Y = rng.normal(size=(n, T))
    p = {"mean": rng.normal(size=T), "mixing": rng.normal(size=(T, Q)),
         "scales": rng.uniform(0.5, 2.0, Q), "latent_noise": rng.uniform(0.05, 0.3, Q),
         "kernel.0.lengthscale": LS.copy(), "kernel.0.variance": 1.2,
         "kernel.1.lengthscale": 0.6, "kernel.1.variance": 0.8, "likelihood.variance": 0.2}
    return X, Y, p


def make(p, X, Y, xp=np, dtype=np.float64, device="cpu"):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    kernels = [RBF(lengthscale=B.asarray(p["kernel.0.lengthscale"], **kw),
                   variance=p["kernel.0.variance"], **kw),
               Matern32(lengthscale=p["kernel.1.lengthscale"], variance=p["kernel.1.variance"],
                        **kw)]
    return OILMM(kernels, Gaussian(variance=p["likelihood.variance"], **kw),
                 B.asarray(X, **kw), B.asarray(Y, **kw),
                 **{k: B.asarray(p[k], **kw) for k in ("mixing", "scales", "latent_noise",
                                                       "mean")})


def test_lml_and_predictions_match_dense_lmc(xp, dtype, device):
    X, Y, p = problem()
    model = make(p, X, Y, xp, dtype, device)
    ref = lml_np(p, X, Y)
    tol = 1e-9 if dtype == xp.float64 else 2e-4
    assert abs(float(model.log_marginal_likelihood()) - ref) <= tol * abs(ref)
    Xs = np.random.default_rng(5).uniform(-2, 2, (3, 2))
    S, H = dense(p, X)
    cross = sum(np.kron(K, np.outer(H[:, i], H[:, i])) for i, K in enumerate(grams(p, Xs, X)))
    prior = sum(np.kron(K, np.outer(H[:, i], H[:, i])) for i, K in enumerate(grams(p, Xs, Xs)))
    r = (Y - p["mean"][None, :]).reshape(-1)
    mean_ref = p["mean"][None, :] + (cross @ np.linalg.solve(S, r)).reshape(3, T)
    cov_ref = prior - cross @ np.linalg.solve(S, cross.T)
    kw = {"xp": xp, "dtype": dtype, "device": device}
    mean, cov = model.predict_f(B.asarray(Xs, **kw), full_output_cov=True)
    np.testing.assert_allclose(B.to_numpy(mean), mean_ref, rtol=tol, atol=tol)
    blocks = np.stack([cov_ref[i * T:(i + 1) * T, i * T:(i + 1) * T] for i in range(3)])
    np.testing.assert_allclose(B.to_numpy(cov), blocks, rtol=tol, atol=tol)
    _, var = model.predict_f(B.asarray(Xs, **kw))
    np.testing.assert_allclose(B.to_numpy(var), np.diagonal(blocks, axis1=1, axis2=2),
                               rtol=tol, atol=tol)


def test_gradients_match_finite_differences_of_dense_lmc():
    X, Y, p = problem(seed=3)
    model = make(p, X, Y)
    _, grads = model.log_marginal_likelihood_and_grad()
    assert set(grads) == set(model.parameters())
    for name, value in p.items():
        value = np.array(value, dtype=np.float64)
        check_grad(lambda x, name=name: lml_np({**p, name: x}, X, Y), value,
                   np.asarray(grads[name]), name=name)


@pytest.mark.filterwarnings("ignore::gpnum.ConvergenceWarning")
def test_fit_and_bad_input():
    X, Y, p = problem(seed=4, n=20)
    model = make(p, X, Y)
    before = float(model.log_marginal_likelihood())
    gpnum.fit(model, maxiter=50)
    assert float(model.log_marginal_likelihood()) > before
    with pytest.raises(ShapeError, match="shared"):
        OILMM([RBF(), RBF()], Gaussian(variance=np.ones(T)), X, Y)
    with pytest.raises(ValueError, match="NaN|finite"):
        OILMM([RBF(), RBF()], Gaussian(), X, np.where(Y > 1.0, np.nan, Y))
    with pytest.raises(ValueError, match="at most"):
        OILMM([RBF() for _ in range(T + 1)], Gaussian(), X, Y)
