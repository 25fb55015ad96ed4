"""Multi-output kernels (ICM, LMC, independent outputs) and MultiOutputGPR against dense NumPy
references: the (n t, n t) covariance ``sum_q kron(K_q, B_q) + kron(I, D)`` built here from
kernel formulas written out, its Cholesky log marginal likelihood on the observed entries, and
the dense Gaussian posterior; gradients against central finite differences of that reference."""

import numpy as np
import pytest
from gradcheck import check_grad, numerical_grad, relative_error
from kernel_refs_everyday import matern32_reference, rbf_reference

import gpnum
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import ICM, LMC, RBF, IndependentOutputs, Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import MultiOutputGPR

T = 3
LS = np.array([0.7, 1.3])


# ---------------------------------------------------------------- independent NumPy reference
rbf_np = rbf_reference  # the tests' shared dense references
matern32_np = matern32_reference


def start(kind, rng):
    """Natural parameters of a test kernel (dotted names as MultiOutputGPR reports them)."""
    p = {"mean": rng.normal(size=T), "likelihood.variance": rng.uniform(0.1, 0.5, T)}
    if kind == "icm":
        p.update({"kernel.kernel.lengthscale": LS.copy(), "kernel.kernel.variance": 1.3,
                  "kernel.coregion.W": rng.normal(size=(T, 2)),
                  "kernel.coregion.kappa": rng.uniform(0.3, 1.0, T)})
    elif kind == "lmc":
        p.update({"kernel.0.kernel.lengthscale": LS.copy(), "kernel.0.kernel.variance": 1.3,
                  "kernel.0.coregion.W": rng.normal(size=(T, 1)),
                  "kernel.0.coregion.kappa": rng.uniform(0.1, 0.5, T),
                  "kernel.1.kernel.lengthscale": 0.4, "kernel.1.kernel.variance": 0.8,
                  "kernel.1.coregion.W": rng.normal(size=(T, 2)),
                  "kernel.1.coregion.kappa": rng.uniform(0.1, 0.5, T)})
    else:
        for a in range(T):
            p[f"kernel.{a}.lengthscale"] = 0.5 + 0.3 * a
            p[f"kernel.{a}.variance"] = 1.0 + 0.2 * a
    return p


def build_kernel(kind, p, **kw):
    if kind == "icm":
        return ICM(RBF(lengthscale=p["kernel.kernel.lengthscale"],
                       variance=p["kernel.kernel.variance"], **kw), T, 2,
                   W=B.asarray(p["kernel.coregion.W"], **_arr(kw)),
                   kappa=B.asarray(p["kernel.coregion.kappa"], **_arr(kw)))
    if kind == "lmc":
        k = LMC([RBF(lengthscale=LS, variance=1.0, **kw), Matern32(lengthscale=0.4, **kw)], T,
                [1, 2])
        k.set_parameters({name[len("kernel."):]: B.asarray(v, **_arr(kw))
                          for name, v in p.items() if name.startswith("kernel.")})
        return k
    return IndependentOutputs([Matern32(lengthscale=p[f"kernel.{a}.lengthscale"],
                                        variance=p[f"kernel.{a}.variance"], **kw)
                               for a in range(T)])


def _arr(kw):
    return {"xp": kw.get("xp"), "dtype": kw.get("dtype"), "device": kw.get("device")}


def terms_np(kind, p, X1, X2):
    """[(K_q, B_q)] in NumPy from the parameters."""
    if kind == "icm":
        W = p["kernel.coregion.W"]
        return [(rbf_np(X1, X2, p["kernel.kernel.lengthscale"], p["kernel.kernel.variance"]),
                 W @ W.T + np.diag(p["kernel.coregion.kappa"]))]
    if kind == "lmc":
        out = []
        for q, f in ((0, rbf_np), (1, matern32_np)):
            W = p[f"kernel.{q}.coregion.W"]
            out.append((f(X1, X2, p[f"kernel.{q}.kernel.lengthscale"],
                          p[f"kernel.{q}.kernel.variance"]),
                        W @ W.T + np.diag(p[f"kernel.{q}.coregion.kappa"])))
        return out
    eye = np.eye(T)
    return [(matern32_np(X1, X2, p[f"kernel.{a}.lengthscale"], p[f"kernel.{a}.variance"]),
             np.outer(eye[a], eye[a])) for a in range(T)]


def cov_np(kind, p, X1, X2):
    return sum(np.kron(K, Bq) for K, Bq in terms_np(kind, p, X1, X2))


def lml_np(kind, p, X, Y):
    n = X.shape[0]
    S = cov_np(kind, p, X, X) + np.kron(np.eye(n), np.diag(np.broadcast_to(
        p["likelihood.variance"], (T,))))
    r = (Y - p["mean"][None, :]).reshape(-1)
    o = ~np.isnan(r)
    L = np.linalg.cholesky(S[np.ix_(o, o)])
    w = np.linalg.solve(L, r[o])
    return -0.5 * w @ w - np.log(np.diag(L)).sum() - 0.5 * o.sum() * np.log(2.0 * np.pi)


def posterior_np(kind, p, X, Y, Xs):
    n, m = X.shape[0], Xs.shape[0]
    S = cov_np(kind, p, X, X) + np.kron(np.eye(n), np.diag(p["likelihood.variance"]))
    r = (Y - p["mean"][None, :]).reshape(-1)
    o = ~np.isnan(r)
    Ks = cov_np(kind, p, Xs, X)[:, o]
    mean = p["mean"][None, :] + (Ks @ np.linalg.solve(S[np.ix_(o, o)], r[o])).reshape(m, T)
    cov = cov_np(kind, p, Xs, Xs) - Ks @ np.linalg.solve(S[np.ix_(o, o)], Ks.T)
    return mean, cov


def data(seed=0, n=10, missing=0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, 2))
    Y = np.stack([np.sin(2.0 * X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1]], axis=1)
    Y = Y + 0.3 * rng.standard_normal(Y.shape)
    if missing:
        drop = rng.uniform(size=Y.shape) < missing
        drop[0, :] = False   # keep at least one entry
        Y = np.where(drop, np.nan, Y)
    Xs = rng.uniform(-2.0, 2.0, (4, 2))
    return X, Y, Xs, rng


def make_model(kind, p, X, Y, xp, dtype, device, **kw):
    kern = build_kernel(kind, p, xp=xp, dtype=dtype, device=device)
    like = Gaussian(variance=B.asarray(p["likelihood.variance"], xp=xp, dtype=dtype,
                                       device=device), xp=xp, dtype=dtype, device=device)
    return MultiOutputGPR(kern, like, B.asarray(X, xp=xp, dtype=dtype, device=device),
                          B.asarray(Y, xp=xp, dtype=dtype, device=device),
                          mean=B.asarray(p["mean"], xp=xp, dtype=dtype, device=device), **kw)


CASES = [("icm", 0.0, "auto"), ("icm", 0.0, "cholesky"), ("icm", 0.3, "auto"),
         ("lmc", 0.0, "auto"), ("lmc", 0.3, "auto"), ("independent", 0.0, "auto"),
         ("independent", 0.3, "auto"), ("independent", 0.3, "cholesky")]
IDS = [f"{k}-{int(100 * m)}pct-{s}" for k, m, s in CASES]


# ---------------------------------------------------------------- kernels
@pytest.mark.parametrize("kind", ["icm", "lmc", "independent"])
def test_kernel_gram_matches_kron_reference(kind, xp, dtype, device, tol):
    X, _, Xs, rng = data()
    p = start(kind, rng)
    k = build_kernel(kind, p, xp=xp, dtype=dtype, device=device)
    X1 = B.asarray(X, xp=xp, dtype=dtype, device=device)
    X2 = B.asarray(Xs, xp=xp, dtype=dtype, device=device)
    got = B.to_numpy(k.gram(X1, X2))
    np.testing.assert_allclose(got, cov_np(kind, p, X, Xs), rtol=10 * tol, atol=10 * tol)
    diag = np.diagonal(cov_np(kind, p, Xs, Xs)).reshape(-1, T)
    np.testing.assert_allclose(B.to_numpy(k.diag(X2)), diag, rtol=10 * tol)
    Bs = [B.to_numpy(b) for b in k.coregion_matrices()]
    for Bq, (_, ref) in zip(Bs, terms_np(kind, p, X, Xs), strict=True):
        np.testing.assert_allclose(Bq, ref, rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("kind", ["icm", "lmc", "independent"])
@pytest.mark.parametrize("same", [True, False])
def test_kernel_gram_vjp_finite_differences(kind, same):
    X, _, Xs, rng = data(n=5)
    p = start(kind, rng)
    k = build_kernel(kind, p)
    X2 = None if same else Xs
    G = rng.normal(size=(X.shape[0] * T, (X if same else Xs).shape[0] * T))
    grads = k.gram_vjp(G, X, X2)
    assert set(grads) == set(k.parameters())
    base = {n: np.array(v, dtype=np.float64) for n, v in k.parameters().items()}
    for name, value in base.items():
        def f(x, name=name):
            k.set_parameters({**base, name: x})
            return np.sum(G * k.gram(X, X2))

        check_grad(f, value, grads[name], name=name)
        k.set_parameters(base)


def test_icm_reuses_coregion_parameterisation():
    _, _, _, rng = data()
    p = start("icm", rng)
    k = build_kernel("icm", p)
    W, kappa = p["kernel.coregion.W"], p["kernel.coregion.kappa"]
    np.testing.assert_allclose(k.coregion_matrices()[0], W @ W.T + np.diag(kappa), rtol=1e-14)
    assert isinstance(k.coregion, gpnum.kernels.Coregion)


def test_kernel_bad_input():
    with pytest.raises(TypeError, match="gpnum kernel"):
        ICM("rbf", 2)
    with pytest.raises(ValueError, match="rank"):
        LMC([RBF(), RBF()], 3, rank=[1, 2, 3])
    with pytest.raises(ValueError, match="appears twice"):
        k = RBF()
        LMC([k, k], 2)
    with pytest.raises(ShapeError, match="W"):
        ICM(RBF(), 3, 2, W=np.ones((2, 2)))
    with pytest.raises(KeyError, match="unknown"):
        ICM(RBF(), 2).set_parameters({"lengthscale": 1.0})


# ---------------------------------------------------------------- the model: LML and gradient
@pytest.mark.parametrize(("kind", "missing", "solver"), CASES, ids=IDS)
def test_lml_matches_dense_cholesky(kind, missing, solver, xp, dtype, device):
    X, Y, _, rng = data(missing=missing)
    p = start(kind, rng)
    model = make_model(kind, p, X, Y, xp, dtype, device, solver=solver)
    assert model.uses_kronecker == (kind == "icm" and not missing and solver == "auto")
    assert model.uses_independent == (kind == "independent" and solver == "auto")
    ref = lml_np(kind, p, X, Y)
    rtol = 1e-9 if dtype == xp.float64 else 1e-4
    assert abs(float(model.log_marginal_likelihood()) - ref) <= rtol * abs(ref)
    value, _ = model.objective_and_grad()
    assert abs(float(value) - ref) <= rtol * abs(ref)


@pytest.mark.parametrize(("kind", "missing", "solver"), CASES, ids=IDS)
def test_gradient_matches_finite_differences_of_reference(kind, missing, solver, xp, dtype,
                                                          device):
    X, Y, _, rng = data(missing=missing)
    p = start(kind, rng)
    model = make_model(kind, p, X, Y, xp, dtype, device, solver=solver)
    _, grads = model.log_marginal_likelihood_and_grad()
    assert set(grads) == set(model.parameters())
    for name, value in p.items():
        value = np.array(value, dtype=np.float64)
        g = B.to_numpy(grads[name])
        assert g.shape == value.shape, name
        if dtype == xp.float64:
            check_grad(lambda x, name=name: lml_np(kind, {**p, name: x}, X, Y), value, g,
                       name=name)
        else:
            num = numerical_grad(lambda x, name=name: lml_np(kind, {**p, name: x}, X, Y), value)
            assert relative_error(g, num) < 1e-3, name


def test_gradient_shared_noise_variance():
    X, Y, _, rng = data()
    p = start("icm", rng)
    p["likelihood.variance"] = 0.3
    for solver in ("auto", "cholesky"):
        model = make_model("icm", p, X, Y, np, np.float64, "cpu", solver=solver)
        value, grads = model.log_marginal_likelihood_and_grad()
        assert abs(float(value) - lml_np("icm", p, X, Y)) < 1e-9 * abs(float(value))
        check_grad(lambda x: lml_np("icm", {**p, "likelihood.variance": x}, X, Y),
                   np.array(0.3), grads["likelihood.variance"])


# ---------------------------------------------------------------- K's null directions
def _null_case_lml_np(base, p, X, Y):
    """Dense Cholesky LML of an ICM with an RBF or Matern-1/2 latent kernel (NumPy)."""
    ell, var = p["kernel.kernel.lengthscale"], p["kernel.kernel.variance"]
    if base == "rbf":
        K = rbf_np(X, X, ell, var)
    else:
        K = var * np.exp(-np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)) / ell)
    W = p["kernel.coregion.W"]
    S = np.kron(K, W @ W.T + np.diag(p["kernel.coregion.kappa"]))
    S += np.kron(np.eye(X.shape[0]), np.diag(p["likelihood.variance"]))
    r = (Y - p["mean"][None, :]).reshape(-1)
    L = np.linalg.cholesky(S)
    w = np.linalg.solve(L, r)
    return -0.5 * w @ w - np.log(np.diag(L)).sum() - 0.5 * r.size * np.log(2.0 * np.pi)


@pytest.mark.parametrize(("base", "ell"), [("rbf", 3.0), ("matern12", 0.05)])
def test_kronecker_leaves_out_null_directions_of_k(base, ell, xp, dtype, device):
    """The LML and gradient use K's eigenvectors above eps ||K||_F only: a smooth kernel, most
    of whose spectrum lies below that, and a rough one, none of whose does, against the dense
    Cholesky reference (values; gradients by its finite differences)."""
    from gpnum.kernels import Matern12
    from gpnum.models._multioutput_math import kronecker_factors, kronecker_lml

    rng = np.random.default_rng(11)
    n = 120
    X = rng.uniform(-1.5, 1.5, (n, 2))
    Y = np.stack([np.sin(2.0 * X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1]], axis=1)
    Y = Y + 0.3 * rng.standard_normal(Y.shape)
    p = {"mean": rng.normal(size=T), "likelihood.variance": rng.uniform(0.1, 0.5, T),
         "kernel.kernel.lengthscale": np.array(ell), "kernel.kernel.variance": np.array(1.3),
         "kernel.coregion.W": rng.normal(size=(T, 2)),
         "kernel.coregion.kappa": rng.uniform(0.3, 1.0, T)}
    arr = {"xp": xp, "dtype": dtype, "device": device}
    latent = (RBF if base == "rbf" else Matern12)(lengthscale=ell, variance=1.3, **arr)
    kern = ICM(latent, T, 2, W=B.asarray(p["kernel.coregion.W"], **arr),
               kappa=B.asarray(p["kernel.coregion.kappa"], **arr))
    model = MultiOutputGPR(kern, Gaussian(variance=B.asarray(p["likelihood.variance"], **arr),
                                          **arr),
                           B.asarray(X, **arr), B.asarray(Y, **arr),
                           mean=B.asarray(p["mean"], **arr))
    assert model.uses_kronecker
    # float64 NumPy: the number of K's eigenvectors kept, and the same algebra with all of them
    K = np.asarray(latent.__class__(lengthscale=ell, variance=1.3)(X))
    W = p["kernel.coregion.W"]
    Bc = W @ W.T + np.diag(p["kernel.coregion.kappa"])
    noise, R = np.asarray(p["likelihood.variance"]), Y - p["mean"][None, :]
    sub = kronecker_factors(K, Bc, noise, subset=True)
    assert (sub["UK"].shape[1] < n // 2) if base == "rbf" else (sub["UK"].shape[1] == n)
    v_sub, g_sub = kronecker_lml(sub, R, K, Bc, True)
    v_all, g_all = kronecker_lml(kronecker_factors(K, Bc, noise), R, K, Bc, True)
    assert abs(v_sub - v_all) <= 1e-12 * abs(v_all)
    for name in ("K", "B", "noise", "mean"):
        assert relative_error(g_sub[name], g_all[name]) < 1e-10, name

    ref = _null_case_lml_np(base, p, X, Y)
    value, grads = model.log_marginal_likelihood_and_grad()
    rtol = 1e-9 if dtype == xp.float64 else 1e-4
    assert abs(float(value) - ref) <= rtol * abs(ref)
    assert abs(float(model.log_marginal_likelihood()) - ref) <= rtol * abs(ref)
    for name, x0 in p.items():
        x0 = np.array(x0, dtype=np.float64)
        g = B.to_numpy(grads[name])

        def f(x, name=name):
            return _null_case_lml_np(base, {**p, name: x}, X, Y)

        if dtype == xp.float64:
            check_grad(f, x0, g, name=name)
        else:
            assert relative_error(g, numerical_grad(f, x0)) < 1e-3, name


# ---------------------------------------------------------------- predictions
@pytest.mark.parametrize(("kind", "missing", "solver"), CASES, ids=IDS)
def test_predictions_match_dense_posterior(kind, missing, solver, xp, dtype, device):
    X, Y, Xs, rng = data(missing=missing)
    p = start(kind, rng)
    model = make_model(kind, p, X, Y, xp, dtype, device, solver=solver)
    mean_ref, cov_ref = posterior_np(kind, p, X, Y, Xs)
    rtol = 1e-9 if dtype == xp.float64 else 2e-4
    m = Xs.shape[0]
    Xn = B.asarray(Xs, xp=xp, dtype=dtype, device=device)
    mean, var = model.predict_f(Xn)
    np.testing.assert_allclose(B.to_numpy(mean), mean_ref, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(B.to_numpy(var), np.diagonal(cov_ref).reshape(m, T), rtol=rtol,
                               atol=rtol)
    _, out = model.predict_f(Xn, full_output_cov=True)
    blocks = np.stack([cov_ref[i * T:(i + 1) * T, i * T:(i + 1) * T] for i in range(m)])
    np.testing.assert_allclose(B.to_numpy(out), blocks, rtol=rtol, atol=rtol)
    _, full = model.predict_f(Xn, full_cov=True)
    np.testing.assert_allclose(B.to_numpy(full), cov_ref, rtol=rtol, atol=rtol)
    s2 = p["likelihood.variance"]
    _, var_y = model.predict_y(Xn)
    np.testing.assert_allclose(B.to_numpy(var_y), np.diagonal(cov_ref).reshape(m, T) + s2,
                               rtol=rtol, atol=rtol)
    _, full_y = model.predict_y(Xn, full_cov=True)
    np.testing.assert_allclose(B.to_numpy(full_y), cov_ref + np.kron(np.eye(m), np.diag(s2)),
                               rtol=rtol, atol=rtol)
    Ys = mean_ref + 0.1
    Ys[1, 2] = np.nan
    lpd = B.to_numpy(model.log_predictive_density(Xn, B.asarray(Ys, xp=xp, dtype=dtype,
                                                                 device=device)))
    v = np.diagonal(cov_ref).reshape(m, T) + s2
    ref = -0.5 * np.log(2 * np.pi * v) - 0.5 * (Ys - mean_ref) ** 2 / v
    np.testing.assert_allclose(lpd[np.isfinite(Ys)], ref[np.isfinite(Ys)], rtol=rtol)
    assert np.isnan(lpd[1, 2])


# ---------------------------------------------------------------- protocol
def test_fit_trains_through_the_protocol_and_paths_agree():
    X, Y, _, rng = data(n=25)
    p = start("icm", rng)
    fitted = []
    for solver in ("auto", "cholesky"):
        model = make_model("icm", p, X, Y, np, np.float64, "cpu", solver=solver)
        before = float(model.log_marginal_likelihood())
        gpnum.fit(model, maxiter=60)
        after = float(model.log_marginal_likelihood())
        assert after > before + 1.0
        fitted.append(after)
    # Same objective and gradient on both paths: L-BFGS-B lands on the same optimum.
    assert abs(fitted[0] - fitted[1]) < 1e-3 * abs(fitted[0])


def test_config_round_trip_and_unconstrained():
    X, Y, _, rng = data(missing=0.3)
    p = start("lmc", rng)
    model = make_model("lmc", p, X, Y, np, np.float64, "cpu", jitter=1e-6)
    params = model.parameters()
    again = MultiOutputGPR.from_config(build_kernel("lmc", p), Gaussian(
        variance=p["likelihood.variance"]), {"mean": params["mean"]}, model.config(),
        model.data())
    assert again.config() == {"jitter": 1e-6, "solver": "auto"}
    assert float(again.log_marginal_likelihood()) == float(model.log_marginal_likelihood())
    u = model.unconstrained()
    model.set_unconstrained(u)
    for name, v in model.parameters().items():
        np.testing.assert_allclose(v, params[name], rtol=1e-12)
    _, grads = model.log_marginal_likelihood_and_grad()
    gu = model.grad_to_unconstrained(grads)
    assert set(gu) == set(params)


def test_model_bad_input():
    X, Y, _, rng = data()
    p = start("icm", rng)
    k = build_kernel("icm", p)
    like = Gaussian(variance=p["likelihood.variance"])
    with pytest.raises(TypeError, match="multi-output kernel"):
        MultiOutputGPR(RBF(), like, X, Y)
    with pytest.raises(ShapeError, match="Y: expected shape"):
        MultiOutputGPR(k, like, X, Y[:, :2])
    with pytest.raises(ValueError, match="Inf"):
        MultiOutputGPR(k, like, X, np.where(Y > 1.0, np.inf, Y))
    with pytest.raises(ValueError, match="every entry is missing"):
        MultiOutputGPR(k, like, X, np.full(Y.shape, np.nan))
    with pytest.raises(ShapeError, match="likelihood.variance"):
        MultiOutputGPR(k, Gaussian(variance=np.ones(2)), X, Y)
    Ym = Y.copy()
    Ym[2, 1] = np.nan
    with pytest.raises(ValueError, match="kronecker"):
        MultiOutputGPR(k, like, X, Ym, solver="kronecker")
    model = MultiOutputGPR(k, like, X, Y)
    with pytest.raises(ShapeError):
        model.objective_and_grad(X, Y[:5])
    with pytest.raises(ValueError, match="choose one"):
        model.predict_f(X, full_cov=True, full_output_cov=True)


@pytest.mark.parametrize("kind", ["icm", "lmc", "independent"])
def test_kernel_rebuilds_from_checkpoint_spec(kind):
    """The multi-output kernels save and rebuild through gpnum.models' spec functions (what
    checkpoints and the estimators' clone use): the same class, outputs and gram."""
    import json

    from gpnum.models import kernel_from_spec, kernel_spec

    _, _, _, rng = data()
    p = start(kind, rng)
    k = build_kernel(kind, p)
    params = {n: np.asarray(v) for n, v in k.parameters().items()}
    spec = json.loads(json.dumps(kernel_spec(k)))  # data, as a checkpoint stores it
    again = kernel_from_spec(spec, params, xp=np, dtype=np.float64)
    assert type(again) is type(k) and again.num_outputs == k.num_outputs
    X = np.random.default_rng(1).normal(size=(4, 2))
    np.testing.assert_array_equal(again.gram(X), k.gram(X))


def test_kronecker_float32_smooth_kernel_and_indefinite_input():
    """float32 K of a smooth kernel has round-off eigenvalues below zero: the Kronecker path
    clips them (the noise keeps the covariance definite) and matches the dense reference; a
    genuinely indefinite matrix raises."""
    from gpnum.errors import NotPSDError
    from gpnum.models._multioutput_math import kronecker_factors

    rng = np.random.default_rng(7)
    n = 300
    X = np.sort(rng.uniform(0, 5, (n, 1)), axis=0)
    Y = np.hstack([np.sin(X), np.cos(X)]) + 0.1 * rng.standard_normal((n, 2))
    k = ICM(RBF(lengthscale=1.0, dtype=np.float32), 2, 1)
    model = MultiOutputGPR(k, Gaussian(variance=np.full(2, 0.01, dtype=np.float32),
                                       dtype=np.float32), X.astype(np.float32),
                           Y.astype(np.float32))
    W = np.asarray(k.coregion.W, dtype=np.float64)
    B64 = W @ W.T + np.eye(2)
    S = np.kron(rbf_np(X, X, 1.0, 1.0), B64) + 0.01 * np.eye(2 * n)
    r = Y.reshape(-1)
    ref = -0.5 * (r @ np.linalg.solve(S, r) + np.linalg.slogdet(S)[1] + r.size * np.log(2 * np.pi))
    assert abs(float(model.log_marginal_likelihood()) - ref) < 1e-3 * abs(ref)
    K = np.array([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(NotPSDError, match="indefinite"):
        kronecker_factors(K, np.eye(2), np.ones(2))
