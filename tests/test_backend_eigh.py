"""gpnum.backend.eigh and outer_self against NumPy references on every backend."""

import numpy as np
import pytest

from gpnum import backend as B


def _symmetric(n, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    return a + a.T


@pytest.mark.parametrize("n", [1, 6, 120])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_eigh_against_numpy(to_xp, tol, n, layout):
    A = _symmetric(n, 3)
    if layout == "strided":
        A = _symmetric(2 * n, 3)[::2, ::2]
    elif layout == "F":
        A = np.asfortranarray(A)
    w, V = B.eigh(to_xp(A))
    w, V = B.to_numpy(w), B.to_numpy(V)
    scale = np.abs(A).max()
    np.testing.assert_allclose(w, np.linalg.eigvalsh(A), rtol=0, atol=50 * tol * scale)
    np.testing.assert_allclose((V * w) @ V.T, A, rtol=0, atol=50 * tol * scale * n)
    np.testing.assert_allclose(V.T @ V, np.eye(n), rtol=0, atol=50 * tol * n)


def test_eigh_reads_the_lower_triangle_on_numpy():
    # LAPACK reads one triangle: what lies above the diagonal must not matter on NumPy
    A = _symmetric(50, 4)
    junk = A + np.triu(np.full((50, 50), 7.0), 1)
    w, _ = B.eigh(junk)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(A), rtol=0, atol=1e-10 * np.abs(A).max())


@pytest.mark.parametrize("shape", [(5, 3), (300, 40), (200, 260)])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("pool", ["scipy", "numpy"])
def test_outer_self_against_numpy(to_xp, tol, shape, layout, pool):
    n, k = shape
    rng = np.random.default_rng(5)
    a = rng.standard_normal((n, 2 * k))
    a = a[:, ::2] if layout == "strided" else np.array(a[:, :k], order=layout)
    with B.blas_pool(pool):
        c = B.to_numpy(B.outer_self(to_xp(a)))
    ref = a @ a.T
    assert c.shape == (n, n)
    np.testing.assert_allclose(c, ref, rtol=0, atol=50 * tol * np.abs(ref).max())
    np.testing.assert_array_equal(c, c.T)


@pytest.mark.parametrize("n", [1, 6, 120])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("kept", ["none", "some", "all"])
def test_eigh_floor_keeps_the_eigenvectors_above_it(to_xp, tol, n, layout, kept):
    # a spectrum with a wide gap: the eigenvalues in [1, 3] lie above 1e-6 ||A||_F, those in
    # [-1e-9, 1e-9] below it, whatever the rounding
    rng = np.random.default_rng(8)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    large = n if kept == "all" else max(n // 2, 1)
    lam = np.concatenate([rng.uniform(1.0, 3.0, large), rng.uniform(-1e-9, 1e-9, n - large)])
    A = (Q * lam) @ Q.T
    A = 0.5 * (A + A.T)
    if layout == "strided":
        big = np.zeros((2 * n, 2 * n))
        big[::2, ::2] = A
        A = big[::2, ::2]
    elif layout == "F":
        A = np.asfortranarray(A)
    floor = 2.0 if kept == "none" else 1e-6
    w, V = B.eigh(to_xp(A), floor=floor)
    w, V = B.to_numpy(w), B.to_numpy(V)
    r = 0 if kept == "none" else large
    assert w.shape == (n,) and V.shape == (n, r)
    np.testing.assert_allclose(w, np.sort(lam), rtol=0, atol=50 * tol * 3.0)
    np.testing.assert_allclose(A @ V, V * w[n - r:], rtol=0, atol=50 * tol * 3.0 * n)
    np.testing.assert_allclose(V.T @ V, np.eye(r), rtol=0, atol=50 * tol * n)
