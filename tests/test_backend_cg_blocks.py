"""Block CG's fused vector updates (gpnum.backend.cg_update, cg_direction, scaled_add), the
row split of SparseRows' products and blas_pool(split_rows=True): values against NumPy
expressions and dense products, and the same values whatever the number of row threads."""

from __future__ import annotations

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.backend import _cg_blocks, _sparse


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 elements and row pieces of 64 nonzeros: small blocks take the split paths."""
    monkeypatch.setattr(_cg_blocks, "_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(_sparse, "_PIECE_MIN_NONZEROS", 64)


@pytest.fixture
def two_row_threads(monkeypatch):
    """``run(fn)``: ``fn()`` within ``blas_pool("numpy", split_rows=True)`` with 2 threads."""
    monkeypatch.delenv("GPNUM_BLAS_THREADS", raising=False)

    def run(fn, threads=2):
        previous = B.set_blas_threads(threads)
        try:
            with B.blas_pool("numpy", split_rows=True):
                assert B._threads.row_workers() == threads
                return fn()
        finally:
            B.set_blas_threads(previous)

    return run


def _blocks(n=700, k=5, seed=0):
    rng = np.random.default_rng(seed)
    X, R, P, AP = (rng.standard_normal((n, k)) for _ in range(4))
    alpha = rng.uniform(0.5, 2.0, k)
    beta = rng.uniform(0.1, 0.9, k)
    d = rng.uniform(0.5, 3.0, n)
    return X, R, P, AP, alpha, beta, d


@pytest.mark.parametrize("kind", ["none", "constant", "diagonal"])
def test_cg_update_and_direction_against_numpy(xp, dtype, to_xp, tol, small_chunks, kind):
    X, R, P, AP, alpha, beta, d = _blocks()
    scale = {"none": None, "constant": np.asarray(0.7), "diagonal": d}[kind]
    Xn, Rn = X + alpha * P, R - alpha * AP
    s = None if scale is None else (scale if scale.ndim == 0 else scale[:, None])
    # copies: on NumPy the blocks are overwritten, and to_xp may return the array itself
    out = B.cg_update(to_xp(X.copy()), to_xp(R.copy()), to_xp(P), to_xp(AP), to_xp(alpha),
                      None if scale is None else to_xp(scale))
    np.testing.assert_allclose(B.to_numpy(out[0]), Xn, rtol=tol, atol=tol)
    np.testing.assert_allclose(B.to_numpy(out[1]), Rn, rtol=tol, atol=tol)
    np.testing.assert_allclose(B.to_numpy(out[2]), (Rn * Rn).sum(0), rtol=tol * 10)
    if scale is None:
        assert out[3] is None
    else:
        np.testing.assert_allclose(B.to_numpy(out[3]), (Rn * s * Rn).sum(0), rtol=tol * 10)
    Z = R
    new_p = B.cg_direction(to_xp(Z), to_xp(P.copy()), to_xp(beta),
                           None if scale is None else to_xp(scale))
    ref = (Z if scale is None else s * Z) + beta * P
    np.testing.assert_allclose(B.to_numpy(new_p), ref, rtol=tol, atol=tol)
    assert out[0].dtype == dtype and new_p.dtype == dtype


def test_scaled_add_and_its_dots(xp, dtype, to_xp, tol, small_chunks):
    X, Y, _, _, _, _, d = _blocks(seed=1)
    for scale in (np.asarray(0.3), d):
        s = scale if scale.ndim == 0 else scale[:, None]
        ref = Y + s * X
        got = B.scaled_add(to_xp(Y.copy()), to_xp(X), to_xp(scale))
        np.testing.assert_allclose(B.to_numpy(got), ref, rtol=tol, atol=tol)
        got, dots = B.scaled_add(to_xp(Y.copy()), to_xp(X), to_xp(scale), dots=True)
        np.testing.assert_allclose(B.to_numpy(got), ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(B.to_numpy(dots), (X * ref).sum(0), rtol=tol * 10)


def test_row_threads_give_the_same_values(small_chunks, two_row_threads):
    """Two row threads compute bitwise the values of one (fixed chunks and pieces, sums in
    chunk order); the products against dense ones."""
    X, R, P, AP, alpha, beta, d = _blocks(n=900, k=3, seed=2)

    def run():
        x, r, rr, rz = B.cg_update(X.copy(), R.copy(), P, AP, alpha, d)
        p = B.cg_direction(r, P.copy(), beta, d)
        y, dots = B.scaled_add(AP.copy(), P, d, dots=True)
        return x, r, rr, rz, p, y, dots

    one = run()
    two = two_row_threads(run)
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)

    rng = np.random.default_rng(3)
    n, m, p = 900, 60, 16
    idx = rng.integers(0, m, (n, p))
    idx = idx[np.argsort(idx[:, 0], kind="stable")]
    w = rng.standard_normal((n, p))
    W = B.SparseRows(idx, w, m)
    assert W._pieces is not None and len(W._pieces) == _sparse._ROW_PIECES
    dense = np.zeros((n, m))
    np.add.at(dense, (np.repeat(np.arange(n), p), idx.ravel()), w.ravel())
    Y, Xn = rng.standard_normal((m, 4)), rng.standard_normal((n, 4))
    for got in ((W.matmul(Y), W.rmatmul(Xn)),
                two_row_threads(lambda: (W.matmul(Y), W.rmatmul(Xn)))):
        np.testing.assert_allclose(got[0], dense @ Y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], dense.T @ Xn, rtol=1e-12, atol=1e-12)
    assert np.array_equal(W.rmatmul(Xn), two_row_threads(lambda: W.rmatmul(Xn)))
    assert B._threads.row_workers() == 1


def test_split_rows_block_sets_one_blas_thread_and_nests(monkeypatch):
    """split_rows=True: the BLAS pools at one thread, the rows over blas_threads() threads;
    a nested block keeps the outer one's setting; leaving restores both."""
    from threadpoolctl import threadpool_info

    def blas_counts():
        return sorted(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    monkeypatch.delenv("GPNUM_BLAS_THREADS", raising=False)
    previous = B.set_blas_threads(2)
    try:
        before = blas_counts()
        with B.blas_pool("numpy", split_rows=True):
            assert B._threads.row_workers() == 2
            assert set(blas_counts()) == {1}
            with B.blas_pool("scipy"):
                assert B._threads.row_workers() == 2
            assert B._threads.row_workers() == 2
        assert B._threads.row_workers() == 1 and blas_counts() == before
        with B.blas_pool("numpy"), B.blas_pool("numpy", split_rows=True):
            assert B._threads.row_workers() == 1      # the outer block's setting stays
    finally:
        B.set_blas_threads(previous)


@pytest.mark.parametrize("precond", ["none", "diagonal", "dense"])
def test_pcg_and_pcg_lanczos_solve_and_leave_inputs_intact(precond, small_chunks):
    from gpnum.linalg import Diagonal, pcg, pcg_lanczos

    rng = np.random.default_rng(4)
    n, k = 120, 3
    G = rng.standard_normal((n, n)) / np.sqrt(n)
    A = G @ G.T + 0.5 * np.eye(n)
    Bm = rng.standard_normal((n, k))
    x0 = rng.standard_normal((n, k))
    M = {"none": None, "diagonal": Diagonal(1.0 / np.diag(A)),
         "dense": np.linalg.inv(A + 0.1 * np.eye(n))}[precond]
    keep = Bm.copy(), x0.copy()
    ref = np.linalg.solve(A, Bm)
    for start in (None, x0):
        res = pcg(A, Bm, M=M, rtol=1e-12, x0=start)
        np.testing.assert_allclose(res.x, ref, rtol=1e-9, atol=1e-9)
    res = pcg_lanczos(A, Bm, M=None if M is None else gpnum.linalg.aslinearoperator(M),
                      rtol=1e-12, maxiter=n)
    np.testing.assert_allclose(res.x, ref, rtol=1e-9, atol=1e-9)
    assert np.array_equal(Bm, keep[0]) and np.array_equal(x0, keep[1])


def test_added_diag_products_and_curvatures(xp, to64):
    from gpnum.linalg import AddedDiag

    rng = np.random.default_rng(5)
    n = 40
    K = rng.standard_normal((n, n))
    K = K @ K.T
    d = rng.uniform(0.1, 1.0, n)
    X = rng.standard_normal((n, 3))
    for diag in (0.3, d):
        op = AddedDiag(gpnum.linalg.aslinearoperator(to64(K)),
                       to64(diag) if isinstance(diag, np.ndarray) else diag)
        dense = K + np.diag(d if isinstance(diag, np.ndarray) else np.full(n, diag))
        KX, dots = op._matmat_dots(to64(X))
        np.testing.assert_allclose(B.to_numpy(KX), dense @ X, rtol=1e-12)
        np.testing.assert_allclose(B.to_numpy(dots), (X * (dense @ X)).sum(0), rtol=1e-12)
        np.testing.assert_allclose(B.to_numpy(op @ to64(X)), dense @ X, rtol=1e-12)


def test_ski_objective_splits_rows_with_the_same_values(monkeypatch, small_chunks):
    """GPR(solver="ski")'s objective runs with its rows split over GPNUM_BLAS_THREADS
    threads and the BLAS pools at one thread, and gives bitwise the values of one thread;
    the value against a dense computation of the same stochastic estimate is
    tests/test_gpr_ski.py's (here: the split changes nothing)."""
    from gpnum.kernels import RBF
    from gpnum.likelihoods import Gaussian
    from gpnum.models import _gpr_cg

    rng = np.random.default_rng(6)
    X = rng.uniform(0.0, 1.0, (300, 2))
    y = np.sin(6 * X[:, 0]) * np.cos(4 * X[:, 1]) + 0.1 * rng.standard_normal(300)
    seen = []
    real = _gpr_cg.lml

    def spy(*args, **kwargs):
        seen.append(B._threads.row_workers())
        return real(*args, **kwargs)

    monkeypatch.setattr(_gpr_cg, "lml", spy)
    monkeypatch.delenv("GPNUM_BLAS_THREADS", raising=False)
    out = []
    for threads in (1, 2):
        model = gpnum.GPR(RBF(lengthscale=[0.3, 0.3]), Gaussian(variance=0.05), X, y,
                          solver="ski", grid_size=16,
                          cg_options={"precond_rank": 5, "min_iter": 10})
        assert model.split_rows
        previous = B.set_blas_threads(threads)
        try:
            value, grads = model.log_marginal_likelihood_and_grad()
        finally:
            B.set_blas_threads(previous)
        out.append((float(value), {k: np.asarray(v) for k, v in grads.items()}))
    assert seen == [1, 2]
    assert out[0][0] == out[1][0]
    for name in out[0][1]:
        assert np.array_equal(out[0][1][name], out[1][1][name]), name


def test_run_row_split_order_errors_nesting_and_fork(monkeypatch):
    import threading

    from gpnum.backend import _parallel

    names = []

    def fn(w):
        names.append(threading.current_thread().name)
        return w * w

    assert B.run_row_split(fn, 3) == [0, 1, 4]
    assert B.run_row_split(fn, 1) == [0]
    # from one of the pool's threads a split runs in that thread (it would wait on itself)
    inner = B.run_row_split(lambda w: B.run_row_split(lambda v: (w, v), 2), 2)
    assert inner == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]

    def fails(w):
        if w == 1:
            raise KeyError("worker 1")
        return w

    with pytest.raises(KeyError, match="worker 1"):
        B.run_row_split(fails, 2)
    with pytest.raises(ValueError, match="workers: expected an integer >= 1"):
        B.run_row_split(fn, 0)
    # a process that inherited the pool object from its parent (fork) starts its own threads
    pid, pool = _parallel._ROW_POOL
    monkeypatch.setattr(_parallel, "_ROW_POOL", (pid + 1, pool))
    assert B.run_row_split(fn, 2) == [0, 1]
    assert _parallel._ROW_POOL[0] == pid and _parallel._ROW_POOL[1] is not pool
