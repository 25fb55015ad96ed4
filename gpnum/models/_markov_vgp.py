"""A Markovian variational GP on one input: non-Gaussian likelihoods over time in O(n).

Conjugate-computation variational inference (CVI; Khan & Lin 2017, "Conjugate-computation
variational inference", AISTATS) in state-space form (Chang, Wilkinson, Khan & Solin 2020,
"Fast variational learning in state-space Gaussian process models", MLSP). Every data point
carries a Gaussian site ``t_k(f_k) = N(y~_k | f_k, v~_k)`` with natural parameters
``(lambda1_k, lambda2_k) = (y~_k / v~_k, 1 / v~_k)``; the approximate posterior is the GP
posterior under the sites,

    q(f) = p(f) prod_k t_k(f_k) / Z,

i.e. GP regression on the pseudo-data ``y~`` with per-point noise ``v~``: the blocked Kalman
filter and smoother of :mod:`gpnum.models._kalman_blocked` (``log Z`` and its gradient) and
:mod:`gpnum.models._kalman_blocked_marginals` (q's marginals at the data), and the parallel
smoother of :mod:`gpnum.models._kalman_smoother` (predictions), with ``R`` of shape (n,). With ``q``'s marginals ``N(m_k, s_k)`` and the expected log density
``E_k = E_q[log p(y_k | f_k)]`` (its derivatives ``g_m``, ``g_s`` from the likelihood's
``variational_expectations_and_grad``), the CVI step of size ``beta`` is the natural gradient
of the ELBO in the sites' natural parameters (the CVI update of Khan & Lin 2017, in the
per-point site form of Chang et al. 2020):

    lambda2 <- (1 - beta) lambda2 + beta (-2 g_s),
    lambda1 <- (1 - beta) lambda1 + beta (g_m - 2 g_s m).

The ELBO is

    ELBO = log Z + sum_k E_q[log p(y_k | f_k)] - sum_k E_q[log t_k(f_k)],
    log Z = log N(y~; c, K + diag(v~))   (the pseudo-data's log marginal likelihood),

because ``KL(q || p) = sum_k E_q[log t_k] - log Z``.
"""

from __future__ import annotations

import math
import warnings

from gpnum.backend import asarray, device_of
from gpnum.errors import ConvergenceWarning, ShapeError, describe_shape
from gpnum.kernels import state_space_form
from gpnum.likelihoods import Bernoulli, Gaussian, NegativeBinomial, Poisson
from gpnum.models import _kalman_smoother as smoother
from gpnum.models._composite import FullBatchGaussianModel
from gpnum.models._kalman_blocked import lml_blocked
from gpnum.models._kalman_blocked_marginals import smoothed_marginals

__all__ = ["MarkovVGP"]

_LOG_2PI = math.log(2.0 * math.pi)
#: Likelihoods whose log density is concave in f (so ``g_s <= 0`` and every site precision
#: stays positive): Gaussian; Bernoulli (probit and logit); Poisson and negative-binomial with
#: the log link (``d^2/df^2 log p`` is ``-e^f`` and ``-(r + y) r e^f / (r + e^f)^2``).
LOG_CONCAVE = (Gaussian, Bernoulli, Poisson, NegativeBinomial)
#: Smallest site precision ``lambda2``: where a point's likelihood is nearly flat at q (a
#: confident Bernoulli label) ``-2 g_s`` underflows towards 0 and the site's variance
#: ``1 / lambda2`` towards infinity; the floor keeps the filter finite. It moves the fixed
#: point only for points whose curvature is below it.
MIN_SITE_PRECISION = 1e-10
#: Initial sites: ``y~ = 0`` with variance 100 (nearly uninformative).
INITIAL_SITE_PRECISION = 1e-2


class MarkovVGP(FullBatchGaussianModel):
    """A variational GP over time with any log-concave likelihood, in O(n) by state space.

    Parameters
    ----------
    kernel : gpnum.kernels.Kernel
        A kernel with a state-space form (:func:`gpnum.kernels.state_space_form`: Matern,
        SHO, Cosine, Constant, their sums and products, ...) on the one input column.
    likelihood : gpnum.likelihoods.Likelihood
        Gaussian, Bernoulli, Poisson or NegativeBinomial (:data:`LOG_CONCAVE`). Other
        likelihoods raise ``TypeError``: without log-concavity a site's precision
        ``-2 g_s`` can turn negative and the sites no longer define a Gaussian ``q``.
    X : array (n, 1)
        Times, any order (sorted inside; ties allowed).
    y : array (n,)
        Targets in the likelihood's support (``likelihood.check_targets``).
    mean : float or array ()
        Initial constant prior mean ``c`` (learned).
    beta : float
        CVI step size in (0, 1] of every site update (default 1: for a Gaussian likelihood
        one step reaches the exact posterior).
    tol : float
        The sites count as converged when a step moves ``q``'s marginals by at most ``tol``
        (:meth:`converge_sites`).
    max_iter : int
        Most CVI steps per :meth:`converge_sites` (a :class:`gpnum.ConvergenceWarning` when
        they do not suffice).
    sites : tuple of two arrays (n,), optional
        Initial site natural parameters ``(lambda1, lambda2)`` in the order of ``X``
        (:meth:`sites`); default ``(0, 0.01)``.

    Notes
    -----
    **Training.** :meth:`objective_and_grad` first runs CVI steps from the current sites to
    their fixed point at the current hyper-parameters, then returns the ELBO and its gradient.
    The ELBO at the fixed point is a function of the hyper-parameters alone, and its gradient
    is that of the pseudo-data's ``log Z`` at fixed sites plus the likelihood's own
    parameters' ``sum_k dE_k/dpsi``: at the fixed point the sites equal
    ``(g_m - 2 g_s m, -2 g_s)``, so the derivatives of ``sum_k (E_k - E_q[log t_k])`` w.r.t.
    every marginal ``(m_k, s_k)`` vanish (``g_m = (y~_k - m_k) / v~_k``,
    ``g_s = -1 / (2 v~_k)``) and nothing flows through ``q``; and the fixed point is a
    stationary point of the ELBO in the sites, so their own change does not count either.
    (Away from the fixed point, after a :class:`gpnum.ConvergenceWarning`, the gradient is
    only approximate.) :func:`gpnum.fit` therefore trains the model by its default L-BFGS-B
    with no change: every evaluation alternates site updates (to convergence, warm-started)
    with the hyper-parameter step; full-batch Adam works too (the training data may come in
    any order: sorted by time, then target, they map onto the same sites).

    Everything runs in float64, as :class:`GPR`'s state-space path: a float32 model's
    transitions are formed in float32 from its parameters and cast up.

    One series only: several series through ``SameGroup`` are not supported.

    References
    ----------
    Khan, M. E. & Lin, W. (2017). Conjugate-computation variational inference: converting
    variational inference in non-conjugate models to inferences in conjugate models. AISTATS.
    Chang, P. E., Wilkinson, W. J., Khan, M. E. & Solin, A. (2020). Fast variational learning
    in state-space Gaussian process models. IEEE MLSP.
    """

    _param_names = ("mean",)
    _positive = ()
    objective_name = "elbo"
    solver = "state_space"

    def __init__(self, kernel, likelihood, X, y, *, mean=0.0, beta=1.0, tol=1e-8,
                 max_iter=500, sites=None):
        self._setup(kernel, likelihood, X, y, mean, 0.0)
        xp = self.xp
        if self._X.shape[1] != 1:
            raise ShapeError(f"X: MarkovVGP is for one input column (time; one series: "
                             f"SameGroup's several series are not supported), got shape "
                             f"{describe_shape(self._X.shape)}")
        state_space_form(kernel)  # a clear TypeError for a kernel without one
        likelihood.check_targets(self._y)
        beta, tol = float(beta), float(tol)
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"beta: expected a CVI step size in (0, 1], got {beta!r}")
        if not tol > 0.0:
            raise ValueError(f"tol: expected a positive tolerance, got {tol!r}")
        if int(max_iter) < 1:
            raise ValueError(f"max_iter: expected at least 1, got {max_iter!r}")
        self.beta, self.tol, self.max_iter = beta, tol, int(max_iter)
        # canonical order: by time, then target (points equal in both are interchangeable,
        # so that the training data in any order map onto the same sites)
        self._order = self._canonical_order(self._X, self._y)
        high = xp.float64
        self._t = xp.astype(xp.take(self._X[:, 0], self._order), high)
        self._ys = xp.take(self._y, self._order)
        n = self._t.shape[0]
        dev = device_of(self._t)
        zero = xp.zeros((1,), dtype=high, device=dev)
        self._dt = xp.concat([zero, self._t[1:] - self._t[:-1]]) if n > 1 else zero
        if sites is None:
            self._lam1 = xp.zeros((n,), dtype=high, device=dev)
            self._lam2 = xp.full((n,), INITIAL_SITE_PRECISION, dtype=high, device=dev)
        else:
            self.set_sites(*sites)
        self.num_site_steps = 0

    # ------------------------------------------------------------------ settings and data
    def _check_likelihood(self, likelihood):
        if not isinstance(likelihood, LOG_CONCAVE):
            raise TypeError(f"likelihood: MarkovVGP's CVI sites need a log-concave likelihood "
                            f"(site precisions -2 dE/ds must stay positive): one of "
                            f"{', '.join(c.__name__ for c in LOG_CONCAVE)}, got "
                            f"{type(likelihood).__name__} (use SVGP for it)")

    def _canonical_order(self, X, y):
        xp = self.xp
        by_y = xp.argsort(y, stable=True)
        return xp.take(by_y, xp.argsort(xp.take(X[:, 0], by_y), stable=True))

    def config(self) -> dict:
        """``{"beta", "tol", "max_iter"}`` (JSON-able; :meth:`from_config`)."""
        return {"beta": self.beta, "tol": self.tol, "max_iter": self.max_iter}

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        """Rebuild from :meth:`config`, :meth:`data` (with the sites) and ``params``."""
        sites = (data["site_lambda1"], data["site_lambda2"]) if "site_lambda1" in data \
            else None
        return cls(kernel, likelihood, data["X"], data["y"], **cls._own_init_args(params),
                   sites=sites, **config)

    def data(self) -> dict:
        """``X``, ``y`` and the sites' natural parameters ``site_lambda1``, ``site_lambda2``
        (n,) in the order of ``X`` (float64)."""
        lam1, lam2 = self.sites()
        return {"X": self._X, "y": self._y, "site_lambda1": lam1, "site_lambda2": lam2}

    def sites(self):
        """The sites' natural parameters ``(lambda1, lambda2)`` (n,) each, float64, in the
        order of the training data: site ``k`` is ``N(y~_k | f_k, 1 / lambda2_k)`` with
        ``y~_k = lambda1_k / lambda2_k``."""
        xp = self.xp
        inverse = xp.argsort(self._order)
        return xp.take(self._lam1, inverse), xp.take(self._lam2, inverse)

    def set_sites(self, lambda1, lambda2):
        """Assign the sites (arrays (n,) in the order of the training data, ``lambda2 > 0``)."""
        xp = self.xp
        n = self._X.shape[0]
        out = []
        for name, a in (("lambda1", lambda1), ("lambda2", lambda2)):
            a = asarray(a, dtype=xp.float64, xp=xp, device=self._device)
            if tuple(a.shape) != (n,):
                raise ShapeError(f"sites: {name} expected shape ({n},), got "
                                 f"{describe_shape(a.shape)}")
            if not bool(xp.all(xp.isfinite(a))):
                raise ValueError(f"sites: {name} has non-finite values")
            out.append(xp.take(a, self._order))
        if not bool(xp.all(out[1] > 0.0)):
            raise ValueError("sites: lambda2 (the sites' precisions) must be > 0")
        self._lam1, self._lam2 = out

    # ------------------------------------------------------------------ CVI
    @property
    def _form(self):
        """The kernel's state-space form at its current parameter values."""
        return state_space_form(self.kernel)

    def _c(self):
        return self.xp.astype(self.mean, self.xp.float64)

    def _marginals(self):
        """``q``'s marginal means and variances (n,) at the sorted training inputs (the
        blocked smoother, :mod:`gpnum.models._kalman_blocked_marginals`)."""
        xp = self.xp
        c = self._c()
        m, s = smoothed_marginals(self._form, self._dt, self._lam1 / self._lam2 - c,
                                  1.0 / self._lam2)
        floor = xp.asarray(1e-300, dtype=xp.float64, device=self._device)
        return m + c, xp.maximum(s, floor)  # a variance exactly 0 only in round-off

    def _expectations(self, m, s, want_grad=True):
        lik = self.likelihood
        if want_grad:
            return lik.variational_expectations_and_grad(self._ys, m, s, check=False)
        return lik.variational_expectations(self._ys, m, s, check=False)

    def _step(self, m, s, g, beta):
        """One CVI step from the marginals ``(m, s)`` and the likelihood's gradients ``g``;
        returns how far it moved ``q`` (:meth:`converge_sites`), a 0-d array."""
        xp = self.xp
        # log-concave: g_s <= 0 up to the quadrature's round-off; the floor (module constant)
        g_s = xp.minimum(g["var"], xp.asarray(-0.5 * MIN_SITE_PRECISION, dtype=xp.float64,
                                               device=self._device))
        lam2 = (1.0 - beta) * self._lam2 + beta * (-2.0 * g_s)
        lam1 = (1.0 - beta) * self._lam1 + beta * (g["mu"] - 2.0 * g_s * m)
        d2, d1 = lam2 - self._lam2, lam1 - self._lam1
        # the change of the sites in units of q's marginal: its precision's relative change
        # and its mean's shift in standard deviations (to first order)
        move = xp.max(xp.maximum(s * xp.abs(d2), xp.sqrt(s) * xp.abs(d1 - m * d2)))
        self._lam1, self._lam2 = lam1, lam2
        self.num_site_steps += 1
        return move

    def update_sites(self, beta=None):
        """One CVI step of every site (size ``beta``, default the model's); returns how far
        it moved ``q`` (a float; :meth:`converge_sites`)."""
        beta = self.beta if beta is None else float(beta)
        m, s = self._marginals()
        _, g = self._expectations(m, s)
        return float(self._step(m, s, g, beta))

    def converge_sites(self, beta=None, tol=None, max_iter=None):
        """CVI steps until a step moves ``q``'s marginals by at most ``tol``, at most
        ``max_iter`` steps (defaults: the model's). Returns the number of steps; warns
        (:class:`gpnum.ConvergenceWarning`) when they did not suffice.

        A step's move is the largest over the points of ``s_k |d lambda2_k|`` (the relative
        change of the marginal's precision) and ``sqrt(s_k) |d lambda1_k - m_k d lambda2_k|``
        (the shift of its mean in standard deviations), to first order. The full step
        (``beta = 1``) can oscillate where the likelihood is far from Gaussian under a broad
        prior (a large kernel variance with Bernoulli labels); whenever a step moves ``q``
        more than the one before it, or leaves a site non-finite, the step size is halved
        for the rest of the call (the undamped iteration's fixed point is the same).
        """
        beta = self.beta if beta is None else float(beta)
        tol = self.tol if tol is None else float(tol)
        max_iter = self.max_iter if max_iter is None else int(max_iter)
        move, last = math.inf, math.inf
        for i in range(max_iter):
            old = self._lam1, self._lam2
            move = self.update_sites(beta)  # the step's one synchronisation
            if not math.isfinite(move):  # a non-finite site makes the move non-finite too
                self._lam1, self._lam2 = old
                beta *= 0.5
                continue
            if move <= tol:
                return i + 1
            if move > last:
                beta *= 0.5
            last = move
        warnings.warn(f"MarkovVGP: the CVI sites moved q by {move:.2e} in their last of "
                      f"{max_iter} steps (step size {beta:.3g}), above tol={tol:.1e}; raise "
                      "max_iter or lower beta", ConvergenceWarning, stacklevel=2)
        return max_iter

    # ------------------------------------------------------------------ the ELBO
    def _check_training_order(self, X, y):
        """Canonical order of (X, y), which must be the training data in some order."""
        xp = self.xp
        if X is self._X and y is self._y:
            return
        order = self._canonical_order(X, y)
        same = xp.all(xp.take(X[:, 0], order) == xp.take(self._X[:, 0], self._order)) & \
            xp.all(xp.take(y, order) == self._ys)
        if not bool(same):
            raise ValueError("MarkovVGP: the ELBO is over the model's own training data (a "
                             "site per point); pass X and y as built, in any order, or build "
                             "a new model for other data")

    def elbo(self):
        """The ELBO at the current sites and hyper-parameters (no CVI step), 0-d."""
        return self._elbo(need_grad=False)[0]

    def _elbo(self, need_grad):
        xp = self.xp
        c = self._c()
        lam1, lam2 = self._lam1, self._lam2
        ytil, R = lam1 / lam2, 1.0 / lam2
        log_z, parts = lml_blocked(self._form, self._dt, ytil - c, R, need_grad)
        m, s = self._marginals()
        if need_grad:
            ve, g = self._expectations(m, s)
        else:
            ve, g = self._expectations(m, s, want_grad=False), None
        # E_q[log N(y~ | f, v~)] per site
        site = -0.5 * (_LOG_2PI - xp.log(lam2)) - 0.5 * lam2 * ((ytil - m) ** 2 + s)
        value = log_z + xp.sum(xp.astype(ve, xp.float64)) - xp.sum(site)
        return value, parts, g

    def _objective_and_grad(self, X, y):
        self._check_training_order(X, y)
        self.converge_sites()
        value, (d_kernel, _, d_y), g = self._elbo(need_grad=True)
        params = self.kernel.parameters()
        grads = {"mean": self._scalar(-d_y)}
        for i, name in enumerate(self._form.names):
            grads[f"kernel.{name}"] = self._shaped(d_kernel[i], params[name].shape)
        lik = self.likelihood.parameters()
        for name, grad in g["params"].items():
            grads[f"likelihood.{name}"] = self._shaped(grad, lik[name].shape)
        return self._scalar(value), {k: grads[k] for k in self.parameters()}

    # ------------------------------------------------------------------ predictions
    def _prediction_state(self):
        """The smoother under the sites, after converging them at the current parameters."""
        self.converge_sites()
        xp = self.xp
        resid = self._lam1 / self._lam2 - self._c()
        return smoother.smoothed_state(self._form, self._t, resid[:, None], 1.0 / self._lam2,
                                       xp)

    def _predict(self, Xnew, state, full_cov):
        xp = self.xp
        if full_cov:
            raise ValueError("MarkovVGP.predict_f: full_cov=True is not available (the "
                             "marginal variances are); use GPR for joint covariances")
        tnew = xp.astype(Xnew[:, 0], xp.float64)
        mean, var = smoother.predict_at(self._form, state, tnew, xp)
        mean = mean[:, 0] + self._c()
        return xp.astype(mean, self.dtype), xp.astype(var, self.dtype)
