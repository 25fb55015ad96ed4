"""SVGP's forward pieces: whitened cross-covariances and the marginals of q(f(X)).

The private half of :class:`gpnum.models.SVGP` (a mixin it inherits): ``K_ZZ`` and ``K_ZX``
with their kernel backward functions, ``A = W^{-1} K_ZX`` through the model's whitening strategy
(:mod:`gpnum.models._whitening`), one set of inducing points or one per latent function, and
``mu = c + A^T m'``, ``var = diag(K_XX) - colsum(A * A) + colsum(A * (S' A))`` (Hensman,
Matthews & Ghahramani 2015, whitened as in Pleiss et al. 2020, section 4, "Whitened Stochastic
Variational Gaussian Processes"). q's two arrays come with a leading latent axis in either
variational form.
"""

from __future__ import annotations

from gpnum.backend import matmul
from gpnum.errors import NotPSDError

__all__ = ["WhitenedMarginals"]


class WhitenedMarginals:
    """Mixin of :class:`gpnum.models.SVGP`: whitening, marginals and q with a latent axis.

    Uses the model's ``kernel``, ``inducing_points``, ``jitter``, ``whitening_strategy``,
    ``num_latent``, ``separate_inducing``, ``mean``, ``variational`` and q's arrays.
    """

    # ------------------------------------------------------------------ whitening
    def _kzz(self, with_jitter=True, with_vjp=False, Z=None):
        """(K_ZZ (+ jitter I), the kernel's backward function or None unless ``with_vjp``);
        ``Z`` (m, d): one latent's set (default: the shared set)."""
        xp = self.xp
        Z = self.inducing_points if Z is None else Z
        K, vjp = self.kernel.gram_and_vjp(Z) if with_vjp else (self.kernel(Z), None)
        if self.jitter and with_jitter:
            K = K + self.jitter * xp.eye(Z.shape[0], dtype=K.dtype, device=self._device)
        return K, vjp

    def _whiten(self, Kzx, reuse=None, need_grad=False, latent=None):
        """A = W^{-1} K_ZX by the whitening strategy, and what its backward pass needs.

        ``reuse``: what :meth:`_reusable` returned for the current K_ZZ (prediction chunks,
        sampling): K_ZZ is then neither formed nor factorised again. ``need_grad``: keep the
        kernel's backward function for K_ZZ. Separate inducing points: ``Kzx`` (L, m, b) gives
        ``A`` (L, m, b) and a cache ``{"latents": [one cache per latent]}``; with ``latent``
        given, ``Kzx`` (m, b) is whitened against that latent's K_ZZ alone.
        """
        if self.separate_inducing and latent is None:
            As, caches = [], []
            for lat in range(self.num_latent):
                A_l, c_l = self._whiten(Kzx[lat, ...], None if reuse is None else reuse[lat],
                                        need_grad, latent=lat)
                As.append(A_l)
                caches.append(c_l)
            return self.xp.stack(As), {"latents": caches}
        Z = None if latent is None else self.inducing_points[latent, ...]
        Kzz, kzz_vjp = (None, None) if reuse is not None else self._kzz(with_jitter=False,
                                                                        with_vjp=need_grad, Z=Z)
        try:
            A, cache = self.whitening_strategy.whiten(Kzz, Kzx, self.jitter, reuse,
                                                      slot=latent)
        except NotPSDError as exc:
            which = "" if latent is None else f" of latent {latent}"
            raise self._not_psd(f"K_ZZ{which} + jitter I (m = {self.num_inducing}, jitter = "
                                f"{self.jitter:g})", exc) from None
        cache["kzz_vjp"] = kzz_vjp
        return A, cache

    def _reusable(self, cache):
        """What later whitenings against the same K_ZZ (one per latent if separate) reuse."""
        if self.separate_inducing:
            return [self.whitening_strategy.reusable(c) for c in cache["latents"]]
        return self.whitening_strategy.reusable(cache)

    def _kzx(self, X, need_grad=False):
        """K_ZX (m, b), or (L, m, b) for separate inducing points, and the kernel's backward
        function(s) (a list of one per latent if separate) when ``need_grad``."""
        Z = self.inducing_points
        if not self.separate_inducing:
            return self.kernel.gram_and_vjp(Z, X) if need_grad else (self.kernel(Z, X), None)
        Ks, vjps = [], []
        for lat in range(self.num_latent):
            if need_grad:
                K_l, vjp_l = self.kernel.gram_and_vjp(Z[lat, ...], X)
                vjps.append(vjp_l)
            else:
                K_l = self.kernel(Z[lat, ...], X)
            Ks.append(K_l)
        return self.xp.stack(Ks), (vjps if need_grad else None)

    def _whiten_backward(self, A, cache, A_bar):
        """(K_ZZ_bar (m, m), K_ZX_bar (m, b)) from the cotangent of A."""
        return self.whitening_strategy.backward(A, cache, A_bar)

    # ------------------------------------------------------------------ forward pieces
    def _marginals(self, X, reuse=None, need_grad=False):
        """mu, var (b, L) of q(f(X)) and the intermediates of the backward pass."""
        xp = self.xp
        Kzx, kzx_vjp = self._kzx(X, need_grad)
        A, cache = self._whiten(Kzx, reuse, need_grad)
        kdiag = self.kernel.diag(X)
        q = self._q_pair()
        q_mu, var_q, qcache = self.variational.marginal_terms(q, A)
        if self.separate_inducing:  # A (L, m, b): each latent's own colsum and mean
            base = xp.matrix_transpose(kdiag[None, :] - xp.sum(A * A, axis=1))
            mu = self.mean + xp.matrix_transpose(xp.sum(A * q_mu[:, :, None], axis=1))
        else:
            base = (kdiag - xp.sum(A * A, axis=0))[:, None]
            mu = self.mean + matmul(A.T, q_mu.T)  # (b, L); matmul: one BLAS pool on NumPy
        var = base + var_q
        # Round-off can push a variance that is ~0 in exact arithmetic (X on top of Z) below
        # zero; the floor keeps the likelihood's domain and its gradient is zero there.
        floor = 1e-12 if self.dtype == xp.float64 else 1e-6
        var_ok = var > floor
        var = xp.where(var_ok, var, floor)
        return mu, var, {"var_ok": var_ok, "A": A, "q": q, "q_cache": qcache, "q_mean": q_mu,
                         "whiten": cache, "kzx_vjp": kzx_vjp}

    def _squeeze(self, a):
        return a[:, 0] if self.num_latent == 1 else a


    # ------------------------------------------------------------------ q with a latent axis
    def _q_pair(self):
        """q's two arrays in the current form, with a leading latent axis."""
        return self._q() if self._form == "cholesky" else self._q_natural()

    def _q(self):
        """q_mu (L, m) and q_sqrt (L, m, m) with a leading latent axis (Cholesky form)."""
        if self._form != "cholesky":
            raise RuntimeError("the model holds q in natural form; call to_cholesky() first")
        if self.num_latent == 1:
            return self.q_mu[None, :], self.q_sqrt[None, :, :]
        return self.q_mu, self.q_sqrt

    def _q_natural(self):
        """q_theta1 (L, m) and q_precision (L, m, m) with a leading latent axis."""
        if self.num_latent == 1:
            return self.q_theta1[None, :], self.q_precision[None, :, :]
        return self.q_theta1, self.q_precision
