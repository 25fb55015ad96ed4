"""The operator contract: every operator checked method by method against its dense matrix.

Each case describes an operator by its parameters (NumPy float64), how to build it on the
backend under test, and an independent dense NumPy reference of its matrix. The contract
class runs every check on every case; ``param_vjp`` is checked against central finite
differences of ``sum(U * (K(params) @ V))`` computed on the dense reference.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gradcheck import check_grad
from test_linalg_cases import RBFKernel, rbf_numpy, torch_single_thread  # noqa: F401

from gpnum.backend import asarray, get_namespace, to_numpy
from gpnum.errors import ShapeError
from gpnum.linalg import (
    AddedDiag,
    Dense,
    Diagonal,
    KernelMatrix,
    LinearOperator,
    LowRank,
    Scaled,
    Sum,
    Transposed,
    WoodburyInverse,
    aslinearoperator,
)

N, M_COLS = 6, 4


def _rng(seed=0):
    return np.random.default_rng(seed)


def _tol(xp, dtype):
    return 2e-5 if dtype == xp.float32 else 1e-12


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


class OperatorContract:
    """Checks every operator must pass. Subclasses define the case."""

    square = True
    #: name -> path of keys into the param_vjp dict (None: the operator has no parameters)
    grad_paths: dict | None = {}
    #: the TypeError message expected from param_vjp when grad_paths is None
    no_grad_match = "no parameters"

    def params(self):
        raise NotImplementedError

    def build(self, p, conv):
        raise NotImplementedError

    def dense(self, p):
        raise NotImplementedError

    # --- helpers -------------------------------------------------------------------------

    def _case(self, to_xp):
        p = self.params()
        return p, self.build(p, to_xp), self.dense(p)

    def _close(self, got, want, xp, dtype):
        got = to_numpy(got).astype(np.float64)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=_tol(xp, dtype), atol=_tol(xp, dtype) * scale)

    # --- the contract --------------------------------------------------------------------

    def test_products_and_structure_match_dense(self, to_xp, xp, dtype, device):
        p, op, K = self._case(to_xp)
        assert isinstance(op, LinearOperator)
        assert op.shape == K.shape and op.dtype == dtype and op.xp is xp
        assert op.device == device or device is None
        # op @ block, op @ vector
        V = _rng(1).normal(size=(K.shape[1], 3))
        self._close(op @ to_xp(V), K @ V, xp, dtype)
        out = op @ to_xp(V[:, 0])
        assert tuple(out.shape) == (K.shape[0],)
        self._close(out, K @ V[:, 0], xp, dtype)
        # transpose
        U = _rng(2).normal(size=(K.shape[0], 2))
        assert op.T.shape == K.T.shape
        self._close(op.T @ to_xp(U), K.T @ U, xp, dtype)
        self._close(op.rmatmat(to_xp(U)), K.T @ U, xp, dtype)
        self._close(op.T.to_dense(), K.T, xp, dtype)
        # dense, columns, diagonal
        self._close(op.to_dense(), K, xp, dtype)
        idx = np.array([K.shape[1] - 1, 0, 2])
        self._close(op.columns(to_xp(idx, dtype=None)), K[:, idx], xp, dtype)
        if self.square:
            self._close(op.diagonal(), np.diag(K), xp, dtype)
        else:
            with pytest.raises(ShapeError, match="diagonal: expected a square operator"):
                op.diagonal()

    def test_algebra(self, to_xp, xp, dtype):
        p, op, K = self._case(to_xp)
        V = _rng(3).normal(size=(K.shape[1], 2))
        self._close((2.5 * op) @ to_xp(V), 2.5 * K @ V, xp, dtype)
        self._close((op * 0.5) @ to_xp(V), 0.5 * K @ V, xp, dtype)
        self._close((-op) @ to_xp(V), -K @ V, xp, dtype)
        self._close((op + op) @ to_xp(V), 2.0 * K @ V, xp, dtype)
        assert isinstance(op + op, Sum)
        if self.square:
            d = _rng(4).uniform(0.5, 1.5, size=K.shape[0])
            added = op + Diagonal(to_xp(d))
            assert isinstance(added, (AddedDiag, Sum))
            self._close(added @ to_xp(V), (K + np.diag(d)) @ V, xp, dtype)
            self._close((Diagonal(to_xp(d)) + op).diagonal(), np.diag(K) + d, xp, dtype)

    def test_param_vjp_matches_finite_differences(self, to_xp, xp, dtype):
        if dtype != xp.float64:
            pytest.skip("finite-difference checks run in float64")
        p, op, K = self._case(to_xp)
        rng = _rng(5)
        U = rng.normal(size=(K.shape[0], 3))
        V = rng.normal(size=(K.shape[1], 3))
        if self.grad_paths is None:
            with pytest.raises(TypeError, match=self.no_grad_match):
                op.param_vjp(to_xp(U), to_xp(V))
            return
        grads = op.param_vjp(to_xp(U), to_xp(V))
        for name, path in self.grad_paths.items():
            def f(value, name=name):
                q = dict(p)
                q[name] = value
                return float(np.sum(U * (self.dense(q) @ V)))

            g = to_numpy(_get(grads, path))
            check_grad(f, p[name], g, name=f"{type(self).__name__}:{name}")
        # Vector cotangents are one-column blocks.
        g1 = op.param_vjp(to_xp(U[:, 0]), to_xp(V[:, 0]))
        g2 = op.param_vjp(to_xp(U[:, :1]), to_xp(V[:, :1]))
        for path in self.grad_paths.values():
            np.testing.assert_allclose(to_numpy(_get(g1, path)), to_numpy(_get(g2, path)))

    def test_bad_arguments(self, to_xp, xp, dtype):
        p, op, K = self._case(to_xp)
        n_rows, n_cols = K.shape
        with pytest.raises(ShapeError, match=rf"X: expected shape \({n_cols},\) or "
                                             rf"\({n_cols}, k\), got \({n_cols + 1}, 2\)"):
            op @ to_xp(np.ones((n_cols + 1, 2)))
        other = xp.float32 if dtype == xp.float64 else xp.float64
        with pytest.raises(TypeError, match="X: expected dtype"):
            op @ asarray(np.ones((n_cols, 2)), dtype=other, xp=xp)
        with pytest.raises(TypeError, match="X: expected an array"):
            op @ [1.0] * n_cols
        if xp.__name__ != "array_api_compat.numpy":
            with pytest.raises(TypeError, match="X: expected an array of the operator's namespace"):
                op @ np.ones((n_cols, 2))
        with pytest.raises(ShapeError, match=rf"V: expected shape \({n_cols}, 2\)"):
            op.param_vjp(to_xp(np.ones((n_rows, 2))), to_xp(np.ones((n_cols, 3))))
        with pytest.raises(TypeError, match="indices: expected an integer dtype"):
            op.columns(to_xp(np.array([0.0, 1.0])))


# --- the cases ---------------------------------------------------------------------------

class TestDense(OperatorContract):
    grad_paths = {"A": ("A",)}

    def params(self):
        return {"A": _rng(10).normal(size=(N, N))}

    def build(self, p, conv):
        return Dense(conv(p["A"]))

    def dense(self, p):
        return p["A"]


class TestDenseRectangular(TestDense):
    square = False

    def params(self):
        return {"A": _rng(11).normal(size=(N, M_COLS))}


class TestDenseSymmetric(TestDense):
    def params(self):
        A = _rng(12).normal(size=(N, N))
        return {"A": A + A.T}

    def build(self, p, conv):
        op = Dense(conv(p["A"]), symmetric=True)
        assert op.T is op
        return op


class TestDiagonal(OperatorContract):
    grad_paths = {"d": ("diag",)}

    def params(self):
        return {"d": _rng(13).uniform(0.5, 2.0, size=N)}

    def build(self, p, conv):
        return Diagonal(conv(p["d"]))

    def dense(self, p):
        return np.diag(p["d"])


class TestConstantDiagonal(OperatorContract):
    grad_paths = {"c": ("diag",)}

    def params(self):
        return {"c": np.array(0.7)}

    def build(self, p, conv):
        return Diagonal(conv(p["c"]), n=N)

    def dense(self, p):
        return float(p["c"]) * np.eye(N)


class TestAddedDiag(OperatorContract):
    grad_paths = {"A": ("operator", "A"), "d": ("diag",)}

    def params(self):
        rng = _rng(14)
        return {"A": rng.normal(size=(N, N)), "d": rng.uniform(0.1, 1.0, size=N)}

    def build(self, p, conv):
        return AddedDiag(conv(p["A"]), conv(p["d"]))

    def dense(self, p):
        return p["A"] + np.diag(p["d"])


class TestAddedConstantDiagOverKernel(OperatorContract):
    grad_paths = {"noise": ("diag",), "X": ("operator", "X")}

    def params(self):
        return {"X": _rng(15).normal(size=(N, 2)), "noise": np.array(0.3)}

    def build(self, p, conv):
        return AddedDiag(KernelMatrix(RBFKernel(1.1, 0.9), conv(p["X"]), block_size=4),
                         conv(p["noise"]))

    def dense(self, p):
        return rbf_numpy(p["X"], p["X"], 1.1, 0.9) + float(p["noise"]) * np.eye(N)


class TestLowRank(OperatorContract):
    grad_paths = {"F": ("factor",)}

    def params(self):
        return {"F": _rng(16).normal(size=(N, 2))}

    def build(self, p, conv):
        return LowRank(conv(p["F"]))

    def dense(self, p):
        return p["F"] @ p["F"].T


class TestLowRankPlusDiagonal(OperatorContract):
    grad_paths = {"F": ("factor",), "d": ("diag",)}

    def params(self):
        rng = _rng(17)
        return {"F": rng.normal(size=(N, 3)), "d": rng.uniform(0.2, 1.0, size=N)}

    def build(self, p, conv):
        return LowRank(conv(p["F"]), conv(p["d"]))

    def dense(self, p):
        return p["F"] @ p["F"].T + np.diag(p["d"])


class TestSum(OperatorContract):
    grad_paths = {"A": ("operators", 0, "A"), "F": ("operators", 1, "factor")}

    def params(self):
        rng = _rng(18)
        return {"A": rng.normal(size=(N, N)), "F": rng.normal(size=(N, 2))}

    def build(self, p, conv):
        return Sum(conv(p["A"]), LowRank(conv(p["F"])))

    def dense(self, p):
        return p["A"] + p["F"] @ p["F"].T


class TestScaled(OperatorContract):
    grad_paths = {"A": ("operator", "A"), "c": ("scale",)}

    def params(self):
        return {"A": _rng(19).normal(size=(N, M_COLS)), "c": np.array(1.7)}

    square = False

    def build(self, p, conv):
        return Scaled(conv(p["A"]), conv(p["c"]))

    def dense(self, p):
        return float(p["c"]) * p["A"]


class TestTransposed(OperatorContract):
    """The transpose of a rectangular operator keeps the gradients of the original."""

    square = False
    grad_paths = {"A": ("A",)}

    def params(self):
        return {"A": _rng(20).normal(size=(M_COLS, N))}

    def build(self, p, conv):
        op = Transposed(Dense(conv(p["A"])))
        assert op.T.shape == (M_COLS, N)
        return op

    def dense(self, p):
        return p["A"].T


class TestKernelMatrix(OperatorContract):
    grad_paths = {"variance": ("kernel", "variance"), "lengthscale": ("kernel", "lengthscale"),
                  "X": ("X",)}

    def params(self):
        return {"X": _rng(21).normal(size=(N + 1, 2)), "variance": np.array(1.3),
                "lengthscale": np.array(0.8)}

    def build(self, p, conv):
        k = RBFKernel(float(p["variance"]), float(p["lengthscale"]))
        return KernelMatrix(k, conv(p["X"]), block_size=3)      # blocks of 3, 3 and 1 rows

    def dense(self, p):
        return rbf_numpy(p["X"], p["X"], float(p["variance"]), float(p["lengthscale"]))


class TestKernelMatrixThreads(TestKernelMatrix):
    """The symmetric tiles shared by two threads (tile side 2: a ragged last tile)."""

    def build(self, p, conv):
        k = RBFKernel(float(p["variance"]), float(p["lengthscale"]))
        return KernelMatrix(k, conv(p["X"]), block_size=2, workers=2)    # side isqrt(7)


class TestKernelMatrixCross(OperatorContract):
    square = False
    grad_paths = {"variance": ("kernel", "variance"), "lengthscale": ("kernel", "lengthscale"),
                  "X": ("X",), "Z": ("Z",)}

    def params(self):
        rng = _rng(22)
        return {"X": rng.normal(size=(N, 2)), "Z": rng.normal(size=(M_COLS, 2)),
                "variance": np.array(0.9), "lengthscale": np.array(1.1)}

    def build(self, p, conv):
        k = RBFKernel(float(p["variance"]), float(p["lengthscale"]))
        return KernelMatrix(k, conv(p["X"]), conv(p["Z"]), block_size=4)

    def dense(self, p):
        return rbf_numpy(p["X"], p["Z"], float(p["variance"]), float(p["lengthscale"]))


class TestKernelMatrixWithoutExtras(OperatorContract):
    """A bare callable: diagonal computed blockwise, no gradient (a clear TypeError)."""

    grad_paths = None
    no_grad_match = r"KernelMatrix.param_vjp needs kernel_fn.gram_vjp\(G, X1, X2\)"

    def params(self):
        return {"X": _rng(23).normal(size=(N, 3))}

    def build(self, p, conv):
        return KernelMatrix(RBFKernel(1.0, 1.0, with_diag=False, with_vjp=False),
                            conv(p["X"]), block_size=4)

    def dense(self, p):
        return rbf_numpy(p["X"], p["X"], 1.0, 1.0)


class TestWoodburyInverse(OperatorContract):
    grad_paths = {"F": ("factor",), "d": ("diag",)}

    def params(self):
        rng = _rng(24)
        return {"F": rng.normal(size=(N, 2)), "d": rng.uniform(0.5, 1.5, size=N)}

    def build(self, p, conv):
        return WoodburyInverse(LowRank(conv(p["F"]), conv(p["d"])))

    def dense(self, p):
        return np.linalg.inv(p["F"] @ p["F"].T + np.diag(p["d"]))


class TestCallable(OperatorContract):
    """A plain callable wrapped by aslinearoperator: generic fallbacks, no parameters."""

    grad_paths = None

    def params(self):
        A = _rng(25).normal(size=(N, N))
        return {"A": A + A.T}

    def build(self, p, conv):
        A = conv(p["A"])
        return aslinearoperator(lambda X: A @ X, like=conv(np.ones(N)))

    def dense(self, p):
        return p["A"]


# --- construction errors -----------------------------------------------------------------

def test_operator_construction_errors(to_xp, xp):
    with pytest.raises(ShapeError, match=r"A: expected a matrix of shape \(n, m\), got \(3,\)"):
        Dense(to_xp(np.ones(3)))
    with pytest.raises(ShapeError, match="symmetric=True needs a square matrix"):
        Dense(to_xp(np.ones((3, 2))), symmetric=True)
    with pytest.raises(TypeError, match="A: expected an array"):
        Dense([[1.0]])
    with pytest.raises(ShapeError, match=r"n: a constant \(0-d\) diagonal needs the size n"):
        Diagonal(to_xp(np.array(1.0)))
    with pytest.raises(ShapeError, match=r"diag: expected shape \(4,\), got \(3,\)"):
        Diagonal(to_xp(np.ones(3)), n=4)
    with pytest.raises(ShapeError, match=r"diag: expected shape \(3,\) or \(\), got \(2,\)"):
        AddedDiag(to_xp(np.eye(3)), to_xp(np.ones(2)))
    with pytest.raises(ShapeError, match="AddedDiag operator: expected a square operator"):
        AddedDiag(to_xp(np.ones((3, 2))), 1.0)
    with pytest.raises(ShapeError, match=r"Sum: expected operators of shape \(3, 3\), "
                                         r"got \(2, 2\)"):
        Sum(to_xp(np.eye(3)), to_xp(np.eye(2)))
    with pytest.raises(ShapeError, match=r"scale: expected a 0-d array"):
        Scaled(to_xp(np.eye(3)), to_xp(np.ones(2)))
    with pytest.raises(TypeError, match="scale: expected a number or a 0-d array"):
        Scaled(to_xp(np.eye(3)), "two")
    with pytest.raises(TypeError, match="A: a callable operator needs a right-hand side"):
        aslinearoperator(lambda X: X)
    with pytest.raises(TypeError, match="A: expected a LinearOperator, an array or a callable"):
        aslinearoperator(3.0)
    with pytest.raises(TypeError, match="lowrank: expected a LowRank operator with a diagonal"):
        WoodburyInverse(LowRank(to_xp(np.ones((3, 1)))))
    with pytest.raises(ValueError, match="needs a positive diagonal"):
        WoodburyInverse(LowRank(to_xp(np.ones((3, 1))), to_xp(np.array([1.0, 0.0, 1.0]))))
    # a positive diagonal so small that the capacitance matrix overflows: named in the error
    ones = to_xp(np.ones(3))
    tiny = get_namespace(ones).finfo(ones.dtype).smallest_normal / 16.0  # 1 / tiny overflows
    with pytest.raises(ValueError, match=r"WoodburyInverse: I \+ F\^T D\^-1 F: expected finite"), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow", RuntimeWarning)  # 1 / tiny, on some backends
        WoodburyInverse(LowRank(to_xp(np.ones((3, 1))), ones * tiny))


def test_kernel_matrix_construction_errors(to_xp):
    X = to_xp(np.ones((4, 2)))
    with pytest.raises(TypeError, match="kernel_fn: expected a callable"):
        KernelMatrix(3, X)
    with pytest.raises(ShapeError, match=r"X: expected shape \(n, d\), got \(4,\)"):
        KernelMatrix(RBFKernel(), to_xp(np.ones(4)))
    with pytest.raises(ShapeError, match=r"Z: expected shape \(m, 2\), got \(3, 3\)"):
        KernelMatrix(RBFKernel(), X, to_xp(np.ones((3, 3))))
    with pytest.raises(ValueError, match="block_size: expected an integer >= 1, got 0"):
        KernelMatrix(RBFKernel(), X, block_size=0)
    bad = KernelMatrix(lambda A, B: (A @ B.T)[:, :1], X)
    with pytest.raises(ShapeError, match=r"kernel_fn: expected a gram matrix of shape \(4, 4\)"):
        bad @ to_xp(np.ones((4, 1)))


def test_callable_with_wrong_output_shape(to_xp):
    op = aslinearoperator(lambda X: X[:2, :], like=to_xp(np.ones(4)))
    with pytest.raises(ShapeError, match=r"A: the callable must map an \(n, k\) block"):
        op @ to_xp(np.ones((4, 2)))


def test_kernel_matrix_memory_is_blockwise(to_xp):
    """Every kernel evaluation of a product or a param_vjp is at most block_size rows."""
    calls = []

    class Recording(RBFKernel):
        def __call__(self, X1, X2):
            calls.append((X1.shape[0], X2.shape[0]))
            return super().__call__(X1, X2)

        def gram_vjp(self, G, X1, X2):
            calls.append((G.shape[0], G.shape[1]))
            return super().gram_vjp(G, X1, X2)

    X = to_xp(_rng(30).normal(size=(23, 2)))
    op = KernelMatrix(Recording(), X, block_size=5)
    op @ to_xp(np.ones((23, 3)))
    op.param_vjp(to_xp(np.ones((23, 3))), to_xp(np.ones((23, 3))))
    # square tiles of at most 5 * 23 entries (side 10: rows 0-9, 10-19, 20-22), each pair of
    # points evaluated once per pass: (23^2 + 10^2 + 10^2 + 3^2) / 2 = 369 entries a pass
    assert calls and all(rows * cols <= 5 * 23 for rows, cols in calls)
    assert sum(rows * cols for rows, cols in calls) == 2 * 369
    calls.clear()
    cross = KernelMatrix(Recording(), X, X[:7, :], block_size=5)
    cross @ to_xp(np.ones((7, 3)))
    assert all(rows <= 5 for rows, cols in calls) and sum(r for r, _ in calls) == 23


def test_more_operator_errors(to_xp, xp, dtype):
    other = xp.float32 if dtype == xp.float64 else xp.float64
    with pytest.raises(ShapeError, match=r"shape: expected two dimensions"):
        LinearOperator((3,), dtype, None, xp)
    with pytest.raises(TypeError, match="A: expected a real floating dtype"):
        Dense(to_xp(np.ones((2, 2), dtype=np.int64), dtype=None))
    with pytest.raises(ShapeError, match=r"diag: expected shape \(n,\) or \(\), got \(2, 2\)"):
        Diagonal(to_xp(np.ones((2, 2))))
    with pytest.raises(ShapeError, match="n: expected a size >= 1, got 0"):
        Diagonal(to_xp(np.array(1.0)), n=0)
    with pytest.raises(ShapeError, match="diag: expected a diagonal of size 3, got 2"):
        AddedDiag(to_xp(np.eye(3)), Diagonal(to_xp(np.ones(2))))
    with pytest.raises(TypeError, match="diag: expected a Diagonal, an array"):
        AddedDiag(to_xp(np.eye(3)), "noise")
    with pytest.raises(TypeError, match="AddedDiag: expected operators of dtype"):
        AddedDiag(to_xp(np.eye(3)), Diagonal(asarray(np.ones(3), dtype=other, xp=xp)))
    with pytest.raises(ShapeError, match=r"factor: expected shape \(n, r\), got \(3,\)"):
        LowRank(to_xp(np.ones(3)))
    with pytest.raises(ValueError, match="operators: expected at least one operator"):
        Sum()
    op = Dense(to_xp(np.eye(3)))
    with pytest.raises(TypeError, match="indices: expected a one-dimensional integer array"):
        op.columns([0, 1])
    with pytest.raises(TypeError, match="indices: expected a one-dimensional integer array"):
        op.columns(to_xp(np.zeros((1, 2), dtype=np.int64), dtype=None))


def test_operators_from_two_libraries_cannot_be_combined(backend, to_xp):
    if backend.name == "numpy":
        pytest.skip("needs a second array library")
    with pytest.raises(TypeError, match="Sum: operators from different namespaces"):
        Sum(Dense(to_xp(np.eye(3))), Dense(np.eye(3)))


def test_more_kernel_matrix_errors(to_xp, xp, dtype):
    other = xp.float32 if dtype == xp.float64 else xp.float64
    with pytest.raises(TypeError, match="X: expected a real floating dtype"):
        KernelMatrix(RBFKernel(), to_xp(np.ones((3, 2), dtype=np.int64), dtype=None))
    with pytest.raises(TypeError, match="Z: expected dtype"):
        KernelMatrix(RBFKernel(), to_xp(np.ones((3, 2))), asarray(np.ones((2, 2)), dtype=other,
                                                                  xp=xp))
    with pytest.raises(TypeError, match=r"X: expected an array of shape \(n, d\)"):
        KernelMatrix(RBFKernel(), [[1.0, 2.0]])

    class BadDiag(RBFKernel):
        def diag(self, X):
            return super().diag(X)[:-1]

    with pytest.raises(ShapeError, match=r"kernel_fn.diag: expected shape \(3,\), got \(2,\)"):
        KernelMatrix(BadDiag(), to_xp(np.ones((3, 2)))).diagonal()
