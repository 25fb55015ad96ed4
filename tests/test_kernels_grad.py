"""Kernel gradients against central finite differences of the dense NumPy references."""

import numpy as np
import pytest
from gradcheck import check_grad, numerical_grad, relative_error
from test_kernels_reference import SPEC_NAMES, build, kernel_specs, ref_gram, spec_params, spec_with

from gpnum import backend as B


def _problem(d, seed=0):
    rng = np.random.default_rng(seed)
    X1 = rng.normal(size=(5, d))
    X2 = rng.normal(size=(4, d))
    X2[1] = X1[3]  # coincident pair
    G = rng.normal(size=(5, 4))
    Gs = rng.normal(size=(5, 5))  # not symmetric: both row and column roles are exercised
    g = rng.normal(size=5)
    return X1, X2, G, Gs, g


def _np(v):
    return np.asarray(B.to_numpy(v), dtype=np.float64)


def _coincident_mask(X1, X2):
    return np.all(X1[:, None, :] == X2[None, :, :], axis=-1)


@pytest.mark.parametrize("d", [3, 6])
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_gram_vjp_matches_finite_differences(name, d):
    spec = kernel_specs(d)[name]
    k = build(spec, dtype="float64")
    X1, X2, G, Gs, _ = _problem(d)
    out = k.gram_vjp(G, X1, X2)
    assert set(out) == {"params", "X1", "X2"}
    # hyper-parameters (finite differences of the reference, coincident pair included)
    flat = spec_params(spec)
    assert list(out["params"]) == list(flat)
    for pname, value in flat.items():
        grad = _np(out["params"][pname])
        assert grad.shape == value.shape, pname
        check_grad(lambda v, pname=pname: np.sum(G * ref_gram(spec_with(spec, {pname: v}), X1, X2)), value,
                   grad, name=f"{name} {pname}")
    # inputs: Matern-1/2 is not differentiable at the coincident pair, where gpnum takes the zero
    # subgradient, i.e. the same gradient as with that pair's cotangent removed.
    Gfd = G * ~_coincident_mask(X1, X2) if spec[0] == "Matern12" else G
    check_grad(lambda x: np.sum(Gfd * ref_gram(spec, x, X2)), X1, _np(out["X1"]), name="X1")
    check_grad(lambda x: np.sum(Gfd * ref_gram(spec, X1, x)), X2, _np(out["X2"]), name="X2")
    # one set of points: "X1" holds both roles, "X2" is None
    same = k.gram_vjp(Gs, X1)
    assert same["X2"] is None
    check_grad(lambda x: np.sum(Gs * ref_gram(spec, x, x)), X1, _np(same["X1"]), name="X")
    for pname, value in flat.items():
        check_grad(lambda v, pname=pname: np.sum(Gs * ref_gram(spec_with(spec, {pname: v}), X1, X1)), value,
                   _np(same["params"][pname]), name=f"{name} {pname} (same)")


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_params_only_backward_matches_finite_differences(name, d):
    """``vjp.params(G)`` (parameters only, the input gradients' work skipped where a kernel
    can) against finite differences of the reference, with two sets and with one (symmetric
    cotangent, as exact GP training passes)."""
    spec = kernel_specs(d)[name]
    k = build(spec, dtype="float64")
    X1, X2, G, Gs, _ = _problem(d, seed=3)
    Gs = Gs + Gs.T
    flat = spec_params(spec)
    for Xb, Gc, label in ((X2, G, "two sets"), (None, Gs, "one set")):
        _, vjp = k.gram_and_vjp(X1, Xb)
        got = vjp.params(Gc)
        assert list(got) == list(flat)
        for pname, value in flat.items():
            check_grad(lambda v, pname=pname, Xb=Xb, Gc=Gc: np.sum(
                Gc * ref_gram(spec_with(spec, {pname: v}), X1, X1 if Xb is None else Xb)),
                value, _np(got[pname]), name=f"{name} {pname} ({label})")


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_diag_vjp_matches_finite_differences(name):
    d = 3
    spec = kernel_specs(d)[name]
    k = build(spec, dtype="float64")
    X1, _, _, _, g = _problem(d, seed=3)
    out = k.diag_vjp(g, X1)
    assert set(out) == {"params", "X"}
    for pname, value in spec_params(spec).items():
        check_grad(lambda v, pname=pname: np.sum(g * np.diag(ref_gram(spec_with(spec, {pname: v}), X1, X1))),
                   value, _np(out["params"][pname]), name=pname)
    gX = _np(out["X"])
    if spec[0] in ("RBF", "Matern12", "Matern32", "Matern52"):
        assert np.all(gX == 0.0)
    else:
        check_grad(lambda x: np.sum(g * np.diag(ref_gram(spec, x, x))), X1, gX, name="X")


@pytest.mark.parametrize("d", [2, 6])
def test_smooth_kernels_differentiable_at_coincident_points(d):
    # All rows of X2 coincide with rows of X1: every pair the finite differences move is at r = 0.
    rng = np.random.default_rng(11)
    X1 = rng.normal(size=(4, d))
    X2 = X1[[2, 0, 3]].copy()
    G = rng.normal(size=(4, 3))
    for name in ("RBF-ARD", "Matern32-ARD", "Matern52-ARD", "ArcCosine2", "Polynomial3"):
        spec = kernel_specs(d)[name]
        out = build(spec, dtype="float64").gram_vjp(G, X1, X2)
        check_grad(lambda x, spec=spec: np.sum(G * ref_gram(spec, x, X2)), X1, _np(out["X1"]), name=name)
        check_grad(lambda x, spec=spec: np.sum(G * ref_gram(spec, X1, x)), X2, _np(out["X2"]), name=name)


@pytest.mark.parametrize("d", [2, 6])
def test_matern12_zero_subgradient_at_duplicates(d):
    # Duplicate rows in one set: pairs (0, 3) and (3, 0) are coincident off the diagonal.
    rng = np.random.default_rng(4)
    X = rng.normal(size=(5, d))
    X[3] = X[0]
    Gs = rng.normal(size=(5, 5))
    spec = kernel_specs(d)["Matern12-ARD"]
    out = build(spec, dtype="float64").gram_vjp(Gs, X)
    Gfd = Gs * ~(_coincident_mask(X, X) & ~np.eye(5, dtype=bool))
    assert np.all(np.isfinite(_np(out["X1"])))
    check_grad(lambda x: np.sum(Gfd * ref_gram(spec, x, x)), X, _np(out["X1"]))
    for pname, value in spec_params(spec).items():  # hyper-parameters: exact, duplicates or not
        check_grad(lambda v, pname=pname: np.sum(Gs * ref_gram(spec_with(spec, {pname: v}), X, X)), value,
                   _np(out["params"][pname]), name=pname)


_CASES = ["RBF-ARD", "Matern12", "Matern52", "Polynomial3", "ArcCosine3-layers", "Sum", "Product"]


@pytest.mark.parametrize("name", _CASES)
def test_gradients_on_every_backend(name, xp, dtype, device, to_xp):
    """Every backend/dtype against finite differences of the float64 reference."""
    d = 6 if name in ("Sum", "Matern12") else 3
    spec = kernel_specs(d)[name]
    X1, X2, G, Gs, g = _problem(d, seed=7)
    X2[1] += 0.5  # keep away from the Matern-1/2 kink: float32 is compared at 1e-3 below
    k = build(spec, xp, dtype, device)
    out = k.gram_vjp(to_xp(G), to_xp(X1), to_xp(X2))
    same = k.gram_vjp(to_xp(Gs), to_xp(X1))
    dg = k.diag_vjp(to_xp(g), to_xp(X1))
    rtol = 1e-3 if dtype == xp.float32 else 1e-6
    for arr in (out["X1"], out["X2"], same["X1"], dg["X"], *out["params"].values()):
        assert arr.dtype == dtype and B.device_of(arr) == device
    pairs = [(out["X1"], numerical_grad(lambda x: np.sum(G * ref_gram(spec, x, X2)), X1)),
             (out["X2"], numerical_grad(lambda x: np.sum(G * ref_gram(spec, X1, x)), X2)),
             (same["X1"], numerical_grad(lambda x: np.sum(Gs * ref_gram(spec, x, x)), X1))]
    for pname, value in spec_params(spec).items():
        pairs.append((out["params"][pname], numerical_grad(
            lambda v, pname=pname: np.sum(G * ref_gram(spec_with(spec, {pname: v}), X1, X2)), value)))
        pairs.append((dg["params"][pname], numerical_grad(
            lambda v, pname=pname: np.sum(g * np.diag(ref_gram(spec_with(spec, {pname: v}), X1, X1))), value)))
    for got, want in pairs:
        assert tuple(got.shape) == want.shape
        assert relative_error(_np(got), want) < rtol


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_gram_and_vjp_matches_reference_and_finite_differences(name):
    d = 3
    spec = kernel_specs(d)[name]
    k = build(spec, dtype="float64")
    X1, X2, G, Gs, _ = _problem(d, seed=4)
    for x2, cot in ((X2, G), (None, Gs)):
        K, vjp = k.gram_and_vjp(X1, x2)
        np.testing.assert_allclose(_np(K), ref_gram(spec, X1, X1 if x2 is None else x2),
                                   rtol=1e-12, atol=1e-14)
        out = vjp(cot)
        for pname, value in spec_params(spec).items():
            check_grad(lambda v, cot=cot, pname=pname, x2=x2: np.sum(cot * ref_gram(spec_with(spec, {pname: v}), X1,
                                                       X1 if x2 is None else x2)),
                       value, _np(out["params"][pname]), name=f"{name} {pname}")
        ref = k.gram_vjp(cot, X1, x2)  # same numbers as the separate backward pass
        np.testing.assert_allclose(_np(out["X1"]), _np(ref["X1"]), rtol=1e-12, atol=1e-14)
        assert (out["X2"] is None) == (x2 is None)
    with pytest.raises(Exception, match="G"):
        vjp(np.ones((2, 2)))
