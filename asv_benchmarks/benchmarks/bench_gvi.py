"""One GVI training step (issue 30, like bench_svtp): Adam on every parameter, as ``gpnum.fit``
trains GVI, for Gaussian Wasserstein inference (``wasserstein``: its batch eigenvalue term costs
an extra O(b^3) SVD) and projected GVI (``projected-bhattacharyya``: per-point, O(b)); minibatch
256, d = 8, float64, Gaussian likelihood, the regulariser's prior at its initial kernel."""

import time

import numpy as np

from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian
from gpnum.models import GVI
from gpnum.optim import Adam

from ._common import available_backends, sync


class GVITrainingStep:
    """objective_and_grad on a minibatch, then one Adam step on every parameter: what
    ``gpnum.fit(gvi, ...)`` does per step. Tracked against one Cholesky of K_ZZ (same run)."""

    params = (available_backends(), [100, 500, 1000], ["wasserstein", "projected-bhattacharyya"])
    param_names = ["backend", "M", "divergence"]
    timeout = 600

    def setup(self, backend, M, divergence):
        self.xp = xp = B.namespace_by_name(backend)
        rng = np.random.default_rng(0)
        b, d = 256, 8
        X = rng.uniform(-1, 1, (b, d))
        self.X = B.asarray(X, dtype=xp.float64, xp=xp)
        self.y = B.asarray(np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(b),
                           dtype=xp.float64, xp=xp)
        Z = B.asarray(rng.uniform(-1, 1, (M, d)), dtype=xp.float64, xp=xp)
        self.model = GVI(Matern52(lengthscale=np.ones(d), xp=xp, dtype=xp.float64),
                         Gaussian(variance=0.1, xp=xp, dtype=xp.float64), Z,
                         num_data=100_000, divergence=divergence, jitter=1e-4)
        self.adam = Adam(lr=0.01)
        self._step()  # first-touch memory and Adam's state outside the timings

    def _step(self):
        model = self.model
        _, grads = model.objective_and_grad(self.X, self.y)
        g_u = model.grad_to_unconstrained(grads)
        u = model.unconstrained()
        model.set_unconstrained(self.adam.step({k: u[k] for k in g_u}, g_u, maximize=True))
        sync(model.inducing_points)

    def time_training_step(self, backend, M, divergence):
        self._step()

    def track_step_over_cholesky(self, backend, M, divergence):
        """Step time divided by one Cholesky factorisation of K_ZZ (same run)."""
        t0 = time.perf_counter()
        self._step()
        t_step = time.perf_counter() - t0
        K = self.model.kernel(self.model.inducing_points)
        K = K + 1e-4 * self.xp.eye(K.shape[0], dtype=K.dtype)
        t0 = time.perf_counter()
        sync(B.cholesky(K))
        return t_step / (time.perf_counter() - t0)

    track_step_over_cholesky.unit = "ratio"
