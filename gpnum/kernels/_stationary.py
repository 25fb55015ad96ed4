"""Stationary kernels of the scaled distance: RBF and the Matern family, scalar or ARD.

Each is ``k(x, x') = variance * h(r)`` with ``r^2 = sum_k (x_k - x'_k)^2 / lengthscale_k^2``
(Rasmussen & Williams 2006, section 4.2). The lengthscale has shape () (shared) or (d,)
(automatic relevance determination, one per input column).

Gradients are written through ``dh/d(r^2)``, which is finite at ``r = 0`` for RBF, Matern-3/2 and
Matern-5/2, so coincident points need no special case. Matern-1/2 is ``exp(-r)``: not
differentiable in the inputs at coincident points, where ``dh/d(r^2) = -exp(-r) / (2 r)`` is
unbounded. There gpnum takes the zero subgradient (the centre of the set of one-sided
derivatives, which are ``-|direction| / lengthscale`` in every direction): input gradients get no
contribution from exactly coincident pairs. Hyper-parameter gradients are exact everywhere,
because a coincident pair stays at ``r = 0`` whatever the lengthscale.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, flat_dot, get_namespace, matmul
from gpnum.errors import ShapeError, describe_shape
from gpnum.kernels._base import Kernel
from gpnum.kernels._distance import SqdistVJPRows, sqdist, sqdist_upper_blocks, sqdist_vjp

__all__ = ["Stationary", "RBF", "Matern12", "Matern32", "Matern52"]

#: Elements of one block of rows (512 KiB in float64) for the gram matrix of one set of points
#: and the backward passes: the block's distances, profile and slope stay in the 2 MiB L2
#: cache between their elementwise passes; faster than 2 MiB blocks and than the two-set
#: path's whole (n, n) passes (docs/benchmarks.md,
#: asv_benchmarks/scripts/stationary_blocked_vs_whole.py).
_BLOCK_ELEMENTS = 2**16
#: Fewest rows per block (the mirrored write below the diagonal copies this many contiguous
#: elements per row).
_MIN_BLOCK_ROWS = 16

_SQRT3 = math.sqrt(3.0)
_SQRT5 = math.sqrt(5.0)


class LengthscaleVariance(Kernel):
    """A kernel with a positive ``lengthscale`` (shared, or one per input column) and a
    positive ``variance``: their checks, once, for :class:`Stationary` and :class:`Cosine`."""

    _param_names = ("lengthscale", "variance")
    _positive = ("lengthscale", "variance")

    def __init__(self, lengthscale=1.0, variance=1.0, *, active_dims=None, xp=None, dtype=None,
                 device=None):
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device, lengthscale, variance)
        self.lengthscale = lengthscale
        self.variance = variance
        self._require_ndim("lengthscale", (0, 1))
        self._require_ndim("variance", (0,))

    def _check_dim(self, d, name):
        ell = self.lengthscale
        if ell.ndim == 1 and ell.shape[0] != d:
            raise ShapeError(f"{name}: expected {ell.shape[0]} columns to match lengthscale of "
                             f"shape {describe_shape(ell.shape)}, got {d}")


class Stationary(LengthscaleVariance):
    """``variance * h(r)`` of the lengthscale-scaled distance ``r``; subclasses give ``h``.

    Parameters
    ----------
    lengthscale : float or array () or (d,)
        Positive lengthscale, shared or one per input column (ARD).
    variance : float or array ()
        Positive signal variance ``k(x, x)``.
    active_dims : list of int, optional
        The input columns the kernel sees (default: all). Inputs keep their full width; the
        input gradients are zero in the other columns. The lengthscale's (d,) counts only
        these columns.
    xp, dtype, device : optional
        Namespace, floating dtype and device of the parameters (default: those of an array
        argument, else ``GPNUM_BACKEND`` / ``GPNUM_DTYPE``). Inputs must match them.
    """

    #: Whether dh/d(r^2) stays bounded as r -> 0. Then the backward pass may sum over the
    #: distance cotangent by matrix products (gpnum.kernels._distance, "expansion"): its
    #: rounding error is that of the exact per-dimension form, at a fifth of the time for
    #: d = 2. Matern-1/2's slope grows like 1/r, so it keeps the exact form for small d.
    _bounded_slope = True
    #: ``c`` when ``dh/d(r^2) = c h`` (RBF: -1/2), so that a backward pass can read the slope
    #: off the gram matrix instead of keeping an array of it; None otherwise.
    _slope_per_profile = None

    # h(r) and dh/d(r^2), both as functions of r^2 ---------------------------------------
    def _profile(self, r2):
        """``h`` at ``r2``; may overwrite ``r2`` (the gram path owns it; in-place updates save
        (n1, n2) allocations, which dominate at large sizes)."""
        raise NotImplementedError

    def _profile_and_slope(self, r2):
        """``(h, dh/d(r^2))`` at ``r2``, two new arrays; ``r2`` is left unchanged."""
        raise NotImplementedError

    def _extra_grads(self, G, r2, h):
        """Gradients of ``sum(G * variance * h(r2))`` w.r.t. parameters other than the
        lengthscale and variance (none here; RationalQuadratic's alpha)."""
        return {}

    def _scaled(self, X1, X2):
        ell = self.lengthscale
        return X1 / ell, (None if X2 is None else X2 / ell)

    def _gram(self, X1, X2):
        A, B = self._scaled(X1, X2)
        if B is None:
            return self._gram_same(A, with_slope=False)[0]
        K = self._profile(sqdist(A, B))
        K *= self.variance
        return K

    def _gram_same(self, A, with_slope):
        """``k(A, A)`` (n, n) from its upper block rows only, and (``with_slope``) those rows'
        ``dh/d(r^2)`` and, for a shared lengthscale, ``r^2``: a list of ``(i0, i1, slope, r2)``
        with blocks (i1 - i0, n - i0) (``r2`` None for ARD).

        Each block row's distances, profile and slope are formed while in cache and mirrored
        below the diagonal: the result is exactly symmetric, the transcendental work is halved
        and no (n, n) temporary is made (every fresh (n, n) array costs its page faults on
        NumPy). The backward pass needs the slope of the
        upper block rows only (:meth:`_blocked_vjp`), so it is never mirrored.
        """
        xp = get_namespace(A)
        n = A.shape[0]
        K = xp.empty((n, n), dtype=A.dtype, device=device_of(A))
        var = self.variance
        keep_r2 = self.lengthscale.ndim == 0  # the backward needs r^2 for a shared lengthscale
        rows = []
        for i0, i1, r2 in sqdist_upper_blocks(A, block_elements=_BLOCK_ELEMENTS,
                                              min_rows=_MIN_BLOCK_ROWS):
            if with_slope and self._slope_per_profile is not None:
                # dh/dr^2 = c h: the backward reads it off K's block, no slope array
                h = self._profile(r2 * 1.0)  # r2 is kept for the backward
                rows.append((i0, i1, None, r2 if keep_r2 else None))
            elif with_slope:
                h, slope = self._profile_and_slope(r2)  # leaves r2 as it was
                rows.append((i0, i1, slope, r2 if keep_r2 else None))
            else:
                h = self._profile(r2)
            h *= var
            K[i0:i1, i0:] = h
            if i1 < n:
                K[i1:, i0:i1] = xp.matrix_transpose(h[:, i1 - i0:])
        return K, rows

    def _blocked_vjp(self, A, B, blocks, inputs=True):
        """Gradients of ``sum(G * k(A, B))`` from the cotangent in blocks: ``blocks`` yields
        ``(s, e, c0, G_blk, K_blk, slope_blk, r2_blk)`` for rows ``s:e`` and columns ``c0:``,
        ``G_blk`` a new array (``r2_blk`` only for a shared lengthscale). ``B`` None: the upper
        block rows of one set, each ``G_blk`` the cotangent of the pairs of points there.
        ``inputs=False``: the parameters' gradients only (``(params, None, None)``); a shared
        lengthscale then needs no input-gradient work at all."""
        xp = get_namespace(A)
        var = self.variance
        ard = self.lengthscale.ndim == 1
        acc = None
        if ard or inputs:
            acc = SqdistVJPRows(A, B, per_dim=ard, exact=False if self._bounded_slope else None)
        g_var = S = 0.0
        for s, e, c0, W, K_blk, slope_blk, r2_blk in blocks:
            # an in-cache product, not vecdot (NumPy's may thread a long row in its own BLAS)
            g_var = g_var + xp.sum(W * K_blk)
            if slope_blk is None:  # dh/dr^2 = c h, and K_blk = var h
                W *= K_blk
                W *= self._slope_per_profile
            else:
                W *= slope_blk
                W *= var  # now the cotangent of the block's r^2
            if acc is not None:
                acc.add(W, s, e, c0)
            if not ard:
                S = S + flat_dot(W, r2_blk)
        gA = gB = S_dims = None
        if acc is not None:
            gA, gB, S_dims = acc.result()
        return self._params_and_input_grads(gA, gB, S_dims if ard else S, g_var / var)

    def _gram_and_vjp(self, X1, X2):
        xp = get_namespace(X1)
        var = self.variance
        A, B = self._scaled(X1, X2)
        ard = self.lengthscale.ndim == 1
        if B is None:
            K, rows = self._gram_same(A, with_slope=True)

            def upper_blocks(pair_block):
                # pair_block(i0, i1): G[i0:i1, i0:] + G[i0:, i0:i1]^T, a new array
                for i0, i1, slope, r2 in rows:
                    W = pair_block(i0, i1)
                    W[:, :i1 - i0] *= 0.5  # the diagonal tile holds each of its pairs twice
                    yield i0, i1, i0, W, K[i0:i1, i0:], slope, r2

            def inner(G, inputs=True):
                return self._blocked_vjp(A, None, upper_blocks(
                    lambda i0, i1: G[i0:i1, i0:] + xp.matrix_transpose(G[i0:, i0:i1])),
                    inputs=inputs)

            def low_rank(U, V):
                # G = U V^T: the pair block U_I V_J^T + V_I U_J^T is one GEMM of rank 2p.
                # Every product goes to SciPy's BLAS (backend.matmul): alternating with NumPy's
                # would keep both OpenBLAS pools spinning on 2 cores.
                UV, VU = xp.concat([U, V], axis=1), xp.concat([V, U], axis=1)
                return self._blocked_vjp(A, None, upper_blocks(
                    lambda i0, i1: matmul(UV[i0:i1, :], xp.matrix_transpose(VU[i0:, :]))))

            inner.low_rank = low_rank
            inner.params_only = lambda G: inner(G, inputs=False)[0]
            return K, inner

        r2 = sqdist(A, B)
        K, slope = self._profile_and_slope(r2)
        K *= var  # the backward needs r2 and the slope; sum(G * h) = sum(G * K) / var
        if ard:
            r2 = None

        def inner(G, inputs=True):
            W = G * slope
            W *= var
            g_var = flat_dot(G, K) / var  # sum(G * K) without an (n1, n2) temporary
            return self._grads_from_r2_cotangent(W, A, B, r2, g_var, inputs=inputs)

        def low_rank(U, V):
            # G = U V^T in blocks of rows: neither G nor G * slope is ever (n1, n2); SciPy's
            # BLAS for every product, as above
            n1 = A.shape[0]
            step = max(_MIN_BLOCK_ROWS, _BLOCK_ELEMENTS // max(1, B.shape[0]))

            def row_blocks():
                for s in range(0, n1, step):
                    e = min(n1, s + step)  # in-bounds stops: the standard leaves others open
                    yield (s, e, 0, matmul(U[s:e, :], xp.matrix_transpose(V)), K[s:e, :],
                           slope[s:e, :], None if ard else r2[s:e, :])

            return self._blocked_vjp(A, B, row_blocks())

        inner.low_rank = low_rank
        inner.params_only = lambda G: inner(G, inputs=False)[0]
        return K, inner

    def _diag(self, X):
        xp = get_namespace(X)
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + self.variance

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        A, B = self._scaled(X1, X2)
        r2 = sqdist(A, B)
        h, slope = self._profile_and_slope(r2)
        g_var = xp.sum(G * h)
        W = slope  # cotangent of r^2, G * variance * slope, formed in the slope's buffer
        W *= self.variance
        W *= G
        return self._grads_from_r2_cotangent(W, A, B, r2, g_var)

    def _grads_from_r2_cotangent(self, W, A, B, r2, g_var, inputs=True):
        """Parameter and input gradients given the cotangent ``W`` of the scaled ``r^2``
        (``inputs=False``: parameters only, input gradients None)."""
        ard = self.lengthscale.ndim == 1
        gA = gB = S = None
        if ard or inputs:
            gA, gB, S = sqdist_vjp(W, A, B, per_dim=ard,
                                   exact=False if self._bounded_slope else None)
        if not ard:
            S = flat_dot(W, r2)
        return self._params_and_input_grads(gA, gB, S, g_var)

    def _params_and_input_grads(self, gA, gB, S, g_var):
        """Gradients from those w.r.t. the scaled inputs and ``S``: per column
        ``sum_ij W_ij (a_ik - b_jk)^2`` (ARD), or ``sum(W * r^2)`` (shared lengthscale).
        ``gA`` None: no input gradients (None, None)."""
        ell = self.lengthscale
        # r^2 depends on lengthscale_k through 1/lengthscale_k^2: d r^2 / d ell_k = -2 r_k^2 / ell_k
        g_ell = -2.0 * S / ell
        params = {"lengthscale": g_ell, "variance": g_var}
        if gA is None:
            return params, None, None
        return params, gA / ell, (None if gB is None else gB / ell)

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        params = {"lengthscale": xp.zeros_like(self.lengthscale), "variance": xp.sum(g)}
        return params, xp.zeros_like(X)


class RBF(Stationary):
    """Squared-exponential kernel ``variance * exp(-r^2 / 2)``.

    Infinitely differentiable; see :class:`Stationary` for the parameters.
    """

    _slope_per_profile = -0.5

    def _profile(self, r2):
        xp = get_namespace(r2)
        r2 *= -0.5
        return xp.exp(r2)

    def _profile_and_slope(self, r2):
        xp = get_namespace(r2)
        h = xp.exp(-0.5 * r2)
        return h, -0.5 * h


class Matern12(Stationary):
    """Matern-1/2 (exponential, Ornstein-Uhlenbeck) kernel ``variance * exp(-r)``.

    At exactly coincident points the input gradient uses the zero subgradient (module notes);
    hyper-parameter gradients are exact. See :class:`Stationary` for the parameters.
    """

    _bounded_slope = False

    def _profile(self, r2):
        xp = get_namespace(r2)
        r = xp.sqrt(r2)
        r *= -1.0
        return xp.exp(r)

    def _profile_and_slope(self, r2):
        xp = get_namespace(r2)
        r = xp.sqrt(r2)
        h = xp.exp(-r)
        positive = r2 > 0.0
        safe_r = xp.where(positive, r, xp.ones_like(r))  # no division by zero, even unused
        slope = xp.where(positive, -0.5 * h / safe_r, xp.zeros_like(r))
        return h, slope


def _matern_exponential(r2, scale):
    """``-scale r`` and ``exp(-scale r)`` at ``r = sqrt(r2)``: the factors every half-integer
    Matern profile shares (Rasmussen & Williams 2006, eq. 4.17)."""
    xp = get_namespace(r2)
    neg_sr = xp.sqrt(r2)
    neg_sr *= -scale
    return neg_sr, xp.exp(neg_sr)


class Matern32(Stationary):
    """Matern-3/2 kernel ``variance * (1 + sqrt(3) r) exp(-sqrt(3) r)``.

    Once differentiable; ``dh/d(r^2) = -3/2 exp(-sqrt(3) r)`` is finite at ``r = 0``.
    See :class:`Stationary` for the parameters.
    """

    def _profile(self, r2):
        neg_sr, h = _matern_exponential(r2, _SQRT3)
        neg_sr -= 1.0
        neg_sr *= h  # -(1 + sqrt(3) r) exp(-sqrt(3) r)
        neg_sr *= -1.0
        return neg_sr

    def _profile_and_slope(self, r2):
        neg_sr, e = _matern_exponential(r2, _SQRT3)
        h = neg_sr
        h -= 1.0
        h *= e
        h *= -1.0  # (1 + sqrt(3) r) exp(-sqrt(3) r)
        e *= -1.5
        return h, e


class Matern52(Stationary):
    """Matern-5/2 kernel ``variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``.

    Twice differentiable; ``dh/d(r^2) = -5/6 (1 + sqrt(5) r) exp(-sqrt(5) r)``.
    See :class:`Stationary` for the parameters.
    """

    def _profile(self, r2):
        neg_sr, h = _matern_exponential(r2, _SQRT5)
        r2 *= 5.0 / 3.0
        r2 -= neg_sr
        r2 += 1.0  # 1 + sqrt(5) r + 5 r^2 / 3
        r2 *= h
        return r2

    def _profile_and_slope(self, r2):
        neg_sr, e = _matern_exponential(r2, _SQRT5)
        h = r2 * (5.0 / 3.0)
        h -= neg_sr
        h += 1.0
        h *= e  # (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)
        slope = neg_sr
        slope -= 1.0
        slope *= e
        slope *= 5.0 / 6.0  # -5/6 (1 + sqrt(5) r) exp(-sqrt(5) r)
        return h, slope
