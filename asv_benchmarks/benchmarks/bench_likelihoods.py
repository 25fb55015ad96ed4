"""Likelihood expectations and their gradients, next to the SVGP work on the same minibatch.

The reference is one (m, m) x (m, n) GEMM with m = 512: the product that whitens the
cross-covariance ``A = L^{-1} K_ZX`` of an n-point minibatch in a whitened SVGP step, so
``track_*_over_gemm`` says how much of such a step the likelihood costs.
"""

import time

import numpy as np

from gpnum import backend as B
from gpnum.likelihoods import Bernoulli, Gaussian, RobustMax, StudentT

from ._common import available_backends, make, sync, repeats

_M_REF = 512
_NUM_CLASSES = 10


def _build(name, xp, dt):
    kw = dict(xp=xp, dtype=dt)
    return {
        "gaussian": lambda: Gaussian(0.5, **kw),
        "student_t": lambda: StudentT(4.0, 0.5, **kw),
        "probit": lambda: Bernoulli("probit", **kw),
        "logit": lambda: Bernoulli("logit", **kw),
        "robust_max": lambda: RobustMax(_NUM_CLASSES, **kw),
    }[name]()


def _best_pair(f, g, reps=15):
    """Minimum times of ``f`` and ``g``, run alternately so that both see the same load."""
    tf, tg = [], []
    for _ in range(repeats(reps)):
        for fun, ts in ((f, tf), (g, tg)):
            t0 = time.perf_counter()
            fun()
            ts.append(time.perf_counter() - t0)
    return min(tf), min(tg)


class VariationalExpectations:
    params = (available_backends(), ["float32", "float64"],
              ["gaussian", "student_t", "probit", "logit", "robust_max"], [1000, 10000])
    param_names = ["backend", "dtype", "likelihood", "n"]

    def setup(self, backend, dtype, likelihood, n):
        xp = B.namespace_by_name(backend)
        dt = getattr(xp, dtype)
        rng = np.random.default_rng(0)
        self.lik = _build(likelihood, xp, dt)
        shape = (n, _NUM_CLASSES) if likelihood == "robust_max" else (n,)
        self.mu = make(xp, rng.normal(size=shape), dt)
        self.var = make(xp, rng.uniform(0.1, 1.0, size=shape), dt)
        if likelihood == "robust_max":
            y = rng.integers(0, _NUM_CLASSES, n).astype(np.float64)
        elif likelihood in ("probit", "logit"):
            y = (rng.uniform(size=n) < 0.5).astype(np.float64)
        else:
            y = rng.normal(size=n)
        self.y = make(xp, y, dt)
        K = rng.normal(size=(_M_REF, _M_REF))
        self.K = make(xp, K, dt)
        self.Kzx = make(xp, rng.normal(size=(_M_REF, n)), dt)

    def time_ve(self, backend, dtype, likelihood, n):
        sync(self.lik.variational_expectations(self.y, self.mu, self.var, check=False))

    def time_ve_and_grad(self, backend, dtype, likelihood, n):
        sync(self.lik.variational_expectations_and_grad(self.y, self.mu, self.var,
                                                        check=False)[0])

    def time_predictive_log_density(self, backend, dtype, likelihood, n):
        sync(self.lik.predictive_log_density(self.y, self.mu, self.var, check=False))

    def track_ve_and_grad_over_gemm(self, backend, dtype, likelihood, n):
        """ve + gradients over one (512, 512) x (512, n) GEMM, timed alternately in-process."""
        t_lik, t_gemm = _best_pair(self._ve_grad, lambda: sync(self.K @ self.Kzx))
        return t_lik / t_gemm

    track_ve_and_grad_over_gemm.unit = "ratio"

    def track_ve_and_grad_over_gaussian(self, backend, dtype, likelihood, n):
        """ve + gradients over the closed-form Gaussian ones on the same n points (the cost of
        quadrature plus special functions relative to a few elementwise passes)."""
        gauss = Gaussian(0.5, xp=B.get_namespace(self.mu), dtype=self.mu.dtype)
        y, mu, var = (self.y, self.mu, self.var) if self.mu.ndim == 1 else \
            (self.y, self.mu[:, 0], self.var[:, 0])
        t_lik, t_ref = _best_pair(
            self._ve_grad,
            lambda: sync(gauss.variational_expectations_and_grad(y, mu, var, check=False)[0]))
        return t_lik / t_ref

    track_ve_and_grad_over_gaussian.unit = "ratio"

    def _ve_grad(self):
        sync(self.lik.variational_expectations_and_grad(self.y, self.mu, self.var,
                                                        check=False)[0])
