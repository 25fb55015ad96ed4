"""SVGP with a separate set of inducing points per latent function (``Z`` of shape (L, m, d)).

References are independent of the model's code: equal sets against the shared model, the ELBO
and marginals against a dense unwhitened NumPy computation per latent, gradients against central
finite differences, one natural-gradient step against the closed-form optimum (the conjugate
latent) and a hand-computed dense update, CIQ against Cholesky whitening through the rotation
between the two roots, a checkpoint round trip, and bad shapes."""

import json

import numpy as np
import pytest
from gradcheck import check_grad

import gpnum
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import Matern52
from gpnum.likelihoods import HeteroscedasticGaussian, Softmax
from gpnum.optim import NaturalGradient

LS, KVAR, C, JITTER, N = np.array([0.7, 0.9]), 1.3, 0.2, 1e-6, 40
TIGHT_CIQ = {"num_quad": 40, "rtol": 1e-12, "maxiter": 300}

# ---------------------------------------------------------------- independent NumPy reference


def matern52(X1, X2, ls, var):
    r = np.sqrt(np.maximum(((X1[:, None, :] - X2[None, :, :]) ** 2 / ls**2).sum(-1), 0.0))
    s5 = np.sqrt(5.0) * r
    return var * (1.0 + s5 + s5**2 / 3.0) * np.exp(-s5)


def sym_sqrt(K):
    w, V = np.linalg.eigh(K)
    return (V * np.sqrt(w)) @ V.T


def root(K, whitening):
    return np.linalg.cholesky(K) if whitening == "cholesky" else sym_sqrt(K)


def dense_marginals(Zs, X, q_mu, q_sqrt, whitening="cholesky", c=C):
    """Per latent, unwhitened: q(u_l) = N(W_l m'_l, W_l S'_l W_l^T) against p(u_l) = N(0, K_l);
    returns mu, var (b, L) of q(f(X)) and the summed full-covariance KL."""
    mus, vs, kl = [], [], 0.0
    for lat in range(Zs.shape[0]):
        Z = Zs[lat]
        m = Z.shape[0]
        Kzz = matern52(Z, Z, LS, KVAR) + JITTER * np.eye(m)
        W = root(Kzz, whitening)
        mu_u = W @ q_mu[lat]
        S_u = W @ q_sqrt[lat] @ q_sqrt[lat].T @ W.T
        Kxz = matern52(X, Z, LS, KVAR)
        Kinv = np.linalg.inv(Kzz)
        P = Kxz @ Kinv
        mus.append(c + P @ mu_u)
        vs.append(KVAR - np.einsum("ij,ij->i", P, Kxz) + np.einsum("ij,jk,ik->i", P, S_u, P))
        kl += 0.5 * (np.trace(Kinv @ S_u) + mu_u @ Kinv @ mu_u - m
                     + np.linalg.slogdet(Kzz)[1] - np.linalg.slogdet(S_u)[1])
    return np.stack(mus, axis=1), np.stack(vs, axis=1), kl


def hetero_ve(y, mu, var):
    """E[log N(y; f, e^g)] for independent f ~ N(mu_0, v_0), g ~ N(mu_1, v_1): the lognormal
    mean E[e^{-g}] = exp(-mu_1 + v_1 / 2) makes it closed form."""
    E = np.exp(-mu[:, 1] + 0.5 * var[:, 1])
    return -0.5 * np.log(2 * np.pi) - 0.5 * mu[:, 1] - 0.5 * ((y - mu[:, 0]) ** 2 + var[:, 0]) * E


def dense_elbo(Zs, X, y, q_mu, q_sqrt, whitening="cholesky"):
    mu, var, kl = dense_marginals(Zs, X, q_mu, q_sqrt, whitening)
    return N / X.shape[0] * hetero_ve(y, mu, var).sum() - kl


def problem(seed=0, L=2, m=5, b=8, d=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (b, d))
    Zs = rng.uniform(-1, 1, (L, m, d))
    y = np.sin(3 * X[:, 0]) + 0.3 * rng.standard_normal(b)
    q_mu = 0.5 * rng.standard_normal((L, m))
    q_sqrt = np.tril(0.3 * rng.standard_normal((L, m, m))) + 0.7 * np.eye(m)
    return X, Zs, y, q_mu, q_sqrt


def build(lik, Z, q_mu, q_sqrt, whitening="cholesky", num_data=N, xp=None, dtype=None,
          device=None, ciq=None):
    kern = Matern52(lengthscale=LS, variance=KVAR, xp=xp, dtype=dtype, device=device)
    Zx = B.asarray(Z, dtype=dtype, xp=xp, device=device) if xp is not None else Z
    model = gpnum.SVGP(kern, lik, Zx, num_data=num_data, whitening=whitening, mean=C,
                       jitter=JITTER, ciq_options=ciq)
    model.q_mu = q_mu
    model.q_sqrt = q_sqrt
    return model


def rel(a, b):
    a, b = np.asarray(B.to_numpy(a), np.float64), np.asarray(B.to_numpy(b), np.float64)
    scale = max(np.linalg.norm(a), np.linalg.norm(b), 1e-300)
    return float(np.linalg.norm(a - b) / scale)


# ---------------------------------------------------------------- (1) equal sets = shared


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_equal_sets_match_the_shared_model(xp, dtype, device, whitening):
    X, Zs, y, q_mu, q_sqrt = problem(1)
    Z = Zs[0]
    ciq = {"rtol": 1e-8 if dtype == xp.float64 else 1e-4}
    args = dict(xp=xp, dtype=dtype, device=device, ciq=ciq)
    lik = HeteroscedasticGaussian(xp=xp, dtype=dtype, device=device)
    shared = build(lik, Z, q_mu, q_sqrt, whitening, **args)
    separate = build(lik, np.stack([Z, Z]), q_mu, q_sqrt, whitening, **args)
    assert separate.separate_inducing and not shared.separate_inducing
    assert separate.num_inducing == 5 and separate.inducing_points.shape == (2, 5, 2)
    tol = 1e-10 if dtype == xp.float64 else 1e-4
    Xb, yb = B.asarray(X, dtype=dtype, xp=xp, device=device), B.asarray(y, dtype=dtype, xp=xp,
                                                                         device=device)
    e0, g0 = shared.elbo_and_grad(Xb, yb)
    e1, g1 = separate.elbo_and_grad(Xb, yb)
    assert B.get_namespace(e1) is xp and g1["inducing_points"].dtype == dtype
    assert B.device_of(g1["inducing_points"]) == device
    assert rel(e0, e1) <= tol
    assert set(g0) == set(g1)
    for k in g0:
        got = g1[k]
        if k == "inducing_points":
            assert got.shape == (2, 5, 2)
            got = xp.sum(got, axis=0)  # each latent's share of the shared set's gradient
        assert rel(g0[k], got) <= tol, k
    for full_cov in (False, True):
        for a, b in zip(shared.predict_f(Xb, full_cov=full_cov),
                        separate.predict_f(Xb, full_cov=full_cov), strict=False):
            assert rel(a, b) <= tol
    for a, b in zip(shared.predict_y(Xb), separate.predict_y(Xb), strict=False):
        assert rel(a, b) <= tol
    assert rel(shared.log_predictive_density(Xb, yb),
               separate.log_predictive_density(Xb, yb)) <= tol
    assert rel(shared.sample_f(Xb, 3, seed=4), separate.sample_f(Xb, 3, seed=4)) <= tol
    shared.to_natural()
    separate.to_natural()
    for a, b in zip(shared.predict_f(Xb), separate.predict_f(Xb), strict=False):
        assert rel(a, b) <= (1e-8 if dtype == xp.float64 else 1e-3)


# ---------------------------------------------------------------- (2) dense reference


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_elbo_and_predictions_match_dense_per_latent_computation(xp, dtype, device, whitening):
    X, Zs, y, q_mu, q_sqrt = problem(2)
    lik = HeteroscedasticGaussian(xp=xp, dtype=dtype, device=device)
    model = build(lik, Zs, q_mu, q_sqrt, whitening, xp=xp, dtype=dtype, device=device,
                  ciq={"rtol": 1e-8 if dtype == xp.float64 else 1e-4})
    ref = dense_elbo(Zs, X, y, q_mu, q_sqrt, whitening)
    Xb, yb = B.asarray(X, dtype=dtype, xp=xp, device=device), B.asarray(y, dtype=dtype, xp=xp,
                                                                         device=device)
    tol = 1e-7 if dtype == xp.float64 else 2e-3
    assert abs(float(B.to_numpy(model.elbo(Xb, yb))) - ref) <= tol * abs(ref)
    assert abs(float(B.to_numpy(model.elbo_and_grad(Xb, yb)[0])) - ref) <= tol * abs(ref)
    mu_ref, var_ref, _ = dense_marginals(Zs, X, q_mu, q_sqrt, whitening)
    mu, var = model.predict_f(Xb)
    assert mu.shape == (8, 2) and B.get_namespace(mu) is xp
    np.testing.assert_allclose(B.to_numpy(mu), mu_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(B.to_numpy(var), var_ref, rtol=tol, atol=tol)
    ym, yv = model.predict_y(Xb)
    np.testing.assert_allclose(B.to_numpy(ym), mu_ref[:, 0], rtol=tol, atol=tol)
    np.testing.assert_allclose(B.to_numpy(yv), var_ref[:, 0] + np.exp(mu_ref[:, 1]
                                                                       + 0.5 * var_ref[:, 1]),
                               rtol=tol, atol=tol)


def test_dense_reference_tight_and_full_covariance():
    """float64, tight CIQ: 1e-9 on the ELBO; the full posterior covariance per latent."""
    X, Zs, y, q_mu, q_sqrt = problem(3, L=3)
    Zs = Zs[:2]
    q_mu, q_sqrt = q_mu[:2], q_sqrt[:2]
    for whitening in ("cholesky", "ciq"):
        model = build(HeteroscedasticGaussian(), Zs, q_mu, q_sqrt, whitening, ciq=TIGHT_CIQ)
        ref = dense_elbo(Zs, X, y, q_mu, q_sqrt, whitening)
        assert abs(float(model.elbo(X, y)) - ref) <= 1e-9 * abs(ref), whitening
        _, cov = model.predict_f(X, full_cov=True)
        for lat in range(2):
            Kzz = matern52(Zs[lat], Zs[lat], LS, KVAR) + JITTER * np.eye(5)
            W = root(Kzz, whitening)
            A = np.linalg.solve(W, matern52(Zs[lat], X, LS, KVAR))
            S = q_sqrt[lat] @ q_sqrt[lat].T
            want = matern52(X, X, LS, KVAR) - A.T @ A + A.T @ S @ A
            np.testing.assert_allclose(cov[lat], want, rtol=1e-8, atol=1e-10)


def test_pathwise_samples_have_the_dense_posterior_moments():
    """Monte Carlo: 20,000 joint draws of each latent against its dense mean and covariance."""
    X, Zs, y, q_mu, q_sqrt = problem(4, m=4, b=3)
    model = build(HeteroscedasticGaussian(), Zs, q_mu, q_sqrt)
    s = model.sample_f(X, 20000, seed=1)
    assert s.shape == (20000, 3, 2)
    mu_ref, _, _ = dense_marginals(Zs, X, q_mu, q_sqrt)
    _, cov = model.predict_f(X, full_cov=True)
    for lat in range(2):
        d = s[:, :, lat]
        se = np.sqrt(np.diag(cov[lat]) / 20000)
        assert np.all(np.abs(d.mean(0) - mu_ref[:, lat]) <= 5 * se)
        np.testing.assert_allclose(np.cov(d.T), cov[lat], atol=0.05 * np.max(np.diag(cov[lat])))


# ---------------------------------------------------------------- (3) finite differences


def _flat_check(model, X, y, names=None, eps=1e-6, atol=1e-12):
    _, grads = model.elbo_and_grad(X, y)
    params = {k: B.to_numpy(v).copy() for k, v in model.parameters().items()}
    names = sorted(set(params) & set(grads)) if names is None else names
    for name in names:
        p0 = params[name]

        def f(p, name=name):
            if name == "q_sqrt":
                p = np.tril(p)
            model.set_parameters({name: p})
            try:
                return float(B.to_numpy(model.elbo(X, y)))
            finally:
                model.set_parameters({name: params[name]})

        check_grad(f, p0, B.to_numpy(grads[name]), rtol=1e-6, eps=eps, atol=atol, name=name)
    return grads


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
@pytest.mark.parametrize("lik", ["hetero", "softmax"])
def test_gradients_finite_differences(whitening, lik):
    X, Zs, y, q_mu, q_sqrt = problem(5, L=3, m=4, b=6)
    if lik == "hetero":
        Zs, q_mu, q_sqrt = Zs[:2], q_mu[:2], q_sqrt[:2]
        likelihood = HeteroscedasticGaussian()
    else:
        likelihood = Softmax(3, num_points=64)
        y = np.array([0.0, 1.0, 2.0, 1.0, 0.0, 2.0])
    model = build(likelihood, Zs, q_mu, q_sqrt, whitening,
                  ciq=TIGHT_CIQ if whitening == "ciq" else None)
    # Softmax is invariant to one shift of every latent: the constant mean's gradient vanishes
    # (round-off against round-off), hence the absolute floor there.
    grads = _flat_check(model, X, y, atol=1e-7 if lik == "softmax" else 1e-12)
    assert set(grads) == set(model.parameters())
    assert grads["inducing_points"].shape == Zs.shape


def test_gradients_finite_differences_natural_form():
    """The natural form's S'A comes from PCG solves: the gradients of Z and the kernel."""
    X, Zs, y, q_mu, q_sqrt = problem(6, m=4, b=6)
    model = build(HeteroscedasticGaussian(), Zs, q_mu, q_sqrt)
    model.to_natural()
    model.krylov_options["rtol"] = 1e-13
    grads = _flat_check(model, X, y, names=["inducing_points", "kernel.lengthscale",
                                             "kernel.variance", "mean"])
    assert "q_theta1" not in grads


# ---------------------------------------------------------------- (4) natural gradients


@pytest.mark.parametrize("method", ["dense", "krylov"])
def test_one_ngd_step_reaches_the_conjugate_optimum(xp, device, method):
    """HeteroscedasticGaussian is conjugate in its mean latent f given q(g): with gamma = 1 and
    the full data, one step puts q(f) at the closed-form optimum S = (I + A E A^T)^{-1},
    m = S A E (y - c) (E = E[e^{-g}] under the old q(g)), while the log-variance latent takes
    the dense natural-gradient step computed here from the closed-form derivatives."""
    dtype = xp.float64
    X, Zs, y, q_mu, q_sqrt = problem(7, m=5, b=12)
    lik = HeteroscedasticGaussian(xp=xp, dtype=dtype, device=device)
    model = build(lik, Zs, q_mu, q_sqrt, num_data=12, xp=xp, dtype=dtype, device=device)
    mu, var, _ = dense_marginals(Zs, X, q_mu, q_sqrt)
    A = [np.linalg.solve(np.linalg.cholesky(matern52(Zs[lat], Zs[lat], LS, KVAR) + JITTER
                                            * np.eye(5)), matern52(Zs[lat], X, LS, KVAR))
         for lat in range(2)]
    E = np.exp(-mu[:, 1] + 0.5 * var[:, 1])
    P_f = np.eye(5) + (A[0] * E) @ A[0].T
    m_f = np.linalg.solve(P_f, A[0] @ (E * (y - C)))
    Q = (y - mu[:, 0]) ** 2 + var[:, 0]
    g_mu, g_var = 0.5 * (Q * E - 1.0), -0.25 * Q * E
    AGA = (A[1] * g_var) @ A[1].T
    P_g = np.eye(5) - 2.0 * AGA
    t_g = A[1] @ g_mu - 2.0 * AGA @ q_mu[1]
    opt = NaturalGradient(gamma=1.0, method=method)
    used = opt.step(model, B.asarray(X, dtype=dtype, xp=xp, device=device),
                    B.asarray(y, dtype=dtype, xp=xp, device=device))
    assert used == 1.0
    tol = 1e-9 if method == "dense" else 1e-6
    if method == "dense":
        mus, Rs = (B.to_numpy(a) for a in model.q_cholesky())
        precisions = [np.linalg.inv(R @ R.T) for R in Rs]
        theta1 = [precisions[lat] @ mus[lat] for lat in range(2)]
    else:
        theta1, precisions = (B.to_numpy(a) for a in model.q_natural())
    np.testing.assert_allclose(precisions[0], P_f, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.linalg.solve(precisions[0], theta1[0]), m_f, rtol=tol,
                               atol=tol)
    np.testing.assert_allclose(precisions[1], P_g, rtol=tol, atol=tol)
    np.testing.assert_allclose(theta1[1], t_g, rtol=tol, atol=tol)


def test_natural_statistics_of_row_chunks_add_up_to_the_batch():
    """What gpnum.distributed gathers: with A (L, m, b) the per-latent sums over row chunks
    equal the whole batch's, and equal A_l diag(g_var_l) A_l^T, A_l g_mu_l formed densely."""
    from gpnum.optim import natural_statistics

    X, Zs, y, q_mu, q_sqrt = problem(13, b=10)
    model = build(HeteroscedasticGaussian(), Zs, q_mu, q_sqrt)
    whole = natural_statistics(model.data_term_and_grad(X, y, scale=1.0), clip_curvature=True)
    parts = [natural_statistics(model.data_term_and_grad(X[r], y[r], scale=1.0),
                                clip_curvature=True) for r in (slice(0, 4), slice(4, 10))]
    d = model.data_term_and_grad(X, y, scale=1.0)
    for lat in range(2):
        A_l = np.linalg.solve(np.linalg.cholesky(matern52(Zs[lat], Zs[lat], LS, KVAR)
                                                 + JITTER * np.eye(5)),
                              matern52(Zs[lat], X, LS, KVAR))
        gv = np.minimum(d["g_var"][:, lat], 0.0)
        np.testing.assert_allclose(whole["AGA"][lat], (A_l * gv) @ A_l.T, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(whole["Ag_mu"][lat], A_l @ d["g_mu"][:, lat], rtol=1e-10)
    for k in ("AGA", "Ag_mu"):
        np.testing.assert_allclose(parts[0][k] + parts[1][k], whole[k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", ["dense", "krylov"])
def test_equal_sets_take_the_shared_models_natural_gradient_step(method):
    X, Zs, y, q_mu, q_sqrt = problem(14)
    shared = build(HeteroscedasticGaussian(), Zs[0], q_mu, q_sqrt)
    separate = build(HeteroscedasticGaussian(), np.stack([Zs[0], Zs[0]]), q_mu, q_sqrt)
    for model in (shared, separate):
        NaturalGradient(gamma=0.7, method=method).step(model, X, y)
    for k, v in shared.parameters().items():
        assert rel(v, separate.parameters()[k] if k != "inducing_points"
                   else separate.parameters()[k][0]) <= 1e-10, k


# ---------------------------------------------------------------- (5) CIQ against Cholesky


def test_ciq_whitening_agrees_with_cholesky_whitening():
    """The same q(u_l) in either whitening (m'_ciq = Q_l m'_chol, S'_ciq = Q_l S' Q_l^T with
    Q_l = K_l^{-1/2} L_l per latent): ELBO and predictions agree to CIQ's tolerance."""
    rng = np.random.default_rng(8)
    m, b, L = 30, 20, 2
    X = rng.uniform(-2, 2, (b, 2))
    Zs = rng.uniform(-2, 2, (L, m, 2))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(b)
    q_mu = 0.3 * rng.standard_normal((L, m))
    q_sqrt = np.tril(0.05 * rng.standard_normal((L, m, m))) + 0.6 * np.eye(m)
    mu_c, R_c = [], []
    for lat in range(L):
        K = matern52(Zs[lat], Zs[lat], LS, KVAR) + JITTER * np.eye(m)
        Q = np.linalg.solve(sym_sqrt(K), np.linalg.cholesky(K))
        mu_c.append(Q @ q_mu[lat])
        R_c.append(np.linalg.cholesky(Q @ q_sqrt[lat] @ q_sqrt[lat].T @ Q.T))
    chol = build(HeteroscedasticGaussian(), Zs, q_mu, q_sqrt, "cholesky")
    for rtol, tol in ((1e-4, 1e-3), (1e-10, 1e-7)):
        ciq = build(HeteroscedasticGaussian(), Zs, np.stack(mu_c), np.stack(R_c), "ciq",
                    ciq={"rtol": rtol, "num_quad": 30, "maxiter": 500})
        e0, e1 = float(chol.elbo(X, y)), float(ciq.elbo(X, y))
        assert abs(e0 - e1) <= tol * abs(e0), (rtol, e0, e1)
        for a, c in zip(chol.predict_f(X), ciq.predict_f(X), strict=False):
            assert rel(a, c) <= tol


# ---------------------------------------------------------------- (6) checkpoints


@pytest.mark.parametrize("form", ["cholesky", "natural"])
def test_checkpoint_round_trip(tmp_path, xp, dtype, device, form):
    X, Zs, y, q_mu, q_sqrt = problem(9)
    lik = HeteroscedasticGaussian(xp=xp, dtype=dtype, device=device)
    model = build(lik, Zs, q_mu, q_sqrt, xp=xp, dtype=dtype, device=device)
    if form == "natural":
        model.to_natural()
    Xb = B.asarray(X, dtype=dtype, xp=xp, device=device)
    before = model.predict_f(Xb)
    gpnum.save(model, tmp_path / "sep.npz")
    loaded = gpnum.load(tmp_path / "sep.npz", xp=xp, device=device)
    assert loaded.separate_inducing and loaded.variational_form == form
    assert loaded.inducing_points.shape == (2, 5, 2) and loaded.dtype == dtype
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(B.to_numpy(loaded.parameters()[k]), B.to_numpy(v))
    for a, c in zip(before, loaded.predict_f(Xb), strict=False):
        np.testing.assert_array_equal(B.to_numpy(a), B.to_numpy(c))
    again = gpnum.SVGP.from_config(model.kernel, model.likelihood, model.parameters(),
                                   json.loads(json.dumps(model.config())), model.data())
    assert again.separate_inducing and again.inducing_points.shape == (2, 5, 2)


# ---------------------------------------------------------------- (7) bad shapes


def test_wrong_shapes_are_refused_with_one_line_errors():
    X, Zs, y, q_mu, q_sqrt = problem(10, L=3)
    kern = Matern52(lengthscale=LS, variance=KVAR)
    with pytest.raises(ShapeError) as exc:
        gpnum.SVGP(kern, HeteroscedasticGaussian(), Zs, num_data=N)
    msg = str(exc.value)
    assert "\n" not in msg and "expected 2 sets" in msg and "got 3" in msg
    with pytest.raises(ShapeError, match=r"\(m, d\) or \(2, m, d\)"):
        gpnum.SVGP(kern, HeteroscedasticGaussian(), Zs[None], num_data=N)
    model = gpnum.SVGP(kern, HeteroscedasticGaussian(), Zs[:2], num_data=N)
    with pytest.raises(ShapeError, match="inducing_points"):
        model.set_parameters({"inducing_points": Zs[0]})
    with pytest.raises(ShapeError, match=r"X: expected shape \(n, 2\)"):
        model.predict_f(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="separate_inducing"):
        gpnum.models.build_model(X, y, model="sgpr", num_inducing=4, separate_inducing=True)


# ---------------------------------------------------------------- builders, CLI, sklearn


def test_build_model_places_one_kmeans_copy_per_latent():
    X, _, _, _, _ = problem(11, b=30)
    shared = gpnum.models.build_model(X, likelihood="heteroscedastic-gaussian", num_inducing=6)
    sep = gpnum.models.build_model(X, likelihood="heteroscedastic-gaussian", num_inducing=6,
                                   separate_inducing=True)
    assert sep.separate_inducing and sep.inducing_points.shape == (2, 6, 2)
    for lat in range(2):
        np.testing.assert_array_equal(sep.inducing_points[lat], shared.inducing_points)


def test_fit_command_trains_and_saves_a_separate_inducing_model(tmp_path):
    from gpnum.cli import main

    path = tmp_path / "sep.npz"
    status = main(["fit", "--dataset", "bikelog", "--separate-inducing", "--num-inducing", "10",
                   "--epochs", "1", "--max-train", "300", "--out", str(tmp_path / "out"),
                   "--no-progress", "--save", str(path)])
    assert status == 0
    res = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert np.isfinite(res["metrics"]["test"]["nll"])
    model = gpnum.load(path)
    assert model.inducing_points.shape[:2] == (2, 10)
    assert main(["fit", "--dataset", "bikelog", "--model", "sgpr", "--separate-inducing",
                 "--max-train", "300", "--out", str(tmp_path / "no"), "--no-progress"]) == 2
    # trained: the two sets, equal at the start, moved apart
    assert np.max(np.abs(model.inducing_points[0] - model.inducing_points[1])) > 0.0


def test_sklearn_classifier_separate_inducing():
    pytest.importorskip("sklearn")
    from gpnum.sklearn import SVGPClassifier

    rng = np.random.default_rng(12)
    X = rng.uniform(-3, 3, (90, 1))
    y = np.digitize(X[:, 0], [-1.0, 1.0])
    clf = SVGPClassifier(num_inducing=8, epochs=30, batch_size=90, separate_inducing=True,
                         random_state=0).fit(X, y)
    assert clf.model_.inducing_points.shape == (3, 8, 1)
    assert clf.score(X, y) >= 0.9
