"""msminres against dense float64 solves on kernel matrices of condition 1e2..1e6."""

from __future__ import annotations

import numpy as np
import pytest
from test_linalg_cases import RBFKernel, cast_reference, kernel_problem, torch_single_thread  # noqa: F401

from gpnum.backend import asarray, to_numpy
from gpnum.errors import ConvergenceWarning, ShapeError
from gpnum.linalg import AddedDiag, KernelMatrix, Workspace, msminres

N = 32


def _shifts(s):
    return {1: [0.0], 2: [0.0, 1e-2], 16: [0.0] + list(np.logspace(-4, 1, 15))}[s]


def _rtol(xp, dtype, cond):
    # In float32 the true residual stagnates near eps32 * cond (5e-4 at cond 1e4, 5e-2 at
    # 1e6, measured) while the recurrence keeps falling: ask for what float32 can deliver.
    if dtype == xp.float32:
        return {1e2: 1e-4, 1e4: 2e-3, 1e6: 1e-1}[cond]
    return 1e-8


# Without reorthogonalisation Lanczos loses orthogonality and MINRES needs several times n
# iterations on ill-conditioned float32 problems; they are cheap at n = 32.
MAXITER = 40 * N


def _check_solution(res, A, B, shifts, rtol, cond):
    x = to_numpy(res.x).astype(np.float64)
    n = A.shape[0]
    for j, s in enumerate(shifts):
        As = A + s * np.eye(n)
        r = np.linalg.norm(B - As @ x[j], axis=0) / np.linalg.norm(B, axis=0)
        # The true residual of every (shift, column) meets the requested tolerance.
        assert r.max() <= 2.0 * rtol, (s, r.max(), rtol)
        ref = np.linalg.solve(As, B)
        err = np.linalg.norm(x[j] - ref, axis=0) / np.linalg.norm(ref, axis=0)
        # Forward error bound: ||x - x*|| / ||x*|| <= cond(A + sI) * relative residual.
        assert err.max() <= 2.0 * np.linalg.cond(As) * rtol + 1e-12


@pytest.mark.parametrize("cond,s,k", [
    (1e2, 1, 64), (1e2, 2, 64), (1e2, 16, 64), (1e2, 16, 1),
    (1e4, 1, 64), (1e4, 2, 64), (1e4, 16, 64), (1e4, 16, 1),
    (1e6, 1, 64), (1e6, 2, 64), (1e6, 16, 64), (1e6, 16, 1),
])
def test_msminres_matches_dense_solves(xp, dtype, device, to_xp, cond, s, k):
    X, s2, A = kernel_problem(N, cond)
    B = np.random.default_rng(1).normal(size=(N, k))
    shifts = _shifts(s)
    rtol = _rtol(xp, dtype, cond)
    Ax = to_xp(A)
    res = msminres(Ax, to_xp(B), shifts, rtol=rtol, maxiter=MAXITER)
    assert res.info == 0, res.message
    assert tuple(res.x.shape) == (s, N, k) and res.x.dtype == dtype
    assert tuple(res.residual_norm.shape) == (s, k)
    assert bool(np.all(to_numpy(res.converged)))
    _check_solution(res, cast_reference(A, xp, dtype, device), B, shifts, rtol, cond)


def test_msminres_on_lazy_kernel_plus_noise(xp, dtype, device, to_xp):
    cond = 1e4
    X, s2, A = kernel_problem(N, cond)
    B = np.random.default_rng(2).normal(size=(N, 5))
    op = AddedDiag(KernelMatrix(RBFKernel(1.0, 0.3), to_xp(X), block_size=7), s2)
    rtol = _rtol(xp, dtype, cond)
    shifts = _shifts(16)
    res = msminres(op, to_xp(B), shifts, rtol=rtol, maxiter=MAXITER)
    assert res.info == 0
    _check_solution(res, to_numpy(op.to_dense()).astype(np.float64), B, shifts, rtol, cond)


@pytest.mark.parametrize("chunk", [2, 5])
def test_msminres_chunked_low_memory_path_agrees(xp, dtype, device, to_xp, chunk):
    """Folding the basis every 2 or 5 iterations (the low-memory recurrence) still solves.

    The short recurrence has a larger residual gap than the stored basis (about eps cond^2
    against eps cond; Sleijpen, van der Vorst & Modersitzki 2000), so this uses cond 1e3.
    """
    cond = 1e3
    X, s2, A = kernel_problem(N, cond)
    B = np.random.default_rng(3).normal(size=(N, 3))
    shifts = _shifts(16)
    rtol = 1e-2 if dtype == xp.float32 else 1e-8
    itemsize = 4 if dtype == xp.float32 else 8
    res = msminres(to_xp(A), to_xp(B), shifts, rtol=rtol, maxiter=MAXITER,
                   max_basis_bytes=chunk * N * 3 * itemsize)
    assert res.info == 0
    _check_solution(res, cast_reference(A, xp, dtype, device), B, shifts, rtol, cond)


def test_msminres_vector_right_hand_side(to_xp, xp, dtype, device):
    X, s2, A = kernel_problem(N, 1e2)
    b = np.random.default_rng(4).normal(size=N)
    res = msminres(to_xp(A), to_xp(b), [0.5, 2.0], rtol=1e-5)
    assert tuple(res.x.shape) == (2, N) and tuple(res.residual_norm.shape) == (2,)
    Ar = cast_reference(A, xp, dtype, device)
    for j, s in enumerate([0.5, 2.0]):
        ref = np.linalg.solve(Ar + s * np.eye(N), b)
        np.testing.assert_allclose(to_numpy(res.x[j, :]), ref, rtol=1e-3, atol=1e-4)


def test_msminres_stops_per_column_not_on_a_mean(to_xp, xp, dtype, device):
    """Three columns that converge in one step next to a hard one: a stopping test on the
    mean residual would stop at 4x the tolerance of the hard column; ours may not."""
    rng = np.random.default_rng(5)
    Q, _ = np.linalg.qr(rng.normal(size=(N, N)))
    A = (Q * np.logspace(-3, 0, N)) @ Q.T
    B = np.concatenate([Q[:, -3:], rng.normal(size=(N, 1))], axis=1)
    rtol = 1e-4 if dtype == xp.float32 else 1e-8
    res = msminres(to_xp(A), to_xp(B), [0.0], rtol=rtol)
    x = to_numpy(res.x)[0].astype(np.float64)
    Ar = cast_reference(A, xp, dtype, device)
    r = np.linalg.norm(B - Ar @ x, axis=0) / np.linalg.norm(B, axis=0)
    assert r.max() <= 1.5 * rtol


def test_msminres_zero_column_and_exact_invariant_subspace(to_xp, xp, dtype):
    A = np.diag(np.arange(1.0, N + 1.0))
    B = np.zeros((N, 3))
    B[0, 1] = 2.0          # an eigenvector: Lanczos breaks down after one step
    B[:, 2] = 1.0
    res = msminres(to_xp(A), to_xp(B), [0.0, 1.0], rtol=1e-6)
    assert res.info == 0
    x = to_numpy(res.x)
    assert np.all(np.isfinite(x))
    np.testing.assert_array_equal(x[:, :, 0], 0.0)
    np.testing.assert_allclose(x[0, 0, 1], 2.0, rtol=1e-6)
    np.testing.assert_allclose(x[1, 0, 1], 1.0, rtol=1e-6)
    np.testing.assert_allclose(x[1, :, 2], 1.0 / (np.arange(1.0, N + 1.0) + 1.0), rtol=1e-4)


def test_msminres_not_converging_warns_and_reports(to_xp):
    X, s2, A = kernel_problem(N, 1e6)
    B = np.random.default_rng(6).normal(size=(N, 4))
    with pytest.warns(ConvergenceWarning, match="did not converge in 3 iterations"):
        res = msminres(to_xp(A), to_xp(B), [0.0, 1e-3], rtol=1e-10, maxiter=3)
    assert res.info == 3 and res.num_iter == 3
    assert not bool(np.all(to_numpy(res.converged)))
    assert "did not converge" in repr(res)


def test_msminres_nan_in_operator_is_a_breakdown(to_xp):
    A = np.eye(N)
    A[3, 5] = np.nan
    with pytest.warns(ConvergenceWarning, match="non-finite"):
        res = msminres(to_xp(A), to_xp(np.ones((N, 2))), [0.0], rtol=1e-6, check_every=2)
    assert res.info == -1


def test_msminres_relative_residual_property(to_xp):
    X, s2, A = kernel_problem(N, 1e2)
    B = np.random.default_rng(7).normal(size=(N, 2)) * np.array([1.0, 100.0])
    res = msminres(to_xp(A), to_xp(B), [0.0, 1.0], rtol=1e-4)
    rel = to_numpy(res.relative_residual)
    np.testing.assert_allclose(rel, to_numpy(res.residual_norm) / np.linalg.norm(B, axis=0),
                               rtol=1e-5)
    assert rel.max() <= 1e-4


@pytest.mark.parametrize("shifts,err,match", [
    ([0.0, -1.0], ValueError, r"shifts: expected values >= 0.*-1\.0"),
    ([0.0, float("nan")], ValueError, r"shifts: expected finite values"),
    ([], ShapeError, r"shifts: expected shape \(s,\) with s >= 1, got \(0,\)"),
    ([[0.0, 1.0]], ShapeError, r"shifts: expected shape \(s,\)"),
    ("abc", TypeError, "shifts: expected a sequence of numbers"),
])
def test_msminres_bad_shifts(to_xp, shifts, err, match):
    with pytest.raises(err, match=match):
        msminres(to_xp(np.eye(4)), to_xp(np.ones((4, 2))), shifts)


def test_msminres_bad_inputs(to_xp, xp):
    A, B = to_xp(np.eye(4)), to_xp(np.ones((4, 2)))
    with pytest.raises(ShapeError, match=r"B: expected shape \(4,\) or \(4, k\), got \(5, 2\)"):
        msminres(A, to_xp(np.ones((5, 2))), [0.0])
    with pytest.raises(ShapeError, match=r"A: expected a square operator.*got \(4, 3\)"):
        msminres(to_xp(np.ones((4, 3))), B, [0.0])
    bad = np.ones((4, 2))
    bad[1, 1] = np.inf
    with pytest.raises(ValueError, match="B: expected finite values, got infinite"):
        msminres(A, to_xp(bad), [0.0])
    with pytest.raises(ValueError, match="rtol: expected a finite number >= 0"):
        msminres(A, B, [0.0], rtol=-1.0)
    with pytest.raises(ValueError, match="maxiter: expected an integer >= 1"):
        msminres(A, B, [0.0], maxiter=0)
    with pytest.raises(ValueError, match="max_basis_bytes"):
        msminres(A, B, [0.0], max_basis_bytes=0)
    with pytest.raises(ValueError, match="check_every"):
        msminres(A, B, [0.0], check_every=0)
    other = xp.float32 if B.dtype == xp.float64 else xp.float64
    with pytest.raises(TypeError, match="B: expected dtype"):
        msminres(A, asarray(np.ones((4, 2)), dtype=other, like=B), [0.0])


def test_msminres_workspace_is_reused_and_gives_the_same_solutions(to_xp, xp, dtype, device):
    X, s2, A = kernel_problem(N, 1e2)
    B = np.random.default_rng(9).normal(size=(N, 4))
    shifts = _shifts(2)
    ws = Workspace()
    assert ws.nbytes == 0 and "0.0 MiB" in repr(ws)
    first = msminres(to_xp(A), to_xp(B), shifts, rtol=1e-4, workspace=ws)
    held = ws.nbytes
    itemsize = 4 if dtype == xp.float32 else 8
    assert held >= first.num_iter * N * 4 * itemsize
    buffer = ws._buffer
    again = msminres(to_xp(A), to_xp(2.0 * B), shifts, rtol=1e-4, workspace=ws)
    assert ws._buffer is buffer                       # no new allocation
    plain = msminres(to_xp(A), to_xp(2.0 * B), shifts, rtol=1e-4)
    np.testing.assert_allclose(to_numpy(again.x), 2.0 * to_numpy(first.x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_numpy(again.x), to_numpy(plain.x), rtol=1e-12, atol=0)
    ws.release()
    assert ws.nbytes == 0
    with pytest.raises(TypeError, match="workspace: expected a gpnum.linalg.Workspace"):
        msminres(to_xp(A), to_xp(B), shifts, workspace=object())


def test_msminres_callable_operator_returning_its_input(to_xp):
    """A callable may return shared memory (here the identity returns its argument): the
    solver must not update it in place, and B must stay untouched."""
    B = np.random.default_rng(10).normal(size=(N, 3))
    Bx = to_xp(B)
    res = msminres(lambda X: X, Bx, [0.0, 1.0, 3.0], rtol=1e-6)
    assert res.info == 0
    x = to_numpy(res.x)
    for j, s in enumerate([0.0, 1.0, 3.0]):
        np.testing.assert_allclose(x[j], B / (1.0 + s), rtol=1e-5)
    np.testing.assert_array_equal(to_numpy(Bx), B.astype(to_numpy(Bx).dtype))
