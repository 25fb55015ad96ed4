"""Exact Gaussian process regression (GPR) with a learned constant mean.

Rasmussen & Williams (2006), "Gaussian Processes for Machine Learning", chapter 2 (algorithm 2.1:
prediction and the log marginal likelihood through one Cholesky factorisation) and section 5.4.1
(the gradient of the log marginal likelihood w.r.t. the hyper-parameters).

With ``K_y = K_XX + sigma^2 I`` (plus an optional fixed jitter), ``L L^T = K_y``, residual
``r = y - c`` and ``alpha = K_y^{-1} r``:

    log p(y | X) = -1/2 r^T alpha - sum_i log L_ii - n/2 log(2 pi),
    d log p / d K_y = 1/2 (alpha alpha^T - K_y^{-1})     (=: K_bar, symmetric),

so the kernel's parameters get ``kernel.gram_vjp(K_bar, X)``, the noise variance ``tr(K_bar)``
and the constant mean ``sum(alpha)``. Cost: O(n^3) time, O(n^2) memory.
"""

from __future__ import annotations

import math

from gpnum.backend import (
    blas_pool,
    cho_inverse,
    cho_solve,
    cholesky,
    default_rng,
    matmul,
    solve_triangular,
)
from gpnum.errors import NotPSDError, ShapeError, describe_shape
from gpnum.models import _gpr_cg, _gpr_grid, _gpr_ski, _gpr_state_space
from gpnum.models._composite import FullBatchGaussianModel
from gpnum.models._gpr_cg import CGOptions

__all__ = ["GPR"]

_LOG_2PI = math.log(2.0 * math.pi)


class GPR(FullBatchGaussianModel):
    """Exact GP regression: ``y = f(X) + eps``, ``f ~ GP(c, k)``, ``eps ~ N(0, sigma^2 I)``.

    Parameters
    ----------
    kernel : gpnum.kernels.Kernel
        Covariance function ``k`` (its parameters are learned).
    likelihood : gpnum.likelihoods.Gaussian
        Gaussian observation noise; its ``variance`` ``sigma^2`` is learned. Any other
        likelihood raises ``TypeError`` (exact inference needs Gaussian noise: use SVGP).
    X : array (n, d)
        Training inputs, n >= 1. Their namespace, device and floating dtype become the model's;
        the kernel and the likelihood must share them.
    y : array (n,)
        Training targets.
    mean : float or array ()
        Initial constant prior mean ``c`` (learned).
    jitter : float, optional
        Fixed value added to the diagonal of ``K_y`` on top of the noise variance (default 0).
        If the Cholesky factorisation still fails, it is retried with growing extra jitter
        (:func:`gpnum.backend.cholesky`) before :class:`gpnum.NotPSDError` is raised.
    solver : {"cholesky", "cg", "state_space", "grid", "ski", "auto"}
        ``"cholesky"`` (default): exact, O(n^3) time and O(n^2) memory. ``"cg"``: Gardner et
        al. (2018)'s BBMM -- batched preconditioned conjugate gradients, a stochastic Lanczos
        log-determinant and Hutchinson trace, the kernel matrix formed once per step where it fits
        in memory, else its products in blocks (O(n) memory),
        LOVE variances; the log marginal likelihood and its gradient are then **stochastic**
        estimates (seeded by ``cg_options.seed``, so repeated calls agree; the standard error
        of the last estimate is in :attr:`cg_info`). ``"state_space"``: one input column
        (time) and a kernel with an exact state-space form (Matern-1/2, 3/2, 5/2, Cosine,
        SHO, Constant, PeriodicSeries, their sums and products:
        :func:`gpnum.kernels.state_space_form`), or several series sharing it (kernel
        ``k_t * SameGroup(active_dims=[j])``, ``X = [time, ..., label]``); exact, O(n) time
        and memory by a blocked
        Kalman filter (its gradient by a reverse pass) and a parallel smoother
        (``predict_f(full_cov=True)`` costs O(n m) for m new inputs; docs/timeseries.md). ``"auto"``: state space for such
        kernels (one column, or several series) above ``AUTO_STATE_SPACE_MIN_N`` points; otherwise Cholesky up
        to ``AUTO_CHOLESKY_MAX_N`` points when its ``n x n`` matrices fit in
        ``cg_options.dense_limit_mib`` (by default a quarter of the available memory), CG
        beyond. See docs/exact-gp.md. ``"grid"``: inputs
        on the cells of a Cartesian grid, possibly incomplete: exact through the Kronecker
        eigendecomposition on a complete grid with a product kernel over separate axes, else
        BBMM on the observed cells of the grid's Toeplitz or Kronecker operator. ``"ski"``:
        structured kernel interpolation for scattered inputs with d <= 3. See
        docs/structure.md.
    cg_options : dict or CGOptions, optional
        Settings of the CG solver (probes, preconditioner rank, tolerances, memory budget):
        :class:`gpnum.models.CGOptions`; also used by ``"grid"`` and ``"ski"``.
    grid_size : int or sequence of ints, optional
        ``solver="ski"``: interpolation grid points per input column (default about n in all).

    Attributes
    ----------
    mean : array ()
    X, y : arrays (n, d), (n,)
        The training data (read-only).
    full_batch : bool
        True: :meth:`objective_and_grad` needs the whole data set.

    Notes
    -----
    Parameters are reported as a flat dict (:meth:`parameters`): ``mean``, ``kernel.<name>``,
    ``likelihood.variance``.

    float32: as in SVGP's Cholesky whitening, the kernel matrices are formed (and
    back-propagated) in the working dtype, but the factorisation of ``K_y``, the solves and
    the products run in float64 and the results are cast back: with a small noise variance
    ``K_y`` is too ill-conditioned for a float32 Cholesky factor to keep many digits.

    References
    ----------
    Rasmussen, C. E. & Williams, C. K. I. (2006). Gaussian Processes for Machine Learning,
    MIT Press, sections 2.2-2.3 (algorithm 2.1) and 5.4.1.
    """

    _param_names = ("mean",)
    _positive = ()
    _default_jitter = 0.0
    AUTO_CHOLESKY_MAX_N = 6000
    #: ``solver="auto"`` takes the state-space path above this many points (one input
    #: column, a kernel with a state-space form, or several such series): where it overtakes Cholesky (LML and
    #: gradient, docs/timeseries.md).
    AUTO_STATE_SPACE_MIN_N = 150
    #: What :meth:`objective_and_grad` returns, for progress displays: the log marginal
    #: likelihood, not an ELBO.
    objective_name = "lml"
    _factorisation_hint = ("start from a larger noise variance or pass a fixed jitter "
                           "(GPR(..., jitter=...)); duplicated rows of X need a noise variance "
                           "well above 0")

    #: The values of ``solver``.
    SOLVERS = ("cholesky", "cg", "state_space", "grid", "ski", "auto")

    def __init__(self, kernel, likelihood, X, y, *, mean=0.0, jitter=None, solver="cholesky",
                 cg_options=None, grid_size=None):
        self._setup(kernel, likelihood, X, y, mean, jitter)
        if solver not in self.SOLVERS:
            raise ValueError(f"solver: expected one of {', '.join(map(repr, self.SOLVERS))}, "
                             f"got {solver!r}")
        if solver == "state_space":
            _gpr_state_space.check_state_space(kernel, self._X)
        self.grid_size = _gpr_grid.check_solver(self, solver, grid_size)
        self.solver = solver
        self.cg_options = CGOptions.coerce(cg_options)
        self._cg_last = None
        self._cg_predict_last = None

    # ------------------------------------------------------------------ solver dispatch
    @property
    def blas_pool(self) -> str:
        """NumPy's BLAS pool for the CG and state-space paths (their Krylov solvers and
        batched recursions run there), else SciPy's (the Cholesky path's LAPACK)."""
        return ("numpy" if self.uses_cg or self.uses_state_space or _gpr_grid.structured(self)
                else "scipy")

    @property
    def split_rows(self) -> bool:
        """Whether the training objective's BLAS block splits rows
        (``gpnum.backend.blas_pool(..., split_rows=True)``): for ``solver="ski"``, whose
        time goes to the sparse interpolation products and CG's vector work, memory-bound
        passes that gpnum splits over ``GPNUM_BLAS_THREADS`` threads itself, with the BLAS
        pools at one thread."""
        return self.solver == "ski"

    @property
    def uses_state_space(self) -> bool:
        """Whether the state-space (Kalman) path is in use (``solver`` resolved for ``n``)."""
        if self.solver == "auto":
            return (self._X.shape[0] > self.AUTO_STATE_SPACE_MIN_N
                    and _gpr_state_space.applies(self.kernel, self._X))
        return self.solver == "state_space"

    @property
    def uses_cg(self) -> bool:
        """Whether the conjugate-gradient path is in use (``solver`` resolved for ``n``)."""
        if self.uses_state_space:
            return False
        if self.solver == "auto":
            n = self._X.shape[0]
            fits = _gpr_cg.dense_fits(n, self.cg_options, self.xp, self.device)
            return not (n <= self.AUTO_CHOLESKY_MAX_N and fits)
        return self.solver == "cg"

    @property
    def cg_info(self):
        """Diagnostics of the last CG evaluation of the objective (None before one):
        ``num_iter``, ``relative_residual`` (worst column), ``logdet_std_error`` and
        ``lml_std_error`` (standard errors of the stochastic estimates over the probes)."""
        return self._cg_last

    @property
    def cg_predict_info(self):
        """Diagnostics of the last CG prediction solve (None before one): ``num_iter``,
        ``relative_residual``, the tolerance ``rtol`` it was run to, ``precond_rank`` and
        ``variance_check`` (the worst relative error of LOVE's predictive variance at the
        checked training inputs, None when ``cg_options.variance_checks`` is 0)."""
        return self._cg_predict_last

    def config(self) -> dict:
        """:meth:`FullBatchGaussianModel.config` plus, for a solver other than the default
        Cholesky, ``solver`` and ``cg_options``."""
        out = super().config()
        if self.solver != "cholesky":
            out["solver"] = self.solver
            out["cg_options"] = self.cg_options.to_dict()
        if self.solver == "ski":
            out["grid_size"] = self.grid_size
        return out

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        return cls(kernel, likelihood, data["X"], data["y"], **cls._own_init_args(params),
                   jitter=config["jitter"], solver=config.get("solver", "cholesky"),
                   cg_options=config.get("cg_options"), grid_size=config.get("grid_size"))

    # ------------------------------------------------------------------ forward pieces
    def _factor(self, X, y, need_vjp):
        """Factors of ``K_y = K_XX + (sigma^2 + jitter) I``, in float64 (class notes).

        Returns ``(L, resid, vjp)``: the lower Cholesky factor of ``K_y``, ``y - c`` and the
        gram's backward function (None unless ``need_vjp``).
        """
        xp = self.xp
        high = xp.float64
        n = X.shape[0]
        if need_vjp:
            K, vjp = self.kernel.gram_and_vjp(X)
        else:
            K, vjp = self.kernel(X), None
        # The noise variance goes in as the factorisation's shift: the Cholesky works on its own
        # copy (the gram's backward pass may read K, which must stay unmodified), and no
        # (n, n) identity or sum is formed.
        noise = float(self.likelihood.variance)
        try:
            L = cholesky(xp.astype(K, high, copy=False), shift=noise + self.jitter,
                         what="GPR's K + noise variance I")
        except NotPSDError as exc:
            raise self._not_psd(f"K + noise variance I (n = {n}, noise variance "
                                f"{float(self.likelihood.variance):.3g})", exc) from None
        resid = xp.astype(y, high, copy=False) - xp.astype(self.mean, high, copy=False)
        return L, resid, vjp

    def _lml(self, X, y, need_grad):
        """Log marginal likelihood on (X, y) and, if ``need_grad``, its gradients."""
        if self.uses_state_space:
            return _gpr_state_space.lml(self, X, y, need_grad)
        if _gpr_grid.structured(self):
            return _gpr_grid.lml(self, X, y, need_grad)
        if self.uses_cg:
            return _gpr_cg.lml(self, X, y, need_grad)
        xp = self.xp
        n = X.shape[0]
        L, resid, vjp = self._factor(X, y, need_grad)
        w = solve_triangular(L, resid, lower=True)  # L^{-1} r: r^T K_y^{-1} r = |w|^2
        value = self._scalar(-0.5 * xp.sum(w * w) - xp.sum(xp.log(xp.linalg.diagonal(L)))
                             - 0.5 * n * _LOG_2PI)
        if not need_grad:
            return value, None
        alpha = solve_triangular(L, w, lower=True, trans=True)  # K_y^{-1} r
        K_bar = cho_inverse(L)  # K_y^{-1}, overwritten below
        # dK_y/d sigma^2 = I: the trace of K_bar.
        g_noise = 0.5 * (xp.sum(alpha * alpha) - xp.sum(xp.linalg.diagonal(K_bar)))
        # R&W (5.9): d/dtheta log p = 1/2 tr((alpha alpha^T - K_y^{-1}) dK_y/dtheta), formed in
        # the new array cho_inverse returned (one (n, n) temporary, the outer product)
        K_bar *= -0.5
        K_bar += (0.5 * alpha)[:, None] * alpha[None, :]
        g_kernel = vjp.params(xp.astype(K_bar, self.dtype, copy=False))
        return value, self._pack_grads(alpha, g_kernel, g_noise)

    def _pack_grads(self, alpha, g_kernel, g_noise):
        """The LML's gradients keyed like :meth:`parameters`: the constant mean's is
        ``sum(alpha)`` with ``alpha = K_y^{-1} (y - c)``; the kernel's and the noise's as given
        (Cholesky and CG paths alike)."""
        grads = {"mean": self._scalar(self.xp.sum(alpha))}
        kernel_params = self.kernel.parameters()
        grads.update({f"kernel.{k}": self._shaped(v, kernel_params[k].shape)
                      for k, v in g_kernel.items()})
        grads["likelihood.variance"] = self._shaped(g_noise, self.likelihood.variance.shape)
        return grads

    # ------------------------------------------------------------------ public API
    def log_marginal_likelihood(self):
        """``log p(y | X)`` under the current parameters (R&W 2006, eq. 2.30), a 0-d array."""
        with blas_pool(self.blas_pool, split_rows=self.split_rows):
            return self._lml(self._X, self._y, False)[0]

    def log_marginal_likelihood_and_grad(self):
        """:meth:`log_marginal_likelihood` and its gradients (R&W 2006, eq. 5.9).

        Returns
        -------
        value : 0-d array
        grads : dict
            Keyed like :meth:`parameters` (``mean``, ``kernel.<name>``,
            ``likelihood.variance``), natural form, each shaped like its parameter.
        """
        with blas_pool(self.blas_pool, split_rows=self.split_rows):
            return self._lml(self._X, self._y, True)

    def _objective_and_grad(self, X, y):
        return self._lml(X, y, True)

    def cg_objective_and_grad(self, kernel_operator, need_grad=True):
        """The CG path's log marginal likelihood (and gradients) on the training data, with
        the products ``K_XX @ V`` and the kernel's ``param_vjp`` taken from
        ``kernel_operator`` instead of the model's own (in-memory) one: the seam through
        which :func:`gpnum.distributed.objective_and_grad` computes the kernel row blocks on
        Dask workers.

        Parameters
        ----------
        kernel_operator : gpnum.linalg.LinearOperator (n, n), float64
            ``K_XX`` for the current kernel parameters, with ``diagonal()``, ``columns()`` (the
            pivoted-Cholesky preconditioner) and ``param_vjp(U, V)`` returning
            ``{"kernel": {name: grad}}`` (as :class:`gpnum.linalg.KernelMatrix`).
        need_grad : bool

        Returns
        -------
        value : 0-d array
        grads : dict or None
            As :meth:`log_marginal_likelihood_and_grad`; same probes (``cg_options.seed``),
            so the same numbers as the in-memory CG path up to the order of the sums.
        """
        if not self.uses_cg:
            raise ValueError(f"cg_objective_and_grad: the model's solver resolves to Cholesky "
                             f"(solver={self.solver!r}, n = {self._X.shape[0]}); construct it "
                             f"with solver='cg'")
        n = self._X.shape[0]
        if tuple(kernel_operator.shape) != (n, n):
            raise ShapeError(f"kernel_operator: expected shape ({n}, {n}) (the training data's), "
                             f"got {describe_shape(kernel_operator.shape)}")
        return _gpr_cg.lml(self, self._X, self._y, need_grad, operator=kernel_operator)

    def sample_f(self, X, num_samples, seed, *, jitter=None, rtol=None):
        """Joint samples of the latent function at ``X`` from the exact posterior.

        By pathwise conditioning (Matheron's rule; Wilson et al. 2020, "Efficiently sampling
        functions from Gaussian process posteriors"): a joint prior draw ``(f_X + e, f_*)``
        with covariance ``K([X_train; X]) + diag(sigma^2 + model jitter, ..., j, ...)``
        (the training rows carry the observation noise ``e``, the new rows a small jitter
        ``j``), then

            f_*|y = c + f_* + K_*X K_y^{-1} (y - c - f_X - e),

        exactly distributed as the posterior (up to ``j``), whichever solver:

        - ``solver="cholesky"``: the prior draw through a float64 Cholesky factor of the
          (n + m) x (n + m) joint covariance and the solve through the model's factor of
          ``K_y``: O((n + m)^3), for n + m up to a few thousand.
        - ``solver="cg"``: no factorisation. The prior draw by contour integral quadrature
          (:func:`gpnum.ciq.sqrt_matmul`) on a lazy kernel matrix over ``[X_train; X]``, the
          solve by the model's preconditioned CG against all samples at once, both at
          ``cg_options.predict_rtol`` and kernel products in row blocks: memory
          O((n + m) num_samples) beyond the blocks. Accurate to that tolerance.
        - ``solver="state_space"``: the prior draw by the state-space recursion over the
          sorted training and new inputs, the solve by one Kalman smoother pass for all
          samples: O((n + m) J^3 num_samples), exact; ``jitter`` defaults to 0 there.
        - ``solver="ski"`` (new points inside the training inputs' range): samples of the SKI
          GP, the prior draw ``[W; W_*] K_UU^{1/2} z`` by circulant embedding of ``K_UU``
          (O(m log m) a sample), the solve by PCG, the update through the interpolation
          (gpnum/models/_gpr_ski.py). ``solver="grid"`` (new points on cells of the grid):
          the prior draw over every cell by circulant embedding, the solve exactly (complete
          grid, Kronecker) or by PCG on the observed cells. Otherwise the CG path.

        Parameters
        ----------
        X : array (m, d)
        num_samples : int
        seed : int
            Seed of the standard-normal draws (the same seed gives the same samples).
        jitter : float, optional
            ``j``, the variance added to the prior draw at the new points (their kernel matrix
            may be singular, as CIQ and Cholesky need it not to be). Default ``1e-8`` times
            the largest prior variance at ``X``; the samples then carry this much extra
            white noise.
        rtol : float, optional
            ``solver="cg"`` only: the relative tolerance of the CIQ draw and of the CG solve
            (default ``cg_options.predict_rtol``; when that is None, 0.01 scaled down by the
            noise-to-signal amplitude ratio, see :class:`gpnum.models.CGOptions`). The
            samples' error is that of the solves: on a 3-column test problem with n = 300 and
            8,000 draws, ``rtol=0.01`` left
            the sample mean up to 5 Monte Carlo standard errors (0.06 posterior standard
            deviations) from the exact one, 1e-4 within 2.8 (docs/exact-gp.md).

        Returns
        -------
        samples : array (num_samples, m)
        """
        xp = self.xp
        X = self._check_new(X, "X")
        if isinstance(num_samples, bool) or int(num_samples) != num_samples \
                or int(num_samples) < 1:
            raise ValueError(f"num_samples: expected an integer >= 1, got {num_samples!r}")
        num_samples = int(num_samples)
        high = xp.float64
        prior_var = xp.astype(self.kernel.diag(X), high, copy=False)
        jitter_given = jitter
        if jitter is None:
            jitter = 1e-8 * float(xp.max(prior_var))
        jitter = float(jitter)
        if not (jitter >= 0.0 and math.isfinite(jitter)):
            raise ValueError(f"jitter: expected a finite number >= 0, got {jitter!r}")
        n, m = self._X.shape[0], X.shape[0]
        rng = default_rng(seed, xp=xp, device=self._device)
        eps = rng.normal((n + m, num_samples), dtype=high)
        noise = (xp.astype(self.likelihood.variance, high, copy=False) + float(self.jitter))
        diag = xp.concat([xp.ones(n, dtype=high, device=self._device) * noise,
                          xp.full(m, jitter, dtype=high, device=self._device)])
        resid = xp.astype(self._y, high, copy=False) - xp.astype(self.mean, high, copy=False)
        if rtol is not None and not (isinstance(rtol, (int, float)) and rtol > 0.0
                                     and math.isfinite(rtol)):
            raise ValueError(f"rtol: expected a positive number, got {rtol!r}")
        if self.uses_state_space:
            return _gpr_state_space.sample_f(self, X, num_samples, seed,
                                             0.0 if jitter_given is None else jitter)
        rtol = _gpr_cg.predict_rtol(self) if rtol is None else rtol
        draw = None
        if self.solver == "ski" and _gpr_ski.covers(self, X):
            draw = _gpr_ski.sample_f(self, X, eps, diag, resid, rtol, rng)
        elif _gpr_grid.structured(self) == "grid":
            draw = _gpr_grid.sample_f(self, X, eps, diag, resid, rtol, rng)
        if draw is not None:
            pass
        elif self.uses_cg or _gpr_grid.structured(self):
            draw = _gpr_cg.sample_f(self, X, eps, diag, resid, rtol)
        else:
            Xall = xp.concat([self._X, X], axis=0)
            K = xp.astype(self.kernel(Xall), high, copy=False)
            cov = K + xp.eye(n + m, dtype=high, device=self._device) * diag[None, :]
            try:
                L = cholesky(cov, what="GPR.sample_f's joint prior covariance")
            except NotPSDError as exc:
                raise self._not_psd(f"the joint prior covariance of the training and new "
                                    f"points (n + m = {n + m})", exc) from None
            prior = L @ eps                                      # (n + m, k)
            Ly = self._prediction_state()["L"]
            # K_y^{-1} (r - (f_X + e)) for every sample at once through the cached factor.
            V = cho_solve(Ly, resid[:, None] - prior[:n, :])
            draw = prior[n:, :] + K[n:, :n] @ V
        samples = xp.astype(self.mean, high, copy=False) + draw            # (m, k)
        return xp.astype(samples.T, self.dtype, copy=False)

    def _prediction_state(self):
        if self.uses_state_space:
            return _gpr_state_space.prediction_state(self)
        if _gpr_grid.structured(self):
            return _gpr_grid.prediction_state(self)
        if self.uses_cg:
            return _gpr_cg.prediction_state(self)
        L, resid, _ = self._factor(self._X, self._y, False)
        alpha = solve_triangular(L, solve_triangular(L, resid, lower=True), lower=True,
                                 trans=True)
        return {"L": L, "alpha": alpha}

    def _predict(self, Xnew, state, full_cov):
        # R&W algorithm 2.1: mean = c + K_*^T alpha, cov = K_** - V^T V with V = L^{-1} K_*
        # (the products in float64, like the factorisation).
        if self.uses_state_space:
            return _gpr_state_space.predict(self, Xnew, state, full_cov)
        if _gpr_grid.structured(self):
            return _gpr_grid.predict(self, Xnew, state, full_cov)
        if self.uses_cg:
            return _gpr_cg.predict(self, Xnew, state, full_cov)
        xp = self.xp
        high = xp.float64
        Ks = xp.astype(self.kernel(self._X, Xnew), high, copy=False)  # (n, k)
        mean = self.mean + xp.astype(Ks.T @ state["alpha"], self.dtype, copy=False)
        V = solve_triangular(state["L"], Ks, lower=True)
        if full_cov:
            cov = xp.astype(self.kernel(Xnew), high, copy=False) - matmul(V.T, V)
        else:
            cov = xp.astype(self.kernel.diag(Xnew), high, copy=False) - xp.sum(V * V, axis=0)
        return mean, xp.astype(cov, self.dtype, copy=False)
