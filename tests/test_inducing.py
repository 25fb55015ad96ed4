"""k-means++/Lloyd and greedy-variance inducing points, against NumPy float64 references."""

import warnings

import numpy as np
import pytest
from kernel_refs_everyday import rbf_reference
from scipy.cluster.vq import kmeans2

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.inducing import _lloyd_step, greedy_variance, kmeans


class RBF:
    """A minimal squared-exponential covariance written for these tests (any backend)."""

    def __init__(self, lengthscale, variance=1.0):
        self.lengthscale, self.variance = lengthscale, variance

    def __call__(self, X1, X2):
        xp = B.get_namespace(X1, X2)
        A, C = X1 / self.lengthscale, X2 / self.lengthscale
        d2 = xp.sum(A * A, axis=1)[:, None] - 2.0 * (A @ C.T) + xp.sum(C * C, axis=1)[None, :]
        return self.variance * xp.exp(-0.5 * xp.maximum(d2, 0.0))

    def diag(self, X):
        xp = B.get_namespace(X)
        return xp.full((X.shape[0],), self.variance, dtype=X.dtype, device=B.device_of(X))


def rbf_dense(X, lengthscale, variance=1.0):
    return rbf_reference(X, X, lengthscale, variance)


def matern52_dense(X, lengthscale, variance):
    r = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2 / lengthscale**2).sum(-1))
    return variance * (1 + np.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-np.sqrt(5) * r)


def blobs(seed=0, k=4, per=30, d=3, spread=0.3):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, d)) + 40.0  # far from the origin on purpose
    X = np.concatenate([c + spread * rng.normal(size=(per, d)) for c in centres])
    labels = np.repeat(np.arange(k), per)
    order = rng.permutation(len(X))
    return X[order], labels[order]


def match_rows(A, B_):
    """Reorder the rows of A to the nearest rows of B_ (one-to-one)."""
    d = ((A[:, None, :] - B_[None, :, :]) ** 2).sum(-1)
    perm = np.argmin(d, axis=0)
    assert len(set(perm.tolist())) == len(B_), "centres do not pair up one-to-one"
    return A[perm]


def ktol(xp, dtype):
    return 1e-4 if dtype == xp.float32 else 1e-10


# ------------------------------------------------------------------------------------ k-means
def test_kmeans_recovers_blob_means(xp, dtype, to_xp, device):
    X, labels = blobs()
    truth = np.stack([X[labels == c].mean(0) for c in range(4)])
    for seed in (0, 1, 2):
        Z = kmeans(to_xp(X), 4, seed=seed, chunk_size=16)
        assert Z.dtype == dtype and B.device_of(Z) == device and tuple(Z.shape) == (4, 3)
        assert B.get_namespace(Z) is B.get_namespace(to_xp(X))
        Zn = B.to_numpy(Z).astype(np.float64)
        # the Lloyd fixed point on separated blobs is the mean of each blob
        np.testing.assert_allclose(match_rows(Zn, truth), truth, rtol=ktol(xp, dtype))


def test_kmeans_agrees_with_scipy_kmeans2():
    X, _ = blobs(seed=3, k=5, per=20, d=2)
    ref, _ = kmeans2(X, 5, minit="++", seed=7)
    Z = B.to_numpy(kmeans(X, 5, seed=7))
    np.testing.assert_allclose(match_rows(Z, ref), ref, rtol=1e-12)


def test_kmeans_result_is_a_lloyd_fixed_point(xp, dtype, to_xp):
    # overlapping clusters: many iterations, yet the output must be the mean of its Voronoi cell
    rng = np.random.default_rng(11)
    X = rng.uniform(size=(150, 2))
    Z = B.to_numpy(kmeans(to_xp(X), 6, seed=0, num_iter=200, tol=0.0)).astype(np.float64)
    near = np.argmin(((X[:, None, :] - Z[None, :, :]) ** 2).sum(-1), axis=1)
    assert set(near.tolist()) == set(range(6))
    means = np.stack([X[near == c].mean(0) for c in range(6)])
    np.testing.assert_allclose(Z, means, atol=10 * ktol(xp, dtype))


def test_kmeans_chunking_does_not_change_the_result(xp, dtype, to_xp):
    rng = np.random.default_rng(12)
    X = to_xp(rng.normal(size=(100, 3)))
    whole = kmeans(X, 7, seed=4, num_iter=12, chunk_size=100, tol=0.0)
    for chunk in (3, 41, 1000):
        parts = kmeans(X, 7, seed=4, num_iter=12, chunk_size=chunk, tol=0.0)
        np.testing.assert_allclose(B.to_numpy(parts), B.to_numpy(whole),
                                   rtol=ktol(xp, dtype), atol=ktol(xp, dtype))


def test_kmeanspp_seeding_distribution():
    # three points 0, 1, 3 on a line, m = 2 and no Lloyd step: the seed pair is drawn by
    # D^2 weighting, P{0,1} = (1/10 + 1/5)/3, P{0,3} = (9/10 + 9/13)/3, P{1,3} = (4/5 + 4/13)/3
    X = np.array([[0.0], [1.0], [3.0]])
    counts = {}
    trials = 600
    for seed in range(trials):
        pair = tuple(sorted(kmeans(X, 2, seed=seed, num_iter=0)[:, 0].tolist()))
        counts[pair] = counts.get(pair, 0) + 1
    want = {(0.0, 1.0): 0.1, (0.0, 3.0): (0.9 + 9 / 13) / 3, (1.0, 3.0): (0.8 + 4 / 13) / 3}
    assert set(counts) <= set(want)
    for pair, p in want.items():
        se = np.sqrt(p * (1 - p) / trials)
        assert abs(counts.get(pair, 0) / trials - p) < 4 * se, (pair, counts)


def test_kmeans_seeds_are_distinct_rows(xp, dtype, to_xp):
    # 5 distinct rows, each repeated: m = 5 must find all of them, m = 6 cannot exist
    base = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 3.0], [-1.0, 4.0]])
    X = np.concatenate([base] * 4)[np.random.default_rng(0).permutation(20)]
    for num_iter in (0, 10):
        Z = B.to_numpy(kmeans(to_xp(X), 5, seed=1, num_iter=num_iter)).astype(np.float64)
        np.testing.assert_allclose(Z[np.lexsort(Z.T[::-1])], base[np.lexsort(base.T[::-1])],
                                   atol=ktol(xp, dtype))
    with pytest.raises(ValueError, match="m: expected at most the number of distinct rows of "
                                         "X, got m = 6 .* only 5 distinct rows"):
        kmeans(to_xp(X), 6, seed=1)


def test_empty_cluster_is_reseeded_at_the_farthest_point(xp, dtype, to_xp):
    X = np.array([[0.0, 0.0], [0.2, 0.0], [5.0, 0.0], [5.0, 1.0], [9.0, 0.0]])
    # centre 1 sits far from every point (empty), centre 3 too: they take the farthest
    # points from their own centres, in order
    C = np.array([[0.1, 0.0], [100.0, 100.0], [5.0, 0.2], [-100.0, 50.0]])
    X1 = to_xp(np.concatenate([X, np.ones((5, 1))], axis=1))
    new, labels, empty = _lloyd_step(B.get_namespace(X1), X1, to_xp(C), 2)
    near = np.argmin(((X[:, None, :] - C[None, :, :]) ** 2).sum(-1), axis=1)
    dist = ((X - C[near]) ** 2).sum(-1)
    order = np.argsort(-dist, kind="stable")
    want = np.stack([X[near == 0].mean(0), X[order[0]], X[near == 2].mean(0), X[order[1]]])
    np.testing.assert_allclose(B.to_numpy(new), want, rtol=ktol(xp, dtype))
    np.testing.assert_array_equal(B.to_numpy(labels), near)
    np.testing.assert_array_equal(B.to_numpy(empty), [False, True, False, True])


def test_kmeans_m_equals_n_returns_the_points(xp, dtype, to_xp):
    X = np.random.default_rng(2).normal(size=(6, 2))
    Z = B.to_numpy(kmeans(to_xp(X), 6, seed=0)).astype(np.float64)
    np.testing.assert_allclose(match_rows(Z, X), X, atol=ktol(xp, dtype))


def test_kmeans_errors(xp, dtype, to_xp):
    X = to_xp(np.random.default_rng(0).normal(size=(10, 2)))
    bad = np.ones((10, 2))
    bad[3, 1] = np.nan
    cases = [
        (dict(X=to_xp(np.ones(10)), m=2), ShapeError, r"X: expected a 2-D array .* got shape"),
        (dict(X=to_xp(np.ones((0, 2))), m=1), ShapeError, "at least one row"),
        (dict(X=[[1.0, 2.0]], m=1), TypeError, "X: expected a 2-D array of shape .* got list"),
        (dict(X=to_xp(np.ones((4, 2), dtype=np.int64), dtype=None), m=1), TypeError,
         "X: expected a real floating dtype"),
        (dict(X=to_xp(bad), m=2), ValueError, "X: expected finite values, got 1 NaN"),
        (dict(X=X, m=0), ValueError, "m: expected an integer >= 1, got 0"),
        (dict(X=X, m=11), ValueError, r"m: expected at most n = 10 \(the rows of X\), got 11"),
        (dict(X=X, m=2.0), TypeError, "m: expected an integer"),
        (dict(X=X, m=2, num_iter=-1), ValueError, "num_iter"),
        (dict(X=X, m=2, tol=-1e-3), ValueError, "tol: expected a finite number >= 0"),
        (dict(X=X, m=2, chunk_size=0), ValueError, "chunk_size: expected an integer >= 1"),
        (dict(X=X, m=2, seed=-3), ValueError, "seed"),
        (dict(X=X, m=2, seed=None), TypeError, "seed: expected an integer"),
    ]
    for kwargs, exc, match in cases:
        kwargs.setdefault("seed", 0)
        with pytest.raises(exc, match=match):
            kmeans(kwargs.pop("X"), kwargs.pop("m"), **kwargs)


# ---------------------------------------------------------------------------- greedy variance
def pivoted_cholesky_reference(K, m):
    """Dense partial pivoted Cholesky in float64.

    Returns the pivots, the residual trace after each pick, and each pick's margin: the gap
    between the largest and the second largest residual variance, relative to the largest.
    """
    resid = np.diag(K).copy()
    L = np.zeros((len(K), m))
    pivots, traces, margins = [], [], []
    for j in range(m):
        i = int(np.argmax(resid))
        top2 = np.sort(resid)[-2:]
        margins.append((top2[1] - top2[0]) / top2[1])
        pivots.append(i)
        L[:, j] = (K[:, i] - L[:, :j] @ L[i, :j]) / np.sqrt(resid[i])
        resid = np.diag(K) - (L[:, :j + 1] ** 2).sum(1)
        resid[pivots] = 0.0
        traces.append(resid.sum())
    return np.array(pivots), np.array(traces), np.array(margins)


def residual_trace(K, idx):
    """tr(K - K_XZ K_ZZ^{-1} K_ZX), computed densely."""
    Kxz = K[:, idx]
    return np.trace(K) - np.trace(Kxz @ np.linalg.solve(K[np.ix_(idx, idx)], Kxz.T))


def comparable_prefix(margins, xp, dtype):
    """Number of leading picks that are not near-ties at the working precision: past a
    near-tie, either choice is right and the sequences may part."""
    small = np.flatnonzero(margins[1:] < (1e-4 if dtype == xp.float32 else 1e-10))
    return 1 + (small[0] if len(small) else len(margins) - 1)


def test_greedy_variance_matches_dense_pivoted_cholesky(xp, dtype, to_xp, device):
    rng = np.random.default_rng(21)
    X = rng.uniform(-2, 2, size=(60, 2))
    ref, _, margins = pivoted_cholesky_reference(rbf_dense(X, 1.5, 1.5), 20)
    upto = comparable_prefix(margins, xp, dtype)
    assert upto >= (10 if dtype == xp.float32 else 20)
    Z, idx = greedy_variance(to_xp(X), 20, RBF(1.5, 1.5))
    assert Z.dtype == dtype and B.device_of(Z) == device and idx.dtype == xp.int64
    np.testing.assert_array_equal(B.to_numpy(idx)[:upto], ref[:upto])
    np.testing.assert_array_equal(B.to_numpy(Z), B.to_numpy(to_xp(X))[B.to_numpy(idx)])


def test_greedy_variance_residual_trace_decreases(xp, dtype, to_xp):
    rng = np.random.default_rng(22)
    X = rng.normal(size=(50, 3))
    K = rbf_dense(X, 1.2)
    _, idx = greedy_variance(to_xp(X), 12, RBF(1.2))
    idx = B.to_numpy(idx)
    traces = [residual_trace(K, idx[:j]) for j in range(1, 13)]
    assert np.all(np.diff(traces) < 0.0) and traces[0] < np.trace(K)
    # each pick is the point of largest conditional variance given the earlier picks
    for j in range(1, 12):
        S = idx[:j]
        cond = np.diag(K) - np.einsum("ij,ji->i", K[:, S], np.linalg.solve(K[np.ix_(S, S)],
                                                                          K[S, :]))
        cond[S] = -np.inf
        assert np.max(cond) - cond[idx[j]] <= 1e-4 * np.max(cond)


def test_greedy_variance_threshold_stops_on_the_residual_trace(xp, dtype, to_xp):
    rng = np.random.default_rng(23)
    X = rng.uniform(size=(40, 2))
    _, traces, _ = pivoted_cholesky_reference(rbf_dense(X, 0.5), 16)
    for want in (5, 13):  # within the first block of checks, and in a later one
        # between the residual traces after want and after want - 1 points
        threshold = float(np.sqrt(traces[want - 1] * traces[want - 2]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # stopping on the threshold is not worth a warning
            Z, idx = greedy_variance(to_xp(X), 16, RBF(0.5), threshold=threshold)
        assert tuple(Z.shape) == (want, 2) and tuple(idx.shape) == (want,)
    # a threshold above the prior trace still returns one point
    _, idx = greedy_variance(to_xp(X), 10, RBF(0.5), threshold=1e3)
    assert tuple(idx.shape) == (1,)


def test_greedy_variance_stops_at_the_numerical_rank(xp, dtype, to_xp):
    base = np.array([[0.0, 0.0], [1.0, 0.5], [-1.0, 2.0], [2.0, -1.0]])
    grid = np.stack(np.meshgrid(np.arange(4.0), np.arange(3.0)), -1).reshape(-1, 2)
    # 4 and 12 distinct rows: the stop falls in the first block of checks, and in a later one
    for distinct, m in ((base, 9), (base, 11), (grid, 15)):
        X = np.concatenate([distinct] * 3)[np.random.default_rng(1).permutation(3 * len(distinct))]
        with pytest.warns(UserWarning, match=rf"returning {len(distinct)} < m = {m} points"):
            Z, idx = greedy_variance(to_xp(X), m, RBF(0.7))
        Zn = B.to_numpy(Z).astype(np.float64)
        np.testing.assert_array_equal(np.unique(Zn, axis=0), np.unique(distinct, axis=0))


def test_greedy_variance_with_gpnum_matern52(xp, dtype, to_xp, device):
    kernels = pytest.importorskip("gpnum.kernels")
    rng = np.random.default_rng(24)
    X = rng.uniform(size=(45, 3))
    ell, var = np.array([0.3, 0.6, 1.0]), 2.0
    k = kernels.Matern52(lengthscale=to_xp(ell), variance=var, xp=xp, dtype=dtype, device=device)
    ref, _, margins = pivoted_cholesky_reference(matern52_dense(X, ell, var), 15)
    upto = comparable_prefix(margins, xp, dtype)
    assert upto >= (8 if dtype == xp.float32 else 15)
    _, idx = greedy_variance(to_xp(X), 15, k)
    np.testing.assert_array_equal(B.to_numpy(idx)[:upto], ref[:upto])


class _BadKernel(RBF):
    def __init__(self, column=None, diag=None):
        super().__init__(1.0)
        self._column, self._diag = column, diag

    def __call__(self, X1, X2):
        return self._column(X1, X2) if self._column else super().__call__(X1, X2)

    def diag(self, X):
        return self._diag(X) if self._diag else super().diag(X)


def test_greedy_variance_errors(xp, dtype, to_xp):
    Xn = np.random.default_rng(0).normal(size=(8, 2))
    X = to_xp(Xn)
    other = xp.float64 if dtype == xp.float32 else xp.float32
    cases = [
        (dict(m=0), ValueError, "m: expected an integer >= 1"),
        (dict(m=9), ValueError, r"m: expected at most n = 8"),
        (dict(threshold=-1.0), ValueError, "threshold: expected a finite number >= 0"),
        (dict(kernel=lambda a, b: a @ b.T), TypeError, "kernel: expected a covariance function"),
        (dict(kernel=_BadKernel(column=lambda a, b: a @ a.T)), ShapeError,
         r"kernel\(X, X\[i:i\+1\]\): expected shape \(8, 1\), got \(8, 8\)"),
        (dict(kernel=_BadKernel(diag=lambda a: a[:, 0] * 0.0 - 1.0)), ValueError,
         "kernel.diag.X.: expected variances >= 0"),
        (dict(kernel=_BadKernel(diag=lambda a: a[:, 0] * 0.0 + float("nan"))), ValueError,
         r"kernel.diag\(X\): expected finite values"),
        (dict(kernel=_BadKernel(diag=lambda a: a[:3, 0])), ShapeError,
         r"kernel.diag\(X\): expected shape \(8,\), got \(3,\)"),
        (dict(kernel=_BadKernel(diag=lambda a: B.get_namespace(a).astype(a[:, 0], other))),
         TypeError, r"kernel.diag\(X\): expected dtype"),
        (dict(kernel=_BadKernel(diag=lambda a: [1.0] * 8)), TypeError,
         r"kernel.diag\(X\): expected an array"),
        (dict(X=to_xp(Xn[:, 0])), ShapeError, "X: expected a 2-D array"),
    ]
    for kwargs, exc, match in cases:
        args = dict(X=X, m=3, kernel=RBF(1.0))
        args.update(kwargs)
        with pytest.raises(exc, match=match):
            greedy_variance(args.pop("X"), args.pop("m"), args.pop("kernel"), **args)
