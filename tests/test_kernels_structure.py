"""Kernels on grids: the structured operator each kernel gives (Toeplitz, Kronecker, plain) and
its products, diagonal and parameter gradients against the kernel's own dense gram matrix;
grid detection; structured kernel interpolation against the exact kernel matrix."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from test_linalg_cases import torch_single_thread  # noqa: F401

from gpnum.backend import to_numpy
from gpnum.kernels import (
    RBF,
    Cosine,
    Grid,
    Linear,
    Matern32,
    Matern52,
    Product,
    grid_from_inputs,
    grid_operator,
    ski_operator,
)
from gpnum.linalg import Kronecker, Toeplitz


def _grid(to_xp, *axes):
    return Grid(tuple(to_xp(np.asarray(a, dtype=np.float64)) for a in axes))


def _points(*axes):
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def _tol(xp, dtype):
    return 2e-5 if dtype == xp.float32 else 1e-10


def _kernels(kind, xp, dtype, device, **values):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    if kind == "rbf_ard":
        return RBF(lengthscale=values.get("ls", [0.7, 1.3]), variance=values.get("var", 1.2), **kw)
    if kind == "matern_iso3":
        return Matern32(lengthscale=values.get("ls", 0.9), variance=values.get("var", 0.8), **kw)
    if kind == "product":
        return Product(RBF(lengthscale=values.get("ls", 0.6), variance=values.get("var", 1.1),
                           active_dims=[0], **kw),
                       Matern52(lengthscale=0.8, variance=0.7, active_dims=[1], **kw))
    if kind == "product_split":
        return Product(RBF(lengthscale=values.get("ls", 0.6), variance=values.get("var", 1.1),
                           active_dims=[0], **kw),
                       Matern52(lengthscale=[0.8, 1.5], variance=0.7, active_dims=[1, 2], **kw))
    raise ValueError(kind)


CASES = {
    # kind: (axes, expected operator type, gradient parameter names)
    "rbf_ard": (([0.0, 0.5, 1.0], [0.2, 0.5, 0.8, 1.1]), Toeplitz,
                ("lengthscale", "variance")),
    "matern_iso3": (([0.0, 0.4], [0.0, 0.3, 0.6], [1.0, 1.5]), Toeplitz,
                    ("lengthscale", "variance")),
    # an irregular second axis: a Toeplitz factor and a plain kernel-matrix factor
    "product": (([0.0, 0.3, 0.6, 0.9], [0.0, 0.2, 0.9]), Kronecker, ("0.lengthscale", "0.variance",
                                                                      "1.lengthscale")),
    "product_split": (([0.0, 0.3, 0.6], [0.0, 0.5], [0.1, 0.2, 0.3]), Kronecker,
                      ("0.lengthscale", "1.lengthscale")),
}


def _set(kernel, name, value):
    kernel.set_parameters({name: value})


@pytest.mark.parametrize("kind", sorted(CASES))
def test_grid_operator_matches_the_gram_matrix(kind, to_xp, xp, dtype, device):
    axes, cls, names = CASES[kind]
    k = _kernels(kind, xp, dtype, device)
    op = grid_operator(k, _grid(to_xp, *axes))
    assert isinstance(op, cls)
    P = _points(*axes)
    K = to_numpy(k(to_xp(P))).astype(np.float64)
    tol = _tol(xp, dtype)
    np.testing.assert_allclose(to_numpy(op.to_dense()), K, rtol=tol, atol=tol)
    V = np.random.default_rng(0).normal(size=(K.shape[0], 3))
    np.testing.assert_allclose(to_numpy(op @ to_xp(V)), K @ V, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(to_numpy(op.diagonal()), np.diag(K), rtol=tol, atol=tol)
    idx = np.array([K.shape[0] - 1, 0, 2])
    np.testing.assert_allclose(to_numpy(op.columns(to_xp(idx, dtype=None))), K[:, idx],
                               rtol=tol, atol=tol)
    if dtype != xp.float64:
        return
    rng = np.random.default_rng(1)
    U, V = rng.normal(size=(K.shape[0], 2)), rng.normal(size=(K.shape[0], 2))
    grads = op.param_vjp(to_xp(U), to_xp(V))["kernel"]
    params = {n: to_numpy(v) for n, v in k.parameters().items()}
    for name in names:
        def f(value, name=name):
            kk = _kernels(kind, xp, dtype, device)
            kk.set_parameters({**{n: to_xp(v) for n, v in params.items()}, name: to_xp(value)})
            return float(np.sum(U * (to_numpy(kk(to_xp(P))) @ V)))

        check_grad(f, params[name], to_numpy(grads[name]), name=f"{kind}:{name}")


def test_kernels_without_grid_structure_fall_back(to_xp, xp, dtype, device):
    kw = {"xp": xp, "dtype": dtype, "device": device}
    axes = ([0.0, 0.5, 1.0], [0.0, 0.25, 0.5])
    P = _points(*axes)
    tol = _tol(xp, dtype)
    # not stationary; and stationary but not even in each coordinate (cos(2 pi (t1/l1 + t2/l2)))
    for k in (Linear(variance=0.7, **kw), Cosine(lengthscale=[1.7, 2.3], variance=1.0, **kw)):
        op = grid_operator(k, _grid(to_xp, *axes))
        assert not isinstance(op, (Toeplitz, Kronecker))
        np.testing.assert_allclose(to_numpy(op.to_dense()), to_numpy(k(to_xp(P))), rtol=tol,
                                   atol=tol)


def test_grid_from_inputs_finds_cells(to_xp):
    axes = ([0.0, 1.0, 2.0], [5.0, 7.0])
    P = _points(*axes)
    order = np.array([4, 0, 5, 2])                 # an incomplete grid, rows in any order
    grid, cells = grid_from_inputs(to_xp(P[order]))
    assert grid.shape == (3, 2)
    np.testing.assert_array_equal(to_numpy(cells), order[[0, 1, 2, 3]])
    np.testing.assert_allclose(to_numpy(grid.axes[1]), [5.0, 7.0])
    assert grid.spacing(0) == pytest.approx(1.0) and grid.spacing(1) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="repeat a grid cell"):
        grid_from_inputs(to_xp(P[[0, 1, 1]]))


def test_ski_operator_approximates_the_kernel_matrix(to_xp, xp, dtype, device):
    """Cubic interpolation's error falls like h^3: halving the spacing cuts it ~8x."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 1.0, size=(40, 2))
    k = RBF(lengthscale=[0.4, 0.5], variance=1.0, xp=xp, dtype=dtype, device=device)
    K = to_numpy(k(to_xp(X))).astype(np.float64)
    errs = []
    for g in (12, 21, 39):
        op = ski_operator(k, to_xp(X), g)
        errs.append(np.abs(to_numpy(op.to_dense()) - K).max())
        if dtype == xp.float64:
            V = rng.normal(size=(40, 2))
            np.testing.assert_allclose(to_numpy(op @ to_xp(V)), to_numpy(op.to_dense()) @ V,
                                       rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(to_numpy(op.diagonal()), np.diag(to_numpy(op.to_dense())),
                                       rtol=1e-10)
    assert errs[2] < 2e-4
    if dtype == xp.float64:
        assert errs[1] < errs[0] / 4.0 and errs[2] < errs[1] / 4.0


def test_grid_from_inputs_fills_lattice_gaps(to_xp, xp, dtype):
    """Values on a regular lattice with unobserved ones keep a regular axis (gaps filled)."""
    X = np.array([[0.0, 1.0], [0.5, 1.0], [2.0, 3.0], [1.5, 1.0]])
    grid, cells = grid_from_inputs(to_xp(X))
    assert grid.shape == (5, 2)
    np.testing.assert_allclose(to_numpy(grid.axes[0]), [0.0, 0.5, 1.0, 1.5, 2.0], atol=1e-6)
    np.testing.assert_array_equal(to_numpy(cells), [0, 2, 9, 6])
    assert grid.spacing(0) == pytest.approx(0.5)
    # values off any lattice: the distinct values themselves
    grid, _ = grid_from_inputs(to_xp(np.array([[0.0], [1.0], [np.sqrt(2.0)]])))
    assert grid.shape == (3,) and grid.spacing(0) is None
