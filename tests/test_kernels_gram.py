"""Gram matrices and diagonals against dense NumPy float64 references, on every backend/dtype."""

import numpy as np
import pytest
from test_kernels_reference import SPEC_NAMES, build, kernel_specs, ref_gram

from gpnum import backend as B
from gpnum.kernels._distance import sqdist


def _inputs(d, seed=0):
    rng = np.random.default_rng(seed)
    X1 = rng.normal(size=(7, d))
    X2 = rng.normal(size=(5, d))
    X2[2] = X1[4]  # a coincident pair
    return X1, X2


def _close(got, ref, f32):
    got = B.to_numpy(got).astype(np.float64)
    scale = np.max(np.abs(ref))
    if f32:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5 * scale)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-13 * scale)


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_gram_and_diag_match_reference(name, xp, dtype, device, to_xp):
    f32 = dtype == xp.float32
    for d in (3, 6):  # exact differences, then the centred GEMM expansion
        spec = kernel_specs(d)[name]
        k = build(spec, xp, dtype, device)
        X1, X2 = _inputs(d)
        x1, x2 = to_xp(X1), to_xp(X2)
        K12 = k(x1, x2)
        assert K12.shape == (7, 5) and K12.dtype == dtype and B.device_of(K12) == device
        _close(K12, ref_gram(spec, X1, X2), f32)
        _close(k.gram(x1, x2), ref_gram(spec, X1, X2), f32)
        K11 = k.gram(x1)
        _close(K11, ref_gram(spec, X1, X1), f32)
        K11h = B.to_numpy(K11)
        assert np.array_equal(K11h, K11h.T), "gram(X) must be exactly symmetric"
        dg = k.diag(x1)
        assert dg.shape == (7,) and dg.dtype == dtype
        _close(dg, np.diag(ref_gram(spec, X1, X1)), f32)
        k.gram_vjp(K12, x1, x2)
        k.gram_vjp(K11, x1)
        # the in-place updates touch only the kernels' own temporaries, never the inputs
        np.testing.assert_array_equal(B.to_numpy(x1), X1.astype(B.to_numpy(x1).dtype))
        np.testing.assert_array_equal(B.to_numpy(x2), X2.astype(B.to_numpy(x2).dtype))
        _close(K12, ref_gram(spec, X1, X2), f32)
        np.testing.assert_allclose(B.to_numpy(dg), np.diag(K11h), rtol=1e-12 if not f32 else 1e-6)


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_gram_is_positive_semidefinite(name, xp, dtype, device, to_xp):
    rng = np.random.default_rng(5)
    for d in (2, 6):
        X = rng.normal(size=(40, d))
        X[10] = X[3]   # duplicates make the gram singular: the hardest PSD case
        X[11] = X[3] + 1e-9
        K = B.to_numpy(build(kernel_specs(d)[name], xp, dtype, device).gram(to_xp(X)))
        K = K.astype(np.float64)
        ev = np.linalg.eigvalsh(K)
        bound = 1e-5 if dtype == xp.float32 else 1e-10
        assert ev[0] >= -bound * ev[-1], f"min eigenvalue {ev[0]:.3e}, max {ev[-1]:.3e}"


def test_coincident_points_give_no_nan(xp, dtype, device, to_xp):
    X = np.repeat(np.random.default_rng(1).normal(size=(3, 6)), 2, axis=0)
    for name in SPEC_NAMES:
        for d in (2, 6):
            k = build(kernel_specs(d)[name], xp, dtype, device)
            x = to_xp(X[:, :d])
            for arr in (k(x), k(x, x), k.gram_vjp(k(x), x)["X1"],
                        *k.gram_vjp(k(x, x), x, x)["params"].values(),
                        k.gram_vjp(k(x, x), x, x)["X2"]):
                assert np.all(np.isfinite(B.to_numpy(arr))), name


@pytest.mark.parametrize("d", [3, 6, 40, 300])
def test_sqdist_is_exact_at_coincident_points_and_accurate(d, xp, dtype, device, to_xp):
    rng = np.random.default_rng(d)
    # Far-from-origin data: the uncentred expansion would lose every digit of the small distances.
    X1 = 1e3 + rng.normal(size=(9, d))
    X2 = 1e3 + rng.normal(size=(6, d))
    X2[1] = X1[7]
    X2[4] = X1[2] + 1e-3  # a close pair
    ref = np.sum((X1[:, None, :] - X2[None, :, :]) ** 2, axis=-1)
    f32 = dtype == xp.float32
    for exact in (True, False):
        r2 = B.to_numpy(sqdist(to_xp(X1), to_xp(X2), exact=exact)).astype(np.float64)
        assert r2[7, 1] == 0.0
        assert np.all(r2 >= 0.0)
        far = ref > 1e-2
        np.testing.assert_allclose(r2[far], ref[far], rtol=2e-3 if f32 else 1e-9)
        if not f32:
            np.testing.assert_allclose(r2[2, 4], ref[2, 4], rtol=1e-3 if not exact else 1e-9)
        same = B.to_numpy(sqdist(to_xp(X1), exact=exact))
        assert np.array_equal(same, same.T) and np.all(np.diag(same) == 0.0)


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_coincident_pairs_across_two_sets_match_the_diagonal(name, xp, dtype, device, to_xp):
    # k(X_block, X) as a blocked kernel matrix evaluates it: coincident rows in two different
    # arrays must give k(x, x) to working precision (no sqrt-of-rounding error near t = 0 or r = 0).
    rng = np.random.default_rng(8)
    f32 = dtype == xp.float32
    for d in (3, 6):
        X = rng.normal(size=(30, d))
        k = build(kernel_specs(d)[name], xp, dtype, device)
        x = to_xp(X)
        K = B.to_numpy(k(x, to_xp(X.copy()))).astype(np.float64)
        dg = B.to_numpy(k.diag(x)).astype(np.float64)
        np.testing.assert_allclose(np.diag(K), dg, rtol=2e-6 if f32 else 1e-14)
