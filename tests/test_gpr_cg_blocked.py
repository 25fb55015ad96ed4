"""GPR(solver="cg")'s blocked path (issue 49): symmetric kernel tiles shared by threads, and the
choice between the dense and the blocked kernel matrix by the memory the machine has.

- products and ``param_vjp`` of ``KernelMatrix(k, X)`` in tiles, one and two threads, against a
  dense NumPy kernel matrix and finite differences of it;
- each pair of points evaluated once per product;
- the dense/blocked rule with the available memory mocked, and its override;
- the helpers: ``available_memory`` reading ``/proc/meminfo``, ``run_in_threads``.
"""

import numpy as np
import pytest
from gradcheck import numerical_grad

import gpnum.models._gpr_cg as gpr_cg
from gpnum import backend as B
from gpnum.backend import _blas, _parallel
from gpnum.kernels import Matern32, White
from gpnum.likelihoods import Gaussian
from gpnum.linalg import Dense, KernelMatrix
from gpnum.models import GPR, CGOptions

LS = np.array([0.7, 1.1, 1.6])
GIB = 1024.0 ** 3


def matern32_np(X1, X2, ls, var):
    r = np.sqrt((((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(-1))
    s = np.sqrt(3.0) * r
    return var * (1.0 + s) * np.exp(-s)


def host(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


@pytest.mark.parametrize("workers", [1, 2])
def test_symmetric_tiles_against_dense(xp, dtype, device, to_xp, workers):
    n = 17
    rng = np.random.default_rng(3)
    X = rng.uniform(-2.0, 2.0, (n, 3))
    R, U, V = (rng.standard_normal((n, 3)) for _ in range(3))
    kw = {"xp": xp, "dtype": dtype, "device": device}
    # White: its diagonal tiles must be evaluated as k(X_I) (noise), the others as zeros
    kern = Matern32(lengthscale=LS, variance=1.2, **kw) + White(variance=0.3, **kw)
    K = matern32_np(X, X, LS, 1.2) + 0.3 * np.eye(n)
    f64 = lambda a: B.asarray(a, dtype=xp.float64, xp=xp, device=device)  # noqa: E731
    tol = 1e-5 if dtype == xp.float32 else 1e-10
    G = U @ V.T
    fd = numerical_grad(lambda ls: np.sum(G * matern32_np(X, X, ls, 1.2)), LS)
    fx = numerical_grad(lambda x: np.sum(G * matern32_np(x.reshape(n, 3), x.reshape(n, 3),
                                                         LS, 1.2)), X.reshape(-1))
    for block in (1, 2, 5, 17):          # tile sides 4, 5, 9 and 17 (one tile) rows
        op = KernelMatrix(kern, to_xp(X), block_size=block, compute_dtype=xp.float64,
                          workers=workers)
        np.testing.assert_allclose(host(op @ f64(R)), K @ R, rtol=tol, atol=tol)
        np.testing.assert_allclose(host(op @ f64(R[:, 0])), K @ R[:, 0], rtol=tol, atol=tol)
        g = op.param_vjp(f64(U), f64(V))
        np.testing.assert_allclose(host(g["kernel"]["0.lengthscale"]), fd,
                                   rtol=100 * tol, atol=100 * tol)
        np.testing.assert_allclose(host(g["kernel"]["0.variance"]),
                                   np.sum(G * matern32_np(X, X, LS, 1.0)),
                                   rtol=100 * tol, atol=100 * tol)
        np.testing.assert_allclose(host(g["kernel"]["1.variance"]), np.trace(G),
                                   rtol=100 * tol, atol=100 * tol)
        if dtype == xp.float64:
            np.testing.assert_allclose(host(g["X"]).reshape(-1), fx, rtol=1e-6, atol=1e-7)


def test_each_pair_evaluated_once_per_product(to_xp):
    """A product evaluates (n^2 + sum_I b_I^2) / 2 kernel entries (each pair once, the diagonal
    tiles whole), not n^2; every evaluation holds at most block_size * n / workers entries."""
    calls = []

    class Recording(Matern32):
        def gram(self, X1, X2=None):
            calls.append((X1.shape[0], X1.shape[0] if X2 is None else X2.shape[0]))
            return super().gram(X1, X2)

    n = 40
    X = np.random.default_rng(4).uniform(-1.0, 1.0, (n, 3))
    for workers in (1, 2):
        calls.clear()
        op = KernelMatrix(Recording(lengthscale=LS, xp=np, dtype=np.float64), X,
                          block_size=4, workers=workers)    # tile side isqrt(160 / workers)
        op @ np.ones((n, 2))
        side = int(np.sqrt(4 * n // workers))
        sizes = [min(n, s + side) - s for s in range(0, n, side)]
        assert sum(r * c for r, c in calls) == (n * n + sum(b * b for b in sizes)) // 2
        assert all(r * c <= 4 * n // workers for r, c in calls)


def test_kernel_matrix_workers_refused():
    with pytest.raises(ValueError, match="workers: expected an integer >= 1, got 0"):
        KernelMatrix(Matern32(xp=np, dtype=np.float64), np.ones((3, 1)), workers=0)
    with pytest.raises(ValueError, match="cg_options.workers: expected an integer >= 1 or None"):
        CGOptions(workers=0)
    with pytest.raises(ValueError, match="cg_options.dense_limit_mib: expected a number >= 0"):
        CGOptions(dense_limit_mib=-1.0)


# ----------------------------------------------------------------- dense or blocked by memory
@pytest.mark.parametrize("free_gib, n, dense_train, dense_predict", [
    # the case: K = 1.5 GB, three copies 4.4 GB <= a quarter of 22 GiB (5.5 GiB)
    (22.0, 13_500, True, True),
    (22.0, 16_000, False, True),    # three copies 6.1 GB > 5.5 GiB; 1.5 copies 3.1 GB
    (22.0, 23_000, False, False),   # 1.5 copies 6.3 GB
    (4.0, 13_500, False, False),
    (4.0, 6_000, True, True),       # three copies 0.86 GB <= 1 GiB
    (4.0, 7_000, False, True),      # 1.18 GB > 1 GiB; 1.5 copies 0.59 GB
])
def test_dense_path_by_available_memory(monkeypatch, free_gib, n, dense_train, dense_predict):
    monkeypatch.setattr(gpr_cg, "available_memory", lambda xp=None, device=None: free_gib * GIB)
    assert gpr_cg.dense_fits(n, CGOptions()) is dense_train
    assert gpr_cg.dense_fits(n, CGOptions(), need_vjp=False) is dense_predict
    # an explicit limit overrides the rule either way
    assert gpr_cg.dense_fits(n, CGOptions(dense_limit_mib=0.0)) is False
    assert gpr_cg.dense_fits(n, CGOptions(dense_limit_mib=3.0 * 8.0 * n * n / 2**20)) is True


def test_dense_limit_without_memory_information(monkeypatch):
    # where the system does not say, the old fixed 2 GiB: n = 9,000 fits (1.94e9 bytes), 9,500
    # does not (2.17e9)
    monkeypatch.setattr(gpr_cg, "available_memory", lambda xp=None, device=None: None)
    assert gpr_cg.dense_fits(9_000, CGOptions())
    assert not gpr_cg.dense_fits(9_500, CGOptions())


def test_model_takes_the_path_the_memory_allows(monkeypatch, xp, dtype, device, to_xp):
    n = 60
    rng = np.random.default_rng(5)
    X = rng.uniform(-2.0, 2.0, (n, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    kw = {"xp": xp, "dtype": dtype, "device": device}
    tol = 1e-2 if dtype == xp.float32 else 1e-3

    def model(solver):
        return GPR(Matern32(lengthscale=LS, **kw), Gaussian(variance=0.1, **kw), to_xp(X),
                   to_xp(y), solver=solver)

    free = {"bytes": 1.0 * GIB}
    monkeypatch.setattr(gpr_cg, "available_memory", lambda xp=None, device=None: free["bytes"])
    gp = model("cg")
    op, _ = gpr_cg.kernel_operator(gp, gp.X, gp.cg_options, False)
    assert isinstance(op, Dense)
    assert not model("auto").uses_cg
    mean_dense = host(gp.predict_f(to_xp(X[:5]))[0])
    # 60 x 60 x 3 float64 matrices (86,400 bytes) against a quarter of 300 KB; predictions'
    # 1.5 copies too
    free["bytes"] = 100e3
    op, _ = gpr_cg.kernel_operator(gp, gp.X, gp.cg_options, False)
    assert isinstance(op, KernelMatrix) and op.symmetric
    assert model("auto").uses_cg
    # predictions need K alone (1.5 copies: 43,200 bytes): 60 KB leaves training blocked and
    # predictions dense
    free["bytes"] = 4 * 60e3
    assert isinstance(gpr_cg.kernel_operator(gp, gp.X, gp.cg_options, True)[0], KernelMatrix)
    assert isinstance(gpr_cg.kernel_operator(gp, gp.X, gp.cg_options, False)[0], Dense)
    free["bytes"] = 100e3
    gp2 = model("cg")
    Ky = matern32_np(X, X, LS, 1.0) + (0.1 + float(gp2.jitter)) * np.eye(n)
    Ks = matern32_np(X[:5], X, LS, 1.0)
    exact = Ks @ np.linalg.solve(Ky, y - float(host(gp2.mean)))
    for got in (host(gp2.predict_f(to_xp(X[:5]))[0]), mean_dense):
        np.testing.assert_allclose(got - float(host(gp2.mean)), exact, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------- helpers
def test_meminfo_parsing(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24000000 kB\nMemFree:         1000 kB\n"
                 "MemAvailable:   22000000 kB\nBuffers:  10 kB\n")
    assert _parallel._meminfo_available(str(f)) == 22000000 * 1024
    f.write_text("MemTotal:       24000000 kB\n")
    assert _parallel._meminfo_available(str(f)) is None
    assert _parallel._meminfo_available(str(tmp_path / "missing")) is None
    free = B.available_memory(np)
    assert free is None or free > 0


def test_run_in_threads_order_errors_and_pool():
    assert B.run_in_threads(lambda w: w * w, 3) == [0, 1, 4]
    with B.blas_pool("numpy"):
        pools = B.run_in_threads(lambda w: getattr(_blas._POOL, "name", "scipy"), 2)
    assert pools == ["numpy", "numpy"]

    def fail(w):
        if w == 1:
            raise RuntimeError("worker 1 failed")
        return w

    with pytest.raises(RuntimeError, match="worker 1 failed"):
        B.run_in_threads(fail, 2)
    with pytest.raises(ValueError, match="workers: expected an integer >= 1"):
        B.run_in_threads(fail, 0)
    assert B.default_workers(np) == B.usable_cores() >= 1


def test_blocked_predictions_love_rides_the_solve(monkeypatch, xp, dtype, device, to_xp):
    """On the blocked path LOVE's Lanczos steps share the prediction solve's kernel passes:
    max(PCG iterations, Lanczos steps) passes, not their sum; with n steps LOVE is exact, so
    the variances match the dense NumPy posterior."""
    n = 40
    rng = np.random.default_rng(7)
    X = rng.uniform(-2.0, 2.0, (n, 3))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    Xs = rng.uniform(-2.0, 2.0, (6, 3))
    kw = {"xp": xp, "dtype": dtype, "device": device}
    gp = GPR(Matern32(lengthscale=LS, variance=1.2, **kw), Gaussian(variance=0.1, **kw),
             to_xp(X), to_xp(y), mean=0.1, solver="cg",
             cg_options={"dense_limit_mib": 0.0, "love_rank": n, "precond_rank": 5,
                         "predict_rtol": 1e-10, "variance_checks": 2})
    passes = []
    original = KernelMatrix._matmat
    monkeypatch.setattr(KernelMatrix, "_matmat",
                        lambda self, R: passes.append(R.shape[1]) or original(self, R))
    mean, var = gp.predict_f(to_xp(Xs))
    iters = gp.cg_predict_info["num_iter"]
    steps = gp._cg_cache[1]["love_Q"].shape[1]
    assert steps <= n and len(passes) == max(iters, steps) < iters + steps
    assert passes[0] == 1 + 2 + 1          # mean, 2 check columns, the Lanczos column
    Ky = matern32_np(X, X, LS, 1.2) + (0.1 + float(gp.jitter)) * np.eye(n)
    Ks = matern32_np(X, Xs, LS, 1.2)
    tol = 1e-4 if dtype == xp.float32 else 1e-8
    np.testing.assert_allclose(host(mean), 0.1 + Ks.T @ np.linalg.solve(Ky, y - 0.1),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(host(var), 1.2 - np.sum(Ks * np.linalg.solve(Ky, Ks), axis=0),
                               rtol=tol, atol=tol)
    assert gp.cg_predict_info["variance_check"] < 1e-6
