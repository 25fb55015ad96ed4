"""Checkpoints round-trip every kernel, likelihood, whitening, variational form and backend.

Parameters are set to random values that differ per dimension (an ARD lengthscale of shape
(d,), ArcCosine's and Polynomial's own parameters, a full q), so that a loader that rebuilt any of
them from a default, or with the wrong shape, changes the predictions. The reference is the
model's own predictions before saving: after loading they must be equal, bit for bit on NumPy.
"""

import json

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.kernels import RBF, ArcCosine, Matern12, Matern32, Matern52, Polynomial, Product, Sum
from gpnum.likelihoods import Bernoulli, Gaussian, RobustMax, StudentT

D = 3


def _kernel(name, xp, dtype, device):
    kw = dict(xp=xp, dtype=dtype, device=device)
    ard = np.array([0.7, 1.3, 2.1])
    if name == "ard":
        return Matern52(lengthscale=ard, variance=1.4, **kw)
    if name == "sum":
        return Sum(RBF(lengthscale=ard, variance=0.8, **kw), Matern12(lengthscale=0.9, **kw))
    if name == "product":
        return Product(Matern32(lengthscale=ard[::-1].copy(), **kw),
                       Polynomial(degree=1, variance=0.5, offset=0.3, **kw))
    if name == "arccosine":
        return ArcCosine(depth=2, weight_variance=1.7, bias_variance=0.4, **kw)
    return Polynomial(degree=3, variance=0.6, offset=1.2, **kw)


def _likelihood(name, xp, dtype, device):
    kw = dict(xp=xp, dtype=dtype, device=device)
    return {"gaussian": lambda: Gaussian(variance=0.3, **kw),
            "studentt": lambda: StudentT(df=4.0, scale=0.4, **kw),
            "bernoulli": lambda: Bernoulli(link="logit", num_gauss_hermite=15, **kw),
            "robustmax": lambda: RobustMax(3, epsilon=0.01, **kw)}[name]()


def _randomise(model, seed):
    """Move every parameter away from its initial value (in unconstrained form)."""
    rng = np.random.default_rng(seed)
    xp = model.xp
    new = {}
    for k, v in model.unconstrained().items():
        a = B.to_numpy(v)
        step = 0.3 * rng.standard_normal(a.shape)
        if k in ("q_sqrt", "q_precision"):
            step = np.tril(step) if k == "q_sqrt" else step @ step.T / a.shape[-1]
        new[k] = B.asarray(a + step, dtype=model.dtype, xp=xp, device=B.device_of(v))
    model.set_unconstrained(new)


def _model(kernel, likelihood, whitening, xp, dtype, device, m=7):
    Z = np.random.default_rng(1).standard_normal((m, D))
    return gpnum.SVGP(kernel, likelihood, B.asarray(Z, dtype=dtype, xp=xp, device=device),
                      num_data=50, whitening=whitening,
                      jitter=1e-4 if dtype == xp.float32 else 1e-6)


def _assert_round_trip(model, path, xp, device):
    d = model.inducing_points.shape[1]
    Xs = B.asarray(np.random.default_rng(2).standard_normal((9, d)), dtype=model.dtype, xp=xp,
                   device=device)
    before = model.predict_f(Xs)
    gpnum.save(model, path)
    loaded = gpnum.load(path, xp=xp, device=device)
    assert type(loaded.kernel) is type(model.kernel)
    assert type(loaded.likelihood) is type(model.likelihood)
    assert loaded.variational_form == model.variational_form
    for k, v in model.parameters().items():
        got = loaded.parameters()[k]
        assert got.shape == v.shape, k
        np.testing.assert_array_equal(B.to_numpy(got), B.to_numpy(v), err_msg=k)
    after = loaded.predict_f(Xs)
    for a, b in zip(before, after, strict=False):
        a, b = B.to_numpy(a), B.to_numpy(b)
        if xp.__name__.endswith("numpy"):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=4 * np.finfo(a.dtype).eps, atol=0)


@pytest.mark.parametrize("kernel", ["ard", "sum", "product", "arccosine", "polynomial"])
def test_every_kernel_round_trips(tmp_path, xp, device, dtype, kernel):
    model = _model(_kernel(kernel, xp, dtype, device), _likelihood("gaussian", xp, dtype, device),
                   "cholesky", xp, dtype, device)
    _randomise(model, seed=3)
    _assert_round_trip(model, tmp_path / "k.npz", xp, device)


@pytest.mark.parametrize("form", ["cholesky", "natural"])
@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
@pytest.mark.parametrize("lik", ["gaussian", "studentt", "bernoulli", "robustmax"])
def test_every_likelihood_whitening_and_form_round_trips(tmp_path, xp, device, lik, whitening,
                                                          form):
    dtype = xp.float64
    model = _model(_kernel("ard", xp, dtype, device), _likelihood(lik, xp, dtype, device),
                   whitening, xp, dtype, device)
    _randomise(model, seed=4)
    if form == "natural":
        model.to_natural()
    _assert_round_trip(model, tmp_path / "l.npz", xp, device)


def test_the_getting_started_model_reloads(tmp_path):
    """docs/getting-started.md's model: elevators' 18 inputs, an ARD lengthscale of shape (18,)."""
    ds = gpnum.datasets.load("elevators", xp="numpy")
    X = ds.X_train[:300]
    Z = gpnum.inducing.kmeans(X, 10, seed=0)
    kernel = Matern52(lengthscale=np.ones(X.shape[1]))
    model = gpnum.SVGP(kernel, Gaussian(variance=0.1), Z, num_data=X.shape[0])
    gpnum.fit(model, X, ds.y_train[:300], epochs=1, batch_size=100, progress=False)
    assert model.kernel.lengthscale.shape == (18,)
    _assert_round_trip(model, tmp_path / "elevators.npz", model.xp, "cpu")


def test_a_checkpoint_cannot_name_another_class(tmp_path):
    """A checkpoint is data: a class outside gpnum's kernels and likelihoods is refused."""
    model = _model(_kernel("ard", np, np.float64, "cpu"),
                   _likelihood("gaussian", np, np.float64, "cpu"), "cholesky",
                   B.namespace_by_name("numpy"), np.float64, "cpu")
    gpnum.save(model, tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as f:
        files = dict(f)
    for module, cls in (("os", "system"), ("subprocess", "Popen"), ("gpnum.kernels", "Kernel"),
                        ("gpnum.checkpoint", "load")):
        cfg = json.loads(str(files["config"]))
        cfg["kernel"] = {"module": module, "class": cls, "settings": {}}
        np.savez(tmp_path / "evil.npz", **{**files, "config": np.array(json.dumps(cfg))})
        with pytest.raises(ValueError, match=f"names {module}.{cls}, which is not one of gpnum"):
            gpnum.load(tmp_path / "evil.npz")


def test_a_checkpoint_naming_a_foreign_model_is_refused_without_importing_it(tmp_path,
                                                                             monkeypatch):
    """The model's name is looked up in gpnum's allow-list; the named module is never imported."""
    import sys

    probe = tmp_path / "gpnum_checkpoint_probe.py"
    probe.write_text("IMPORTED = True\nclass SVGP:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = _model(_kernel("ard", np, np.float64, "cpu"),
                   _likelihood("gaussian", np, np.float64, "cpu"), "cholesky",
                   B.namespace_by_name("numpy"), np.float64, "cpu")
    gpnum.save(model, tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as f:
        files = dict(f)
    for name in ("gpnum_checkpoint_probe.SVGP", "gpnum_checkpoint_probe", "Parameterised"):
        cfg = json.loads(str(files["config"]))
        cfg["model"] = name
        cfg["kernel"]["module"] = "gpnum_checkpoint_probe"
        np.savez(tmp_path / "evil.npz", **{**files, "config": np.array(json.dumps(cfg))})
        with pytest.raises(ValueError, match=f"names the model '{name}', which is not one of"):
            gpnum.load(tmp_path / "evil.npz")
    assert "gpnum_checkpoint_probe" not in sys.modules


def test_save_refuses_a_model_it_could_not_rebuild(tmp_path):
    class MySVGP(gpnum.SVGP):
        pass

    model = _model(_kernel("ard", np, np.float64, "cpu"),
                   _likelihood("gaussian", np, np.float64, "cpu"), "cholesky",
                   B.namespace_by_name("numpy"), np.float64, "cpu")
    model.__class__ = MySVGP
    with pytest.raises(TypeError, match="MySVGP is not one of gpnum's models"):
        gpnum.save(model, tmp_path / "x.npz")


def test_version_1_checkpoints_still_load(tmp_path):
    """A file in the first format (SVGP settings at the top level, no model name) loads."""
    model = _model(_kernel("ard", np, np.float64, "cpu"),
                   _likelihood("studentt", np, np.float64, "cpu"), "ciq",
                   B.namespace_by_name("numpy"), np.float64, "cpu")
    _randomise(model, seed=5)
    gpnum.save(model, tmp_path / "v2.npz")
    with np.load(tmp_path / "v2.npz") as f:
        files = dict(f)
    cfg = json.loads(str(files["config"]))
    v1 = {k: v for k, v in cfg.items() if k not in ("model", "settings")}
    v1.update(cfg["settings"], format_version=1)
    np.savez(tmp_path / "v1.npz", **{**files, "config": np.array(json.dumps(v1))})
    _assert_round_trip(gpnum.load(tmp_path / "v1.npz"), tmp_path / "again.npz",
                       B.namespace_by_name("numpy"), "cpu")
    np.testing.assert_array_equal(B.to_numpy(gpnum.load(tmp_path / "v1.npz").predict_f(
        np.ones((2, D)))[0]), B.to_numpy(model.predict_f(np.ones((2, D)))[0]))


@pytest.mark.parametrize("which", ["svgp-ciq-natural", "gpr", "sgpr"])
def test_config_round_trips_through_from_config(which):
    """config() and data() rebuild an equal model (same config, same objective)."""
    xp = B.namespace_by_name("numpy")
    rng = np.random.default_rng(6)
    X, y = rng.standard_normal((30, D)), rng.standard_normal(30)
    kern = _kernel("ard", xp, np.float64, "cpu")
    lik = _likelihood("gaussian", xp, np.float64, "cpu")
    if which == "gpr":
        model = gpnum.GPR(kern, lik, X, y, jitter=1e-5)
    elif which == "sgpr":
        model = gpnum.SGPR(kern, lik, X, y, X[:6], jitter=1e-5)
    else:
        model = _model(kern, lik, "ciq", xp, np.float64, "cpu")
        model.ciq_options.update(num_quad=20, rtol=1e-9)
        model.to_natural()
    cfg = model.config()
    assert json.loads(json.dumps(cfg)) == cfg  # JSON-able as it is
    own = {k: v for k, v in model.parameters().items() if "." not in k}
    again = type(model).from_config(kern, lik, own, cfg, model.data())
    again.set_parameters(own)
    assert again.config() == cfg
    if which == "svgp-ciq-natural":
        assert again.variational_form == "natural"
        np.testing.assert_array_equal(B.to_numpy(again.predict_f(X)[0]),
                                      B.to_numpy(model.predict_f(X)[0]))
    else:
        assert float(again.objective_and_grad()[0]) == float(model.objective_and_grad()[0])


def test_a_checkpoint_written_before_the_models_moved_still_loads():
    # Written by gpnum 0.1 (models in gpnum.variational) with its own predictions beside it.
    import pathlib
    here = pathlib.Path(__file__).parent / "data"
    model = gpnum.load(str(here / "svgp_written_by_gpnum_0_1_variational.npz"))
    ref = np.load(here / "svgp_written_by_gpnum_0_1_variational_expected.npz")
    mu, var = model.predict_f(model.xp.asarray(ref["X"]))
    np.testing.assert_allclose(np.asarray(mu), ref["mu"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(var), ref["var"], rtol=1e-10, atol=1e-12)
    assert type(model) is gpnum.SVGP and type(model).__module__ == "gpnum.models._svgp"
