"""GPR(solver="cg"): one BBMM training step (LML and gradient) and prediction, by n, against
the Cholesky path where it fits (issue 33)."""

import numpy as np

from gpnum import backend as B
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

from ._common import available_backends


def _model(xp, n, solver, dense_limit_mib, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(n)
    dt = xp.float64
    X, y = B.asarray(X, dtype=dt, xp=xp), B.asarray(y, dtype=dt, xp=xp)
    return GPR(Matern32(lengthscale=np.ones(d), variance=1.0, xp=xp, dtype=dt),
               Gaussian(variance=0.05, xp=xp, dtype=dt), X, y, solver=solver,
               cg_options={"dense_limit_mib": dense_limit_mib})


class TrainingStep:
    """objective_and_grad: Cholesky, CG with K formed once per step ("cg_dense"), CG with
    kernel row blocks recomputed in every product ("cg_blocked")."""

    params = (available_backends(), [1000, 2500, 5000, 10000],
              ["cholesky", "cg_dense", "cg_blocked"])
    param_names = ["backend", "n", "method"]
    timeout = 1800

    def setup(self, backend, n, method):
        if method == "cholesky" and n > 5000:
            raise NotImplementedError  # asv: skipped (O(n^3), minutes)
        xp = B.namespace_by_name(backend)
        solver = "cholesky" if method == "cholesky" else "cg"
        self.model = _model(xp, n, solver, 4096.0 if method == "cg_dense" else 0.0)

    def time_objective_and_grad(self, backend, n, method):
        self.model.objective_and_grad()

    def peakmem_objective_and_grad(self, backend, n, method):
        self.model.objective_and_grad()


class Prediction:
    """predict_f at 1,000 points: the cached mean solve and LOVE cache, then the products."""

    params = (available_backends(), [1000, 5000, 10000])
    param_names = ["backend", "n"]
    timeout = 1800

    def setup(self, backend, n):
        xp = B.namespace_by_name(backend)
        self.model = _model(xp, n, "cg", 0.0)
        self.Xs = B.asarray(np.random.default_rng(1).uniform(-2.0, 2.0, (1000, 4)),
                            dtype=xp.float64, xp=xp)

    def time_predict_f_cold(self, backend, n):
        self.model._cg_cache = None
        self.model.predict_f(self.Xs)
