"""Structured operators and solvers (issue 49), by size: Toeplitz products against the dense
kernel matrix's, and one GPR training step (LML and gradient) with solver="grid" (complete
grid: Kronecker eigendecomposition; incomplete grid: BBMM on the observed cells) and
solver="ski", against the dense-K CG step and Cholesky where they fit."""

import math

import numpy as np

from gpnum import backend as B
from gpnum.kernels import RBF, Grid, Matern52, Product, grid_operator
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

from ._common import available_backends, sync


def _grid_shape(n):
    """A 3-d grid of about n cells: 10 time steps by a square of space, as precip."""
    side = max(2, round(math.sqrt(n / 10.0)))
    return (10, side, side)


def _grid_data(n, drop=0.0, seed=0):
    shape = _grid_shape(n)
    axes = [np.arange(s, dtype=np.float64) / s for s in shape]
    mesh = np.meshgrid(*axes, indexing="ij")
    X = np.stack([m.reshape(-1) for m in mesh], axis=1)
    rng = np.random.default_rng(seed)
    keep = rng.permutation(X.shape[0])[:X.shape[0] - int(drop * X.shape[0])]
    X = X[np.sort(keep)]
    y = np.sin(6.0 * X[:, 1]) * np.cos(4.0 * X[:, 2]) + 0.1 * rng.standard_normal(X.shape[0])
    return X, y


def _kernel(kind, xp):
    kw = {"xp": xp, "dtype": xp.float64}
    if kind == "product":
        return Product(RBF(lengthscale=0.3, variance=1.0, active_dims=[0], **kw),
                       Matern52(lengthscale=[0.2, 0.2], variance=1.0, active_dims=[1, 2], **kw))
    return RBF(lengthscale=[0.3, 0.2, 0.2], variance=1.0, **kw)


def _gpr(xp, X, y, kind, solver, **kw):
    X, y = B.asarray(X, dtype=xp.float64, xp=xp), B.asarray(y, dtype=xp.float64, xp=xp)
    return GPR(_kernel(kind, xp), Gaussian(variance=0.05, xp=xp, dtype=xp.float64), X, y,
               solver=solver, **kw)


class ToeplitzProduct:
    """K @ V (11 columns: a BBMM block) for an RBF kernel on a 3-d grid of m cells: the
    Toeplitz operator (FFT) against the dense kernel matrix formed beforehand."""

    params = (available_backends(), [1000, 10000, 100000], ["toeplitz", "dense"])
    param_names = ["backend", "m", "method"]
    timeout = 600

    def setup(self, backend, m, method):
        if method == "dense" and m > 10000:
            raise NotImplementedError  # asv: skipped (the dense matrix takes m^2 memory)
        xp = B.namespace_by_name(backend)
        shape = _grid_shape(m)
        grid = Grid(tuple(B.asarray(np.arange(s) / s, dtype=xp.float64, xp=xp) for s in shape))
        op = grid_operator(_kernel("rbf", xp), grid)
        self.op = op if method == "toeplitz" else op.to_dense()
        rng = np.random.default_rng(0)
        self.V = B.asarray(rng.standard_normal((op.shape[0], 11)), dtype=xp.float64, xp=xp)

    def time_matmul(self, backend, m, method):
        sync(self.op @ self.V)


class GridTrainingStep:
    """objective_and_grad on a grid of about n cells: solver="grid" on the complete grid with
    a product kernel (exact Kronecker path), on the grid with 3% of the cells missing and an
    RBF kernel (BBMM on the observed cells of the Toeplitz operator), and the dense-K CG and
    Cholesky steps on the latter's data."""

    params = (available_backends(), [1000, 2500, 5000, 10000, 100000],
              ["grid_kronecker", "grid_toeplitz", "cg_dense", "cholesky"])
    param_names = ["backend", "n", "method"]
    timeout = 1800

    def setup(self, backend, n, method):
        if (method == "cholesky" and n > 5000) or (method == "cg_dense" and n > 10000):
            raise NotImplementedError  # asv: skipped (O(n^3) / O(n^2) memory)
        xp = B.namespace_by_name(backend)
        if method == "grid_kronecker":
            X, y = _grid_data(n)
            self.model = _gpr(xp, X, y, "product", "grid")
            return
        X, y = _grid_data(n, drop=0.03)
        if method == "grid_toeplitz":
            self.model = _gpr(xp, X, y, "rbf", "grid")
        elif method == "cg_dense":
            self.model = _gpr(xp, X, y, "rbf", "cg", cg_options={"dense_limit_mib": 8192.0})
        else:
            self.model = _gpr(xp, X, y, "rbf", "cholesky")

    def time_objective_and_grad(self, backend, n, method):
        self.model.objective_and_grad()


class SKITrainingStep:
    """objective_and_grad with solver="ski" on n scattered 2-d points (a grid of about n
    points), against the dense-K CG step."""

    params = (available_backends(), [1000, 5000, 10000, 100000], ["ski", "cg_dense"])
    param_names = ["backend", "n", "method"]
    timeout = 1800

    def setup(self, backend, n, method):
        if method == "cg_dense" and n > 10000:
            raise NotImplementedError  # asv: skipped (O(n^2) memory)
        xp = B.namespace_by_name(backend)
        rng = np.random.default_rng(0)
        X = rng.uniform(0.0, 1.0, (n, 2))
        y = np.sin(6.0 * X[:, 0]) * np.cos(4.0 * X[:, 1]) + 0.1 * rng.standard_normal(n)
        Xa, ya = B.asarray(X, dtype=xp.float64, xp=xp), B.asarray(y, dtype=xp.float64, xp=xp)
        kern = RBF(lengthscale=[0.2, 0.2], variance=1.0, xp=xp, dtype=xp.float64)
        lik = Gaussian(variance=0.05, xp=xp, dtype=xp.float64)
        if method == "ski":
            self.model = GPR(kern, lik, Xa, ya, solver="ski")
        else:
            self.model = GPR(kern, lik, Xa, ya, solver="cg",
                             cg_options={"dense_limit_mib": 8192.0})

    def time_objective_and_grad(self, backend, n, method):
        self.model.objective_and_grad()


def _ski_model(xp, n, grid_size=100, precond_rank=15, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (n, 2))
    y = np.sin(6.0 * X[:, 0]) * np.cos(4.0 * X[:, 1]) + 0.1 * rng.standard_normal(n)
    Xa, ya = B.asarray(X, dtype=xp.float64, xp=xp), B.asarray(y, dtype=xp.float64, xp=xp)
    kern = RBF(lengthscale=[0.2, 0.2], variance=1.0, xp=xp, dtype=xp.float64)
    lik = Gaussian(variance=0.05, xp=xp, dtype=xp.float64)
    return GPR(kern, lik, Xa, ya, solver="ski", grid_size=grid_size,
               cg_options={"precond_rank": precond_rank})


class SKIFixedGrid:
    """objective_and_grad with solver="ski" on n scattered 2-d points and a 100 x 100 grid
    (the setting of asv_benchmarks/scripts/ski_vs_gpytorch.py: preconditioner rank 15, 10
    probes, 20 Lanczos iterations): time and peak memory, linear in n."""

    params = (available_backends(), [10000, 100000, 1000000])
    param_names = ["backend", "n"]
    timeout = 1800

    def setup(self, backend, n):
        self.model = _ski_model(B.namespace_by_name(backend), n)
        self.model.objective_and_grad()          # builds the interpolation, kept by the model

    def time_objective_and_grad(self, backend, n):
        self.model.objective_and_grad()

    def peakmem_objective_and_grad(self, backend, n):
        self.model.objective_and_grad()


class SKIPredict:
    """predict_f at 10,000 new points inside the data's range after training on n points
    (100 x 100 grid): the caches (mean K_UU W^T alpha, LOVE's K_UU W^T Q L_T^-T) are built in
    setup, so this times O(4^d k) a point, independent of n."""

    params = (available_backends(), [10000, 100000])
    param_names = ["backend", "n"]
    timeout = 1800

    def setup(self, backend, n):
        xp = B.namespace_by_name(backend)
        self.model = _ski_model(xp, n)
        rng = np.random.default_rng(1)
        self.Xs = B.asarray(rng.uniform(0.05, 0.95, (10000, 2)), dtype=xp.float64, xp=xp)
        self.model.predict_f(self.Xs[:10])

    def time_predict_f(self, backend, n):
        sync(self.model.predict_f(self.Xs)[1])
