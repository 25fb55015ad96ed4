"""Generalised variational inference for GPs: Gaussian Wasserstein inference and projected GVI.

J. Wu (2023), "Generalised variational inference for Gaussian processes", MSc thesis, UCL
(after Wild, Hu & Sejdinovic 2022, "Generalized variational inference in function
spaces: Gaussian measures meet Bayesian deep learning"), sections "Improving Gaussian Wasserstein
Inference" and "Projected Generalised Variational Inference". The variational GP
``Q = GP(m_Q, r)`` minimises a regularised empirical risk,

    Q* = argmin_Q  E_Q[sum_n -log p(y_n | f(x_n))] + D(Q, P),

against a regulariser GP ``P = GP(m_P, k)`` that is held fixed ("prior": the prior GP;
"posterior": the exact GP posterior conditioned on responses at the inducing points). On a
minibatch of ``b`` of the ``N`` points the model protocol maximises

    objective = (N / b) sum_{i in batch} E_Q[log p(y_i | f_i)] - D_batch(Q, P),

with ``D_batch`` one of the batch regularisers of :func:`regulariser_and_grad`. Every gradient
is hand-derived (:mod:`gpnum.models._gvi_parts`).
"""

from __future__ import annotations

import math

from gpnum.backend import asarray, cholesky, is_array, solve_triangular
from gpnum.errors import NotPSDError, ShapeError, check_finite, describe_shape
from gpnum.kernels import Kernel
from gpnum.likelihoods import Gaussian
from gpnum.models._composite import ComposedParameters
from gpnum.models._gvi_parts import (
    REGULARISERS,
    VARIATIONAL_KERNELS,
    VARIATIONAL_MEANS,
    fixed_solve,
    make_variational_kernel,
    make_variational_mean,
    needs_full_covariance,
    regulariser_and_grad,
)
from gpnum.models._whitening import CholeskyWhitening

__all__ = ["GVI"]

_MODES = ("prior", "posterior")
_LOG_2PI = math.log(2.0 * math.pi)


def _copy_kernel(kernel):
    """A new kernel of the same class and settings with copies of ``kernel``'s parameters."""
    import copy

    new = copy.copy(kernel)
    new.__dict__ = dict(kernel.__dict__)
    kids = getattr(kernel, "kernels", None)
    if kids is not None:
        new.kernels = [_copy_kernel(k) for k in kids]
    return new


class GVI(ComposedParameters):
    """Generalised variational inference GP: GWI (Wasserstein) and projected GVI.

    Parameters
    ----------
    kernel : gpnum.kernels kernel
        The regulariser's kernel ``k``, held fixed (fit it first: :func:`select_inducing` runs
        Algorithm 2 of Wu 2023). It appears in :meth:`parameters` (so checkpoints keep it) but
        :meth:`objective_and_grad` returns no gradient for it, so :func:`gpnum.fit` leaves it
        alone.
    likelihood : gpnum.likelihoods likelihood
        Observation model of the empirical risk (its parameters are learned): Gaussian,
        Bernoulli, RobustMax, ...
    inducing_points : array (m, d)
        ``Z``, held fixed. Its namespace, device and floating dtype become the model's.
    num_data : int
        ``N``: the risk on a batch of ``b`` points is scaled by ``N / b``.
    divergence : str
        The regulariser ``D(Q, P)`` on a batch (see :func:`gpnum.models._gvi_parts.
        regulariser_and_grad` for the formulas): ``"wasserstein"`` (GWI, Wild et al. 2022),
        ``"squared-difference"``, ``"projected-wasserstein"``, ``"projected-bhattacharyya"``,
        ``"projected-hellinger"`` (squared), ``"projected-kl"`` (``KL(Q||P)``) or
        ``"projected-renyi"`` (``D_alpha(Q||P)``).
    mode : {"prior", "posterior"}
        ``P`` is the prior ``GP(c, k)`` or the exact posterior of ``GP(c, k)`` with Gaussian
        noise ``regulariser_noise`` given ``inducing_targets`` at ``Z`` (Wu 2023, eq.
        "gp-posterior-regulariser").
    variational_kernel : str
        Q's kernel ``r``: ``"svgp-cholesky"``, ``"svgp-diagonal"``, ``"svgp-log-diagonal"``,
        ``"kernelised"``, ``"sparse-posterior"``, ``"fixed-sparse-posterior"`` (Wu 2023,
        "Variational Kernels"; the last three learn a base kernel ``r0``, a copy of ``k`` at
        the start, as ``base_kernel.<name>``).
    variational_mean : {"svgp", "constant", "mlp"}
        Q's mean: ``a(x)^T q_mu``, a constant per latent, or a one-hidden-layer tanh network.
    alpha : float
        Renyi order for ``"projected-renyi"``, in (0, 1) or (1, inf).
    eigen_term : bool
        For ``"wasserstein"``: include the cross term ``-2 tr (Kp^{1/2} Kq Kp^{1/2})^{1/2}``
        (O(b^3) per step). ``False`` is Wu's (2023) cheap variant (O(b)).
    inducing_targets : array (m,) or (m, L), optional
        Responses at ``Z`` for ``mode="posterior"`` (required there).
    regulariser_noise : float, optional
        Noise variance of the posterior regulariser (required for ``mode="posterior"``).
    prior_mean : float
        Constant mean ``c`` of the regulariser GP (0, Wu's (2023) choice, by default).
    jitter : float
        Added to the diagonal of the ``Z`` gram matrices.
    num_latent : int, optional
        Latent functions (default ``likelihood.num_latent``); they share ``r`` (and ``k``)
        but not q's mean or ``S``.
    mlp_hidden : int
        Width of the MLP mean.
    seed : int
        Seed of the MLP mean's initial weights.

    Notes
    -----
    Directions: the projected KL and Renyi regularisers are ``D(Q || P)``; Wasserstein,
    Bhattacharyya, Hellinger and the squared difference are symmetric.

    The prediction :meth:`predict_f` is Q itself. After :meth:`temper`, :meth:`predict_y` and
    :meth:`log_predictive_density` use the tempered predictive of Wu 2023 ("Tempering"):
    ``y ~ N(m_Q, a (r(x, x) + sigma^2))`` for a Gaussian likelihood, ``f_j ~ N(m_Q,j, a_j r(x, x))``
    otherwise.
    """

    _param_names = ("q_mu", "mean_constant", "mlp_w1", "mlp_b1", "mlp_w2", "mlp_b2", "q_sqrt",
                    "q_var", "q_log_var")
    _positive = ("q_var",)
    full_batch = False
    #: What :meth:`objective_and_grad` returns (expected log-likelihood minus a divergence that
    #: need not be a KL), for progress displays.
    objective_name = "objective"

    def __init__(self, kernel, likelihood, inducing_points, *, num_data,
                 divergence="wasserstein", mode="prior", variational_kernel="svgp-cholesky",
                 variational_mean="svgp", alpha=0.5, eigen_term=True, inducing_targets=None,
                 regulariser_noise=None, prior_mean=0.0, jitter=1e-6, num_latent=None,
                 mlp_hidden=32, seed=0):
        if divergence not in REGULARISERS:
            raise ValueError(f"divergence: expected one of {', '.join(REGULARISERS)}, got "
                             f"{divergence!r}")
        if mode not in _MODES:
            raise ValueError(f"mode: expected 'prior' or 'posterior', got {mode!r}")
        if variational_kernel not in VARIATIONAL_KERNELS:
            raise ValueError(f"variational_kernel: expected one of "
                             f"{', '.join(VARIATIONAL_KERNELS)}, got {variational_kernel!r}")
        if variational_mean not in VARIATIONAL_MEANS:
            raise ValueError(f"variational_mean: expected one of {', '.join(VARIATIONAL_MEANS)}, "
                             f"got {variational_mean!r}")
        if is_array(alpha) and getattr(alpha, "ndim", None) == 0:
            alpha = float(alpha)  # a 0-d array: a hyper-parameter, read once
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise TypeError(f"alpha: expected a real number or a 0-d array, got "
                            f"{type(alpha).__name__}")
        alpha = float(alpha)
        if not (0.0 < alpha < math.inf) or alpha == 1.0:
            raise ValueError(f"alpha: the Renyi order must lie in (0, 1) or (1, inf) (alpha = 1 "
                             f"is projected-kl), got {alpha!r}")
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel, got {type(kernel).__name__}")
        Z = self._adopt_inducing_points(inducing_points, kernel)
        self._adopt_num_data(num_data)
        self.kernel = kernel
        self.likelihood = likelihood
        self.inducing_points = Z
        self.divergence = divergence
        self.mode = mode
        self.variational_kernel = variational_kernel
        self.variational_mean = variational_mean
        self.alpha = alpha
        self.eigen_term = bool(eigen_term)
        self.prior_mean = float(prior_mean)
        self.jitter = float(jitter)
        if not self.jitter >= 0.0:
            raise ValueError(f"jitter: expected a number >= 0, got {jitter!r}")
        self.num_latent = int(num_latent if num_latent is not None
                              else getattr(likelihood, "num_latent", 1))
        self.mlp_hidden = int(mlp_hidden)
        self.seed = int(seed)
        self.whitening_strategy = CholeskyWhitening()
        m, d, L = Z.shape[0], Z.shape[1], self.num_latent
        self._vk = make_variational_kernel(variational_kernel)
        self._vm = make_variational_mean(variational_mean, mlp_hidden)
        self._components = (("kernel", "likelihood", "base_kernel") if self._vk.uses_base
                            else ("kernel", "likelihood"))
        if self._vk.uses_base:
            # r0 starts as k (Wu 2023: "initialise the parameters of r0 to be the same").
            self.base_kernel = _copy_kernel(kernel)
        self._vk.init(self, m, L)
        self._vm.init(self, m, L, d, self.seed)
        self._cache = None
        self.temper_scale = self.xp.ones((L,), dtype=self.dtype, device=self._device)
        self.regulariser_noise = None
        self.inducing_targets = None
        if mode == "posterior":
            if inducing_targets is None or regulariser_noise is None:
                raise ValueError("mode='posterior' needs inducing_targets (the responses at Z) "
                                 "and regulariser_noise (the fitted noise variance); see "
                                 "gpnum.models.select_inducing")
            U = asarray(inducing_targets, dtype=self.dtype, xp=self.xp, device=self._device)
            if U.ndim == 1:
                U = U[:, None]
            if U.ndim != 2 or U.shape[0] != m or U.shape[1] not in (1, L):
                raise ShapeError(f"inducing_targets: expected shape ({m},) or ({m}, {L}), got "
                                 f"{describe_shape(tuple(asarray(inducing_targets).shape))}")
            check_finite(self.xp, U, "inducing_targets")
            noise = float(regulariser_noise)
            if not noise > 0.0:
                raise ValueError(f"regulariser_noise: expected a variance > 0, got "
                                 f"{regulariser_noise!r}")
            self.inducing_targets = U
            self.regulariser_noise = noise

    # ------------------------------------------------------------------ parameters
    def _own_names(self):
        return tuple(self._vm.names) + tuple(self._vk.names)

    def _convert_param(self, name, value):
        arr = super()._convert_param(name, value)
        if name == "q_sqrt":
            arr = self.xp.tril(arr)
        return arr

    def parameters(self) -> dict:
        """All parameters in natural form, as one flat dict.

        Keys: q's own (``q_mu`` / ``mean_constant`` / ``mlp_*``, and ``q_sqrt`` / ``q_var`` /
        ``q_log_var``), ``kernel.<name>`` (the regulariser's, held fixed: no gradient),
        ``likelihood.<name>`` and, for the base-kernel variational kernels,
        ``base_kernel.<name>``.
        """
        return super().parameters()

    @property
    def num_inducing(self) -> int:
        return self.inducing_points.shape[0]

    # ------------------------------------------------------------------ persistence
    def config(self) -> dict:
        """Constructor settings (JSON-able); with :meth:`data` they rebuild the model."""
        return {"num_data": self.num_data, "divergence": self.divergence, "mode": self.mode,
                "variational_kernel": self.variational_kernel,
                "variational_mean": self.variational_mean, "alpha": self.alpha,
                "eigen_term": self.eigen_term, "regulariser_noise": self.regulariser_noise,
                "prior_mean": self.prior_mean, "jitter": self.jitter,
                "num_latent": self.num_latent, "mlp_hidden": self.mlp_hidden,
                "seed": self.seed}

    def data(self) -> dict:
        """Arrays that are not learned: ``inducing_points``, ``temper_scale``,
        ``inducing_targets`` (posterior mode) and the base kernel's parameters (checkpoints
        rebuild only the ``kernel`` and ``likelihood`` components themselves)."""
        out = {"inducing_points": self.inducing_points, "temper_scale": self.temper_scale}
        if self.inducing_targets is not None:
            out["inducing_targets"] = self.inducing_targets
        if self._vk.uses_base:
            out.update({f"base_kernel.{k}": v for k, v in self.base_kernel.parameters().items()})
        return out

    @classmethod
    def from_svgp(cls, svgp, likelihood, **options):
        """A GVI whose regulariser ``P`` comes from a trained :class:`gpnum.SVGP`.

        ``P`` takes the SVGP's kernel and inducing points (both held fixed, as GVI holds its
        regulariser) and its constant mean as ``prior_mean``. With ``mode="posterior"`` the
        SVGP also gives the responses at ``Z`` (its predictive mean there) and the regulariser's
        noise (its Gaussian likelihood's variance, floored at 1e-4; 1e-2 for other
        likelihoods). This is the ``--regulariser-fit svgp`` recipe of ``gpnum fit``.

        Parameters
        ----------
        svgp : gpnum.SVGP
            Trained (``gpnum.fit``) on the data GVI will see.
        likelihood : gpnum.likelihoods likelihood
            Q's likelihood, learned by GVI; pass a fresh one (the SVGP's was fitted to the
            SVGP's own q).
        **options
            Any other argument of :class:`GVI` (``divergence``, ``mode``,
            ``variational_kernel``, ...); ``num_data`` defaults to the SVGP's, and explicit
            ``inducing_targets``, ``regulariser_noise`` or ``prior_mean`` win over the SVGP's.

        Returns
        -------
        GVI
        """
        if svgp.num_latent != 1 or svgp.separate_inducing:
            # GVI has one latent function and one set of inducing points
            raise ValueError(
                f"GVI.from_svgp: expected an SVGP with one latent function and one set of "
                f"inducing points, got num_latent={svgp.num_latent}, separate_inducing="
                f"{svgp.separate_inducing} (train the SVGP with a one-latent likelihood)")
        Z = svgp.inducing_points
        options.setdefault("num_data", svgp.num_data)
        options.setdefault("prior_mean", float(svgp.mean))
        if options.get("mode", "prior") == "posterior":
            if "inducing_targets" not in options:
                options["inducing_targets"] = svgp.predict_f(Z)[0]
            if "regulariser_noise" not in options:
                noise = getattr(svgp.likelihood, "variance", None)
                options["regulariser_noise"] = max(1e-2 if noise is None else float(noise),
                                                   1e-4)
        return cls(svgp.kernel, likelihood, Z, **options)

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        """Rebuild a model from :meth:`config`, :meth:`data` and :meth:`parameters` values."""
        model = cls(kernel, likelihood, data["inducing_points"], num_data=config["num_data"],
                    divergence=config["divergence"], mode=config["mode"],
                    variational_kernel=config["variational_kernel"],
                    variational_mean=config["variational_mean"], alpha=config["alpha"],
                    eigen_term=config["eigen_term"],
                    inducing_targets=data.get("inducing_targets"),
                    regulariser_noise=config["regulariser_noise"],
                    prior_mean=config["prior_mean"], jitter=config["jitter"],
                    num_latent=config["num_latent"], mlp_hidden=config["mlp_hidden"],
                    seed=config["seed"])
        base = {k[len("base_kernel."):]: v for k, v in data.items()
                if k.startswith("base_kernel.")}
        if base:
            model.base_kernel.set_parameters(base)
        model.temper_scale = data["temper_scale"]
        return model

    # ------------------------------------------------------------------ checks
    def check_data(self, X, y):
        """Validate and convert training data once (``fit`` then passes ``validate=False``).

        Raises ShapeError / ValueError for wrong shapes, NaN/Inf, targets outside the
        likelihood's support, or more points than ``num_data``.
        """
        return self._check_minibatch_data(X, y)

    # ------------------------------------------------------------------ fixed regulariser pieces
    def _fixed(self):
        """Constant factors of the fixed kernel at ``Z``, recomputed only when ``k`` changes:
        ``L_ZZ`` (chol of ``k(Z, Z) + jitter I``) and, in posterior mode, ``L_P`` (chol of
        ``k(Z, Z) + noise I``) and ``alpha_P = (k(Z, Z) + noise I)^{-1} (U - c)``."""
        # Setting a kernel parameter stores a new array: identity says whether k changed.
        key = tuple(self.kernel.parameters().values())
        if (self._cache is not None and len(self._cache[0]) == len(key)
                and all(a is b for a, b in zip(self._cache[0], key, strict=True))):
            return self._cache[1]
        xp = self.xp
        Z = self.inducing_points
        Kzz = xp.astype(self.kernel(Z), xp.float64, copy=False)
        m = Z.shape[0]
        try:
            out = {"Lzz": cholesky(Kzz, shift=self.jitter, what="GVI's fixed K_ZZ")}
        except NotPSDError as exc:
            raise self._not_psd(f"the fixed regulariser's K_ZZ + jitter I (m = {m}, jitter = "
                                f"{self.jitter:g})", exc) from None
        if self.mode == "posterior":
            try:
                Lp = cholesky(Kzz, shift=self.regulariser_noise)
            except NotPSDError as exc:
                raise self._not_psd(f"the posterior regulariser's K_ZZ + noise I (m = {m}, "
                                    f"noise {self.regulariser_noise:g})", exc) from None
            r = xp.astype(self.inducing_targets, xp.float64, copy=False) - self.prior_mean
            a = solve_triangular(Lp, solve_triangular(Lp, r, lower=True), lower=True, trans=True)
            out["Lp"], out["alpha_p"] = Lp, xp.astype(a, self.dtype, copy=False)
        object.__setattr__(self, "_cache", (key, out))
        return out

    def _whiten_fixed(self, Kzx):
        """``L_ZZ^{-1} Kzx`` with the cached prior factor (no gradient flows into it)."""
        return fixed_solve(self._fixed()["Lzz"], Kzx), None

    def _whiten_fixed_backward(self, A_bar):
        """``L_ZZ^{-T} A_bar``: the cotangent of ``Kzx`` in ``A = L_ZZ^{-1} Kzx``."""
        xp = self.xp
        Lzz = self._fixed()["Lzz"]
        return xp.astype(solve_triangular(Lzz, xp.astype(A_bar, xp.float64, copy=False),
                                          lower=True, trans=True), A_bar.dtype, copy=False)

    def regulariser_moments(self, X, full_cov=False):
        """P's marginal means and variances at ``X`` (n, d), each (n, L), and its covariance
        (n, n) when ``full_cov`` (else None). Prior: ``c``, ``k(x, x)``. Posterior:
        ``c + k(x, Z) alpha_P``, ``k(x, x) - |L_P^{-1} k(Z, x)|^2``."""
        xp = self.xp
        n, L = X.shape[0], self.num_latent
        kdiag = self.kernel.diag(X)
        Kp = self.kernel(X) if full_cov else None
        if self.mode == "prior":
            mp = xp.full((n, L), self.prior_mean, dtype=self.dtype, device=self._device)
            vp = xp.broadcast_to(kdiag[:, None], (n, L))
            return mp, vp, Kp
        f = self._fixed()
        Kzx = self.kernel(self.inducing_points, X)
        Bp = fixed_solve(f["Lp"], Kzx)
        mp = self.prior_mean + Kzx.T @ f["alpha_p"]
        mp = xp.broadcast_to(mp, (n, L))
        vp = xp.broadcast_to((kdiag - xp.sum(Bp * Bp, axis=0))[:, None], (n, L))
        if full_cov:
            Kp = Kp - Bp.T @ Bp
        return mp, vp, Kp

    # ------------------------------------------------------------------ Q
    def _q_moments(self, X, full):
        """Q's means and variances (b, L), covariance (L, b, b) or None, and the caches."""
        xp = self.xp
        Kzx = self.kernel(self.inducing_points, X)
        A, _ = self._whiten_fixed(Kzx)
        kdiag = self.kernel.diag(X)
        mq, mcache = self._vm.forward(self, X, A)
        vq, Kq, kcache = self._vk.forward(self, X, A, kdiag, full)
        # Round-off (or a fixed sparse posterior kernel outgrowing k) can push a variance to or
        # below 0; the floor keeps the likelihood's domain and has zero gradient.
        floor = 1e-12 if self.dtype == xp.float64 else 1e-6
        ok = vq > floor
        vq = xp.where(ok, vq, floor)
        return mq, vq, Kq, {"m": mcache, "k": kcache, "ok": ok}

    def _reg_jitter(self):
        """Diagonal added to both batch covariances of the Wasserstein cross term (see
        :func:`regulariser_and_grad`): the model's jitter, at least 1e-6 (1e-4 in float32)."""
        return max(self.jitter, 1e-6 if self.dtype == self.xp.float64 else 1e-4)

    def _squeeze(self, a):
        return a[:, 0] if self.num_latent == 1 else a

    # ------------------------------------------------------------------ objective
    def regulariser(self, X):
        """``D(Q, P)`` on the batch ``X`` (b, d) (0-d array; see the class notes)."""
        X = self._check_X(X)
        full = needs_full_covariance(self.divergence, self.eigen_term)
        mq, vq, Kq, _ = self._q_moments(X, full)
        mp, vp, Kp = self.regulariser_moments(X, full)
        return self._regulariser_and_grad(mq, vq, Kq, mp, vp, Kp)[0]

    def _regulariser_and_grad(self, mq, vq, Kq, mp, vp, Kp):
        try:
            return regulariser_and_grad(self.xp, self.divergence, mq, vq, Kq, mp, vp, Kp,
                                        alpha=self.alpha, eigen_term=self.eigen_term,
                                        jitter=self._reg_jitter())
        except NotPSDError as exc:
            hint = (" (the fixed sparse posterior kernel is indefinite once its base kernel "
                    "outgrows k: use eigen_term=False or another variational kernel)"
                    if self.variational_kernel == "fixed-sparse-posterior" else "")
            raise NotPSDError(f"the Wasserstein cross term needs Q's batch covariance r(X, X) "
                              f"positive definite; with variational_kernel="
                              f"{self.variational_kernel!r} it is not{hint}: {exc}") from None

    def objective(self, X, y):
        """``(N / b) sum_i E_Q[log p(y_i | f_i)] - D(Q, P)`` on a batch (0-d array)."""
        return self.objective_and_grad(X, y)[0]

    def to_cholesky(self) -> None:
        """No-op: GVI holds q in one form (``gpnum.fit`` asks models for this form)."""

    def objective_and_grad(self, X, y, *, validate=True, return_data=False):
        """The objective to maximise and its gradients.

        ``(N / b) sum_i E_Q[log p(y_i | f_i)] - D_batch(Q, P)``: minus the empirical risk
        (expected negative log-likelihood scaled to the whole data set) and the regulariser.

        Returns
        -------
        value : 0-d array
        grads : dict
            Keyed like :meth:`parameters` except ``kernel.*`` (the regulariser's kernel is held
            fixed), natural form.
        """
        xp = self.xp
        if return_data:
            raise ValueError("GVI has no natural-gradient step (its objective is not an ELBO "
                             "and its q is not SVGP's): train it with gpnum.fit(..., "
                             "optimizer='adam')")
        if validate:
            X = self._check_X(X)
            y = self._check_y(y, X.shape[0])
        b = X.shape[0]
        if self.num_data < b:
            raise ValueError(f"num_data: expected at least the batch size {b}, got "
                             f"{self.num_data}")
        full = needs_full_covariance(self.divergence, self.eigen_term)
        mq, vq, Kq, cache = self._q_moments(X, full)
        mp, vp, Kp = self.regulariser_moments(X, full)
        D, gD_m, gD_v, GD_K = self._regulariser_and_grad(mq, vq, Kq, mp, vp, Kp)
        ve, g = self.likelihood.variational_expectations_and_grad(
            y, self._squeeze(mq), self._squeeze(vq))
        scale = self.num_data / b
        g_mu = g["mu"][:, None] if self.num_latent == 1 else g["mu"]
        g_var = g["var"][:, None] if self.num_latent == 1 else g["var"]
        g_m = scale * g_mu - gD_m
        g_v = xp.where(cache["ok"], scale * g_var - gD_v, 0.0)
        G_K = None if GD_K is None else -GD_K
        grads = {}
        grads.update(self._vm.backward(self, cache["m"], g_m))
        grads.update(self._vk.backward(self, cache["k"], g_v, G_K))
        for name, v in g["params"].items():
            grads[f"likelihood.{name}"] = scale * v
        value = scale * xp.sum(ve) - D
        return xp.asarray(value), grads

    # ------------------------------------------------------------------ prediction
    def predict_f(self, X, full_cov=False):
        """Q's mean and variance (or covariance) at ``X`` (n, d).

        Returns
        -------
        mean : array (n,) (or (n, L))
        var : array (n,) (or (n, L)); or cov (n, n) (or (L, n, n)) with ``full_cov``
        """
        X = self._check_X(X)
        xp = self.xp
        if full_cov:
            mq, _, Kq, _ = self._q_moments(X, True)
            Kq = 0.5 * (Kq + xp.matrix_transpose(Kq))
            return self._squeeze(mq), (Kq[0, ...] if self.num_latent == 1 else Kq)
        n, chunk = X.shape[0], 4096
        ms, vs = [], []
        for s in range(0, n, chunk):
            mq, vq, _, _ = self._q_moments(X[s:min(s + chunk, n), :], False)
            ms.append(mq)
            vs.append(vq)
        return self._squeeze(xp.concat(ms, axis=0)), self._squeeze(xp.concat(vs, axis=0))

    def _tempered(self, mu, var):
        """The latent variances scaled by ``temper_scale`` (non-Gaussian likelihoods)."""
        t = self.temper_scale
        return var * (t[0] if self.num_latent == 1 else t[None, :])

    def predict_y(self, X):
        """Predictive mean and variance of observations at ``X`` (tempered, class notes)."""
        mu, var = self.predict_f(X)
        if isinstance(self.likelihood, Gaussian):
            return mu, self.temper_scale[0] * (var + self.likelihood.variance)
        return self.likelihood.predict_mean_and_var(mu, self._tempered(mu, var))

    def log_predictive_density(self, X, y):
        """Per-point ``log p(y_i | x_i)`` under the (tempered) predictive, shape (n,)."""
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        mu, var = self.predict_f(X)
        return self._lpd(y, mu, var, self.temper_scale)

    def _lpd(self, y, mu, var, scale):
        xp = self.xp
        if isinstance(self.likelihood, Gaussian):
            s = scale[0] * (var + self.likelihood.variance)
            r = y - mu
            return -0.5 * (_LOG_2PI + xp.log(s) + r * r / s)
        v = var * (scale[0] if self.num_latent == 1 else scale[None, :])
        return self.likelihood.predictive_log_density(y, mu, v)

    def temper(self, X_val, y_val, *, bounds=(1e-3, 1e3), tol=1e-4):
        """Learn the tempering scale(s) on a validation set, everything else fixed.

        Wu (2023), "Tempering" (after Wild et al. 2022): maximise the validation log predictive
        density over one scale ``a > 0`` of the predictive variance (one per latent for
        classification). Gaussian likelihood: ``y ~ N(m_Q, a (r + sigma^2))``, whose maximiser
        is closed-form, ``a = mean((y - m_Q)^2 / (r + sigma^2))``. Otherwise ``f_j ~ N(m_Q,j,
        a_j r_jj)`` with each ``log a_j`` found by golden-section search on ``bounds``
        (coordinate-wise, two sweeps, for several latents).

        Parameters
        ----------
        X_val : array (n, d)
        y_val : array (n,)

        Returns
        -------
        temper_scale : array (L,)

        Raises
        ------
        ShapeError
            ``X_val`` or ``y_val`` of the wrong shape.
        """
        X = self._check_X(X_val, "X_val")
        y = self._check_y(y_val, X.shape[0], "y_val", "X_val")
        xp = self.xp
        mu, var = self.predict_f(X)
        L = self.num_latent
        if isinstance(self.likelihood, Gaussian):
            r = y - mu
            a = float(xp.mean(r * r / (var + self.likelihood.variance)))
            self.temper_scale = xp.asarray([a], dtype=self.dtype, device=self._device)
            return self.temper_scale
        scales = [1.0] * L

        def score(vals):
            s = xp.asarray(vals, dtype=self.dtype, device=self._device)
            return float(xp.sum(self._lpd(y, mu, var, s)))

        lo, hi = math.log(bounds[0]), math.log(bounds[1])
        g = (math.sqrt(5.0) - 1.0) / 2.0
        for _ in range(2 if L > 1 else 1):
            for j in range(L):
                def f(t, j=j):
                    vals = list(scales)
                    vals[j] = math.exp(t)
                    return -score(vals)
                a, b = lo, hi
                c, d = b - g * (b - a), a + g * (b - a)
                fc, fd = f(c), f(d)
                while b - a > tol:
                    if fc < fd:
                        b, d, fd = d, c, fc
                        c = b - g * (b - a)
                        fc = f(c)
                    else:
                        a, c, fc = c, d, fd
                        d = a + g * (b - a)
                        fd = f(d)
                scales[j] = math.exp(0.5 * (a + b))
        self.temper_scale = xp.asarray(scales, dtype=self.dtype, device=self._device)
        return self.temper_scale
