"""Checkpoint round trips of the everyday kernels (children, own parameters, active_dims), and
kernels built from expressions."""

import json

import numpy as np
import pytest
from gradcheck import check_grad
from kernel_refs_everyday import NAMES, build

import gpnum
from gpnum import backend as B
from gpnum import kernels as K


def _randomised(model, seed):
    rng = np.random.default_rng(seed)
    new = {}
    for k, v in model.unconstrained().items():
        a = B.to_numpy(v)
        new[k] = B.asarray(a + 0.3 * rng.standard_normal(a.shape), dtype=model.dtype,
                           xp=model.xp, device=B.device_of(v))
    model.set_unconstrained(new)
    return model


def _round_trip(kernel, X, tmp_path, xp, device):
    rng = np.random.default_rng(0)
    conv = lambda a: B.asarray(a, dtype=xp.float64, xp=xp, device=device)  # noqa: E731
    y = rng.normal(size=X.shape[0])
    model = _randomised(gpnum.GPR(kernel, gpnum.likelihoods.Gaussian(
        0.2, xp=xp, dtype=xp.float64, device=device), conv(X), conv(y)), 1)
    Xs = conv(X[::2] + 0.1 * (np.arange(X.shape[1]) == 0))
    before = model.predict_f(Xs)
    path = tmp_path / "k.npz"
    gpnum.save(model, path)
    loaded = gpnum.load(path, xp=xp, device=device)
    assert repr(loaded.kernel) == repr(model.kernel)
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(B.to_numpy(loaded.parameters()[k]), B.to_numpy(v), k)
    for a, b in zip(before, loaded.predict_f(Xs), strict=True):
        np.testing.assert_allclose(B.to_numpy(b), B.to_numpy(a), rtol=1e-13, atol=1e-13)
    return path


@pytest.mark.parametrize("name", NAMES)
def test_everyday_kernels_round_trip(name, tmp_path, xp, device):
    X = np.random.default_rng(2).normal(size=(12, 2))
    _round_trip(build(name, xp, xp.float64, device), X, tmp_path, xp, device)


def test_coregion_and_expression_kernels_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    X = np.c_[rng.normal(size=12), np.arange(12) % 3]
    k = K.Coregion(3, 2, active_dims=[1]) * K.Matern32(0.7, active_dims=[0])
    path = _round_trip(k, X, tmp_path, B.namespace_by_name("numpy"), "cpu")
    with np.load(path) as f:
        spec = json.loads(str(f["config"]))["kernel"]
    assert spec["children"][0]["settings"]["active_dims"] == [1]
    Xe = rng.normal(size=(12, 2))
    ke = K.from_expression("rbf + rbf*periodic + rq + white", input_dim=2, ard=True,
                           dtype="float64")
    _round_trip(ke, Xe, tmp_path, B.namespace_by_name("numpy"), "cpu")


def test_old_sum_spec_without_settings_still_builds():
    from gpnum.models import kernel_from_spec

    spec = {"module": "gpnum.kernels", "class": "Sum", "children": [
        {"module": "gpnum.kernels", "class": "RBF", "settings": {}},
        {"module": "gpnum.kernels", "class": "Matern12", "settings": {}}]}
    params = {"0.lengthscale": np.array([0.5, 2.0]), "0.variance": np.array(1.5),
              "1.lengthscale": np.array(0.3), "1.variance": np.array(0.7)}
    k = kernel_from_spec(spec, params, xp=B.namespace_by_name("numpy"), dtype=np.float64)
    X = np.random.default_rng(4).normal(size=(3, 2))
    np.testing.assert_allclose(k(X), K.RBF([0.5, 2.0], 1.5)(X) + K.Matern12(0.3, 0.7)(X),
                               rtol=1e-15)


def test_from_expression_structure_and_errors():
    k = K.from_expression("RBF + rbf*periodic + (linear + constant) * matern32 + white",
                          input_dim=3, ard=True, dtype="float64")
    assert isinstance(k, K.Sum) and len(k.kernels) == 4
    assert isinstance(k.kernels[1], K.Product) and isinstance(k.kernels[1].kernels[1], K.Periodic)
    assert isinstance(k.kernels[2].kernels[0], K.Sum)
    assert k.parameters()["1.1.period"].shape == (3,)
    assert k.parameters()["2.0.0.variance"].shape == (3,)  # ARD linear
    X = np.random.default_rng(5).normal(size=(6, 3))
    ref = (K.RBF(np.ones(3))(X) + K.RBF(np.ones(3))(X) * K.Periodic(K.RBF(np.ones(3)),
                                                                     np.ones(3))(X)
           + (X @ X.T + 1.0) * K.Matern32(np.ones(3))(X) + np.eye(6))
    np.testing.assert_allclose(k(X), ref, rtol=1e-13)
    assert isinstance(K.from_expression("exponential", input_dim=1), K.Matern12)
    for text, msg in [("rbf + foo", r"unknown kernel name 'foo' at position 6; known names: rbf"),
                      ("rbf +", r"expected a kernel name or '\(', got the end"),
                      ("(rbf + white", r"expected '\)' to close the '\(' at position 0"),
                      ("rbf white", r"expected '\+', '\*' or the end, got 'white' at position 4"),
                      ("rbf % white", r"unexpected character '%' at position 4"),
                      ("  ", "empty expression")]:
        with pytest.raises(ValueError, match=msg):
            K.from_expression(text, input_dim=1)


def test_expression_kernel_gradient_through_gpr():
    """The LML gradient of a GPR with an expression kernel, against finite differences."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(15, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=15)
    k = K.from_expression("rbf*periodic + rq + linear + white", input_dim=2, ard=True,
                          dtype="float64")
    model = _randomised(gpnum.GPR(k, gpnum.likelihoods.Gaussian(0.1, dtype="float64"), X, y), 7)
    _, grads = model.log_marginal_likelihood_and_grad()
    base = {n: B.to_numpy(v).copy() for n, v in model.parameters().items()}
    for name in base:
        if not name.startswith("kernel."):
            continue

        def lml(v, name=name):
            model.set_parameters({**base, name: v})
            return float(model.log_marginal_likelihood())

        check_grad(lml, base[name], B.to_numpy(grads[name]), name=name)
        model.set_parameters(base)


def test_from_expression_starts_from_the_data(backend):
    """Starting values read off the data follow the rule of the docstring, computed here from
    the data with NumPy: the terms with a lengthscale share 3 var(y) / T in proportion to their
    lengthscales over the columns' ranges (geometric mean over columns), the linear term
    var(y) / T, white a tenth of the smallest; lengthscales geometric from each column's range
    down to four median gaps; the first factor of a product carrying the variance."""
    rng = np.random.default_rng(11)
    X = np.column_stack([np.sort(rng.uniform(0.0, 40.0, 60)), rng.normal(size=60)])
    y = 3.0 * np.sin(X[:, 0]) + rng.normal(size=60)
    xp = backend.xp
    Xb = B.asarray(X, dtype=xp.float64, xp=xp, device=backend.device)
    yb = B.asarray(y, dtype=xp.float64, xp=xp, device=backend.device)
    k = K.from_expression("rbf + rbf*periodic + rq + linear + white", input_dim=2, ard=True,
                          X=Xb, y=yb, xp=xp, dtype=xp.float64, device=backend.device)
    p = {n: B.to_numpy(v) for n, v in k.parameters().items()}
    v = y.var() / 4  # four terms besides white
    span = X.max(0) - X.min(0)
    gap = 4 * np.array([np.median(np.diff(np.unique(c))) for c in X.T])
    ratios = np.array([np.exp(np.mean(np.log((gap / span) ** (j / 2)))) for j in range(3)])
    expected = 3 * v * ratios / ratios.sum()
    for name, want in zip(("0.variance", "1.0.variance", "2.variance"), expected, strict=True):
        np.testing.assert_allclose(p[name], want, rtol=1e-12)
    assert expected[0] > expected[1] > expected[2]
    np.testing.assert_allclose(p["1.1.base.variance"], 1.0)
    np.testing.assert_allclose(p["4.variance"], 0.1 * expected[2], rtol=1e-12)
    np.testing.assert_allclose(p["3.variance"], v / (2 * np.mean(X**2, axis=0)), rtol=1e-12)
    for j, name in enumerate(("0.lengthscale", "1.0.lengthscale", "2.lengthscale")):
        np.testing.assert_allclose(p[name], span * (gap / span) ** (j / 2), rtol=1e-12)
    np.testing.assert_allclose(p["1.1.period"], 1.0)
    # without data: every parameter at 1, as before
    k1 = K.from_expression("rbf + rbf*periodic + rq + linear + white", input_dim=2, ard=True,
                           xp=xp, dtype=xp.float64, device=backend.device)
    assert all(np.all(B.to_numpy(a) == 1.0) for a in k1.parameters().values())
    one = K.from_expression("matern52", input_dim=1, X=Xb[:, :1], xp=xp, dtype=xp.float64,
                            device=backend.device)
    np.testing.assert_allclose(B.to_numpy(one.parameters()["lengthscale"]), 0.2 * span[0],
                               rtol=1e-12)
    with pytest.raises(ValueError, match=r"X: expected an \(n, 2\) array"):
        K.from_expression("rbf", input_dim=2, X=X[:, :1])
    with pytest.raises(ValueError, match="X: contains NaN"):
        K.from_expression("rbf", input_dim=2, X=np.where(X > 39, np.nan, X))


def test_expression_terms_of_one_kind_part_with_data_starts():
    """Two RBF terms that start equal get equal gradients (so a gradient method never parts
    them); started from the data they differ and their LML gradients differ."""
    rng = np.random.default_rng(12)
    X = np.sort(rng.uniform(0.0, 10.0, (40, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.3 * np.sin(7 * X[:, 0]) + 0.05 * rng.normal(size=40)
    lik = gpnum.likelihoods.Gaussian(0.01, dtype="float64")
    for kw, equal in (({}, True), ({"X": X, "y": y}, False)):
        k = K.from_expression("rbf + rbf", input_dim=1, dtype="float64", **kw)
        _, g = gpnum.GPR(k, lik, X, y).log_marginal_likelihood_and_grad()
        same = np.isclose(float(g["kernel.0.lengthscale"]), float(g["kernel.1.lengthscale"]),
                          rtol=1e-12)
        assert same == equal


def test_build_model_starts_full_batch_kernels_from_the_data():
    """build_model's GPR and SGPR kernels start from the data's scales (from_expression's
    rule, recomputed here); an SVGP's from every parameter at 1 (the default recipe's start)."""
    from gpnum.models import build_model

    rng = np.random.default_rng(13)
    X = rng.uniform(0.0, 10.0, (30, 2))
    y = 5.0 * np.sin(X[:, 0]) + rng.normal(size=30)
    gpr = build_model(X, y, model="gpr", kernel="rbf")
    p = {k: B.to_numpy(v) for k, v in gpr.kernel.parameters().items()}
    np.testing.assert_allclose(p["variance"], y.var(), rtol=1e-12)
    np.testing.assert_allclose(p["lengthscale"], 0.2 * (X.max(0) - X.min(0)), rtol=1e-12)
    svgp = build_model(X, y, model="svgp", kernel="rbf", num_inducing=5)
    assert all(np.all(B.to_numpy(v) == 1.0) for v in svgp.kernel.parameters().values())
