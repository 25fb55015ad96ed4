"""GPR(solver="state_space") on one input (issue 50): the log marginal likelihood, with its
gradient, and predictions, by n, on a Matern-3/2 + SHO kernel; the Cholesky path where it fits
as the ratio's reference. The peer comparison (celerite2, celerite) is
asv_benchmarks/scripts/state_space_vs_celerite.py: the peers live outside gpnum's environment."""

import numpy as np

from gpnum import backend as B
from gpnum.kernels import SHO, Matern32
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR

from ._common import available_backends


def _model(xp, n, solver, dtype="float64"):
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0.0, n / 10.0, n))
    y = np.sin(t) + 0.3 * rng.standard_normal(n)
    dt = getattr(xp, dtype)
    kern = (Matern32(lengthscale=2.0, variance=1.0, xp=xp, dtype=dt)
            + SHO(variance=1.0, period=5.0, quality=3.0, xp=xp, dtype=dt))
    return GPR(kern, Gaussian(variance=0.1, xp=xp, dtype=dt),
               B.asarray(t[:, None], dtype=dt, xp=xp), B.asarray(y, dtype=dt, xp=xp),
               solver=solver)


class LogMarginalLikelihood:
    """The LML alone and with its gradient (7 hyper-parameters): state space against
    Cholesky (Cholesky only up to n = 4000: O(n^3))."""

    params = (available_backends(), ["float64", "float32"], [1000, 4000, 10000, 100000],
              ["state_space", "cholesky"])
    param_names = ("backend", "dtype", "n", "solver")
    timeout = 600

    def setup(self, backend, dtype, n, solver):
        if solver == "cholesky" and n > 4000:
            raise NotImplementedError  # asv: skipped
        self.model = _model(B.namespace_by_name(backend), n, solver, dtype)

    def time_lml(self, backend, dtype, n, solver):
        self.model.log_marginal_likelihood()

    def time_lml_and_grad(self, backend, dtype, n, solver):
        self.model.log_marginal_likelihood_and_grad()

    def peakmem_lml_and_grad(self, backend, dtype, n, solver):
        self.model.log_marginal_likelihood_and_grad()


class LongSeries:
    """The LML alone and with its gradient at 10^5 and 10^6 points, NumPy float64 (the sizes
    of the celerite2 comparison; the blocked scan's Python loop runs over about sqrt(n / 2)
    steps, at most 512 blocks a step)."""

    params = ([100000, 1000000],)
    param_names = ("n",)
    timeout = 600
    number = 1
    repeat = 2

    def setup(self, n):
        self.model = _model(np, n, "state_space")

    def time_lml(self, n):
        self.model.log_marginal_likelihood()

    def time_lml_and_grad(self, n):
        self.model.log_marginal_likelihood_and_grad()

    def peakmem_lml_and_grad(self, n):
        self.model.log_marginal_likelihood_and_grad()


class Prediction:
    """predict_f at 1,000 new inputs spread over and beyond the data (the smoother over the n
    training inputs, then one step per new input)."""

    params = (available_backends(), [1000, 10000, 100000])
    param_names = ("backend", "n")
    timeout = 600

    def setup(self, backend, n):
        xp = B.namespace_by_name(backend)
        self.model = _model(xp, n, "state_space")
        new = np.random.default_rng(1).uniform(-10.0, n / 10.0 + 10.0, (1000, 1))
        self.Xs = B.asarray(new, dtype=xp.float64, xp=xp)

    def time_predict_f(self, backend, n):
        self.model.predict_f(self.Xs)
