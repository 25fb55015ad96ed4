"""Independent outputs (:class:`gpnum.kernels.IndependentOutputs`) in MultiOutputGPR: the
covariance of the observed entries is block-diagonal over the outputs, so the log marginal
likelihood is a sum of ``t`` single-output GP likelihoods, each on the inputs where its output
is observed (Rasmussen & Williams 2006, algorithm 2.1 and eq. 5.9 per output): O(sum_a n_a^3)
instead of one factorisation of all ``N_o`` observed entries."""

from __future__ import annotations

import math

from gpnum.backend import cho_inverse, cholesky, solve_triangular
from gpnum.errors import NotPSDError

__all__ = ["independent_lml", "independent_state", "independent_predict"]

_LOG_2PI = math.log(2.0 * math.pi)


def _rows(xp, column):
    return xp.nonzero(~xp.isnan(column))[0]


def _factor(model, a, Xa, need_grad):
    xp = model.xp
    k = model.kernel.kernels[a]
    K, vjp = k.gram_and_vjp(Xa) if need_grad else (k(Xa), None)
    s2 = model._noise()[a]
    eye = xp.eye(Xa.shape[0], dtype=xp.float64, device=model.device)
    try:
        L = cholesky(xp.astype(K, xp.float64, copy=False) + s2 * eye,
                     what=f"MultiOutputGPR output {a}: K + noise variance I")
    except NotPSDError as exc:
        raise model._not_psd(f"K + noise variance I of output {a}", exc, kernel=k) from None
    return L, vjp


def independent_lml(model, X, Y, need_grad):
    """``sum_a log N(y_a; c_a, K_a + sigma_a^2 I)`` over each output's observed rows, and its
    gradients keyed like ``model.parameters()``."""
    xp = model.xp
    R = model._residual(Y)
    value = 0.0
    g_mean, g_noise, g_kernel = [], [], {}
    zero = xp.zeros((), dtype=xp.float64, device=model.device)
    for a, k in enumerate(model.kernel.kernels):
        idx = _rows(xp, Y[:, a])
        if idx.shape[0] == 0:
            g_mean.append(zero)
            g_noise.append(zero)
            g_kernel.update({f"{a}.{n}": xp.zeros_like(v) for n, v in k.parameters().items()})
            continue
        Xa = xp.take(X, idx, axis=0)
        r = xp.take(R[:, a], idx, axis=0)
        L, vjp = _factor(model, a, Xa, need_grad)
        w = solve_triangular(L, r, lower=True)
        value = value + (-0.5 * xp.sum(w * w) - xp.sum(xp.log(xp.linalg.diagonal(L)))
                         - 0.5 * idx.shape[0] * _LOG_2PI)
        if not need_grad:
            continue
        alpha = solve_triangular(L, w, lower=True, trans=True)
        K_bar = 0.5 * (alpha[:, None] * alpha[None, :] - cho_inverse(L))
        g_mean.append(xp.sum(alpha))
        g_noise.append(xp.sum(xp.linalg.diagonal(K_bar)))
        for name, g in vjp(xp.astype(K_bar, model.dtype, copy=False))["params"].items():
            g_kernel[f"{a}.{name}"] = g
    value = model._scalar(value)
    if not need_grad:
        return value, None
    return value, model._pack(xp.stack(g_mean), g_kernel, xp.stack(g_noise))


def independent_state(model):
    """Per output: its observed rows, the Cholesky factor and ``alpha``."""
    xp = model.xp
    R = model._residual(model.Y)
    state = []
    for a in range(model.num_outputs):
        idx = _rows(xp, model.Y[:, a])
        if idx.shape[0] == 0:
            state.append(None)
            continue
        Xa = xp.take(model.X, idx, axis=0)
        L, _ = _factor(model, a, Xa, False)
        r = xp.take(R[:, a], idx, axis=0)
        alpha = solve_triangular(L, solve_triangular(L, r, lower=True), lower=True, trans=True)
        state.append((Xa, L, alpha))
    return {"independent": state}


def independent_predict(model, Xnew, state, how):
    """Mean (m, t) and variances (m, t), output covariances (m, t, t, diagonal) or the joint
    covariance (m t, m t) of independent outputs (R&W algorithm 2.1 per output)."""
    xp = model.xp
    high = xp.float64
    m, t = Xnew.shape[0], model.num_outputs
    means, covs = [], []
    for a, k in enumerate(model.kernel.kernels):
        prior = (xp.astype(k(Xnew), high, copy=False) if how == "full"
                 else xp.astype(k.diag(Xnew), high, copy=False))
        if state["independent"][a] is None:
            means.append(xp.zeros(m, dtype=high, device=model.device))
            covs.append(prior)
            continue
        Xa, L, alpha = state["independent"][a]
        Ks = xp.astype(k(Xa, Xnew), high, copy=False)
        V = solve_triangular(L, Ks, lower=True)
        means.append(Ks.T @ alpha)
        covs.append(prior - V.T @ V if how == "full" else prior - xp.sum(V * V, axis=0))
    mean = xp.astype(model.mean, high, copy=False)[None, :] + xp.stack(means, axis=1)
    eye = xp.eye(t, dtype=high, device=model.device)
    if how == "var":
        return mean, xp.stack(covs, axis=1)
    if how == "output":
        return mean, xp.stack(covs, axis=1)[:, :, None] * eye[None, :, :]
    return mean, model.kernel.kron_sum(covs, [eye[:, a:a + 1] * eye[a:a + 1, :]
                                              for a in range(t)])
