"""Multi-output GPR on the observed entries without a factorisation: BBMM conjugate gradients on
``P (sum_q K_q kron B_q + I_n kron D) P^T``.

``P`` (N_o, n t) selects the observed entries of ``vec(Y)`` (input-major, entry ``i * t + a``).
The operator is never formed: a product embeds the vector into all ``n t`` entries with zeros
at the missing ones, applies each Kronecker term factor by factor (``O(n^2 t + n t^2)`` per
column with dense ``K_q``) and keeps the observed rows (:class:`gpnum.linalg.Masked` over
:class:`gpnum.linalg.Kronecker`; Wilson et al. 2014, section 4, for the masked-grid idea).
The log marginal likelihood and its gradient are the BBMM estimates of Gardner et al. (2018)
(:mod:`gpnum.models._gpr_cg`): one block PCG over ``[r, z_1..z_T]`` with a pivoted-Cholesky
preconditioner gives ``a = Sigma_oo^{-1} r``, ``u_i = Sigma_oo^{-1} z_i`` and the Lanczos
tridiagonals of the stochastic log-determinant, and the cotangent of ``Sigma_oo``,

    Sigma_bar ~= 1/2 (a a^T - (1/T) sum_i u_i v_i^T),    v_i = P_pre^{-1} z_i,

is kept as two thin factors ``L R^T`` (N_o, T + 1). Where the latent grams' ``n x n`` arrays do
not fit in memory (``GPR(solver="cg")``'s rule, :func:`gpnum.models._gpr_cg.dense_fits`, counted
for every latent), each ``K_q`` is a blocked :class:`gpnum.linalg.KernelMatrix`, evaluated tile
by tile at every product (O(n) memory), and ``dK_q`` below is never formed: its thin factors
go to the kernel through ``KernelMatrix.param_vjp``. Embedded with zeros at the missing entries
and viewed as ``(n, t, k)`` arrays, it reaches the factors by hand:

    dK_q[i, j] = sum_{k,a,b} L[i, a, k] B_q[a, b] R[j, b, k],
    dB_q[a, b] = sum_{k,i,j} L[i, a, k] K_q[i, j] R[j, b, k],
    dD_aa      = sum_{i,k} L[i, a, k] R[i, a, k],

and ``d/dmean_a = sum_i A[i, a]`` with ``A`` the embedded ``a``. Predictions: the mean from a
PCG solve at the prediction tolerance, (co)variances from a preconditioned LOVE cache (Pleiss
et al. 2018) on the same operator.
"""

from __future__ import annotations

import math

from gpnum.errors import NotPSDError
from gpnum.linalg import (
    AddedDiag,
    Dense,
    Diagonal,
    KernelMatrix,
    Kronecker,
    Masked,
    Sum,
    lanczos_quadrature,
    pcg,
    pcg_lanczos,
    preconditioner_probes,
)
from gpnum.models._gpr_cg import (
    _MIB,
    _love_cache,
    _love_quad,
    _preconditioner,
    block_rows_for_budget,
    dense_fits,
    tiled_kernel_matrix,
)

__all__ = ["cg_lml", "cg_predict_block", "cg_prediction_state"]

_LOG_2PI = math.log(2.0 * math.pi)


def cg_operator(model, grams, coregion, mask):
    """``P (sum_q K_q kron B_q + I kron D) P^T`` as an ``AddedDiag`` (float64 factors)."""
    xp = model.xp
    n = grams[0].shape[0]
    ops = [K if isinstance(K, KernelMatrix) else Dense(K, symmetric=True) for K in grams]
    terms = [Kronecker(K, Dense(B, symmetric=True)) for K, B in zip(ops, coregion, strict=True)]
    op = terms[0] if len(terms) == 1 else Sum(*terms)
    noise = model._noise()
    scale = float(sum(xp.mean(K.diagonal()) * xp.mean(xp.linalg.diagonal(B))
                      for K, B in zip(ops, coregion, strict=True)))
    if not float(xp.min(noise)) > 1e-10 * scale:
        raise NotPSDError(
            f"MultiOutputGPR(solver='cg'): the smallest noise variance + jitter "
            f"{float(xp.min(noise)):.3g} is below 1e-10 of the prior's mean variance "
            f"({scale:.3g}): conjugate gradients need a larger shift. Pass a fixed jitter "
            "(MultiOutputGPR(..., jitter=1e-4)) or use solver='cholesky'")
    diag = xp.reshape(xp.ones((n, 1), dtype=xp.float64, device=model.device)
                      * noise[None, :], (-1,))
    if mask["index"] is not None:
        op = Masked(op, mask["index"])
        diag = xp.take(diag, mask["index"], axis=0)
    return AddedDiag(op, Diagonal(diag))


def _factors(model, X, need_grad):
    """The latent grams (float64 arrays, or blocked ``KernelMatrix`` operators where the arrays
    do not fit), the ``B_q`` and, for dense grams with ``need_grad``, the kernel's backward
    pass."""
    xp = model.xp
    high = xp.float64
    kernels = model.kernel.latent_kernels
    n = X.shape[0]
    if not dense_fits(n, model.cg_options, xp, model.device, need_grad, matrices=len(kernels)):
        rows = min(block_rows_for_budget(n, model.cg_options.memory_budget_mib * _MIB, 8), n)
        grams = [tiled_kernel_matrix(model, X, rows, kernel=k) for k in kernels]
        coregion = [xp.astype(0.5 * (B + xp.matrix_transpose(B)), high, copy=False)
                    for B in model.kernel.coregion_matrices()]
        return grams, coregion, None
    if need_grad:
        grams, coregion, vjp = model.kernel.grams_and_vjp(X)
    else:
        grams = [k(X) for k in model.kernel.latent_kernels]
        coregion, vjp = model.kernel.coregion_matrices(), None
    grams = [xp.astype(K, high, copy=False) for K in grams]
    coregion = [xp.astype(0.5 * (B + xp.matrix_transpose(B)), high, copy=False)
                for B in coregion]
    return grams, coregion, vjp


def cg_lml(model, X, Y, mask, need_grad):
    """Stochastic BBMM log marginal likelihood of the observed entries and its gradients
    (module notes); ``model._cg_last`` records the solve's statistics and standard errors."""
    xp = model.xp
    opts = model.cg_options
    n, t = Y.shape
    grams, coregion, vjp = _factors(model, X, need_grad)
    A = cg_operator(model, grams, coregion, mask)
    M = _preconditioner(A, opts)
    r = model._observed(model._residual(Y), mask)
    Z = preconditioner_probes(M, opts.num_probes, seed=opts.seed, design=opts.probe_design)
    T = Z.shape[1]
    res = pcg_lanczos(A, xp.concat([r[:, None], Z], axis=1), M=M, rtol=opts.train_rtol,
                      min_iter=opts.min_iter, maxiter=opts.maxiter, stop=opts.train_stop)
    alpha, U = res.x[:, 0], res.x[:, 1:]
    quad = lanczos_quadrature(res.tridiag_alpha[1:, :], res.tridiag_beta[1:, :],
                              res.start_norm2[1:])
    logdet = M.logdet() + xp.mean(quad)
    value = -0.5 * xp.sum(r * alpha) - 0.5 * logdet - 0.5 * r.shape[0] * _LOG_2PI
    stderr = float(xp.std(quad, correction=1)) / math.sqrt(T) if T > 1 else float("nan")
    model._cg_last = {"num_iter": res.num_iter,
                      "relative_residual": float(xp.max(res.relative_residual)),
                      "logdet_std_error": stderr, "lml_std_error": 0.5 * stderr}
    value = model._scalar(value)
    if not need_grad:
        return value, None
    V = M @ Z
    left = xp.concat([0.5 * alpha[:, None], (-0.5 / T) * U], axis=1)         # (N_o, k)
    right = xp.concat([alpha[:, None], V], axis=1)
    k = left.shape[1]
    L3 = xp.reshape(model._scatter(left, mask), (n, t, k))
    R3 = xp.reshape(model._scatter(right, mask), (n, t, k))
    R_flat = xp.reshape(xp.permute_dims(R3, (0, 2, 1)), (n, k * t))         # [j, (k, b)]
    L_by_output = xp.reshape(xp.permute_dims(L3, (1, 0, 2)), (t, n * k))     # [a, (i, k)]
    dK, dB = [], []
    for K, B in zip(grams, coregion, strict=True):
        LB = xp.reshape(xp.permute_dims(L3, (0, 2, 1)) @ B, (n, k * t))     # [i, (k, b)]
        if vjp is None:       # blocked gram: dK_q = LB R_flat^T goes in as its two factors
            dK.append(K.param_vjp(LB, R_flat)["kernel"])
        else:
            dK.append(xp.astype(LB @ xp.matrix_transpose(R_flat), model.dtype, copy=False))
        KR = xp.reshape(K @ xp.reshape(R3, (n, t * k)), (n, t, k))          # [i, b, k]
        KR_by_output = xp.reshape(xp.permute_dims(KR, (1, 0, 2)), (t, n * k))
        dB.append(xp.astype(L_by_output @ xp.matrix_transpose(KR_by_output), model.dtype,
                            copy=False))
    params = model.kernel.join_vjp(dK, dB) if vjp is None else vjp(dK, dB)
    g_noise = xp.sum(xp.sum(L3 * R3, axis=2), axis=0)
    g_mean = xp.sum(xp.reshape(model._scatter(alpha, mask), (n, t)), axis=0)
    if T > 1:
        per_probe = xp.sum(U * V, axis=0)
        model._cg_last["noise_grad_std_error"] = float(
            0.5 * xp.std(per_probe, correction=1) / math.sqrt(T))
    return value, model._pack(g_mean, params, g_noise)


def _predict_rtol(model, A):
    """``cg_options.predict_rtol``, else GPR(solver="cg")'s rule with the smallest noise:
    ``0.01 * min(1, sqrt(noise / mean prior variance))``."""
    opts = model.cg_options
    if opts.predict_rtol is not None:
        return float(opts.predict_rtol)
    xp = model.xp
    noise = float(xp.min(A.diag._diagonal()))
    scale = float(xp.mean(A.operator._diagonal()))
    return 0.01 * min(1.0, math.sqrt(noise / scale)) if scale > 0 else 0.01


def cg_prediction_state(model):
    """``alpha = Sigma_oo^{-1} r`` (PCG) and the LOVE cache of ``Sigma_oo^{-1}``."""
    xp = model.xp
    opts = model.cg_options
    mask = model._own_mask
    grams, coregion, _ = _factors(model, model._X, False)
    A = cg_operator(model, grams, coregion, mask)
    M = _preconditioner(A, opts)
    r = model._observed(model._residual(model._y), mask)
    rtol = _predict_rtol(model, A)
    sol = pcg(A, r[:, None], M=M, rtol=rtol, maxiter=opts.maxiter)
    state = {"cg": True, "alpha": sol.x[:, 0], "mask": mask, "coregion": coregion}
    state.update(_love_cache(A, M, r, min(opts.love_rank, r.shape[0])))
    model._cg_predict_last = {"num_iter": int(sol.num_iter), "rtol": rtol,
                              "relative_residual": float(xp.max(sol.relative_residual))}
    return state


def cg_predict_block(model, Xnew, state, how):
    """Mean (m, t) and variances (m, t), output covariances (m, t, t) or the joint
    covariance (m t, m t) at ``Xnew`` from :func:`cg_prediction_state`."""
    xp = model.xp
    high = xp.float64
    m, t = Xnew.shape[0], model.num_outputs
    kern = model.kernel
    coregion = state["coregion"]
    cross = kern.kron_sum([xp.astype(k(Xnew, model._X), high, copy=False)
                           for k in kern.latent_kernels], coregion)             # (m t, n t)
    if state["mask"]["index"] is not None:
        cross = xp.take(cross, state["mask"]["index"], axis=1)
    mean = (xp.astype(model.mean, high, copy=False)[None, :]
            + xp.reshape(cross @ state["alpha"], (m, t)))
    quad, c, w, a = _love_quad(state, xp.matrix_transpose(cross))
    if how == "full":
        prior = kern.kron_sum([xp.astype(k(Xnew), high, copy=False)
                               for k in kern.latent_kernels], coregion)
        reduction = (xp.matrix_transpose(c) @ c + xp.matrix_transpose(w) @ w
                     - xp.matrix_transpose(a) @ a)
        return mean, prior - reduction
    diags = [xp.astype(k.diag(Xnew), high, copy=False) for k in kern.latent_kernels]
    if how == "var":
        prior = sum(d[:, None] * xp.linalg.diagonal(B)[None, :]
                    for d, B in zip(diags, coregion, strict=True))
        return mean, prior - xp.reshape(quad, (m, t))
    prior = sum(d[:, None, None] * B[None, :, :] for d, B in zip(diags, coregion, strict=True))

    def per_input(F):                                   # (r, m t) -> (m, t, t) of F^T F
        F3 = xp.reshape(F, (F.shape[0], m, t))
        return xp.matmul(xp.permute_dims(F3, (1, 2, 0)), xp.permute_dims(F3, (1, 0, 2)))

    return mean, prior - (per_input(c) + per_input(w) - per_input(a))
