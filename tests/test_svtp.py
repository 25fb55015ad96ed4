"""SVTP (seed 002): the Student-t Fisher and its O(M) inverse, the special functions, the
chi-square reparameterisation, the ELBO against an independent dense NumPy/SciPy computation
and finite differences, the KL's upper bound, the nu -> infinity limit, errors, predictions,
training and checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sp
from gradcheck import check_grad
from kernel_refs_everyday import rbf_reference
from scipy import stats

import gpnum
from gpnum import backend as B
from gpnum.kernels import RBF
from gpnum.models import SVTP, student_t_fisher, student_t_fisher_solve
from gpnum.models._student_t_math import chi2_quantile_and_grad


# ---------------------------------------------------------------------- Fisher
def _scores(x, m, sigma, nu):
    """Score of log ST(x | nu, m, diag(sigma^2)) (covariance form) w.r.t. (m, sigma, nu),
    written from the density directly."""
    M = m.shape[0]
    z = (x - m) / sigma
    d = np.sum(z * z, axis=1)
    w = (nu + M) / (nu - 2.0 + d)
    s_m = w[:, None] * z / sigma
    s_s = -1.0 / sigma + w[:, None] * z * z / sigma
    s_n = (0.5 * sp.digamma((nu + M) / 2) - 0.5 * sp.digamma(nu / 2) - M / (2 * (nu - 2))
           - 0.5 * np.log1p(d / (nu - 2)) + 0.5 * (nu + M) * d / ((nu - 2) * (nu - 2 + d)))
    return np.concatenate([s_m, s_s, s_n[:, None]], axis=1)


@pytest.mark.parametrize("M,nu", [(1, 3.5), (3, 5.0), (5, 12.0), (8, 2.7)])
def test_fisher_matches_a_monte_carlo_fisher(M, nu):
    rng = np.random.default_rng(M)
    sigma = rng.uniform(0.4, 2.0, M)
    m = rng.normal(size=M)
    n = 200_000
    # Draws by scipy's own multivariate t (scale matrix (nu - 2)/nu Cov), not our mixture.
    x = stats.multivariate_t(loc=m, shape=np.diag(sigma**2) * (nu - 2) / nu, df=nu).rvs(
        size=n, random_state=rng)
    x = x.reshape(n, M)
    s = _scores(x, m, sigma, nu)
    prod = s[:, :, None] * s[:, None, :]
    F_mc = prod.mean(axis=0)
    se = prod.std(axis=0) / math.sqrt(n)
    F = student_t_fisher(np.asarray(nu), sigma)
    assert F.shape == (2 * M + 1, 2 * M + 1)
    z = np.abs(F - F_mc) / np.maximum(se, 1e-300)
    assert np.max(z) < 5.0, f"max |F - F_mc| / se = {np.max(z):.2f}"
    # The (m, sigma) and (m, nu) blocks vanish, exactly in F and within noise in F_mc.
    assert np.all(F[:M, M:] == 0.0)


@pytest.mark.parametrize("M,nu", [(1, 2.2), (4, 5.0), (50, 30.0), (200, 80.0)])
def test_fisher_solve_matches_the_dense_inverse(xp, device, M, nu):
    # F_nunu falls like M / nu^3, so F's condition number grows like nu^3 / sigma_min^2: these
    # cases keep it below ~1e6, where a dense solve is itself good to 1e-10.
    rng = np.random.default_rng(M)
    sigma = rng.uniform(0.1, 3.0, M)
    v = rng.normal(size=2 * M + 1)
    F = student_t_fisher(np.asarray(nu), sigma)
    ref = np.linalg.solve(F, v)
    f64 = xp.float64
    x = student_t_fisher_solve(B.asarray(nu, dtype=f64, xp=xp, device=device),
                               B.asarray(sigma, dtype=f64, xp=xp, device=device),
                               B.asarray(v, dtype=f64, xp=xp, device=device))
    x = B.to_numpy(x)
    assert np.max(np.abs(x - ref)) / np.max(np.abs(ref)) < 1e-10
    Fd = B.to_numpy(student_t_fisher(B.asarray(nu, dtype=f64, xp=xp, device=device),
                                     B.asarray(sigma, dtype=f64, xp=xp, device=device)))
    np.testing.assert_allclose(Fd, F, rtol=1e-13, atol=0)


def test_fisher_nu_entry_keeps_its_digits_for_large_nu():
    """F_nunu ~ M^2 / nu^4 is a sum of three terms ~ M / nu^2: against 50-digit arithmetic."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(50):
        for M in (1, 4, 100, 1000):
            for nu in (2.1, 30.0, 1e3, 1e4):
                k = nu + M
                nu_m, k_m = mp.mpf(nu), mp.mpf(k)
                ref = (0.25 * (mp.psi(1, nu_m / 2) - mp.psi(1, k_m / 2))
                       + M * nu_m / (2 * (nu_m - 2) ** 2 * (k_m + 2)) - M / ((nu_m - 2) * k_m))
                F = student_t_fisher(np.asarray(nu), np.ones(M))
                assert abs(F[-1, -1] - float(ref)) <= 1e-7 * float(ref), (M, nu)


@pytest.mark.parametrize("nu", [2.1, 5.0, 40.0, 300.0, 1e5])
def test_chi2_quantile_gradient_matches_finite_differences(nu):
    # Both tails (series below the median, tail quadrature above), and the median itself.
    u = np.array([1e-12, 1e-6, 0.01, 0.3, 0.5, 0.5000001, 0.9, 0.999999, 1 - 1e-12])
    r, dr = chi2_quantile_and_grad(nu, u)
    np.testing.assert_allclose(r, stats.chi2.ppf(u, nu), rtol=1e-10)
    h = 1e-4 * nu
    d1 = (stats.chi2.ppf(u, nu + h) - stats.chi2.ppf(u, nu - h)) / (2 * h)
    d2 = (stats.chi2.ppf(u, nu + h / 2) - stats.chi2.ppf(u, nu - h / 2)) / h
    np.testing.assert_allclose(dr, (4 * d2 - d1) / 3, rtol=1e-8)  # Richardson: O(h^4)


# ---------------------------------------------------------------------- model fixtures
def _data(n=15, d=2, M=4, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_t(3, size=n)
    Z = rng.normal(size=(M, d))
    return X, y, Z


def _model(Z, *, xp=np, dtype=None, device=None, kl="mc", covariance="diag", seed=3,
           num_data=40, S=3):
    dtype = np.float64 if dtype is None else dtype
    rng = np.random.default_rng(seed)
    M = Z.shape[0]
    ls, var = np.array([0.8, 1.3]), 1.2
    k = RBF(lengthscale=B.asarray(ls, dtype=dtype, xp=xp, device=device),
            variance=B.asarray(var, dtype=dtype, xp=xp, device=device), xp=xp, dtype=dtype,
            device=device)
    model = SVTP(k, B.asarray(Z, dtype=dtype, xp=xp, device=device), num_data=num_data,
                 df=4.5, q_df=6.0, noise_variance=0.2, kl=kl, covariance=covariance,
                 num_samples=S, seed=seed)
    scale = (rng.uniform(0.3, 1.0, M) if covariance == "diag"
             else np.tril(rng.normal(size=(M, M)) * 0.3) + np.eye(M))
    model.set_parameters({"q_mu": rng.normal(size=M) * 0.5, "q_scale": scale, "mean": 0.3})
    return model, {"ls": ls, "var": var}


def _reference_elbo(model, hyper, X, y, Z, draws):
    """The ELBO from scratch: dense NumPy/SciPy, unwhitened u, scipy's densities."""
    p = {k: np.asarray(B.to_numpy(v), dtype=np.float64) for k, v in model.parameters().items()}
    M, N, b = Z.shape[0], model.num_data, X.shape[0]

    def rbf(A, C):
        return rbf_reference(A, C, hyper["ls"], hyper["var"])

    Kzz = rbf(Z, Z) + model.jitter * np.eye(M)
    Kxz = rbf(X, Z)
    nu, nq, noise = p["df"], p["q_df"], p["likelihood.variance"]
    r = stats.chi2.ppf(draws["u"], nq)
    eps = np.asarray(B.to_numpy(draws["eps"]), dtype=np.float64)
    R = np.diag(p["q_scale"]) if p["q_scale"].ndim == 1 else p["q_scale"]
    L = np.linalg.cholesky(Kzz)
    # u = L v: q(u) = ST(nq, L m, L S L^T), p(u) = ST(nu, 0, K_ZZ)
    V = p["q_mu"] + np.sqrt((nq - 2) / r)[:, None] * (eps @ R.T)
    U = V @ L.T
    Kinv = np.linalg.inv(Kzz)
    mu = p["mean"] + U @ Kinv @ Kxz.T                       # (S, b)
    Sig = hyper["var"] - np.einsum("ij,jk,ik->i", Kxz, Kinv, Kxz)
    beta = np.einsum("sj,jk,sk->s", U, Kinv, U)
    s = (nu + beta - 2)[:, None] / (nu + M - 2) * Sig[None, :] + noise
    k = nu + M
    # scipy's t has scale^2 = s (k - 2) / k for variance s.
    ll = stats.t.logpdf(y[None, :], df=k, loc=mu, scale=np.sqrt(s * (k - 2) / k))
    data = N / b * ll.sum(axis=1).mean()
    q = stats.multivariate_t(loc=L @ p["q_mu"], shape=L @ R @ R.T @ L.T * (nq - 2) / nq, df=nq)
    prior = stats.multivariate_t(loc=np.zeros(M), shape=Kzz * (nu - 2) / nu, df=nu)
    if model.kl_method == "mc":
        cross = -np.mean(prior.logpdf(U) if U.shape[0] > 1 else [prior.logpdf(U[0])])
    else:
        # Jensen: E[log(1 + beta/(nu-2))] <= log(1 + E[beta]/(nu-2)), E[beta] = tr(K^-1 Cov) + ...
        Eb = p["q_mu"] @ p["q_mu"] + np.sum(R * R)
        cross = -(sp.gammaln((nu + M) / 2) - sp.gammaln(nu / 2) - M / 2 * np.log((nu - 2) * np.pi)
                  - 0.5 * np.linalg.slogdet(Kzz)[1] - (nu + M) / 2 * np.log1p(Eb / (nu - 2)))
    # The whitened KL equals the unwhitened one; the unwhitened prior carries log|K_ZZ|/2 in
    # both H(q) and E_q log p(u), so it cancels.
    kl = -q.entropy() + cross
    return data - kl


@pytest.mark.parametrize("kl", ["mc", "upper-bound"])
@pytest.mark.parametrize("covariance", ["diag", "full"])
def test_elbo_matches_an_independent_dense_computation(xp, device, dtype, kl, covariance):
    X, y, Z = _data()
    model, hyper = _model(Z, xp=xp, dtype=dtype, device=device, kl=kl, covariance=covariance)
    draws = model.draw()
    value = model.elbo(B.asarray(X, dtype=dtype, xp=xp, device=device),
                       B.asarray(y, dtype=dtype, xp=xp, device=device), draws=draws)
    ref = _reference_elbo(model, hyper, X, y, Z, draws)
    rtol = 1e-4 if dtype == xp.float32 else 1e-9
    assert abs(float(value) - ref) <= rtol * abs(ref)
    v2, grads = model.objective_and_grad(B.asarray(X, dtype=dtype, xp=xp, device=device),
                                         B.asarray(y, dtype=dtype, xp=xp, device=device),
                                         draws=draws)
    assert abs(float(v2) - ref) <= rtol * abs(ref)
    assert set(grads) == set(model.parameters())


@pytest.mark.parametrize("kl", ["mc", "upper-bound"])
@pytest.mark.parametrize("covariance", ["diag", "full"])
def test_gradients_match_finite_differences_with_common_random_numbers(kl, covariance):
    X, y, Z = _data()
    model, _ = _model(Z, kl=kl, covariance=covariance)
    draws = model.draw()
    _, grads = model.objective_and_grad(X, y, draws=draws)
    start = {k: np.array(v) for k, v in model.parameters().items()}
    for name, x0 in start.items():
        def f(x, name=name):
            model.set_parameters({name: x})
            try:
                return float(model.elbo(X, y, draws=draws))
            finally:
                model.set_parameters({name: start[name]})

        check_grad(f, x0, np.asarray(grads[name]), name=name)


def test_unconstrained_round_trip_and_chain_rule():
    X, y, Z = _data()
    model, _ = _model(Z)
    draws = model.draw()
    _, grads = model.objective_and_grad(X, y, draws=draws)
    gu = model.grad_to_unconstrained(grads)
    u0 = {k: np.array(v) for k, v in model.unconstrained().items()}
    for name in ("q_df", "df", "q_scale", "likelihood.variance"):
        def f(x, name=name):
            model.set_unconstrained({name: x})
            try:
                return float(model.elbo(X, y, draws=draws))
            finally:
                model.set_unconstrained({name: u0[name]})

        check_grad(f, u0[name], np.asarray(gu[name]), name=name)
    assert float(model.q_df) > 2.0


def test_upper_bound_kl_is_above_the_monte_carlo_kl():
    X, y, Z = _data(M=6)
    for seed in range(3):
        mc, _ = _model(Z, kl="mc", seed=seed)
        ub, _ = _model(Z, kl="upper-bound", seed=seed)
        draws = mc.draw(20_000)
        kl_mc = float(mc.kl_divergence(draws))
        kl_ub = float(ub.kl_divergence())
        # An independent MC estimate of the same KL (scipy's densities and sampler) agrees.
        p = {k: np.asarray(v) for k, v in mc.parameters().items()}
        nu, nq, M = float(p["df"]), float(p["q_df"]), 6
        q = stats.multivariate_t(loc=p["q_mu"], shape=np.diag(p["q_scale"] ** 2) * (nq - 2) / nq,
                                 df=nq)
        prior = stats.multivariate_t(loc=np.zeros(M), shape=np.eye(M) * (nu - 2) / nu, df=nu)
        v = q.rvs(size=200_000, random_state=np.random.default_rng(seed))
        diff = q.logpdf(v) - prior.logpdf(v)
        kl_ref, se = diff.mean(), diff.std() / math.sqrt(v.shape[0])
        assert abs(kl_mc - kl_ref) < 5 * se + 5 * np.std(diff) / math.sqrt(20_000)
        assert kl_ub >= kl_ref + 5 * se  # strictly above (Jensen's gap is positive here)
        assert kl_ub >= kl_mc


def test_large_df_limit_is_the_gaussian_bound():
    """nu, nu_q -> infinity: q -> N(m, S), p(u) -> N(0, K), p(y_i | u) -> N(mu_i, Sigma_ii + s2).

    The KL tends to SVGP's KL(N(m, S) || N(0, I)) with the same m and S (covariance form, so the
    scales match), and the data term to E_q[log N(y_i | mu_i(u), Sigma_ii + s2)]
    = log N(y_i | mu_i, Sigma_ii + s2) - a_i^T S a_i / (2 (Sigma_ii + s2)), from SVGP's marginals.
    (Not SVGP's ELBO itself: SVGP takes E_q(f)[log N(y | f, s2)], which differs by Jensen's gap.)
    """
    X, y, Z = _data(M=4)
    model, hyper = _model(Z, kl="mc", S=4000)
    big = 1e7
    model.set_parameters({"df": big, "q_df": big})
    draws = model.draw()
    value = float(model.elbo(X, y, draws=draws))
    p = {k: np.asarray(v) for k, v in model.parameters().items()}
    svgp = gpnum.SVGP(RBF(lengthscale=hyper["ls"], variance=hyper["var"]),
                      gpnum.likelihoods.Gaussian(variance=0.2), Z, num_data=model.num_data)
    svgp.set_parameters({"q_mu": p["q_mu"], "q_sqrt": np.diag(p["q_scale"]), "mean": p["mean"]})
    mean, var = svgp.predict_f(X)
    svgp_prior_var = np.asarray(svgp.predict_f(X)[1]) - np.sum(
        (np.asarray(svgp._marginals(X)[2]["A"]) * p["q_scale"][:, None]) ** 2, axis=0)
    tot = svgp_prior_var + 0.2
    aSa = np.asarray(var) - svgp_prior_var
    data = model.num_data / X.shape[0] * np.sum(
        stats.norm.logpdf(y, np.asarray(mean), np.sqrt(tot)) - aSa / (2 * tot))
    ref = data - float(svgp.kl())
    # 1. At the same draws v_s the SVTP ELBO equals the Gaussian one to O(1/nu):
    #    mean_s [sum_i log N(y_i | mu_i(v_s), Sigma_ii + s2) - log N(v_s | 0, I)] + H(N(m, S)).
    V = np.asarray(model._q_draws(draws, need_grad=False)[0])
    A = np.asarray(svgp._marginals(X)[2]["A"])
    data_s = model.num_data / X.shape[0] * np.sum(
        stats.norm.logpdf(y[None, :], p["mean"] + V @ A, np.sqrt(tot)[None, :]), axis=1)
    cross_s = -np.sum(stats.norm.logpdf(V), axis=1)          # -log N(v_s | 0, I)
    entropy = np.sum(np.log(p["q_scale"])) + 0.5 * V.shape[1] * math.log(2 * math.pi * math.e)
    per_draw = data_s - cross_s
    same_draws = per_draw.mean() + entropy
    assert abs(value - same_draws) < 1e-5 * abs(same_draws)
    # 2. Those draws estimate the closed form (SVGP's marginals and KL) within MC error.
    se = per_draw.std() / math.sqrt(per_draw.shape[0])
    assert abs(same_draws - ref) < 5 * se
    # The KL alone, with the upper bound's deterministic cross term: tends to SVGP's KL.
    ub, _ = _model(Z, kl="upper-bound")
    ub.set_parameters({"df": big, "q_df": big, "q_mu": p["q_mu"], "q_scale": p["q_scale"]})
    assert abs(float(ub.kl_divergence()) - float(svgp.kl())) < 1e-4


# ---------------------------------------------------------------------- errors
def test_bad_inputs_raise_clear_errors():
    X, y, Z = _data()
    k = RBF(lengthscale=np.ones(2))
    with pytest.raises(ValueError, match="df: expected degrees of freedom > 2"):
        SVTP(k, Z, num_data=40, df=2.0)
    with pytest.raises(ValueError, match="q_df: expected degrees of freedom > 2"):
        SVTP(k, Z, num_data=40, q_df=1.5)
    with pytest.raises(ValueError, match="M <= N"):
        SVTP(k, Z, num_data=3)
    model = SVTP(k, Z, num_data=40)
    bad = y.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="training targets.*NaN"):
        model.objective_and_grad(X, bad)
    with pytest.raises(ValueError, match="training targets"):
        gpnum.fit(model, X, np.where(np.arange(y.shape[0]) == 0, np.inf, y), epochs=1,
                  progress=False)
    with pytest.raises(ValueError, match="kl:"):
        SVTP(k, Z, num_data=40, kl="exact")
    full = SVTP(k, Z, num_data=40, covariance="full")
    with pytest.raises(ValueError, match="covariance='diag'"):
        gpnum.fit(full, X, y, optimizer="ngd", epochs=1, progress=False)


# ---------------------------------------------------------------------- predictions
def test_predictive_moments_and_density_match_monte_carlo():
    X, y, Z = _data(M=4)
    model, _ = _model(Z)
    Xs = X[:5]
    mean, var = (np.asarray(a) for a in model.predict_f(Xs))
    # Monte Carlo of f = mu(v) + sqrt(cb(v)) * Sigma^(1/2) t, t ~ ST(nu + M, 0, 1), v ~ q.
    n = 400_000
    rng = np.random.default_rng(0)
    p = {k: np.asarray(v) for k, v in model.parameters().items()}
    nu, nq, M = float(p["df"]), float(p["q_df"]), 4
    v = stats.multivariate_t(loc=p["q_mu"], shape=np.diag(p["q_scale"] ** 2) * (nq - 2) / nq,
                             df=nq).rvs(size=n, random_state=rng)
    A, Sig, _, _ = model._base(Xs, need_grad=False)
    A, Sig = np.asarray(A), np.asarray(Sig)
    mu = p["mean"] + v @ A
    cb = (nu + np.sum(v * v, 1) - 2) / (nu + M - 2)
    k = nu + M
    t = rng.standard_t(k, size=(n, 5)) * math.sqrt((k - 2) / k)
    f = mu + np.sqrt(cb[:, None] * Sig[None, :]) * t
    np.testing.assert_allclose(mean, f.mean(0), atol=5 * f.std(0).max() / math.sqrt(n))
    np.testing.assert_allclose(var, f.var(0), rtol=0.03)
    ym, yv = (np.asarray(a) for a in model.predict_y(Xs))
    np.testing.assert_allclose(yv, var + 0.2, rtol=1e-12)
    # log E_q[p(y | v)], by direct MC with scipy's t density, within MC error.
    model.num_predict_samples = 100_000  # the default 1024 is good to ~0.05 nats here
    lpd = np.asarray(model.log_predictive_density(Xs, y[:5]))
    s = cb[:, None] * Sig[None, :] + 0.2
    dens = stats.t.pdf(y[None, :5], df=k, loc=mu, scale=np.sqrt(s * (k - 2) / k))
    np.testing.assert_allclose(lpd, np.log(dens.mean(0)), atol=0.01)
    mf, cov = model.predict_f(Xs, full_cov=True)
    np.testing.assert_allclose(np.diag(np.asarray(cov)), var, rtol=1e-10)


# ---------------------------------------------------------------------- training, checkpoints
def _train_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.1 * rng.normal(size=n)
    return X, y


def test_natural_gradients_train_q_and_keep_the_guard():
    X, y = _train_data()
    model = SVTP(RBF(lengthscale=np.ones(2)), gpnum.inducing.kmeans(X, 10, seed=0),
                 num_data=X.shape[0])
    start = {k: np.array(v) for k, v in model.parameters().items()}
    h = gpnum.fit(model, X, y, optimizer="ngd", gamma=0.5, epochs=15, batch_size=40,
                  progress=False, fixed=["df"])
    assert h.stopped is None
    assert np.mean(h.step_elbo[-6:]) > h.step_elbo[0] + 50.0
    assert float(model.q_df) > 2.0 and np.all(np.asarray(model.q_scale) > 0.0)
    assert float(model.df) == float(start["df"])  # fixed
    ngd = model.training_state.ngd
    assert ngd.num_steps == h.num_steps and ngd.num_rejected > 0  # the guard acted early
    # Adam did not touch q under "ngd": only natural gradients did, and they moved it.
    assert not np.allclose(np.asarray(model.q_mu), start["q_mu"])


def test_fixed_q_parameters_are_refused_under_ngd():
    X, y = _train_data(40)
    model = SVTP(RBF(lengthscale=np.ones(2)), X[:5], num_data=40)
    with pytest.raises(ValueError, match="natural gradients update"):
        gpnum.fit(model, X, y, optimizer="ngd", epochs=1, fixed=["q_df"], progress=False)


def test_checkpoint_round_trip_and_exact_resume(tmp_path):
    X, y = _train_data(80)
    Z = gpnum.inducing.kmeans(X, 6, seed=0)

    def new():
        return SVTP(RBF(lengthscale=np.ones(2)), Z, num_data=80, kl="upper-bound")

    a = new()
    gpnum.fit(a, X, y, optimizer="ngd", epochs=4, batch_size=20, progress=False)
    path = tmp_path / "svtp.npz"
    gpnum.save(a, path)
    b = gpnum.load(path, xp=np)
    assert isinstance(b, gpnum.SVTP) and b.kl_method == "upper-bound"
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(np.asarray(b.parameters()[k]), np.asarray(v))
    for fa, fb in zip(a.predict_f(X[:7]), b.predict_f(X[:7]), strict=False):
        np.testing.assert_array_equal(np.asarray(fa), np.asarray(fb))
    np.testing.assert_array_equal(np.asarray(a.log_predictive_density(X[:7], y[:7])),
                                  np.asarray(b.log_predictive_density(X[:7], y[:7])))
    # Resuming from the file equals training straight through (optimiser, batches, draws).
    gpnum.fit(a, X, y, optimizer="ngd", epochs=7, batch_size=20, progress=False, resume=True)
    gpnum.fit(b, X, y, optimizer="ngd", epochs=7, batch_size=20, progress=False, resume=True)
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(np.asarray(b.parameters()[k]), np.asarray(v))
    c = new()
    gpnum.fit(c, X, y, optimizer="ngd", epochs=7, batch_size=20, progress=False)
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(np.asarray(c.parameters()[k]), np.asarray(v))


def test_adam_trains_every_parameter_including_full_covariance():
    X, y = _train_data(60)
    model = SVTP(RBF(lengthscale=np.ones(2)), X[:6], num_data=60, covariance="full")
    h = gpnum.fit(model, X, y, optimizer="adam", lr=0.05, epochs=30, batch_size=30,
                  progress=False)
    assert h.stopped is None and np.mean(h.step_elbo[-4:]) > h.step_elbo[0]
    assert gpnum.optim.evaluate(model, X, y)["rmse"] < 0.5


def test_natural_gradient_step_is_the_fisher_preconditioned_gradient():
    X, y, Z = _data()
    model, _ = _model(Z)
    _, grads, data = model.objective_and_grad(X, y, return_data=True)
    before = {k: np.array(model.parameters()[k]) for k in ("q_mu", "q_scale", "q_df")}
    M = Z.shape[0]
    # Dense reference: the Fisher from Monte-Carlo-verified entries, solved by NumPy.
    F = student_t_fisher(np.asarray(before["q_df"]), before["q_scale"])
    g = np.concatenate([grads["q_mu"], grads["q_scale"], [float(grads["q_df"])]])
    delta = np.linalg.solve(F, g)
    used, halvings = model.natural_gradient_step(data, 1e-4)
    assert halvings == 0 and used == 1e-4  # a small step: nothing rejected
    np.testing.assert_allclose(np.asarray(model.q_mu), before["q_mu"] + 1e-4 * delta[:M],
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(model.q_scale),
                               before["q_scale"] + 1e-4 * delta[M:2 * M], rtol=1e-12)
    np.testing.assert_allclose(float(model.q_df), before["q_df"] + 1e-4 * delta[-1], rtol=1e-12)


def test_natural_gradient_guard_rejects_and_shrinks_never_nan():
    X, y, Z = _data()
    model, _ = _model(Z)
    M = Z.shape[0]
    sigma, nq = np.array(model.q_scale), float(model.q_df)
    # A gradient whose natural step at gamma = 1 is many times sigma and nu_q.
    huge = {"q_mu": np.full(M, 1e6), "q_scale": np.full(M, -1e9), "q_df": np.asarray(-1e9)}
    used, halvings = model.natural_gradient_step({"grads": huge}, 1.0)
    assert halvings > 10 and 0.0 < used < 1e-3
    new_sigma, new_nq = np.asarray(model.q_scale), float(model.q_df)
    # The direction mixes sigma and nu (F couples them); the box holds whatever it is.
    assert np.all(new_sigma > 0.5 * sigma) and np.all(new_sigma < 2.0 * sigma)
    assert np.any(np.abs(new_sigma - sigma) > 0.1 * sigma)  # a real step, not none
    assert 2.0 + 0.5 * (nq - 2.0) < new_nq < 2.0 + 2.0 * (nq - 2.0)
    assert np.all(np.isfinite(np.asarray(model.q_mu)))
    # A non-finite direction: no step at all.
    start = {k: np.array(v) for k, v in model.parameters().items()}
    bad = dict(huge, q_mu=np.full(M, np.nan))
    assert model.natural_gradient_step({"grads": bad}, 1.0)[0] == 0.0
    for k, v in start.items():
        np.testing.assert_array_equal(np.asarray(model.parameters()[k]), v)
    # nu_q never passes max_df, however large the step it is offered.
    model.set_parameters({"q_df": 0.9 * model.max_df})
    up = {"q_mu": np.zeros(M), "q_scale": np.zeros(M), "q_df": np.asarray(1.0)}  # step ~1e17
    model.natural_gradient_step({"grads": up}, 1.0)
    assert 0.9 * model.max_df < float(model.q_df) <= model.max_df


def test_training_and_prediction_run_on_every_backend(xp, device, dtype, tmp_path):
    X, y = _train_data(60)
    Xb = B.asarray(X, dtype=dtype, xp=xp, device=device)
    yb = B.asarray(y, dtype=dtype, xp=xp, device=device)
    k = RBF(lengthscale=B.asarray(np.ones(2), dtype=dtype, xp=xp, device=device), xp=xp,
            dtype=dtype, device=device)
    model = SVTP(k, Xb[:6, :], num_data=60, jitter=1e-4 if dtype == xp.float32 else 1e-6)
    h = gpnum.fit(model, Xb, yb, optimizer="ngd", epochs=4, batch_size=20, progress=False)
    assert h.stopped is None and model.q_mu.dtype == dtype
    mean, var = model.predict_y(Xb[:5, :])
    lpd = model.log_predictive_density(Xb[:5, :], yb[:5])
    assert B.device_of(mean) == B.device_of(Xb) and lpd.shape == (5,)
    assert np.all(np.isfinite(B.to_numpy(lpd))) and np.all(B.to_numpy(var) > 0)
    gpnum.save(model, tmp_path / "m.npz")
    again = gpnum.load(tmp_path / "m.npz", xp=xp, device=device)
    np.testing.assert_array_equal(B.to_numpy(again.predict_f(Xb[:5, :])[0]),
                                  B.to_numpy(model.predict_f(Xb[:5, :])[0]))
