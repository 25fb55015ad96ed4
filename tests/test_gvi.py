"""GVI (gpnum.GVI): regularisers against dense NumPy / closed forms on every backend, gradients by
finite differences for every regulariser, variational kernel and mean, posterior mode against a
dense GP posterior, tempering against a brute-force search, checkpoints, fit, bad input.

References are computed here from scratch in NumPy/SciPy (RBF gram matrices, Cholesky factors,
``scipy.linalg.sqrtm`` for the Wasserstein cross term, the textbook per-point divergences of
design notes 4.5), never from gpnum's own functions.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from gradcheck import check_grad
from kernel_refs_everyday import rbf_reference

import gpnum
from gpnum import backend as B
from gpnum.kernels import RBF
from gpnum.likelihoods import Bernoulli, Gaussian, RobustMax

KERNELS = ("svgp-cholesky", "svgp-diagonal", "svgp-log-diagonal", "kernelised",
           "sparse-posterior", "fixed-sparse-posterior")
MEANS = ("svgp", "constant", "mlp")
REGS = ("wasserstein", "squared-difference", "projected-wasserstein", "projected-bhattacharyya",
        "projected-hellinger", "projected-kl", "projected-renyi")
JIT = 1e-6


# --------------------------------------------------------------------------------- references
rbf = rbf_reference


def data(n=10, d=2, m=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    Z = rng.normal(size=(m, d))
    return X, y, Z


LS, VAR = np.array([0.9, 1.3]), 1.2


def make(div="wasserstein", vk="svgp-cholesky", vm="svgp", *, mode="prior", lik=None, seed=1,
         Z=None, y=None, xp=None, dtype=None, device=None, randomise=True, **kw):
    X0, y0, Z0 = data()
    Z = Z0 if Z is None else Z
    y = y0 if y is None else y
    xp = xp or B.namespace_by_name("numpy")
    dtype = dtype or xp.float64
    k = RBF(lengthscale=LS, variance=VAR, xp=xp, dtype=dtype, device=device)
    lik = lik or Gaussian(0.3, xp=xp, dtype=dtype, device=device)
    extra = {}
    if mode == "posterior":
        extra = {"inducing_targets": np.cos(Z[:, 0]), "regulariser_noise": 0.2}
    model = gpnum.GVI(k, lik, B.asarray(Z, dtype=dtype, xp=xp, device=device), num_data=40,
                      divergence=div, variational_kernel=vk, variational_mean=vm, mode=mode,
                      **extra, **kw)
    if randomise:
        rng = np.random.default_rng(seed)
        new = {}
        for name, v in model.parameters().items():
            if name.startswith(("kernel.", "likelihood.")):
                continue
            v = B.to_numpy(v).astype(np.float64)
            if name == "q_sqrt":
                v = np.tril(0.2 * rng.normal(size=v.shape)) + np.eye(v.shape[-1])
            elif name == "q_var" or name.startswith("base_kernel."):
                # base kernel below k so the fixed sparse posterior kernel stays PSD
                v = v * (0.8 if name.endswith("variance") else np.exp(0.2 * rng.normal(
                    size=v.shape)))
            else:
                v = v + 0.3 * rng.normal(size=v.shape)
            new[name] = v
        model.set_parameters(new)
    return model


def np_params(model):
    return {k: B.to_numpy(v).astype(np.float64) for k, v in model.parameters().items()}


def q_dense(model, X):
    """Q's mean (b, L) and covariance (L, b, b) by dense NumPy from the model's parameters."""
    p = np_params(model)
    Z = B.to_numpy(model.inducing_points).astype(np.float64)
    L = model.num_latent
    Kzz = rbf(Z, Z, LS, VAR) + JIT * np.eye(len(Z))
    Lz = np.linalg.cholesky(Kzz)
    A = np.linalg.solve(Lz, rbf(Z, X, LS, VAR))
    vk = model.variational_kernel
    if vk.startswith("svgp"):
        if vk == "svgp-cholesky":
            R = p["q_sqrt"].reshape(L, len(Z), len(Z))
            S = [np.tril(r) @ np.tril(r).T for r in R]
        else:
            v = p["q_var"] if vk == "svgp-diagonal" else np.exp(p["q_log_var"])
            S = [np.diag(r) for r in v.reshape(L, -1)]
        K = [rbf(X, X, LS, VAR) - A.T @ A + A.T @ s @ A for s in S]
    else:
        bl, bv = p["base_kernel.lengthscale"], p["base_kernel.variance"]
        if vk == "kernelised":
            K1 = rbf(X, X, LS, VAR) - A.T @ A + rbf(X, X, bl, bv)
        else:
            C = (rbf(Z, Z, bl, bv) if vk == "sparse-posterior" else rbf(Z, Z, LS, VAR))
            C = C + JIT * np.eye(len(Z))
            R0 = rbf(Z, X, bl, bv)
            K1 = rbf(X, X, bl, bv) - R0.T @ np.linalg.solve(C, R0)
        K = [K1] * L
    vm = model.variational_mean
    if vm == "svgp":
        mq = model.prior_mean + A.T @ p["q_mu"].reshape(L, -1).T
    elif vm == "constant":
        mq = np.broadcast_to(p["mean_constant"].reshape(1, L), (len(X), L))
    else:
        h = np.tanh(X @ p["mlp_w1"] + p["mlp_b1"])
        mq = h @ p["mlp_w2"] + p["mlp_b2"]
    return np.asarray(mq), np.stack(K)


def p_dense(model, X):
    """P's mean (b,) and covariance (b, b): the prior, or the GP posterior given (Z, U)."""
    Kxx = rbf(X, X, LS, VAR)
    if model.mode == "prior":
        return np.zeros(len(X)), Kxx
    Z = B.to_numpy(model.inducing_points).astype(np.float64)
    U = np.cos(Z[:, 0])
    C = rbf(Z, Z, LS, VAR) + 0.2 * np.eye(len(Z))
    Kzx = rbf(Z, X, LS, VAR)
    return Kzx.T @ np.linalg.solve(C, U), Kxx - Kzx.T @ np.linalg.solve(C, Kzx)


def per_point(name, mq, vq, mp, vp, alpha=0.5):
    """The textbook per-point divergences (design notes 4.5), D(Q || P) where directed."""
    sq, sp, d = np.sqrt(vq), np.sqrt(vp), mq - mp
    if name == "projected-kl":
        return np.log(sp / sq) + (vq + d * d) / (2 * vp) - 0.5
    if name == "projected-bhattacharyya":
        return d * d / (4 * (vp + vq)) + 0.5 * np.log((vp + vq) / (2 * sp * sq))
    if name == "projected-hellinger":
        return 1 - np.sqrt(2 * sp * sq / (vp + vq)) * np.exp(-d * d / (4 * (vp + vq)))
    if name == "projected-renyi":
        va = alpha * vp + (1 - alpha) * vq
        return np.log(sp / sq) + np.log(vp / va) / (2 * (alpha - 1)) + alpha * d * d / (2 * va)
    if name == "projected-wasserstein":
        return d * d + (sp - sq) ** 2
    if name == "squared-difference":
        return d * d + (vq - vp) ** 2
    raise KeyError(name)


def dense_regulariser(model, X):
    mq, Kq = q_dense(model, X)
    mp, Kp = p_dense(model, X)
    b = len(X)
    total = 0.0
    for lat in range(model.num_latent):
        if model.divergence == "wasserstein":
            if model.eigen_term:
                # Exact squared 2-Wasserstein between the batch marginals' joint Gaussians
                # (with the regulariser's jitter on both), divided by b.
                j = max(model.jitter, 1e-6)
                Sq, Sp = Kq[lat] + j * np.eye(b), Kp + j * np.eye(b)
                rp = sla.sqrtm(Sp)
                cross = np.trace(sla.sqrtm(rp @ Sq @ rp)).real
                dm = mq[:, lat] - mp
                total += (dm @ dm + np.trace(Sq) + np.trace(Sp) - 2 * cross) / b
            else:
                dm = mq[:, lat] - mp
                total += (dm @ dm + np.trace(Kq[lat]) + np.trace(Kp)) / b
        else:
            total += np.mean(per_point(model.divergence, mq[:, lat], np.diag(Kq[lat]), mp,
                                       np.diag(Kp), model.alpha))
    return total


# --------------------------------------------------------------------------------- values
@pytest.mark.parametrize("div", REGS)
def test_regulariser_matches_dense_reference_on_every_backend(div, xp, device):
    X, _, _ = data()
    model = make(div, xp=xp, dtype=xp.float64, device=device, mode="posterior")
    got = float(model.regulariser(B.asarray(X, dtype=xp.float64, xp=xp, device=device)))
    np.testing.assert_allclose(got, dense_regulariser(model, X), rtol=1e-7)


def test_gwi_without_the_cross_term_matches_dense_and_bounds_the_full_estimate():
    X, _, _ = data()
    full = make("wasserstein")
    cheap = make("wasserstein", eigen_term=False)
    np.testing.assert_allclose(float(cheap.regulariser(X)), dense_regulariser(cheap, X),
                               rtol=1e-10)
    # Dropping -2 tr(...)^{1/2} <= 0 can only increase the estimate.
    assert float(cheap.regulariser(X)) > float(full.regulariser(X))


@pytest.mark.parametrize("vk", KERNELS)
@pytest.mark.parametrize("vm", MEANS)
def test_q_moments_match_dense(vk, vm):
    X, _, _ = data()
    model = make("wasserstein", vk, vm)
    mq, Kq = q_dense(model, X)
    m, cov = model.predict_f(X, full_cov=True)
    np.testing.assert_allclose(m, mq[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cov, Kq[0], rtol=1e-8, atol=1e-10)
    _, v = model.predict_f(X)
    np.testing.assert_allclose(v, np.diag(Kq[0]), rtol=1e-8, atol=1e-10)


def test_prior_mean_offsets_p_and_the_svgp_mean():
    X, y, _ = data()
    model = make("projected-kl", prior_mean=0.7)
    mq, _ = q_dense(model, X)
    np.testing.assert_allclose(model.predict_f(X)[0], mq[:, 0], rtol=1e-12)
    mp, _, _ = model.regulariser_moments(X)
    np.testing.assert_allclose(mp[:, 0], 0.7)
    fd_check(model, X, y)


def test_projected_kl_against_monte_carlo():
    """The projected KL is the mean over points of E_Q[log q - log p] (sampled)."""
    X, _, _ = data()
    model = make("projected-kl", mode="posterior")
    mq, vq = (np.asarray(a) for a in model.predict_f(X))
    mp, Kp = p_dense(model, X)
    vp = np.diag(Kp)
    rng = np.random.default_rng(3)
    f = mq + np.sqrt(vq) * rng.normal(size=(200000, len(X)))
    logq = -0.5 * np.log(2 * np.pi * vq) - 0.5 * (f - mq) ** 2 / vq
    logp = -0.5 * np.log(2 * np.pi * vp) - 0.5 * (f - mp) ** 2 / vp
    mc = np.mean(logq - logp)
    np.testing.assert_allclose(float(model.regulariser(X)), mc, atol=3e-3)


def test_objective_is_expected_log_likelihood_minus_regulariser():
    X, y, _ = data()
    model = make("projected-bhattacharyya")
    mq, vq = (np.asarray(a) for a in model.predict_f(X))
    s2 = 0.3
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((y - mq) ** 2 + vq) / s2
    want = 40 / len(X) * ell.sum() - dense_regulariser(model, X)
    np.testing.assert_allclose(float(model.objective(X, y)), want, rtol=1e-10)


# --------------------------------------------------------------------------------- gradients
def fd_check(model, X, y, rtol=1e-6):
    _, grads = model.objective_and_grad(X, y)
    assert not any(k.startswith("kernel.") for k in grads)  # the regulariser's k is fixed
    expected = {k for k in model.parameters() if not k.startswith("kernel.")}
    assert set(grads) == expected
    for name, g in grads.items():
        base = B.to_numpy(model.parameters()[name]).astype(np.float64)
        g = B.to_numpy(g)
        if name == "q_sqrt":  # only the lower triangle is a parameter
            g = np.tril(g)

        def f(v, name=name):
            old = model.parameters()[name]
            model.set_parameters({name: v})
            out = float(model.objective(X, y))
            model.set_parameters({name: old})
            return out

        if name == "q_sqrt":
            idx = np.tril_indices(base.shape[-1])
            def ftri(t, name=name, base=base, idx=idx):
                v = base.copy()
                v[..., idx[0], idx[1]] = t
                return f(v)
            # C order: numerical_grad perturbs x through x.reshape(-1), a copy otherwise.
            check_grad(ftri, np.ascontiguousarray(base[..., idx[0], idx[1]]),
                       g[..., idx[0], idx[1]], rtol=rtol,
                       name=name)
        else:
            check_grad(f, base, g, rtol=rtol, name=name)


@pytest.mark.parametrize("div", REGS)
@pytest.mark.parametrize("mode", ["prior", "posterior"])
def test_gradients_per_regulariser(div, mode):
    X, y, _ = data()
    fd_check(make(div, mode=mode), X, y)


def test_gradients_gwi_without_cross_term():
    X, y, _ = data()
    fd_check(make("wasserstein", eigen_term=False), X, y)


@pytest.mark.parametrize("vk", KERNELS)
@pytest.mark.parametrize("vm", MEANS)
def test_gradients_per_kernel_and_mean(vk, vm):
    """The full-covariance path (Wasserstein with its cross term) and the marginal path
    (a projected regulariser) for every variational kernel x mean."""
    X, y, _ = data(n=7)
    fd_check(make("wasserstein", vk, vm), X, y)
    fd_check(make("projected-hellinger", vk, vm), X, y)


@pytest.mark.parametrize("lik", ["bernoulli", "robustmax"])
@pytest.mark.parametrize("div", ["wasserstein", "projected-kl"])
def test_classification_gradients(lik, div):
    X, _, _ = data(n=8)
    if lik == "bernoulli":
        likelihood, y = Bernoulli(), (X[:, 0] > 0).astype(float)
    else:
        likelihood, y = RobustMax(3), (np.digitize(X[:, 0], [-0.5, 0.5])).astype(float)
    model = make(div, "svgp-cholesky", "svgp", lik=likelihood)
    assert model.num_latent == (1 if lik == "bernoulli" else 3)
    fd_check(model, X, y, rtol=1e-5)
    if div == "wasserstein":  # per latent: the sum of each latent's distance
        np.testing.assert_allclose(float(model.regulariser(X)), dense_regulariser(model, X),
                                   rtol=1e-7)


# --------------------------------------------------------------------------------- posterior
def test_posterior_regulariser_is_the_dense_gp_posterior():
    X, _, _ = data()
    model = make("projected-kl", mode="posterior")
    mp, vp, Kp = model.regulariser_moments(X, full_cov=True)
    mp_ref, Kp_ref = p_dense(model, X)
    np.testing.assert_allclose(mp[:, 0], mp_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(vp[:, 0], np.diag(Kp_ref), rtol=1e-10)
    np.testing.assert_allclose(Kp, Kp_ref, rtol=1e-10, atol=1e-12)


def test_select_inducing_algorithm_2():
    """Greedy variance alternating with type-II ML: a fixed point, Z a subset of X, the kernel
    the GPR optimum on the chosen points."""
    from gpnum.optim import select_inducing

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(200, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=200)
    res = select_inducing(X, y, RBF(), Gaussian(), 10, max_iter=10)
    assert res.converged and res.num_iter >= 1
    np.testing.assert_array_equal(res.inducing_points, X[res.indices])
    np.testing.assert_array_equal(res.inducing_targets, y[res.indices])
    # The last selection equals greedy variance under the final kernel (the fixed point).
    _, idx = gpnum.inducing.greedy_variance(X, 10, res.kernel)
    assert set(np.asarray(idx).tolist()) == set(np.asarray(res.indices).tolist())
    # The kernel maximises the GPR marginal likelihood on (Z, U): zero gradient.
    gpr = gpnum.GPR(res.kernel, res.likelihood, res.inducing_points, res.inducing_targets,
                    mean=res.mean)
    _, g = gpr.log_marginal_likelihood_and_grad()
    u = gpr.grad_to_unconstrained(g)
    assert max(float(np.max(np.abs(v))) for v in u.values()) < 1e-3
    assert float(res.kernel.lengthscale) < 0.8  # learned the sin(2x) scale, not the default


def test_select_inducing_unsettled_set_warns():
    from gpnum.optim import select_inducing

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(200, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=200)
    # One round from the default lengthscale 1: the fitted kernel (~0.5) picks another set.
    with pytest.warns(gpnum.ConvergenceWarning, match="still changed after 1 rounds"):
        res = select_inducing(X, y, RBF(), Gaussian(), 15, max_iter=1)
    assert not res.converged and res.num_iter == 1


# --------------------------------------------------------------------------------- tempering
def test_temper_gaussian_closed_form_is_the_maximiser():
    X, y, _ = data(n=30)
    model = make("projected-kl")
    mu, var = (np.asarray(a) for a in model.predict_f(X))
    s = var + 0.3

    def nll(a):
        return np.sum(0.5 * np.log(2 * np.pi * a * s) + 0.5 * (y - mu) ** 2 / (a * s))

    a = float(model.temper(X, y)[0])
    grid = np.exp(np.linspace(np.log(a) - 0.5, np.log(a) + 0.5, 2001))
    assert abs(grid[np.argmin([nll(g) for g in grid])] / a - 1) < 1e-3
    np.testing.assert_allclose(-np.sum(model.log_predictive_density(X, y)), nll(a), rtol=1e-10)


def test_temper_bernoulli_matches_brute_force():
    X, _, _ = data(n=40)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(float)
    model = make("projected-kl", lik=Bernoulli(link="probit"))
    mu, var = (np.asarray(a) for a in model.predict_f(X))
    from scipy.stats import norm

    def ll(a):
        p = norm.cdf(mu / np.sqrt(1 + a * var))
        return np.sum(np.where(y == 1, np.log(p), np.log1p(-p)))

    a = float(model.temper(X, y)[0])
    grid = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 4001))
    best = grid[np.argmax([ll(g) for g in grid])]
    assert abs(np.log(best) - np.log(a)) < 5e-3 or abs(ll(best) - ll(a)) < 1e-8
    np.testing.assert_allclose(np.sum(model.log_predictive_density(X, y)), ll(a), rtol=1e-8)


def test_temper_robustmax_one_scale_per_latent():
    X, _, _ = data(n=30)
    y = np.digitize(X[:, 0], [-0.5, 0.5]).astype(float)
    model = make("projected-kl", lik=RobustMax(3))
    t = np.asarray(model.temper(X, y))
    assert t.shape == (3,)
    before = float(np.sum(model._lpd(y, *model.predict_f(X), np.ones(3))))
    assert float(np.sum(model.log_predictive_density(X, y))) >= before


def test_temper_rejects_a_validation_set_of_the_wrong_shape():
    X, y, _ = data()
    model = make("projected-kl")
    with pytest.raises(gpnum.ShapeError, match="X_val"):
        model.temper(X[:, :1], y)
    with pytest.raises(gpnum.ShapeError, match=r"y_val: expected shape \(\d+,\) to match X_val"):
        model.temper(X, y[:-1])


# --------------------------------------------------------------------------------- errors
def test_bad_input():
    k, lik, Z = RBF(), Gaussian(), np.zeros((3, 2))
    with pytest.raises(ValueError, match="divergence: expected one of"):
        gpnum.GVI(k, lik, Z, num_data=10, divergence="projected-tv")
    with pytest.raises(ValueError, match="variational_kernel: expected one of"):
        gpnum.GVI(k, lik, Z, num_data=10, variational_kernel="svgp")
    with pytest.raises(ValueError, match="variational_mean: expected one of"):
        gpnum.GVI(k, lik, Z, num_data=10, variational_mean="zero")
    with pytest.raises(ValueError, match="mode: expected"):
        gpnum.GVI(k, lik, Z, num_data=10, mode="likelihood")
    for a in (0.0, -1.0, 1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"alpha: the Renyi order must lie in \(0, 1\) or"):
            gpnum.GVI(k, lik, Z, num_data=10, divergence="projected-renyi", alpha=a)
    with pytest.raises(ValueError, match="inducing_targets"):
        gpnum.GVI(k, lik, Z, num_data=10, mode="posterior")
    with pytest.raises(gpnum.ShapeError, match="inducing_targets"):
        gpnum.GVI(k, lik, Z, num_data=10, mode="posterior", inducing_targets=np.zeros(4),
                  regulariser_noise=0.1)


def test_renyi_above_one_where_infinite_says_which_alpha_works():
    X, y, _ = data()
    model = make("projected-renyi", mode="posterior", alpha=50.0)
    with pytest.raises(ValueError, match="is infinite for alpha = 50.0"):
        model.objective_and_grad(X, y)


def test_fit_with_natural_gradients_says_to_use_adam():
    X, y, _ = data()
    with pytest.raises(ValueError, match="optimizer='adam'"):
        gpnum.fit(make("projected-kl"), X, y, epochs=1, progress=False)


def test_fixed_sparse_posterior_indefinite_error_names_the_kernel():
    X, y, _ = data()
    model = make("wasserstein", "fixed-sparse-posterior", randomise=False)
    model.set_parameters({"base_kernel.variance": 5.0})
    with pytest.raises(gpnum.NotPSDError, match="fixed-sparse-posterior"):
        model.objective_and_grad(X, y)


# --------------------------------------------------------------------------------- training
@pytest.mark.parametrize("div", ["wasserstein", "projected-bhattacharyya"])
def test_fit_trains_gvi_with_adam(div):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(300, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=300)
    k = RBF(lengthscale=0.5, variance=1.0)
    Z = X[:20]
    model = gpnum.GVI(k, Gaussian(0.1), Z, num_data=300, divergence=div)
    hist = gpnum.fit(model, X, y, optimizer="adam", lr=0.05, epochs=15, batch_size=100,
                     progress=False)
    assert np.mean(hist.step_elbo[-3:]) > np.mean(hist.step_elbo[:3])
    mu, _ = model.predict_y(X)
    assert np.sqrt(np.mean((np.asarray(mu) - np.sin(2 * X[:, 0])) ** 2)) < 0.2
    assert float(model.kernel.lengthscale) == 0.5  # the regulariser's kernel is held fixed


@pytest.mark.parametrize("vk,vm,mode", [("svgp-cholesky", "svgp", "posterior"),
                                        ("sparse-posterior", "mlp", "prior"),
                                        ("svgp-log-diagonal", "constant", "prior")])
def test_checkpoint_round_trip(tmp_path, vk, vm, mode):
    X, y, _ = data()
    model = make("projected-renyi", vk, vm, mode=mode, alpha=0.7)
    gpnum.fit(model, X, y, optimizer="adam", epochs=2, batch_size=5, progress=False)
    model.temper(X, y)
    before = [np.asarray(a) for a in model.predict_f(X)] + [
        np.asarray(model.log_predictive_density(X, y))]
    gpnum.save(model, tmp_path / "gvi.npz")
    loaded = gpnum.load(tmp_path / "gvi.npz", xp=B.namespace_by_name("numpy"))
    assert isinstance(loaded, gpnum.GVI) and loaded.config() == model.config()
    after = [np.asarray(a) for a in loaded.predict_f(X)] + [
        np.asarray(loaded.log_predictive_density(X, y))]
    for a, b in zip(before, after, strict=False):
        np.testing.assert_array_equal(a, b)
    # Training resumes from the saved optimiser state.
    gpnum.fit(loaded, X, y, optimizer="adam", epochs=3, batch_size=5, progress=False,
              resume=True)


@pytest.mark.parametrize("vk", KERNELS)
@pytest.mark.parametrize("vm", MEANS)
def test_objective_and_gradients_on_every_backend(vk, vm, xp, dtype, device):
    """Every kernel x mean runs on each backend and dtype and agrees with the NumPy float64
    values (whose gradients the finite-difference tests above check)."""
    X, y, Z = data(n=7)
    tol = 2e-3 if dtype == xp.float32 else 1e-9
    for div in ("wasserstein", "projected-kl"):
        ref = make(div, vk, vm)
        model = make(div, vk, vm, xp=xp, dtype=dtype, device=device, randomise=False)
        model.set_parameters({k: B.asarray(v, dtype=dtype, xp=xp, device=device)
                              for k, v in np_params(ref).items() if not k.startswith("kernel.")})
        v0, g0 = ref.objective_and_grad(X, y)
        v1, g1 = model.objective_and_grad(B.asarray(X, dtype=dtype, xp=xp, device=device),
                                          B.asarray(y, dtype=dtype, xp=xp, device=device))
        np.testing.assert_allclose(float(v1), float(v0), rtol=tol)
        for k in g0:
            a, b = B.to_numpy(g1[k]).astype(np.float64), B.to_numpy(g0[k])
            assert np.linalg.norm(a - b) <= tol * max(np.linalg.norm(b), 1.0), k
