"""The variational distribution ``q(u') = N(m', S')`` of a whitened SVGP, in two forms.

- :class:`CholeskyForm`: ``q_mu = m'`` and lower-triangular ``q_sqrt = R`` with ``S' = R R^T``.
  Exact KL, marginals by triangular products; trained by Adam or dense natural gradients.
- :class:`NaturalForm`: ``q_theta1 = S'^{-1} m'`` and ``q_precision = P = S'^{-1}``. Everything
  by PCG solves against ``P`` with a spectral preconditioner (``krylov_options``), no
  factorisation: the form of the O(J m^2) natural gradient (Salimbeni, Eleftheriadis & Hensman
  2018; Pleiss et al. 2020).

Each form owns its marginal terms, its KL (and gradient), its draws, its conversion to the other
form, and (natural form) the precision solves and their preconditioner. Both take ``q`` as a
pair of arrays with a leading latent axis, ((L, m), (L, m, m)), and ``A = W^{-1} K_ZX`` either
(m, b), shared by every latent (shared inducing points), or (L, m, b), one block per latent
(separate inducing points); the model holds the parameters.
Natural gradients reach them through the model's public methods (``q_cholesky``,
``q_natural``, ``precision_solve``), which delegate here.
"""

from __future__ import annotations

from gpnum.backend import (
    cholesky,
    default_rng,
    device_of,
    get_namespace,
    lower_matmul,
    matmul,
    same_namespace_dtype_device,
    triangular_inverse,
    triangular_matmul,
)
from gpnum.ciq import inv_sqrt_matmul
from gpnum.divergences import kl_whitened, kl_whitened_and_grad
from gpnum.errors import NotPSDError
from gpnum.linalg import Dense, SpectralPreconditioner, pcg, slq_logdet

__all__ = ["CholeskyForm", "NaturalForm", "precision_to_q_sqrt", "q_sqrt_to_precision"]


def latent_block(A, lat):
    """Latent ``l``'s ``A`` (m, b): ``A`` itself when shared (m, b), ``A[l]`` when (L, m, b)."""
    return A if A.ndim == 2 else A[lat, ...]


def project_latents(A, V):
    """``A_l v_l`` for each latent, (L, m), from ``V`` (b, L) and ``A`` (m, b) or (L, m, b)."""
    xp = get_namespace(A, V)
    if A.ndim == 2:
        return (A @ V).T
    return xp.sum(A * xp.matrix_transpose(V)[:, None, :], axis=2)


def q_sqrt_to_precision(R):
    """``S^{-1} = R^{-T} R^{-1}`` for a lower-triangular ``R`` (m, m) with ``S = R R^T``."""
    Rinv = triangular_inverse(R, lower=True)
    return matmul(Rinv.T, Rinv)


def precision_to_q_sqrt(P, *, max_tries=0):
    """Lower-triangular ``R`` (m, m) with ``R R^T = P^{-1}``, from one Cholesky factorisation.

    With the exchange matrix ``J`` (reversal of rows and columns): ``J P J = L L^T`` gives
    ``P^{-1} = J L^{-T} J J L^{-1} J``, and ``R = J L^{-T} J`` is lower triangular.

    Raises
    ------
    NotPSDError
        If ``P`` is not positive definite (no jitter is added unless ``max_tries > 0``).
    """
    xp = get_namespace(P)
    L = cholesky(xp.flip(P, axis=(0, 1)), max_tries=max_tries)
    # L^{-T} is upper triangular; reversing rows and columns makes it lower triangular.
    return xp.flip(triangular_inverse(L, lower=True).T, axis=(0, 1))


class CholeskyForm:
    """``q(u') = N(q_mu, q_sqrt q_sqrt^T)``."""

    name = "cholesky"
    param_names = ("q_mu", "q_sqrt")

    def marginal_terms(self, q, A):
        """``(m' (L, m), colsum((R^T A)^2) (b, L), cache)`` for ``A`` (m, b) or (L, m, b)."""
        xp = get_namespace(A)
        q_mu, q_sqrt = q
        RtA = xp.stack([triangular_matmul(q_sqrt[lat, ...], latent_block(A, lat), trans=True)
                        for lat in range(q_mu.shape[0])])  # (L, m, b)
        return q_mu, xp.sum(RtA * RtA, axis=1).T, {"RtA": RtA}

    def data_covariance(self, q, A):
        """``m'`` (L, m) and ``[A^T S'_l A (n, n) for each latent l]``."""
        q_mu, q_sqrt = q
        out = []
        for lat in range(q_sqrt.shape[0]):
            r = triangular_matmul(q_sqrt[lat, ...], latent_block(A, lat), trans=True)
            out.append(r.T @ r)
        return q_mu, out

    def kl(self, q, cache=None):
        """``sum_l KL(q_l || N(0, I))``, exact (a 0-d array)."""
        q_mu, q_sqrt = q
        total = kl_whitened(q_mu[0, ...], q_sqrt[0, ...])
        for lat in range(1, q_mu.shape[0]):
            total = total + kl_whitened(q_mu[lat, ...], q_sqrt[lat, ...])
        return total

    def kl_and_q_grad(self, q):
        """The exact KL and its gradients w.r.t. ``q_mu`` (L, m) and ``q_sqrt`` (L, m, m)."""
        xp = get_namespace(q[0])
        q_mu, q_sqrt = q
        total, gm, gL = None, [], []
        for lat in range(q_mu.shape[0]):
            v, gk = kl_whitened_and_grad(q_mu[lat, ...], q_sqrt[lat, ...], validate=False)
            total = v if total is None else total + v
            gm.append(gk["m"])
            gL.append(gk["L"])
        return total, {"q_mu": xp.stack(gm), "q_sqrt": xp.stack(gL)}

    def kl_and_grad(self, q, A, g_mu, g_var, cache):
        """The KL, the ELBO's gradients w.r.t. ``q_mu`` (L, m) and ``q_sqrt`` (L, m, m), and
        ``S' A`` (L, m, b) for the cotangent of ``A`` ((m, b), or (L, m, b) per latent).

        ``g_mu``, ``g_var`` (b, L): the (scaled) data term's gradients w.r.t. each point's
        marginal mean and variance; ``mu = c + A^T m'``, ``var`` contains
        ``colsum((R^T A)^2)``.
        """
        xp = get_namespace(A)
        q_mu, q_sqrt = q
        RtA = cache["RtA"]
        total = None
        gkl_m, g_sqrt = [], []
        for lat in range(q_mu.shape[0]):
            # q is model state, not user input: the fit loop's finiteness check covers it.
            v, gk = kl_whitened_and_grad(q_mu[lat, ...], q_sqrt[lat, ...], validate=False)
            total = v if total is None else total + v
            gkl_m.append(gk["m"])
            AG = latent_block(A, lat) * (2.0 * g_var[:, lat])[None, :]  # 2 A diag(g_var_l), (m, b)
            g_sqrt.append(lower_matmul(AG, RtA[lat, ...].T) - gk["L"])
        grads = {"q_mu": project_latents(A, g_mu) - xp.stack(gkl_m), "q_sqrt": xp.stack(g_sqrt)}
        SA = xp.stack([triangular_matmul(q_sqrt[lat, ...], RtA[lat, ...])
                       for lat in range(q_mu.shape[0])])  # (L, m, b)
        return total, grads, SA

    def draw(self, q, eps, lat):
        """``m'_l + R_l eps`` (m, k)."""
        q_mu, q_sqrt = q
        return q_mu[lat, ...][:, None] + triangular_matmul(q_sqrt[lat, ...], eps)

    def convert(self, q):
        """The same distributions in natural form: ``(S'^{-1} m', S'^{-1})``."""
        xp = get_namespace(q[0])
        q_mu, q_sqrt = q
        th, P = [], []
        for lat in range(q_mu.shape[0]):
            prec = q_sqrt_to_precision(q_sqrt[lat, ...])
            th.append(matmul(prec, q_mu[lat, ...]))
            P.append(prec)
        return xp.stack(th), xp.stack(P)


class NaturalForm:
    """``q(u') = N(P^{-1} theta1, P^{-1})`` by PCG solves against the precision ``P``.

    Parameters
    ----------
    options : dict
        The model's ``krylov_options`` (the dict itself, so that later changes take effect):
        ``rtol``, ``maxiter`` of PCG; ``precondition`` (block size of the spectral
        preconditioner's eigenpair search, 0 for none); ``warm_start`` (default True: see
        ``starts``); ``num_probes``, ``num_lanczos``, ``seed`` of the stochastic KL estimate.
    starts : dict, optional
        The model's record of each latent's last preconditioner (latent index -> its Ritz
        vectors), kept across the forms built for successive steps. With ``warm_start``, a
        latent's eigenpair search starts from them with one subspace iteration instead of two
        from Gaussian vectors: a natural-gradient step moves the precision a fraction ``gamma``,
        and the iterations accumulate over the steps (in an SVGP step at m = 1000, PCG takes
        8-10 iterations instead of 10-12; timings in docs/benchmarks.md). Only
        iteration counts depend on it: PCG solves to the same tolerance. Not saved with a
        checkpoint (a restored model's first search starts from Gaussian vectors).
    """

    name = "natural"
    param_names = ("q_theta1", "q_precision")

    def __init__(self, options, starts=None):
        self.options = options
        self.starts = starts

    def preconditioner(self, P, latent=None):
        """PCG preconditioner for the precision ``P`` (m, m) from its leading eigenpairs.

        The precision is ``I`` plus data terms whose spectrum decays like the kernel's, so the
        spectral preconditioner takes CG from hundreds of iterations to tens. ``latent``: whose
        precision this is, for the warm start (``starts``); None searches from Gaussian vectors.
        """
        ell = int(self.options.get("precondition", 0) or 0)
        if ell <= 0:
            return None
        warm = (self.starts is not None and latent is not None
                and self.options.get("warm_start", True))
        start = self.starts.get(latent) if warm else None
        if start is not None and (start.shape[0] != P.shape[0]
                                  or not same_namespace_dtype_device(start, P)):
            start = None  # the model moved to another backend, dtype or device
        try:
            M = SpectralPreconditioner.from_operator(Dense(P, symmetric=True), ell,
                                                     power_iters=2 if start is None else 1,
                                                     start=start)
        except NotPSDError:
            return None  # an indefinite P: plain CG reports the breakdown
        if warm:
            # (a search that kept under half its block, such as on P = I, is no start)
            if 2 * M.W.shape[1] >= ell:
                self.starts[latent] = M.W
            else:
                self.starts.pop(latent, None)
        return M

    def precision_solve(self, P, rhs, *, rtol=None, M="search"):
        """PCG against ``P`` (m, m) for ``rhs`` (m, k); ``M``: a preconditioner from
        :meth:`preconditioner` for this ``P`` (or None), by default searched here."""
        if isinstance(M, str):
            M = self.preconditioner(P)
        return pcg(Dense(P, symmetric=True), rhs,
                   rtol=self.options["rtol"] if rtol is None else rtol,
                   maxiter=self.options["maxiter"], M=M)

    def solves(self, q, A, preconditioners=None):
        """``m'`` (L, m) and ``S' A`` (L, m, b) by PCG against each precision (``A`` (m, b) or
        (L, m, b)).

        ``preconditioners``: a list to which each latent's preconditioner is appended, for
        further solves against the same precisions (:meth:`kl`).
        """
        xp = get_namespace(A)
        th, P = q
        ms, SAs = [], []
        for lat in range(th.shape[0]):
            rhs = xp.concat([th[lat, ...][:, None], latent_block(A, lat)], axis=1)
            M = self.preconditioner(P[lat, ...], latent=lat)
            if preconditioners is not None:
                preconditioners.append(M)
            res = self.precision_solve(P[lat, ...], rhs, M=M)
            if res.info < 0:
                raise NotPSDError(
                    f"q_precision of latent {lat} is not positive definite (CG breakdown: "
                    f"{res.status}); lower the natural-gradient step size")
            ms.append(res.x[:, 0])
            SAs.append(res.x[:, 1:])
        return xp.stack(ms), xp.stack(SAs)

    def marginal_terms(self, q, A):
        """``(m' (L, m), colsum(A * S'A) (b, L), cache)`` for ``A`` (m, b) or (L, m, b)."""
        xp = get_namespace(A)
        precond = []
        q_mean, SA = self.solves(q, A, precond)
        A3 = A[None, :, :] if A.ndim == 2 else A
        return q_mean, xp.sum(A3 * SA, axis=1).T, {"SA": SA, "precond": precond}

    def data_covariance(self, q, A):
        """``m'`` (L, m) and ``[A^T S'_l A (n, n) for each latent l]``."""
        q_mean, SA = self.solves(q, A)
        return q_mean, [latent_block(A, lat).T @ SA[lat, ...] for lat in range(SA.shape[0])]

    def kl(self, q, cache=None):
        """``sum_l KL(q_l || N(0, I))``, a stochastic estimate for monitoring only.

        ``tr S'`` by Hutchinson probes solved with PCG and ``log|S'|`` by stochastic Lanczos
        quadrature, never a factorisation. ``cache``: :meth:`marginal_terms`' cache, whose
        preconditioners (one per latent, for the current precisions) are reused.
        """
        xp = get_namespace(q[0])
        opts = self.options
        th, P = q
        m = th.shape[1]
        rng = default_rng(opts["seed"], xp=xp, device=device_of(th))
        preconditioners = None if cache is None else cache["precond"]
        total = 0.0
        for lat in range(th.shape[0]):
            Zp = rng.rademacher((m, opts["num_probes"]), dtype=th.dtype)
            rhs = xp.concat([th[lat, ...][:, None], Zp], axis=1)
            M = "search" if preconditioners is None else preconditioners[lat]
            sol = self.precision_solve(P[lat, ...], rhs, M=M).x
            mean = sol[:, 0]
            trace = xp.sum(Zp * sol[:, 1:]) / opts["num_probes"]
            logdet_prec = slq_logdet(Dense(P[lat, ...]), num_probes=opts["num_probes"],
                                     num_iter=opts["num_lanczos"], seed=opts["seed"] + lat)
            total = total + 0.5 * (xp.sum(mean * mean) + trace + logdet_prec - m)
        return total

    def kl_and_q_grad(self, q):
        """The KL estimate and no gradients (natural gradients update q)."""
        return self.kl(q), {}

    def kl_and_grad(self, q, A, g_mu, g_var, cache):
        """The KL estimate, no gradients (natural gradients update q, and the KL does not
        depend on the other parameters), and ``S' A`` from the marginals' solves."""
        return self.kl(q, cache), {}, cache["SA"]

    def draw(self, q, eps, lat, num_quad=15):
        """``m'_l + P_l^{-1/2} eps`` (m, k): the symmetric root of ``S' = P^{-1}`` by CIQ on the
        precision, to the PCG tolerance, with no factorisation."""
        th, P = q
        mean, _ = self.solves((th[lat:lat + 1, ...], P[lat:lat + 1, ...]), eps[:, :0])
        noise = inv_sqrt_matmul(Dense(P[lat, ...], symmetric=True), eps, num_quad=num_quad,
                                rtol=self.options["rtol"],
                                maxiter=max(200, 2 * eps.shape[0])).x
        return mean[0, ...][:, None] + noise

    def convert(self, q):
        """The same distributions in Cholesky form: ``(m', R)`` with one Cholesky of each
        precision, O(m^3)."""
        xp = get_namespace(q[0])
        th, P = q
        mus, Rs = [], []
        for lat in range(th.shape[0]):
            R = precision_to_q_sqrt(P[lat, ...])
            mus.append(matmul(R, matmul(R.T, th[lat, ...])))
            Rs.append(R)
        return xp.stack(mus), xp.stack(Rs)
