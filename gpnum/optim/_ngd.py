"""Natural-gradient steps for the variational distribution of an SVGP.

Salimbeni, Eleftheriadis & Hensman (2018), "Natural gradients in practice"; the O(J m^2) variant
of Pleiss et al. (2020), "Fast matrix square roots with applications to Gaussian processes and
Bayesian optimization" (NeurIPS), appendix on natural gradients.

With natural parameters ``theta1 = S^{-1} m``, ``theta2 = -1/2 S^{-1}`` and the ELBO's
gradients ``g_mu``, ``g_var`` w.r.t. each point's marginal mean and variance (already scaled by
``N / b``), a step of size ``gamma`` on the expectation-parameter gradient is

    Lambda <- (1 - gamma) Lambda + gamma (I - 2 A diag(g_var) A^T)         (Lambda = -2 theta2)
    theta1 <- (1 - gamma) theta1 + gamma (A g_mu - 2 A diag(g_var) A^T m)

which follows from ``dELBO/deta2 = G_S``, ``dELBO/deta1 = G_m - 2 G_S m`` with
``G_S = A diag(g_var) A^T - (I - S^{-1}) / 2`` and ``G_m = A g_mu - m``. With a Gaussian
likelihood, the full data and ``gamma = 1`` it lands exactly on the optimal ``q``.

- ``method="dense"``: the model holds ``q_mu``, ``q_sqrt``; each step converts to natural
  parameters and back with O(m^3) triangular work (one Cholesky), as GPflow's ``XiNat``.
- ``method="krylov"``: the model holds ``q_theta1`` and the precision ``q_precision``
  (``SVGP.to_natural``); ``m'`` and ``S' A`` come from PCG against the precision, the data term is
  a rank-b update, and there is no Cholesky, inverse or log-determinant in the step.

Non-conjugate likelihoods (Student-t) can push the precision out of the positive-definite cone
for a large ``gamma``. Both methods detect it (a failed Cholesky; CG breakdown / negative
curvature) and reject the step, retrying with ``gamma`` halved up to ``max_rejections`` times
before raising :class:`gpnum.NotPSDError`; never a silent NaN. Where every ``g_var`` of a
latent is <= 0 (log-concave likelihoods, ``clip_curvature``) the target precision is
``I`` plus a positive semi-definite matrix, so each candidate is a convex combination of two
positive-definite matrices: the krylov method then skips its check solve.
"""

from __future__ import annotations

import warnings

from gpnum.backend import blas_pool, get_namespace, matmul
from gpnum.errors import ConvergenceWarning, NotPSDError
from gpnum.models import check_model, precision_to_q_sqrt, project_latents, q_sqrt_to_precision

__all__ = ["NaturalGradient"]


def natural_statistics(data, clip_curvature=True):
    """The sums over a minibatch that the natural-gradient targets need.

    From :meth:`gpnum.SVGP.data_term_and_grad`'s ``A`` (m, b), or (L, m, b) with separate
    inducing points (``A_l`` in place of ``A`` below), ``g_mu`` and ``g_var`` (b, L):
    ``AGA`` (L, m, m) ``= A diag(g_var_l) A^T`` (with ``g_var`` clipped at 0 from above when
    ``clip_curvature``), ``Ag_mu`` (L, m) ``= A g_mu_l`` and ``g_var_max`` (L,). Each is a sum
    (or a maximum) over points, so the statistics of row chunks add up to the batch's: what
    :mod:`gpnum.distributed` gathers from its workers for a natural-gradient step.
    """
    xp = get_namespace(data["A"])
    A, g_mu, g_var = data["A"], data["g_mu"], data["g_var"]
    if clip_curvature:
        g_var = xp.minimum(g_var, xp.zeros_like(g_var))
    if A.ndim == 3:
        AGA = xp.stack([matmul(A[j, ...] * g_var[:, j][None, :], A[j, ...].T)
                        for j in range(g_var.shape[1])])
        return {"AGA": AGA, "Ag_mu": project_latents(A, g_mu),
                "g_var_max": xp.max(g_var, axis=0)}
    AGA = xp.stack([matmul(A * g_var[:, j][None, :], A.T) for j in range(g_var.shape[1])])
    return {"AGA": AGA, "Ag_mu": xp.matrix_transpose(matmul(A, g_mu)),
            "g_var_max": xp.max(g_var, axis=0)}


class NaturalGradient:
    """Natural-gradient optimiser of an SVGP's variational distribution ``q(u')``.

    Parameters
    ----------
    gamma : float or callable
        Step size in (0, 1], or a schedule ``step -> gamma`` (e.g.
        :func:`gpnum.optim.warmup`).
    method : {"dense", "krylov"}
        See the module docstring. ``"krylov"`` switches the model to the natural form.
    max_rejections : int
        Halvings of ``gamma`` tried when a step leaves the positive-definite cone.
    rtol : float
        PCG tolerance of the krylov method's positive-definiteness check solve.
    clip_curvature : bool
        Use ``min(g_var, 0)`` in place of ``g_var`` (a Gauss-Newton-style positive-definite
        curvature). A no-op for log-concave likelihoods (Gaussian, Bernoulli), whose ``g_var``
        is never positive; for Student-t, outliers give ``g_var > 0``, scaled by ``N / b``, and
        the exact step then leaves the positive-definite cone even for tiny ``gamma``. With
        clipping the precision stays positive definite for every ``gamma`` in (0, 1] and the
        mean's fixed point is unchanged (``A g_mu = m``). Default False: the exact natural
        gradient, with step rejection as the safeguard.

    Attributes
    ----------
    num_steps : int
        Steps taken (the schedule's argument).
    num_rejected : int
        Steps rejected so far because the precision left the positive-definite cone.
    """

    def __init__(self, gamma=0.1, method="dense", *, max_rejections=5, rtol=1e-8,
                 clip_curvature=False):
        if method not in ("dense", "krylov"):
            raise ValueError(f"method: expected 'dense' or 'krylov', got {method!r}")
        if not callable(gamma):
            g = float(gamma)
            if not 0.0 < g <= 1.0:
                raise ValueError(f"gamma: expected a step size in (0, 1], got {gamma!r}")
        self.gamma = gamma
        self.method = method
        self.max_rejections = int(max_rejections)
        self.rtol = float(rtol)
        self.clip_curvature = bool(clip_curvature)
        self.num_steps = 0
        self.num_rejected = 0
        # Dense method: the natural parameters (theta1 (L, m), P (L, m, m)) of the q this
        # optimiser last set, with the q_mu and q_sqrt arrays it set them as. While the model
        # still holds those very arrays, the next step starts from them instead of forming
        # R^-T R^-1 again (an O(m^3) triangular inverse and product per step). Saved in
        # checkpoints (natural_cache / set_natural_cache), so that a resumed run is identical.
        self._natural = None

    def natural_cache(self, model):
        """``(theta1 (L, m), P (L, m, m))`` kept for ``model``'s current q, or None."""
        c = self._natural
        if c is None or self.method != "dense":
            return None
        params = model.parameters()
        if params.get("q_mu") is not c[0] or params.get("q_sqrt") is not c[1]:
            return None
        return c[2], c[3]

    def set_natural_cache(self, model, theta1, P):
        """Declare ``(theta1, P)`` the natural parameters of ``model``'s current q (a loaded
        checkpoint's)."""
        params = model.parameters()
        self._natural = (params["q_mu"], params["q_sqrt"], theta1, P)

    def current_gamma(self) -> float:
        g = float(self.gamma(self.num_steps)) if callable(self.gamma) else float(self.gamma)
        if not 0.0 < g <= 1.0:
            raise ValueError(f"gamma schedule gave {g!r} at step {self.num_steps}; expected (0, 1]")
        return g

    def prepare(self, model) -> None:
        """Put the model's q in the form this method works on."""
        if model.natural_gradient_step is not None:
            return  # the model takes its own steps (protocol extension): no form to set
        if self.method == "krylov":
            model.to_natural()
        else:
            model.to_cholesky()

    def step(self, model, X=None, y=None, *, data=None):
        """One natural-gradient update of ``q`` on a minibatch.

        Parameters
        ----------
        model : gpnum.SVGP
        X, y : arrays (b, d), (b,)
            The minibatch, unless ``data`` is given.
        data : dict, optional
            ``model.data_term_and_grad(X, y)`` (or ``elbo_and_grad(..., return_data=True)``'s
            third output) already computed at the current parameters, to avoid a second pass;
            or ``{"natural_statistics": ..., "cache": {"q_mean": ...}}`` with the batch's sums
            (:func:`natural_statistics`) gathered elsewhere (:mod:`gpnum.distributed`).

        Returns
        -------
        gamma : float
            The step size actually used (smaller than scheduled after a rejection).
        """
        # The statistics' products in the pool of the method's own work (gpnum.backend.
        # blas_pool): SciPy's Cholesky of the precision (dense), NumPy's PCG (krylov).
        check_model(model, ("fit",), caller="NaturalGradient.step")
        with blas_pool("numpy" if self.method == "krylov" else "scipy"):
            return self._step(model, X, y, data)

    def _step(self, model, X, y, data):
        own_step = model.natural_gradient_step
        if own_step is not None:
            # Protocol extension (docs/models.md): a model with its own Fisher (SVTP) takes the
            # step itself, from its objective's gradients, with its own step-size guard.
            if data is None:
                data = model.objective_and_grad(X, y, return_data=True)[2]
            # Its guard has its own number of halvings (the SVGP's max_rejections = 5 suits
            # natural parameters, where gamma = 1 is a sound step; see the model's docstring).
            used, rejected = own_step(data, self.current_gamma())
            self.num_rejected += int(rejected)
            self.num_steps += 1
            return used
        self.prepare(model)
        if data is None:
            data = model.data_term_and_grad(X, y)
        gamma = self.current_gamma()
        xp = model.xp
        q_mean = data["cache"]["q_mean"]
        stats = data.get("natural_statistics")
        if stats is None:
            stats = natural_statistics(data, self.clip_curvature)
        AGA, Ag_mu, g_var_max = stats["AGA"], stats["Ag_mu"], stats["g_var_max"]
        m = AGA.shape[-1]
        eye = xp.eye(m, dtype=AGA.dtype, device=model.device)
        new_t1, new_P = [], []
        acc_t1, acc_P = [], []
        if self.method == "dense":
            cached = self.natural_cache(model)
            if cached is None:
                q_mu, q_sqrt = model.q_cholesky()
                th = P = None
            else:
                th, P = cached
        else:
            th, P = model.q_natural()
        used = gamma
        for lat in range(model.num_latent):
            # Positive definite by construction (module docstring): no check solve needed.
            certain = self.method == "krylov" and float(g_var_max[lat]) <= 0.0
            target_P = eye - 2.0 * AGA[lat, ...]
            target_t1 = Ag_mu[lat, ...] - 2.0 * matmul(AGA[lat, ...], q_mean[lat, ...])
            if P is None:
                P_l = q_sqrt_to_precision(q_sqrt[lat, ...])
                t1_l = matmul(P_l, q_mu[lat, ...])
            else:
                P_l, t1_l = P[lat, ...], th[lat, ...]
            g = gamma
            for _attempt in range(self.max_rejections + 1):
                cand_P = (1.0 - g) * P_l + g * target_P
                cand_t1 = (1.0 - g) * t1_l + g * target_t1
                if certain:
                    ok, out = True, (cand_t1, cand_P)
                else:
                    ok, out = self._accept(cand_P, cand_t1, model)
                if ok:
                    break
                self.num_rejected += 1
                g = 0.5 * g
            else:
                raise NotPSDError(
                    f"natural-gradient step left the positive-definite cone for latent {lat} even "
                    f"with gamma reduced to {2 * g:.3g} (from {gamma:.3g}); use a smaller gamma or "
                    f"a warm-up schedule")
            used = min(used, g)
            new_t1.append(out[0])
            new_P.append(out[1])
            acc_t1.append(cand_t1)
            acc_P.append(cand_P)
        one = model.num_latent == 1
        if self.method == "dense":
            # in the model's own shapes: one latent's q is (m,) in an SVGP, (1, m) in LMCSVGP
            shapes = {k: tuple(v.shape) for k, v in model.parameters().items()}
            mus, Rs = xp.stack(new_t1), xp.stack(new_P)
            model.set_parameters({"q_mu": xp.reshape(mus, shapes["q_mu"]),
                                  "q_sqrt": xp.reshape(Rs, shapes["q_sqrt"])})
            self.set_natural_cache(model, xp.stack(acc_t1), xp.stack(acc_P))
        else:
            th, P = xp.stack(new_t1), xp.stack(new_P)
            model.set_parameters({"q_theta1": th[0, ...] if one else th,
                                  "q_precision": P[0, ...] if one else P})
        self.num_steps += 1
        return used

    def _accept(self, P, t1, model):
        """Check that ``P`` is positive definite; return the new state in the method's form."""
        if self.method == "dense":
            try:
                R = precision_to_q_sqrt(P)
            except NotPSDError:
                return False, None
            # matmul: these matrix-vector products on the BLAS pool of the Cholesky (NumPy's
            # pool would spin against it: see gpnum.backend.matmul).
            return True, (matmul(R, matmul(R.T, t1)), R)
        # Krylov: a CG solve with the new precision detects negative curvature.
        rtol = self.rtol if P.dtype == self._xp_of(P).float64 else max(self.rtol, 1e-5)
        with warnings.catch_warnings():
            # A breakdown here is the signal we look for, handled by rejecting the step.
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = model.precision_solve(P, t1[:, None], rtol=rtol)
        if res.info < 0:
            return False, None
        return True, (t1, P)

    @staticmethod
    def _xp_of(a):
        from gpnum.backend import get_namespace

        return get_namespace(a)

    def state_dict(self) -> dict:
        return {"num_steps": self.num_steps, "num_rejected": self.num_rejected}

    def load_state_dict(self, state: dict) -> None:
        self.num_steps = int(state["num_steps"])
        self.num_rejected = int(state["num_rejected"])
