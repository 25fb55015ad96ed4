"""Sparse variational Student-t process (SVTP) with natural gradients.

Xu, Zeng & Paisley (2024), "Information geometry and beta link for optimizing sparse
variational Student-t processes" (arXiv 2408.06699), after Xu & Zeng, "Sparse variational
Student-t processes" (AAAI 2024). Fisher information: docs/svtp.md.

Model (covariance form throughout: ``ST(nu, mu, C)`` has covariance ``C`` for ``nu > 2``):

    u ~ ST_M(nu, 0, K_ZZ),      u = L v with L L^T = K_ZZ, so v ~ ST_M(nu, 0, I) (whitened);
    f | u ~ ST(nu + M, mu, (nu + beta - 2) / (nu + M - 2) Sigma),   beta = u^T K_ZZ^-1 u = v^T v,
    mu = c + K_XZ K_ZZ^-1 u = c + A^T v,   Sigma = K_XX - A^T A,   A = L^-1 K_ZX;
    p(y_i | u) = ST(nu + M, mu_i, s_i),   s_i = (nu + beta - 2) / (nu + M - 2) Sigma_ii + sigma_n^2

(the per-point likelihood of Xu, Zeng & Paisley, as their public code has it: the noise
variance is not beta-scaled). The variational distribution is ``q(v) = ST(nu_q, m, S)``, with
``S = diag(sigma^2)`` (default) or ``S = R R^T`` (``covariance="full"``), in the whitened
coordinates, like gpnum's SVGP (Hensman et al. 2015): ``q(u) = ST(nu_q, L m, L S L^T)``, and
``KL(q(u) || p(u)) = KL(q(v) || ST(nu, 0, I))``, which costs O(M) instead of O(M^3).

ELBO, with ``S_mc`` draws of the Gaussian scale mixture
``v_s = m + w_s S^(1/2) eps_s``, ``w_s = sqrt((nu_q - 2) / r_s)``, ``r_s ~ chi^2(nu_q)``:

    ELBO = (N / b) (1 / S_mc) sum_s sum_i log p(y_i | v_s) - KL,
    KL = -H(q) - E_q[log p(v)],
    -E_q[log p(v)] = -lgamma((nu+M)/2) + lgamma(nu/2) + M/2 log((nu-2) pi)
                     + (nu + M)/2 E_q[log(1 + v^T v / (nu - 2))],

with the last expectation by the same draws (``kl="mc"``) or by Jensen's upper bound
``log(1 + (m^T m + tr S) / (nu - 2))`` (``kl="upper-bound"``: an upper bound on the KL, so a
lower bound on the ELBO; deterministic). ``H(q)`` is closed form. Every gradient is
hand-derived: through the draws (including ``nu_q``, by the implicit reparameterisation of
the chi-square draw, :func:`chi2_quantile_and_grad`), the Cholesky whitening and the kernel.
"""

from __future__ import annotations

import math

import numpy as np

from gpnum import backend as B
from gpnum.backend import asarray, get_namespace
from gpnum.errors import NotPSDError, ShapeError, describe_shape
from gpnum.kernels import Kernel
from gpnum.likelihoods import Gaussian
from gpnum.models._composite import ComposedParameters
from gpnum.models._student_t_math import (
    chi2_quantile_and_grad,
    digamma,
    lgamma,
    student_t_fisher_solve,
    trigamma,
)
from gpnum.models._whitening import make_whitening
from gpnum.special import log_gamma_half_ratio_and_grad, logsumexp

__all__ = ["SVTP"]

_PI = math.pi


class SVTP(ComposedParameters):
    """Sparse variational Student-t process (Xu & Zeng 2024; Xu, Zeng & Paisley 2024).

    Parameters
    ----------
    kernel : gpnum.kernels kernel
        Covariance function of the prior ``K`` (learned).
    Z : array (M, d)
        Initial inducing inputs (learned). Their namespace, device and floating dtype become
        the model's.
    num_data : int
        Size ``N`` of the training set; the data term is scaled by ``N / b``. ``M > N`` is an
        error.
    df : float
        Prior degrees of freedom ``nu > 2`` (learned; hold it with ``fit(..., fixed=["df"])``).
    noise_variance : float
        ``sigma_n^2`` (the parameter ``likelihood.variance``; the model holds it in a
        :class:`gpnum.likelihoods.Gaussian`, which serves only as its container and never as
        the observation model).
    kl : {"mc", "upper-bound"}
        How ``E_q[log(1 + v^T v / (nu - 2))]`` in the KL is taken (module docstring).
    covariance : {"diag", "full"}
        ``q``'s scale: ``q_scale`` is ``sigma`` (M,) > 0, or a lower-triangular ``R`` (M, M).
        Natural gradients need ``"diag"`` (the closed-form Fisher is for a diagonal scale).
    q_df : float
        Initial ``nu_q > 2`` of ``q`` (learned).
    num_samples : int
        Monte-Carlo draws ``S_mc`` of ``q`` per objective.
    seed : int
        Seed of the model's generator of those draws (saved in checkpoints with its state).
    mean : float
        Constant prior mean ``c`` (learned).
    jitter : float
        Added to ``K_ZZ``'s diagonal.
    num_predict_samples : int
        Draws of ``q`` (fixed seed 0, so deterministic) for :meth:`log_predictive_density`.

    Attributes
    ----------
    q_mu : array (M,)
        Whitened mean ``m`` (zeros initially).
    q_scale : array (M,) or (M, M)
        ``sigma`` (ones initially) or ``R`` (identity).
    q_df : array ()
        ``nu_q``.
    df : array ()
        ``nu``.

    Notes
    -----
    Natural gradients (``gpnum.fit(model, optimizer="ngd")``) update ``(q_mu, q_scale, q_df)``
    with the closed-form Fisher of ``q`` (:func:`gpnum.models.student_t_fisher`) and its
    O(M) inverse, through the model protocol's extension :meth:`natural_gradient_step`;
    Adam updates the rest.
    """

    _param_names = ("q_mu", "q_scale", "q_df", "df", "inducing_points", "mean")
    _positive = ()
    _TWO_OFFSET = ("q_df", "df")  # parameters > 2: unconstrained = softplus^-1(value - 2)
    _lower = {"q_df": 2.0, "df": 2.0}
    #: Largest ``nu_q`` a natural-gradient step moves to. q is then Gaussian to ~M / max_df (the
    #: ELBO is flat in nu_q well before: bike, 1e3 -> 1e5 changes it by 0.02 nats), and the
    #: Fisher's ``nu`` entry (~ M^2 / nu^4, a sum of terms ~ M / nu^2) is still accurate to
    #: ~1e-16 max_df^2 / M in float64.
    max_df = 1e4

    def __init__(self, kernel, Z, *, num_data, df=5.0, noise_variance=0.1, kl="mc",
                 covariance="diag", q_df=None, num_samples=8, seed=0, mean=0.0, jitter=1e-6,
                 num_predict_samples=1024):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel, got {type(kernel).__name__}")
        if kl not in ("mc", "upper-bound"):
            raise ValueError(f"kl: expected 'mc' or 'upper-bound', got {kl!r}")
        if covariance not in ("diag", "full"):
            raise ValueError(f"covariance: expected 'diag' or 'full', got {covariance!r}")
        Z = self._adopt_inducing_points(Z, kernel, name="Z")
        xp, dt, dev = self.xp, self.dtype, self._device
        self._adopt_num_data(num_data)
        M = Z.shape[0]
        if M > self.num_data:
            raise ValueError(f"Z: {M} inducing points for num_data = {self.num_data} training "
                             f"points; expected M <= N (more inducing points than data only "
                             f"adds cost)")
        self.num_samples = int(num_samples)
        if self.num_samples < 1:
            raise ValueError(f"num_samples: expected an integer >= 1, got {num_samples!r}")
        self.num_predict_samples = int(num_predict_samples)
        self.kl_method = kl
        self.covariance = covariance
        self.jitter = float(jitter)
        self.seed = int(seed)
        self.rng = B.default_rng(self.seed, xp=xp, device=dev)
        self.kernel = kernel
        self.likelihood = Gaussian(variance=noise_variance, xp=xp, dtype=dt, device=dev)
        self._check_component("kernel")
        self.whitening_strategy = make_whitening("cholesky")
        self.inducing_points = Z
        self.mean = mean
        self.df = df
        self.q_df = df if q_df is None else q_df
        self.q_mu = xp.zeros((M,), dtype=dt, device=dev)
        self.q_scale = (xp.ones((M,), dtype=dt, device=dev) if covariance == "diag"
                        else xp.eye(M, dtype=dt, device=dev))

    # ------------------------------------------------------------------ parameters
    def _convert_param(self, name, value):
        arr = super()._convert_param(name, value)
        xp = self.xp
        if name in self._TWO_OFFSET:
            if arr.ndim != 0:
                raise ShapeError(f"{name}: expected a scalar, got shape {describe_shape(arr.shape)}")
            if not bool(arr > 2.0):
                raise ValueError(f"{name}: expected degrees of freedom > 2 (the covariance "
                                 f"form needs a finite variance), got {float(arr)!r}")
        elif name == "q_scale":
            if arr.ndim == 2:
                arr = xp.tril(arr)
                if not bool(xp.all(xp.abs(xp.linalg.diagonal(arr)) > 0.0)):
                    raise ValueError("q_scale: expected a lower-triangular matrix with a "
                                     "non-zero diagonal")
            elif not bool(xp.all(arr > 0.0)):
                raise ValueError(f"q_scale: expected values > 0, got {self._host_repr(arr)}")
        elif name == "mean" and arr.ndim != 0:
            raise ShapeError(f"mean: expected a scalar, got shape {describe_shape(arr.shape)}")
        return arr

    @property
    def num_inducing(self) -> int:
        return self.inducing_points.shape[0]

    #: Minibatch model: ``fit`` samples batches and scales by ``num_data / b``.
    full_batch = False

    def _constrained(self) -> tuple:
        """Own parameters stored through the softplus transform: ``df`` and ``q_df`` as
        ``softplus^-1(nu - 2)`` (bounds in ``_lower``) and a diagonal ``q_scale`` as
        ``softplus^-1``; the components keep their own transforms."""
        return self._TWO_OFFSET + (("q_scale",) if self.covariance == "diag" else ())

    # ------------------------------------------------------------------ protocol: settings
    def config(self) -> dict:
        """JSON-able settings, including the state of the draws' generator."""
        return {"num_data": self.num_data, "kl": self.kl_method, "covariance": self.covariance,
                "num_samples": self.num_samples, "seed": self.seed, "jitter": self.jitter,
                "num_predict_samples": self.num_predict_samples,
                "rng_state": self.rng.get_state()}

    def data(self) -> dict:
        """Constructor arrays that are not parameters: none."""
        return {}

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        """Rebuild from :meth:`config` and :meth:`parameters` (see :mod:`gpnum.checkpoint`)."""
        model = cls(kernel, params["inducing_points"], num_data=config["num_data"],
                    df=params["df"], noise_variance=likelihood.variance, kl=config["kl"],
                    covariance=config["covariance"], q_df=params["q_df"],
                    num_samples=config["num_samples"], seed=config["seed"],
                    jitter=config["jitter"],
                    num_predict_samples=config["num_predict_samples"])
        model.likelihood = likelihood
        model.rng.set_state(config["rng_state"])
        return model

    def check_data(self, X, y):
        """Validate and convert training data: shapes, finiteness, ``N >= M``."""
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0], "y (training targets)")
        return X, y

    def _check_X(self, X, name="X"):
        if B.is_array(X):  # an array of another namespace is an error here, not converted
            get_namespace(X, self.inducing_points)
        return super()._check_X(X, name)

    # ------------------------------------------------------------------ draws
    def draw(self, num_samples=None, rng=None):
        """Random numbers for one objective: ``{"u": ndarray (S,), "eps": array (S, M)}``.

        ``u`` are the uniforms whose chi-square quantiles give ``r_s`` (host float64);
        ``eps`` standard normals (the model's namespace). Pass the result as ``draws=`` to
        :meth:`elbo` / :meth:`objective_and_grad` to evaluate at common random numbers.
        """
        rng = self.rng if rng is None else rng
        S = self.num_samples if num_samples is None else int(num_samples)
        # Uniforms away from 0 and 1 keep the quantile finite.
        u = np.clip(rng.host().uniform(size=S), 1e-12, 1.0 - 1e-12)
        eps = rng.normal((S, self.num_inducing), dtype=self.dtype)
        return {"u": u, "eps": eps}

    def _q_draws(self, draws, need_grad):
        """``V (S, M)`` draws of q, with ``w``, ``dw/dnu_q`` and ``S^(1/2) eps``."""
        xp = self.xp
        nu_q = float(self.q_df)  # one scalar to the host per objective: the quantiles need it
        r, dr = chi2_quantile_and_grad(nu_q, draws["u"], grad=need_grad)
        w_h = np.sqrt((nu_q - 2.0) / r)
        w = asarray(w_h, dtype=self.dtype, xp=xp, device=self._device)
        dw = None
        if need_grad:
            dw = asarray(0.5 * w_h * (1.0 / (nu_q - 2.0) - dr / r), dtype=self.dtype, xp=xp,
                         device=self._device)
        eps = draws["eps"]
        D = eps * self.q_scale[None, :] if self.covariance == "diag" else eps @ self.q_scale.T
        V = self.q_mu[None, :] + w[:, None] * D
        return V, w, dw, D

    # ------------------------------------------------------------------ the ELBO
    def _entropy_and_grad(self):
        """``H(q)`` (closed form) and its gradients w.r.t. ``q_scale`` and ``q_df``."""
        xp = self.xp
        M = float(self.num_inducing)
        nq = self.q_df
        a, b = 0.5 * (nq + M), 0.5 * nq
        if self.covariance == "diag":
            logdet = xp.sum(xp.log(self.q_scale))
            g_scale = 1.0 / self.q_scale
        else:
            dg = xp.linalg.diagonal(self.q_scale)
            logdet = xp.sum(xp.log(xp.abs(dg)))
            g_scale = xp.eye(self.num_inducing, dtype=self.dtype, device=self._device) / dg[None, :]
        H = (-lgamma(a) + lgamma(b) + 0.5 * M * xp.log((nq - 2.0) * _PI) + logdet
             + a * (digamma(a) - digamma(b)))
        g_nq = 0.5 * M / (nq - 2.0) + 0.5 * a * (trigamma(a) - trigamma(b))
        return H, g_scale, g_nq

    def _prior_const_and_grad(self):
        """``-lgamma((nu+M)/2) + lgamma(nu/2) + M/2 log((nu-2) pi)`` and its ``nu``-derivative."""
        xp = self.xp
        M = float(self.num_inducing)
        nu = self.df
        c = -lgamma(0.5 * (nu + M)) + lgamma(0.5 * nu) + 0.5 * M * xp.log((nu - 2.0) * _PI)
        g = -0.5 * digamma(0.5 * (nu + M)) + 0.5 * digamma(0.5 * nu) + 0.5 * M / (nu - 2.0)
        return c, g

    def _second_moment(self):
        """``E_q[v^T v] = m^T m + tr S``."""
        xp = self.xp
        return xp.sum(self.q_mu * self.q_mu) + xp.sum(self.q_scale * self.q_scale)

    def kl_divergence(self, draws=None):
        """``KL(q(v) || ST(nu, 0, I))``, by the model's ``kl`` method (a 0-d array).

        With ``kl="mc"`` the expectation uses ``draws`` (default: fresh draws from the
        model's generator).
        """
        V = None
        if self.kl_method == "mc":
            draws = self.draw() if draws is None else draws
            V, _, _, _ = self._q_draws(draws, need_grad=False)
        return self._kl_from(V)

    def _base(self, X, need_grad):
        xp = self.xp
        Z = self.inducing_points
        if need_grad:
            Kzz, kzz_vjp = self.kernel.gram_and_vjp(Z)
            Kzx, kzx_vjp = self.kernel.gram_and_vjp(Z, X)
        else:
            Kzz, kzz_vjp = self.kernel(Z), None
            Kzx, kzx_vjp = self.kernel(Z, X), None
        try:
            A, wcache = self.whitening_strategy.whiten(Kzz, Kzx, self.jitter)
        except NotPSDError as exc:
            raise self._not_psd(f"K_ZZ + jitter I (m = {self.num_inducing}, jitter = "
                                f"{self.jitter:g})", exc) from None
        Sig = self.kernel.diag(X) - xp.sum(A * A, axis=0)
        # Round-off can push Sigma_ii (~0 when x sits on an inducing point) below zero; the
        # floor keeps the density's domain and its gradient is zero there.
        floor = 1e-12 if self.dtype == xp.float64 else 1e-6
        ok = Sig > floor
        Sig = xp.where(ok, Sig, floor)
        return A, Sig, ok, {"whiten": wcache, "kzz_vjp": kzz_vjp, "kzx_vjp": kzx_vjp}

    def _loglik_terms(self, y, V, A, Sig, need_grad):
        """Per-draw, per-point ``log p(y_i | v_s)`` (S, b) and its partial derivatives."""
        xp = self.xp
        M = float(self.num_inducing)
        nu = self.df
        k = nu + M
        beta = xp.sum(V * V, axis=1)                      # (S,)
        cb = (nu + beta - 2.0) / (nu + M - 2.0)           # (S,)
        s = cb[:, None] * Sig[None, :] + self.likelihood.variance
        mu = self.mean + V @ A                            # (S, b)
        e = y[None, :] - mu
        e2 = e * e
        den = (k - 2.0) * s + e2
        ratio, ratio_grad = log_gamma_half_ratio_and_grad(0.5 * k)
        log1pt = xp.log1p(e2 / ((k - 2.0) * s))
        ll = ratio - 0.5 * xp.log((k - 2.0) * _PI * s) - 0.5 * (k + 1.0) * log1pt
        if not need_grad:
            return ll, None
        frac = e2 / den                                   # t / (1 + t)
        g_mu = (k + 1.0) * e / den
        g_s = (-0.5 + 0.5 * (k + 1.0) * frac) / s
        g_k = (0.5 * ratio_grad - 0.5 / (k - 2.0) - 0.5 * log1pt
               + 0.5 * (k + 1.0) / (k - 2.0) * frac)
        return ll, {"g_mu": g_mu, "g_s": g_s, "g_k": g_k, "beta": beta, "cb": cb}

    def elbo(self, X, y, *, draws=None):
        """The ELBO on a minibatch, scaled to the whole data set (a 0-d array).

        Parameters
        ----------
        X : array (b, d)
        y : array (b,)
        draws : dict, optional
            :meth:`draw`'s output (common random numbers); default fresh draws.
        """
        X, y = self.check_data(X, y)
        draws = self.draw() if draws is None else draws
        A, Sig, _, _ = self._base(X, need_grad=False)
        V, _, _, _ = self._q_draws(draws, need_grad=False)
        ll, _ = self._loglik_terms(y, V, A, Sig, need_grad=False)
        xp = self.xp
        data = (self.num_data / X.shape[0]) * xp.mean(xp.sum(ll, axis=1))
        return data - self._kl_from(V)

    def _kl_from(self, V):
        H, _, _ = self._entropy_and_grad()
        c, _ = self._prior_const_and_grad()
        nu, M = self.df, float(self.num_inducing)
        xp = self.xp
        if self.kl_method == "upper-bound":
            cross = 0.5 * (nu + M) * xp.log1p(self._second_moment() / (nu - 2.0))
        else:
            cross = 0.5 * (nu + M) * xp.mean(xp.log1p(xp.sum(V * V, axis=1) / (nu - 2.0)))
        return -H + c + cross

    def objective_and_grad(self, X, y, *, validate=True, return_data=False, draws=None):
        """ELBO (see :meth:`elbo`) and its gradients w.r.t. every parameter.

        Parameters
        ----------
        X : array (b, d)
        y : array (b,)
        validate : bool
            ``False`` skips the input checks (data :meth:`check_data` has passed).
        return_data : bool
            Also return a dict with the gradients, for :meth:`natural_gradient_step`.
        draws : dict, optional
            Common random numbers (:meth:`draw`); default fresh draws from the generator.

        Returns
        -------
        elbo : 0-d array
        grads : dict
            Keyed like :meth:`parameters` (``q_scale`` full: lower triangle only).
        """
        xp = self.xp
        if validate:
            X, y = self.check_data(X, y)
        b = X.shape[0]
        if b > self.num_data:
            raise ValueError(f"num_data: expected at least the batch size {b}, got "
                             f"{self.num_data}")
        draws = self.draw() if draws is None else draws
        S = draws["eps"].shape[0]
        M = float(self.num_inducing)
        nu = self.df
        A, Sig, ok, cache = self._base(X, need_grad=True)
        V, w, dw, D = self._q_draws(draws, need_grad=True)
        ll, g = self._loglik_terms(y, V, A, Sig, need_grad=True)
        scale = self.num_data / (b * S)
        data = scale * xp.sum(ll)
        g_mu, g_s, beta, cb = scale * g["g_mu"], scale * g["g_s"], g["beta"], g["cb"]
        # s = cb Sigma + noise;  cb = (nu + beta - 2) / (nu + M - 2)
        gs_sig = xp.sum(g_s * Sig[None, :], axis=1)        # (S,): sum_i g_s Sigma_i
        g_V = g_mu @ A.T + (2.0 / (nu + M - 2.0)) * gs_sig[:, None] * V
        g_Sig = xp.where(ok, xp.sum(g_s * cb[:, None], axis=0), 0.0)   # (b,)
        g_nu = (scale * xp.sum(g["g_k"])
                + xp.sum(gs_sig * (M - beta)) / (nu + M - 2.0) ** 2)
        grads = {"mean": xp.sum(g_mu), "likelihood.variance": xp.sum(g_s)}
        # KL = -H + const(nu) + cross; the ELBO subtracts it.
        H, gH_scale, gH_nq = self._entropy_and_grad()
        c, gc_nu = self._prior_const_and_grad()
        g_m_direct = 0.0
        g_scale_direct = 0.0
        if self.kl_method == "upper-bound":
            E = self._second_moment()
            cross = 0.5 * (nu + M) * xp.log1p(E / (nu - 2.0))
            coef = (nu + M) / (nu - 2.0 + E)               # d cross / d(m, scale) = coef (m, scale)
            g_m_direct = -coef * self.q_mu
            g_scale_direct = -coef * self.q_scale
            g_cross_nu = 0.5 * xp.log1p(E / (nu - 2.0)) - 0.5 * (nu + M) * E / ((nu - 2.0) * (nu - 2.0 + E))
        else:
            lp = xp.log1p(beta / (nu - 2.0))
            cross = 0.5 * (nu + M) * xp.mean(lp)
            g_V = g_V - ((nu + M) / S) * V / (nu - 2.0 + beta)[:, None]
            g_cross_nu = 0.5 * xp.mean(lp) - 0.5 * (nu + M) * xp.mean(
                beta / ((nu - 2.0) * (nu - 2.0 + beta)))
        kl = -H + c + cross
        grads["df"] = g_nu - gc_nu - g_cross_nu
        # Through the draws V = m + w D, D = S^(1/2) eps.
        grads["q_mu"] = xp.sum(g_V, axis=0) + g_m_direct
        eps = draws["eps"]
        if self.covariance == "diag":
            g_scale = xp.sum(g_V * (w[:, None] * eps), axis=0)
        else:
            g_scale = xp.tril((g_V * w[:, None]).T @ eps)
        grads["q_scale"] = g_scale + g_scale_direct + gH_scale
        grads["q_df"] = xp.sum(xp.sum(g_V * D, axis=1) * dw) + gH_nq
        # Through A (mu = c + V A, Sigma = kdiag - colsum(A * A)) and the kernel.
        A_bar = V.T @ g_mu - 2.0 * A * g_Sig[None, :]
        Kzz_bar, Kzx_bar = self.whitening_strategy.backward(A, cache["whiten"], A_bar)
        gzz = cache["kzz_vjp"](Kzz_bar)
        gzx = cache["kzx_vjp"](Kzx_bar)
        gdiag = self.kernel.diag_vjp(g_Sig, X)
        for name in self.kernel.parameters():
            grads[f"kernel.{name}"] = (gzz["params"][name] + gzx["params"][name]
                                       + gdiag["params"][name])
        grads["inducing_points"] = gzz["X1"] + gzx["X1"]
        grads = {k: grads[k] for k in self.parameters()}
        value = data - kl
        if return_data:
            return value, grads, {"grads": grads}
        return value, grads

    # ------------------------------------------------------------------ natural gradients
    @property
    def natural_gradient_names(self) -> tuple:
        """The parameters a natural-gradient step owns (``fit`` leaves them to it)."""
        return ("q_mu", "q_scale", "q_df")

    def natural_gradient_step(self, data, gamma, *, max_rejections=60):
        """One natural-gradient step on ``(q_mu, q_scale, q_df)``; the model-protocol extension
        that :class:`gpnum.optim.NaturalGradient` delegates to.

        ``theta <- theta + gamma F(theta)^-1 g`` with ``g`` the ELBO's gradient (already scaled
        by ``N / b``) and ``F`` the Fisher of ``q`` (:func:`student_t_fisher_solve`, O(M)).
        Step-size guard: a candidate is rejected, and its step halved, unless each ``sigma_i``
        stays within a factor 2 of its current value (so ``> 0``) -- this step is shared by
        ``m`` and ``sigma`` -- and, with a step of its own, ``nu_q - 2`` within a factor 2 of
        its value (so ``nu_q > 2``) and ``nu_q <= max_df``. A step that only just kept
        ``sigma > 0`` would put ``log sigma`` at -30 and the next gradient at ``1/sigma``. A
        direction that is not finite gives no step at all; so does a block still outside the
        box after ``max_rejections`` halvings.

        Parameters
        ----------
        data : dict
            ``objective_and_grad(..., return_data=True)``'s third output.
        gamma : float
            Step size in (0, 1].
        max_rejections : int

        Returns
        -------
        gamma_used : float
            The smaller of the two steps taken.
        num_rejected : int
            Halvings of both blocks together.
        """
        if self.covariance != "diag":
            raise ValueError("natural gradients for SVTP need covariance='diag' (the "
                             "closed-form Fisher is that of a diagonal scale); use "
                             "optimizer='adam' for covariance='full'")
        xp = self.xp
        g = data["grads"]
        M = self.num_inducing
        vec = xp.concat([g["q_mu"], g["q_scale"], xp.reshape(g["q_df"], (1,))])
        delta = student_t_fisher_solve(self.q_df, self.q_scale, vec)
        d_m, d_s, d_n = delta[:M], delta[M:2 * M], delta[2 * M]
        sig, nq = self.q_scale, self.q_df
        # The largest steps inside the guard's box: rejecting and halving from gamma lands on
        # gamma / 2^k, the first such step below the limit; computed in one go (one host
        # synchronisation instead of k).
        inf = xp.asarray(float("inf"), dtype=self.dtype, device=self._device)
        lim_s = xp.where(d_s < 0.0, 0.5 * sig / xp.abs(d_s),
                         xp.where(d_s > 0.0, sig / xp.where(d_s > 0.0, d_s, 1.0), inf))
        ex = nq - 2.0
        # Upwards, also at most to max_df: F_nunu falls like M / nu^3, so the natural step in
        # nu_q grows like nu_q^3 once q is all but Gaussian, and would double nu_q every step.
        up = xp.minimum(ex, self.max_df - nq)
        lim_n = xp.where(d_n < 0.0, 0.5 * ex / xp.abs(d_n),
                         xp.where(d_n > 0.0, up / xp.where(d_n > 0.0, d_n, 1.0), inf))
        limits = xp.stack([xp.min(lim_s), lim_n])
        finite = xp.all(xp.isfinite(delta))
        limits, finite = B.to_numpy(limits), bool(finite)
        if not finite:
            return 0.0, max_rejections + 1  # no step from a non-finite direction
        steps, rejected = [], 0
        for limit in limits:
            # Two step sizes: (m, sigma) share the sigma box's (m's Fisher is 1/sigma^2, so
            # its step is only sound once sigma is), nu_q has its own: its natural gradient is
            # the noisiest (F_nunu ~ M / nu^3) and must not throttle m and sigma.
            step, k = float(gamma), 0
            while not step < float(limit) and k <= max_rejections:
                step *= 0.5
                k += 1
            steps.append(0.0 if k > max_rejections else step)
            rejected += k
        step_s, step_n = steps
        self.set_parameters({"q_mu": self.q_mu + step_s * d_m, "q_scale": sig + step_s * d_s,
                             "q_df": nq + step_n * d_n})
        step = min(step_s, step_n)
        return step, rejected

    # ------------------------------------------------------------------ prediction
    def predict_f(self, X, full_cov=False):
        """Mean and variance of ``f(X)`` under ``q`` (exact moments of the Student-t marginal).

        ``E[f] = c + A^T m``; ``Var[f] = E_q[cb] Sigma + A^T S A`` with
        ``E_q[cb] = (nu + m^T m + tr S - 2) / (nu + M - 2)``.

        Parameters
        ----------
        X : array (n, d)
        full_cov : bool
            Return the (n, n) covariance instead of the variances.

        Returns
        -------
        mean : array (n,)
        var : array (n,) or cov : array (n, n)
        """
        xp = self.xp
        X = self._check_X(X)
        M = float(self.num_inducing)
        ecb = (self.df + self._second_moment() - 2.0) / (self.df + M - 2.0)
        if full_cov:
            Z = self.inducing_points
            A, _ = self.whitening_strategy.whiten(self.kernel(Z), self.kernel(Z, X), self.jitter)
            SA = (self.q_scale[:, None] * A if self.covariance == "diag"
                  else self.q_scale.T @ A)
            cov = ecb * (self.kernel(X) - A.T @ A) + SA.T @ SA
            return self.mean + A.T @ self.q_mu, 0.5 * (cov + cov.T)
        mus, vs = [], []
        n = X.shape[0]
        for start in range(0, n, 4096):
            A, Sig, _, _ = self._base(X[start:min(start + 4096, n), :], need_grad=False)
            SA = (self.q_scale[:, None] * A if self.covariance == "diag"
                  else self.q_scale.T @ A)
            mus.append(self.mean + A.T @ self.q_mu)
            vs.append(ecb * Sig + xp.sum(SA * SA, axis=0))
        return xp.concat(mus), xp.concat(vs)

    def predict_y(self, X):
        """Mean and variance of ``y(X)``: :meth:`predict_f`'s plus ``sigma_n^2``."""
        mu, var = self.predict_f(X)
        return mu, var + self.likelihood.variance

    def log_predictive_density(self, X, y):
        """Per-point ``log E_q[p(y_i | u)]``, shape (n,), by ``num_predict_samples`` draws of
        ``q`` from a generator seeded 0 at every call (deterministic; the model's own generator
        is not advanced; the chi-square scales stratified), combined with logsumexp. The
        estimate of the log of an average is biased low by O(1 / num_predict_samples)."""
        xp = self.xp
        X, y = self.check_data(X, y)
        draws = self.draw(self.num_predict_samples,
                          rng=B.default_rng(0, xp=xp, device=self._device))
        # Stratified uniforms for the chi-square scales: the heavy tail of q in w is what makes
        # the average of densities noisy far from the mean; one draw per stratum tames it.
        S = self.num_predict_samples
        draws["u"] = np.clip((np.arange(S) + draws["u"]) / S, 1e-12, 1.0 - 1e-12)
        V, _, _, _ = self._q_draws(draws, need_grad=False)
        out = []
        n = X.shape[0]
        for start in range(0, n, 1024):
            stop = min(start + 1024, n)
            A, Sig, _, _ = self._base(X[start:stop, :], need_grad=False)
            ll, _ = self._loglik_terms(y[start:stop], V, A, Sig, need_grad=False)
            out.append(logsumexp(ll.T, axis=1) - math.log(V.shape[0]))
        return xp.concat(out)

