"""Pieces of :class:`gpnum.GVI`: its regularisers, variational kernels and variational means.

Each piece works on one minibatch and has a hand-derived backward pass. Notation (J. Wu 2023,
MSc thesis, UCL, section "Improving Gaussian Wasserstein Inference"): the regulariser GP
``P = GP(m_P, k)`` is held fixed; the variational GP ``Q = GP(m_Q, r)`` is learned. On a batch
``X`` (b, d) with ``L`` latent functions, ``mq``, ``vq`` are (b, L) and Q's batch covariance
``Kq`` is (L, b, b).

``A = L_ZZ^{-1} k(Z, X)`` (m, b) with ``L_ZZ`` the lower Cholesky factor of ``k(Z, Z) + jitter I``
(the prior kernel's, constant during training).
"""

from __future__ import annotations

from gpnum import backend as B
from gpnum.backend import solve_triangular
from gpnum.divergences import (
    bhattacharyya_normal_and_grad,
    hellinger_normal_and_grad,
    kl_normal_and_grad,
    renyi_normal_and_grad,
    squared_difference_normal_and_grad,
    wasserstein_gwi_and_grad,
    wasserstein_normal_and_grad,
)
from gpnum.errors import NotPSDError

__all__ = ["REGULARISERS", "VARIATIONAL_KERNELS", "VARIATIONAL_MEANS", "regulariser_and_grad"]

#: Regulariser names of :class:`gpnum.GVI` (``divergence=``).
REGULARISERS = ("wasserstein", "squared-difference", "projected-wasserstein",
                "projected-bhattacharyya", "projected-hellinger", "projected-kl",
                "projected-renyi")
#: Variational kernel names (``variational_kernel=``).
VARIATIONAL_KERNELS = ("svgp-cholesky", "svgp-diagonal", "svgp-log-diagonal", "kernelised",
                       "sparse-posterior", "fixed-sparse-posterior")
#: Variational mean names (``variational_mean=``).
VARIATIONAL_MEANS = ("svgp", "constant", "mlp")

_POINTWISE = {
    "squared-difference": squared_difference_normal_and_grad,
    "projected-wasserstein": wasserstein_normal_and_grad,
    "projected-bhattacharyya": bhattacharyya_normal_and_grad,
    "projected-hellinger": hellinger_normal_and_grad,
    "projected-kl": kl_normal_and_grad,
    "projected-renyi": renyi_normal_and_grad,
}


def needs_full_covariance(divergence, eigen_term):
    """Whether the regulariser reads Q's and P's (b, b) batch covariances, not only variances."""
    return divergence == "wasserstein" and eigen_term


def regulariser_and_grad(xp, divergence, mq, vq, Kq, mp, vp, Kp, *, alpha, eigen_term,
                         jitter=0.0):
    """``D(Q, P)`` on a batch, summed over latents, and its gradients w.r.t. Q's moments.

    Parameters
    ----------
    mq, vq : arrays (b, L)
        Q's marginal means and variances.
    Kq : array (L, b, b) or None
        Q's batch covariance (only for the Wasserstein regulariser with its cross term).
    mp, vp : arrays (b, L)
        P's marginal means and variances.
    Kp : array (b, b) or None
        P's batch covariance (with ``Kq``).
    jitter : float
        Added to the diagonals of ``Kq`` and ``Kp`` before the Wasserstein cross term: a batch
        larger than ``m`` makes ``Kq`` (a Nystrom residual plus a rank-m term) nearly singular,
        and the cross term's gradient needs both factors non-singular. ``d(Kq + jI)/dKq = I``,
        so the gradient is that of the jittered distance, exactly. When ``Kp + jitter I`` or
        ``Kq + jitter I`` still fails to factorise (real data: near-duplicate inputs, or a gram
        matrix that round-off leaves slightly indefinite) the jitter grows tenfold, from
        ``1e-6`` of the mean prior variance, up to ``1e-2`` of it; both matrices get the same.

    Returns
    -------
    value : 0-d array
    g_mq, g_vq : arrays (b, L)
        Gradients w.r.t. ``mq`` and ``vq``.
    G_K : array (L, b, b) or None
        Gradient w.r.t. ``Kq`` (symmetric), when ``Kq`` is used.

    Notes
    -----
    - ``"wasserstein"``: the GWI batch estimate of Wild et al. (2022) with ``X_S = X_B``
      (Wu 2023, eq. "wasserstein-distance-approximation"),
      ``1/b [|mq - mp|^2 + tr Kp + tr Kq - 2 tr (Kp^{1/2} Kq Kp^{1/2})^{1/2}]``, i.e. the squared
      2-Wasserstein distance between the joint Gaussians ``N(mq, Kq)`` and ``N(mp, Kp)`` divided by
      ``b`` (:func:`gpnum.divergences.wasserstein_gwi`, whose cross term comes from the symmetric
      product, never from eigenvalues of ``Kq Kp``). Its gradient w.r.t. ``Kq`` is
      ``(I - T) / b`` with ``T = Kp^{1/2} (Kp^{1/2} Kq Kp^{1/2})^{-1/2} Kp^{1/2}``. Without the
      cross term (``eigen_term=False``, Wu 2023, "Dropping the eigendecomposition") only the
      variances enter: ``1/b sum_n [(mq_n - mp_n)^2 + vp_n + vq_n]``, O(b).
    - ``"squared-difference"``: ``1/b sum_n [(mq_n - mp_n)^2 + (vq_n - vp_n)^2]`` (Wu's 2023
      "naive divergence").
    - ``"projected-<D>"``: ``1/b sum_n D(Q_n || P_n)`` between the marginals ``Q_n = N(mq_n,
      vq_n)`` and ``P_n = N(mp_n, vp_n)`` (Wu 2023, eq. "projected-regulariser", averaged over the
      batch); KL and Renyi in the direction ``D(Q || P)`` (docs/divergences.md).
    """
    b, L = mq.shape
    if divergence == "wasserstein":
        if eigen_term:
            jitter = _common_jitter(xp, Kq, Kp, jitter)
            if jitter:
                eye = xp.eye(b, dtype=Kp.dtype, device=B.device_of(Kp))
                Kp = Kp + jitter * eye
                Kq = Kq + jitter * eye[None, ...]
            value = 0.0
            g_mq, G_K = [], []
            for lat in range(L):
                v, g = wasserstein_gwi_and_grad(mq[:, lat], Kq[lat, ...], mp[:, lat], Kp,
                                                validate=False)
                value = value + v
                g_mq.append(g["mq"])
                G_K.append(g["Kq"])
            return (xp.asarray(value), xp.stack(g_mq, axis=1), xp.zeros_like(vq),
                    xp.stack(G_K, axis=0))
        d = mq - mp
        value = xp.sum(d * d + vq + vp) / float(b)
        return value, (2.0 / b) * d, xp.ones_like(vq) / float(b), None
    fn = _POINTWISE[divergence]
    kw = {"alpha": alpha} if divergence == "projected-renyi" else {}
    # Renyi with alpha > 1 is infinite where alpha vp + (1 - alpha) vq <= 0: the checked call
    # (one host sync) says so and names the largest usable alpha instead of returning NaN.
    check = divergence == "projected-renyi" and alpha > 1.0
    value, g = fn(xp.reshape(mq, (-1,)), xp.reshape(vq, (-1,)), xp.reshape(mp, (-1,)),
                  xp.reshape(vp, (-1,)), reduction="sum", validate=check, **kw)
    # The mean over points of each latent, summed over latents: sum / b.
    return (value / float(b), xp.reshape(g["mq"], (b, L)) / float(b),
            xp.reshape(g["vq"], (b, L)) / float(b), None)


def _common_jitter(xp, Kq, Kp, jitter):
    """The smallest jitter >= ``jitter`` (of the tenfold ladder) that factorises all matrices."""
    scale = float(xp.mean(xp.linalg.diagonal(Kp)))
    for K in [Kp] + [Kq[lat, ...] for lat in range(Kq.shape[0])]:
        _, extra = B.cholesky(xp.astype(K, xp.float64, copy=False), shift=jitter,
                              jitter=1e-6 * scale, max_tries=5, return_jitter=True)
        jitter += extra
    return jitter


# ---------------------------------------------------------------------------------------------
# variational kernels: forward(model, X, A, full) -> (vq (b, L), Kq (L, b, b) or None, cache);
# backward(model, cache, g_v (b, L), G (L, b, b) or None) -> grads of the kernel's parameters.


def _sum_latents(xp, g_v, G):
    gv = xp.sum(g_v, axis=1)
    GG = None if G is None else xp.sum(G, axis=0)
    return gv, GG


class SVGPKernel:
    """``r(x, x') = k(x, x') - a(x)^T a(x') + a(x)^T S a(x')``, ``a(x) = L_ZZ^{-1} k(Z, x)``.

    The whitened form of Wu's (2023) eq. "gwi-svgp-kernel" (``Sigma = L_ZZ^{-T} S L_ZZ^{-1}``):
    ``S`` starts at ``I``, where ``r = k`` (Q starts at P). ``form``: ``"cholesky"``
    (``S = R R^T``, ``q_sqrt = R`` lower triangular, Wild et al. 2022), ``"diagonal"``
    (``S = diag(q_var)``, ``q_var > 0``) or ``"log-diagonal"`` (``S = diag(exp(q_log_var))``),
    the diagonal parameterisations of Wu 2023 ("svGP Parameterisations"). One ``S`` per latent.
    """

    uses_base = False

    def __init__(self, form):
        self.form = form
        self.names = {"cholesky": ("q_sqrt",), "diagonal": ("q_var",),
                      "log-diagonal": ("q_log_var",)}[form]

    def init(self, model, m, L):
        xp, dt, dev = model.xp, model.dtype, model.device
        if self.form == "cholesky":
            eye = xp.eye(m, dtype=dt, device=dev)
            model.q_sqrt = eye if L == 1 else xp.broadcast_to(eye, (L, m, m))
        elif self.form == "diagonal":
            model.q_var = xp.ones((m,) if L == 1 else (L, m), dtype=dt, device=dev)
        else:
            model.q_log_var = xp.zeros((m,) if L == 1 else (L, m), dtype=dt, device=dev)

    def _S_diag(self, model):
        xp = model.xp
        v = model.q_var if self.form == "diagonal" else xp.exp(model.q_log_var)
        return v[None, :] if v.ndim == 1 else v  # (L, m)

    def _R(self, model):
        R = model.q_sqrt
        return R[None, ...] if R.ndim == 2 else R  # (L, m, m)

    def forward(self, model, X, A, kxx_diag, full):
        xp = model.xp
        base = kxx_diag - xp.sum(A * A, axis=0)  # (b,)
        if self.form == "cholesky":
            RA = xp.matmul(xp.matrix_transpose(self._R(model)), A[None, ...])  # (L, m, b)
            vq = base[:, None] + xp.sum(RA * RA, axis=1).T
        else:
            RA = None
            vq = base[:, None] + (self._S_diag(model) @ (A * A)).T
        Kq = None
        if full:
            B0 = model.kernel(X) - A.T @ A
            if self.form == "cholesky":
                Kq = B0[None, ...] + xp.matmul(xp.matrix_transpose(RA), RA)
            else:
                S = self._S_diag(model)
                Kq = B0[None, ...] + xp.matmul(A.T[None, ...] * S[:, None, :], A[None, ...])
        return vq, Kq, {"A": A, "RA": RA}

    def backward(self, model, cache, g_v, G):
        xp = model.xp
        A = cache["A"]
        if self.form == "cholesky":
            # d/dS = A diag(g_v) A^T + A G A^T; d/dR = 2 (d/dS) R, lower triangle.
            AG = A[None, ...] * g_v.T[:, None, :]  # (L, m, b)
            if G is not None:
                AG = AG + xp.matmul(A[None, ...], G)
            GS = xp.matmul(AG, xp.broadcast_to(A.T, (AG.shape[0],) + A.T.shape))
            GR = xp.tril(2.0 * xp.matmul(0.5 * (GS + xp.matrix_transpose(GS)), self._R(model)))
            return {"q_sqrt": GR[0, ...] if model.q_sqrt.ndim == 2 else GR}
        # d/dv_j = sum_n g_v,n A_jn^2 + (A G A^T)_jj
        gS = (g_v.T @ (A * A).T)  # (L, m)
        if G is not None:
            gS = gS + xp.sum(xp.matmul(A[None, ...], G) * A[None, ...], axis=2)
        if self.form == "log-diagonal":
            gS = gS * self._S_diag(model)
            key, ref = "q_log_var", model.q_log_var
        else:
            key, ref = "q_var", model.q_var
        return {key: gS[0, :] if ref.ndim == 1 else gS}


class KernelisedKernel:
    """``r(x, x') = k(x, x') - a(x)^T a(x') + r0(x, x')`` with a learned base kernel ``r0``.

    Wu (2023), "svGP Parameterisations" (base kernel parameterisation). Shared by all latents.
    """

    uses_base = True
    names = ()

    def init(self, model, m, L):
        pass

    def forward(self, model, X, A, kxx_diag, full):
        xp = model.xp
        r0 = model.base_kernel
        v = kxx_diag - xp.sum(A * A, axis=0) + r0.diag(X)
        vq = xp.broadcast_to(v[:, None], (X.shape[0], model.num_latent))
        Kq, vjp = None, None
        if full:
            R0, vjp = r0.gram_and_vjp(X)
            Kq = (model.kernel(X) - A.T @ A + R0)[None, ...]
            Kq = xp.broadcast_to(Kq, (model.num_latent,) + Kq.shape[1:])
        return vq, Kq, {"X": X, "vjp": vjp}

    def backward(self, model, cache, g_v, G):
        gv, GG = _sum_latents(model.xp, g_v, G)
        r0 = model.base_kernel
        out = r0.diag_vjp(gv, cache["X"])["params"]
        if GG is not None:
            g2 = cache["vjp"](GG)["params"]
            out = {k: out[k] + g2[k] for k in out}
        return {f"base_kernel.{k}": v for k, v in out.items()}


class SparsePosteriorKernel:
    """``r(x, x') = r0(x, x') - r0(x, Z) C^{-1} r0(Z, x')`` (Wu 2023, "Sparse Posterior Kernels").

    ``fixed=False``: ``C = r0(Z, Z) + jitter I``, differentiated through its Cholesky factor,
    O(m^3) per step. ``fixed=True`` ("Fixed Sparse Posterior Kernels"): ``C = k(Z, Z) + jitter
    I``, the prior's, a constant (its factor is the model's cached ``L_ZZ``): O(m^2 b) per
    step. Shared by all latents. With ``fixed=True`` ``r`` need not be positive semi-definite
    (``r0`` can outgrow ``k``); variances are floored like SVGP's.
    """

    uses_base = True
    names = ()

    def __init__(self, fixed):
        self.fixed = fixed

    def init(self, model, m, L):
        pass

    def forward(self, model, X, A, kxx_diag, full):
        xp = model.xp
        r0 = model.base_kernel
        Z = model.inducing_points
        R0zx, zx_vjp = r0.gram_and_vjp(Z, X)
        if self.fixed:
            Bm, wcache = model._whiten_fixed(R0zx)
            zz_vjp = None
        else:
            R0zz, zz_vjp = r0.gram_and_vjp(Z)
            try:
                Bm, wcache = model.whitening_strategy.whiten(R0zz, R0zx, model.jitter,
                                                             slot="r0")
            except NotPSDError as exc:
                raise model._not_psd(f"Q's base kernel matrix r0(Z, Z) + jitter I (m = "
                                     f"{Z.shape[0]}, jitter = {model.jitter:g})", exc,
                                     kernel=r0) from None
        v = r0.diag(X) - xp.sum(Bm * Bm, axis=0)
        vq = xp.broadcast_to(v[:, None], (X.shape[0], model.num_latent))
        Kq, xx_vjp = None, None
        if full:
            R0xx, xx_vjp = r0.gram_and_vjp(X)
            K1 = (R0xx - Bm.T @ Bm)[None, ...]
            Kq = xp.broadcast_to(K1, (model.num_latent,) + K1.shape[1:])
        return vq, Kq, {"X": X, "B": Bm, "w": wcache, "zx_vjp": zx_vjp, "zz_vjp": zz_vjp,
                        "xx_vjp": xx_vjp}

    def backward(self, model, cache, g_v, G):
        xp = model.xp
        gv, GG = _sum_latents(xp, g_v, G)
        r0 = model.base_kernel
        Bm = cache["B"]
        out = r0.diag_vjp(gv, cache["X"])["params"]
        # d/dB of -sum_n g_n |B_n|^2 - tr(G B^T B) = -2 B diag(g) - 2 B G (G symmetric).
        B_bar = -2.0 * Bm * gv[None, :]
        if GG is not None:
            B_bar = B_bar - 2.0 * (Bm @ GG)
            g2 = cache["xx_vjp"](GG)["params"]
            out = {k: out[k] + g2[k] for k in out}
        if self.fixed:
            Kzx_bar = model._whiten_fixed_backward(B_bar)
        else:
            Kzz_bar, Kzx_bar = model.whitening_strategy.backward(Bm, cache["w"], B_bar)
            gzz = cache["zz_vjp"](Kzz_bar)["params"]
            out = {k: out[k] + gzz[k] for k in out}
        gzx = cache["zx_vjp"](Kzx_bar)["params"]
        out = {k: out[k] + gzx[k] for k in out}
        return {f"base_kernel.{k}": v for k, v in out.items()}


def make_variational_kernel(name):
    if name == "svgp-cholesky":
        return SVGPKernel("cholesky")
    if name == "svgp-diagonal":
        return SVGPKernel("diagonal")
    if name == "svgp-log-diagonal":
        return SVGPKernel("log-diagonal")
    if name == "kernelised":
        return KernelisedKernel()
    if name == "sparse-posterior":
        return SparsePosteriorKernel(False)
    if name == "fixed-sparse-posterior":
        return SparsePosteriorKernel(True)
    raise ValueError(f"variational_kernel: expected one of {', '.join(VARIATIONAL_KERNELS)}, "
                     f"got {name!r}")


# ---------------------------------------------------------------------------------------------
# variational means: forward(model, X, A) -> (mq (b, L), cache); backward(model, cache, g_m)


class SVGPMean:
    """``m_Q(x) = c + a(x)^T q_mu`` (Wu 2023, eq. "svgp-mean", whitened), ``q_mu`` (m,) or
    (L, m); ``c`` is the regulariser's constant ``prior_mean`` (0 by default), fixed, so that
    Q starts at P."""

    names = ("q_mu",)

    def init(self, model, m, L, d, seed):
        model.q_mu = model.xp.zeros((m,) if L == 1 else (L, m), dtype=model.dtype,
                                    device=model.device)

    def _mu(self, model):
        return model.q_mu[None, :] if model.q_mu.ndim == 1 else model.q_mu

    def forward(self, model, X, A):
        return model.prior_mean + A.T @ self._mu(model).T, {"A": A}

    def backward(self, model, cache, g_m):
        g = (cache["A"] @ g_m).T  # (L, m)
        return {"q_mu": g[0, :] if model.q_mu.ndim == 1 else g}


class ConstantMean:
    """``m_Q(x) = c`` (one constant per latent), ``mean_constant`` () or (L,)."""

    names = ("mean_constant",)

    def init(self, model, m, L, d, seed):
        model.mean_constant = model.xp.zeros(() if L == 1 else (L,), dtype=model.dtype,
                                             device=model.device)

    def forward(self, model, X, A):
        xp = model.xp
        c = xp.reshape(model.mean_constant, (1, -1))
        return xp.broadcast_to(c, (X.shape[0], model.num_latent)), None

    def backward(self, model, cache, g_m):
        g = model.xp.sum(g_m, axis=0)
        return {"mean_constant": g[0] if model.mean_constant.ndim == 0 else g}


class MLPMean:
    """A one-hidden-layer network ``m_Q(x) = tanh(x W1 + b1) W2 + b2`` (GWI-net's mean, Wild et
    al. 2022), hand-written forward and backward passes. ``mlp_w1`` (d, H), ``mlp_b1`` (H,),
    ``mlp_w2`` (H, L), ``mlp_b2`` (L,). Initialised with ``W1 ~ N(0, 1/d)``,
    ``W2 ~ N(0, 0.01/H)`` and zero biases, so ``m_Q`` starts near 0 (near P's mean)."""

    names = ("mlp_w1", "mlp_b1", "mlp_w2", "mlp_b2")

    def __init__(self, hidden):
        self.hidden = int(hidden)

    def init(self, model, m, L, d, seed):
        from gpnum.backend import default_rng

        xp, dt, dev = model.xp, model.dtype, model.device
        rng = default_rng(seed, xp=xp, device=dev)
        H = self.hidden
        model.mlp_w1 = rng.normal((d, H), dtype=dt) * (1.0 / d) ** 0.5
        model.mlp_b1 = xp.zeros((H,), dtype=dt, device=dev)
        model.mlp_w2 = rng.normal((H, L), dtype=dt) * (0.01 / H) ** 0.5
        model.mlp_b2 = xp.zeros((L,), dtype=dt, device=dev)

    def forward(self, model, X, A):
        h = model.xp.tanh(X @ model.mlp_w1 + model.mlp_b1[None, :])
        return h @ model.mlp_w2 + model.mlp_b2[None, :], {"X": X, "h": h}

    def backward(self, model, cache, g_m):
        xp = model.xp
        h, X = cache["h"], cache["X"]
        g_h = (g_m @ model.mlp_w2.T) * (1.0 - h * h)  # tanh' = 1 - tanh^2
        return {"mlp_w1": X.T @ g_h, "mlp_b1": xp.sum(g_h, axis=0), "mlp_w2": h.T @ g_m,
                "mlp_b2": xp.sum(g_m, axis=0)}


def make_variational_mean(name, hidden):
    if name == "svgp":
        return SVGPMean()
    if name == "constant":
        return ConstantMean()
    if name == "mlp":
        return MLPMean(hidden)
    raise ValueError(f"variational_mean: expected one of {', '.join(VARIATIONAL_MEANS)}, got "
                     f"{name!r}")


def fixed_solve(L, B):
    """``L^{-1} B`` in float64 (like the Cholesky whitening), cast back to ``B``'s dtype."""
    from gpnum.backend import get_namespace

    xp = get_namespace(B)
    return xp.astype(solve_triangular(L, xp.astype(B, xp.float64, copy=False), lower=True),
                     B.dtype, copy=False)
