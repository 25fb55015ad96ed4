import subprocess
import sys

import numpy as np
import pytest
from gradcheck import check_grad, numerical_grad

import gpnum
from gpnum import backend as B
from gpnum.errors import BackendError, NotPSDError, ShapeError


def _spd(n, seed=0, cond=1e3):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = np.logspace(0, np.log10(cond), n)
    return (Q * w) @ Q.T


# --- namespace switch -------------------------------------------------------------------------

@pytest.mark.parametrize("name,module", [("numpy", "array_api_compat.numpy"),
                                         ("array_api_strict", "array_api_strict"),
                                         ("torch", "array_api_compat.torch")])
def test_namespace_from_environment(monkeypatch, name, module):
    pytest.importorskip(name)
    monkeypatch.setenv("GPNUM_BACKEND", name)
    assert B.namespace().__name__ == module


def test_namespace_default_is_numpy(monkeypatch):
    monkeypatch.delenv("GPNUM_BACKEND", raising=False)
    assert B.namespace().__name__ == "array_api_compat.numpy"


def test_namespace_is_read_lazily(monkeypatch):
    monkeypatch.setenv("GPNUM_BACKEND", "numpy")
    first = B.namespace()
    monkeypatch.setenv("GPNUM_BACKEND", "array_api_strict")
    assert B.namespace() is not first


def test_unknown_backend_raises(monkeypatch):
    monkeypatch.setenv("GPNUM_BACKEND", "nonsense")
    with pytest.raises(BackendError, match="'nonsense' is not a known backend.*numpy, cupy"):
        B.namespace()


def test_cupy_without_gpu_raises(monkeypatch):
    if B._namespace._cupy_usable() is None:
        pytest.skip("a GPU is usable here")
    monkeypatch.setenv("GPNUM_BACKEND", "cupy")
    with pytest.raises(BackendError, match="cupy needs a usable NVIDIA GPU.*GPNUM_BACKEND=numpy"):
        B.namespace()
    # The README's spelling of the extra, from a checkout.
    with pytest.raises(BackendError, match=r'pip install "\.\[cuda\]" from a gpnum checkout'):
        B.namespace()


def test_missing_library_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes "import torch" fail
    monkeypatch.setenv("GPNUM_BACKEND", "torch")
    with pytest.raises(BackendError, match="torch is not installed.*pip install torch"):
        B.namespace()
    with pytest.raises(BackendError, match="whl/cpu.*CPU build"):
        B.namespace()


def test_backend_errors_from_the_command_line():
    for name in ("nonsense", "cupy"):
        if name == "cupy" and B._namespace._cupy_usable() is None:
            continue
        out = subprocess.run([sys.executable, "-c", "import gpnum; gpnum.backend.namespace()"],
                             env={"GPNUM_BACKEND": name, "PATH": ""}, capture_output=True, text=True)
        assert out.returncode != 0
        assert "gpnum.errors.BackendError" in out.stderr


@pytest.mark.parametrize("value,expected", [(None, "float64"), ("float32", "float32"),
                                            ("float64", "float64")])
def test_default_dtype(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("GPNUM_DTYPE", raising=False)
    else:
        monkeypatch.setenv("GPNUM_DTYPE", value)
    xp = B.namespace_by_name("numpy")
    assert B.default_dtype(xp) == getattr(xp, expected)


def test_bad_dtype_raises(monkeypatch):
    monkeypatch.setenv("GPNUM_DTYPE", "float16")
    with pytest.raises(BackendError, match="GPNUM_DTYPE='float16'"):
        B.default_dtype()


# --- namespaces and conversions ---------------------------------------------------------------

def test_get_namespace_follows_inputs(xp, to_xp):
    a = to_xp(np.ones((2, 2)))
    assert B.get_namespace(a, 1.0, None) is xp


def test_get_namespace_rejects_mixing(backend, to_xp):
    if backend.name == "numpy":
        pytest.skip("needs a second library")
    with pytest.raises(TypeError, match="different libraries cannot be mixed"):
        B.get_namespace(to_xp(np.ones(2)), np.ones(2))


def test_same_namespace_dtype_device():
    import array_api_strict as strict

    a = np.zeros((3, 2))
    assert B.same_namespace_dtype_device(a, np.ones((5,)))
    assert not B.same_namespace_dtype_device(a, np.zeros((3, 2), dtype=np.float32))
    on_cpu = strict.asarray(a)
    assert not B.same_namespace_dtype_device(a, on_cpu)
    assert B.same_namespace_dtype_device(on_cpu, strict.zeros((1,), dtype=strict.float64))
    assert not B.same_namespace_dtype_device(
        on_cpu, strict.asarray(a, device=strict.Device("device1")))


def test_get_namespace_needs_an_array():
    with pytest.raises(TypeError, match="at least one array"):
        B.get_namespace(1.0, None)


def test_asarray_round_trip(xp, dtype, device, to_xp):
    a = np.arange(6.0).reshape(2, 3)
    x = B.asarray(a, dtype=dtype, xp=xp, device=device)
    assert x.dtype == dtype and B.device_of(x) == device
    np.testing.assert_array_equal(B.to_numpy(x), a)
    y = B.asarray([[1.0, 2.0]], like=x)  # list -> like's namespace, device and dtype
    assert y.dtype == dtype and B.device_of(y) == device
    z = B.asarray(x, dtype="float64")
    assert B.get_namespace(z) is B.namespace()  # moved to the default namespace explicitly
    np.testing.assert_array_equal(B.to_numpy(z), a)


def test_asarray_default_dtype(monkeypatch):
    monkeypatch.setenv("GPNUM_DTYPE", "float32")
    assert B.asarray([1, 2]).dtype == np.float32  # integers become the default floating dtype
    assert B.asarray(np.ones(2)).dtype == np.float64  # floating input keeps its precision


# --- linear algebra gaps ----------------------------------------------------------------------

def test_cholesky_matches_numpy(to_xp, tol):
    A = _spd(30)
    L = B.to_numpy(B.cholesky(to_xp(A)))
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=100 * tol, atol=100 * tol * 30)
    assert np.allclose(np.triu(L, 1), 0.0)


def test_cholesky_adds_jitter_to_singular_psd(to_xp, dtype, xp):
    rng = np.random.default_rng(1)
    U = rng.standard_normal((20, 5))
    A = U @ U.T  # rank 5: positive semi-definite, singular
    L, j = B.cholesky(to_xp(A), return_jitter=True)
    # The jitter scales with the mean diagonal: max(n, 10) eps s, 10x that, ... up to 1e-6 s
    # (float64) or 1e-3 s (float32).
    s = float(np.mean(np.diag(A)))
    eps = float(np.finfo(np.float32 if dtype == xp.float32 else np.float64).eps)
    first = 20 * eps * s
    assert j > 0.0
    ratio = np.log10(j / first)
    assert abs(ratio - round(ratio)) < 1e-5 and round(ratio) >= 0
    assert j <= (1e-3 if dtype == xp.float32 else 1e-6) * s * 10.0
    Ln = B.to_numpy(L).astype(np.float64)
    np.testing.assert_allclose(Ln @ Ln.T, A + j * np.eye(20), atol=1e-3 if j > 1e-7 else 1e-9)


def test_cholesky_jitter_scales_with_the_matrix(to_xp):
    # The same singular matrix times 1e6 needs a 1e6 times larger jitter: the escalation is
    # relative to the diagonal, so both factorise, with jitters in the ratio of the scales.
    rng = np.random.default_rng(2)
    U = rng.standard_normal((30, 4))
    A = U @ U.T
    _, j1 = B.cholesky(to_xp(A), return_jitter=True)
    _, j2 = B.cholesky(to_xp(1e6 * A), return_jitter=True)
    assert j1 > 0.0 and j2 > 0.0
    assert 1e4 <= j2 / j1 <= 1e8


def test_cholesky_names_the_matrix_and_the_fix(to_xp):
    with pytest.raises(NotPSDError, match=r"^K_ZZ of size 2 x 2 is not positive definite.*"
                                          r"x the mean diagonal.*; raise the jitter$"):
        B.cholesky(to_xp(np.diag([1.0, -1.0])), what="K_ZZ", hint="raise the jitter")


def test_cholesky_not_psd_names_jitter_and_size(to_xp):
    A = np.diag([1.0, 2.0, -1.0])
    with pytest.raises(NotPSDError, match=r"3 x 3 is not positive definite.*up to 1\.0e-0[35]"):
        B.cholesky(to_xp(A), jitter=1e-5, max_tries=3)


def test_cholesky_no_jitter_allowed(to_xp):
    with pytest.raises(NotPSDError, match="none"):
        B.cholesky(to_xp(np.diag([1.0, -1.0])), max_tries=0)


def test_cholesky_bad_input(to_xp):
    A = _spd(4)
    A[1, 2] = np.nan
    with pytest.raises(ValueError, match="A: expected finite values, got 1 NaN"):
        B.cholesky(to_xp(A))
    with pytest.raises(ShapeError, match=r"square matrix of shape \(n, n\), got \(3, 4\)"):
        B.cholesky(to_xp(np.ones((3, 4))))
    with pytest.raises(ValueError, match="jitter"):
        B.cholesky(to_xp(np.diag([1.0, -1.0])), jitter=-1.0)
    with pytest.raises(ValueError, match="max_tries"):
        B.cholesky(to_xp(np.eye(2)), max_tries=-1)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("k", [None, 3])
def test_solve_triangular(to_xp, tol, lower, trans, k):
    rng = np.random.default_rng(2)
    T = np.tril(rng.standard_normal((8, 8))) + 4 * np.eye(8)
    if not lower:
        T = T.T
    noise = rng.standard_normal((8, 8))  # garbage in the unused triangle must be ignored
    Tin = T + (np.triu(noise, 1) if lower else np.tril(noise, -1))
    Bm = rng.standard_normal((8,) if k is None else (8, k))
    X = B.to_numpy(B.solve_triangular(to_xp(Tin), to_xp(Bm), lower=lower, trans=trans))
    ref = np.linalg.solve(T.T if trans else T, Bm)
    assert X.shape == Bm.shape
    np.testing.assert_allclose(X, ref, rtol=100 * tol, atol=100 * tol)


def test_solve_triangular_shape_errors(to_xp):
    with pytest.raises(ShapeError, match=r"B: expected shape \(4,\) or \(4, k\), got \(3, 2\)"):
        B.solve_triangular(to_xp(np.eye(4)), to_xp(np.ones((3, 2))))
    with pytest.raises(ShapeError, match=r"got \(3,\)"):
        B.solve_triangular(to_xp(np.eye(4)), to_xp(np.ones(3)))
    with pytest.raises(ShapeError, match="L: expected a square"):
        B.solve_triangular(to_xp(np.ones((4, 3))), to_xp(np.ones(4)))


def test_cho_solve(to_xp, tol):
    A = _spd(12, cond=1e2)
    rhs = np.random.default_rng(3).standard_normal((12, 2))
    X = B.to_numpy(B.cho_solve(B.cholesky(to_xp(A)), to_xp(rhs)))
    np.testing.assert_allclose(X, np.linalg.solve(A, rhs), rtol=1e3 * tol, atol=1e3 * tol)


# --- random numbers ---------------------------------------------------------------------------

def test_random_same_draws_on_every_backend(xp, dtype, device):
    g = B.default_rng(7, xp=xp, device=device)
    z = g.normal((1000, 3), dtype=dtype)
    assert z.dtype == dtype and B.device_of(z) == device
    ref = np.random.Generator(np.random.PCG64(7)).standard_normal((1000, 3))
    np.testing.assert_allclose(B.to_numpy(z), ref, rtol=1e-6)
    assert abs(ref.mean()) < 4 / np.sqrt(3000) and abs(ref.std() - 1) < 0.05


def test_random_other_draws(xp, device):
    g = B.default_rng(3, xp=xp, device=device)
    u = B.to_numpy(g.uniform((500,), low=-2.0, high=3.0))
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.3
    r = B.to_numpy(g.rademacher((400,)))
    assert set(np.unique(r)) == {-1.0, 1.0}
    p = B.to_numpy(g.permutation(50))
    assert sorted(p.tolist()) == list(range(50))
    i = B.to_numpy(g.integers(0, 5, (100,)))
    assert i.min() >= 0 and i.max() < 5


def test_random_state_round_trip():
    g = B.default_rng(11)
    g.normal((5,))
    state = g.get_state()
    a = B.to_numpy(g.normal((4,)))
    g2 = B.default_rng(0)
    g2.set_state(state)
    np.testing.assert_array_equal(B.to_numpy(g2.normal((4,))), a)


# --- shared helpers ---------------------------------------------------------------------------

def test_gradcheck_accepts_right_and_rejects_wrong_gradient():
    f = lambda x: np.sum(np.sin(x) * x[::-1])  # noqa: E731
    x = np.array([0.3, -1.2, 2.0])
    g = np.cos(x) * x[::-1] + np.sin(x)[::-1]
    check_grad(f, x, g)
    with pytest.raises(AssertionError, match="relative error"):
        check_grad(f, x, g * 1.001)
    np.testing.assert_allclose(numerical_grad(lambda x: x[0] ** 3, np.array([2.0])), [12.0],
                               rtol=1e-9)


def test_check_positive_and_finite(xp, to_xp):
    from gpnum.errors import check_finite, check_positive

    assert check_positive(2, "lengthscale") == 2.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lengthscale: expected a finite number > 0"):
            check_positive(bad, "lengthscale")
    with pytest.raises(TypeError, match="expected a real number"):
        check_positive("a", "lengthscale")
    assert check_positive(0.0, "x", allow_zero=True) == 0.0
    with pytest.raises(ValueError, match="infinite value"):
        check_finite(xp, to_xp(np.array([1.0, np.inf])), "y")


def test_version():
    assert gpnum.__version__


def test_demo_runs(capsys, monkeypatch):
    from gpnum.__main__ import main

    monkeypatch.setenv("GPNUM_BACKEND", "numpy")
    assert main(["demo", "--n", "200"]) == 0
    out = capsys.readouterr().out
    assert "backend=numpy" in out
    res = float(out.split("relative residual=")[1].split(",")[0])
    assert res < 1e-10


def test_cholesky_vjp_finite_differences():
    A = _spd(6, seed=4, cond=50.0)
    Lbar = np.tril(np.random.default_rng(5).standard_normal((6, 6)))
    L = np.linalg.cholesky(A)
    G = B.cholesky_vjp(L, Lbar)
    np.testing.assert_allclose(G, G.T)
    # symmetric-matrix convention: gradient of S -> f((S + S^T) / 2)
    check_grad(lambda S: np.sum(Lbar * np.linalg.cholesky(0.5 * (S + S.T))), A, G)


def test_cholesky_vjp_sygst_path_directional_finite_differences():
    # n = 450 takes the LAPACK sygst path (NumPy, n >= 400): a central difference along one
    # random symmetric direction, float64.
    n = 450
    A = _spd(n, seed=17, cond=30.0)
    rng = np.random.default_rng(18)
    Lbar = np.tril(rng.standard_normal((n, n)))
    E = rng.standard_normal((n, n))
    E = 0.5 * (E + E.T)
    G = B.cholesky_vjp(np.linalg.cholesky(A), Lbar)
    h = 1e-6
    fd = (np.sum(Lbar * np.linalg.cholesky(A + h * E))
          - np.sum(Lbar * np.linalg.cholesky(A - h * E))) / (2 * h)
    assert abs(fd - np.sum(G * E)) <= 1e-6 * abs(fd)


def test_cholesky_vjp_on_every_backend(to_xp, tol):
    A = _spd(5, seed=6, cond=10.0)
    Lbar = np.tril(np.random.default_rng(7).standard_normal((5, 5)))
    L = np.linalg.cholesky(A)
    ref = B.cholesky_vjp(L, Lbar)
    got = B.to_numpy(B.cholesky_vjp(to_xp(L), to_xp(Lbar)))
    np.testing.assert_allclose(got, ref, rtol=1e3 * tol, atol=1e3 * tol)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [True, False])
def test_triangular_matmul_reads_one_triangle(to_xp, tol, lower, trans):
    rng = np.random.default_rng(8)
    T = rng.standard_normal((7, 7))  # the other triangle holds garbage that must be ignored
    Bm = rng.standard_normal((7, 3))
    op = np.tril(T) if lower else np.triu(T)
    ref = (op.T if trans else op) @ Bm
    got = B.to_numpy(B.triangular_matmul(to_xp(T), to_xp(Bm), lower=lower, trans=trans))
    np.testing.assert_allclose(got, ref, rtol=100 * tol, atol=100 * tol)


def test_triangular_matmul_fortran_order_and_shape_error():
    rng = np.random.default_rng(9)
    T, Bm = rng.standard_normal((6, 6)), rng.standard_normal((6, 2))
    got = B.triangular_matmul(np.asfortranarray(T), Bm, lower=True, trans=True)
    np.testing.assert_allclose(got, np.tril(T).T @ Bm, rtol=1e-13)
    with pytest.raises(ShapeError, match="B: expected shape"):
        B.triangular_matmul(T, rng.standard_normal((5, 2)))


@pytest.mark.parametrize("order", ["C", "F"])
def test_cholesky_vjp_inner_against_dense(to_xp, tol, order):
    A = _spd(6, seed=10, cond=20.0)
    L = np.array(np.linalg.cholesky(A), order=order)
    M = np.random.default_rng(11).standard_normal((6, 6))  # upper triangle must be ignored
    P = np.tril(M) - 0.5 * np.diag(np.diag(M))
    Li = np.linalg.inv(L)
    ref = 0.5 * Li.T @ (P + P.T) @ Li
    got = B.to_numpy(B.cholesky_vjp_inner(to_xp(L), to_xp(M)))
    np.testing.assert_allclose(got, ref, rtol=1e3 * tol, atol=1e3 * tol)
    loose = B.to_numpy(B.cholesky_vjp_inner(to_xp(L), to_xp(M), symmetrize=False))
    np.testing.assert_allclose(0.5 * (loose + loose.T), ref, rtol=1e3 * tol, atol=1e3 * tol)


@pytest.mark.parametrize("shape", [(7, 5, 3), (300, 40, 200), (200, 40, 300), (513, 17, 513)])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_matmul_and_lower_matmul_against_numpy(to_xp, tol, shape, layout):
    # (300, 40, 200) and larger pass the size threshold of the SciPy GEMM route on NumPy; the
    # layouts cover both BLAS transpose flags and the copy of a non-contiguous input.
    n1, k, n2 = shape
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((n1, 2 * k)), rng.standard_normal((k, n2))
    if layout == "strided":
        a = a[:, ::2]
    else:
        a = np.array(a[:, :k], order=layout)
        b = np.array(b, order=layout)
    ref = a @ b
    scale = np.abs(ref).max()
    got = B.to_numpy(B.matmul(to_xp(a), to_xp(b)))
    assert got.shape == (n1, n2)
    np.testing.assert_allclose(got, ref, rtol=0, atol=50 * tol * scale)
    low = B.to_numpy(B.lower_matmul(to_xp(a), to_xp(b)))
    np.testing.assert_allclose(low, np.tril(ref), rtol=0, atol=50 * tol * scale)
    assert np.all(low[np.triu_indices(n1, 1, n2)] == 0.0)


@pytest.mark.parametrize("n1,n2", [(500, 500), (513, 300), (300, 513)])
def test_lower_matmul_clears_unwritten_memory_holding_nan(monkeypatch, n1, n2):
    # The NumPy route writes row blocks into np.empty and clears the rest: memory it never
    # wrote may hold NaN, which must not survive in the upper triangle (NaN * 0 is NaN).
    rng = np.random.default_rng(14)
    a, b = rng.standard_normal((n1, 40)), rng.standard_normal((40, n2))
    monkeypatch.setattr(np, "empty", lambda shape, dtype=float, **kw:
                        np.full(shape, np.nan, dtype=dtype))
    low = B.lower_matmul(a, b)
    monkeypatch.undo()
    assert np.all(np.isfinite(low))
    np.testing.assert_allclose(low, np.tril(a @ b), rtol=0, atol=1e-12 * np.abs(a @ b).max())


def test_matmul_writer_stores_batched_products_in_place(xp, dtype, to_xp, tol):
    """Batched products written into slots of a preallocated array (in place where the library
    takes ``out=``, by item assignment elsewhere), reshaped to the slot's shape, equal NumPy's
    products; other slots keep their values."""
    rng = np.random.default_rng(15)
    a, b = rng.standard_normal((3, 4, 4)), rng.standard_normal((3, 4, 6))
    store = rng.standard_normal((5, 3, 4, 6))
    out = to_xp(store)
    write = B.matmul_writer(xp)
    write(out, 2, to_xp(a), to_xp(b))
    write(out, 4, to_xp(a), to_xp(b[..., ::-1].copy()))
    expected = store.copy()
    expected[2], expected[4] = a @ b, a @ b[..., ::-1]
    np.testing.assert_allclose(B.to_numpy(out), expected, rtol=10 * tol, atol=10 * tol)
    # a slot of another shape and the same size, and an operand whose trailing axes are the
    # columns: the product is stored in C order
    split = to_xp(store.reshape(5, 3, 4, 2, 3))
    write(split, 1, to_xp(a), to_xp(b.reshape(3, 4, 3, 2)))
    expected = store.reshape(5, 3, 4, 2, 3).copy()
    expected[1] = (a @ b).reshape(3, 4, 2, 3)
    np.testing.assert_allclose(B.to_numpy(split), expected, rtol=10 * tol, atol=10 * tol)
    # a strided out cannot take the product in place: refused, not lost
    if xp.__name__.split(".")[-1] in ("numpy", "torch", "cupy"):
        with pytest.raises(ValueError, match="contiguous"):
            write(xp.permute_dims(out, (0, 1, 3, 2)), 2, to_xp(a), to_xp(b))


def test_matmul_keeps_dtype_and_small_products():
    rng = np.random.default_rng(13)
    a32 = rng.standard_normal((400, 300)).astype(np.float32)
    assert B.matmul(a32, a32.T).dtype == np.float32
    ai = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(B.matmul(ai, ai.T), ai @ ai.T)  # integers stay with ``@``


@pytest.mark.parametrize("n", [6, 300, 450, 451])
@pytest.mark.parametrize("symmetrize", [True, False])
def test_cholesky_vjp_inner_paths_against_inverse(n, symmetrize):
    # n = 300: the in-place trsm path over two row blocks (overwrite_m); n = 450 and 451 (odd
    # n^2: the in-place reversal's middle entry stays put): LAPACK sygst on the index-reversed
    # problem (NumPy, n >= 400). Only M's lower triangle may be read.
    A = _spd(n, seed=14, cond=20.0)
    L = np.linalg.cholesky(A)
    M = np.random.default_rng(15).standard_normal((n, n))
    P = np.tril(M) - 0.5 * np.diag(np.diag(M))
    Li = np.linalg.inv(L)
    ref = 0.5 * Li.T @ (P + P.T) @ Li
    for overwrite in (False, True):
        Mc, Lc = M.copy(), np.ascontiguousarray(L)
        got = B.cholesky_vjp_inner(Lc, Mc, symmetrize=symmetrize, overwrite_m=overwrite,
                                   overwrite_l=overwrite)
        if not overwrite:
            np.testing.assert_array_equal(Mc, M)
            np.testing.assert_array_equal(Lc, L)
        if symmetrize:  # symmetric up to round-off
            np.testing.assert_allclose(got, got.T, rtol=0, atol=1e-13 * np.abs(ref).max())
        else:
            got = 0.5 * (got + got.T)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_cholesky_shift_against_shifted_matrix(to_xp, tol):
    A = _spd(9, seed=16, cond=50.0)
    A -= 1.5 * np.eye(9) * np.linalg.eigvalsh(A)[0]  # indefinite: only the shift makes it PD
    L = B.to_numpy(B.cholesky(to_xp(A), shift=1.0 * abs(np.linalg.eigvalsh(A)[0]) + 0.5,
                              max_tries=0))
    shifted = A + (abs(np.linalg.eigvalsh(A)[0]) + 0.5) * np.eye(9)
    np.testing.assert_allclose(L @ L.T, shifted, rtol=0, atol=200 * tol * np.abs(A).max())
    assert np.all(np.triu(L, 1) == 0.0)
    with pytest.raises(NotPSDError, match="on top of a diagonal shift of 1.0e-06"):
        B.cholesky(to_xp(A), shift=1e-6, jitter=1e-6, max_tries=2)
    with pytest.raises(ValueError, match="shift"):
        B.cholesky(to_xp(A), shift=-1.0)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
def test_triangular_inverse_against_numpy(xp, device, dtype, lower, order):
    """L^{-1} of a triangular L (the other triangle holding garbage, never read) against
    np.linalg.inv of the clean triangle; the result's other triangle is zero."""
    rng = np.random.default_rng(4)
    n = 9
    T = rng.standard_normal((n, n)) + 5.0 * np.eye(n)
    clean = np.tril(T) if lower else np.triu(T)
    L = B.asarray(np.asarray(T, order=order), dtype=dtype, xp=xp, device=device)
    got = B.to_numpy(B.triangular_inverse(L, lower=lower))
    tol = 1e-5 if dtype == xp.float32 else 1e-13
    np.testing.assert_allclose(got, np.linalg.inv(clean), rtol=tol, atol=tol)
    other = np.triu(got, 1) if lower else np.tril(got, -1)
    assert not other.any()


def test_triangular_inverse_of_a_singular_matrix():
    L = np.tril(np.ones((4, 4)))
    L[2, 2] = 0.0
    with pytest.raises(gpnum.NotPSDError, match="diagonal entry 2 is zero"):
        B.triangular_inverse(L)


@pytest.mark.parametrize("n", [1, 9, 300])
@pytest.mark.parametrize("order", ["C", "F"])
def test_cho_inverse_against_numpy(xp, device, dtype, n, order):
    """(L L^T)^{-1} from a lower factor whose upper triangle holds garbage (never read) against
    np.linalg.inv of the matrix; n = 300 crosses the mirroring's 256-row blocks."""
    rng = np.random.default_rng(5)
    G = rng.standard_normal((n, n))
    A = G @ G.T / n + np.eye(n)
    L = np.linalg.cholesky(A) + np.triu(rng.standard_normal((n, n)), 1)
    got = B.to_numpy(B.cho_inverse(B.asarray(np.asarray(L, order=order), dtype=dtype, xp=xp,
                                             device=device)))
    tol = 1e-4 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(got, np.linalg.inv(A), rtol=tol, atol=tol)
    np.testing.assert_array_equal(got, got.T)


def test_cho_inverse_of_a_singular_factor():
    L = np.tril(np.ones((4, 4)))
    L[1, 1] = 0.0
    with pytest.raises(gpnum.NotPSDError, match="diagonal entry 1 is zero"):
        B.cho_inverse(L)


def test_row_dots_against_numpy(to_xp, xp, dtype):
    rng = np.random.default_rng(40)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((7, 5))
    got = B.to_numpy(B.row_dots(to_xp(a), to_xp(b)))
    tol = 1e-5 if dtype == xp.float32 else 1e-14
    np.testing.assert_allclose(got, np.sum(a * b, axis=1), rtol=tol, atol=tol)
    # any memory layout: the column-major view of a transposed array
    got_t = B.row_dots(np.asfortranarray(a), np.asfortranarray(b))
    np.testing.assert_allclose(got_t, np.sum(a * b, axis=1), rtol=1e-14)


def test_matmul_matrix_vector_against_numpy(to_xp, xp, dtype):
    # Large enough for SciPy's gemv on NumPy; C-ordered, Fortran-ordered and strided matrices.
    rng = np.random.default_rng(41)
    big = rng.standard_normal((600, 900))
    tol = 1e-4 if dtype == xp.float32 else 1e-12
    for a in (big[:, :400], np.asfortranarray(big[:, :400]), big[::2, ::2][:, :400]):
        b = rng.standard_normal(400)
        got = B.to_numpy(B.matmul(to_xp(np.ascontiguousarray(a) if xp is not np else a),
                                  to_xp(b)))
        assert got.shape == (a.shape[0],)
        np.testing.assert_allclose(got, a @ b, rtol=tol, atol=tol * np.abs(a @ b).max())


def test_blas_pool_routes_products_and_restores(scipy_blas_spy):
    import threading

    fetched = scipy_blas_spy()
    rng = np.random.default_rng(42)
    a, b, v = rng.standard_normal((400, 200)), rng.standard_normal((200, 250)), rng.standard_normal(200)
    B.matmul(a, b), B.matmul(a, v), B.flat_dot(a, a)
    assert fetched == ["gemm", "gemv", "dot"]  # outside any block: SciPy's pool
    del fetched[:]
    seen_elsewhere = []
    with B.blas_pool("numpy"):
        got = B.matmul(a, b), B.matmul(a, v), B.flat_dot(a, a)
        # another thread keeps the default
        t = threading.Thread(target=lambda: seen_elsewhere.append(B.matmul(a, b)))
        t.start()
        t.join()
        with B.blas_pool("scipy"):  # blocks nest
            B.matmul(a, b)
        B.matmul(a, b)
    assert fetched == ["gemm", "gemm"]  # the thread's and the nested block's only
    np.testing.assert_allclose(got[0], a @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], a @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(got[2]), float(np.sum(a * a)), rtol=1e-12)
    with pytest.raises(RuntimeError):
        with B.blas_pool("numpy"):
            raise RuntimeError("inside")
    B.matmul(a, v)
    assert fetched[-1] == "gemv"  # restored after the exception
    with pytest.raises(ValueError, match="'scipy' or 'numpy'"):
        with B.blas_pool("mkl"):
            pass


@pytest.mark.parametrize("whitening,ngd_method,pool", [("ciq", "krylov", "numpy"),
                                                        ("cholesky", "dense", "scipy")])
def test_svgp_step_products_in_the_whitening_pool(scipy_blas_spy, whitening, ngd_method, pool):
    # A CIQ + Krylov step does all its work through NumPy, so its large products must not wake
    # SciPy's BLAS pool; a Cholesky step factorises with SciPy and keeps its products there.
    from gpnum.kernels import Matern52
    from gpnum.likelihoods import Gaussian

    rng = np.random.default_rng(43)
    X = rng.uniform(-1, 1, (256, 9))
    y = np.sin(3 * X[:, 0])
    model = gpnum.SVGP(Matern52(lengthscale=0.5), Gaussian(variance=0.1), X[:120].copy(),
                       num_data=1000, whitening=whitening, jitter=1e-4)
    ngd = gpnum.optim.NaturalGradient(0.1, ngd_method)
    ngd.prepare(model)
    fetched = scipy_blas_spy()
    _, _, data = model.elbo_and_grad(X, y, return_data=True)
    ngd.step(model, data=data)
    model.predict_y(X)
    assert (len(fetched) == 0) == (pool == "numpy"), fetched


def test_gpr_cg_products_in_numpy_pool(scipy_blas_spy):
    # The CG path runs CG, Lanczos and their products through NumPy: the kernel's products
    # must not wake SciPy's BLAS pool beside them (the Cholesky path's do).
    from gpnum.kernels import Matern32
    from gpnum.likelihoods import Gaussian

    rng = np.random.default_rng(44)
    X = rng.uniform(-1, 1, (400, 9))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(400)
    for solver in ("cg", "cholesky"):
        model = gpnum.GPR(Matern32(lengthscale=np.ones(9)), Gaussian(variance=0.1), X, y,
                          solver=solver, jitter=1e-4)
        fetched = scipy_blas_spy()
        model.log_marginal_likelihood_and_grad()
        model.predict_f(X[:50])
        assert (len(fetched) == 0) == (solver == "cg"), (solver, fetched)


def _pool_threads():
    """{"numpy": n, "scipy": n}: the thread counts threadpoolctl reads off the two OpenBLAS
    libraries of the NumPy and SciPy wheels (skips where they are one shared library)."""
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_info

    out = {}
    for info in threadpool_info():
        if info["user_api"] != "blas":
            continue
        path = info["filepath"].replace("\\", "/")
        if "/scipy.libs/" in path:
            out["scipy"] = info["num_threads"]
        elif "/numpy.libs/" in path:
            out["numpy"] = info["num_threads"]
    if set(out) != {"numpy", "scipy"}:
        pytest.skip("NumPy and SciPy share one BLAS here: no second pool to keep quiet")
    return out


def test_blas_pool_sets_thread_counts_and_restores(monkeypatch):
    """Within the outermost blas_pool block the named pool has blas_threads() threads and the
    other one; nested blocks change nothing; leaving (also by an exception) restores both."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=2, user_api="blas"):  # a known starting point
        before = _pool_threads()
        monkeypatch.delenv("GPNUM_BLAS_THREADS", raising=False)
        previous = B.set_blas_threads(3)
        try:
            assert previous == 1  # the default
            with B.blas_pool("numpy"):
                assert _pool_threads() == {"numpy": 3, "scipy": 1}
                with B.blas_pool("scipy"):  # nested: the outermost block's counts stay
                    assert _pool_threads() == {"numpy": 3, "scipy": 1}
            assert _pool_threads() == before
            with pytest.raises(RuntimeError), B.blas_pool("scipy"):
                assert _pool_threads() == {"numpy": 1, "scipy": 3}
                raise RuntimeError("inside")
            assert _pool_threads() == before
            B.set_blas_threads("default")  # gpnum leaves the libraries alone
            assert B.blas_threads() is None
            with B.blas_pool("numpy"):
                assert _pool_threads() == before
        finally:
            B.set_blas_threads(previous)
        assert _pool_threads() == before


def test_blas_threads_setting_from_the_environment(monkeypatch):
    import os

    from gpnum.backend import _threads

    monkeypatch.setattr(_threads, "_setting", _threads._UNSET)
    for text, want in [("2", 2), (" all ", os.cpu_count()), ("default", None), ("1", 1)]:
        monkeypatch.setenv("GPNUM_BLAS_THREADS", text)
        assert B.blas_threads() == want
    monkeypatch.delenv("GPNUM_BLAS_THREADS")
    assert B.blas_threads() == 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("GPNUM_BLAS_THREADS", bad)
        with pytest.raises(ValueError, match="GPNUM_BLAS_THREADS: expected a positive integer"):
            B.blas_threads()
        with pytest.raises(ValueError, match="GPNUM_BLAS_THREADS"), B.blas_pool("numpy"):
            pass  # a block refuses a bad setting before it changes anything
    monkeypatch.delenv("GPNUM_BLAS_THREADS")
    assert _threads._depth == 0 and _threads._saved is None
    from gpnum.backend import _blas

    assert getattr(_blas._POOL, "name", "scipy") == "scipy"  # the refused blocks left no pool
    for bad in (0, 2.5, True, "x"):
        with pytest.raises(ValueError, match="threads: expected a positive integer"):
            B.set_blas_threads(bad)


def test_gpr_objective_runs_in_its_pool_with_one_busy_pool():
    """GPR's Cholesky objective runs with SciPy's pool at blas_threads() and NumPy's at one
    (the kernel's products are small); its value against a dense NumPy computation."""
    from gpnum.kernels import RBF
    from gpnum.likelihoods import Gaussian

    rng = np.random.default_rng(44)
    X = rng.normal(size=(50, 2))
    y = rng.normal(size=50)
    model = gpnum.GPR(RBF(lengthscale=0.7), Gaussian(variance=0.2), X, y)
    seen = []
    real = model._lml

    def spy(*args):
        seen.append(_pool_threads())
        return real(*args)

    model._lml = spy
    previous = B.set_blas_threads(2)
    try:
        value = float(model.log_marginal_likelihood())
    finally:
        B.set_blas_threads(previous)
    assert seen == [{"numpy": 1, "scipy": 2}]
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = np.exp(-0.5 * d2 / 0.49) + 0.2 * np.eye(50)
    sign, logdet = np.linalg.slogdet(K)
    ref = -0.5 * y @ np.linalg.solve(K, y) - 0.5 * logdet - 25 * np.log(2 * np.pi)
    np.testing.assert_allclose(value, ref, rtol=1e-10)
