"""The stationary kernels' blocked paths: the gram matrix of one set built from its upper block
rows (mirrored below the diagonal), and the backward pass against a low-rank cotangent
``U V^T`` in blocks of rows (``vjp.low_rank``), against dense NumPy references and finite
differences. Tiny block sizes force many uneven blocks on small problems."""

import numpy as np
import pytest
from gradcheck import check_grad
from test_kernels_reference import SPEC_NAMES, build, kernel_specs, ref_gram, spec_params, spec_with

import gpnum.kernels._stationary as stationary
from gpnum import backend as B
from gpnum.errors import ShapeError, check_finite
from gpnum.kernels._distance import sqdist_upper_blocks


@pytest.fixture
def small_blocks(monkeypatch):
    # 40 elements a block, at least 2 rows: 23 points give block rows of 2 to 13 rows
    monkeypatch.setattr(stationary, "_BLOCK_ELEMENTS", 40)
    monkeypatch.setattr(stationary, "_MIN_BLOCK_ROWS", 2)


def _np(v):
    return np.asarray(B.to_numpy(v), dtype=np.float64)


def _points(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[5] = X[17]  # a coincident pair in different blocks
    X[1] = X[0]   # and one inside the first diagonal tile
    return X


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_blocked_gram_of_one_set_matches_reference_and_is_exactly_symmetric(
        name, xp, dtype, device, to_xp, small_blocks):
    f32 = dtype == xp.float32
    for d in (3, 6):  # exact differences, then the centred expansion
        spec = kernel_specs(d)[name]
        k = build(spec, xp, dtype, device)
        X = _points(23, d, seed=d)
        ref = ref_gram(spec, X, X)
        for K in (k.gram(to_xp(X)), k.gram_and_vjp(to_xp(X))[0]):
            Kh = _np(K)
            assert np.array_equal(Kh, Kh.T), "gram(X) must be exactly symmetric"
            np.testing.assert_allclose(Kh, ref, rtol=1e-4 if f32 else 1e-10,
                                       atol=(2e-5 if f32 else 1e-13) * np.max(np.abs(ref)))


@pytest.mark.parametrize("case", ["exact", "expansion", "dominant", "far"])
def test_sqdist_upper_blocks_mirror_to_the_exact_distances(case):
    rng = np.random.default_rng(3)
    d = 3 if case == "exact" else 7
    X = rng.normal(size=(31, d))
    X[9] = X[20]
    if case == "dominant":
        X[:, 2] *= 1e5  # one column dwarfs the others: formed exactly, the rest expanded
    if case == "far":
        X += 1e3  # far from the origin: centring keeps the expansion accurate
    ref = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    R = np.full_like(ref, np.nan)
    for i0, i1, r2 in sqdist_upper_blocks(X, block_elements=50, min_rows=3):
        assert r2.shape == (i1 - i0, 31 - i0)
        R[i0:i1, i0:] = r2
        R[i1:, i0:i1] = r2[:, i1 - i0:].T
    assert np.array_equal(R, R.T) and np.all(np.diag(R) == 0.0) and np.all(R >= 0.0)
    assert R[9, 20] == 0.0
    far = ref > 1e-2 * np.max(ref) ** 0.5
    np.testing.assert_allclose(R[far], ref[far], rtol=1e-9)


def _check_low_rank(k, spec, X1, X2, U, V, tag):
    K, vjp = k.gram_and_vjp(X1, X2)
    out = vjp.low_rank(U, V)
    G = U @ V.T
    Xb = X1 if X2 is None else X2
    for pname, value in spec_params(spec).items():
        check_grad(lambda v, pname=pname: np.sum(G * ref_gram(spec_with(spec, {pname: v}), X1, Xb)), value,
                   _np(out["params"][pname]), name=f"{tag} {pname}")
    if spec[0] == "Matern12":
        return  # inputs: not differentiable at the coincident pairs (test_kernels_grad)
    if X2 is None:
        assert out["X2"] is None
        check_grad(lambda x: np.sum(G * ref_gram(spec, x, x)), X1, _np(out["X1"]), name=tag)
    else:
        check_grad(lambda x: np.sum(G * ref_gram(spec, x, X2)), X1, _np(out["X1"]), name=tag)
        check_grad(lambda x: np.sum(G * ref_gram(spec, X1, x)), X2, _np(out["X2"]), name=tag)


@pytest.mark.parametrize("d", [3, 6])
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_low_rank_vjp_matches_finite_differences(name, d, small_blocks):
    spec = kernel_specs(d)[name]
    k = build(spec, dtype="float64")
    rng = np.random.default_rng(11)
    X1 = _points(23, d, seed=1)
    X2 = rng.normal(size=(9, d))
    X2[4] = X1[7]
    U, V, V2 = rng.normal(size=(23, 4)), rng.normal(size=(23, 4)), rng.normal(size=(9, 4))
    _check_low_rank(k, spec, X1, None, U, V, f"{name} one set")
    _check_low_rank(k, spec, X1, X2, U, V2, f"{name} two sets")


@pytest.mark.parametrize("name", ["RBF", "Matern12-ARD", "Matern32-ARD", "Sum"])
def test_low_rank_vjp_on_every_backend(name, xp, dtype, device, to_xp, small_blocks):
    d = 6
    spec = kernel_specs(d)[name]
    k = build(spec, xp, dtype, device)
    rng = np.random.default_rng(2)
    X = _points(23, d, seed=2)
    U, V = rng.normal(size=(23, 3)), rng.normal(size=(23, 3))
    G = U @ V.T
    out = k.gram_and_vjp(to_xp(X))[1].low_rank(to_xp(U), to_xp(V))
    f32 = dtype == xp.float32
    for pname, value in spec_params(spec).items():
        got = out["params"][pname]
        assert got.dtype == dtype and B.device_of(got) == device
        if f32:  # against the float64 finite differences, at float32's accuracy
            from gradcheck import numerical_grad, relative_error
            want = numerical_grad(lambda v, pname=pname: np.sum(G * ref_gram(spec_with(spec, {pname: v}), X, X)),
                                  value)
            assert relative_error(_np(got), want) < 1e-3, pname
        else:
            check_grad(lambda v, pname=pname: np.sum(G * ref_gram(spec_with(spec, {pname: v}), X, X)), value,
                       _np(got), name=f"{name} {pname}")


def test_low_rank_vjp_refuses_bad_factors():
    k = build(kernel_specs(3)["Matern32-ARD"], dtype="float64")
    X = _points(23, 3, seed=0)
    _, vjp = k.gram_and_vjp(X)
    U = np.ones((23, 2))
    with pytest.raises(ShapeError, match="V"):
        vjp.low_rank(U, np.ones((22, 2)))
    with pytest.raises(ShapeError, match="same number of columns"):
        vjp.low_rank(U, np.ones((23, 3)))
    bad = U.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="U: expected finite values, got 1 NaN"):
        vjp.low_rank(bad, U)


def test_check_finite_catches_nan_and_inf_and_not_an_overflowing_sum():
    x = np.full((50, 40), 1e308)  # finite, but its sum overflows to inf
    check_finite(np, x, "x")
    for bad, what in ((np.nan, "1 NaN"), (np.inf, "infinite"), (-np.inf, "infinite")):
        y = np.ones((50, 40))
        y[7, 3] = bad
        with pytest.raises(ValueError, match=f"y: expected finite values, got {what}"):
            check_finite(np, y, "y")
    z = np.full((50, 40), 1e308)
    z[0, 0] = np.nan
    with pytest.raises(ValueError, match="1 NaN"):
        check_finite(np, z, "z")


@pytest.mark.parametrize("path", ["gram_vjp two sets", "gram_vjp one set", "low_rank one set",
                                  "low_rank two sets"])
def test_lengthscale_gradient_of_a_dominant_column_is_exact(path, small_blocks):
    # One ARD lengthscale far below the others makes its column dominate the distances;
    # sqdist forms such columns exactly, and so must the backward pass: through the GEMM
    # expansion their squared differences (and that lengthscale's gradient) are rounding noise.
    # (The CLI's L-BFGS GPR on energy stopped "ABNORMAL" on such a column before.)
    rng = np.random.default_rng(4)
    d = 6
    X = rng.normal(size=(23, d)) + 5.0
    X[:, 2] = rng.choice([0.0, 0.5, 1.0], size=23)  # a categorical column, as in energy
    X2 = X[::2].copy()
    X2[:, [0, 1, 3, 4, 5]] += 0.3 * rng.normal(size=(12, 5))
    ell = np.linspace(0.8, 1.6, d)
    ell[2] = 1e-4  # pairs that differ in column 2 are uncorrelated, the others do not see it
    spec = ("Matern52", {}, {"lengthscale": ell, "variance": 1.3})
    k = build(spec, dtype="float64")
    U, V, V2 = rng.normal(size=(23, 3)), rng.normal(size=(23, 3)), rng.normal(size=(12, 3))
    Xb = X if "one set" in path else X2
    G = U @ (V if "one set" in path else V2).T
    if path.startswith("gram_vjp"):
        out = k.gram_vjp(G, X, None if "one set" in path else X2)
    else:
        _, vjp = k.gram_and_vjp(X, None if "one set" in path else X2)
        out = vjp.low_rank(U, V if "one set" in path else V2)
    assert np.any(np.abs(ref_gram(spec, X, Xb)) > 1e-3 * 1.3 * (1 - np.eye(23, Xb.shape[0])))
    check_grad(lambda v: np.sum(G * ref_gram(spec_with(spec, {"lengthscale": v}), X, Xb)), ell,
               _np(out["params"]["lengthscale"]), name=path)
