"""Exact multi-output GP regression: ``Y`` of shape (n, t), a multi-output kernel, per-output noise.

The outputs at the training inputs, stacked input-major (``vec(Y)``, entry ``i * t + a``), are
Gaussian with covariance

    Sigma = sum_q kron(K_q, B_q) + kron(I_n, D),       D = diag(sigma_1^2, ..., sigma_t^2),

and a constant mean per output. Two exact paths compute the log marginal likelihood and its
gradient (Rasmussen & Williams 2006, eq. 2.30 and 5.9, with ``Sigma_bar = 1/2 (alpha alpha^T -
Sigma^{-1})`` pushed to the ``K_q`` and ``B_q`` by
:meth:`gpnum.kernels.MultiOutputKernel.kron_sum_vjp`):

- ``"kronecker"`` (an :class:`~gpnum.kernels.ICM` and every output observed at every input):
  with ``B~ = D^{-1/2} B D^{-1/2} = U_B diag(l_B) U_B^T`` and ``K = U_K diag(l_K) U_K^T``,
  ``Sigma = (I kron D^{1/2}) (U_K kron U_B) diag(l_K l_B^T + 1) (U_K kron U_B)^T
  (I kron D^{1/2})`` (Bonilla et al. 2008, section 3.1; Rakitsch et al. 2013, "It is all in the
  noise", section 3): two symmetric eigendecompositions, O(n^3 + t^3) time and O(n^2 + n t)
  memory instead of O(n^3 t^3) and O(n^2 t^2) (the formulas are in ``_multioutput_math.py``);
- ``"cholesky"`` (an LMC, or missing outputs: NaN entries of ``Y``): one Cholesky
  factorisation of ``Sigma`` restricted to the observed entries, O(N_o^3) for ``N_o``
  observed entries, exact on heterotopic data;
- ``"cg"`` (the same beyond ``cholesky_limit`` observed entries): BBMM conjugate gradients on
  ``P Sigma P^T`` with Kronecker products and a mask, never formed (``_multioutput_cg.py``);
- independent outputs (:class:`~gpnum.kernels.IndependentOutputs`): one Cholesky
  factorisation per output on its observed rows (``_multioutput_independent.py``).
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
from gpnum.kernels import ICM, IndependentOutputs, MultiOutputKernel
from gpnum.likelihoods import Gaussian
from gpnum.models._composite import FullBatchGaussianModel
from gpnum.models._gpr_cg import CGOptions
from gpnum.models._multioutput_cg import cg_lml, cg_predict_block, cg_prediction_state
from gpnum.models._multioutput_independent import (
    independent_lml,
    independent_predict,
    independent_state,
)
from gpnum.models._multioutput_math import kronecker_factors, kronecker_lml, kronecker_predict

__all__ = ["MultiOutputGPR"]

_LOG_2PI = math.log(2.0 * math.pi)


class MultiOutputGPR(FullBatchGaussianModel):
    """Exact GP regression with several outputs: ``Y[:, a] = f_a(X) + eps_a``.

    Parameters
    ----------
    kernel : gpnum.kernels.MultiOutputKernel
        :class:`~gpnum.kernels.ICM`, :class:`~gpnum.kernels.LMC` or
        :class:`~gpnum.kernels.IndependentOutputs` over ``t`` outputs.
    likelihood : gpnum.likelihoods.Gaussian
        Its ``variance`` of shape (t,) gives each output its own noise variance (learned);
        of shape () one noise variance shared by all outputs.
    X : array (n, d)
        Training inputs. Their namespace, device and floating dtype become the model's.
    Y : array (n, t)
        Training targets; NaN marks a missing entry (output not observed at that input).
        Inf is refused; at least one entry must be observed.
    mean : float or array (t,)
        Initial constant prior mean of each output (learned).
    jitter : float
        Fixed value added to every noise variance (default 0).
    solver : {"auto", "kronecker", "cholesky", "cg"}
        ``"auto"``: the Kronecker path for an ICM with no missing entry, one factorisation per
        output for independent outputs, else Cholesky on the observed entries when there are
        at most :attr:`cholesky_limit` of them and conjugate gradients beyond.
        ``"cholesky"`` and ``"cg"`` force the joint path on the observed entries;
        ``"kronecker"`` raises when that path does not apply.
    cg_options : dict or gpnum.models.CGOptions, optional
        Settings of the conjugate-gradient path (probes, preconditioner rank, tolerances,
        seed), as for ``GPR(solver="cg")``.

    Attributes
    ----------
    mean : array (t,)
    num_outputs : int
    full_batch : bool
        True.

    Notes
    -----
    Parameters: ``mean``, ``kernel.<name>`` (the multi-output kernel's, e.g.
    ``kernel.kernel.lengthscale``, ``kernel.coregion.W``), ``likelihood.variance``.
    Like :class:`gpnum.GPR`, every factorisation runs in float64 and the results are cast back
    to the working dtype.

    References
    ----------
    Bonilla, E. V., Chai, K. M. A. & Williams, C. K. I. (2008). Multi-task Gaussian process
    prediction. NeurIPS 20. Alvarez, M. A., Rosasco, L. & Lawrence, N. D. (2012). Kernels for
    vector-valued functions: a review. Foundations and Trends in Machine Learning 4(3).
    Rakitsch, B., Lippert, C., Borgwardt, K. & Stegle, O. (2013). It is all in the noise:
    efficient multi-task Gaussian process inference with structured residuals. NeurIPS 26.
    """

    _param_names = ("mean",)
    _positive = ()
    objective_name = "lml"
    #: Most observed entries ``N_o`` that ``solver="auto"`` factorises (else conjugate
    #: gradients). The Cholesky gradient holds several (n t, n t) and (N_o, N_o) float64 arrays
    #: at once (the joint covariance before the mask, its factor, its inverse, the cotangent
    #: scattered back) and costs O(N_o^3); its memory grows as N_o^2 while CG keeps
    #: O(n^2 Q + N_o k) (measurements: docs/multioutput.md, "Speed").
    cholesky_limit = 5000
    _factorisation_hint = ("start from larger noise variances or pass a fixed jitter "
                           "(MultiOutputGPR(..., jitter=...))")

    def __init__(self, kernel, likelihood, X, Y, *, mean=0.0, jitter=None, solver="auto",
                 cg_options=None):
        if not isinstance(kernel, MultiOutputKernel):
            raise TypeError(f"kernel: expected a gpnum multi-output kernel (ICM, LMC, "
                            f"IndependentOutputs), got {type(kernel).__name__}")
        if not isinstance(likelihood, Gaussian):
            raise TypeError(f"likelihood: MultiOutputGPR is exact inference: expected "
                            f"gpnum.likelihoods.Gaussian, got {type(likelihood).__name__}")
        if solver not in ("auto", "kronecker", "cholesky", "cg"):
            raise ValueError(f"solver: expected 'auto', 'kronecker', 'cholesky' or 'cg', got "
                             f"{solver!r}")
        self.cg_options = CGOptions.coerce(cg_options)
        self._cg_last = None
        ref = X if is_array(X) else next(iter(kernel.parameters().values()))
        xp = get_namespace(ref)
        dtype = ref.dtype if xp.isdtype(ref.dtype, "real floating") else kernel.dtype
        self._init_namespace(xp, dtype, device_of(ref))
        X = asarray(X, dtype=dtype, xp=xp, device=self._device)
        Y = asarray(Y, dtype=dtype, xp=xp, device=self._device)
        t = kernel.num_outputs
        if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
            raise ShapeError(f"X: expected a 2-D array of shape (n, d) with n, d >= 1, got "
                             f"{describe_shape(X.shape)}")
        if Y.ndim != 2 or tuple(Y.shape) != (X.shape[0], t):
            raise ShapeError(f"Y: expected shape ({X.shape[0]}, {t}) (one row per input, one "
                             f"column per output of the kernel), got {describe_shape(Y.shape)}")
        check_finite(xp, X, "X")
        self._check_targets(Y, "Y")
        variance = likelihood.variance
        if tuple(variance.shape) not in ((), (t,)):
            raise ShapeError(f"likelihood.variance: expected shape () (shared) or ({t},) (one "
                             f"per output), got {describe_shape(variance.shape)}")
        jitter = 0.0 if jitter is None else float(jitter)
        if not (jitter >= 0.0 and math.isfinite(jitter)):
            raise ValueError(f"jitter: expected a finite number >= 0, got {jitter!r}")
        self.kernel = kernel
        self.likelihood = likelihood
        self._check_component("kernel")
        self._check_component("likelihood")
        self.num_outputs = t
        self.jitter = jitter
        self.solver = solver
        mean = asarray(mean, dtype=dtype, xp=xp, device=self._device)
        if mean.ndim == 0:
            mean = xp.ones(t, dtype=dtype, device=self._device) * mean
        if tuple(mean.shape) != (t,):
            raise ShapeError(f"mean: expected a scalar or shape ({t},), got "
                             f"{describe_shape(mean.shape)}")
        self.mean = mean
        self._X = X
        self._y = Y
        self._own_mask = self._mask(Y)
        if solver == "kronecker" and not self._kronecker_applies(self._own_mask):
            raise ValueError("solver='kronecker' needs an ICM kernel and no missing entry in Y "
                             f"(kernel {type(kernel).__name__}, "
                             f"{self._own_mask['num_missing']} missing)")

    # ------------------------------------------------------------------ data
    def _check_targets(self, Y, name):
        xp = self.xp
        if bool(xp.any(xp.isinf(Y))):
            raise ValueError(f"{name}: expected finite values or NaN (missing), got Inf")
        if bool(xp.all(xp.isnan(Y))):
            raise ValueError(f"{name}: every entry is missing (NaN); nothing to condition on")

    def _mask(self, Y):
        """Where ``Y`` is observed: indices into ``vec(Y)`` and their inverse map."""
        xp = self.xp
        observed = xp.reshape(~xp.isnan(Y), (-1,))
        num_missing = int(xp.sum(xp.astype(~observed, xp.int64)))
        if num_missing == 0:
            return {"num_missing": 0, "index": None, "position": None}
        index = xp.nonzero(observed)[0]
        # position[f] = where entry f sits among the observed ones; N_o (a zero pad) if missing
        counts = xp.cumulative_sum(xp.astype(observed, xp.int64)) - 1
        position = xp.where(observed, counts, xp.zeros_like(counts) + index.shape[0])
        return {"num_missing": num_missing, "index": index, "position": position}

    def _kronecker_applies(self, mask):
        return isinstance(self.kernel, ICM) and mask["num_missing"] == 0

    def _path(self, mask):
        """"kronecker", "independent", "cg" or "cholesky" for targets with this mask."""
        if self.solver in ("auto", "kronecker") and self._kronecker_applies(mask):
            return "kronecker"
        if self.solver == "kronecker":
            raise ValueError("solver='kronecker': these targets have missing entries")
        if self.uses_independent:
            return "independent"
        if self.solver == "cg":
            return "cg"
        num_observed = self._X.shape[0] * self.num_outputs - mask["num_missing"]
        if self.solver == "auto" and num_observed > self.cholesky_limit:
            return "cg"
        return "cholesky"

    @property
    def uses_kronecker(self) -> bool:
        """Whether the training data go through the Kronecker path (class notes)."""
        return self._path(self._own_mask) == "kronecker"

    @property
    def uses_cg(self) -> bool:
        """Whether the training data go through conjugate gradients (class notes)."""
        return self._path(self._own_mask) == "cg"

    @property
    def cg_info(self):
        """The last CG objective's statistics (iterations, worst relative residual, standard
        errors of the log-determinant and the LML estimates), or None."""
        return self._cg_last

    @property
    def blas_pool(self) -> str:
        """The BLAS pool of the training data's path (:func:`gpnum.backend.blas_pool`): NumPy's
        for conjugate gradients (their products are NumPy's ``@``), SciPy's otherwise (the
        factorisations, LAPACK ``?syevd`` and ``?potrf``, and large products)."""
        return "numpy" if self.uses_cg else "scipy"

    @property
    def uses_independent(self) -> bool:
        """Whether the outputs are independent (:class:`~gpnum.kernels.IndependentOutputs`,
        ``solver="auto"``): then one factorisation per output on its observed rows."""
        return self.solver == "auto" and isinstance(self.kernel, IndependentOutputs)

    @property
    def Y(self):
        """The training targets, (n, t), NaN where missing."""
        return self._y

    def config(self) -> dict:
        """``{"jitter": float, "solver": str}``, and ``"cg_options"`` (a dict) with
        ``solver="cg"`` or options other than the defaults: with :meth:`data`, the kernel, the
        likelihood and :meth:`parameters` they rebuild the model (:meth:`from_config`)."""
        out = {"jitter": self.jitter, "solver": self.solver}
        if self.solver == "cg" or self.cg_options != CGOptions():
            out["cg_options"] = self.cg_options.to_dict()
        return out

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        return cls(kernel, likelihood, data["X"], data["y"], **cls._own_init_args(params),
                   jitter=config["jitter"], solver=config.get("solver", "auto"),
                   cg_options=config.get("cg_options"))

    def check_data(self, X, y):
        """Validate and convert training data once (:func:`gpnum.fit` does).

        ``X`` (n, d) and ``y`` (n, t) must have the training data's shapes (a full-batch
        model); ``y`` may hold NaN (missing entries), not Inf.
        """
        X = X if X is self._X else self._check_like(X, self._X, "X")
        if y is not self._y:
            y = asarray(y, dtype=self.dtype, xp=self.xp, device=self._device)
            if tuple(y.shape) != tuple(self._y.shape):
                raise ShapeError(f"y: expected shape {describe_shape(self._y.shape)} (the "
                                 f"training data's), got {describe_shape(y.shape)}")
            self._check_targets(y, "y")
        return X, y

    # ------------------------------------------------------------------ the objective
    def _noise(self):
        """Per-output noise variances plus jitter, float64 (t,)."""
        xp = self.xp
        s2 = xp.astype(self.likelihood.variance, xp.float64, copy=False) + self.jitter
        return xp.ones(self.num_outputs, dtype=xp.float64, device=self._device) * s2

    def _residual(self, Y):
        xp = self.xp
        return (xp.astype(Y, xp.float64, copy=False)
                - xp.astype(self.mean, xp.float64, copy=False)[None, :])

    def _lml(self, X, Y, need_grad):
        mask = self._own_mask if Y is self._y else self._mask(Y)
        path = self._path(mask)
        if path == "kronecker":
            return self._lml_kronecker(X, Y, need_grad)
        if path == "independent":
            return independent_lml(self, X, Y, need_grad)
        if path == "cg":
            return cg_lml(self, X, Y, mask, need_grad)
        return self._lml_cholesky(X, Y, mask, need_grad)

    def _lml_kronecker(self, X, Y, need_grad):
        xp = self.xp
        high = xp.float64
        if need_grad:
            grams, coregion, vjp = self.kernel.grams_and_vjp(X)
        else:
            grams, coregion, vjp = [self.kernel.kernel(X)], self.kernel.coregion_matrices(), None
        K = xp.astype(grams[0], high, copy=False)
        B = xp.astype(coregion[0], high, copy=False)
        # the LML and its gradient need K's eigenvectors above its rounding level only
        factors = self._factors(K, B, subset=True)
        value, g = kronecker_lml(factors, self._residual(Y), K, B, need_grad)
        value = self._scalar(value)
        if not need_grad:
            return value, None
        params = vjp([xp.astype(g["K"], self.dtype, copy=False)],
                     [xp.astype(g["B"], self.dtype, copy=False)])
        return value, self._pack(g["mean"], params, g["noise"])

    def _factors(self, K, B, subset=False):
        # K and B are formed in the working dtype: their round-off, not float64's, bounds how
        # far below zero a PSD matrix's computed eigenvalues may fall.
        eps = float(self.xp.finfo(self.dtype).eps)
        rtol = max(1e-8, 10.0 * max(K.shape[0], B.shape[0]) * eps)
        try:
            return kronecker_factors(K, B, self._noise(), rtol, subset=subset)
        except NotPSDError as exc:
            raise self._not_psd("the noise-scaled Kronecker factors", exc) from None

    def _joint_cholesky(self, grams, coregion, mask):
        """Lower Cholesky factor of ``Sigma`` on the observed entries (float64)."""
        xp = self.xp
        high = xp.float64
        n = grams[0].shape[0]
        S = self.kernel.kron_sum([xp.astype(K, high, copy=False) for K in grams],
                     [xp.astype(B, high, copy=False) for B in coregion])
        noise = xp.reshape(xp.ones((n, 1), dtype=high, device=self._device)
                           * self._noise()[None, :], (-1,))
        S = S + xp.eye(S.shape[0], dtype=high, device=self._device) * noise[None, :]
        if mask["index"] is not None:
            S = xp.take(xp.take(S, mask["index"], axis=0), mask["index"], axis=1)
        try:
            return cholesky(S, what="MultiOutputGPR's joint covariance of the observed entries")
        except NotPSDError as exc:
            raise self._not_psd(f"the joint covariance of the {S.shape[0]} observed entries",
                                exc) from None

    def _observed(self, v, mask):
        """Entries of ``vec(v)`` (v: (n, t)) at the observed positions."""
        flat = self.xp.reshape(v, (-1,))
        return flat if mask["index"] is None else self.xp.take(flat, mask["index"], axis=0)

    def _scatter(self, v, mask, *, matrix=False):
        """Observed-entry vector (N_o,) or matrix (N_o, N_o) back to all n t entries, zero at
        the missing ones."""
        xp = self.xp
        if mask["index"] is None:
            return v
        pos = mask["position"]
        zero = xp.zeros((1,) + tuple(v.shape[1:]), dtype=v.dtype, device=self._device)
        padded = xp.concat([v, zero], axis=0)
        if not matrix:
            return xp.take(padded, pos, axis=0)
        padded = xp.concat([padded, xp.zeros((padded.shape[0], 1), dtype=v.dtype,
                                             device=self._device)], axis=1)
        return xp.take(xp.take(padded, pos, axis=0), pos, axis=1)

    def _lml_cholesky(self, X, Y, mask, need_grad):
        xp = self.xp
        high = xp.float64
        n, t = Y.shape
        if need_grad:
            grams, coregion, vjp = self.kernel.grams_and_vjp(X)
        else:
            grams = [k(X) for k in self.kernel.latent_kernels]
            coregion, vjp = self.kernel.coregion_matrices(), None
        L = self._joint_cholesky(grams, coregion, mask)
        r = self._observed(self._residual(Y), mask)
        w = solve_triangular(L, r, lower=True)
        value = self._scalar(-0.5 * xp.sum(w * w) - xp.sum(xp.log(xp.linalg.diagonal(L)))
                             - 0.5 * r.shape[0] * _LOG_2PI)
        if not need_grad:
            return value, None
        alpha = solve_triangular(L, w, lower=True, trans=True)
        # R&W (5.9): Sigma_bar = 1/2 (alpha alpha^T - Sigma^{-1}) on the observed entries; the
        # missing ones do not enter the likelihood, so their rows and columns are zero.
        S_bar = 0.5 * (alpha[:, None] * alpha[None, :] - cho_inverse(L))
        S_bar = self._scatter(S_bar, mask, matrix=True)
        alpha = xp.reshape(self._scatter(alpha, mask), (n, t))
        dK, dB = self.kernel.kron_sum_vjp(S_bar, [xp.astype(K, high, copy=False) for K in grams],
                              [xp.astype(B, high, copy=False) for B in coregion])
        params = vjp([xp.astype(G, self.dtype, copy=False) for G in dK],
                     [xp.astype(G, self.dtype, copy=False) for G in dB])
        g_noise = xp.sum(xp.reshape(xp.linalg.diagonal(S_bar), (n, t)), axis=0)
        return value, self._pack(xp.sum(alpha, axis=0), params, g_noise)

    def _pack(self, g_mean, g_kernel, g_noise):
        xp = self.xp
        grads = {"mean": self._shaped(g_mean, (self.num_outputs,))}
        shapes = self.kernel.parameters()
        grads.update({f"kernel.{k}": self._shaped(v, shapes[k].shape)
                      for k, v in g_kernel.items()})
        var = self.likelihood.variance
        if var.ndim == 0:
            g_noise = xp.sum(g_noise)
        grads["likelihood.variance"] = self._shaped(g_noise, var.shape)
        return grads

    def _objective_and_grad(self, X, y):
        return self._lml(X, y, True)

    def log_marginal_likelihood(self):
        """``log p(Y_observed | X)`` under the current parameters, a 0-d array."""
        with blas_pool(self.blas_pool):
            return self._lml(self._X, self._y, False)[0]

    def log_marginal_likelihood_and_grad(self):
        """:meth:`log_marginal_likelihood` and its gradients keyed like :meth:`parameters`."""
        with blas_pool(self.blas_pool):
            return self._lml(self._X, self._y, True)

    # ------------------------------------------------------------------ predictions
    def _prediction_state(self):
        xp = self.xp
        high = xp.float64
        if self.uses_kronecker:
            K = xp.astype(self.kernel.kernel(self._X), high, copy=False)
            B = xp.astype(self.kernel.coregion_matrices()[0], high, copy=False)
            factors = self._factors(K, B)
            _, g = kronecker_lml(factors, self._residual(self._y), K, B, False, alpha=True)
            return {"factors": factors, "A": g["A"], "B": B}
        if self.uses_independent:
            return independent_state(self)
        if self.uses_cg:
            return cg_prediction_state(self)
        mask = self._own_mask
        grams = [k(self._X) for k in self.kernel.latent_kernels]
        coregion = self.kernel.coregion_matrices()
        L = self._joint_cholesky(grams, coregion, mask)
        r = self._observed(self._residual(self._y), mask)
        alpha = solve_triangular(L, solve_triangular(L, r, lower=True), lower=True, trans=True)
        return {"L": L, "alpha": alpha, "mask": mask,
                "coregion": [xp.astype(B, high, copy=False) for B in coregion]}

    def _predict_block(self, Xnew, state, how):
        """Mean (m, t) and, by ``how``: variances (m, t), output covariances (m, t, t) or the
        joint covariance (m t, m t)."""
        xp = self.xp
        high = xp.float64
        m, t = Xnew.shape[0], self.num_outputs
        mean0 = xp.astype(self.mean, high, copy=False)[None, :]
        if "factors" in state:
            Ks = xp.astype(self.kernel.kernel(Xnew, self._X), high, copy=False)
            if how == "full":
                prior = xp.astype(self.kernel.kernel(Xnew), high, copy=False)
            else:
                prior = xp.astype(self.kernel.kernel.diag(Xnew), high, copy=False)
            mean, cov = kronecker_predict(state["factors"], state["A"], state["B"], Ks, prior,
                                          how)
            return mean0 + mean, cov
        if "independent" in state:
            return independent_predict(self, Xnew, state, how)
        if "cg" in state:
            return cg_predict_block(self, Xnew, state, how)
        coregion = state["coregion"]
        cross = self.kernel.kron_sum([xp.astype(k(Xnew, self._X), high, copy=False)
                          for k in self.kernel.latent_kernels], coregion)       # (m t, n t)
        if state["mask"]["index"] is not None:
            cross = xp.take(cross, state["mask"]["index"], axis=1)
        mean = mean0 + xp.reshape(cross @ state["alpha"], (m, t))
        V = solve_triangular(state["L"], cross.T, lower=True)                  # (N_o, m t)
        if how == "full":
            prior = self.kernel.kron_sum([xp.astype(k(Xnew), high, copy=False)
                              for k in self.kernel.latent_kernels], coregion)
            return mean, prior - V.T @ V
        diags = [xp.astype(k.diag(Xnew), high, copy=False) for k in self.kernel.latent_kernels]
        if how == "var":
            prior = sum(d[:, None] * xp.linalg.diagonal(B)[None, :]
                        for d, B in zip(diags, coregion, strict=True))
            return mean, prior - xp.reshape(xp.sum(V * V, axis=0), (m, t))
        prior = sum(d[:, None, None] * B[None, :, :] for d, B in zip(diags, coregion, strict=True))
        V3 = xp.reshape(V, (V.shape[0], m, t))
        reduction = xp.matmul(xp.permute_dims(V3, (1, 2, 0)), xp.permute_dims(V3, (1, 0, 2)))
        return mean, prior - reduction

    def predict_f(self, Xnew, full_cov=False, full_output_cov=False):
        """Posterior mean and (co)variance of every output at ``Xnew``.

        Parameters
        ----------
        Xnew : array (m, d)
        full_cov : bool
            Return the joint covariance of all outputs at all of ``Xnew``, (m t, m t),
            ordered input-major (row ``i * t + a``: output ``a`` at ``Xnew[i]``).
        full_output_cov : bool
            Return the (t, t) covariance between the outputs at each input, (m, t, t).

        Returns
        -------
        mean : array (m, t)
        var : array (m, t); or cov (m, t, t) with ``full_output_cov``; or cov (m t, m t)
            with ``full_cov``.
        """
        if full_cov and full_output_cov:
            raise ValueError("full_cov and full_output_cov: choose one")
        how = "full" if full_cov else "output" if full_output_cov else "var"
        with blas_pool(self.blas_pool):
            return self._predict_f(Xnew, how)

    def _predict_f(self, Xnew, how):
        xp = self.xp
        Xnew = self._check_new(Xnew)
        state = self._prediction_state()
        if how == "full":
            mean, cov = self._predict_block(Xnew, state, how)
            cov = 0.5 * (cov + cov.T)
        else:
            m = Xnew.shape[0]
            step = max(1, self._predict_chunk // self.num_outputs)
            if "cg" in state:
                # a chunk's (m t, n t) cross-covariance: at most 2^25 entries (256 MiB)
                step = max(1, min(step, 2 ** 25 // (self._X.shape[0] * self.num_outputs ** 2)))
            parts = [self._predict_block(Xnew[s:min(s + step, m), :], state, how)
                     for s in range(0, m, step)]
            mean = xp.concat([p[0] for p in parts], axis=0)
            cov = xp.concat([p[1] for p in parts], axis=0)
            if how == "var":
                # round-off can take a variance that is ~0 in exact arithmetic below zero
                floor = 1e-12 if self.dtype == xp.float64 else 1e-6
                cov = xp.where(cov > floor, cov, floor)
            else:
                cov = 0.5 * (cov + xp.permute_dims(cov, (0, 2, 1)))
        return (xp.astype(mean, self.dtype, copy=False), xp.astype(cov, self.dtype, copy=False))

    def predict_y(self, Xnew, full_cov=False, full_output_cov=False):
        """:meth:`predict_f` with each output's noise variance added: the predictive
        distribution of new observations (same shapes)."""
        xp = self.xp
        mean, cov = self.predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
        s2 = xp.astype(self._noise() - self.jitter, self.dtype, copy=False)
        if full_cov:
            m = mean.shape[0]
            noise = xp.reshape(xp.ones((m, 1), dtype=self.dtype, device=self._device)
                               * s2[None, :], (-1,))
            return mean, cov + xp.eye(cov.shape[0], dtype=self.dtype,
                                      device=self._device) * noise[None, :]
        if full_output_cov:
            eye = xp.eye(self.num_outputs, dtype=self.dtype, device=self._device)
            return mean, cov + (eye * s2[None, :])[None, :, :]
        return mean, cov + s2[None, :]

    def log_predictive_density(self, Xnew, Ynew):
        """Per-entry ``log N(Ynew[i, a]; mean[i, a], var[i, a] + sigma_a^2)``, shape (m, t),
        NaN where ``Ynew`` is NaN (not observed): average the finite entries for a test NLL."""
        xp = self.xp
        Xnew = self._check_new(Xnew)
        Ynew = asarray(Ynew, dtype=self.dtype, xp=xp, device=self._device)
        if tuple(Ynew.shape) != (Xnew.shape[0], self.num_outputs):
            raise ShapeError(f"Ynew: expected shape ({Xnew.shape[0]}, {self.num_outputs}), got "
                             f"{describe_shape(Ynew.shape)}")
        mean, var = self.predict_y(Xnew)
        r = Ynew - mean
        return -0.5 * (_LOG_2PI + xp.log(var)) - 0.5 * (r * r) / var
