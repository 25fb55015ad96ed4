"""Natural gradients: the one-step optimum of the conjugate case against the closed form and
Titsias' collapsed bound, the Krylov method against the dense one, step rejection."""

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian, StudentT
from gpnum.optim import NaturalGradient, warmup

TIGHT_CIQ = {"num_quad": 40, "rtol": 1e-12, "maxiter": 300}


def matern52(X1, X2, ls, var):
    r = np.sqrt(np.maximum(((X1[:, None, :] - X2[None, :, :]) ** 2 / ls**2).sum(-1), 0.0))
    s5 = np.sqrt(5.0) * r
    return var * (1.0 + s5 + s5**2 / 3.0) * np.exp(-s5)


def data(seed=0, n=40, m=8):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(n)
    Z = np.linspace(-2, 2, m)[:, None]
    return X, y, Z


def model_for(Z, n, lik, whitening, c=0.1, ls=0.7, kv=1.2):
    return gpnum.SVGP(Matern52(lengthscale=ls, variance=kv), lik, Z, num_data=n, mean=c,
                      whitening=whitening, jitter=1e-6,
                      ciq_options=TIGHT_CIQ if whitening == "ciq" else None)


def random_q(model, seed):
    rng = np.random.default_rng(seed)
    m = model.num_inducing
    model.q_mu = rng.standard_normal(m)
    model.q_sqrt = np.tril(0.3 * rng.standard_normal((m, m))) + 0.6 * np.eye(m)


def whitening_matrix(Kzz, whitening):
    if whitening == "cholesky":
        return np.linalg.cholesky(Kzz)
    w, V = np.linalg.eigh(Kzz)
    return (V * np.sqrt(w)) @ V.T


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_one_step_lands_on_optimum_and_titsias_bound(whitening):
    X, y, Z = data()
    s2, c, ls, kv = 0.05, 0.1, 0.7, 1.2
    model = model_for(Z, 40, Gaussian(variance=s2), whitening)
    random_q(model, 1)
    NaturalGradient(gamma=1.0, method="dense").step(model, X, y)
    Kzz = matern52(Z, Z, ls, kv) + 1e-6 * np.eye(8)
    Kzx = matern52(Z, X, ls, kv)
    A = np.linalg.solve(whitening_matrix(Kzz, whitening), Kzx)
    S = np.linalg.inv(np.eye(8) + A @ A.T / s2)
    m = S @ A @ (y - c) / s2
    np.testing.assert_allclose(model.q_mu, m, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(model.q_sqrt @ model.q_sqrt.T, S, rtol=1e-8, atol=1e-10)
    Qnn = Kzx.T @ np.linalg.solve(Kzz, Kzx)
    cov = Qnn + s2 * np.eye(40)
    r = y - c
    titsias = (-0.5 * (r @ np.linalg.solve(cov, r) + np.linalg.slogdet(cov)[1]
                       + 40 * np.log(2 * np.pi)) - 0.5 / s2 * np.trace(kv * np.eye(40) - Qnn))
    elbo = float(model.elbo(X, y))
    assert abs(elbo - titsias) <= 1e-9 * abs(titsias)


@pytest.mark.parametrize("lik", ["gaussian", "studentt"])
@pytest.mark.parametrize("precondition", [0, 3])
def test_krylov_matches_dense(lik, precondition):
    X, y, Z = data(2)
    make = (lambda: Gaussian(variance=0.1)) if lik == "gaussian" else \
        (lambda: StudentT(df=5.0, scale=0.3))
    dense = model_for(Z, 400, make(), "cholesky")
    krylov = model_for(Z, 400, make(), "cholesky")
    krylov.krylov_options["precondition"] = precondition  # 0: plain CG (default below m = 128)
    random_q(dense, 3)
    random_q(krylov, 3)
    nd, nk = NaturalGradient(0.3, "dense"), NaturalGradient(0.3, "krylov")
    rng = np.random.default_rng(4)
    for _ in range(3):
        idx = rng.choice(40, 10, replace=False)
        nd.step(dense, X[idx], y[idx])
        nk.step(krylov, X[idx], y[idx])
    assert krylov.variational_form == "natural"
    krylov.to_cholesky()
    np.testing.assert_allclose(krylov.q_mu, dense.q_mu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(krylov.q_sqrt @ krylov.q_sqrt.T, dense.q_sqrt @ dense.q_sqrt.T,
                               rtol=1e-6, atol=1e-7)


def test_krylov_natural_form_elbo_and_gradients_match_cholesky_form():
    X, y, Z = data(5)
    a = model_for(Z, 40, Gaussian(variance=0.2), "cholesky")
    random_q(a, 6)
    b = model_for(Z, 40, Gaussian(variance=0.2), "cholesky")
    random_q(b, 6)
    b.to_natural()
    b.krylov_options.update(num_probes=2000, num_lanczos=8)
    ea, ga = a.elbo_and_grad(X, y)
    eb, gb = b.elbo_and_grad(X, y)
    assert set(gb) == set(ga) - {"q_mu", "q_sqrt"}
    for k in gb:
        np.testing.assert_allclose(gb[k], ga[k], rtol=1e-6, atol=1e-8, err_msg=k)
    # the natural-form KL is a stochastic estimate (Hutchinson + SLQ) for monitoring
    kl_a, kl_b = float(a.kl()), float(b.kl())
    assert abs(kl_a - kl_b) < 0.05 * abs(kl_a)


def test_ngd_on_every_backend(xp, dtype, device):
    X, y, Z = data(7, n=20, m=5)
    model = gpnum.SVGP(Matern52(lengthscale=0.7, variance=1.2, xp=xp, dtype=dtype, device=device),
                       Gaussian(variance=0.05, xp=xp, dtype=dtype, device=device),
                       B.asarray(Z, dtype=dtype, xp=xp, device=device), num_data=20)
    Xb = B.asarray(X, dtype=dtype, xp=xp, device=device)
    yb = B.asarray(y, dtype=dtype, xp=xp, device=device)
    ref = model_for(Z, 20, Gaussian(variance=0.05), "cholesky", c=0.0)
    NaturalGradient(1.0, "dense").step(ref, X, y)
    tol = 1e-6 if dtype == xp.float64 else 5e-3
    for method in ("dense", "krylov"):
        model.to_cholesky()
        model.q_mu = np.zeros(5)
        model.q_sqrt = np.eye(5)
        NaturalGradient(1.0, method).step(model, Xb, yb)
        model.to_cholesky()
        assert B.get_namespace(model.q_mu) is xp and model.q_mu.dtype == dtype
        np.testing.assert_allclose(B.to_numpy(model.q_mu), ref.q_mu, rtol=tol, atol=tol)


def test_krylov_preconditioner_warm_start_on_every_backend(xp, dtype, device, monkeypatch):
    # krylov_options["warm_start"]: each step's preconditioner search starts from the previous
    # one's Ritz vectors (one subspace iteration); q is the same as with cold searches to the
    # PCG tolerance, and the dense method's, on every backend.
    from gpnum.linalg import SpectralPreconditioner

    starts = []
    real = SpectralPreconditioner.from_operator.__func__
    monkeypatch.setattr(SpectralPreconditioner, "from_operator", classmethod(
        lambda cls, *a, **k: starts.append(k.get("start") is not None) or real(cls, *a, **k)))
    X, y, Z = data(13, n=40, m=12)

    def trained(method, warm):
        model = gpnum.SVGP(Matern52(lengthscale=0.7, variance=1.2, xp=xp, dtype=dtype,
                                    device=device),
                           Gaussian(variance=0.05, xp=xp, dtype=dtype, device=device),
                           B.asarray(Z, dtype=dtype, xp=xp, device=device), num_data=400)
        model.krylov_options.update(precondition=6, warm_start=warm)
        ngd = NaturalGradient(0.3, method)
        rng = np.random.default_rng(14)
        for _ in range(4):
            idx = rng.choice(40, 15, replace=False)
            ngd.step(model, B.asarray(X[idx], dtype=dtype, xp=xp, device=device),
                     B.asarray(y[idx], dtype=dtype, xp=xp, device=device))
        return model

    warm = trained("krylov", True)
    assert any(starts) and set(warm._precision_starts) == {0}
    starts.clear()
    cold = trained("krylov", False)
    assert not any(starts) and not cold._precision_starts
    ref = model_for(Z, 400, Gaussian(variance=0.05), "cholesky", c=0.0, ls=0.7, kv=1.2)
    ngd = NaturalGradient(0.3, "dense")
    rng = np.random.default_rng(14)
    for _ in range(4):
        idx = rng.choice(40, 15, replace=False)
        ngd.step(ref, X[idx], y[idx])
    tol = 1e-6 if dtype == xp.float64 else 5e-3
    for model in (warm, cold):
        model.to_cholesky()
        np.testing.assert_allclose(B.to_numpy(model.q_mu), ref.q_mu, rtol=tol, atol=tol)


def test_step_rejection_keeps_precision_positive_definite():
    # Student-t with far outliers: g_var > 0 and large, so gamma = 1 leaves the PD cone.
    rng = np.random.default_rng(8)
    X = rng.uniform(-1, 1, (6, 1))
    y = np.array([8.0, -9.0, 7.5, 0.1, -8.0, 9.0])
    Z = np.linspace(-1, 1, 5)[:, None]
    for method in ("dense", "krylov"):
        model = model_for(Z, 6000, StudentT(df=2.5, scale=0.1), "cholesky")
        ngd = NaturalGradient(1.0, method, max_rejections=30)
        used = ngd.step(model, X, y)
        assert ngd.num_rejected > 0 and used < 1.0
        model.to_cholesky()
        S = B.to_numpy(model.q_sqrt @ model.q_sqrt.T)
        assert np.all(np.isfinite(S)) and np.linalg.eigvalsh(S)[0] > 0
        model2 = model_for(Z, 6000, StudentT(df=2.5, scale=0.1), "cholesky")
        with pytest.raises(gpnum.NotPSDError, match="positive-definite cone"):
            NaturalGradient(1.0, method, max_rejections=0).step(model2, X, y)


def test_gamma_validation_and_warmup():
    with pytest.raises(ValueError, match="gamma"):
        NaturalGradient(1.5)
    with pytest.raises(ValueError, match="method"):
        NaturalGradient(0.1, "exact")
    ngd = NaturalGradient(warmup(0.5, 4, start=0.01))
    X, y, Z = data(9)
    model = model_for(Z, 40, Gaussian(variance=0.1), "cholesky")
    used = [ngd.step(model, X, y) for _ in range(6)]
    np.testing.assert_allclose(used[0], 0.01)
    np.testing.assert_allclose(used[-1], 0.5)
    assert all(a <= b for a, b in zip(used, used[1:], strict=False))


def test_clipped_curvature_keeps_student_t_steps_positive_definite():
    rng = np.random.default_rng(8)
    X = rng.uniform(-1, 1, (6, 1))
    y = np.array([8.0, -9.0, 7.5, 0.1, -8.0, 9.0])
    Z = np.linspace(-1, 1, 5)[:, None]
    model = model_for(Z, 6000, StudentT(df=2.5, scale=0.1), "cholesky")
    d = model.data_term_and_grad(X, y)
    g = B.to_numpy(d["g_var"])[:, 0]
    assert np.any(g > 0)  # outliers: the exact step would leave the cone
    ngd = NaturalGradient(1.0, "dense", clip_curvature=True, max_rejections=0)
    assert ngd.step(model, X, y) == 1.0 and ngd.num_rejected == 0
    A = B.to_numpy(d["A"])
    expected = np.eye(5) - 2.0 * (A * np.minimum(g, 0.0)) @ A.T  # gamma = 1: the target itself
    np.testing.assert_allclose(np.linalg.inv(model.q_sqrt @ model.q_sqrt.T), expected, rtol=1e-8)
    # the mean's fixed point is exact: m = S (A g_mu - 2 A diag(g') A^T m_old)
    m_old = np.zeros(5)
    t1 = A @ B.to_numpy(d["g_mu"])[:, 0] - 2.0 * (A * np.minimum(g, 0.0)) @ (A.T @ m_old)
    np.testing.assert_allclose(model.q_mu, np.linalg.solve(expected, t1), rtol=1e-8)


def test_krylov_check_solve_only_where_curvature_can_be_positive(monkeypatch):
    # Gaussian: g_var < 0 everywhere, every candidate precision is PD by construction, so the
    # check solve is skipped; Student-t with outliers (g_var > 0) still runs it.
    calls = []
    real = NaturalGradient._accept
    monkeypatch.setattr(NaturalGradient, "_accept",
                        lambda self, *a: calls.append(1) or real(self, *a))
    X, y, Z = data(10)
    model = model_for(Z, 40, Gaussian(variance=0.1), "cholesky")
    NaturalGradient(0.5, "krylov").step(model, X, y)
    assert calls == []
    y_out = y.copy()
    y_out[:5] += 15.0
    model = model_for(Z, 4000, StudentT(df=2.5, scale=0.1), "cholesky")
    NaturalGradient(0.5, "krylov", max_rejections=30).step(model, X, y_out)
    assert len(calls) >= 1


def test_natural_form_elbo_searches_each_preconditioner_once(monkeypatch):
    # The natural solves and the KL's probe solves share one eigenpair search per precision;
    # the shared preconditioner changes nothing but the iteration count.
    from gpnum.linalg import SpectralPreconditioner
    X, y, Z = data(11, m=8)
    model = model_for(Z, 40, Gaussian(variance=0.2), "cholesky")
    random_q(model, 12)
    model.to_natural()
    ref_value, ref_grads = model.elbo_and_grad(X, y)  # default: no preconditioner at m = 8
    model.krylov_options["precondition"] = 3
    calls = []
    real = SpectralPreconditioner.from_operator.__func__
    monkeypatch.setattr(SpectralPreconditioner, "from_operator",
                        classmethod(lambda cls, *a, **k: calls.append(1) or real(cls, *a, **k)))
    value, grads = model.elbo_and_grad(X, y)
    assert len(calls) == 1
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-6)
    for k in ref_grads:
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-6, atol=1e-9, err_msg=k)


def test_dense_steps_from_kept_natural_parameters_equal_fresh_ones():
    """The dense method keeps (theta1, P) of the q it set: a second step from them equals one
    from R^-T R^-1 recomputed, and a q set from outside is never paired with stale ones."""
    X, y, Z = data(seed=3, n=40, m=8)
    kept = model_for(Z, 40, Gaussian(variance=0.1), "cholesky")
    fresh = model_for(Z, 40, Gaussian(variance=0.1), "cholesky")
    random_q(kept, 1)
    random_q(fresh, 1)
    ngd_kept, ngd_fresh = NaturalGradient(0.3), NaturalGradient(0.3)
    for step in range(3):
        Xb, yb = X[10 * step:10 * step + 20], y[10 * step:10 * step + 20]
        ngd_kept.step(kept, Xb, yb)
        ngd_fresh._natural = None  # forget: recompute from q_sqrt every step
        ngd_fresh.step(fresh, Xb, yb)
        assert ngd_kept.natural_cache(kept) is not None
    for k in ("q_mu", "q_sqrt"):
        np.testing.assert_allclose(B.to_numpy(kept.parameters()[k]),
                                   B.to_numpy(fresh.parameters()[k]), rtol=1e-10, atol=1e-12)
    # An outside assignment to q invalidates what the optimiser kept.
    kept.q_mu = np.zeros(8)
    assert ngd_kept.natural_cache(kept) is None
