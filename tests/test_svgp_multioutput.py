"""LMCSVGP against a dense, non-whitened NumPy evaluation of the same variational bound (the
KL between full Gaussians over u_j = L_j u'_j and the prior N(0, K_ZZ), the marginals through
K_ZZ^{-1}), gradients against finite differences of that reference, and the pair helper."""

import numpy as np
import pytest
from gradcheck import check_grad, numerical_grad, relative_error
from kernel_refs_everyday import matern32_reference, rbf_reference

import gpnum
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import RBF, Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import LMCSVGP, stack_outputs

T, Q, M, JITTER = 3, 2, 5, 1e-6
LS = np.array([0.7, 1.3])


rbf_np = rbf_reference  # the tests' shared dense references
matern32_np = matern32_reference


def kern_np(j, p, X1, X2):
    if j == 0:
        return rbf_np(X1, X2, p["kernel.0.lengthscale"], p["kernel.0.variance"])
    return matern32_np(X1, X2, p["kernel.1.lengthscale"], p["kernel.1.variance"])


def elbo_np(p, Xp, y, N):
    Xin, a = Xp[:, :-1], Xp[:, -1].astype(int)
    MU, VAR, KL = [], [], 0.0
    for j in range(Q):
        Z = p["inducing_points"]
        Z = Z[j] if Z.ndim == 3 else Z   # one set per latent, or shared
        Kzz = kern_np(j, p, Z, Z) + JITTER * np.eye(M)
        Kxz = kern_np(j, p, Xin, Z)
        kxx = np.diagonal(kern_np(j, p, Xin, Xin))
        L = np.linalg.cholesky(Kzz)
        R = np.tril(p["q_sqrt"][j])
        mu_u, S_u = L @ p["q_mu"][j], L @ R @ R.T @ L.T
        Kinv = np.linalg.inv(Kzz)
        MU.append(Kxz @ Kinv @ mu_u)
        VAR.append(kxx - np.einsum("ij,jk,ik->i", Kxz, Kinv, Kxz)
                   + np.einsum("ij,jk,ik->i", Kxz, Kinv @ S_u @ Kinv, Kxz))
        KL += 0.5 * (np.trace(Kinv @ S_u) + mu_u @ Kinv @ mu_u - M
                     + np.linalg.slogdet(Kzz)[1] - np.linalg.slogdet(S_u)[1])
    MU, VAR = np.stack(MU, 1), np.stack(VAR, 1)
    H = p["W"][a]
    f = p["mean"][a] + (H * MU).sum(1)
    v = (H * H * VAR).sum(1)
    s2 = np.broadcast_to(p["likelihood.variance"], (T,))[a]
    ve = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((y - f) ** 2 + v) / s2
    return N / len(y) * ve.sum() - KL, f, v


def problem(seed=0, n=8):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, 2))
    Y = np.stack([np.sin(2 * X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1]], 1)
    Y = Y + 0.2 * rng.standard_normal(Y.shape)
    Y[rng.uniform(size=Y.shape) < 0.3] = np.nan
    Xp, y = stack_outputs(X, Y)
    p = {"q_mu": rng.normal(size=(Q, M)),
         "q_sqrt": np.tril(rng.normal(size=(Q, M, M))) * 0.3 + np.eye(M)[None],
         "W": rng.normal(size=(T, Q)), "inducing_points": rng.uniform(-1.5, 1.5, (M, 2)),
         "mean": rng.normal(size=T), "kernel.0.lengthscale": LS.copy(),
         "kernel.0.variance": 1.2, "kernel.1.lengthscale": 0.6, "kernel.1.variance": 0.8,
         "likelihood.variance": rng.uniform(0.1, 0.4, T)}
    return np.asarray(Xp), np.asarray(y), p


def make(p, N, xp=np, dtype=np.float64, device="cpu"):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    kernels = [RBF(lengthscale=B.asarray(p["kernel.0.lengthscale"], **kw),
                   variance=p["kernel.0.variance"], **kw),
               Matern32(lengthscale=p["kernel.1.lengthscale"], variance=p["kernel.1.variance"],
                        **kw)]
    model = LMCSVGP(kernels, Gaussian(variance=B.asarray(p["likelihood.variance"], **kw), **kw),
                    B.asarray(p["inducing_points"], **kw), num_outputs=T, num_data=N,
                    W=B.asarray(p["W"], **kw), mean=B.asarray(p["mean"], **kw), jitter=JITTER)
    model.set_parameters({"q_mu": B.asarray(p["q_mu"], **kw),
                          "q_sqrt": B.asarray(p["q_sqrt"], **kw)})
    return model


def test_stack_outputs_keeps_observed_entries():
    X = np.arange(6.0).reshape(3, 2)
    Y = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 4.0]])
    Xp, y = stack_outputs(X, Y)
    np.testing.assert_array_equal(Xp, [[0.0, 1.0, 0.0], [4.0, 5.0, 0.0], [4.0, 5.0, 1.0]])
    np.testing.assert_array_equal(y, [1.0, 3.0, 4.0])


def test_elbo_and_predictions_match_dense_reference(xp, dtype, device):
    Xp, y, p = problem()
    N = 40
    model = make(p, N, xp, dtype, device)
    ref, f, v = elbo_np(p, Xp, y, N)
    tol = 1e-9 if dtype == xp.float64 else 2e-4
    kw = {"xp": xp, "dtype": dtype, "device": device}
    value, grads = model.objective_and_grad(B.asarray(Xp, **kw), B.asarray(y, **kw))
    assert abs(float(value) - ref) <= tol * abs(ref)
    assert set(grads) == set(model.parameters())
    mean, var = model.predict_f(B.asarray(Xp, **kw))
    np.testing.assert_allclose(B.to_numpy(mean), f, rtol=tol, atol=tol)
    np.testing.assert_allclose(B.to_numpy(var), v, rtol=tol, atol=tol)
    # every output at plain inputs: the pairs' values at their own outputs
    mean_all, var_all = model.predict_outputs(B.asarray(Xp[:, :-1], **kw))
    a = Xp[:, -1].astype(int)
    np.testing.assert_allclose(B.to_numpy(mean_all)[np.arange(len(a)), a], f, rtol=tol,
                               atol=tol)
    _, cov = model.predict_outputs(B.asarray(Xp[:, :-1], **kw), full_output_cov=True)
    np.testing.assert_allclose(np.diagonal(B.to_numpy(cov), axis1=1, axis2=2),
                               B.to_numpy(var_all), rtol=tol, atol=tol)


@pytest.mark.parametrize("separate", [False, True])
def test_gradients_match_finite_differences_of_reference(separate):
    Xp, y, p = problem(seed=1)
    if separate:
        p["inducing_points"] = np.random.default_rng(5).uniform(-1.5, 1.5, (Q, M, 2))
    N = 40
    model = make(p, N)
    _, grads = model.objective_and_grad(Xp, y)
    for name, value in p.items():
        value = np.array(value, dtype=np.float64)

        def f(x, name=name):
            return elbo_np({**p, name: x}, Xp, y, N)[0]

        g = np.asarray(grads[name])
        if name == "q_sqrt":   # the parameter is lower-triangular
            num = np.tril(numerical_grad(f, value))
            assert relative_error(g, num) < 1e-6, name
        else:
            check_grad(f, value, g, name=name)


def test_trains_with_adam_on_pairs():
    Xp, y, p = problem(seed=2, n=30)
    model = make(p, Xp.shape[0])
    before = float(model.objective_and_grad(Xp, y)[0])
    gpnum.fit(model, Xp, y, optimizer="adam", epochs=60, batch_size=32, lr=0.05,
              progress=False)
    after = float(model.objective_and_grad(Xp, y)[0])
    assert after > before


def test_bad_input():
    Xp, y, p = problem()
    model = make(p, 40)
    with pytest.raises(ShapeError, match="pairs"):
        model.objective_and_grad(Xp[:, :-1], y)
    bad = Xp.copy()
    bad[0, -1] = 7.0
    with pytest.raises(ValueError, match="output indices"):
        model.objective_and_grad(bad, y)
    with pytest.raises(ShapeError, match="W"):
        LMCSVGP([RBF(), Matern32()], Gaussian(), p["inducing_points"], num_outputs=T,
                num_data=10, W=np.ones((2, 2)))


# ---------------------------------------------------------------- natural gradients
def whitened_A(p, Xin):
    """Each latent's ``L_j^{-1} K_j(Z_j, X)`` (M, b), by NumPy."""
    As = []
    for j in range(Q):
        Z = p["inducing_points"]
        Z = Z[j] if Z.ndim == 3 else Z
        L = np.linalg.cholesky(kern_np(j, p, Z, Z) + JITTER * np.eye(M))
        As.append(np.linalg.solve(L, kern_np(j, p, Z, Xin)))
    return As


def joint_precision(p, Xp, y, N):
    """With a Gaussian likelihood the data term is Gaussian in the stacked whitened
    ``u' = (u'_1, ..., u'_Q)``: ``f_i = c_{a_i} + Phi_i u'``. Returns the scaled posterior's
    precision ``I + Phi^T D Phi`` (Q M, Q M) and ``Phi^T D (y - c)``."""
    Xin, a = Xp[:, :-1], Xp[:, -1].astype(int)
    As = whitened_A(p, Xin)
    s2 = np.broadcast_to(p["likelihood.variance"], (T,))[a]
    D = N / len(y) / s2
    Phi = np.concatenate([p["W"][a, j][:, None] * As[j].T for j in range(Q)], axis=1)
    return np.eye(Q * M) + Phi.T @ (D[:, None] * Phi), Phi.T @ (D * (y - p["mean"][a]))


@pytest.mark.parametrize("separate", [False, True])
def test_natural_gradient_step_of_one_is_each_latents_optimum_given_the_others(xp, dtype,
                                                                              device, separate):
    Xp, y, p = problem(seed=3, n=10)
    if separate:
        p["inducing_points"] = np.random.default_rng(6).uniform(-1.5, 1.5, (Q, M, 2))
    N = 50
    kw = {"xp": xp, "dtype": dtype, "device": device}
    model = make(p, N, xp, dtype, device)
    P, b = joint_precision(p, Xp, y, N)
    # latent j's optimum with the others held: S_j = P_jj^{-1}, m_j = S_j (b_j - P_jk m_k)
    blk = [slice(j * M, (j + 1) * M) for j in range(Q)]
    m_old = p["q_mu"]
    _, _, data = model.objective_and_grad(B.asarray(Xp, **kw), B.asarray(y, **kw),
                                          return_data=True)
    used = gpnum.optim.NaturalGradient(gamma=1.0).step(model, data=data)
    assert used == 1.0
    tol = 1e-8 if dtype == xp.float64 else 2e-3
    for j in range(Q):
        S = np.linalg.inv(P[blk[j], blk[j]])
        rhs = b[blk[j]] - sum(P[blk[j], blk[k]] @ m_old[k] for k in range(Q) if k != j)
        q_sqrt = B.to_numpy(model.q_sqrt)[j]
        np.testing.assert_allclose(B.to_numpy(model.q_mu)[j], S @ rhs, rtol=tol, atol=tol)
        np.testing.assert_allclose(q_sqrt @ q_sqrt.T, S, rtol=tol, atol=tol)


def test_fit_with_natural_gradients_reaches_the_mean_field_optimum():
    # hyper-parameters held: natural gradients alone reach the factorised q's optimum, whose
    # means are the joint posterior's and whose covariances are P_jj^{-1}
    Xp, y, p = problem(seed=4, n=10)
    model = make(p, Xp.shape[0])
    fixed = [k for k in model.parameters() if k not in ("q_mu", "q_sqrt")]
    gpnum.fit(model, Xp, y, epochs=150, batch_size=Xp.shape[0], gamma=0.5, fixed=fixed,
              progress=False)
    P, b = joint_precision(p, Xp, y, Xp.shape[0])
    mean = np.linalg.solve(P, b).reshape(Q, M)
    np.testing.assert_allclose(B.to_numpy(model.q_mu), mean, rtol=1e-7, atol=1e-8)
    for j in range(Q):
        R = B.to_numpy(model.q_sqrt)[j]
        S = np.linalg.inv(P[j * M:(j + 1) * M, j * M:(j + 1) * M])
        np.testing.assert_allclose(R @ R.T, S, rtol=1e-7, atol=1e-8)


def test_default_fit_uses_natural_gradients_and_improves_the_elbo():
    Xp, y, p = problem(seed=2, n=30)
    model = make(p, Xp.shape[0])
    before = float(model.objective_and_grad(Xp, y)[0])
    gpnum.fit(model, Xp, y, epochs=30, batch_size=32, progress=False)
    after = float(model.objective_and_grad(Xp, y)[0])
    assert after > before
    with pytest.raises(NotImplementedError, match="dense"):
        gpnum.fit(model, Xp, y, epochs=1, ngd_method="krylov", progress=False)


def test_separate_inducing_points_match_dense_reference():
    Xp, y, p = problem(seed=7)
    p["inducing_points"] = np.random.default_rng(8).uniform(-1.5, 1.5, (Q, M, 2))
    N = 40
    model = make(p, N)
    assert model.separate_inducing
    ref, f, v = elbo_np(p, Xp, y, N)
    value, grads = model.objective_and_grad(Xp, y)
    assert abs(float(value) - ref) <= 1e-9 * abs(ref)
    assert grads["inducing_points"].shape == (Q, M, 2)
    mean, var = model.predict_f(Xp)
    np.testing.assert_allclose(np.asarray(mean), f, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(var), v, rtol=1e-9, atol=1e-12)
    with pytest.raises(ShapeError, match="sets"):
        LMCSVGP([RBF(), Matern32()], Gaussian(), np.zeros((3, M, 2)), num_outputs=T,
                num_data=10)
