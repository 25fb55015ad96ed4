"""Sparse GP regression with Titsias' (2009) collapsed variational bound (SGPR).

Titsias, M. K. (2009), "Variational learning of inducing variables in sparse Gaussian
processes", AISTATS: with the optimal ``q(u)`` integrated out, the evidence lower bound is

    ELBO = log N(y | c, Q_nn + sigma^2 I) - tr(K_nn - Q_nn) / (2 sigma^2),
    Q_nn = K_nZ K_ZZ^{-1} K_Zn.

Computed as GPflow's ``SGPR`` does, in O(n m^2) time and O(n m) memory, never with an n x n
matrix: ``P = K_ZZ + jitter I = L L^T``, ``A = L^{-1} K_Zn`` (m, n), ``B = I + A A^T / sigma^2
= L_B L_B^T`` (m, m), residual ``r = y - c`` and ``v_c = L_B^{-1} A r / sigma^2``:

    ELBO = -n/2 log(2 pi sigma^2) - sum_i log (L_B)_ii - r^T r / (2 sigma^2) + |v_c|^2 / 2
           - (sum_i k(x_i, x_i) - |A|_F^2) / (2 sigma^2).

Gradients (derived for this module; Woodbury and the determinant lemma with
``M = P + K_Zn K_nZ / sigma^2 = L B L^T``): with ``Sigma = Q_nn + sigma^2 I``,
``alpha = Sigma^{-1} r = (r - A^T B^{-1} A r / sigma^2) / sigma^2`` and ``v = A alpha``,

    K_Zn_bar  = L^{-T} [ v alpha^T + (A - B^{-1} A) / sigma^2 ]                      (m, n)
    K_ZZ_bar  = -1/2 L^{-T} [ v v^T + C B^{-1} C ] L^{-1},     C = A A^T / sigma^2     (m, m)
    diag(K_nn)_bar = -1 / (2 sigma^2)
    sigma^2_bar = 1/2 (alpha^T alpha - (n - m + tr B^{-1}) / sigma^2)
                  + (sum_i k(x_i, x_i) - |A|_F^2) / (2 sigma^4)
    c_bar = sum(alpha)

(``C B^{-1} C = B + B^{-1} - 2 I``, written in the product form that keeps its positive
definiteness and loses nothing to cancellation when ``B`` is close to ``I``.) The kernel's
backward functions turn the first three into gradients w.r.t. its parameters and the inducing
points.
"""

from __future__ import annotations

import math

from gpnum.backend import asarray, cholesky, matmul, solve_triangular
from gpnum.errors import NotPSDError, ShapeError, check_finite, describe_shape
from gpnum.models._composite import FullBatchGaussianModel

__all__ = ["SGPR"]

_LOG_2PI = math.log(2.0 * math.pi)


class SGPR(FullBatchGaussianModel):
    """Sparse GP regression by Titsias' collapsed bound, with inducing inputs ``Z``.

    Parameters
    ----------
    kernel : gpnum.kernels.Kernel
        Covariance function (its parameters are learned).
    likelihood : gpnum.likelihoods.Gaussian
        Gaussian observation noise; its ``variance`` ``sigma^2`` is learned. Any other
        likelihood raises ``TypeError`` (the bound is closed-form only for Gaussian noise: use
        SVGP).
    X : array (n, d)
        Training inputs, n >= 1. Their namespace, device and floating dtype become the model's;
        the kernel and the likelihood must share them.
    y : array (n,)
        Training targets.
    Z : array (m, d)
        Initial inducing inputs (learned: the parameter ``inducing_points``).
    mean : float or array ()
        Initial constant prior mean ``c`` (learned).
    jitter : float, optional
        Added to the diagonal of ``K_ZZ`` (default 1e-6). If the Cholesky factorisation still
        fails it is retried with growing extra jitter before :class:`gpnum.NotPSDError` is
        raised.

    Attributes
    ----------
    mean : array ()
    inducing_points : array (m, d)
    X, y : arrays (n, d), (n,)
        The training data (read-only).
    full_batch : bool
        True: the bound needs the whole data set.

    Notes
    -----
    Parameters are reported as a flat dict (:meth:`parameters`): ``mean``,
    ``inducing_points``, ``kernel.<name>``, ``likelihood.variance``. With ``Z = X`` the bound
    equals the exact log marginal likelihood of :class:`~gpnum.models.GPR` up to the
    jitter.

    float32: as in SVGP's Cholesky whitening, the kernel matrices are formed (and
    back-propagated) in the working dtype but everything between them -- the two Cholesky
    factorisations, the triangular solves and the products, O(n m^2) -- runs in float64, and
    the results are cast back. A float32 factorisation of ``K_ZZ`` with a small jitter loses most
    digits (inducing-point gradients off by ~10% at m = 100 with an RBF kernel; ~3% remains
    from the float32 kernel matrices themselves).

    References
    ----------
    Titsias, M. K. (2009). Variational learning of inducing variables in sparse Gaussian
    processes. AISTATS, PMLR 5:567-574.
    Rasmussen, C. E. & Williams, C. K. I. (2006). Gaussian Processes for Machine Learning,
    MIT Press, chapter 2 (the exact model the bound approximates).
    """

    _param_names = ("mean", "inducing_points")
    _positive = ()
    _default_jitter = 1e-6

    def __init__(self, kernel, likelihood, X, y, Z, *, mean=0.0, jitter=None):
        self._setup(kernel, likelihood, X, y, mean, jitter)
        Z = asarray(Z, dtype=self.dtype, xp=self.xp, device=self._device)
        d = self._X.shape[1]
        if Z.ndim != 2 or Z.shape[1] != d or Z.shape[0] < 1:
            raise ShapeError(f"Z: expected shape (m, {d}) with m >= 1 (the {d} columns of X), "
                             f"got {describe_shape(Z.shape)}")
        check_finite(self.xp, Z, "Z")
        self.inducing_points = Z

    @classmethod
    def _own_init_args(cls, params):
        # Z is a required constructor argument: the inducing points' shape is fixed there.
        args = super()._own_init_args(params)
        args["Z"] = params["inducing_points"]
        return args

    @property
    def num_inducing(self) -> int:
        """Number of inducing points ``m``."""
        return self.inducing_points.shape[0]

    # ------------------------------------------------------------------ forward pieces
    def _factors(self, X, y, need_vjp):
        """The factors shared by the bound and the predictions (module notes).

        Returns a dict with ``L`` (m, m), ``A = L^{-1} K_ZX`` (m, n), ``C = A A^T / sigma^2``,
        ``LB`` (m, m, Cholesky of ``I + C``), ``resid = y - c`` (n,), ``c_vec`` (m,) and
        ``s2`` (the noise variance), all in float64 (class notes), and the kernel's backward
        functions for ``K_ZZ`` and ``K_ZX`` (None unless ``need_vjp``).
        """
        xp = self.xp
        Z = self.inducing_points
        high = xp.float64
        s2 = xp.astype(self.likelihood.variance, high, copy=False)
        if need_vjp:
            Kzz, kzz_vjp = self.kernel.gram_and_vjp(Z)
            Kzx, kzx_vjp = self.kernel.gram_and_vjp(Z, X)
        else:
            Kzz, Kzx = self.kernel(Z), self.kernel(Z, X)
            kzz_vjp = kzx_vjp = None
        # The jitter as cholesky's shift: K_ZZ itself stays unmodified for the backward pass.
        try:
            L = cholesky(xp.astype(Kzz, high, copy=False), shift=self.jitter,
                         what="SGPR's K_ZZ")
        except NotPSDError as exc:
            raise self._not_psd(f"K_ZZ + jitter I (m = {Z.shape[0]}, jitter = "
                                f"{self.jitter:g})", exc) from None
        A = solve_triangular(L, xp.astype(Kzx, high, copy=False), lower=True)
        C = matmul(A, A.T) / s2
        LB = cholesky(C + xp.eye(Z.shape[0], dtype=high, device=self._device))
        resid = xp.astype(y, high, copy=False) - xp.astype(self.mean, high, copy=False)
        c_vec = solve_triangular(LB, A @ resid, lower=True) / s2
        return {"L": L, "A": A, "C": C, "LB": LB, "resid": resid, "c_vec": c_vec, "s2": s2,
                "kzz_vjp": kzz_vjp, "kzx_vjp": kzx_vjp}

    def _bound(self, X, y, need_grad):
        """Titsias' bound on (X, y) and, if ``need_grad``, its gradients (module notes)."""
        xp = self.xp
        high = xp.float64
        n = X.shape[0]
        m = self.inducing_points.shape[0]
        f = self._factors(X, y, need_grad)
        L, A, C, LB, resid, c_vec = f["L"], f["A"], f["C"], f["LB"], f["resid"], f["c_vec"]
        s2 = f["s2"]
        kdiag = xp.astype(self.kernel.diag(X), high, copy=False)
        trace = xp.sum(kdiag) - xp.sum(A * A)  # tr(K_nn - Q_nn)
        value = (-0.5 * n * (_LOG_2PI + xp.log(s2)) - xp.sum(xp.log(xp.linalg.diagonal(LB)))
                 - 0.5 * xp.sum(resid * resid) / s2 + 0.5 * xp.sum(c_vec * c_vec)
                 - 0.5 * trace / s2)
        value = self._scalar(value)
        if not need_grad:
            return value, None
        # alpha = Sigma^{-1} r by Woodbury: B^{-1} A r = L_B^{-T} (sigma^2 v_c).
        alpha = (resid - A.T @ solve_triangular(LB, c_vec, lower=True, trans=True)) / s2
        v = A @ alpha
        LB_inv = solve_triangular(LB, xp.eye(m, dtype=high, device=self._device), lower=True)
        B_inv = matmul(LB_inv.T, LB_inv)
        inner_zx = v[:, None] * alpha[None, :] + (A - matmul(B_inv, A)) / s2
        Kzx_bar = solve_triangular(L, inner_zx, lower=True, trans=True)
        D = matmul(C, LB_inv.T)  # C B^{-1} C = D D^T
        inner_zz = v[:, None] * v[None, :] + matmul(D, D.T)
        # -1/2 L^{-T} H L^{-1} by two triangular solves: (L^{-T} (L^{-T} H)^T)^T.
        Kzz_bar = -0.5 * solve_triangular(
            L, solve_triangular(L, inner_zz, lower=True, trans=True).T, lower=True,
            trans=True).T
        g_noise = (0.5 * (xp.sum(alpha * alpha) - (n - m + xp.sum(LB_inv * LB_inv)) / s2)
                   + 0.5 * trace / (s2 * s2))
        # The kernel's backward passes run in the working dtype.
        gzz = f["kzz_vjp"](xp.astype(Kzz_bar, self.dtype, copy=False))
        gzx = f["kzx_vjp"](xp.astype(Kzx_bar, self.dtype, copy=False))
        g_diag = xp.zeros((n,), dtype=self.dtype, device=self._device) - (
            0.5 / self.likelihood.variance)
        gdiag = self.kernel.diag_vjp(g_diag, X)
        grads = {"mean": self._scalar(xp.sum(alpha)),
                 "inducing_points": gzz["X1"] + gzx["X1"]}
        for name, param in self.kernel.parameters().items():
            grads[f"kernel.{name}"] = self._shaped(
                gzz["params"][name] + gzx["params"][name] + gdiag["params"][name], param.shape)
        grads["likelihood.variance"] = self._shaped(g_noise, self.likelihood.variance.shape)
        return value, grads

    # ------------------------------------------------------------------ public API
    def elbo(self):
        """Titsias' collapsed evidence lower bound on the training data, a 0-d array.

        ``log N(y | c, Q_nn + sigma^2 I) - tr(K_nn - Q_nn) / (2 sigma^2)`` (Titsias 2009,
        eq. 9), a lower bound on the exact log marginal likelihood.
        """
        return self._bound(self._X, self._y, False)[0]

    def elbo_and_grad(self):
        """:meth:`elbo` and its gradients.

        Returns
        -------
        value : 0-d array
        grads : dict
            Keyed like :meth:`parameters` (``mean``, ``inducing_points`` (m, d),
            ``kernel.<name>``, ``likelihood.variance``), natural form, each shaped like its
            parameter.
        """
        return self._bound(self._X, self._y, True)

    def _objective_and_grad(self, X, y):
        return self._bound(X, y, True)

    def _prediction_state(self):
        # The optimal q(u) (Titsias 2009, eq. 10) through the factors of the bound.
        return self._factors(self._X, self._y, False)

    def _predict(self, Xnew, state, full_cov):
        # With T1 = L^{-1} K_Z* and T2 = L_B^{-1} T1 (GPflow's SGPR.predict_f):
        # mean = c + T2^T v_c, cov = K_** - T1^T T1 + T2^T T2 (the products in float64).
        xp = self.xp
        high = xp.float64
        Kzs = xp.astype(self.kernel(self.inducing_points, Xnew), high, copy=False)
        T1 = solve_triangular(state["L"], Kzs, lower=True)
        T2 = solve_triangular(state["LB"], T1, lower=True)
        mean = self.mean + xp.astype(T2.T @ state["c_vec"], self.dtype, copy=False)
        if full_cov:
            cov = (xp.astype(self.kernel(Xnew), high, copy=False) - matmul(T1.T, T1)
                   + matmul(T2.T, T2))
            return mean, xp.astype(cov, self.dtype, copy=False)
        var = (xp.astype(self.kernel.diag(Xnew), high, copy=False) - xp.sum(T1 * T1, axis=0)
               + xp.sum(T2 * T2, axis=0))
        return mean, xp.astype(var, self.dtype, copy=False)
