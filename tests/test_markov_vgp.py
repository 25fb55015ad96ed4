"""MarkovVGP (CVI in state-space form) against a dense NumPy implementation of the same fixed
point.

The reference: the dense kernel matrix, the Gaussian-site posterior by a Cholesky of
``B = I + L^{1/2} K L^{1/2}`` (``L`` the site precisions; Rasmussen & Williams 2006, sec. 3.4),
the same CVI site update iterated to convergence, and the ELBO written the other way,
``sum_k E_q[log p(y_k | f_k)] - KL(q || p)`` with the KL of two dense Gaussians. Poisson's
expected log density is written here in closed form; Bernoulli's comes from the likelihood
(it is tested against quadrature in its own file). Unsorted inputs with a tie.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gradcheck import check_model_grad
from scipy.special import gammaln

import gpnum
import gpnum.kernels as K
from gpnum import backend as B
from gpnum.errors import ConvergenceWarning, ShapeError
from gpnum.likelihoods import Bernoulli, Gaussian, NegativeBinomial, Poisson, StudentT
from gpnum.models import GPR, MarkovVGP


def _kernel(**kw):
    return (K.Matern32(lengthscale=4.0, variance=1.2, **kw)
            + K.SHO(variance=0.5, period=9.0, quality=2.0, **kw))


def _data(kind, n=150, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 60.0, n)  # unsorted
    t[3] = t[4]                    # a tie
    f = 1.2 * np.sin(0.35 * t) + 0.3
    if kind == "poisson":
        y = rng.poisson(np.exp(f)).astype(np.float64)
    else:
        y = (rng.uniform(size=n) < 0.5 * (1.0 + np.tanh(f))).astype(np.float64)
    return t, y


def _likelihood(kind, **kw):
    return {"poisson": Poisson, "probit": lambda **k: Bernoulli("probit", **k),
            "logit": lambda **k: Bernoulli("logit", **k)}[kind](**kw)


def _expectations(kind, y, m, s):
    """``E_q[log p(y | f)]`` and its derivatives w.r.t. ``m`` and ``s`` (n,)."""
    if kind == "poisson":  # closed form: the log-normal mean
        rate = np.exp(m + 0.5 * s)
        return y * m - rate - gammaln(y + 1.0), y - rate, -0.5 * rate
    ve, g = _likelihood(kind).variational_expectations_and_grad(y, m, s)
    return ve, g["mu"], g["var"]


class DenseCVI:
    """The CVI fixed point with dense matrices (module notes)."""

    def __init__(self, Kx, c):
        self.Kx, self.c = Kx, c

    def posterior(self, lam1, lam2):
        root = np.sqrt(lam2)
        n = len(lam2)
        Bm = np.eye(n) + root[:, None] * self.Kx * root[None, :]
        self.LB = np.linalg.cholesky(Bm)
        self.root = root
        a = lam1 - lam2 * self.c
        self.a = a
        Ka = self.Kx @ a
        m = self.c + Ka - self.Kx @ (root * self._solve_B(root * Ka))
        Sig = self.Kx - self.Kx @ (root[:, None] * self._solve_B(root[:, None] * self.Kx))
        return m, Sig

    def _solve_B(self, v):
        return np.linalg.solve(self.LB.T, np.linalg.solve(self.LB, v))

    def fixed_point(self, kind, y, beta=1.0, iters=300):
        n = len(y)
        lam1, lam2 = np.zeros(n), np.full(n, 1e-2)
        for _ in range(iters):
            m, Sig = self.posterior(lam1, lam2)
            s = np.diag(Sig)
            _, g_m, g_s = _expectations(kind, y, m, s)
            new2 = (1 - beta) * lam2 - 2.0 * beta * g_s
            new1 = (1 - beta) * lam1 + beta * (g_m - 2.0 * g_s * m)
            done = max(np.max(np.abs(new2 - lam2) / new2),
                       np.max(np.abs(new1 - lam1) / (np.abs(new1) + np.sqrt(new2)))) < 1e-14
            lam1, lam2 = new1, new2
            if done:
                break
        return lam1, lam2

    def elbo(self, kind, y, lam1, lam2):
        m, Sig = self.posterior(lam1, lam2)
        ve = _expectations(kind, y, m, np.diag(Sig))[0]
        # KL(N(m, Sig) || N(c, K)) without K^{-1}: K^{-1} Sig = I - R B^{-1} R K
        R = self.root
        n = len(y)
        tr = n - np.trace(R[:, None] * self._solve_B(R[:, None] * self.Kx))
        Kinv_d = self.a - R * self._solve_B(R * (self.Kx @ self.a))  # K^{-1} (m - c)
        logdet = -2.0 * np.sum(np.log(np.diag(self.LB)))          # log|Sig| - log|K|
        kl = 0.5 * (tr + (m - self.c) @ Kinv_d - n - logdet)
        return np.sum(ve) - kl

    def predict(self, Ks, kss):
        R = self.root
        mean = self.c + Ks.T @ self.a - Ks.T @ (R * self._solve_B(R * (self.Kx @ self.a)))
        var = kss - np.sum(Ks * (R[:, None] * self._solve_B(R[:, None] * Ks)), axis=0)
        return mean, var


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _dense(kind, t, y, c, kernel=None):
    kernel = _kernel() if kernel is None else kernel
    ref = DenseCVI(np.asarray(kernel(t[:, None])), c)
    lam1, lam2 = ref.fixed_point(kind, y)
    return ref, lam1, lam2


NEW = np.array([-5.0, 0.0, 7.3, 21.1, 33.3, 59.9, 64.0])


# ------------------------------------------------------------------ Gaussian: one step
def test_gaussian_one_step_is_the_exact_posterior():
    t, _ = _data("poisson")
    y = np.sin(0.3 * t) + 0.2 * np.random.default_rng(1).standard_normal(len(t))
    model = MarkovVGP(_kernel(), Gaussian(variance=0.05), t[:, None], y, mean=0.1)
    model.update_sites(beta=1.0)
    lam1, lam2 = model.sites()
    assert _rel(lam2, np.full(len(t), 20.0)) < 1e-12
    assert _rel(lam1, y / 0.05) < 1e-12
    gpr = GPR(_kernel(), Gaussian(variance=0.05), t[:, None], y, mean=0.1)
    v_gpr, g_gpr = gpr.log_marginal_likelihood_and_grad()
    assert abs(float(model.elbo()) - float(v_gpr)) <= 1e-10 * abs(float(v_gpr))
    v, g = model.objective_and_grad()
    assert model.num_site_steps == 2  # converge_sites: one more step, which does not move
    for key in g_gpr:
        assert abs(float(g[key]) - float(g_gpr[key])) <= 1e-8 * max(1.0, abs(float(g_gpr[key])))
    mu, var = model.predict_f(NEW[:, None])
    mu_d, var_d = gpr.predict_f(NEW[:, None])
    assert _rel(mu, mu_d) < 1e-9 and _rel(var, var_d) < 1e-9


# ------------------------------------------------------------------ non-Gaussian fixed points
@pytest.mark.parametrize("kind", ["poisson", "probit", "logit"])
def test_fixed_point_elbo_and_predictions_match_dense(kind):
    t, y = _data(kind)
    c = 0.2
    ref, lam1_d, lam2_d = _dense(kind, t, y, c)
    model = MarkovVGP(_kernel(), _likelihood(kind), t[:, None], y, mean=c, tol=1e-13)
    model.converge_sites()
    lam1, lam2 = model.sites()
    assert _rel(lam2, lam2_d) < 1e-8
    assert _rel(lam1, lam1_d) < 1e-8
    elbo_d = ref.elbo(kind, y, lam1_d, lam2_d)
    assert abs(float(model.elbo()) - elbo_d) <= 1e-8 * abs(elbo_d)
    mu, var = model.predict_f(NEW[:, None])
    kern = _kernel()
    ref.posterior(lam1_d, lam2_d)
    mu_d, var_d = ref.predict(np.asarray(kern(t[:, None], NEW[:, None])),
                              np.asarray(kern.diag(NEW[:, None])))
    assert _rel(mu, mu_d) < 1e-8 and _rel(var, var_d) < 1e-8
    # predict_y / log_predictive_density go through the likelihood with these marginals
    p_mean, _ = model.predict_y(NEW[:, None])
    assert _rel(p_mean, _likelihood(kind).predict_mean_and_var(mu_d, var_d)[0]) < 1e-8


def test_elbo_away_from_the_fixed_point_matches_dense():
    # the ELBO formula holds for any sites, not only at the fixed point
    kind = "poisson"
    t, y = _data(kind, seed=3)
    rng = np.random.default_rng(2)
    lam1, lam2 = rng.normal(size=len(t)), rng.uniform(0.1, 3.0, len(t))
    model = MarkovVGP(_kernel(), Poisson(), t[:, None], y, mean=-0.3, sites=(lam1, lam2))
    ref = DenseCVI(np.asarray(_kernel()(t[:, None])), -0.3)
    elbo_d = ref.elbo(kind, y, lam1, lam2)
    assert abs(float(model.elbo()) - elbo_d) <= 1e-9 * abs(elbo_d)


def test_oscillating_full_steps_are_damped_to_the_same_fixed_point():
    # Bernoulli labels in long runs (Elec2's "price up" half-hours) under a broad prior: the
    # full CVI step (beta = 1) cycles without converging; converge_sites halves the step and
    # reaches the fixed point of the dense iteration damped by hand (beta = 0.7)
    from gpnum.datasets import load_series

    _, raw, _, _ = load_series(columns=["class"], standardize=False)
    y = raw[:300, 0]
    t = np.arange(300) / 48.0
    kern = lambda: (K.Matern32(lengthscale=0.175, variance=18.7)  # noqa: E731
                    + K.SHO(variance=15.5, period=0.35, quality=0.9))
    cycling = MarkovVGP(kern(), Bernoulli("logit"), t[:, None], y, mean=-1.15)
    moves = [cycling.update_sites() for _ in range(40)]
    assert min(moves[-10:]) > 0.1
    model = MarkovVGP(kern(), Bernoulli("logit"), t[:, None], y, mean=-1.15, tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model.converge_sites()
    ref = DenseCVI(np.asarray(kern()(t[:, None])), -1.15)
    lam1_d, lam2_d = ref.fixed_point("logit", y, beta=0.7, iters=600)
    lam1, lam2 = model.sites()
    assert _rel(lam1, lam1_d) < 1e-7 and _rel(lam2, lam2_d) < 1e-7
    elbo_d = ref.elbo("logit", y, lam1_d, lam2_d)
    assert abs(float(model.elbo()) - elbo_d) <= 1e-8 * abs(elbo_d)


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("kind", ["poisson", "logit"])
def test_gradient_finite_differences_of_the_converged_elbo(kind):
    # every evaluation re-converges the sites: the differences are those of the ELBO at the
    # fixed point, a function of the hyper-parameters alone
    t, y = _data(kind, n=60, seed=4)
    model = MarkovVGP(_kernel(), _likelihood(kind), t[:, None], y, mean=0.2, tol=1e-13)
    _, grads = model.objective_and_grad()
    check_model_grad(model, grads, lambda: model.objective_and_grad()[0], eps=1e-6)


def test_likelihood_parameter_gradient():
    t, y = _data("poisson", n=60, seed=5)
    model = MarkovVGP(_kernel(), NegativeBinomial(dispersion=0.4), t[:, None], y, tol=1e-13)
    _, grads = model.objective_and_grad()
    assert "likelihood.dispersion" in grads
    check_model_grad(model, grads, lambda: model.objective_and_grad()[0], eps=1e-6)


# ------------------------------------------------------------------ backends
def test_every_backend_against_float64_dense(xp, dtype, device, to_xp):
    kind = "poisson"
    t, y = _data(kind, n=100, seed=6)
    t_in = t.astype(np.float32).astype(np.float64) if dtype == xp.float32 else t
    kw = {"xp": xp, "dtype": dtype, "device": device}
    model = MarkovVGP(_kernel(**kw), Poisson(**kw), to_xp(t[:, None]), to_xp(y), mean=0.2,
                      tol=1e-12)
    v, g = model.objective_and_grad()
    assert v.dtype == dtype and all(a.dtype == dtype for a in g.values())
    ref, lam1_d, lam2_d = _dense(kind, t_in, y, 0.2)
    elbo_d = ref.elbo(kind, y, lam1_d, lam2_d)
    tol = 1e-4 if dtype == xp.float32 else 1e-9
    assert abs(float(v) - elbo_d) <= tol * abs(elbo_d)
    mu, var = model.predict_f(to_xp(NEW[:, None]))
    assert mu.dtype == dtype
    kern = _kernel()
    mu_d, var_d = ref.predict(np.asarray(kern(t_in[:, None], NEW[:, None])),
                              np.asarray(kern.diag(NEW[:, None])))
    assert _rel(B.to_numpy(mu), mu_d) < 10 * tol and _rel(B.to_numpy(var), var_d) < 10 * tol


# ------------------------------------------------------------------ training
def test_fit_lbfgs_reaches_a_stationary_elbo():
    t, y = _data("poisson", n=120, seed=7)
    model = MarkovVGP(K.Matern32(lengthscale=1.0, variance=0.5), Poisson(), t[:, None], y)
    before = float(model.objective_and_grad()[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        gpnum.fit(model, progress=False)
    v, g = model.objective_and_grad()
    assert float(v) > before
    # stationary (the gradient is checked against finite differences above)
    for key, val in g.items():
        assert abs(float(val)) < 1e-3, key


def test_fit_adam_sees_permuted_data_and_improves():
    # full-batch Adam hands the objective the training data in a new order every step
    t, y = _data("poisson", n=120, seed=7)
    model = MarkovVGP(K.Matern32(lengthscale=1.0, variance=0.5), Poisson(), t[:, None], y)
    before = float(model.objective_and_grad()[0])
    history = gpnum.fit(model, optimizer="adam", epochs=20, lr=0.05, progress=False)
    assert history.stopped is None and history.num_steps == 20
    assert float(model.objective_and_grad()[0]) > before + 5.0


def test_fit_accepts_the_training_data_in_any_order():
    t, y = _data("poisson", n=50, seed=8)
    model = MarkovVGP(_kernel(), Poisson(), t[:, None], y, tol=1e-12)
    v1, _ = model.objective_and_grad()
    perm = np.random.default_rng(0).permutation(len(t))
    v2, _ = model.objective_and_grad(t[perm, None], y[perm])
    assert abs(float(v1) - float(v2)) <= 1e-12 * abs(float(v1))
    with pytest.raises(ValueError, match="own training data"):
        model.objective_and_grad(t[:, None], y[::-1].copy())


def test_checkpoint_round_trip_keeps_the_sites(tmp_path):
    t, y = _data("probit", n=40, seed=9)
    model = MarkovVGP(_kernel(), Bernoulli(), t[:, None], y, mean=0.3, beta=0.7, tol=1e-11)
    model.converge_sites()
    gpnum.save(model, tmp_path / "markov.npz")
    again = gpnum.load(tmp_path / "markov.npz")
    assert type(again) is MarkovVGP and again.config() == model.config()
    steps = again.num_site_steps
    assert float(again.elbo()) == pytest.approx(float(model.elbo()), rel=1e-13)
    again.converge_sites()
    assert again.num_site_steps - steps == 1  # converged already


# ------------------------------------------------------------------ errors
def test_clear_errors():
    t, y = _data("probit", n=20)
    with pytest.raises(TypeError, match="log-concave"):
        MarkovVGP(_kernel(), StudentT(), t[:, None], y)
    with pytest.raises(ShapeError, match="one input column"):
        MarkovVGP(_kernel(), Bernoulli(), np.stack([t, t], axis=1), y)
    with pytest.raises(TypeError):
        MarkovVGP(K.RBF(), Bernoulli(), t[:, None], y)  # no state-space form
    bad = y.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="y"):
        MarkovVGP(_kernel(), Bernoulli(), t[:, None], bad)
    bad[2] = 2.0
    with pytest.raises(ValueError):
        MarkovVGP(_kernel(), Bernoulli(), t[:, None], bad)
    with pytest.raises(ValueError, match="beta"):
        MarkovVGP(_kernel(), Bernoulli(), t[:, None], y, beta=1.5)
    model = MarkovVGP(_kernel(), Bernoulli(), t[:, None], y)
    with pytest.raises(ValueError, match="full_cov"):
        model.predict_f(t[:3, None], full_cov=True)
    with pytest.raises(ValueError, match="lambda2"):
        model.set_sites(np.zeros(20), -np.ones(20))
    model = MarkovVGP(_kernel(), Bernoulli(), t[:, None], y)  # sites far from converged
    with pytest.raises(ConvergenceWarning, match="CVI"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            model.converge_sites(max_iter=1)
    assert math.isfinite(float(model.elbo()))
