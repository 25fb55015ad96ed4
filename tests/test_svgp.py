"""SVGP: ELBO against an independent dense (unwhitened) computation, gradients against finite
differences, the exact-GP limit, predictions, bad input."""

import numpy as np
import pytest
from gradcheck import check_grad
from scipy.special import roots_hermite
from scipy.stats import norm

import gpnum
from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Bernoulli, Gaussian, StudentT

# ---------------------------------------------------------------- independent NumPy reference


def matern52(X1, X2, ls, var):
    r = np.sqrt(np.maximum(((X1[:, None, :] - X2[None, :, :]) ** 2 / ls**2).sum(-1), 0.0))
    s5 = np.sqrt(5.0) * r
    return var * (1.0 + s5 + s5**2 / 3.0) * np.exp(-s5)


def gaussian_ve(y, mu, v, s2):
    return -0.5 * np.log(2 * np.pi * s2) - ((y - mu) ** 2 + v) / (2 * s2)


def gh_ve(logp, y, mu, v, n=120):
    t, w = roots_hermite(n)
    f = mu[:, None] + np.sqrt(2 * v)[:, None] * t[None, :]
    return (logp(y[:, None], f) * w).sum(1) / np.sqrt(np.pi)


def sym_sqrt(K):
    w, V = np.linalg.eigh(K)
    return (V * np.sqrt(w)) @ V.T


def dense_elbo(Z, X, y, q_mu, q_sqrt, ls, kvar, c, jitter, N, ve_fn, root="cholesky"):
    """Unwhitened: q(u) = N(W m', W S' W^T) against p(u) = N(0, K_ZZ), full-covariance KL.

    W is the Cholesky factor (root="cholesky") or the symmetric square root (root="ciq").
    """
    m = Z.shape[0]
    Kzz = matern52(Z, Z, ls, kvar) + jitter * np.eye(m)
    L = np.linalg.cholesky(Kzz) if root == "cholesky" else sym_sqrt(Kzz)
    mu_u = L @ q_mu
    S_u = L @ q_sqrt @ q_sqrt.T @ L.T
    Kxz = matern52(X, Z, ls, kvar)
    Kinv = np.linalg.inv(Kzz)
    mu = c + Kxz @ Kinv @ mu_u
    var = (kvar - np.einsum("ij,jk,ik->i", Kxz, Kinv, Kxz)
           + np.einsum("ij,jk,ik->i", Kxz @ Kinv, S_u, Kxz @ Kinv))
    kl = 0.5 * (np.trace(Kinv @ S_u) + mu_u @ Kinv @ mu_u - m
                + np.linalg.slogdet(Kzz)[1] - np.linalg.slogdet(S_u)[1])
    return N / X.shape[0] * ve_fn(y, mu, var).sum() - kl


def problem(seed=0, m=6, b=7, d=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (b, d))
    Z = rng.uniform(-1, 1, (m, d))
    y = np.sin(3 * X[:, 0]) + 0.3 * rng.standard_normal(b)
    q_mu = rng.standard_normal(m) * 0.5
    q_sqrt = np.tril(rng.standard_normal((m, m)) * 0.3) + np.eye(m) * 0.7
    return X, Z, y, q_mu, q_sqrt


def build(lik, Z, q_mu, q_sqrt, whitening="cholesky", N=40, ls=0.7, kvar=1.3, c=0.2, xp=None,
          dtype=None, device=None, ciq=None):
    kern = Matern52(lengthscale=np.full(Z.shape[1], ls), variance=kvar, xp=xp, dtype=dtype,
                    device=device)
    Zx = B.asarray(Z, dtype=dtype, xp=xp, device=device) if xp is not None else Z
    model = gpnum.SVGP(kern, lik, Zx, num_data=N, whitening=whitening, mean=c, jitter=1e-6,
                       ciq_options=ciq)
    model.q_mu = q_mu
    model.q_sqrt = q_sqrt
    return model


TIGHT_CIQ = {"num_quad": 40, "rtol": 1e-12, "maxiter": 200}

# ---------------------------------------------------------------- ELBO value


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_elbo_matches_dense_unwhitened(whitening):
    X, Z, y, q_mu, q_sqrt = problem()
    s2 = 0.3
    model = build(Gaussian(variance=s2), Z, q_mu, q_sqrt, whitening, ciq=TIGHT_CIQ)
    ref = dense_elbo(Z, X, y, q_mu, q_sqrt, 0.7, 1.3, 0.2, 1e-6, 40,
                     lambda y, mu, v: gaussian_ve(y, mu, v, s2), root=whitening)
    got = float(B.to_numpy(model.elbo(X, y)))
    rel = 1e-9 if whitening == "cholesky" else 1e-8
    assert abs(got - ref) <= rel * abs(ref)


def test_elbo_bernoulli_matches_dense():
    X, Z, y, q_mu, q_sqrt = problem(1)
    yb = (y > 0).astype(float)
    model = build(Bernoulli(link="probit", num_gauss_hermite=60), Z, q_mu, q_sqrt)
    ref = dense_elbo(Z, X, yb, q_mu, q_sqrt, 0.7, 1.3, 0.2, 1e-6, 40,
                     lambda y, mu, v: gh_ve(lambda yy, f: np.where(yy > 0.5, norm.logcdf(f),
                                                                  norm.logcdf(-f)), y, mu, v))
    got = float(B.to_numpy(model.elbo(X, yb)))
    assert abs(got - ref) <= 1e-9 * abs(ref)


def test_cholesky_and_ciq_agree_within_ciq_tolerance():
    X, Z, y, q_mu, q_sqrt = problem(2, m=30, b=20)
    lik = Gaussian(variance=0.2)
    # The two whitenings differ by the rotation Q = K^{-1/2} L: the same q(u) has
    # m'_ciq = Q m'_chol and S'_ciq = Q S'_chol Q^T.
    Kzz = matern52(Z, Z, 0.7, 1.3) + 1e-6 * np.eye(30)
    Q = np.linalg.solve(sym_sqrt(Kzz), np.linalg.cholesky(Kzz))
    np.testing.assert_allclose(Q @ Q.T, np.eye(30), atol=1e-6)
    mu_c, R_c = Q @ q_mu, np.linalg.cholesky(Q @ q_sqrt @ q_sqrt.T @ Q.T)
    e_chol = float(model_elbo(build(lik, Z, q_mu, q_sqrt, "cholesky"), X, y))
    e_ciq = float(model_elbo(build(lik, Z, mu_c, R_c, "ciq", ciq={"rtol": 1e-4}), X, y))
    assert abs(e_chol - e_ciq) <= 1e-3 * abs(e_chol)


def model_elbo(model, X, y):
    return B.to_numpy(model.elbo(X, y))


def test_elbo_on_every_backend(xp, dtype, device):
    X, Z, y, q_mu, q_sqrt = problem(3)
    s2 = 0.4
    ref = dense_elbo(Z, X, y, q_mu, q_sqrt, 0.7, 1.3, 0.2, 1e-6, 40,
                     lambda y, mu, v: gaussian_ve(y, mu, v, s2))
    for whitening in ("cholesky", "ciq"):
        ref = dense_elbo(Z, X, y, q_mu, q_sqrt, 0.7, 1.3, 0.2, 1e-6, 40,
                         lambda y, mu, v: gaussian_ve(y, mu, v, s2), root=whitening)
        lik = Gaussian(variance=s2, xp=xp, dtype=dtype, device=device)
        model = build(lik, Z, q_mu, q_sqrt, whitening, xp=xp, dtype=dtype, device=device,
                      ciq={"rtol": 1e-6 if dtype == xp.float64 else 1e-4})
        Xb = B.asarray(X, dtype=dtype, xp=xp, device=device)
        yb = B.asarray(y, dtype=dtype, xp=xp, device=device)
        val = model.elbo(Xb, yb)
        assert B.get_namespace(val) is xp
        tol = 1e-5 if dtype == xp.float64 else 2e-3
        assert abs(float(B.to_numpy(val)) - ref) <= tol * abs(ref), whitening
        e, g = model.elbo_and_grad(Xb, yb)
        assert abs(float(B.to_numpy(e)) - ref) <= tol * abs(ref)
        assert g["q_sqrt"].dtype == dtype and B.device_of(g["inducing_points"]) == device


# ---------------------------------------------------------------- gradients


def _flat_check(model, X, y, tol=1e-6, eps=1e-6, atol=1e-12):
    """Finite-difference check of every entry of elbo_and_grad (natural parameters)."""
    _, grads = model.elbo_and_grad(X, y)
    params = {k: B.to_numpy(v).copy() for k, v in model.parameters().items()}
    assert set(grads) == set(params)
    for name, p0 in params.items():
        def f(p, name=name):
            if name == "q_sqrt":
                p = np.tril(p)
            model.set_parameters({name: p})
            try:
                return float(B.to_numpy(model.elbo(X, y)))
            finally:
                model.set_parameters({name: params[name]})
        check_grad(f, p0, B.to_numpy(grads[name]), rtol=tol, eps=eps, atol=atol, name=name)


LIKELIHOODS = {
    "gaussian": lambda: Gaussian(variance=0.3),
    "studentt": lambda: StudentT(df=4.0, scale=0.5),
    "bernoulli": lambda: Bernoulli(link="probit"),
}


@pytest.mark.parametrize("lik", sorted(LIKELIHOODS))
@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_elbo_gradients_finite_differences(lik, whitening):
    X, Z, y, q_mu, q_sqrt = problem(4, m=5, b=6)
    if lik == "bernoulli":
        y = (y > 0).astype(float)
    model = build(LIKELIHOODS[lik](), Z, q_mu, q_sqrt, whitening, ciq=TIGHT_CIQ)
    _flat_check(model, X, y)


@pytest.mark.parametrize("whitening,form", [("cholesky", "cholesky"), ("ciq", "cholesky"),
                                            ("cholesky", "natural")])
def test_elbo_gradient_directional_finite_differences_at_m_400(whitening, form):
    """m = 400 runs the paths small problems skip: the sygst Cholesky backward (m >= 400), the
    blocked products, CIQ's deflation (m >= 128) and the spectral preconditioner of the
    natural form's PCG solves. One random direction per parameter (q_sqrt: lower triangular),
    central differences in float64 against the directional derivative <grad, v>."""
    rng = np.random.default_rng(21)
    m, b, d = 400, 128, 2
    Z = rng.uniform(-2, 2, (m, d))
    X = rng.uniform(-2, 2, (b, d))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(b)
    q_mu = 0.3 * rng.standard_normal(m)
    q_sqrt = np.tril(0.02 * rng.standard_normal((m, m))) + 0.6 * np.eye(m)
    ciq = {"num_quad": 30, "rtol": 1e-13, "maxiter": 1000}
    model = build(StudentT(df=4.0, scale=0.5), Z, q_mu, q_sqrt, whitening, N=b, ls=0.8,
                  ciq=ciq)
    # A large jitter keeps K_ZZ's condition number ~5e3, so that CIQ's 1e-13 solves and the
    # natural form's PCG take tens of iterations, not thousands (the paths are the same).
    model.jitter = 0.1
    if form == "natural":
        model.to_natural()
        model.krylov_options["rtol"] = 1e-13
    _, grads = model.elbo_and_grad(X, y)
    params = {k: B.to_numpy(v).copy() for k, v in model.parameters().items()}
    assert set(grads) == ({*params} - {"q_theta1", "q_precision"})
    # One joint random direction over every parameter: three ELBO evaluations in all (each
    # costs seconds at this size), and a wrong entry anywhere shows in <grad, v>.
    v = {}
    for name in grads:
        d_ = rng.standard_normal(params[name].shape)
        v[name] = np.tril(d_) if name == "q_sqrt" else d_
    norm = np.sqrt(sum(np.sum(d_ * d_) for d_ in v.values()))
    v = {k: d_ / norm for k, d_ in v.items()}
    # h = 1e-4: CIQ's ELBO carries its iterative solves' rounding (about 1e-12 of the ELBO),
    # which central differences divide by h; the truncation error, O(h^2), stays far below.
    h = 1e-4

    def f(t):
        model.set_parameters({k: params[k] + t * v[k] for k in v})
        return float(B.to_numpy(model.elbo(X, y)))

    num = (f(h) - f(-h)) / (2 * h)
    ana = float(sum(np.sum(B.to_numpy(grads[k]) * v[k]) for k in v))
    assert abs(ana - num) <= 1e-6 * max(abs(ana), abs(num)), (ana, num)


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_multi_latent_gradients(whitening):
    from gpnum.likelihoods import RobustMax

    X, Z, y, _, _ = problem(5, m=5, b=6)
    rng = np.random.default_rng(9)
    labels = rng.integers(0, 3, 6).astype(float)
    kern = Matern52(lengthscale=np.full(2, 0.8), variance=1.1)
    model = gpnum.SVGP(kern, RobustMax(3), Z, num_data=30, whitening=whitening,
                       ciq_options=TIGHT_CIQ if whitening == "ciq" else None)
    assert model.num_latent == 3 and model.q_mu.shape == (3, 5)
    model.q_mu = rng.standard_normal((3, 5))
    model.q_sqrt = np.tril(rng.standard_normal((3, 5, 5)) * 0.3) + 0.8 * np.eye(5)
    # Robust-max depends on the latents only through their argmax, which scaling all of them by
    # sqrt(kernel variance) leaves alone: that gradient (and the constant mean's) vanishes up to
    # the Gauss-Hermite error (~1e-6 here), hence the absolute floor.
    _flat_check(model, X, labels, eps=1e-4, atol=1e-5)


# ---------------------------------------------------------------- exact-GP limit


def test_optimal_q_with_z_equal_x_gives_exact_posterior():
    rng = np.random.default_rng(6)
    X = rng.uniform(-2, 2, (15, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(15)
    Xs = np.linspace(-2.5, 2.5, 9)[:, None]
    s2, ls, kv = 0.05, 0.6, 1.0
    kern = Matern52(lengthscale=ls, variance=kv)
    model = gpnum.SVGP(kern, Gaussian(variance=s2), X, num_data=15, jitter=1e-10, mean=0.0)
    K = matern52(X, X, ls, kv) + 1e-10 * np.eye(15)
    L = np.linalg.cholesky(K)
    A = np.linalg.solve(L, K)  # W^{-1} K_ZX with Z = X
    S = np.linalg.inv(np.eye(15) + A @ A.T / s2)
    model.q_mu = S @ A @ y / s2
    model.q_sqrt = np.linalg.cholesky(S)
    mu, var = (B.to_numpy(a) for a in model.predict_f(Xs))
    Ks = matern52(Xs, X, ls, kv)
    Ky = matern52(X, X, ls, kv) + s2 * np.eye(15)
    np.testing.assert_allclose(mu, Ks @ np.linalg.solve(Ky, y), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(var, kv - np.einsum("ij,ji->i", Ks, np.linalg.solve(Ky, Ks.T)),
                               rtol=1e-6, atol=1e-8)
    # the ELBO at the optimum equals the exact log marginal likelihood (Titsias' bound is tight)
    lml = -0.5 * (y @ np.linalg.solve(Ky, y) + np.linalg.slogdet(Ky)[1] + 15 * np.log(2 * np.pi))
    assert abs(float(model.elbo(X, y)) - lml) <= 1e-6 * abs(lml)


# ---------------------------------------------------------------- predictions


def test_predictions_and_samples():
    X, Z, y, q_mu, q_sqrt = problem(7, m=6, b=4)
    s2 = 0.3
    model = build(Gaussian(variance=s2), Z, q_mu, q_sqrt)
    mu, var = model.predict_f(X)
    my, vy = model.predict_y(X)
    np.testing.assert_allclose(my, mu)
    np.testing.assert_allclose(vy, var + s2)
    lpd = model.log_predictive_density(X, y)
    np.testing.assert_allclose(lpd, norm.logpdf(y, mu, np.sqrt(var + s2)), rtol=1e-10)
    S = model.sample_f(X, 20000, seed=3)
    assert S.shape == (20000, 4)
    se = np.sqrt(var / 20000)
    assert np.all(np.abs(S.mean(0) - mu) < 5 * se)
    np.testing.assert_allclose(S.var(0), var, rtol=0.06)


@pytest.mark.parametrize("form", ["cholesky", "natural"])
def test_ciq_pathwise_samples_match_the_dense_posterior(xp, device, form):
    """CIQ whitening samples by pathwise conditioning, no factorisation: their mean and
    covariance against the dense unwhitened posterior, within Monte Carlo error."""
    X, Z, _, q_mu, q_sqrt = problem(13, m=6, b=4)
    dtype = xp.float64
    model = build(Gaussian(variance=0.3, xp=xp, dtype=dtype, device=device), Z, q_mu, q_sqrt,
                  whitening="ciq", xp=xp, dtype=dtype, device=device,
                  ciq={"num_quad": 20, "rtol": 1e-8, "maxiter": 200})
    if form == "natural":
        model.to_natural()
        model.krylov_options["rtol"] = 1e-12
    n_s = 10000
    S = B.to_numpy(model.sample_f(B.asarray(X, dtype=dtype, xp=xp, device=device), n_s, seed=5))
    assert S.shape == (n_s, 4)
    Kzz = matern52(Z, Z, 0.7, 1.3) + 1e-6 * np.eye(6)
    W, Kinv, Kxz = sym_sqrt(Kzz), np.linalg.inv(Kzz), matern52(X, Z, 0.7, 1.3)
    cov = (matern52(X, X, 0.7, 1.3) - Kxz @ Kinv @ Kxz.T
           + Kxz @ Kinv @ W @ q_sqrt @ q_sqrt.T @ W.T @ Kinv @ Kxz.T)
    mean = 0.2 + Kxz @ Kinv @ W @ q_mu
    se = np.sqrt(np.diag(cov) / n_s)
    assert np.all(np.abs(S.mean(0) - mean) < 5 * se), (S.mean(0), mean)
    # sample covariance: standard error of entry (i, j) is sqrt((C_ii C_jj + C_ij^2) / n_s)
    emp = np.cov(S.T)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n_s)
    assert np.all(np.abs(emp - cov) < 5 * se_cov), (emp, cov)


@pytest.mark.parametrize("form", ["cholesky", "natural"])
@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_full_covariance_against_dense_unwhitened_posterior(xp, device, whitening, form):
    """predict_f(full_cov=True): K_XX - K_XZ K^-1 K_ZX + K_XZ K^-1 S_u K^-1 K_ZX, dense NumPy."""
    X, Z, _, q_mu, q_sqrt = problem(11, m=6, b=5)
    dtype = xp.float64
    model = build(Gaussian(variance=0.3, xp=xp, dtype=dtype, device=device), Z, q_mu, q_sqrt,
                  whitening=whitening, xp=xp, dtype=dtype, device=device, ciq=TIGHT_CIQ)
    if form == "natural":
        model.to_natural()
        model.krylov_options["rtol"] = 1e-12
    mean, cov = model.predict_f(B.asarray(X, dtype=dtype, xp=xp, device=device), full_cov=True)
    assert cov.shape == (5, 5)
    Kzz = matern52(Z, Z, 0.7, 1.3) + 1e-6 * np.eye(6)
    W = np.linalg.cholesky(Kzz) if whitening == "cholesky" else sym_sqrt(Kzz)
    Kinv = np.linalg.inv(Kzz)
    Kxz = matern52(X, Z, 0.7, 1.3)
    S_u = W @ q_sqrt @ q_sqrt.T @ W.T
    ref_cov = (matern52(X, X, 0.7, 1.3) - Kxz @ Kinv @ Kxz.T
               + Kxz @ Kinv @ S_u @ Kinv @ Kxz.T)
    ref_mean = 0.2 + Kxz @ Kinv @ W @ q_mu
    np.testing.assert_allclose(B.to_numpy(mean), ref_mean, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(B.to_numpy(cov), ref_cov, rtol=1e-7, atol=1e-9)
    _, var = model.predict_f(B.asarray(X, dtype=dtype, xp=xp, device=device))
    np.testing.assert_allclose(B.to_numpy(var), np.diag(ref_cov), rtol=1e-7, atol=1e-9)


# ---------------------------------------------------------------- state and bad input


def test_numpy_assignment_on_every_backend(xp, dtype, device):
    _, Z, _, q_mu, q_sqrt = problem()
    kern = Matern52(lengthscale=0.5, xp=xp, dtype=dtype, device=device)
    model = gpnum.SVGP(kern, Gaussian(xp=xp, dtype=dtype, device=device),
                       B.asarray(Z, dtype=dtype, xp=xp, device=device), num_data=10)
    model.q_mu = q_mu
    model.q_sqrt = np.triu(q_sqrt.T)  # upper part is dropped: q_sqrt is lower triangular
    model.kernel.lengthscale = 0.9
    model.likelihood.variance = 0.2
    for v in (model.q_mu, model.q_sqrt, model.kernel.lengthscale, model.likelihood.variance):
        assert B.get_namespace(v) is xp and v.dtype == dtype
    np.testing.assert_allclose(B.to_numpy(model.q_sqrt), np.diag(np.diag(q_sqrt)), rtol=1e-6)


def test_bad_input():
    X, Z, y, q_mu, q_sqrt = problem()
    model = build(Gaussian(), Z, q_mu, q_sqrt, N=7)
    with pytest.raises(gpnum.ShapeError, match=r"X: expected shape \(n, 2\), got \(7, 3\)"):
        model.elbo(np.ones((7, 3)), y)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="X: expected finite values"):
        model.elbo(Xn, y)
    yn = y.copy()
    yn[1] = np.nan
    with pytest.raises(ValueError, match="y: expected finite values"):
        model.elbo(X, yn)
    with pytest.raises(gpnum.ShapeError, match=r"y: expected shape \(7,\)"):
        model.elbo(X, y[:5])
    with pytest.raises(ValueError, match="num_data: expected at least the batch size 7"):
        build(Gaussian(), Z, q_mu, q_sqrt, N=3).elbo(X, y)
    with pytest.raises(ValueError):
        build(Bernoulli(), Z, q_mu, q_sqrt).elbo(X, np.full(7, 2.0))
    with pytest.raises(ValueError, match="whitening"):
        gpnum.SVGP(Matern52(), Gaussian(), Z, num_data=10, whitening="qr")
    with pytest.raises(ValueError, match="ciq_options"):
        gpnum.SVGP(Matern52(), Gaussian(), Z, num_data=10, ciq_options={"tol": 1})


def test_not_psd_kzz_names_jitter():
    class Indefinite(Matern52):
        def __call__(self, X1, X2=None):
            K = super().__call__(X1, X2)
            return -K if X2 is None else K

    _, Z, _, _, _ = problem()
    X, y = Z[:3], np.zeros(3)
    model = gpnum.SVGP(Indefinite(), Gaussian(), Z, num_data=10)
    with pytest.raises(gpnum.NotPSDError, match="jitter"):
        model.elbo(X, y)


def test_ciq_predictions_match_dense_symmetric_root():
    # m >= 128 and chunks of 256 or more columns: the whitening solves are deflated
    # (automatically), and predictions run in CIQ-sized chunks.
    rng = np.random.default_rng(12)
    m, n, ls, kvar, jit = 140, 700, 0.3, 1.3, 1e-3  # two prediction chunks
    Z = rng.uniform(-1, 1, (m, 2))
    Xs = rng.uniform(-1, 1, (n, 2))
    q_mu = rng.standard_normal(m) * 0.5
    q_sqrt = np.tril(rng.standard_normal((m, m)) * 0.05) + np.eye(m) * 0.7
    model = gpnum.SVGP(Matern52(lengthscale=np.full(2, ls), variance=kvar), Gaussian(variance=0.1),
                       Z, num_data=400, whitening="ciq", mean=0.2, jitter=jit,
                       ciq_options={"num_quad": 30, "rtol": 1e-8, "maxiter": 400})
    model.q_mu, model.q_sqrt = q_mu, q_sqrt
    mu, var = model.predict_f(Xs)
    Kzz = matern52(Z, Z, ls, kvar) + jit * np.eye(m)
    w, V = np.linalg.eigh(Kzz)
    A = (V / np.sqrt(w)) @ V.T @ matern52(Z, Xs, ls, kvar)
    np.testing.assert_allclose(mu, 0.2 + A.T @ q_mu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(var, kvar - (A * A).sum(0) + ((q_sqrt.T @ A) ** 2).sum(0),
                               rtol=1e-6, atol=1e-6)
    yb = rng.standard_normal(256)
    ref = dense_elbo(Z, Xs[:256], yb, q_mu, q_sqrt, ls, kvar, 0.2, jit, 400,
                     lambda y, mu_, v: gaussian_ve(y, mu_, v, 0.1), root="ciq")
    np.testing.assert_allclose(float(model.elbo(Xs[:256], yb)), ref, rtol=1e-7)


def test_ciq_whitening_warm_starts_its_deflation_search(monkeypatch):
    # Each whitening of a new K_ZZ starts its eigenpair search from the last one's Ritz
    # vectors (ciq_options warm_start, default on); the ELBO after moving the kernel and the
    # inducing points still matches the dense symmetric-root ELBO, and warm_start=False
    # searches from Gaussian vectors every time.
    import gpnum.models._whitening as whitening_module

    calls = []
    real = whitening_module.inv_sqrt_matmul

    def recording(op, B, **kw):
        calls.append(kw.get("deflate_start"))
        return real(op, B, **kw)

    monkeypatch.setattr(whitening_module, "inv_sqrt_matmul", recording)
    rng = np.random.default_rng(14)
    m, b, jit = 140, 256, 1e-3
    Z = rng.uniform(-1, 1, (m, 2))
    X = rng.uniform(-1, 1, (b, 2))
    yb = rng.standard_normal(b)
    q_mu = rng.standard_normal(m) * 0.5
    q_sqrt = np.tril(rng.standard_normal((m, m)) * 0.05) + np.eye(m) * 0.7
    for warm in (True, False):
        calls.clear()
        model = gpnum.SVGP(Matern52(lengthscale=np.full(2, 0.3), variance=1.3),
                           Gaussian(variance=0.1), Z, num_data=400, whitening="ciq",
                           jitter=jit, ciq_options={"num_quad": 30, "rtol": 1e-8,
                                                    "maxiter": 1500, "warm_start": warm})
        model.q_mu, model.q_sqrt = q_mu, q_sqrt
        model.elbo(X, yb)
        Z2 = Z + 0.01 * rng.standard_normal(Z.shape)
        model.inducing_points = Z2
        model.kernel.lengthscale = np.full(2, 0.31)
        got = float(model.elbo(X, yb))
        ref = dense_elbo(Z2, X, yb, q_mu, q_sqrt, 0.31, 1.3, 0.0, jit, 400,
                         lambda y, mu_, v: gaussian_ve(y, mu_, v, 0.1), root="ciq")
        np.testing.assert_allclose(got, ref, rtol=1e-7)
        assert calls[0] is None
        if warm:
            assert calls[1] is not None and calls[1].vectors.shape[0] == m
        else:
            assert calls[1] is None
        # the option is the strategy's own: pathwise samples run CIQ without it
        draws = np.asarray(model.sample_f(X[:5], 3, seed=0))
        assert draws.size == 15 and np.all(np.isfinite(draws))


def test_inducing_columns_against_ard_lengthscales_refused_at_construction():
    # Two-column inducing points with a three-lengthscale ARD kernel: the error comes at
    # construction and names Z's columns and the kernel's lengthscales, not a later X.
    from gpnum.errors import ShapeError
    from gpnum.likelihoods import Softmax

    kernel = Matern52(lengthscale=np.ones(3), xp=np, dtype=np.float64)
    with pytest.raises(ShapeError,
                       match=r"inducing_points: 2 columns.*lengthscale of shape \(3,\)"):
        gpnum.SVGP(kernel, Gaussian(xp=np, dtype=np.float64), np.zeros((4, 2)), num_data=10)
    with pytest.raises(ShapeError, match="inducing_points: 2 columns"):
        gpnum.SVGP(kernel, Softmax(3, xp=np, dtype=np.float64), np.zeros((3, 4, 2)),
                   num_data=10)
    # matching columns are accepted
    gpnum.SVGP(kernel, Gaussian(xp=np, dtype=np.float64), np.zeros((4, 3)), num_data=10)
