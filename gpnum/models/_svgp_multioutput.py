"""Sparse variational LMC: ``q`` latent SVGPs mixed into ``t`` outputs by a learned ``W`` (t, q).

The linear model of coregionalisation as a variational model (Alvarez et al. 2012, section 4.1;
the SVGP form of GPflow's "LinearCoregionalization", van der Wilk et al. 2020, "A framework for
interdomain and multioutput Gaussian processes", section 4):

    f_a(x) = c_a + sum_j W[a, j] g_j(x),        g_j ~ GP(0, k_j) independent,

each ``g_j`` a whitened SVGP (Hensman et al. 2015) with its own ``q(u'_j) = N(m_j, R_j R_j^T)``
over inducing inputs ``Z`` shared by the latents, or a set ``Z_j`` of its own. Data are
(input, output) pairs: a row of ``X`` is an input followed by the index of the output observed
there (:func:`stack_outputs` builds them from an (n, t) array with NaN for the missing
entries), so a minibatch is a batch of pairs and a missing output costs nothing. With
``A_j = L_j^{-1} K_j(Z_j, X)`` (``L_j L_j^T = K_j(Z_j, Z_j) + jitter I``):

    mu_j = A_j^T m_j,       var_j = diag K_j(X, X) - colsum(A_j^2) + colsum((R_j^T A_j)^2),
    f_i ~ N(c_{a_i} + sum_j W[a_i, j] mu_j[i],  sum_j W[a_i, j]^2 var_j[i])   (the g_j independent),
    ELBO = (N / b) sum_i E[log N(y_i; f_i, sigma_{a_i}^2)] - sum_j KL(N(m_j, R_j R_j^T) || N(0, I)).

Gradients by hand: the Gaussian expectation's ``g_mu``, ``g_var`` per pair, pushed to
``W`` and to each latent's ``(mu_j, var_j)``, then through the whitened SVGP's backward pass
and the Cholesky factorisation (:func:`gpnum.backend.cholesky_vjp`).

Natural gradients: the latents are independent under ``q``, so the Fisher of the variational
family is block-diagonal across latents, and each ``q(u'_j)`` takes the whitened SVGP's natural-
gradient step (Salimbeni et al. 2018) with its own ``A_j`` and the pairs' ``g_mu``, ``g_var``
pushed to latent ``j`` (``W[a_i, j] g_mu_i`` and ``W[a_i, j]^2 g_var_i``): with a Gaussian
likelihood and ``gamma = 1`` each latent lands on its optimal ``q`` given the others' current
``q``. :class:`gpnum.optim.NaturalGradient` (``method="dense"``) takes it from
:meth:`LMCSVGP.objective_and_grad`'s ``return_data`` output.
"""

from __future__ import annotations

import math

from gpnum.backend import asarray, blas_pool, cholesky, cholesky_vjp, is_array, solve_triangular
from gpnum.errors import NotPSDError, ShapeError, check_finite, describe_shape
from gpnum.kernels import IndependentOutputs
from gpnum.models._composite import ComposedParameters
from gpnum.models._multioutput_math import check_latent_kernels, gaussian_log_density

__all__ = ["LMCSVGP", "stack_outputs"]

_LOG_2PI = math.log(2.0 * math.pi)


def stack_outputs(X, Y):
    """(input, output) pairs from inputs ``X`` (n, d) and targets ``Y`` (n, t), NaN = missing.

    Returns
    -------
    X_pairs : array (N_o, d + 1)
        The input of each observed entry followed by its output index (as a float).
    y : array (N_o,)
        The observed values, in the order of ``vec(Y)`` (input-major).
    """
    from gpnum.backend import device_of, get_namespace

    xp = get_namespace(X, Y)
    n, t = Y.shape
    if X.ndim != 2 or X.shape[0] != n:
        raise ShapeError(f"X: expected shape ({n}, d) to match Y, got {describe_shape(X.shape)}")
    dev = device_of(X)
    rows = xp.reshape(xp.broadcast_to(xp.arange(n, device=dev)[:, None], (n, t)), (-1,))
    cols = xp.reshape(xp.broadcast_to(xp.arange(t, device=dev)[None, :], (n, t)), (-1,))
    flat = xp.reshape(Y, (-1,))
    keep = xp.nonzero(~xp.isnan(flat))[0]
    Xp = xp.take(X, xp.take(rows, keep, axis=0), axis=0)
    idx = xp.astype(xp.take(cols, keep, axis=0), X.dtype)
    return xp.concat([Xp, idx[:, None]], axis=1), xp.take(flat, keep, axis=0)


class LMCSVGP(ComposedParameters):
    """Sparse variational linear model of coregionalisation with ``q`` latent GPs.

    Parameters
    ----------
    kernels : sequence of gpnum.kernels.Kernel
        The latent kernels ``k_j`` (distinct objects), ``q = len(kernels)``.
    likelihood : gpnum.likelihoods.Gaussian
        Noise variance per output (shape (t,)) or shared (shape ()), learned.
    inducing_points : array (m, d) or (q, m, d)
        Initial ``Z`` shared by the latent GPs, or one set per latent (learned). Its namespace,
        dtype and device become the model's.
    num_outputs : int
        ``t``.
    num_data : int
        Number ``N`` of training pairs (observed entries): the data term is scaled by ``N / b``.
    W : array (t, q), optional
        Initial mixing matrix (learned). Default: a fixed matrix with unequal columns.
    mean : float or array (t,)
        Initial constant mean per output (learned).
    jitter : float
        Added to the diagonal of each ``K_j(Z, Z)``.

    Notes
    -----
    Parameters: ``q_mu`` (q, m), ``q_sqrt`` (q, m, m, lower-triangular), ``W`` (t, q),
    ``inducing_points``, ``mean`` (t,), ``kernel.<j>.<name>``, ``likelihood.variance``.
    ``X`` everywhere (objective, predictions) holds pairs: the inputs plus a last column with
    the output index; :meth:`predict_outputs` predicts every output at plain inputs. Trained by
    ``gpnum.fit(model, X_pairs, y)``: natural gradients for the ``q(u'_j)`` (``ngd_method=
    "dense"``) alternating with Adam for the rest, or ``optimizer="adam"`` for Adam on
    everything; the Cholesky factorisations and solves run in float64.
    """

    _param_names = ("q_mu", "q_sqrt", "W", "inducing_points", "mean")
    _positive = ()
    full_batch = False
    objective_name = "elbo"

    def __init__(self, kernels, likelihood, inducing_points, *, num_outputs, num_data, W=None,
                 mean=0.0, jitter=1e-6):
        kernels = check_latent_kernels(kernels, likelihood)
        Z = self._adopt_inducing_points(inducing_points, kernels[0], num_latent=len(kernels))
        self._adopt_num_data(num_data)
        t = int(num_outputs)
        if t < 1:
            raise ValueError(f"num_outputs: expected an integer >= 1, got {num_outputs!r}")
        self.num_outputs = t
        self.kernel = IndependentOutputs(kernels)
        self.likelihood = likelihood
        self._check_component("kernel")
        self._check_component("likelihood")
        if tuple(likelihood.variance.shape) not in ((), (t,)):
            raise ShapeError(f"likelihood.variance: expected shape () or ({t},), got "
                             f"{describe_shape(likelihood.variance.shape)}")
        self.jitter = float(jitter)
        if not (self.jitter >= 0.0 and math.isfinite(self.jitter)):
            raise ValueError(f"jitter: expected a finite number >= 0, got {jitter!r}")
        xp, dt, dev = self.xp, self.dtype, self._device
        q, m = len(kernels), Z.shape[-2]
        self.num_latent = q
        #: Whether each latent has its own inducing inputs (``inducing_points`` (q, m, d)).
        self.separate_inducing = Z.ndim == 3
        self.inducing_points = Z
        self.q_mu = xp.zeros((q, m), dtype=dt, device=dev)
        self.q_sqrt = xp.broadcast_to(xp.eye(m, dtype=dt, device=dev), (q, m, m))
        if W is None:
            W = [[math.cos(0.7 * (a + 1) * (j + 1)) for j in range(q)] for a in range(t)]
        self.W = W
        if tuple(self.W.shape) != (t, q):
            raise ShapeError(f"W: expected shape ({t}, {q}), got {describe_shape(self.W.shape)}")
        mean = asarray(mean, dtype=dt, xp=xp, device=dev)
        self.mean = xp.ones(t, dtype=dt, device=dev) * mean if mean.ndim == 0 else mean
        if tuple(self.mean.shape) != (t,):
            raise ShapeError(f"mean: expected a scalar or shape ({t},), got "
                             f"{describe_shape(self.mean.shape)}")

    def _convert_param(self, name, value):
        arr = super()._convert_param(name, value)
        return self.xp.tril(arr) if name == "q_sqrt" else arr

    # ------------------------------------------------------------------ protocol
    def config(self) -> dict:
        """JSON-able settings: ``num_outputs``, ``num_data``, ``jitter``."""
        return {"num_outputs": self.num_outputs, "num_data": self.num_data,
                "jitter": self.jitter}

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        """Rebuild from :meth:`config` and the parameters (``kernel``: the
        :class:`~gpnum.kernels.IndependentOutputs` holding the latent kernels)."""
        model = cls(kernel.kernels, likelihood, params["inducing_points"],
                    num_outputs=config["num_outputs"], num_data=config["num_data"],
                    W=params["W"], mean=params["mean"], jitter=config["jitter"])
        model.set_parameters({k: params[k] for k in ("q_mu", "q_sqrt") if k in params})
        return model

    def data(self) -> dict:
        """None: the data stream past the model."""
        return {}

    def _check_pairs(self, X, name="X"):
        xp = self.xp
        X = asarray(X, dtype=self.dtype, xp=xp, device=self._device)
        d = self.inducing_points.shape[-1]
        if X.ndim != 2 or X.shape[1] != d + 1:
            raise ShapeError(f"{name}: expected (input, output) pairs of shape (n, {d + 1}) "
                             f"(the inputs, then the output index; see stack_outputs), got "
                             f"{describe_shape(X.shape)}")
        check_finite(xp, X, name)
        a = X[:, -1]
        if not bool(xp.all((a == xp.round(a)) & (a >= 0.0) & (a <= self.num_outputs - 1.0))):
            raise ValueError(f"{name}: the last column must hold output indices in "
                             f"0..{self.num_outputs - 1}")
        return X

    def check_data(self, X, y):
        """Validate pairs ``X`` (b, d + 1) and targets ``y`` (b,) once (``gpnum.fit`` does)."""
        X = self._check_pairs(X)
        y = asarray(y, dtype=self.dtype, xp=self.xp, device=self._device)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ShapeError(f"y: expected shape ({X.shape[0]},) to match X, got "
                             f"{describe_shape(y.shape)}")
        check_finite(self.xp, y, "y")
        if X.shape[0] > self.num_data:
            raise ValueError(f"num_data: the model says {self.num_data} pairs but X has "
                             f"{X.shape[0]}")
        return X, y

    # ------------------------------------------------------------------ latent GPs
    def _onehot(self, X):
        xp = self.xp
        out = xp.astype(X[:, -1], xp.int64)
        tasks = xp.arange(self.num_outputs, dtype=xp.int64, device=self._device)
        return xp.astype(out[:, None] == tasks[None, :], xp.float64)

    def _noise(self):
        xp = self.xp
        s2 = xp.astype(self.likelihood.variance, xp.float64, copy=False)
        return xp.ones(self.num_outputs, dtype=xp.float64, device=self._device) * s2

    def _latent(self, j, Xin, need_grad):
        """Marginals ``mu_j``, ``var_j`` (b,) of latent ``j`` at ``Xin`` and the backward
        pass's pieces (float64)."""
        xp = self.xp
        high = xp.float64
        k = self.kernel.kernels[j]
        Z = self.inducing_points[j, ...] if self.separate_inducing else self.inducing_points
        if need_grad:
            Kzz, vjp_zz = k.gram_and_vjp(Z)
            Kzx, vjp_zx = k.gram_and_vjp(Z, Xin)
        else:
            Kzz, Kzx, vjp_zz, vjp_zx = k(Z), k(Z, Xin), None, None
        try:
            L = cholesky(xp.astype(Kzz, high, copy=False), shift=self.jitter,
                         what=f"K_ZZ of latent {j}")
        except NotPSDError as exc:
            raise self._not_psd(f"K_ZZ of latent {j} + jitter I", exc,
                                kernel=k) from None
        A = solve_triangular(L, xp.astype(Kzx, high, copy=False), lower=True)
        m_j = xp.astype(self.q_mu[j, :], high, copy=False)
        R = xp.astype(self.q_sqrt[j, :, :], high, copy=False)
        RA = R.T @ A
        mu = A.T @ m_j
        var = (xp.astype(k.diag(Xin), high, copy=False) - xp.sum(A * A, axis=0)
               + xp.sum(RA * RA, axis=0))
        return mu, var, {"L": L, "A": A, "RA": RA, "R": R, "m": m_j, "vjp_zz": vjp_zz,
                         "vjp_zx": vjp_zx}

    def _kl(self, j):
        """``KL(N(m_j, R_j R_j^T) || N(0, I))`` (float64) and its gradient w.r.t. m_j, R_j."""
        xp = self.xp
        m = xp.astype(self.q_mu[j, :], xp.float64, copy=False)
        R = xp.astype(self.q_sqrt[j, :, :], xp.float64, copy=False)
        dR = xp.linalg.diagonal(R)
        kl = 0.5 * (xp.sum(m * m) + xp.sum(R * R) - m.shape[0]) - xp.sum(xp.log(xp.abs(dR)))
        eye = xp.eye(m.shape[0], dtype=xp.float64, device=self._device)
        return kl, m, R - eye * (1.0 / dR)[None, :]

    # ------------------------------------------------------------------ objective
    def objective_and_grad(self, X, y, *, validate=True, scale=None, return_data=False):
        """The ELBO of the pairs ``(X, y)`` (scaled by ``num_data / b``, or ``scale``) minus the
        KL terms, and its gradients keyed like :meth:`parameters`.

        With ``return_data=True`` also a dict for :class:`gpnum.optim.NaturalGradient`: ``A``
        (q, m, b) (latent ``j``'s ``L_j^{-1} K_j(Z_j, X)``), ``g_mu`` and ``g_var`` (b, q) (the
        scaled data term's gradients w.r.t. each latent's marginal mean and variance at the
        pairs' inputs) and ``cache["q_mean"]`` (q, m), all float64.
        """
        if validate:
            X, y = self.check_data(X, y)
        with blas_pool("scipy"):
            value, grads, data = self._elbo(X, y, scale, True)
        return (value, grads, data) if return_data else (value, grads)

    def to_natural(self):
        """Not offered: the natural-gradient step of this model is ``method="dense"``."""
        raise NotImplementedError("LMCSVGP keeps q in (mean, Cholesky) form: use "
                                  "gpnum.fit(..., ngd_method='dense') (the default) or "
                                  "optimizer='adam'")

    def q_cholesky(self):
        """``q_mu`` (q, m) and ``q_sqrt`` (q, m, m): the form natural gradients read."""
        return self.q_mu, self.q_sqrt

    def prior_term_and_grad(self):
        """``-sum_j KL_j`` and its gradients (``q_mu``, ``q_sqrt``)."""
        xp = self.xp
        total, g_mu, g_R = 0.0, [], []
        for j in range(self.num_latent):
            kl, gm, gR = self._kl(j)
            total = total - kl
            g_mu.append(-gm)
            g_R.append(-xp.tril(gR))
        return (self._cast(total),
                {"q_mu": self._cast(xp.stack(g_mu)), "q_sqrt": self._cast(xp.stack(g_R))})

    def _cast(self, v):
        return self.xp.astype(self.xp.asarray(v), self.dtype, copy=False)

    def _elbo(self, X, y, scale, need_grad):
        xp = self.xp
        high = xp.float64
        Xin = X[:, :-1]
        b = X.shape[0]
        s = self.num_data / b if scale is None else float(scale)
        onehot = self._onehot(X)                                           # (b, t)
        W = xp.astype(self.W, high, copy=False)
        Hrows = onehot @ W                                                  # (b, q) W[a_i, :]
        latents = [self._latent(j, Xin, need_grad) for j in range(self.num_latent)]
        MU = xp.stack([mu for mu, _, _ in latents], axis=1)            # (b, q)
        VAR = xp.stack([v for _, v, _ in latents], axis=1)
        mu = onehot @ xp.astype(self.mean, high, copy=False) + xp.sum(Hrows * MU, axis=1)
        v = xp.sum(Hrows * Hrows * VAR, axis=1)
        s2 = onehot @ self._noise()
        r = xp.astype(y, high, copy=False) - mu
        sq = r * r + v
        value = s * xp.sum(-0.5 * (_LOG_2PI + xp.log(s2)) - 0.5 * sq / s2)
        prior, prior_grads = self.prior_term_and_grad()
        value = self._cast(value) + prior
        if not need_grad:
            return value, None, None
        g_mu = s * r / s2
        g_v = -0.5 * s / s2
        g_s2 = onehot.T @ (s * (-0.5 / s2 + 0.5 * sq / (s2 * s2)))
        grads = {"mean": onehot.T @ g_mu,
                 "W": onehot.T @ (g_mu[:, None] * MU + 2.0 * g_v[:, None] * Hrows * VAR)}
        G_MU = g_mu[:, None] * Hrows
        G_VAR = g_v[:, None] * Hrows * Hrows
        g_qmu, g_R, g_Z = [], [], None
        kernel_grads = {}
        for j, (_, _, c) in enumerate(latents):
            gm, gv = G_MU[:, j], G_VAR[:, j]
            A, RA, R, L = c["A"], c["RA"], c["R"], c["L"]
            g_qmu.append(A @ gm)
            g_R.append(xp.tril(2.0 * (A * gv[None, :]) @ RA.T))
            g_A = c["m"][:, None] * gm[None, :] + 2.0 * (R @ RA - A) * gv[None, :]
            g_Kzx = solve_triangular(L, g_A, lower=True, trans=True)    # L^{-T} g_A
            g_Kzz = cholesky_vjp(L, -xp.tril(g_Kzx @ A.T))
            k = self.kernel.kernels[j]
            zz = c["vjp_zz"](self._cast(g_Kzz))
            zx = c["vjp_zx"](self._cast(g_Kzx))
            dg = k.diag_vjp(self._cast(gv), Xin)["params"]
            for name in zz["params"]:
                kernel_grads[f"kernel.{j}.{name}"] = (zz["params"][name] + zx["params"][name]
                                                      + dg[name])
            gz = zz["X1"] + zx["X1"]
            if self.separate_inducing:
                g_Z = [gz] if g_Z is None else g_Z + [gz]
            else:
                g_Z = gz if g_Z is None else g_Z + gz
        if self.separate_inducing:
            g_Z = xp.stack(g_Z)
        grads["q_mu"] = xp.stack(g_qmu)
        grads["q_sqrt"] = xp.stack(g_R)
        var = self.likelihood.variance
        grads["likelihood.variance"] = xp.reshape(xp.sum(g_s2) if var.ndim == 0 else g_s2,
                                                  tuple(var.shape))
        out = {k: self._cast(g) for k, g in grads.items()}
        out["q_mu"] = out["q_mu"] + prior_grads["q_mu"]
        out["q_sqrt"] = out["q_sqrt"] + prior_grads["q_sqrt"]
        out["inducing_points"] = g_Z
        out.update(kernel_grads)
        data = {"A": xp.stack([c["A"] for _, _, c in latents]), "g_mu": G_MU, "g_var": G_VAR,
                "cache": {"q_mean": xp.stack([c["m"] for _, _, c in latents])}}
        return value, {k: out[k] for k in self.parameters()}, data

    # ------------------------------------------------------------------ predictions
    def _latent_marginals(self, Xin):
        xp = self.xp
        lat = [self._latent(j, Xin, False) for j in range(self.num_latent)]
        return (xp.stack([mu for mu, _, _ in lat], axis=1),
                xp.stack([v for _, v, _ in lat], axis=1))

    def predict_f(self, X, full_cov=False):
        """Mean and variance (each (b,)) of ``f_{a_i}(x_i)`` at pairs ``X`` (b, d + 1)."""
        if full_cov:
            raise ValueError("full_cov: LMCSVGP.predict_f gives marginals of pairs; use "
                             "predict_outputs(X, full_output_cov=True) for output covariances")
        xp = self.xp
        X = self._check_pairs(X)
        with blas_pool("scipy"):
            MU, VAR = self._latent_marginals(X[:, :-1])
        onehot = self._onehot(X)
        H = onehot @ xp.astype(self.W, xp.float64, copy=False)
        mean = onehot @ xp.astype(self.mean, xp.float64, copy=False) + xp.sum(H * MU, axis=1)
        return self._cast(mean), self._cast(xp.sum(H * H * VAR, axis=1))

    def predict_y(self, X):
        """:meth:`predict_f` plus each pair's noise variance."""
        mean, var = self.predict_f(X)
        X = self._check_pairs(X)
        return mean, var + self._cast(self._onehot(X) @ self._noise())

    def log_predictive_density(self, X, y):
        """Per-pair ``log N(y_i; mean_i, var_i + sigma_{a_i}^2)``, shape (b,)."""
        mean, var = self.predict_y(X)
        y = asarray(y, dtype=self.dtype, xp=self.xp, device=self._device)
        return gaussian_log_density(y, mean, var)

    def predict_outputs(self, Xnew, full_output_cov=False):
        """Every output at plain inputs ``Xnew`` (m, d): mean (m, t) and variances (m, t), or
        with ``full_output_cov`` the (m, t, t) covariances ``sum_j var_j w_j w_j^T``."""
        xp = self.xp
        Xnew = asarray(Xnew, dtype=self.dtype, xp=xp, device=self._device) \
            if not is_array(Xnew) or Xnew.dtype != self.dtype else Xnew
        d = self.inducing_points.shape[-1]
        if Xnew.ndim != 2 or Xnew.shape[1] != d:
            raise ShapeError(f"Xnew: expected shape (m, {d}), got {describe_shape(Xnew.shape)}")
        with blas_pool("scipy"):
            MU, VAR = self._latent_marginals(Xnew)
        W = xp.astype(self.W, xp.float64, copy=False)
        mean = xp.astype(self.mean, xp.float64, copy=False)[None, :] + MU @ W.T
        if not full_output_cov:
            return self._cast(mean), self._cast(VAR @ (W * W).T)
        cov = xp.matmul(W[None, :, :] * VAR[:, None, :], W.T[None, :, :])
        return self._cast(mean), self._cast(cov)
