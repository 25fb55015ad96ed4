"""One SVTP training step (issue 21): natural gradients for q = ST(nu_q, m, diag(sigma^2))
plus Adam for the rest, or Adam on everything; minibatch 256, d = 8, 8 draws of q, float64."""

import time

import numpy as np

from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.optim import Adam, NaturalGradient
from gpnum.models import SVTP

from ._common import available_backends, sync


class SVTPTrainingStep:
    """objective_and_grad on a minibatch, then the natural step on q (``ngd``) and Adam on the
    hyper-parameters, or Adam on every parameter (``adam``): what ``gpnum.fit`` does per step.
    The natural step costs O(M) (``student_t_fisher_solve``), so the two should be level."""

    params = (available_backends(), [100, 500, 1000], ["ngd", "adam"])
    param_names = ["backend", "M", "optimizer"]
    timeout = 600

    def setup(self, backend, M, optimizer):
        self.xp = xp = B.namespace_by_name(backend)
        rng = np.random.default_rng(0)
        b, d = 256, 8
        X = rng.uniform(-1, 1, (b, d))
        self.X = B.asarray(X, dtype=xp.float64, xp=xp)
        self.y = B.asarray(np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(b),
                           dtype=xp.float64, xp=xp)
        Z = B.asarray(rng.uniform(-1, 1, (M, d)), dtype=xp.float64, xp=xp)
        self.model = SVTP(Matern52(lengthscale=np.ones(d), xp=xp, dtype=xp.float64), Z,
                          num_data=100_000)
        self.ngd = NaturalGradient(0.1) if optimizer == "ngd" else None
        self.adam = Adam(lr=0.01)
        self._step()  # first-touch memory and Adam's state outside the timings

    def _step(self):
        model = self.model
        if self.ngd is not None:
            _, grads, data = model.objective_and_grad(self.X, self.y, return_data=True)
            self.ngd.step(model, data=data)
            grads = {k: g for k, g in grads.items() if k not in model.natural_gradient_names}
        else:
            _, grads = model.objective_and_grad(self.X, self.y)
        g_u = model.grad_to_unconstrained(grads)
        u = model.unconstrained()
        model.set_unconstrained(self.adam.step({k: u[k] for k in g_u}, g_u, maximize=True))
        sync(model.q_mu)

    def time_training_step(self, backend, M, optimizer):
        self._step()

    def track_step_over_cholesky(self, backend, M, optimizer):
        """Step time divided by one Cholesky factorisation of K_ZZ (same run)."""
        t0 = time.perf_counter()
        self._step()
        t_step = time.perf_counter() - t0
        K = self.model.kernel(self.model.inducing_points)
        K = K + 1e-6 * self.xp.eye(K.shape[0], dtype=K.dtype)
        t0 = time.perf_counter()
        sync(B.cholesky(K))
        return t_step / (time.perf_counter() - t0)

    track_step_over_cholesky.unit = "ratio"
