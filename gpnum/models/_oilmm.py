"""The orthogonal instantaneous linear mixing model (OILMM): many outputs at a cost linear in t.

Bruinsma, Perim, Tebbutt, Hosking, Solin & Turner (2020), "Scalable exact inference in
multi-output Gaussian processes", ICML, sections 2-3. With ``q`` independent latent GPs
``x_i ~ GP(0, k_i)`` and ``t >= q`` outputs,

    y(x) = c + H (x(x) + delta),   H = U S^{1/2},   U^T U = I_q,   delta ~ N(0, D),
    plus observation noise N(0, sigma^2 I_t),

the projection ``T = S^{-1/2} U^T`` decouples the latents exactly (their Prop. 3): ``T (y - c) =
x + delta + T eps`` with independent noise ``D_i + sigma^2 / S_i`` per latent, so the log
marginal likelihood of ``Y`` (n, t) is ``q`` single-output GP likelihoods of the projected data
``z_i = (Y - c) u_i / sqrt(S_i)`` plus terms in the part of ``Y`` that ``U`` does not see
(their eq. 9):

    log p(Y) = sum_i log N(z_i; 0, K_i + (D_i + sigma^2 / S_i) I) - n/2 sum_i log S_i
               - n (t - q)/2 log(2 pi sigma^2) - ||(Y - c)(I - U U^T)||_F^2 / (2 sigma^2).

Cost: O(q n^3 + n t q): linear in the number of outputs. ``U`` is the polar factor of a free
matrix ``M`` (t, q), ``U = M (M^T M)^{-1/2}``; its gradient goes through the eigendecomposition of
``M^T M`` (Daleckii-Krein: the divided differences of ``lambda^{-1/2}``).
"""

from __future__ import annotations

import math

from gpnum.backend import (
    asarray,
    blas_pool,
    cho_inverse,
    cholesky,
    device_of,
    get_namespace,
    is_array,
    solve_triangular,
)
from gpnum.errors import NotPSDError, ShapeError, check_finite, describe_shape
from gpnum.kernels import IndependentOutputs
from gpnum.models._composite import FullBatchGaussianModel
from gpnum.models._multioutput_math import check_latent_kernels, gaussian_log_density

__all__ = ["OILMM"]

_LOG_2PI = math.log(2.0 * math.pi)


def _polar(M):
    """``U = M (M^T M)^{-1/2}`` (t, q) and what its backward pass needs."""
    xp = get_namespace(M)
    lam, V = xp.linalg.eigh(M.T @ M)
    if float(xp.min(lam)) <= 0.0:
        raise NotPSDError("OILMM: the mixing matrix has dependent columns")
    P = (V * (lam ** -0.5)[None, :]) @ V.T
    return M @ P, (M, P, lam, V)


def _polar_vjp(G, cache):
    """Gradient w.r.t. ``M`` of ``sum(G * U)``, ``U = M (M^T M)^{-1/2}``."""
    xp = get_namespace(G)
    M, P, lam, V = cache
    g_P = M.T @ G
    g_P = 0.5 * (g_P + g_P.T)
    f = lam ** -0.5
    diff = lam[:, None] - lam[None, :]
    same = xp.abs(diff) <= 1e-12 * xp.max(lam)
    # divided differences (f(l_i) - f(l_j)) / (l_i - l_j), f'(l_i) = -1/2 l_i^{-3/2} on ties
    F = xp.where(same, -0.5 * lam[:, None] ** -1.5,
                 (f[:, None] - f[None, :]) / xp.where(same, 1.0, diff))
    g_C = V @ ((V.T @ g_P @ V) * F) @ V.T
    return G @ P + M @ (g_C + g_C.T)


class OILMM(FullBatchGaussianModel):
    """Exact orthogonal instantaneous linear mixing model over ``t`` outputs.

    Parameters
    ----------
    kernels : sequence of gpnum.kernels.Kernel
        The ``q`` latent kernels (distinct objects), ``q <= t``.
    likelihood : gpnum.likelihoods.Gaussian
        The observation noise ``sigma^2`` (shape ()), shared by every output as the model
        requires.
    X : array (n, d)
    Y : array (n, t)
        Every output at every input (no NaN: the decoupling needs the full projection).
    mixing : array (t, q), optional
        Initial ``M`` (learned; ``U`` is its orthonormal polar factor). Default: the leading
        principal directions of ``Y``.
    scales : array (q,), optional
        Initial ``S`` (positive, learned). Default: the variances of ``Y`` along ``U``.
    latent_noise : array (q,), optional
        Initial ``D`` (positive, learned), default 0.01.
    mean : float or array (t,)
        Initial constant mean per output (learned).

    Notes
    -----
    Parameters: ``mean`` (t,), ``mixing`` (t, q), ``scales`` (q,), ``latent_noise`` (q,),
    ``kernel.<i>.<name>``, ``likelihood.variance``. Each latent is factorised in float64.
    """

    _param_names = ("mean", "mixing", "scales", "latent_noise")
    _positive = ("scales", "latent_noise")
    objective_name = "lml"

    def __init__(self, kernels, likelihood, X, Y, *, mixing=None, scales=None,
                 latent_noise=None, mean=0.0):
        kernels = check_latent_kernels(kernels, likelihood)
        if tuple(likelihood.variance.shape) != ():
            raise ShapeError("likelihood.variance: OILMM's observation noise is shared by all "
                             f"outputs (shape ()), got {describe_shape(likelihood.variance.shape)}")
        ref = X if is_array(X) else kernels[0]._reference()
        xp = get_namespace(ref)
        dtype = ref.dtype if xp.isdtype(ref.dtype, "real floating") else kernels[0].dtype
        self._init_namespace(xp, dtype, device_of(ref))
        X = asarray(X, dtype=dtype, xp=xp, device=self._device)
        Y = asarray(Y, dtype=dtype, xp=xp, device=self._device)
        q = len(kernels)
        if X.ndim != 2 or Y.ndim != 2 or Y.shape[0] != X.shape[0] or X.shape[0] < 1:
            raise ShapeError(f"X, Y: expected shapes (n, d) and (n, t), got "
                             f"{describe_shape(X.shape)} and {describe_shape(Y.shape)}")
        t = Y.shape[1]
        if q > t:
            raise ValueError(f"kernels: at most t = {t} latent processes, got {q}")
        check_finite(xp, X, "X")
        check_finite(xp, Y, "Y")  # NaN too: the projection needs every output
        self.kernel = IndependentOutputs(kernels)
        self.likelihood = likelihood
        self._check_component("kernel")
        self._check_component("likelihood")
        self.num_outputs, self.num_latent = t, q
        self.jitter = 0.0
        mean = asarray(mean, dtype=dtype, xp=xp, device=self._device)
        self.mean = xp.ones(t, dtype=dtype, device=self._device) * mean if mean.ndim == 0 \
            else mean
        if mixing is None or scales is None:
            R = Y - xp.mean(Y, axis=0)[None, :]
            lam, V = xp.linalg.eigh(R.T @ R / X.shape[0])
            lead = xp.flip(V[:, t - q:], axis=1)          # eigh sorts ascending
            top = xp.flip(lam[t - q:], axis=0)
        self.mixing = lead if mixing is None else mixing
        self.scales = xp.clip(top, min=1e-3) if scales is None else scales
        self.latent_noise = 0.01 * xp.ones(q, dtype=dtype, device=self._device) \
            if latent_noise is None else latent_noise
        for name, shape in (("mean", (t,)), ("mixing", (t, q)), ("scales", (q,)),
                            ("latent_noise", (q,))):
            if tuple(getattr(self, name).shape) != shape:
                raise ShapeError(f"{name}: expected shape {describe_shape(shape)}, got "
                                 f"{describe_shape(getattr(self, name).shape)}")
        self._X, self._y = X, Y

    def config(self) -> dict:
        """No settings beyond the parameters and the data: ``{}``."""
        return {}

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        return cls(kernel.kernels, likelihood, data["X"], data["y"],
                   **{k: params[k] for k in ("mixing", "scales", "latent_noise", "mean")})

    @property
    def Y(self):
        """The training targets, (n, t)."""
        return self._y

    # ------------------------------------------------------------------ objective
    def _projection(self):
        xp = self.xp
        high = xp.float64
        U, cache = _polar(xp.astype(self.mixing, high, copy=False))
        S = xp.astype(self.scales, high, copy=False)
        D = xp.astype(self.latent_noise, high, copy=False)
        s2 = xp.astype(self.likelihood.variance, high, copy=False)
        return U, cache, S, D, s2

    def _objective_and_grad(self, X, Y):
        return self._lml(X, Y, True)

    def log_marginal_likelihood(self):
        """``log p(Y | X)`` (Bruinsma et al. 2020, eq. 9), a 0-d array."""
        with blas_pool(self.blas_pool):
            return self._lml(self._X, self._y, False)[0]

    def log_marginal_likelihood_and_grad(self):
        """:meth:`log_marginal_likelihood` and its gradients keyed like :meth:`parameters`."""
        with blas_pool(self.blas_pool):
            return self._lml(self._X, self._y, True)

    def _latent_factor(self, i, X, noise, need_grad):
        xp = self.xp
        k = self.kernel.kernels[i]
        K, vjp = k.gram_and_vjp(X) if need_grad else (k(X), None)
        n = X.shape[0]
        try:
            L = cholesky(xp.astype(K, xp.float64, copy=False)
                         + noise * xp.eye(n, dtype=xp.float64, device=self._device),
                         what=f"OILMM latent {i}: K + noise I")
        except NotPSDError as exc:
            raise self._not_psd(f"K + noise I of latent {i}", exc, kernel=k) from None
        return L, vjp

    def _lml(self, X, Y, need_grad):
        xp = self.xp
        high = xp.float64
        n, t, q = X.shape[0], self.num_outputs, self.num_latent
        U, cache, S, D, s2 = self._projection()
        R = xp.astype(Y, high, copy=False) - xp.astype(self.mean, high, copy=False)[None, :]
        RU = R @ U                                                    # (n, q)
        Z = RU / xp.sqrt(S)[None, :]
        outside = xp.sum(R * R) - xp.sum(RU * RU)
        value = (-0.5 * n * xp.sum(xp.log(S)) - 0.5 * n * (t - q) * (_LOG_2PI + xp.log(s2))
                 - 0.5 * outside / s2)
        g_z, g_noise, kernel_grads = [], [], {}
        for i in range(q):
            noise = D[i] + s2 / S[i]
            L, vjp = self._latent_factor(i, X, noise, need_grad)
            w = solve_triangular(L, Z[:, i], lower=True)
            value = value - 0.5 * xp.sum(w * w) - xp.sum(xp.log(xp.linalg.diagonal(L))) \
                - 0.5 * n * _LOG_2PI
            if not need_grad:
                continue
            alpha = solve_triangular(L, w, lower=True, trans=True)
            K_bar = 0.5 * (alpha[:, None] * alpha[None, :] - cho_inverse(L))
            g_noise.append(xp.sum(xp.linalg.diagonal(K_bar)))
            g_z.append(-alpha)
            for name, g in vjp(xp.astype(K_bar, self.dtype, copy=False))["params"].items():
                kernel_grads[f"kernel.{i}.{name}"] = g
        value = self._scalar(value)
        if not need_grad:
            return value, None
        G_noise = xp.stack(g_noise)                                   # (q,)
        G_z = xp.stack(g_z, axis=1)                                   # (n, q)
        rs = 1.0 / xp.sqrt(S)
        g_S = (-0.5 * n / S - G_noise * s2 / (S * S)
               - 0.5 * xp.sum(G_z * Z, axis=0) / S)
        g_s2 = (xp.sum(G_noise / S) - 0.5 * n * (t - q) / s2 + 0.5 * outside / (s2 * s2))
        # dL/dR: the projected data and the part of R outside span(U)
        g_R = (G_z * rs[None, :]) @ U.T - (R - RU @ U.T) / s2
        g_U = R.T @ (G_z * rs[None, :]) + R.T @ RU / s2
        grads = {"mean": -xp.sum(g_R, axis=0), "mixing": _polar_vjp(g_U, cache),
                 "scales": g_S, "latent_noise": G_noise}
        grads = {k: self._shaped(v, getattr(self, k).shape) for k, v in grads.items()}
        grads.update(kernel_grads)
        grads["likelihood.variance"] = self._shaped(g_s2, ())
        return value, {k: grads[k] for k in self.parameters()}

    # ------------------------------------------------------------------ predictions
    def _prediction_state(self):
        xp = self.xp
        U, _, S, D, s2 = self._projection()
        R = (xp.astype(self._y, xp.float64, copy=False)
             - xp.astype(self.mean, xp.float64, copy=False)[None, :])
        Z = (R @ U) / xp.sqrt(S)[None, :]
        latents = []
        for i in range(self.num_latent):
            L, _ = self._latent_factor(i, self._X, D[i] + s2 / S[i], False)
            alpha = solve_triangular(L, solve_triangular(L, Z[:, i], lower=True), lower=True,
                                     trans=True)
            latents.append((L, alpha))
        return {"U": U, "S": S, "D": D, "s2": s2, "latents": latents}

    def predict_f(self, Xnew, full_cov=False, full_output_cov=False):
        """Every output at ``Xnew`` (m, d): mean (m, t) and variances (m, t), or with
        ``full_output_cov`` the (m, t, t) covariances ``H diag(var_x) H^T`` (no joint
        ``full_cov`` across inputs)."""
        if full_cov:
            raise ValueError("full_cov: OILMM predicts per input; use full_output_cov=True")
        xp = self.xp
        high = xp.float64
        Xnew = self._check_new(Xnew)
        with blas_pool(self.blas_pool):
            st = self._prediction_state()
            mus, vs = [], []
            for i, (L, alpha) in enumerate(st["latents"]):
                k = self.kernel.kernels[i]
                Ks = xp.astype(k(self._X, Xnew), high, copy=False)
                V = solve_triangular(L, Ks, lower=True)
                mus.append(Ks.T @ alpha)
                vs.append(xp.astype(k.diag(Xnew), high, copy=False) - xp.sum(V * V, axis=0))
        H = st["U"] * xp.sqrt(st["S"])[None, :]                       # (t, q)
        MU, VAR = xp.stack(mus, axis=1), xp.stack(vs, axis=1)        # (m, q)
        mean = xp.astype(self.mean, high, copy=False)[None, :] + MU @ H.T
        if full_output_cov:
            cov = xp.matmul(H[None, :, :] * VAR[:, None, :], H.T[None, :, :])
            return self._cast(mean), self._cast(cov)
        return self._cast(mean), self._cast(VAR @ (H * H).T)

    def _cast(self, v):
        return self.xp.astype(v, self.dtype, copy=False)

    def predict_y(self, Xnew, full_output_cov=False):
        """:meth:`predict_f` plus the noise ``sigma^2 I + H D H^T`` (its diagonal without
        ``full_output_cov``)."""
        xp = self.xp
        mean, cov = self.predict_f(Xnew, full_output_cov=full_output_cov)
        U, _, S, D, s2 = self._projection()
        H = U * xp.sqrt(S)[None, :]
        noise = (H * D[None, :]) @ H.T + s2 * xp.eye(self.num_outputs, dtype=xp.float64,
                                                      device=self._device)
        if full_output_cov:
            return mean, cov + self._cast(noise)[None, :, :]
        return mean, cov + self._cast(xp.linalg.diagonal(noise))[None, :]

    def log_predictive_density(self, Xnew, Ynew):
        """Per-entry marginal ``log N(Ynew[i, a]; mean, var)``, shape (m, t)."""
        mean, var = self.predict_y(Xnew)
        Ynew = asarray(Ynew, dtype=self.dtype, xp=self.xp, device=self._device)
        return gaussian_log_density(Ynew, mean, var)
