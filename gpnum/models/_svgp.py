"""Whitened sparse variational GP (SVGP) with Cholesky or CIQ whitening.

Hensman, Matthews & Ghahramani (2015), "Scalable variational Gaussian process classification";
whitening as in Pleiss, Jankowiak, Eriksson, Damle & Gardner (2020), "Fast matrix square roots
with applications to Gaussian processes and Bayesian optimization" (NeurIPS), section
"Whitened Stochastic Variational Gaussian Processes"; docs/models.md.

With ``u = W u'``, ``W W^T = K_ZZ`` and ``q(u') = N(m', S')``, ``S' = R R^T`` (``R = q_sqrt``), a
minibatch ``X_B`` of size ``b`` has ``A = W^{-1} K_ZX`` (m, b) and

    mu  = c + A^T m',        var = diag(K_XX) - colsum(A * A) + colsum((R^T A)^2),
    ELBO = (N / b) sum_i E_q[log p(y_i | f_i)] - KL(N(m', S') || N(0, I)).

``W`` is the lower Cholesky factor ``L`` ("cholesky") or the symmetric ``K_ZZ^{1/2}`` ("ciq",
through :func:`gpnum.ciq.inv_sqrt_matmul`). Gradients are hand-derived: through the triangular
solve and the Cholesky factorisation (Murray 2016, folded into one formula) for Cholesky
whitening, O(m^3) once per step;
through the CIQ backward pass (one more msMINRES and one ``param_vjp``) for CIQ whitening, with no
O(m^3) operation.

Several latent functions either share one set of inducing points (``Z`` (m, d): one ``A``
(m, b) for all) or have one set each (``Z`` (L, m, d): ``A_l = W_l^{-1} K_{Z_l X}``, stacked
(L, m, b), each whitened and differentiated on its own; the kernel is shared). The variational
forms take either ``A``.
"""

from __future__ import annotations

import functools

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.linalg import default_block_size
from gpnum.models._composite import ComposedParameters
from gpnum.models._distributions import (
    CholeskyForm,
    NaturalForm,
    precision_to_q_sqrt,
    q_sqrt_to_precision,
)
from gpnum.models._svgp_marginals import WhitenedMarginals
from gpnum.models._whitening import make_whitening

__all__ = ["SVGP", "precision_to_q_sqrt", "q_sqrt_to_precision"]


def _in_whitening_pool(method):
    """Run ``method`` with NumPy's large products in the BLAS pool of the model's whitening
    (``gpnum.backend.blas_pool``): one busy pool per step instead of two on two cores. (On the
    methods that compute; those that only delegate to them need not.)"""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with B.blas_pool(self.whitening_strategy.blas_pool):
            return method(self, *args, **kwargs)
    return wrapper




def _check_kernel_accepts(kernel, Z):
    """Raise at construction, naming Z, when the kernel refuses Z's columns (an ARD kernel
    with one lengthscale per column of other data): the first fit would otherwise blame X."""
    d = Z.shape[-1]
    try:
        kernel.diag(Z[0, :1, :] if Z.ndim == 3 else Z[:1, :])
    except ShapeError as err:
        ell = getattr(kernel, "lengthscale", None)
        has = "" if ell is None else f" (lengthscale of shape {tuple(ell.shape)})"
        raise ShapeError(f"inducing_points: {d} columns, which the kernel {type(kernel).__name__}"
                         f"{has} does not accept: {err}. Give the inducing points one column "
                         f"per input feature and the kernel one lengthscale per feature") from None

class SVGP(WhitenedMarginals, ComposedParameters):
    """Whitened sparse variational Gaussian process.

    Parameters
    ----------
    kernel : gpnum.kernels kernel
        Covariance function (its parameters are learned).
    likelihood : gpnum.likelihoods likelihood
        Observation model (its parameters are learned).
    inducing_points : array (m, d) or (num_latent, m, d)
        Initial inducing inputs ``Z`` (learned). Their namespace, device and floating dtype become
        the model's (a NumPy array goes to the default backend ``GPNUM_BACKEND``). (m, d): one
        set shared by every latent function; (num_latent, m, d): a separate set per latent
        function (each learned with its own gradient; the kernel stays shared), at ``num_latent``
        times the whitening cost.
    num_data : int
        Size ``N`` of the whole training set: the data term is scaled by ``N / batch``.
    whitening : {"cholesky", "ciq"}
        How ``K_ZZ^{-1/2} K_ZX`` is formed.
    mean : float
        Constant prior mean ``c`` (learned).
    jitter : float
        Added to the diagonal of ``K_ZZ`` only. With Cholesky whitening a matrix that still fails
        is retried with growing jitter before :class:`gpnum.NotPSDError` is raised.
    ciq_options : dict, optional
        Keywords for :func:`gpnum.ciq.inv_sqrt_matmul` (``num_quad``, ``rtol``, ``maxiter``,
        ``eigen_bounds``) when ``whitening="ciq"``.
    num_latent : int, optional
        Number of independent latent functions (default: ``likelihood.num_latent``). They share
        the kernel (and the inducing points unless those are (num_latent, m, d)) and have one
        ``q`` each.

    Attributes
    ----------
    q_mu : array (m,) or (num_latent, m)
        Whitened variational mean ``m'`` (zeros initially).
    q_sqrt : array (m, m) or (num_latent, m, m)
        Lower-triangular ``R`` with ``S' = R R^T`` (identity initially). Assigned values are
        lower-triangularised.
    inducing_points : array (m, d) or (num_latent, m, d)
    separate_inducing : bool
        Whether each latent function has its own inducing points (a 3-D ``inducing_points``).
    mean : array ()
    krylov_options : dict
        The natural form's solves (``ngd_method="krylov"``): ``rtol``, ``maxiter`` of PCG
        against each precision; ``precondition``, the block size of its spectral
        preconditioner's eigenpair search (0: none); ``warm_start`` (default True), each
        search starting from the same latent's previous one; ``num_probes``, ``num_lanczos``,
        ``seed`` of the stochastic KL estimate (:mod:`gpnum.models._distributions`).

    Notes
    -----
    float32: with Cholesky whitening the factorisation of ``K_ZZ`` and the triangular solves run
    in float64 and the results are cast back, because float32 Cholesky of a kernel matrix with a
    small jitter fails or loses most digits for m in the thousands; everything else, including
    CIQ whitening, runs in the working dtype.
    """

    _param_names = ("q_mu", "q_sqrt", "q_theta1", "q_precision", "inducing_points", "mean")
    _positive = ()
    _Q_NAMES = {"cholesky": ("q_mu", "q_sqrt"), "natural": ("q_theta1", "q_precision")}

    def __init__(self, kernel, likelihood, inducing_points, *, num_data, whitening="cholesky",
                 mean=0.0, jitter=1e-6, ciq_options=None, num_latent=None):
        if whitening not in ("cholesky", "ciq"):
            raise ValueError(f"whitening: expected 'cholesky' or 'ciq', got {whitening!r}")
        num_latent = int(num_latent if num_latent is not None
                         else getattr(likelihood, "num_latent", 1))
        Z = self._adopt_inducing_points(inducing_points, kernel, num_latent=num_latent)
        _check_kernel_accepts(kernel, Z)
        self._adopt_num_data(num_data)
        self.kernel = kernel
        self.likelihood = likelihood
        self.whitening = whitening
        self.jitter = float(jitter)
        if not self.jitter >= 0.0:
            raise ValueError(f"jitter: expected a number >= 0, got {jitter!r}")
        self.ciq_options = dict(ciq_options or {})
        #: The whitening strategy (gpnum.models._whitening): forward, backward, sampling.
        self.whitening_strategy = make_whitening(whitening, self.ciq_options)
        self.num_latent = num_latent
        #: One set of inducing points per latent function (fixed at construction).
        self.separate_inducing = Z.ndim == 3
        m = Z.shape[-2]
        xp, dt, dev = self.xp, self.dtype, self._device
        self.inducing_points = Z
        self.mean = 0.0 if mean is None else mean
        self.krylov_options = {"rtol": 1e-8 if self.dtype == xp.float64 else 1e-5,
                               "maxiter": None, "num_probes": 16, "num_lanczos": 30, "seed": 0,
                               "precondition": default_block_size(m), "warm_start": True}
        # Each latent's last preconditioner search in the natural form (krylov_options'
        # warm_start): starts for the next step's search, not results.
        object.__setattr__(self, "_precision_starts", {})
        object.__setattr__(self, "_form", "cholesky")
        if self.num_latent == 1:
            self.q_mu = xp.zeros((m,), dtype=dt, device=dev)
            self.q_sqrt = xp.eye(m, dtype=dt, device=dev)
        else:
            self.q_mu = xp.zeros((self.num_latent, m), dtype=dt, device=dev)
            self.q_sqrt = xp.broadcast_to(xp.eye(m, dtype=dt, device=dev),
                                          (self.num_latent, m, m))
        object.__setattr__(self, "q_theta1", None)
        object.__setattr__(self, "q_precision", None)

    # ------------------------------------------------------------------ parameters
    def _convert_param(self, name, value):
        arr = super()._convert_param(name, value)
        if name == "q_sqrt":
            arr = self.xp.tril(arr)
        return arr

    @property
    def num_inducing(self) -> int:
        """``m``: inducing points per latent function."""
        return self.inducing_points.shape[-2]

    def parameters(self) -> dict:
        """All learnable parameters in natural form, as a flat dict.

        Keys: ``q_mu``, ``q_sqrt`` (or ``q_theta1``, ``q_precision`` in the natural form),
        ``inducing_points``, ``mean``, ``kernel.<name>``, ``likelihood.<name>``.
        """
        return super().parameters()

    def _own_names(self) -> tuple:
        inactive = self._Q_NAMES["natural" if self._form == "cholesky" else "cholesky"]
        return tuple(n for n in self._param_names if n not in inactive)

    def _split(self, values: dict):
        for k in values:
            if k in self._param_names and k not in self._own_names():
                raise KeyError(f"{k!r} is not a parameter of the model in its {self._form!r} "
                               f"variational form; call "
                               f"{'to_natural' if self._form == 'cholesky' else 'to_cholesky'}"
                               f"() first")
        return super()._split(values)

    # ------------------------------------------------------------------ model protocol
    #: Minibatch model: ``fit`` samples batches and scales by ``num_data / b`` (GPR and SGPR,
    #: full-batch models, say True).
    full_batch = False

    def config(self) -> dict:
        """Constructor settings that are not arrays (JSON-able): with :meth:`data`, the kernel,
        the likelihood and :meth:`parameters` they rebuild the model (see :mod:`gpnum.checkpoint`)."""
        return {"num_data": self.num_data, "whitening": self.whitening, "jitter": self.jitter,
                "ciq_options": dict(self.ciq_options), "num_latent": self.num_latent,
                "krylov_options": dict(self.krylov_options),
                "variational_form": self.variational_form}

    @classmethod
    def from_config(cls, kernel, likelihood, params, config, data):
        """Rebuild a model from :meth:`config`, :meth:`data` and :meth:`parameters` values."""
        Z = params["inducing_points"]
        model = cls(kernel, likelihood, Z, num_data=config["num_data"],
                    whitening=config["whitening"], jitter=config["jitter"],
                    ciq_options=config["ciq_options"], num_latent=config["num_latent"])
        model.krylov_options = dict(config["krylov_options"])
        if config["variational_form"] == "natural":
            model.to_natural()
        return model

    def data(self) -> dict:
        """Constructor arrays that are not parameters: none for SVGP (the data stream past)."""
        return {}

    def check_data(self, X, y):
        """Validate and convert training data once (:func:`gpnum.fit` does, then passes
        ``validate=False`` to each step).

        Parameters
        ----------
        X : array (n, d)
        y : array (n,)

        Returns
        -------
        X, y : arrays in the model's namespace, dtype and device

        Raises
        ------
        ShapeError, ValueError
            Wrong shapes, NaN/Inf, targets outside the likelihood's support, or more points
            than ``num_data``.
        """
        return self._check_minibatch_data(X, y)

    def objective_and_grad(self, X, y, *, validate=True, return_data=False, scale=None):
        """The objective to maximise (the ELBO) and its gradients: :meth:`elbo_and_grad`."""
        return self.elbo_and_grad(X, y, validate=validate, return_data=return_data, scale=scale)

    @_in_whitening_pool
    def prior_term_and_grad(self):
        """The part of the objective that sees no data, ``-KL(q(u') || N(0, I))``, and its
        gradients.

        ``objective_and_grad(X, y, scale=s)`` is ``s * sum_i E_q[log p(y_i | f_i)]`` (a sum over
        the rows of ``X``) plus this term, which is how :mod:`gpnum.distributed` splits the
        objective over workers: each evaluates its rows, the driver adds this term once. The
        whitened KL depends on q alone, so the gradients have entries only for ``q_mu`` and
        ``q_sqrt`` (lower triangle), and none in the natural form, where the KL is a stochastic
        estimate for monitoring (natural gradients update q).

        Returns
        -------
        value : 0-d array
        grads : dict
            A subset of :meth:`parameters`' keys; the other parameters' gradients are zero.
        """
        value, q_grads = self.variational.kl_and_q_grad(self._q_pair())
        grads = {name: -(g[0, ...] if self.num_latent == 1 else g)
                 for name, g in q_grads.items()}
        return -value, grads

    # ------------------------------------------------------------------ variational distribution
    def q_cholesky(self):
        """``q_mu`` (L, m) and ``q_sqrt`` (L, m, m) with a leading latent axis (Cholesky form).

        Raises
        ------
        RuntimeError
            If the model holds q in natural form (call :meth:`to_cholesky` first).
        """
        return self._q()

    def q_natural(self):
        """``q_theta1`` (L, m) and ``q_precision`` (L, m, m) with a leading latent axis.

        Raises
        ------
        RuntimeError
            If the model holds q in Cholesky form (call :meth:`to_natural` first).
        """
        if self._form != "natural":
            raise RuntimeError("the model holds q in Cholesky form; call to_natural() first")
        return self._q_natural()

    @_in_whitening_pool
    def precision_solve(self, P, rhs, *, rtol=None):
        """PCG solve ``P x = rhs`` against a candidate precision ``P`` (m, m), rhs (m, k), with
        this model's ``krylov_options`` and spectral preconditioner (a
        :class:`gpnum.linalg.SolverResult`; ``info < 0`` flags negative curvature)."""
        return NaturalForm(self.krylov_options).precision_solve(P, rhs, rtol=rtol)

    @property
    def variational(self):
        """The variational distribution's form (:mod:`gpnum.models._distributions`):
        ``CholeskyForm`` or ``NaturalForm`` (with this model's ``krylov_options``)."""
        if self._form == "cholesky":
            return CholeskyForm()
        return NaturalForm(self.krylov_options, self._precision_starts)

    # ------------------------------------------------------------------ variational forms
    @property
    def variational_form(self) -> str:
        """``"cholesky"`` (``q_mu``, ``q_sqrt``) or ``"natural"`` (``q_theta1``, ``q_precision``)."""
        return self._form

    def to_natural(self) -> None:
        """Hold q as natural parameters: ``q_theta1 = S'^{-1} m'``, ``q_precision = S'^{-1}``.

        In this form the marginals need only solves with the precision (PCG, see
        ``krylov_options``), never a factorisation: the form of the O(J m^2) natural gradient
        (Salimbeni, Eleftheriadis & Hensman 2018; Pleiss et al. 2020). The conversion itself
        costs O(m^3) once (free from the initial
        ``q_sqrt = I``).
        """
        if self._form == "natural":
            return
        th, P = CholeskyForm().convert(self._q())
        object.__setattr__(self, "_form", "natural")
        self.q_theta1 = th[0, ...] if self.num_latent == 1 else th
        self.q_precision = P[0, ...] if self.num_latent == 1 else P
        object.__setattr__(self, "q_mu", None)
        object.__setattr__(self, "q_sqrt", None)

    def to_cholesky(self) -> None:
        """Hold q as ``q_mu``, ``q_sqrt`` again (one Cholesky of each precision, O(m^3))."""
        if self._form == "cholesky":
            return
        mus, Rs = NaturalForm(self.krylov_options).convert(self._q_natural())
        object.__setattr__(self, "_form", "cholesky")
        self.q_mu = mus[0, ...] if self.num_latent == 1 else mus
        self.q_sqrt = Rs[0, ...] if self.num_latent == 1 else Rs
        object.__setattr__(self, "q_theta1", None)
        object.__setattr__(self, "q_precision", None)

    @_in_whitening_pool
    def kl(self):
        """KL(q(u') || N(0, I)) summed over latent functions (a 0-d array).

        Exact in the Cholesky form. In the natural form it is a stochastic estimate for
        monitoring only: ``tr S'`` by Hutchinson probes solved with PCG and ``log|S'|`` by
        stochastic Lanczos quadrature (``krylov_options``: ``num_probes``, ``num_lanczos``,
        ``seed``), never a factorisation.
        """
        return self.variational.kl(self._q_pair())

    def _expected_loglik(self, y, mu, var):
        ve = self.likelihood.variational_expectations(y, self._squeeze(mu), self._squeeze(var))
        return ve

    # ------------------------------------------------------------------ public API
    @_in_whitening_pool
    def elbo(self, X, y):
        """The ELBO on a minibatch, scaled to the whole data set.

        ``(num_data / b) * sum_i E_q[log p(y_i | f_i)] - KL`` (GPflow's convention; GPyTorch
        reports this divided by ``num_data``).

        Parameters
        ----------
        X : array (b, d)
        y : array (b,)

        Returns
        -------
        elbo : 0-d array
        """
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        self._check_batch(X.shape[0])
        mu, var, c = self._marginals(X)
        ve = self._expected_loglik(y, mu, var)
        return ((self.num_data / X.shape[0]) * self.xp.sum(ve)
                - self.variational.kl(c["q"], c["q_cache"]))

    def _check_batch(self, b):
        if self.num_data < b:
            raise ValueError(f"num_data: expected at least the batch size {b}, got "
                             f"{self.num_data}")

    @_in_whitening_pool
    def data_term_and_grad(self, X, y, *, validate=True, scale=None):
        """Data term of the ELBO and its gradients w.r.t. the marginals and ``A``.

        Used by the natural-gradient optimisers. Returns a dict with ``value`` (0-d, scaled by
        ``scale``, default ``num_data / b``), ``A`` (m, b), ``g_mu`` and ``g_var`` ((b, L), already scaled), ``mu``,
        ``var``, ``lik_grads`` (scaled), and the forward cache. With separate inducing points
        ``A`` is (L, m, b), one block per latent. ``validate=False`` skips the
        input checks for data that :meth:`check_data` has already passed.
        """
        if validate:
            X = self._check_X(X)
            y = self._check_y(y, X.shape[0])
        self._check_batch(X.shape[0])
        mu, var, cache = self._marginals(X, need_grad=True)
        ve, g = self.likelihood.variational_expectations_and_grad(
            y, self._squeeze(mu), self._squeeze(var))
        if scale is None:
            scale = self.num_data / X.shape[0]
        g_mu = g["mu"][:, None] if self.num_latent == 1 else g["mu"]
        g_var = g["var"][:, None] if self.num_latent == 1 else g["var"]
        g_var = self.xp.where(cache["var_ok"], g_var, 0.0)
        return {"value": scale * self.xp.sum(ve), "A": cache["A"], "g_mu": scale * g_mu,
                "g_var": scale * g_var, "mu": mu, "var": var,
                "lik_grads": {k: scale * v for k, v in g["params"].items()},
                "cache": cache, "X": X}

    @_in_whitening_pool
    def elbo_and_grad(self, X, y, *, validate=True, return_data=False, scale=None):
        """ELBO (see :meth:`elbo`) and its gradient w.r.t. every parameter.

        ``validate=False`` skips the input checks (for data :meth:`check_data` has passed).
        ``scale`` multiplies the data term instead of ``num_data / b`` (a share of a larger
        minibatch: :mod:`gpnum.distributed`).

        Returns
        -------
        elbo : 0-d array
        grads : dict
            Keys as :meth:`parameters`; natural form (``q_sqrt``: lower triangle only). In the
            natural variational form there are no entries for q (natural gradients update it).
        data : dict
            Only with ``return_data=True``: :meth:`data_term_and_grad`'s output, which the
            natural-gradient step reuses.
        """
        xp = self.xp
        d = self.data_term_and_grad(X, y, validate=validate, scale=scale)
        A, g_mu, g_var = d["A"], d["g_mu"], d["g_var"]
        c = d["cache"]
        X = d["X"]
        grads = {}
        # Natural form: no q gradients (natural gradients update q) and a KL estimate.
        kl_total, q_grads, SA = self.variational.kl_and_grad(c["q"], A, g_mu, g_var,
                                                             c["q_cache"])
        for name, g in q_grads.items():
            grads[name] = g[0, ...] if self.num_latent == 1 else g
        g_kdiag = xp.sum(g_var, axis=1)
        gdiag = self.kernel.diag_vjp(g_kdiag, X)
        if self.separate_inducing:
            # Latent l's A_l sees only its own terms: A_l_bar = m'_l g_mu_l^T
            # + 2 (S'_l A_l - A_l) diag(g_var_l); each goes back through its own K_ZZ.
            A_bar = (c["q_mean"][:, :, None] * xp.matrix_transpose(g_mu)[:, None, :]
                     + 2.0 * (SA - A) * xp.matrix_transpose(g_var)[:, None, :])
            parts, gZ = [gdiag["params"]], []
            for lat in range(self.num_latent):
                wc = c["whiten"]["latents"][lat]
                Kzz_bar, Kzx_bar = self._whiten_backward(A[lat, ...], wc, A_bar[lat, ...])
                gzz = wc["kzz_vjp"](Kzz_bar)
                gzx = c["kzx_vjp"][lat](Kzx_bar)
                parts += [gzz["params"], gzx["params"]]
                gZ.append(gzz["X1"] + gzx["X1"])
            for name in self.kernel.parameters():
                total = parts[0][name]
                for p in parts[1:]:
                    total = total + p[name]
                grads[f"kernel.{name}"] = total
            grads["inducing_points"] = xp.stack(gZ)
        else:
            # A's cotangent: sum_l [m'_l g_mu_l^T + 2 (S'_l A - A) diag(g_var_l)].
            A_bar = c["q_mean"].T @ g_mu.T + 2.0 * xp.sum(
                (SA - A[None, :, :]) * g_var.T[:, None, :], axis=0)
            Kzz_bar, Kzx_bar = self._whiten_backward(A, d["cache"]["whiten"], A_bar)
            gzz = c["whiten"]["kzz_vjp"](Kzz_bar)
            gzx = c["kzx_vjp"](Kzx_bar)
            for name in self.kernel.parameters():
                grads[f"kernel.{name}"] = (gzz["params"][name] + gzx["params"][name]
                                           + gdiag["params"][name])
            grads["inducing_points"] = gzz["X1"] + gzx["X1"]
        for name, v in d["lik_grads"].items():
            grads[f"likelihood.{name}"] = v
        grads["mean"] = xp.sum(g_mu)
        if return_data:
            return d["value"] - kl_total, grads, d
        return d["value"] - kl_total, grads

    @_in_whitening_pool
    def predict_f(self, X, full_cov=False):
        """Mean and variance (or covariance) of the latent function(s) at ``X`` under q.

        Parameters
        ----------
        X : array (n, d)
        full_cov : bool
            Return the (n, n) posterior covariance ``K_XX - A^T A + A^T S' A`` instead of its
            diagonal (O(n^2) memory: meant for n up to a few thousand).

        Returns
        -------
        mean : array (n,) (or (n, num_latent))
        var : array (n,) (or (n, num_latent)), when ``full_cov`` is False
        cov : array (n, n) (or (num_latent, n, n)), when ``full_cov`` is True
        """
        X = self._check_X(X)
        if full_cov:
            return self._predict_full_cov(X)
        chunk = self.whitening_strategy.predict_chunk
        mus, vs = [], []
        reuse = None  # K_ZZ is the same for every chunk: its factor or spectrum work is reused
        n = X.shape[0]
        for start in range(0, n, chunk):
            # The array API leaves a slice past the end unspecified (array_api_strict raises).
            mu, var, c = self._marginals(X[start:min(start + chunk, n), :], reuse)
            if reuse is None:
                reuse = self._reusable(c["whiten"])
            mus.append(mu)
            vs.append(var)
        mu = self.xp.concat(mus, axis=0)
        var = self.xp.concat(vs, axis=0)
        return self._squeeze(mu), self._squeeze(var)

    def _predict_full_cov(self, X):
        xp = self.xp
        A, _ = self._whiten(self._kzx(X)[0])
        q_mu, data_cov = self.variational.data_covariance(self._q_pair(), A)
        Kxx = self.kernel(X)
        covs = []
        for lat, c in enumerate(data_cov):
            A_l = A[lat, ...] if self.separate_inducing else A
            cov = Kxx - A_l.T @ A_l + c
            covs.append(0.5 * (cov + cov.T))
        if self.separate_inducing:
            mean = self.mean + xp.matrix_transpose(xp.sum(A * q_mu[:, :, None], axis=1))
        else:
            mean = self.mean + A.T @ q_mu.T  # (n, L)
        if self.num_latent == 1:
            return mean[:, 0], covs[0]
        return mean, xp.stack(covs)

    def predict_y(self, X):
        """Predictive mean and variance of observations at ``X`` (the likelihood's moments)."""
        mu, var = self.predict_f(X)
        return self.likelihood.predict_mean_and_var(mu, var)

    def log_predictive_density(self, X, y):
        """Per-point ``log p(y_i | x_i)`` under the approximate posterior, shape (n,)."""
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        mu, var = self.predict_f(X)
        return self.likelihood.predictive_log_density(y, mu, var)

    @_in_whitening_pool
    def sample_f(self, X, num_samples, seed):
        """Joint samples of the latent function at ``X`` from the approximate posterior.

        By pathwise conditioning (Matheron's rule; Wilson et al. 2020, "Efficiently sampling
        functions from Gaussian process posteriors"), through the whitening strategy: a joint
        prior draw ``(u_p, f_p) = (K([Z; X]) + jitter I)^{1/2} eps``, a draw
        ``u' = m' + S'^{1/2} eps'`` of q (``R eps'``, or ``P^{-1/2} eps'`` by CIQ in the
        natural form), then ``f = c + f_p + A^T (u' - W^{-1} u_p)``, exact in distribution:

        - Cholesky whitening: the prior draw through a float64 Cholesky factor of the
          (m + n) x (m + n) prior covariance, O((m + n)^3): for n up to a few thousand.
        - CIQ whitening: the prior draw by :func:`gpnum.ciq.sqrt_matmul` on a lazy kernel
          matrix, no factorisation and O((m + n) num_samples) memory beyond the kernel blocks;
          accurate to the CIQ options' tolerance.

        With separate inducing points each latent function's prior draw is over ``[Z_l; X]``
        and its correction uses its own ``A_l`` and ``W_l``.

        Parameters
        ----------
        X : array (n, d)
        num_samples : int
        seed : int
            Seed of the standard-normal draws.

        Returns
        -------
        samples : array (num_samples, n) (or (num_samples, n, num_latent))
        """
        xp = self.xp
        X = self._check_X(X)
        num_samples = int(num_samples)
        if num_samples < 1:
            raise ValueError(f"num_samples: expected an integer >= 1, got {num_samples}")
        sep = self.separate_inducing
        m, n, k = self.num_inducing, X.shape[0], num_samples
        rng = B.default_rng(seed, xp=xp, device=self._device)
        A, cache = self._whiten(self._kzx(X)[0])
        reuse = self._reusable(cache)
        q, form = self._q_pair(), self.variational
        out = []
        for lat in range(self.num_latent):
            Z_l = self.inducing_points[lat, ...] if sep else self.inducing_points
            prior = self.whitening_strategy.prior_draw(
                self.kernel, Z_l, X, self.jitter, rng.normal((m + n, k), dtype=self.dtype))
            u_p, f_p = prior[:m, :], prior[m:, :]
            # W^{-1} u_p with the same factor or spectrum work as A's whitening.
            w_p, _ = self._whiten(u_p, reuse=reuse[lat] if sep else reuse,
                                  latent=lat if sep else None)
            u = form.draw(q, rng.normal((m, k), dtype=self.dtype), lat)
            A_l = A[lat, ...] if sep else A
            out.append((self.mean + f_p + A_l.T @ (u - w_p)).T)
        return out[0] if self.num_latent == 1 else xp.stack(out, axis=-1)
