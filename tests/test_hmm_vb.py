"""Batch variational Bayes for GaussianHMM and CategoricalHMM.

References: SciPy's special functions; Monte Carlo over q(theta) with SciPy's densities and
brute-force enumeration of q(x) for the ELBO; the textbook conjugate updates in standard form
(Bishop 2006, 10.60-10.63) from brute-force marginals for one VB iteration; enumeration with
the posterior-mean parameters for ``score``; the true states for ``decode``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import special, stats
from test_hmm_reference import brute_force, sample_chain

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.hmm import CategoricalHMM, GaussianHMM


def _np(a):
    return B.to_numpy(a)


def _sticky_gaussian(rng, T, K=3, D=2, stay=0.95, sep=3.0):
    A = np.full((K, K), (1.0 - stay) / (K - 1))
    np.fill_diagonal(A, stay)
    x = sample_chain(rng, A, np.full(K, 1.0 / K), T)
    mu = sep * rng.normal(size=(K, D))
    return mu[x] + rng.normal(size=(T, D)), x


def _best_relabelled_accuracy(path, x, K):
    return max(np.mean(np.asarray(p)[path] == x) for p in itertools.permutations(range(K)))


# ------------------------------------------------------------------ ELBO is non-decreasing
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_gaussian_vb_elbo_non_decreasing(xp, dtype, to_xp, covariance):
    rng = np.random.default_rng(11)
    Y, x = _sticky_gaussian(rng, 300)
    model = GaussianHMM(3, 2, covariance=covariance, seed=1)
    history = model.fit(to_xp(Y), method="vb", max_iter=30, tol=0.0)
    elbo = np.asarray(history["elbo"])
    assert len(elbo) >= 5 and np.all(np.isfinite(elbo))
    slack = 1e-9 if dtype == xp.float64 else 2e-5
    assert np.all(np.diff(elbo) >= -slack * np.abs(elbo[1:])), np.diff(elbo)
    assert elbo[-1] > elbo[0]


def test_categorical_vb_elbo_non_decreasing(xp, dtype, to_xp):
    rng = np.random.default_rng(12)
    A = np.array([[0.9, 0.1], [0.2, 0.8]])
    x = sample_chain(rng, A, np.array([0.5, 0.5]), 400)
    Bm = np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]])
    Y = np.array([rng.choice(3, p=Bm[k]) for k in x])
    model = CategoricalHMM(2, 3, seed=0, dtype="float32" if dtype == xp.float32 else "float64")
    history = model.fit(to_xp(Y), method="vb", max_iter=25, tol=0.0)
    elbo = np.asarray(history["elbo"])
    slack = 1e-9 if dtype == xp.float64 else 2e-5
    assert np.all(np.diff(elbo) >= -slack * np.abs(elbo[1:])), np.diff(elbo)
    assert model.posterior_["B"].dtype == dtype


# ------------------------------------------------ ELBO value: enumeration + Monte Carlo
def _mvn_logpdf(x, mean, cov):
    """Batched textbook Gaussian log density: x, mean (..., D), cov (..., D, D)."""
    D = x.shape[-1]
    L = np.linalg.cholesky(cov)
    z = np.linalg.solve(L, (x - mean)[..., None])[..., 0]
    return (-0.5 * D * np.log(2 * np.pi) - np.log(np.diagonal(L, axis1=-2, axis2=-1)).sum(-1)
            - 0.5 * (z * z).sum(-1))


def _sample_theta_gaussian(post, cov, n, rng):
    """Draws (pi, A, mu, Sigma) from q(theta) with NumPy/SciPy samplers, standard form."""
    K = post["pi"].shape[0]
    pis = rng.dirichlet(post["pi"], size=n)
    As = np.stack([rng.dirichlet(post["A"][k], size=n) for k in range(K)], axis=1)
    D = post["mean"].shape[1]
    mus = np.empty((n, K, D))
    Sig = np.empty((n, K, D, D))
    for k in range(K):
        if cov == "full":
            S = stats.invwishart(df=post["dof"][k], scale=post["scale"][k]).rvs(n, random_state=rng)
            S = S.reshape(n, D, D)
        else:
            lam = rng.gamma(post["dof"][k] / 2.0, 2.0 / post["scale"][k], size=(n, D))
            S = np.zeros((n, D, D))
            S[:, np.arange(D), np.arange(D)] = 1.0 / lam
        Sig[:, k] = S
        Lk = np.linalg.cholesky(S / post["mean_precision"][k])
        mus[:, k] = post["mean"][k] + (Lk @ rng.normal(size=(n, D, 1)))[..., 0]
    return pis, As, mus, Sig


def _log_density_gaussian(params, pis, As, mus, Sig, cov):
    """log q or log p of the draws under standard-form parameters ``params`` (SciPy densities;
    the diagonal case as densities of the precisions: only differences log q - log p are used,
    which do not depend on the variable)."""
    n, K = pis.shape
    out = stats.dirichlet(params["pi"]).logpdf(pis.T)
    for k in range(K):
        out = out + stats.dirichlet(params["A"][k]).logpdf(As[:, k].T)
        if cov == "full":
            out = out + stats.invwishart(df=params["dof"][k], scale=params["scale"][k]).logpdf(
                np.moveaxis(Sig[:, k], 0, -1))
        else:
            lam = 1.0 / np.diagonal(Sig[:, k], axis1=-2, axis2=-1)
            out = out + stats.gamma(params["dof"][k] / 2.0,
                                    scale=2.0 / params["scale"][k]).logpdf(lam).sum(-1)
        out = out + _mvn_logpdf(mus[:, k], params["mean"][k],
                                Sig[:, k] / params["mean_precision"][k])
    return out


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_gaussian_elbo_against_enumeration_and_monte_carlo(covariance):
    """ELBO = E_{q(x) q(theta)}[log p(y, x | theta) + log p(theta) - log q(theta)] + H[q(x)],
    with q(x) enumerated over all K^T paths (under the model's expected log parameters, the
    optimum) and the theta expectation by Monte Carlo with SciPy densities."""
    rng = np.random.default_rng(13)
    T, K, D = 5, 2, 2
    Y = rng.normal(size=(T, D)) + np.array([[0, 0], [0, 0], [3, 3], [3, 3], [0, 1]])
    model = GaussianHMM(K, D, covariance=covariance, seed=0)
    model.fit(Y, max_iter=2)
    post = {k: _np(v) for k, v in model.posterior_params().items()}
    prior_model = GaussianHMM(K, D, covariance=covariance, seed=0)
    prior_model.initialize(Y)
    prior_model.posterior_ = prior_model.prior_
    prior = {k: _np(v) for k, v in prior_model.posterior_params().items()}

    # q(x) by enumeration from the model's expected log parameters
    log_pi, log_A = (_np(a) for a in model._expected_log_params())
    ell = _np(model._expected_log_lik(Y))
    paths = np.array(list(itertools.product(range(K), repeat=T)))
    s = log_pi[paths[:, 0]] + ell[np.arange(T), paths].sum(1) + log_A[paths[:, :-1],
                                                                     paths[:, 1:]].sum(1)
    q = np.exp(s - special.logsumexp(s))
    entropy = -np.sum(q * np.log(q))

    n = 20000
    pis, As, mus, Sig = _sample_theta_gaussian(post, covariance, n, rng)
    # E_q(x) log p(y, x | theta) per draw
    loglik = _mvn_logpdf(Y[None, :, None, :], mus[:, None], Sig[:, None])  # (n, T, K)
    joint = np.zeros(n)
    for path, qp in zip(paths, q, strict=False):
        joint += qp * (np.log(pis[:, path[0]]) + loglik[:, np.arange(T), path].sum(1)
                       + np.log(As[:, path[:-1], path[1:]]).sum(1))
    log_q = _log_density_gaussian(post, pis, As, mus, Sig, covariance)
    log_p = _log_density_gaussian(prior, pis, As, mus, Sig, covariance)
    samples = joint + log_p - log_q
    reference = samples.mean() + entropy
    stderr = samples.std() / np.sqrt(n)
    assert abs(model.elbo(Y) - reference) < 4.0 * stderr + 1e-3, (model.elbo(Y), reference,
                                                                   stderr)


def test_categorical_elbo_against_enumeration_and_monte_carlo():
    rng = np.random.default_rng(14)
    T, K, M = 6, 2, 3
    Y = np.array([0, 0, 2, 2, 1, 0])
    model = CategoricalHMM(K, M, seed=0, dtype="float64")
    model.fit(Y, max_iter=2)
    post = {k: _np(v) for k, v in model.posterior_params().items()}
    log_pi, log_A = (_np(a) for a in model._expected_log_params())
    ell = _np(model._expected_log_lik(Y))
    paths = np.array(list(itertools.product(range(K), repeat=T)))
    s = log_pi[paths[:, 0]] + ell[np.arange(T), paths].sum(1) + log_A[paths[:, :-1],
                                                                     paths[:, 1:]].sum(1)
    q = np.exp(s - special.logsumexp(s))
    entropy = -np.sum(q * np.log(q))
    n = 20000
    pis = rng.dirichlet(post["pi"], size=n)
    As = np.stack([rng.dirichlet(post["A"][k], size=n) for k in range(K)], axis=1)
    Bs = np.stack([rng.dirichlet(post["B"][k], size=n) for k in range(K)], axis=1)
    joint = np.zeros(n)
    for path, qp in zip(paths, q, strict=False):
        joint += qp * (np.log(pis[:, path[0]]) + np.log(Bs[:, path, Y]).sum(1)
                       + np.log(As[:, path[:-1], path[1:]]).sum(1))

    def log_dir(conc, draws):
        c = conc.reshape(-1, draws.shape[-1])
        d = draws.reshape(n, -1, draws.shape[-1])
        return sum(stats.dirichlet(c[j]).logpdf(d[:, j].T) for j in range(c.shape[0]))

    log_q = log_dir(post["pi"], pis) + log_dir(post["A"], As) + log_dir(post["B"], Bs)
    ones = np.ones
    log_p = log_dir(ones(K), pis) + log_dir(ones((K, K)), As) + log_dir(ones((K, M)), Bs)
    samples = joint + log_p - log_q
    reference = samples.mean() + entropy
    stderr = samples.std() / np.sqrt(n)
    assert abs(model.elbo(Y) - reference) < 4.0 * stderr + 1e-3


# ------------------------------------------------ one VB iteration: the conjugate updates
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_one_vb_iteration_is_the_conjugate_update(xp, to64, covariance):
    """Global step from brute-force marginals (pairwise, not products of single-site ones),
    written in standard form (Bishop 2006, 10.60-10.63), against the model's step."""
    rng = np.random.default_rng(15)
    T, K, D = 6, 2, 2
    Y = rng.normal(size=(T, D)) * 2.0
    Yx = to64(Y)
    model = GaussianHMM(K, D, covariance=covariance, seed=0)
    model.fit(Yx, max_iter=1)  # some non-trivial posterior
    log_pi, log_A = (_np(a) for a in model._expected_log_params())
    ell = _np(model._expected_log_lik(Yx))
    marg, pair, _, _, _ = brute_force(log_pi, log_A, ell)
    prior = {k: _np(v) for k, v in model.prior_.items()}
    kappa0, m0 = prior["kappa"][0], prior["h"][0] / prior["kappa"][0]
    nu0 = prior["nu"][0]
    if covariance == "full":
        Psi0 = prior["Q"][0] - kappa0 * np.outer(m0, m0)
    else:
        Psi0 = prior["Q"][0] - kappa0 * m0 * m0
    model.fit(Yx, max_iter=1, warm_start=True)
    post = {k: _np(v) for k, v in model.posterior_params().items()}
    np.testing.assert_allclose(post["pi"], 1.0 + marg[0], rtol=1e-10)
    np.testing.assert_allclose(post["A"], 1.0 + pair, rtol=1e-10)
    for k in range(K):
        N = marg[:, k].sum()
        ybar = (marg[:, k, None] * Y).sum(0) / N
        C = ((Y - ybar).T * marg[:, k]) @ (Y - ybar)
        kappa = kappa0 + N
        m = (kappa0 * m0 + N * ybar) / kappa
        Psi = Psi0 + C + kappa0 * N / kappa * np.outer(ybar - m0, ybar - m0)
        np.testing.assert_allclose(post["mean_precision"][k], kappa, rtol=1e-10)
        np.testing.assert_allclose(post["dof"][k], nu0 + N, rtol=1e-10)
        np.testing.assert_allclose(post["mean"][k], m, rtol=1e-9, atol=1e-12)
        expected_scale = Psi if covariance == "full" else np.diag(Psi)
        np.testing.assert_allclose(post["scale"][k], expected_scale, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_feature_gemm_paths_against_direct_sums(xp, to64, covariance):
    """Batch VB's float64 shortcuts: the expected log likelihood as one GEMM on centred
    features equals the difference form (data far from the origin, one state narrow), and
    the statistics from those features equal the direct weighted sums in NumPy."""
    rng = np.random.default_rng(21)
    T, K, D = 500, 3, 2
    Y = 1e3 + rng.normal(size=(T, D)) * np.array([1.0, 30.0])
    Yx = to64(Y)
    model = GaussianHMM(K, D, covariance=covariance, seed=0)
    model.fit(Yx, max_iter=2)
    features = model._emission_features(Yx)
    direct = _np(model._expected_log_lik(Yx))
    np.testing.assert_allclose(_np(model._expected_log_lik(Yx, features)), direct,
                               rtol=1e-11, atol=1e-9)
    w = rng.dirichlet(np.ones(K), size=T)
    st = {k: _np(v) for k, v in model._emission_statistics(to64(w), Yx, features).items()}
    np.testing.assert_allclose(st["kappa"], w.sum(0), rtol=1e-12)
    np.testing.assert_allclose(st["h"], w.T @ Y, rtol=1e-12)
    second = np.einsum("tk,ti,tj->kij", w, Y, Y)
    np.testing.assert_allclose(st["Q"], second if covariance == "full" else
                               np.einsum("kii->ki", second), rtol=1e-11)


# ------------------------------------------------------------------ score and decode
def test_score_against_enumeration():
    rng = np.random.default_rng(16)
    Y, _ = _sticky_gaussian(rng, 6, K=2, D=2)
    model = GaussianHMM(2, 2, seed=0)
    model.fit(Y, max_iter=5)
    w = {k: _np(v) for k, v in model.posterior_params().items()}
    pi = w["pi"] / w["pi"].sum()
    A = w["A"] / w["A"].sum(1, keepdims=True)
    cov = w["scale"] / w["dof"][:, None, None]  # E[Lambda]^-1, as hmmlearn's vhmm
    ll = np.stack([stats.multivariate_normal(w["mean"][k], cov[k]).logpdf(Y) for k in range(2)], 1)
    _, _, log_z, _, _ = brute_force(np.log(pi), np.log(A), ll)
    np.testing.assert_allclose(model.score(Y), log_z, rtol=1e-10)


def test_decode_recovers_states(xp, to64):
    rng = np.random.default_rng(17)
    Y, x = _sticky_gaussian(rng, 600, K=3, D=2)
    model = GaussianHMM(3, 2, seed=0)
    model.fit(to64(Y), max_iter=30)
    path = _np(model.decode(to64(Y)))
    assert path.shape == (600,)
    assert _best_relabelled_accuracy(path, x, 3) >= 0.95


# ------------------------------------------------------------------------ bad input
def test_bad_input_errors(xp, to64):
    with pytest.raises(ValueError, match="num_states"):
        GaussianHMM(0, 2)
    with pytest.raises(ValueError, match="num_states"):
        CategoricalHMM(0, 3)
    with pytest.raises(TypeError, match="num_states"):
        GaussianHMM(2.5, 2)
    Y = np.zeros((10, 2))
    Y[3, 1] = np.nan
    with pytest.raises(ValueError, match="Y: expected finite values, got 1 NaN"):
        GaussianHMM(2, 2).fit(to64(Y))
    with pytest.raises(ShapeError, match=r"Y: expected shape \(T, 3\)"):
        GaussianHMM(2, 3).fit(to64(np.zeros((10, 2))))
    good = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="shorter than a subchain"):
        GaussianHMM(2, 2).fit(to64(good), method="svi", subchain_length=11)
    with pytest.raises(ValueError, match="non-integer"):
        CategoricalHMM(2, 3).fit(to64(np.array([0.0, 1.5, 2.0])))
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        CategoricalHMM(2, 3).fit(to64(np.array([0, 1, 3])))
    with pytest.raises(ValueError, match="method"):
        GaussianHMM(2, 2).fit(to64(good), method="em")
    with pytest.raises(ValueError, match="covariance"):
        GaussianHMM(2, 2, covariance="spherical")
    with pytest.raises(RuntimeError, match="fit"):
        GaussianHMM(2, 2).decode(to64(good))


def test_categorical_score_and_decode_against_enumeration(xp, to64):
    Y = np.array([0, 0, 2, 2, 1, 0, 2])
    model = CategoricalHMM(2, 3, seed=0, dtype="float64")
    model.fit(to64(Y), max_iter=5)
    w = {k: _np(v) for k, v in model.posterior_params().items()}
    pi = w["pi"] / w["pi"].sum()
    A = w["A"] / w["A"].sum(1, keepdims=True)
    Bm = w["B"] / w["B"].sum(1, keepdims=True)
    _, _, log_z, _, _ = brute_force(np.log(pi), np.log(A), np.log(Bm[:, Y].T))
    np.testing.assert_allclose(model.score(to64(Y)), log_z, rtol=1e-10)
    # decode: Viterbi under the expected log parameters (digamma differences, from SciPy)
    elog = lambda c: special.digamma(c) - special.digamma(c.sum(-1, keepdims=True))  # noqa: E731
    _, _, _, path, _ = brute_force(elog(w["pi"]), elog(w["A"]), elog(w["B"])[:, Y].T)
    np.testing.assert_array_equal(_np(model.decode(to64(Y))), path)
    marg, _, _, _, _ = brute_force(elog(w["pi"]), elog(w["A"]), elog(w["B"])[:, Y].T)
    np.testing.assert_allclose(_np(model.predict_proba(to64(Y))), marg, atol=1e-10)
