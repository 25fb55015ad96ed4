"""pcg against dense float64 solves on kernel matrices of condition 1e2..1e6."""

from __future__ import annotations

import numpy as np
import pytest
from test_linalg_cases import RBFKernel, cast_reference, kernel_problem, torch_single_thread  # noqa: F401

from gpnum.backend import asarray, to_numpy
from gpnum.errors import ConvergenceWarning, ShapeError
from gpnum.linalg import AddedDiag, KernelMatrix, pcg, pivoted_cholesky_preconditioner

N = 32


def _rtol(xp, dtype, cond):
    # float32 CG stagnates near eps32 * cond (measured 1e-3 at cond 1e4, 0.16 at 1e6).
    if dtype == xp.float32:
        return {1e2: 1e-4, 1e4: 5e-3, 1e6: 3e-1}[cond]
    return 1e-8


def _check(res, A, B, rtol):
    x = to_numpy(res.x).astype(np.float64)
    r = np.linalg.norm(B - A @ x, axis=0) / np.linalg.norm(B, axis=0)
    assert r.max() <= 2.0 * rtol, (r.max(), rtol)
    ref = np.linalg.solve(A, B)
    err = np.linalg.norm(x - ref, axis=0) / np.linalg.norm(ref, axis=0)
    assert err.max() <= 2.0 * np.linalg.cond(A) * rtol + 1e-12


@pytest.mark.parametrize("cond", [1e2, 1e4, 1e6])
@pytest.mark.parametrize("k", [1, 16])
def test_pcg_matches_dense_solves(xp, dtype, device, to_xp, cond, k):
    X, s2, A = kernel_problem(N, cond)
    B = np.random.default_rng(1).normal(size=(N, k))
    rtol = _rtol(xp, dtype, cond)
    res = pcg(to_xp(A), to_xp(B), rtol=rtol, maxiter=40 * N)
    assert res.info == 0, res.message
    assert tuple(res.x.shape) == (N, k) and res.x.dtype == dtype
    assert bool(np.all(to_numpy(res.converged)))
    _check(res, cast_reference(A, xp, dtype, device), B, rtol)


def test_pcg_lazy_kernel_with_pivoted_cholesky_preconditioner(xp, dtype, to_xp):
    cond = 1e4
    X, s2, A = kernel_problem(N, cond)
    op = AddedDiag(KernelMatrix(RBFKernel(1.0, 0.3), to_xp(X), block_size=10), s2)
    B = np.random.default_rng(2).normal(size=(N, 4))
    rtol = _rtol(xp, dtype, cond)
    plain = pcg(op, to_xp(B), rtol=rtol, maxiter=40 * N)
    M = pivoted_cholesky_preconditioner(op, rank=12)
    pre = pcg(op, to_xp(B), rtol=rtol, maxiter=40 * N, M=M)
    assert plain.info == 0 and pre.info == 0
    # A rank-12 factor captures the large eigenvalues: far fewer iterations.
    assert pre.num_iter < plain.num_iter / 2, (pre.num_iter, plain.num_iter)
    _check(pre, to_numpy(op.to_dense()).astype(np.float64), B, rtol)


def test_pcg_callable_operator_preconditioner_and_x0(to_xp, xp, dtype, device):
    X, s2, A = kernel_problem(N, 1e2)
    B = np.random.default_rng(3).normal(size=(N, 3))
    Ax = to_xp(A)
    dinv = to_xp(1.0 / np.diag(A))
    x0 = to_xp(np.linalg.solve(A, B) + 0.1)
    rtol = _rtol(xp, dtype, 1e2)
    res = pcg(lambda V: Ax @ V, to_xp(B), rtol=rtol, M=lambda R: dinv[:, None] * R, x0=x0)
    assert res.info == 0
    _check(res, cast_reference(A, xp, dtype, device), B, rtol)


def test_pcg_vector_and_zero_right_hand_side(to_xp, xp, dtype, device):
    X, s2, A = kernel_problem(N, 1e2)
    b = np.random.default_rng(4).normal(size=N)
    res = pcg(to_xp(A), to_xp(b), rtol=1e-4)
    assert tuple(res.x.shape) == (N,) and res.residual_norm.ndim == 0
    ref = np.linalg.solve(cast_reference(A, xp, dtype, device), b)
    np.testing.assert_allclose(to_numpy(res.x), ref, rtol=1e-2, atol=1e-3)
    B = np.zeros((N, 2))
    B[:, 1] = b
    res = pcg(to_xp(A), to_xp(B), rtol=1e-4)
    assert res.info == 0
    np.testing.assert_array_equal(to_numpy(res.x[:, 0]), 0.0)


def test_pcg_columns_stop_on_their_own_residual(to_xp, xp, dtype, device):
    """A column that converges in one step is frozen there while the others continue."""
    rng = np.random.default_rng(5)
    Q, _ = np.linalg.qr(rng.normal(size=(N, N)))
    A = (Q * np.logspace(-3, 0, N)) @ Q.T
    B = np.stack([Q[:, 0], rng.normal(size=N)], axis=1)
    rtol = 1e-4 if dtype == xp.float32 else 1e-8
    res = pcg(to_xp(A), to_xp(B), rtol=rtol, maxiter=20 * N)
    assert res.info == 0 and res.num_iter > 5
    x = to_numpy(res.x).astype(np.float64)
    np.testing.assert_allclose(x[:, 0], Q[:, 0] * 1e3, rtol=1e-3)
    Ar = cast_reference(A, xp, dtype, device)
    r = np.linalg.norm(B - Ar @ x, axis=0) / np.linalg.norm(B, axis=0)
    assert r.max() <= 2.0 * rtol
    rel = to_numpy(res.relative_residual)
    assert rel.shape == (2,) and rel.max() <= rtol


def test_pcg_negative_curvature_is_a_breakdown(to_xp):
    rng = np.random.default_rng(6)
    Q, _ = np.linalg.qr(rng.normal(size=(N, N)))
    A = (Q * np.linspace(-1.0, 1.0, N)) @ Q.T          # indefinite
    B = np.stack([Q[:, 0], Q[:, -1]], axis=1)          # column 0: curvature -1; column 1: +1
    with pytest.warns(ConvergenceWarning, match=r"negative curvature.*column\(s\) \[0\].*not "
                                                r"positive definite"):
        res = pcg(to_xp(A), to_xp(B), rtol=1e-4)
    assert res.info == -1
    np.testing.assert_array_equal(to_numpy(res.breakdown), [True, False])
    assert bool(to_numpy(res.converged)[1])


def test_pcg_indefinite_preconditioner_is_a_breakdown(to_xp):
    A = np.eye(N) * 2.0
    B = np.random.default_rng(7).normal(size=(N, 2))
    M = -np.eye(N)
    with pytest.warns(ConvergenceWarning, match=r"r\^T M r <= 0.*preconditioner M is not "
                                                r"positive definite"):
        res = pcg(to_xp(A), to_xp(B), M=to_xp(M))
    assert res.info == -2


def test_pcg_nan_in_operator(to_xp):
    A = np.eye(N)
    A[2, 3] = np.nan
    with pytest.warns(ConvergenceWarning, match="non-finite values"):
        res = pcg(to_xp(A), to_xp(np.ones((N, 2))), check_every=3)
    assert res.info == -3


def test_pcg_not_converging_warns(to_xp):
    X, s2, A = kernel_problem(N, 1e6)
    B = np.random.default_rng(8).normal(size=(N, 3))
    with pytest.warns(ConvergenceWarning, match=r"did not converge in 4 iterations: 3 of 3"):
        res = pcg(to_xp(A), to_xp(B), rtol=1e-12, maxiter=4)
    assert res.info == 4 and res.num_iter == 4
    assert "did not converge" in repr(res) and res.status == res.message


def test_pcg_bad_inputs(to_xp, xp, dtype):
    A, B = to_xp(np.eye(4)), to_xp(np.ones((4, 2)))
    with pytest.raises(ShapeError, match=r"B: expected shape \(4,\) or \(4, k\), got \(3, 2\)"):
        pcg(A, to_xp(np.ones((3, 2))))
    with pytest.raises(ShapeError, match=r"A: expected a square operator of shape \(n, n\), "
                                         r"got \(4, 3\)"):
        pcg(to_xp(np.ones((4, 3))), B)
    bad = np.ones((4, 2))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"B: expected finite values, got 1 NaN value\(s\)"):
        pcg(A, to_xp(bad))
    with pytest.raises(ValueError, match="x0: expected finite values"):
        pcg(A, B, x0=to_xp(bad))
    with pytest.raises(ShapeError, match=r"x0: expected an array of B's shape \(4, 2\), "
                                         r"got \(4,\)"):
        pcg(A, B, x0=to_xp(np.ones(4)))
    with pytest.raises(ShapeError, match=r"M: expected an operator of shape \(4, 4\)"):
        pcg(A, B, M=to_xp(np.eye(3)))
    with pytest.raises(ValueError, match="atol: expected a finite number >= 0"):
        pcg(A, B, atol=float("nan"))
    with pytest.raises(TypeError, match="rtol: expected a real number"):
        pcg(A, B, rtol="small")
    with pytest.raises(TypeError, match="B: expected an array"):
        pcg(A, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="B: expected a real floating dtype"):
        pcg(A, to_xp(np.ones((4, 2), dtype=np.int64), dtype=None))
    other = xp.float32 if dtype == xp.float64 else xp.float64
    with pytest.raises(TypeError, match="B: expected dtype"):
        pcg(A, asarray(np.ones((4, 2)), dtype=other, like=B))


def test_pcg_operator_and_right_hand_side_from_two_libraries(backend, to_xp):
    if backend.name == "numpy":
        pytest.skip("needs a second array library")
    with pytest.raises(TypeError, match="B: expected an array of A's namespace"):
        pcg(np.eye(4), to_xp(np.ones((4, 2))))


def test_pcg_lanczos_stopping_rules():
    """stop="all" runs until every column's relative residual (recomputed as b - A x) is at
    most rtol; stop="mean" until their mean is, not longer (one iteration fewer misses it),
    and not past "all"; other rules are refused by pcg_lanczos and CGOptions."""
    import warnings

    from gpnum.errors import ConvergenceWarning
    from gpnum.linalg import pcg_lanczos
    from gpnum.models._gpr_cg import CGOptions

    rng = np.random.default_rng(11)
    n = 150
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = (Q * np.geomspace(1e-3, 1.0, n)) @ Q.T
    # columns of different difficulty: one in the top of the spectrum, two spread over it
    B = np.stack([Q[:, -1] + 1e-3 * Q[:, 0], rng.standard_normal(n), rng.standard_normal(n)],
                 axis=1)

    def rel(x):
        return np.linalg.norm(B - A @ x, axis=0) / np.linalg.norm(B, axis=0)

    rtol = 1e-3
    every = pcg_lanczos(A, B, rtol=rtol, min_iter=1, maxiter=n)
    mean = pcg_lanczos(A, B, rtol=rtol, min_iter=1, maxiter=n, stop="mean")
    assert every.converged and mean.converged
    assert np.all(rel(every.x) <= 1.01 * rtol)
    assert np.mean(rel(mean.x)) <= 1.01 * rtol < np.max(rel(mean.x))
    assert mean.num_iter < every.num_iter
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        short = pcg_lanczos(A, B, rtol=rtol, min_iter=1, maxiter=mean.num_iter - 1, stop="mean")
    assert not short.converged and np.mean(rel(short.x)) > rtol
    assert any(issubclass(w.category, ConvergenceWarning) and "mean relative residual"
               in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="stop: expected 'all' or 'mean'"):
        pcg_lanczos(A, B, stop="max")
    with pytest.raises(ValueError, match="train_stop: expected 'all' or 'mean'"):
        CGOptions(train_stop="first")
