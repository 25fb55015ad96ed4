"""Structured operators (Kronecker, Toeplitz, Masked, Interpolated) under the operator
contract of test_linalg_operators.py, each against an independent dense NumPy matrix; exact
Kronecker-plus-shift solves and log-determinants against dense ones; cubic interpolation
weights and the scatter-add against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from test_linalg_cases import RBFKernel, rbf_numpy, torch_single_thread  # noqa: F401
from test_linalg_operators import OperatorContract

from gpnum.backend import SparseRows, scatter_add, to_numpy
from gpnum.errors import NotPSDError, ShapeError
from gpnum.linalg import (
    Dense,
    Interpolated,
    KernelMatrix,
    Kronecker,
    KroneckerShiftedEig,
    Masked,
    Toeplitz,
    cubic_interpolation_weights,
)


def _rng(seed):
    return np.random.default_rng(seed)


def toeplitz_dense(c):
    """``T[a, b] = c[|a - b|]`` over row-major multi-indices, by loops over index pairs."""
    c = np.asarray(c)
    shape = c.shape
    cells = list(np.ndindex(*shape))
    T = np.empty((len(cells), len(cells)))
    for i, a in enumerate(cells):
        for j, b in enumerate(cells):
            T[i, j] = c[tuple(abs(x - y) for x, y in zip(a, b, strict=False))]
    return T


# --- Kronecker ---------------------------------------------------------------------------

class TestKronecker(OperatorContract):
    grad_paths = {"A1": ("factors", 0, "A"), "A2": ("factors", 1, "A")}

    def params(self):
        rng = _rng(40)
        return {"A1": rng.normal(size=(2, 2)), "A2": rng.normal(size=(3, 3))}

    def build(self, p, conv):
        return Kronecker(Dense(conv(p["A1"])), Dense(conv(p["A2"])))

    def dense(self, p):
        return np.kron(p["A1"], p["A2"])


class TestKroneckerThreeRectangular(OperatorContract):
    square = False
    grad_paths = {"A1": ("factors", 0, "A"), "A2": ("factors", 1, "A"),
                  "A3": ("factors", 2, "A")}

    def params(self):
        rng = _rng(41)
        return {"A1": rng.normal(size=(2, 3)), "A2": rng.normal(size=(3, 2)),
                "A3": rng.normal(size=(2, 3))}

    def build(self, p, conv):
        return Kronecker(conv(p["A1"]), conv(p["A2"]), conv(p["A3"]))

    def dense(self, p):
        return np.kron(np.kron(p["A1"], p["A2"]), p["A3"])


class TestKroneckerOfKernels(OperatorContract):
    grad_paths = {"ls1": ("factors", 0, "kernel", "lengthscale"),
                  "var2": ("factors", 1, "kernel", "variance")}

    def params(self):
        return {"ls1": np.array(0.7), "var2": np.array(1.4)}

    def _x(self):
        return np.linspace(0.0, 1.0, 3)[:, None], np.array([[0.1], [0.5], [0.6]])

    def build(self, p, conv):
        x1, x2 = self._x()
        return Kronecker(KernelMatrix(RBFKernel(1.0, float(p["ls1"])), conv(x1)),
                         KernelMatrix(RBFKernel(float(p["var2"]), 0.3), conv(x2)))

    def dense(self, p):
        x1, x2 = self._x()
        return np.kron(rbf_numpy(x1, x1, 1.0, float(p["ls1"])),
                       rbf_numpy(x2, x2, float(p["var2"]), 0.3))


# --- Toeplitz ----------------------------------------------------------------------------

class TestToeplitz(OperatorContract):
    """Products by FFT (forced: small positive columns would take dense factors)."""

    grad_paths = {"c": ("column",)}
    products = "fft"

    def params(self):
        return {"c": _rng(42).normal(size=6)}

    def build(self, p, conv):
        op = Toeplitz(conv(p["c"]), products=self.products)
        assert op.T is op and op.products == "fft"
        return op

    def dense(self, p):
        return toeplitz_dense(p["c"])


class TestToeplitzTwoLevel(TestToeplitz):
    def params(self):
        return {"c": _rng(43).normal(size=(2, 4))}


class TestToeplitzThreeLevel(TestToeplitz):
    def params(self):
        return {"c": _rng(44).normal(size=(3, 1, 2))}


class TestToeplitzShortAxes(TestToeplitz):
    """Axes of one and two points (no reflected part in the embedding)."""

    def params(self):
        return {"c": _rng(45).normal(size=(1, 2, 3))}


def _separable_column():
    a = np.exp(-0.5 * (0.3 * np.arange(4)) ** 2)
    b = np.exp(-0.5 * (0.2 * np.arange(3)) ** 2 / 0.7)
    return 1.7 * a[:, None] * b[None, :]


class TestToeplitzDenseFactors(OperatorContract):
    """A separable column (RBF with ARD lengthscales on a 4 x 3 grid): products through dense
    one-dimensional factors; the vjp (FFT) w.r.t. the whole column, perturbed off the
    separable form by the finite differences."""

    grad_paths = {"c": ("column",)}

    def params(self):
        return {"c": _separable_column()}

    def build(self, p, conv):
        op = Toeplitz(conv(p["c"]))
        if np.array_equal(p["c"], _separable_column()):
            assert op.products == "dense"
        return op

    def dense(self, p):
        return toeplitz_dense(p["c"])


class TestToeplitzDenseFactorsOneLevel(TestToeplitzDenseFactors):
    def params(self):
        return {"c": np.exp(-0.5 * (0.4 * np.arange(7)) ** 2)}

    def build(self, p, conv):
        op = Toeplitz(conv(p["c"]))
        assert op.products == "dense"
        return op


def test_toeplitz_products_choice(to_xp, xp, dtype):
    """A column that does not separate (or a negative one) keeps the FFT."""
    c = _separable_column()
    c[1, 1] *= 1.1
    assert Toeplitz(to_xp(c)).products == "fft"
    assert Toeplitz(to_xp(-_separable_column())).products == "fft"
    assert Toeplitz(to_xp(_separable_column()), products="fft").products == "fft"
    with pytest.raises(ValueError, match="products: expected 'auto' or 'fft'"):
        Toeplitz(to_xp(c), products="dense")


# --- Masked ------------------------------------------------------------------------------

_OBSERVED = np.array([7, 0, 3, 4, 8, 2, 11])


class TestMaskedToeplitz(OperatorContract):
    grad_paths = {"c": ("column",)}

    def params(self):
        return {"c": _rng(46).normal(size=(3, 4))}

    def build(self, p, conv):
        return Masked(Toeplitz(conv(p["c"])), conv(_OBSERVED, dtype=None))

    def dense(self, p):
        return toeplitz_dense(p["c"])[np.ix_(_OBSERVED, _OBSERVED)]


class TestMaskedKronecker(OperatorContract):
    grad_paths = {"A1": ("factors", 0, "A"), "A2": ("factors", 1, "A")}

    def params(self):
        rng = _rng(47)
        return {"A1": rng.normal(size=(3, 3)), "A2": rng.normal(size=(4, 4))}

    def build(self, p, conv):
        return Masked(Kronecker(conv(p["A1"]), conv(p["A2"])), conv(_OBSERVED, dtype=None))

    def dense(self, p):
        return np.kron(p["A1"], p["A2"])[np.ix_(_OBSERVED, _OBSERVED)]


# --- Interpolated ------------------------------------------------------------------------

_IDX = _rng(48).integers(0, 5, size=(6, 4))


def _w_dense(idx, w, m):
    W = np.zeros((idx.shape[0], m))
    for i in range(idx.shape[0]):
        for a in range(idx.shape[1]):
            W[i, idx[i, a]] += w[i, a]
    return W


class TestInterpolatedDense(OperatorContract):
    """Random (repeating) indices, a non-symmetric dense K_UU: the generic diagonal."""

    grad_paths = {"A": ("K_UU", "A"), "w": ("weights",)}

    def params(self):
        rng = _rng(49)
        return {"A": rng.normal(size=(5, 5)), "w": rng.normal(size=(6, 4))}

    def build(self, p, conv):
        return Interpolated(conv(_IDX, dtype=None), conv(p["w"]), Dense(conv(p["A"])))

    def dense(self, p):
        W = _w_dense(_IDX, p["w"], 5)
        return W @ p["A"] @ W.T


class TestInterpolatedToeplitz(OperatorContract):
    """Cubic weights on a 2-D grid of 5 x 4 points around a Toeplitz K_UU (fast diagonal)."""

    grad_paths = {"c": ("K_UU", "column"), "w": ("weights",)}
    _X = np.array([[1.2, 1.1], [2.9, 1.5], [1.0, 2.0], [2.5, 1.9], [1.7, 1.3], [2.2, 1.0]])

    def _grid(self):
        return cubic_interpolation_weights(self._X, [0.0, 0.0], [1.0, 1.0], [5, 4])

    def params(self):
        _, w = self._grid()
        return {"c": _rng(50).normal(size=(5, 4)), "w": np.asarray(w)}

    def build(self, p, conv):
        idx, _ = self._grid()
        return Interpolated(conv(np.asarray(idx), dtype=None), conv(p["w"]),
                            Toeplitz(conv(p["c"])))

    def dense(self, p):
        idx, _ = self._grid()
        W = _w_dense(np.asarray(idx), p["w"], 20)
        return W @ toeplitz_dense(p["c"]) @ W.T


class TestInterpolatedKroneckerToeplitz(OperatorContract):
    """Cubic weights on a 5 x 4 grid around a Kronecker product of 1-D Toeplitz factors
    (translation invariant: the shared-stencil diagonal)."""

    grad_paths = {"c1": ("K_UU", "factors", 0, "column"), "c2": ("K_UU", "factors", 1, "column")}
    _X = TestInterpolatedToeplitz._X

    def _grid(self):
        return cubic_interpolation_weights(self._X, [0.0, 0.0], [1.0, 1.0], [5, 4])

    def params(self):
        rng = _rng(55)
        return {"c1": rng.normal(size=5), "c2": rng.normal(size=4)}

    def build(self, p, conv):
        idx, w = self._grid()
        return Interpolated(conv(np.asarray(idx), dtype=None), conv(np.asarray(w)),
                            Kronecker(Toeplitz(conv(p["c1"])), Toeplitz(conv(p["c2"]))))

    def dense(self, p):
        idx, w = self._grid()
        W = _w_dense(np.asarray(idx), np.asarray(w), 20)
        return W @ np.kron(toeplitz_dense(p["c1"]), toeplitz_dense(p["c2"])) @ W.T


def test_toeplitz_embedding_square_root(to_xp, xp, dtype):
    """``S S^T = K`` for a positive semi-definite embedding (a short RBF on a 9 x 6 grid); a
    long one's embedding has negative eigenvalues, reported as the clipped share."""
    lags = np.meshgrid(0.1 * np.arange(9), 0.1 * np.arange(6), indexing="ij")
    short = np.exp(-0.5 * (lags[0] ** 2 + lags[1] ** 2) / 0.1 ** 2)
    op = Toeplitz(to_xp(short))
    S, clipped = op.embedding_sqrt_matmul(
        to_xp(np.eye(op.embedding_size)))
    assert tuple(S.shape) == (54, op.embedding_size) and S.dtype == dtype
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(to_numpy(S @ S.T), toeplitz_dense(short), atol=tol)
    assert float(clipped) < tol
    long = np.exp(-0.5 * (lags[0] ** 2 + lags[1] ** 2) / 0.5 ** 2)
    _, clipped = Toeplitz(to_xp(long)).embedding_sqrt_matmul(to_xp(np.eye(op.embedding_size)))
    assert float(clipped) > 1e-3


# --- Kronecker plus shift: exact solves, log-determinants and gradients -------------------

def _kron_problem(ls1, var2, conv):
    x1 = np.linspace(0.0, 1.0, 4)[:, None]
    x2 = np.array([[0.0], [0.3], [0.5], [1.1], [1.3]])
    dense = np.kron(rbf_numpy(x1, x1, 1.0, ls1), rbf_numpy(x2, x2, var2, 0.4))
    op = None
    if conv is not None:
        op = Kronecker(KernelMatrix(RBFKernel(1.0, ls1), conv(x1)),
                       KernelMatrix(RBFKernel(var2, 0.4), conv(x2)))
    return op, dense


def test_kronecker_shifted_solve_and_logdet_match_dense(to_xp, xp, dtype):
    op, K = _kron_problem(0.6, 1.3, to_xp)
    s = 0.2
    eig = KroneckerShiftedEig(op, s)
    A = K + s * np.eye(K.shape[0])
    B = _rng(51).normal(size=(K.shape[0], 3))
    tol = 1e-4 if dtype == xp.float32 else 1e-10
    np.testing.assert_allclose(to_numpy(eig.solve(to_xp(B))), np.linalg.solve(A, B),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(to_numpy(eig.solve(to_xp(B[:, 0]))), np.linalg.solve(A, B[:, 0]),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(float(eig.logdet()), np.linalg.slogdet(A)[1], rtol=tol)


def test_kronecker_shifted_logdet_gradient(to_xp, xp, dtype):
    if dtype != xp.float64:
        pytest.skip("finite-difference checks run in float64")
    ls1, var2, s = 0.6, 1.3, 0.2
    op, _ = _kron_problem(ls1, var2, to_xp)
    g = KroneckerShiftedEig(op, to_xp(np.array(s))).logdet_grad()

    def logdet(ls1, var2, s):
        _, K = _kron_problem(ls1, var2, None)
        return np.linalg.slogdet(K + s * np.eye(K.shape[0]))[1]

    check_grad(lambda v: logdet(float(v), var2, s), np.array(ls1),
               to_numpy(g["factors"][0]["kernel"]["lengthscale"]))
    check_grad(lambda v: logdet(ls1, float(v), s), np.array(var2),
               to_numpy(g["factors"][1]["kernel"]["variance"]))
    check_grad(lambda v: logdet(ls1, var2, float(v)), np.array(s), to_numpy(g["shift"]))


def test_kronecker_shifted_errors(to_xp):
    with pytest.raises(TypeError, match="kron: expected a Kronecker operator"):
        KroneckerShiftedEig(Dense(to_xp(np.eye(2))), 1.0)
    with pytest.raises(ShapeError, match="kron: expected square symmetric factors"):
        KroneckerShiftedEig(Kronecker(Dense(to_xp(np.ones((2, 3))))), 1.0)
    A = to_xp(np.diag([1.0, -2.0]))
    with pytest.raises(NotPSDError, match="smallest eigenvalue"):
        KroneckerShiftedEig(Kronecker(Dense(A, symmetric=True)), 1.0)


# --- interpolation weights and scatter-add -----------------------------------------------

def test_cubic_weights_reproduce_quadratics(to_xp, xp, dtype):
    """Keys' kernel (a = -1/2) interpolates polynomials up to degree 2 exactly."""
    rng = _rng(52)
    lower, h, sizes = [-0.5, 1.0], [0.25, 0.5], [9, 7]
    X = np.column_stack([rng.uniform(lower[0] + h[0], lower[0] + (sizes[0] - 2) * h[0], 30),
                         rng.uniform(lower[1] + h[1], lower[1] + (sizes[1] - 2) * h[1], 30)])
    g0 = lower[0] + h[0] * np.arange(sizes[0])
    g1 = lower[1] + h[1] * np.arange(sizes[1])
    G = np.stack(np.meshgrid(g0, g1, indexing="ij"), -1).reshape(-1, 2)

    def f(P):
        return 1.0 + 2.0 * P[:, 0] - P[:, 1] + 0.7 * P[:, 0] ** 2 - 0.3 * P[:, 0] * P[:, 1]

    idx, w = cubic_interpolation_weights(to_xp(X), lower, h, sizes)
    assert tuple(idx.shape) == (30, 16)
    got = (to_numpy(w) * f(G)[to_numpy(idx)]).sum(1)
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(got, f(X), rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="outside the interpolation grid"):
        cubic_interpolation_weights(to_xp(X - 1.0), lower, h, sizes)
    with pytest.raises(ValueError, match="at least 4 grid points"):
        cubic_interpolation_weights(to_xp(X), lower, h, [3, 7])


def test_scatter_add_sums_repeats(to_xp, xp, dtype):
    rng = _rng(53)
    idx = rng.integers(0, 7, size=40)
    vals = rng.normal(size=(40, 3))
    want = np.zeros((9, 3))
    np.add.at(want, idx, vals)
    got = scatter_add(to_xp(idx, dtype=None), to_xp(vals), 9)
    assert got.dtype == dtype and tuple(got.shape) == (9, 3)
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(to_numpy(got), want, rtol=tol, atol=tol)


def test_sparse_rows_products(to_xp, xp, dtype):
    """``W Y`` and ``W^T X`` with repeated columns in a row against the dense ``W``."""
    rng = _rng(56)
    idx = rng.integers(0, 9, size=(50, 4))
    w = rng.normal(size=(50, 4))
    Wd = _w_dense(idx, w, 9)
    Y, X = rng.normal(size=(9, 3)), rng.normal(size=(50, 2))
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    W = SparseRows(to_xp(idx, dtype=None), to_xp(w), 9)
    got = W.matmul(to_xp(Y))
    assert got.dtype == dtype
    np.testing.assert_allclose(to_numpy(got), Wd @ Y, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_numpy(W.rmatmul(to_xp(X))), Wd.T @ X, rtol=tol, atol=tol)
    np.testing.assert_array_equal(to_numpy(W.indices), idx)      # the inputs stay intact


def test_structured_construction_errors(to_xp, xp, dtype):
    other = xp.float32 if dtype == xp.float64 else xp.float64
    with pytest.raises(ValueError, match="indices: expected distinct positions"):
        Masked(Toeplitz(to_xp(np.ones(4))), to_xp(np.array([0, 1, 1]), dtype=None))
    with pytest.raises(ShapeError, match=r"indices: expected positions in \[0, 4\)"):
        Masked(Toeplitz(to_xp(np.ones(4))), to_xp(np.array([0, 4]), dtype=None))
    with pytest.raises(ShapeError, match="weights: expected shape"):
        Interpolated(to_xp(np.zeros((3, 2), dtype=np.int64), dtype=None), to_xp(np.ones((3, 3))),
                     to_xp(np.eye(2)))
    with pytest.raises(ShapeError, match=r"indices: expected columns in \[0, 2\)"):
        Interpolated(to_xp(np.full((3, 2), 2, dtype=np.int64), dtype=None),
                     to_xp(np.ones((3, 2))), to_xp(np.eye(2)))
    with pytest.raises(ShapeError, match="column: expected a non-empty array"):
        Toeplitz(to_xp(np.ones((0,))))
    with pytest.raises(TypeError, match="Kronecker: expected factors of dtype"):
        Kronecker(Dense(to_xp(np.eye(2))), Dense(to_xp(np.eye(2), dtype=other)))


def test_kronecker_with_square_product_of_rectangular_factors(to_xp):
    """(2, 3) (x) (3, 2): square overall, diagonal by the generic fallback."""
    rng = _rng(54)
    A, B = rng.normal(size=(2, 3)), rng.normal(size=(3, 2))
    op = Kronecker(to_xp(A), to_xp(B))
    np.testing.assert_allclose(to_numpy(op.diagonal()), np.diag(np.kron(A, B)), rtol=1e-5,
                               atol=1e-5)
