"""One SVGP ELBO-and-gradient step and one training step (natural gradients + Adam)."""

import time

import numpy as np

from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian
from gpnum.optim import Adam, NaturalGradient
from gpnum.models import SVGP

from ._common import available_backends, sync


def _problem(xp, dtype, m, b=256, d=2, seed=0):
    rng = np.random.default_rng(seed)
    dt = getattr(xp, dtype)
    X = B.asarray(rng.uniform(-1, 1, (b, d)), dtype=dt, xp=xp)
    y = B.asarray(np.sin(3 * B.to_numpy(X)[:, 0]) + 0.1 * rng.standard_normal(b), dtype=dt, xp=xp)
    Z = B.asarray(rng.uniform(-1, 1, (m, d)), dtype=dt, xp=xp)
    return X, y, Z


# float32 cannot certify a spectrum floor of 1e-4 under lambda_max ~ 115 (rounding ~ 10 eps32
# lambda_max = 1.4e-4): CIQ whitening then raises NotPSDError, so float32 uses 1e-3.
_JITTER = {"float64": 1e-4, "float32": 1e-3}


def _model(xp, dtype, Z, whitening):
    dt = getattr(xp, dtype)
    return SVGP(Matern52(lengthscale=0.3, variance=1.0, xp=xp, dtype=dt),
                Gaussian(variance=0.1, xp=xp, dtype=dt), Z, num_data=100_000,
                whitening=whitening, jitter=_JITTER[dtype],
                ciq_options={"rtol": 1e-3, "maxiter": 200})


class ElboAndGrad:
    """model.elbo_and_grad on a batch of 256, d = 2."""

    params = (available_backends(), ["float64", "float32"], [500, 1000, 2000, 4000],
              ["cholesky", "ciq"])
    param_names = ["backend", "dtype", "m", "whitening"]
    timeout = 900

    def setup(self, backend, dtype, m, whitening):
        self.xp = B.namespace_by_name(backend)
        self.X, self.y, Z = _problem(self.xp, dtype, m)
        self.model = _model(self.xp, dtype, Z, whitening)

    def time_elbo_and_grad(self, backend, dtype, m, whitening):
        value, grads = self.model.elbo_and_grad(self.X, self.y)
        sync(grads["inducing_points"])

    def track_step_over_cholesky(self, backend, dtype, m, whitening):
        """Step time divided by one Cholesky factorisation of K_ZZ (same run)."""
        t0 = time.perf_counter()
        sync(self.model.elbo_and_grad(self.X, self.y)[1]["inducing_points"])
        t_step = time.perf_counter() - t0
        K, _ = self.model._kzz()
        t0 = time.perf_counter()
        sync(B.cholesky(K))
        return t_step / (time.perf_counter() - t0)

    track_step_over_cholesky.unit = "ratio"


class TrainingStep:
    """One training step: natural gradients on q plus Adam on the rest, batch 256."""

    params = (available_backends(), ["float64"], [500, 1000, 2000],
              ["cholesky+dense", "ciq+dense", "ciq+krylov"])
    param_names = ["backend", "dtype", "m", "variant"]
    timeout = 900

    def setup(self, backend, dtype, m, variant):
        self.xp = B.namespace_by_name(backend)
        self.X, self.y, Z = _problem(self.xp, dtype, m)
        whitening, method = variant.split("+")
        self.model = _model(self.xp, dtype, Z, whitening)
        self.ngd = NaturalGradient(0.1, method)
        self.adam = Adam(lr=0.01)
        self.ngd.prepare(self.model)

    def time_training_step(self, backend, dtype, m, variant):
        model = self.model
        value, grads, data = model.elbo_and_grad(self.X, self.y, return_data=True)
        self.ngd.step(model, data=data)
        hyper = {k: v for k, v in grads.items() if k not in ("q_mu", "q_sqrt")}
        g_u = model.grad_to_unconstrained(hyper)
        u = model.unconstrained()
        model.set_unconstrained(self.adam.step({k: u[k] for k in g_u}, g_u, maximize=True))
        sync(model.inducing_points)


class FitStep:
    """The whole gpnum.fit step (issue 18): one epoch of 8 minibatches of 256 per call, natural
    gradients (dense) for q alternating with Adam, d = 9, float64; per-step time is the call's
    time / 8. Tracked against one GEMM of the step's largest product (m x 256 by 256 x m)."""

    params = (available_backends(), [500, 1000, 2000], ["cholesky", "ciq"])
    param_names = ["backend", "m", "whitening"]
    timeout = 1200

    def setup(self, backend, m, whitening):
        from gpnum.optim import fit

        self.fit = fit
        self.xp = B.namespace_by_name(backend)
        rng = np.random.default_rng(0)
        n, d = 8 * 256, 9
        X = rng.uniform(-1, 1, (n, d))
        y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(n)
        dt = self.xp.float64
        self.X = B.asarray(X, dtype=dt, xp=self.xp)
        self.y = B.asarray(y, dtype=dt, xp=self.xp)
        Z = B.asarray(X[:m] if m <= n else rng.uniform(-1, 1, (m, d)), dtype=dt, xp=self.xp)
        self.model = SVGP(Matern52(lengthscale=np.ones(d), xp=self.xp, dtype=dt),
                          Gaussian(variance=0.1, xp=self.xp, dtype=dt), Z, num_data=n,
                          whitening=whitening, jitter=1e-4,
                          ciq_options={"rtol": 1e-3, "maxiter": 200})
        fit(self.model, self.X, self.y, epochs=1, batch_size=256, progress=False)

    def time_fit_epoch_of_8_steps(self, backend, m, whitening):
        self.fit(self.model, self.X, self.y, epochs=1, batch_size=256, progress=False)
        sync(self.model.q_mu if self.model.variational_form == "cholesky"
             else self.model.q_theta1)

    def track_step_over_gemm(self, backend, m, whitening):
        """Time per step divided by one (m, 256) x (256, m) GEMM, measured in the same run."""
        t0 = time.perf_counter()
        self.fit(self.model, self.X, self.y, epochs=1, batch_size=256, progress=False)
        t_step = (time.perf_counter() - t0) / 8
        a = self.xp.ones((m, 256), dtype=self.xp.float64)
        t0 = time.perf_counter()
        sync(B.matmul(a, a.T))
        return t_step / (time.perf_counter() - t0)

    track_step_over_gemm.unit = "ratio"
