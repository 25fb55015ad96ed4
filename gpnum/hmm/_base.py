"""Conjugate mean-field variational Bayes for HMMs: batch VB and SVI with subchains and GrowBuf.

Model (Foti, Xu, Laird & Fox 2014, "Stochastic variational inference for hidden Markov models",
NeurIPS): ``x_0 ~ pi``, ``x_t | x_{t-1} ~ A[x_{t-1}]``, ``y_t | x_t ~ p(y | phi_{x_t})``,
with Dirichlet priors on ``pi`` and on each row of ``A`` and a conjugate prior on each ``phi_k``.
Mean field ``q(pi) q(A) q(phi) q(x)``; every global factor stays in its prior's family and is stored
by its natural parameters ``w``, so that a global step is ``w <- prior + statistics`` (batch) or
``w <- (1 - rho) w + rho (prior + scaled statistics)`` (SVI).

Subchain statistics (the batch factors). A subchain is ``L`` consecutive steps starting at ``s``,
``s`` uniform on ``{0, ..., T - L}`` (``T - L + 1`` choices), ``S`` subchains per step. The emission
at ``t`` lies in ``c_e(t) = min(t, T - L) - max(0, t - L + 1) + 1`` subchains (``L`` away from the
ends), the transition into ``t`` (pair ``t - 1, t``) in ``c_a(t) = min(t - 1, T - L) - max(0,
t - L + 1) + 1`` (``L - 1`` away from the ends), the initial state only in the subchain starting at
0. Weighting each subchain's emission term at ``t`` by ``(T - L + 1) / (S c_e(t))``, its transition
term by ``(T - L + 1) / (S c_a(t))`` and its initial term by ``(T - L + 1) / S`` makes the
expectation over the draw of the subchains equal the whole chain's statistics exactly (ends
included), for any local marginals that do not depend on which subchain produced them (e.g. with
a buffer covering the chain). With local marginals from truncated subchains the remaining bias is
the buffer's business (GrowBuf, Foti et al., Algorithm 2).
"""

from __future__ import annotations

import math
import time

from gpnum.backend import default_rng, device_of, get_namespace
from gpnum.errors import check_int, check_positive
from gpnum.hmm._inference import forward_backward
from gpnum.hmm._subchains import start_range, subchain_posterior
from gpnum.hmm._viterbi import viterbi
from gpnum.special import digamma, lgamma

__all__ = ["HMMBase"]

#: GrowBuf stops growing a buffer beyond this many multiples of the subchain length by default.
_MAX_BUFFER_FACTOR = 50


def _dirichlet_kl(w, w0):
    """``KL(Dir(w) || Dir(w0))`` along the last axis (summed over leading axes)."""
    xp = get_namespace(w)
    sw = xp.sum(w, axis=-1)
    sw0 = xp.sum(w0, axis=-1)
    kl = (lgamma(sw) - xp.sum(lgamma(w), axis=-1) - lgamma(sw0) + xp.sum(lgamma(w0), axis=-1)
          + xp.sum((w - w0) * (digamma(w) - digamma(sw)[..., None]), axis=-1))
    return xp.sum(kl)


def _stationary(xp, A):
    """Stationary distribution of the row-stochastic (K, K) ``A``: ``p (I - A + 1 1^T) = 1``
    (which makes ``sum p = 1``: multiply by ``1`` on the right and use ``A 1 = 1``)."""
    K = A.shape[0]
    dev = device_of(A)
    M = (xp.eye(K, dtype=A.dtype, device=dev) + 1.0) - xp.matrix_transpose(A)
    # p = M^-1 1 as the row sums of the inverse: NumPy's solve wraps the same LAPACK call in
    # more Python; M is well conditioned
    # (its condition number is about 1 / (1 - |lambda_2(A)|)).
    p = xp.sum(xp.linalg.inv(M), axis=1)
    return xp.maximum(p, 1e-30)  # rounding can leave a rare state slightly negative


class HMMBase:
    """Shared variational machinery of :class:`GaussianHMM` and :class:`CategoricalHMM`.

    Subclasses provide the emission family: data checks, priors, initialisation, expected log
    likelihoods, sufficient statistics, the emission KL and posterior-mean log likelihoods.
    Natural parameters live in ``self.posterior_`` (a dict of arrays keyed ``"pi"``, ``"A"`` and
    the emission keys), the prior in ``self.prior_`` with the same keys.
    """

    def __init__(self, num_states, *, seed=0, init_concentration=1.0,
                 transition_concentration=1.0):
        self.num_states = check_int(num_states, "num_states", minimum=1,
                                    expected="an integer >= 1 (the number of hidden states)")
        self.seed = check_int(seed, "seed", minimum=0)
        self.init_concentration = check_positive(init_concentration, "init_concentration")
        self.transition_concentration = check_positive(transition_concentration,
                                                       "transition_concentration")
        self.prior_ = None
        self.posterior_ = None

    # ------------------------------------------------------------ emission-family hooks
    def _check_data(self, Y):  # -> validated array
        raise NotImplementedError

    def _emission_prior(self, Y):  # -> dict of natural parameters
        raise NotImplementedError

    def _emission_init(self, Y, rng):  # -> dict of natural parameters (posterior start)
        raise NotImplementedError

    def _expected_log_lik(self, Y, features=None):
        # (N, ...), _emission_features(Y) or None -> (N, K)
        raise NotImplementedError

    def _log_lik_function(self):
        """``Y (N, ...) -> (K, N)``: the expected log likelihoods under the current posterior,
        states first (the SVI local step's layout: NumPy is several times slower on arrays
        whose last axis is as short as K). A family may do its parameter work once here (the
        buffers of one SVI step share it)."""
        xp = get_namespace(self.posterior_["A"])
        return lambda Y: xp.matrix_transpose(self._expected_log_lik(Y))

    def _emission_features(self, Y):  # (N, ...) -> per-fit data terms (model-specific) or None
        return None

    def _emission_statistics(self, weights, Y, features=None):
        # (N, K), (N, ...), _emission_features(Y) or None -> dict like the prior
        raise NotImplementedError

    def _emission_kl(self):  # -> scalar array
        raise NotImplementedError

    def _mean_log_lik(self, Y):  # (N, ...) -> (N, K) under posterior-mean parameters
        raise NotImplementedError

    # ----------------------------------------------------------------------- set-up
    def _namespace_of(self, Y):
        xp = get_namespace(Y)
        return xp, device_of(Y)

    def initialize(self, Y):
        """Set the priors (from the data where a prior is not given) and a starting posterior.

        Called by :meth:`fit` unless ``warm_start=True`` and the model has a posterior.
        The emission start is data-driven (k-means centres for Gaussian emissions, random
        Dirichlet draws for categorical), the initial and transition factors start at the prior
        plus uniform pseudo-counts of the chain's size.
        """
        Y = self._check_data(Y)
        xp, dev = self._namespace_of(Y)
        dtype = self._param_dtype(Y)
        K, T = self.num_states, Y.shape[0]
        self.prior_ = {
            "pi": xp.full((K,), self.init_concentration, dtype=dtype, device=dev),
            "A": xp.full((K, K), self.transition_concentration, dtype=dtype, device=dev),
        }
        self.prior_.update(self._emission_prior(Y))
        rng = default_rng(self.seed, xp=xp, device=dev)
        self.posterior_ = {
            "pi": self.prior_["pi"] + 1.0 / K,
            "A": self.prior_["A"] + float(max(T - 1, 1)) / (K * K),
        }
        self.posterior_.update(self._emission_init(Y, rng))
        return self

    def _param_dtype(self, Y):
        return Y.dtype

    def _require_fitted(self):
        if self.posterior_ is None:
            raise RuntimeError(f"{type(self).__name__}: call fit (or initialize) first")

    # ---------------------------------------------------------------- expectations
    def _expected_log_params(self):
        """``(E log pi (K,), E log A (K, K))`` under the Dirichlet factors, ``psi(w) -
        psi(sum w)`` row by row, over the stacked rows of both (one pass instead of two: an
        SVI step pays per array operation)."""
        xp = get_namespace(self.posterior_["A"])
        w = xp.concat([self.posterior_["pi"][None, :], self.posterior_["A"]], axis=0)
        rows = digamma(w) - digamma(xp.sum(w, axis=-1, keepdims=True))
        return rows[0, :], rows[1:, :]

    def _kl(self):
        """``KL(q(theta) || p(theta))`` of all global factors."""
        return (_dirichlet_kl(self.posterior_["pi"], self.prior_["pi"])
                + _dirichlet_kl(self.posterior_["A"], self.prior_["A"])
                + self._emission_kl())

    def _local(self, Y, features=None):
        """Local step on the whole chain: forward-backward under the expected log parameters."""
        log_pi, log_A = self._expected_log_params()
        log_lik = self._expected_log_lik(Y, features)
        return forward_backward(log_pi, log_A, log_lik, check=False)

    def _statistics_from(self, fb, Y, emission_weights=None, init_weights=None, features=None):
        """Sufficient statistics ``{key: array}`` from forward-backward output of one chain
        (``features``: ``_emission_features(Y)``, when the caller keeps them across calls)."""
        gamma = fb.marginals
        if emission_weights is not None:
            gamma = gamma * emission_weights[..., None]
        stats = {"pi": fb.marginals[0, :] if init_weights is None else init_weights,
                 "A": fb.pairwise}
        stats.update(self._emission_statistics(gamma, Y, features))
        return stats

    def elbo(self, Y):
        """Evidence lower bound of the data under the current ``q(theta)``.

        With ``q(x)`` at its optimum for ``q(theta)`` (forward-backward under the expected log
        parameters), ``E_q[log p(y, x | theta)] + H[q(x)] = log Z~``, the log normaliser of that
        forward-backward, so ``ELBO = log Z~ - KL(q(theta) || p(theta))``: the expected log joint,
        the entropy of ``q(x)`` and the KL of the globals, all included.

        Parameters
        ----------
        Y : array
            The observed chain (see the subclass for the shape).

        Returns
        -------
        float
        """
        self._require_fitted()
        Y = self._check_data(Y)
        fb = self._local(Y)
        return float(fb.log_normalizer - self._kl())

    def decode(self, Y):
        """Most probable state path under the expected log parameters (Viterbi).

        Returns
        -------
        array (T,) of int64
        """
        self._require_fitted()
        Y = self._check_data(Y)
        log_pi, log_A = self._expected_log_params()
        path, _ = viterbi(log_pi, log_A, self._expected_log_lik(Y), check=False)
        return path

    def predict_proba(self, Y):
        """Posterior state marginals ``q(x_t = k)`` (T, K) under the current ``q(theta)``."""
        self._require_fitted()
        return self._local(self._check_data(Y)).marginals

    def posterior_mean_params(self):
        """``(pi, A)``: posterior means of the initial distribution and transition matrix."""
        self._require_fitted()
        xp = get_namespace(self.posterior_["A"])
        w_pi, w_A = self.posterior_["pi"], self.posterior_["A"]
        return w_pi / xp.sum(w_pi), w_A / xp.sum(w_A, axis=-1, keepdims=True)

    def score(self, Y):
        """Log likelihood ``log p(Y | theta_bar)`` under the posterior-mean parameters.

        As hmmlearn's ``score`` for its variational models: the forward algorithm with the
        posterior means of ``pi``, ``A`` and the emission parameters plugged in.
        """
        self._require_fitted()
        Y = self._check_data(Y)
        pi, A = self.posterior_mean_params()
        xp = get_namespace(A)
        fb = forward_backward(xp.log(pi), xp.log(A), self._mean_log_lik(Y), check=False)
        return float(fb.log_normalizer)

    # ------------------------------------------------------------------------ fitting
    def fit(self, Y, method="vb", *, max_iter=100, tol=1e-7, subchain_length=None,
            num_subchains=10, buffer="grow", steps=1000, tau=1.0, kappa=0.6, seed=None,
            grow_step=None, grow_tol=1e-3, max_buffer=None, eval_every=0, warm_start=False,
            verbose=False):
        """Fit ``q(theta)`` by batch VB or by stochastic VI over subchains.

        Parameters
        ----------
        Y : array
            One observed chain (see the subclass for the shape and dtype).
        method : {"vb", "svi"}
            ``"vb"``: coordinate ascent on the whole chain (local forward-backward, then the
            global step ``w = prior + statistics``), at most ``max_iter`` iterations, stopping
            when the ELBO gains less than ``tol * |ELBO|``. ``"svi"``: ``steps`` stochastic
            steps, each over ``num_subchains`` subchains of ``subchain_length`` steps
            (Foti et al. 2014, Algorithm 1).
        max_iter, tol : int, float
            Batch VB budget and relative ELBO tolerance.
        subchain_length : int
            ``L`` (SVI), ``2 <= L <= T``. Default ``min(T, 100)``.
        num_subchains : int
            ``S`` subchains per SVI step.
        buffer : "grow", int or None
            ``"grow"``: GrowBuf (Foti et al., Algorithm 2): extend every buffer by ``grow_step``
            steps on each side until the interior marginals change by less than ``grow_tol``
            (max abs), at most ``max_buffer`` (default ``50 L``); an int: a fixed buffer of that
            many steps on each side; ``None`` or 0: no buffer. A buffer stops at the chain's
            ends; one that reaches its start starts from ``q(pi)``, any other from the
            stationary distribution of the expected transition matrix.
        steps, tau, kappa : int, float, float
            SVI step count and step sizes ``rho_t = (t + tau)^-kappa``, ``t = 1, 2, ...``
            (``tau >= 0``, ``0.5 < kappa <= 1`` for Robbins-Monro; ``kappa = 0`` gives ``rho = 1``).
        seed : int, optional
            Seed of the subchain draws (default the model's ``seed``).
        eval_every : int
            SVI: evaluate the full-chain ELBO every this many steps (0: only after the last
            step). The evaluation time is excluded from the recorded times.
        grow_step, grow_tol, max_buffer : int, float, int
            GrowBuf settings (see ``buffer``).
        warm_start : bool
            Start from the current posterior instead of :meth:`initialize`.
        verbose : bool
            Print the ELBO after every batch iteration / SVI evaluation.

        Returns
        -------
        dict
            ``{"elbo": [...], "time": [...], "step": [...]}``: the ELBO after each batch
            iteration's local step (batch VB, non-decreasing) or at each evaluation (SVI), the
            fitting time in seconds up to then, and the iteration/step number. SVI also records
            ``"buffer"``: the buffer length used at each step.
        """
        Y = self._check_data(Y)
        # All arguments are checked before the (possibly long) initialisation.
        if method == "vb":
            settings = (check_int(max_iter, "max_iter", minimum=1),
                        check_positive(tol, "tol", allow_zero=True))
        elif method == "svi":
            settings = self._svi_settings(Y.shape[0], subchain_length, num_subchains, buffer,
                                          steps, tau, kappa, seed, grow_step, grow_tol,
                                          max_buffer, eval_every)
        else:
            raise ValueError(f"method: expected 'vb' or 'svi', got {method!r}")
        if not warm_start or self.posterior_ is None:
            self.initialize(Y)
        if method == "vb":
            return self._fit_vb(Y, *settings, verbose)
        return self._fit_svi(Y, *settings, verbose)

    def _global_step(self, stats, rho=1.0):
        """``w <- (1 - rho) w + rho (prior + stats)`` for every natural parameter."""
        new = {}
        for key, w in self.posterior_.items():
            target = self.prior_[key] + stats[key]
            new[key] = target if rho == 1.0 else (1.0 - rho) * w + rho * target
        self.posterior_ = new

    def _fit_vb(self, Y, max_iter, tol, verbose):
        history = {"elbo": [], "time": [], "step": []}
        start = time.perf_counter()
        previous = -math.inf
        features = self._emission_features(Y)  # the data's part of the statistics, once
        for it in range(max_iter):
            fb = self._local(Y, features)
            value = float(fb.log_normalizer - self._kl())  # ELBO at (new q(x), current q(theta))
            history["elbo"].append(value)
            self._global_step(self._statistics_from(fb, Y, features=features))
            history["time"].append(time.perf_counter() - start)
            history["step"].append(it + 1)
            if verbose:
                print(f"vb iteration {it + 1}: ELBO {value:.6g}")
            if value - previous <= tol * abs(value):
                break
            previous = value
        return history

    # ----------------------------------------------------------------------------- SVI
    def _subchain_statistics(self, Y, starts, L, buffer, *, num_subchains=None,
                             grow_step=None, grow_tol=1e-3, max_buffer=None,
                             expected_buffer=None):
        """Scaled sufficient statistics of subchains starting at ``starts`` (S,) (device ints).

        Returns the statistics dict (already multiplied by the batch factors in the module
        docstring, so that their expectation over uniform starts is the whole chain's) and the
        buffer length used.
        """
        xp = get_namespace(starts)
        T = Y.shape[0]
        S = starts.shape[0] if num_subchains is None else num_subchains
        dev = device_of(starts)
        log_pi0, log_A = self._expected_log_params()
        # Expected log parameters are finite (digamma differences of positive weights); one
        # global shift keeps the rows' relative weights and puts the largest entry at 1.
        A = xp.exp(log_A - xp.max(log_A))
        # A subchain whose buffer does not reach the chain's start starts from the stationary
        # distribution of the expected transition matrix (Foti et al.: pi-hat), not from q(pi).
        stationary = _stationary(xp, A / xp.sum(A, axis=-1, keepdims=True))
        dtype = self.prior_["A"].dtype
        n_starts = float(T - L + 1)
        # Batch factors (module docstring) of the interiors (S, L): c_e(t) = min(t, T - L) -
        # max(0, t - L + 1) + 1 = min(t + 1, T - t, L, T - L + 1) and, for the pair (t - 1, t),
        # c_a(t) = min(t, T - t, L - 1, T - L + 1) (as minima: fewer operations than clips).
        # Both are their constant caps for starts in L - 1 .. T - 2 L + 1 (all but those near
        # the chain's ends: one synchronisation on the first and last start tells).
        first_last = start_range(starts)
        if L - 1 <= first_last[0] and first_last[1] <= T - 2 * L + 1:
            drawn = starts.shape[0]  # (S scales the factors; it may differ from this)
            c_e = xp.full((drawn, L), float(min(L, T - L + 1)), dtype=dtype, device=dev)
            c_a = xp.full((drawn, L - 1), float(min(L - 1, T - L + 1)), dtype=dtype, device=dev)
        else:
            position = starts[:, None] + xp.arange(L, dtype=starts.dtype, device=dev)[None, :]
            to_end = T - position
            c_e = xp.astype(xp.minimum(xp.minimum(position + 1, to_end), min(L, T - L + 1)),
                            dtype)
            c_a = xp.astype(xp.minimum(xp.minimum(position[:, 1:], to_end[:, 1:]),
                                       min(L - 1, T - L + 1)), dtype)
        w_e = (n_starts / S) / c_e
        w_a = (n_starts / S) / c_a
        post = subchain_posterior(
            log_pi0, stationary, A, self._log_lik_function(), Y, starts, L,
            buffer, transition_weights=w_a, grow_tol=grow_tol,
            grow_step=max(1, L // 4) if grow_step is None else grow_step,
            max_buffer=(_MAX_BUFFER_FACTOR * L if max_buffer is None else max_buffer),
            expected_buffer=expected_buffer, first_last=first_last)
        gamma = post.marginals  # (S, L, K)
        if post.first_start == 0:  # only the subchain at the chain's start holds its state
            first = xp.astype(starts == 0, dtype) * (n_starts / S)
            pi = xp.matmul(first, gamma[:, 0, :])
        else:
            pi = xp.zeros((self.num_states,), dtype=dtype, device=dev)
        stats = {"pi": pi, "A": post.pairwise}
        # The weighted marginals states first (K, S L) (the local step's own layout: the
        # permutation is a contiguous view), passed as their (S L, K) transpose: the
        # statistics are a GEMM either way, and NumPy scales a last axis of K several times
        # slower than one of L.
        weights = xp.reshape(xp.permute_dims(gamma, (2, 0, 1)) * w_e[None, ...],
                             (self.num_states, L * S))
        stats.update(self._emission_statistics(xp.matrix_transpose(weights), post.rows))
        return stats, post.buffer

    def _svi_settings(self, T, L, S, buffer, steps, tau, kappa, seed, grow_step, grow_tol,
                      max_buffer, eval_every):
        """Validated SVI arguments, in the order :meth:`_fit_svi` takes them."""
        # L >= 2: a subchain of one step holds no transition, and its statistics could not
        # estimate the transition counts (each transition lies in L - 1 subchains).
        L = min(T, 100) if L is None else check_int(
            L, "subchain_length", minimum=2, expected="an integer >= 2 (a subchain must hold a "
            "transition)")
        if L > T:
            raise ValueError(f"subchain_length: expected at most the sequence length T = {T}, "
                             f"got L = {L} (the sequence is shorter than a subchain)")
        S = check_int(S, "num_subchains", minimum=1)
        steps = check_int(steps, "steps", minimum=1)
        tau = check_positive(tau, "tau", allow_zero=True)
        kappa = check_positive(kappa, "kappa", allow_zero=True)
        eval_every = check_int(eval_every, "eval_every", minimum=0)
        seed = self.seed if seed is None else check_int(seed, "seed", minimum=0)
        if buffer is None or buffer == "none":
            buffer = 0
        if buffer == "grow":
            grow_step = max(1, L // 4) if grow_step is None else check_int(
                grow_step, "grow_step", minimum=1)
            grow_tol = check_positive(grow_tol, "grow_tol")
            if max_buffer is not None:
                max_buffer = check_int(max_buffer, "max_buffer", minimum=0)
        elif isinstance(buffer, str):
            raise ValueError(f"buffer: expected 'grow', an integer >= 0 or None, got {buffer!r}")
        else:
            buffer = check_int(buffer, "buffer", minimum=0,
                               expected="'grow', an integer >= 0 or None")
        return L, S, buffer, steps, tau, kappa, seed, grow_step, grow_tol, max_buffer, eval_every

    def _fit_svi(self, Y, L, S, buffer, steps, tau, kappa, seed, grow_step, grow_tol,
                 max_buffer, eval_every, verbose):
        xp, dev = self._namespace_of(Y)
        T = Y.shape[0]
        rng = default_rng(seed, xp=xp, device=dev)
        history = {"elbo": [], "time": [], "step": [], "buffer": []}
        elapsed = 0.0
        b = None  # GrowBuf's last buffer: the likely next one (spares work, changes nothing)
        for t in range(1, steps + 1):
            tic = time.perf_counter()
            starts = rng.integers(0, T - L + 1, (S,))
            stats, b = self._subchain_statistics(Y, starts, L, buffer, grow_step=grow_step,
                                                 grow_tol=grow_tol, max_buffer=max_buffer,
                                                 expected_buffer=b)
            rho = (t + tau) ** (-kappa)
            self._global_step(stats, rho)
            elapsed += time.perf_counter() - tic
            history["buffer"].append(b)
            if (eval_every and t % eval_every == 0) or t == steps:
                value = self.elbo(Y)
                history["elbo"].append(value)
                history["time"].append(elapsed)
                history["step"].append(t)
                if verbose:
                    print(f"svi step {t}: ELBO {value:.6g} ({elapsed:.3g} s, buffer {b})")
        return history
