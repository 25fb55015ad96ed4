"""Emission families: Gaussian (Normal-inverse-Wishart or Normal-Gamma) and categorical (Dirichlet).

Natural parameters (all linear in the sufficient statistics, so that the SVI step is a convex
combination of them):

- Gaussian, full covariance, ``q(mu_k, Sigma_k) = NIW(m, kappa, nu, Psi)``: ``kappa``,
  ``h = kappa m``, ``Q = Psi + kappa m m^T``, ``nu``; statistics ``N_k = sum_t g_tk``,
  ``sum_t g_tk y_t``, ``sum_t g_tk y_t y_t^T``, ``N_k``.
- Gaussian, diagonal, ``q(mu_kd, lambda_kd) = N(m, (kappa lambda)^-1) Gamma(a, b)``: ``kappa``,
  ``h = kappa m``, ``Q = 2 b + kappa m^2``, ``nu = 2 a``; statistics as above with ``y_t^2``.
- Categorical, ``q(B_k) = Dir(beta_k)``: ``beta``; statistics ``sum_t g_tk [y_t = m]``.

Expected log likelihoods (Bishop 2006, 10.64-10.65; Beal 2003, ch. 3):
``E log N(y | mu, Sigma) = -D/2 log 2 pi + 1/2 E log|Lambda| - D / (2 kappa)
- nu / 2 (y - m)^T Psi^-1 (y - m)`` with ``E log|Lambda| = sum_d psi((nu - d + 1) / 2) + D log 2
- log|Psi|``.
"""

from __future__ import annotations

import math

from gpnum.backend import asarray, default_dtype, device_of, get_namespace, is_array
from gpnum.errors import ShapeError, check_finite, check_int, check_positive, describe_shape
from gpnum.hmm._base import HMMBase
from gpnum.special import digamma, lgamma, multidigamma, multigammaln

__all__ = ["GaussianHMM", "CategoricalHMM"]

_LOG_2PI = math.log(2.0 * math.pi)
#: Rows used to seed the Gaussian emissions by k-means (evenly spaced over the chain).
_INIT_ROWS = 20000


class GaussianHMM(HMMBase):
    """HMM with Gaussian emissions, conjugate mean-field variational Bayes.

    Parameters
    ----------
    num_states : int
        ``K >= 1`` hidden states.
    dim : int
        ``D >= 1`` observation dimensions.
    covariance : {"full", "diag"}
        Normal-inverse-Wishart prior on ``(mu_k, Sigma_k)`` (full) or Normal-Gamma on each
        dimension (diagonal).
    seed : int
        Seed of the initialisation (k-means++) and, by default, of the SVI subchain draws.
    init_concentration, transition_concentration : float
        Dirichlet prior concentrations of ``pi`` and of each row of ``A``.
    mean_prior : array (D,), optional
        ``m_0``; default the data mean.
    mean_precision : float
        ``kappa_0`` (pseudo-observations of the means).
    dof : float, optional
        ``nu_0 > D - 1``; default ``D + 2`` (for ``"diag"``: ``nu_0 = 2 a_0``, default 3).
    scale : array (D,), optional
        Diagonal of ``Psi_0`` (full) or ``2 b_0`` (diag), so that the prior mean of the
        covariance is about ``scale / (nu_0 - D - 1)``; default the data variances.

    Notes
    -----
    Fitted attributes: ``prior_`` and ``posterior_`` (natural parameters, see the module
    docstring), and through :meth:`means`, :meth:`covariances`.
    """

    def __init__(self, num_states, dim, *, covariance="full", seed=0, init_concentration=1.0,
                 transition_concentration=1.0, mean_prior=None, mean_precision=1.0, dof=None,
                 scale=None):
        super().__init__(num_states, seed=seed, init_concentration=init_concentration,
                         transition_concentration=transition_concentration)
        self.dim = check_int(dim, "dim", minimum=1, expected="an integer >= 1 (observation size)")
        if covariance not in ("full", "diag"):
            raise ValueError(f"covariance: expected 'full' or 'diag', got {covariance!r}")
        self.covariance = covariance
        self.mean_prior = mean_prior
        self.mean_precision = check_positive(mean_precision, "mean_precision")
        D = self.dim
        default_dof = D + 2.0 if covariance == "full" else 3.0
        self.dof = default_dof if dof is None else check_positive(dof, "dof")
        if covariance == "full" and self.dof <= D - 1:
            raise ValueError(f"dof: expected a number > D - 1 = {D - 1}, got {dof!r}")
        self.scale = scale

    # ------------------------------------------------------------------------ checks
    def _check_data(self, Y):
        if not is_array(Y):
            raise TypeError(f"Y: expected an array of shape (T, {self.dim}), got "
                            f"{type(Y).__name__}")
        xp = get_namespace(Y)
        if Y.ndim == 1 and self.dim == 1:
            Y = Y[:, None]
        if Y.ndim != 2 or Y.shape[1] != self.dim:
            raise ShapeError(f"Y: expected shape (T, {self.dim}), got {describe_shape(Y.shape)}")
        if Y.shape[0] < 1:
            raise ValueError("Y: expected at least one time step, got T = 0")
        if not xp.isdtype(Y.dtype, "real floating"):
            raise TypeError(f"Y: expected a real floating dtype, got {Y.dtype}")
        check_finite(xp, Y, "Y")  # names NaN
        return Y

    # ------------------------------------------------------------------------ priors
    def _emission_prior(self, Y):
        xp, dev = get_namespace(Y), device_of(Y)
        K, D = self.num_states, self.dim
        mean = xp.mean(Y, axis=0)
        var = xp.var(Y, axis=0) if Y.shape[0] > 1 else xp.ones_like(mean)
        var = xp.where(var > 0.0, var, xp.ones_like(var))
        m0 = mean if self.mean_prior is None else self._vector(self.mean_prior, Y, "mean_prior")
        scale = var if self.scale is None else self._vector(self.scale, Y, "scale")
        if not bool(xp.all(scale > 0.0)):
            raise ValueError("scale: expected positive values")
        kappa0 = self.mean_precision
        ones = xp.ones((K,), dtype=Y.dtype, device=dev)
        h0 = xp.broadcast_to(kappa0 * m0, (K, D))
        if self.covariance == "full":
            Psi0 = xp.eye(D, dtype=Y.dtype, device=dev) * scale[None, :]
            Q0 = Psi0 + kappa0 * (m0[:, None] * m0[None, :])
            Q0 = xp.broadcast_to(Q0, (K, D, D))
        else:
            Q0 = xp.broadcast_to(scale + kappa0 * m0 * m0, (K, D))
        return {"kappa": kappa0 * ones, "h": h0, "Q": Q0, "nu": self.dof * ones}

    def _vector(self, value, Y, name):
        v = asarray(value, dtype=Y.dtype, like=Y)
        if v.shape != (self.dim,):
            raise ShapeError(f"{name}: expected shape ({self.dim},), got {describe_shape(v.shape)}")
        return v

    def _emission_init(self, Y, rng):
        """Hard assignments of evenly spaced rows to k-means centres, scaled to the chain."""
        from gpnum.inducing import kmeans  # k-means++ and Lloyd, any backend

        xp, dev = get_namespace(Y), device_of(Y)
        T, K = Y.shape[0], self.num_states
        stride = max(1, T // _INIT_ROWS)
        sub = Y[0:T:stride, :]
        n = sub.shape[0]
        # Jitter breaks exact ties so that k-means++ finds K distinct rows in discrete data.
        # (relative to the data's spread and size, so that even a constant series gets K rows)
        spread = xp.sqrt(xp.mean(xp.var(sub, axis=0))) + xp.mean(xp.abs(sub)) + 1e-30
        noise = rng.normal(sub.shape, dtype=Y.dtype) * (1e-6 * spread)
        sub = sub + noise
        if n >= K:
            centres = kmeans(sub, K, seed=self.seed, num_iter=20)
        else:
            index = xp.asarray([i % n for i in range(K)], dtype=xp.int64, device=dev)
            centres = xp.take(sub, index, axis=0)
        d2 = (xp.sum(sub * sub, axis=1)[:, None] - 2.0 * (sub @ xp.matrix_transpose(centres))
              + xp.sum(centres * centres, axis=1)[None, :])
        labels = xp.argmin(d2, axis=1)
        states = xp.arange(K, dtype=labels.dtype, device=dev)
        onehot = xp.astype(labels[:, None] == states[None, :], Y.dtype)
        stats = self._emission_statistics(onehot * (float(T) / n), sub)
        return {key: self.prior_[key] + stats[key] for key in stats}

    # ---------------------------------------------------------------- conversions
    def _standard(self):
        """``(kappa, m, S, nu)`` with ``S = Psi`` (full, (K, D, D)) or ``2 b`` (diag, (K, D))."""
        w = self.posterior_
        return self._standard_of(w)

    def _standard_of(self, w):
        xp = get_namespace(w["kappa"])
        kappa, nu = w["kappa"], w["nu"]
        m = w["h"] / kappa[:, None]
        if self.covariance == "full":
            S = w["Q"] - kappa[:, None, None] * (m[:, :, None] * m[:, None, :])
            S = 0.5 * (S + xp.matrix_transpose(S))
        else:
            S = w["Q"] - kappa[:, None] * m * m
        return kappa, m, S, nu

    def posterior_params(self):
        """The posterior in standard form: a dict of arrays.

        ``"pi"`` (K,) and ``"A"`` (K, K) Dirichlet concentrations; ``"mean"`` ``m`` (K, D),
        ``"mean_precision"`` ``kappa`` (K,), ``"dof"`` ``nu`` (K,) and ``"scale"``: ``Psi``
        (K, D, D) of the inverse-Wishart (full), or ``2 b`` (K, D) with Gamma shape ``nu / 2``
        and rate ``b`` of each precision (diag).
        """
        self._require_fitted()
        kappa, m, S, nu = self._standard()
        return {"pi": self.posterior_["pi"], "A": self.posterior_["A"], "mean": m,
                "mean_precision": kappa, "dof": nu, "scale": S}

    def means(self):
        """Posterior means of the state means, (K, D)."""
        self._require_fitted()
        return self._standard()[1]

    def covariances(self):
        """Plug-in covariances ``E[Lambda]^-1``: ``Psi / nu`` (K, D, D); diag ``b / a`` (K, D)."""
        self._require_fitted()
        kappa, m, S, nu = self._standard()
        return S / (nu[:, None, None] if self.covariance == "full" else nu[:, None])

    # -------------------------------------------------------------- expectations
    def _quadratic(self, Y, m, S, weight, constant):
        """``constant_k + weight_k (y_t - m_k)^T S_k^-1 (y_t - m_k)`` (T, K).

        Two GEMMs: ``Z = [Y, 1] [W; -o]`` with ``W = [L_1^-T, ..., L_K^-T]`` (D, K D) and
        ``o = [L_k^-1 m_k]``, then the squared entries of ``Z`` summed per state, times
        ``weight``, by a (K D, K) block matrix. The data are first centred on the mean of the
        state means, so that float32 keeps the differences accurate for data far from the
        origin. ``weight`` and ``constant`` (K,) may depend on ``S`` only through
        :meth:`_logdet`.
        """
        return self._apply_quadratic(Y, self._prepare_quadratic(m, S, weight, constant))

    def _whitening(self, m, S, factor=None):
        """``(centre, Linv, to_centre)``: the mean of the state means (D,), the inverse
        Cholesky factors ``L_k^-1`` (K, D, D) of the scale matrices (diagonal covariances:
        ``diag(S_k)^-1/2``) and ``-o_k = L_k^-1 (centre - m_k)`` (K, D, 1), so that
        ``L_k^-1 (y - m_k) = L_k^-1 (y - centre) - o_k`` (``factor``: the Cholesky factors of
        ``S`` when already computed)."""
        xp = get_namespace(m)
        K, D = self.num_states, self.dim
        centre = xp.sum(m, axis=0) / K  # (xp.mean is several NumPy calls)
        if self.covariance == "full":
            L = xp.linalg.cholesky(S) if factor is None else factor  # (K, D, D)
            Linv = xp.linalg.inv(L)
            return centre, Linv, Linv @ (centre - m)[:, :, None]
        inv_sd = 1.0 / xp.sqrt(S)  # (K, D)
        Linv = inv_sd[:, :, None] * xp.eye(D, dtype=m.dtype, device=device_of(m))
        return centre, Linv, (inv_sd * (centre - m))[:, :, None]

    def _prepare_quadratic(self, m, S, weight, constant, factor=None):
        """The data-independent part of :meth:`_quadratic`: ``(centre, [W; -o], block *
        weight, constant)`` from :meth:`_whitening`."""
        xp = get_namespace(m)
        K, D = self.num_states, self.dim
        centre, Linv, to_centre = self._whitening(m, S, factor)
        # [W; -o][e, k D + d] = [L_k^-1, -o_k][d, e]: one transposing copy
        W = xp.reshape(xp.permute_dims(xp.concat([Linv, to_centre], axis=-1), (2, 0, 1)),
                       (D + 1, K * D))
        # block[k D + d, j] = weight_j [k = j]
        block = xp.repeat(xp.eye(K, dtype=m.dtype, device=device_of(m)) * weight, D, axis=0)
        return centre, W, block, constant

    def _apply_quadratic(self, Y, prepared):
        xp = get_namespace(Y)
        centre, W, block, constant = prepared
        # The offset rides in the GEMM on a column of ones (cheaper than a pass over (T, K D));
        # the products below are fresh, so they are updated in place.
        ones = xp.ones((Y.shape[0], 1), dtype=Y.dtype, device=device_of(Y))
        Z = xp.concat([Y - centre, ones], axis=1) @ W
        Z *= Z
        out = Z @ block
        out += constant
        return out

    def _logdet(self, S, factor=None):
        """``log|S_k|`` (K,) of the scale matrices (or diagonals) ``S`` (``factor``: their
        Cholesky factors, when already computed)."""
        xp = get_namespace(S)
        if self.covariance == "full":
            L = xp.linalg.cholesky(S) if factor is None else factor
            return 2.0 * xp.sum(xp.log(xp.linalg.diagonal(L)), axis=-1)
        return xp.sum(xp.log(S), axis=-1)

    def _expected_log_lik(self, Y, features=None):
        m, S, weight, constant, _ = self._expected_quadratic()
        xp = get_namespace(Y)
        if features is not None and Y.dtype == xp.float64:
            return self._quadratic_from_features(features, m, S, weight, constant)
        return self._quadratic(Y, m, S, weight, constant)

    def _expected_quadratic(self):
        """``(m, S, weight, constant)`` of the expected log likelihood as a :meth:`_quadratic`,
        and the Cholesky factors of ``S`` (None for diagonal covariances)."""
        D = self.dim
        w = self.posterior_
        xp = get_namespace(w["kappa"])
        kappa, nu = w["kappa"], w["nu"]
        m = w["h"] / kappa[:, None]
        if self.covariance == "full":
            # Psi = Q - kappa m m^T, not symmetrised as in _standard: the Cholesky factor
            # reads one triangle, and Psi enters only through it (here and in _quadratic's
            # users) or through inv(Psi) of the float64 VB features.
            S = w["Q"] - kappa[:, None, None] * (m[:, :, None] * m[:, None, :])
            factor = xp.linalg.cholesky(S)
            logdet_S = 2.0 * xp.sum(xp.log(xp.linalg.diagonal(factor)), axis=-1)
        else:
            S = w["Q"] - kappa[:, None] * m * m
            factor = None
            logdet_S = xp.sum(xp.log(S), axis=-1)
        # E log|Lambda| = sum_d psi((nu - d + 1)/2) + D log 2 - log|Psi| (full); for diagonal
        # covariances lambda_d ~ Gamma(a, b), a = nu/2, b = S/2: E log lambda = psi(a) - log b,
        # E lambda = a/b = nu / S. The constant is 1/2 (E log|Lambda| - D log 2 pi - D / kappa),
        # with the Python-float terms collected.
        psi_sum = (multidigamma(0.5 * nu, D) if self.covariance == "full"
                   else D * digamma(0.5 * nu))
        constant = 0.5 * (psi_sum - logdet_S - D / kappa) + 0.5 * D * (math.log(2.0) - _LOG_2PI)
        return m, S, -0.5 * nu, constant, factor

    def _log_lik_function(self):
        """:meth:`_expected_log_lik`, states first (K, N), with its parameter work done once
        (for many windows under the same posterior, as SVI's growing buffers). Every array
        below has the N rows as its last axis: NumPy broadcasts over a last axis of D or K
        several times slower."""
        m, S, weight, constant, factor = self._expected_quadratic()
        centre, Linv, to_centre = self._whitening(m, S, factor)
        xp = get_namespace(Linv)
        K, D = self.num_states, self.dim
        # Z[k D + d] = (L_k^-1 (y - m_k))_d: rows of the factors, no copies
        linear, offset = xp.reshape(Linv, (K * D, D)), xp.reshape(to_centre, (K * D, 1))
        # block_t[j, k D + d] = weight_j [k = j]
        block_t = xp.repeat(xp.eye(K, dtype=m.dtype, device=device_of(m)) * weight[:, None], D,
                            axis=1)
        constant = constant[:, None]

        def log_lik(Y):
            # The products are fresh, so they are updated in place (each (K D, N) temporary
            # spared is a large allocation and a pass over memory).
            Z = linear @ xp.matrix_transpose(Y - centre)  # (K D, N); Y - c is a faster pass
            Z += offset
            Z *= Z
            out = block_t @ Z
            out += constant
            return out

        return log_lik

    def _quadratic_from_features(self, features, m, S, weight, constant):
        """:meth:`_quadratic` as one GEMM on the centred features ``F`` of
        :meth:`_emission_features`: ``(y - m)^T P (y - m) = yc^T P yc - 2 (P mc)^T yc +
        mc^T P mc`` with ``yc = y - c``, ``mc = m - c``, ``P = S^-1``, so the (T, K) result is
        ``F^T C`` for a (F, K) coefficient matrix ``C``. The expansion adds terms of size
        ``|yc|^2 / sigma^2`` and cancels them: harmless in float64 for data centred on their
        mean, which is why only float64 VB uses it (float32 keeps the differences).
        """
        xp = get_namespace(m)
        c, Ft = features
        D = self.dim
        mc = m - c  # (K, D)
        if self.covariance == "full":
            P = xp.linalg.inv(S)  # (K, D, D), D is small
            Pm = xp.squeeze(P @ mc[:, :, None], axis=-1)  # (K, D)
            second = xp.reshape(P, (self.num_states, D * D))
        else:
            P = 1.0 / S  # (K, D)
            Pm = P * mc
            second = P
        first = -2.0 * Pm
        zeroth = xp.sum(Pm * mc, axis=-1)  # (K,)
        coef = xp.concat([(weight * zeroth + constant)[:, None], weight[:, None] * first,
                          weight[:, None] * second], axis=1)  # (K, F)
        return xp.matrix_transpose(Ft) @ xp.matrix_transpose(coef)

    def _mean_log_lik(self, Y):
        D = self.dim
        kappa, m, S, nu = self._standard()
        # Plug-in covariance S / nu: (y - m)^T (S / nu)^-1 (y - m) = nu quad, log|S / nu|.
        logdet_cov = self._logdet(S) - D * get_namespace(nu).log(nu)
        return self._quadratic(Y, m, S, -0.5 * nu, -0.5 * D * _LOG_2PI - 0.5 * logdet_cov)

    def _emission_features(self, Y):
        """``(c, F)``: the data mean ``c`` (D,) and the centred features ``F`` (1 + D + D^2, N)
        ``[1, yc, vec(yc yc^T)]`` (or (1 + 2 D, N) ``[1, yc, yc^2]`` for diagonal
        covariances), ``yc = y - c``, one row per feature: the statistics are then one GEMM
        ``F weights``. Built row by row from contiguous (N,) products."""
        xp = get_namespace(Y)
        n, D = Y.shape
        # One transposing copy (the reshape of the transposed view): every op below then
        # runs on contiguous (N,) rows, several times faster in NumPy than on (N, D) columns.
        Yt = xp.reshape(xp.reshape(xp.matrix_transpose(Y), (D * n,)), (D, n))
        c = xp.sum(Yt, axis=1) / n  # (xp.mean is several NumPy calls)
        Yt = Yt - c[:, None]
        second = (xp.reshape(Yt[:, None, :] * Yt[None, :, :], (D * D, n))
                  if self.covariance == "full" else Yt * Yt)
        ones = xp.ones((1, n), dtype=Y.dtype, device=device_of(Y))
        return c, xp.concat([ones, Yt, second], axis=0)

    def _emission_statistics(self, weights, Y, features=None):
        xp = get_namespace(weights)
        K, D = self.num_states, self.dim
        if features is None:
            features = self._emission_features(Y)
        c, Ft = features
        moments = xp.matrix_transpose(Ft @ weights)  # (K, F), about the data mean c
        N = moments[:, 0]
        hc = moments[:, 1:1 + D]
        h = hc + N[:, None] * c
        # sum_t g_t y_t y_t^T = Qc + hc c^T + c hc^T + N c c^T = Qc + h c^T + c hc^T
        if self.covariance == "full":
            Q = (xp.reshape(moments[:, 1 + D:], (K, D, D)) + h[:, :, None] * c[None, None, :]
                 + c[None, :, None] * hc[:, None, :])
        else:
            Q = moments[:, 1 + D:] + (h + hc) * c
        return {"kappa": N, "h": h, "Q": Q, "nu": N}

    def _emission_kl(self):
        xp = get_namespace(self.posterior_["kappa"])
        D = self.dim
        kappa, m, S, nu = self._standard()
        kappa0, m0, S0, nu0 = self._standard_of(self.prior_)
        dm = m - m0
        if self.covariance == "full":
            L = xp.linalg.cholesky(S)
            Linv = xp.linalg.inv(L)
            S_inv = xp.matrix_transpose(Linv) @ Linv
            logdet = 2.0 * xp.sum(xp.log(xp.linalg.diagonal(L)), axis=-1)
            logdet0 = 2.0 * xp.sum(xp.log(xp.linalg.diagonal(xp.linalg.cholesky(S0))), axis=-1)
            trace = xp.sum(S0 * S_inv, axis=(-2, -1))
            # KL(W(nu, Psi^-1) || W(nu0, Psi0^-1)) for the precision, then the means given it.
            kl_w = (0.5 * (nu - nu0) * multidigamma(0.5 * nu, D) + 0.5 * nu0 * (logdet - logdet0)
                    + 0.5 * nu * (trace - D) - multigammaln(0.5 * nu, D)
                    + multigammaln(0.5 * nu0, D))
            quad = xp.sum(dm * xp.squeeze(S_inv @ dm[:, :, None], axis=-1), axis=-1)
            kl_m = 0.5 * (D * kappa0 / kappa - D + D * xp.log(kappa / kappa0)
                          + kappa0 * nu * quad)
            return xp.sum(kl_w + kl_m)
        a, a0 = 0.5 * nu[:, None], 0.5 * nu0[:, None]
        b, b0 = 0.5 * S, 0.5 * S0
        kl_g = ((a - a0) * digamma(a) - lgamma(a) + lgamma(a0) + a0 * (xp.log(b) - xp.log(b0))
                + a * (b0 - b) / b)
        ratio = kappa0[:, None] / kappa[:, None]
        kl_m = 0.5 * (ratio - 1.0 - xp.log(ratio) + kappa0[:, None] * (a / b) * dm * dm)
        return xp.sum(kl_g + kl_m)


class CategoricalHMM(HMMBase):
    """HMM with categorical emissions and Dirichlet priors on the emission rows.

    Parameters
    ----------
    num_states : int
        ``K >= 1`` hidden states.
    num_symbols : int
        ``M >= 1`` symbols; observations are integers in ``[0, M)``.
    seed : int
        Seed of the initialisation and, by default, of the SVI subchain draws.
    init_concentration, transition_concentration, emission_concentration : float
        Dirichlet prior concentrations.
    dtype : str, optional
        Floating dtype of the parameters (``"float32"`` or ``"float64"``); default
        ``GPNUM_DTYPE``.
    """

    def __init__(self, num_states, num_symbols, *, seed=0, init_concentration=1.0,
                 transition_concentration=1.0, emission_concentration=1.0, dtype=None):
        super().__init__(num_states, seed=seed, init_concentration=init_concentration,
                         transition_concentration=transition_concentration)
        self.num_symbols = check_int(num_symbols, "num_symbols", minimum=1,
                                     expected="an integer >= 1 (the number of symbols)")
        self.emission_concentration = check_positive(emission_concentration,
                                                     "emission_concentration")
        if dtype not in (None, "float32", "float64"):
            raise ValueError(f"dtype: expected 'float32' or 'float64', got {dtype!r}")
        self.dtype = dtype

    def _check_data(self, Y):
        if not is_array(Y):
            raise TypeError(f"Y: expected an integer array of shape (T,), got {type(Y).__name__}")
        xp = get_namespace(Y)
        if Y.ndim == 2 and Y.shape[1] == 1:
            Y = Y[:, 0]
        if Y.ndim != 1:
            raise ShapeError(f"Y: expected shape (T,), got {describe_shape(Y.shape)}")
        if Y.shape[0] < 1:
            raise ValueError("Y: expected at least one time step, got T = 0")
        if xp.isdtype(Y.dtype, "real floating"):
            check_finite(xp, Y, "Y")
            if not bool(xp.all(Y == xp.round(Y))):
                raise ValueError("Y: expected integer symbols in [0, num_symbols), got "
                                 "non-integer values")
            Y = xp.astype(Y, xp.int64)
        elif not xp.isdtype(Y.dtype, "integral"):
            raise TypeError(f"Y: expected integer symbols, got dtype {Y.dtype}")
        if not bool(xp.all((Y >= 0) & (Y < self.num_symbols))):
            raise ValueError(f"Y: expected integer symbols in [0, {self.num_symbols}), got values "
                             "outside that range")
        return Y

    def _param_dtype(self, Y):
        xp = get_namespace(Y)
        return default_dtype(xp) if self.dtype is None else getattr(xp, self.dtype)

    def _emission_prior(self, Y):
        xp = get_namespace(Y)
        return {"B": xp.full((self.num_states, self.num_symbols), self.emission_concentration,
                             dtype=self._param_dtype(Y), device=device_of(Y))}

    def _emission_init(self, Y, rng):
        xp = get_namespace(Y)
        K, M, T = self.num_states, self.num_symbols, Y.shape[0]
        host = rng.host().dirichlet([1.0] * M, size=K)  # small (K, M) draw on the host
        draws = asarray(host, dtype=self._param_dtype(Y), xp=xp, device=device_of(Y))
        return {"B": self.prior_["B"] + (float(T) / K) * draws}

    def _onehot(self, Y, dtype):
        xp = get_namespace(Y)
        symbols = xp.arange(self.num_symbols, dtype=Y.dtype, device=device_of(Y))
        return xp.astype(Y[:, None] == symbols[None, :], dtype)

    def _expected_log_lik(self, Y, features=None):
        xp = get_namespace(Y)
        w = self.posterior_["B"]
        elog = digamma(w) - digamma(xp.sum(w, axis=-1, keepdims=True))  # (K, M)
        return xp.take(xp.matrix_transpose(elog), Y, axis=0)

    def _log_lik_function(self):
        """:meth:`_expected_log_lik`, states first (K, N), its digammas done once."""
        w = self.posterior_["B"]
        xp = get_namespace(w)
        elog = digamma(w) - digamma(xp.sum(w, axis=-1, keepdims=True))  # (K, M)
        return lambda Y: xp.take(elog, Y, axis=1)

    def _mean_log_lik(self, Y):
        xp = get_namespace(Y)
        w = self.posterior_["B"]
        return xp.take(xp.matrix_transpose(xp.log(w / xp.sum(w, axis=-1, keepdims=True))), Y,
                       axis=0)

    def _emission_statistics(self, weights, Y, features=None):
        xp = get_namespace(weights)
        return {"B": xp.matrix_transpose(weights) @ self._onehot(Y, weights.dtype)}

    def _emission_kl(self):
        from gpnum.hmm._base import _dirichlet_kl

        return _dirichlet_kl(self.posterior_["B"], self.prior_["B"])

    def posterior_params(self):
        """The posterior Dirichlet concentrations: ``{"pi": (K,), "A": (K, K), "B": (K, M)}``."""
        self._require_fitted()
        return dict(self.posterior_)

    def emission_probs(self):
        """Posterior-mean emission probabilities (K, M)."""
        self._require_fitted()
        xp = get_namespace(self.posterior_["B"])
        w = self.posterior_["B"]
        return w / xp.sum(w, axis=-1, keepdims=True)
