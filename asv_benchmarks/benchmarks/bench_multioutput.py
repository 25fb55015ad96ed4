"""MultiOutputGPR (issue 51): one training step (LML and gradient) on the Kronecker path
(isotopic ICM), and on the observed entries with missing outputs by Cholesky and by conjugate
gradients with Kronecker products and a mask."""

import numpy as np

from gpnum import backend as B
from gpnum.kernels import ICM, RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import MultiOutputGPR

from ._common import available_backends

T, RANK, D = 10, 2, 3


def _model(xp, n, missing, solver, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, D))
    Y = np.sin(X @ rng.normal(size=(D, RANK))) @ rng.normal(size=(RANK, T))
    Y = Y + 0.3 * rng.standard_normal(Y.shape)
    if missing:
        Y[rng.uniform(size=Y.shape) < missing] = np.nan
    dt = xp.float64
    return MultiOutputGPR(ICM(RBF(lengthscale=np.ones(D), xp=xp, dtype=dt), T, RANK),
                          Gaussian(variance=np.full(T, 0.2), xp=xp, dtype=dt),
                          B.asarray(X, dtype=dt, xp=xp), B.asarray(Y, dtype=dt, xp=xp),
                          solver=solver)


class KroneckerStep:
    """objective_and_grad of an isotopic ICM: two eigendecompositions, n x n and t x t."""

    params = (available_backends(), [500, 1000, 2000])
    param_names = ["backend", "n"]
    timeout = 600

    def setup(self, backend, n):
        self.model = _model(B.namespace_by_name(backend), n, 0.0, "auto")

    def time_objective_and_grad(self, backend, n):
        self.model.objective_and_grad()

    def peakmem_objective_and_grad(self, backend, n):
        self.model.objective_and_grad()


class MissingOutputsStep:
    """objective_and_grad with 30% of the entries missing: Cholesky on the observed entries
    against CG (default options) on the masked Kronecker operator."""

    params = (available_backends(), [300, 700], ["cholesky", "cg"])
    param_names = ["backend", "n", "solver"]
    timeout = 600

    def setup(self, backend, n, solver):
        self.model = _model(B.namespace_by_name(backend), n, 0.3, solver)

    def time_objective_and_grad(self, backend, n, solver):
        self.model.objective_and_grad()

    def peakmem_objective_and_grad(self, backend, n, solver):
        self.model.objective_and_grad()
