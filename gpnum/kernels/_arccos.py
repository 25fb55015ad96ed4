"""The NNGP kernel of an infinitely wide fully-connected ReLU network (arc-cosine recursion)."""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.errors import ShapeError, check_int, describe_shape
from gpnum.kernels._base import Kernel

__all__ = ["ArcCosine"]

_INV_2PI = 1.0 / (2.0 * math.pi)


class ArcCosine(Kernel):
    """Covariance of an infinitely wide fully-connected ReLU network at initialisation (NNGP).

    For a network with ``depth`` hidden ReLU layers, weights of variance ``sigma_w,l^2 / width``
    and biases of variance ``sigma_b,l^2``, the output covariance follows the recursion of
    Lee et al. (2018, "Deep neural networks as Gaussian processes", eq. 5), whose step is the
    order-1 arc-cosine kernel of Cho & Saul (2009):

    ``K_0(x, x') = sigma_b,0^2 + sigma_w,0^2 x.x' / d``,

    ``K_l(x, x') = sigma_b,l^2 + sigma_w,l^2 / (2 pi) sqrt(K_{l-1}(x, x) K_{l-1}(x', x'))
    (sin t + (pi - t) cos t)``, with ``cos t = K_{l-1}(x, x') / sqrt(K_{l-1}(x, x) K_{l-1}(x', x'))``,

    for ``l = 1 .. depth``; the kernel is ``K_depth``. ``depth = 0`` is the linear kernel. On the
    diagonal ``t = 0`` and ``K_l(x, x) = sigma_b,l^2 + sigma_w,l^2 K_{l-1}(x, x) / 2``.

    The step's derivative in ``cos t`` is ``(pi - t) / pi``, bounded, and in the norms
    ``sin t / (2 pi)``, so the gradients are finite everywhere, including at coincident inputs.

    Parameters
    ----------
    depth : int
        Number of hidden ReLU layers, >= 0.
    weight_variance : float or array () or (depth + 1,)
        Positive weight variances ``sigma_w,l^2``, shared by all layers or one per layer
        (index 0 is the input layer).
    bias_variance : float or array () or (depth + 1,)
        Positive bias variances ``sigma_b,l^2``, shared or per layer.
    active_dims : list of int, optional
        The input columns the kernel sees (default all), as for :class:`gpnum.kernels.RBF`.
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.
    """

    _param_names = ("weight_variance", "bias_variance")
    _positive = ("weight_variance", "bias_variance")

    def __init__(self, depth=1, weight_variance=1.0, bias_variance=1.0, *, active_dims=None,
                 xp=None, dtype=None, device=None):
        self._set_active_dims(active_dims)
        dep = check_int(depth, "depth")
        self.depth = dep
        self._setup_namespace(xp, dtype, device, weight_variance, bias_variance)
        self.weight_variance = weight_variance
        self.bias_variance = bias_variance
        for name in self._param_names:
            arr = getattr(self, name)
            if not (arr.ndim == 0 or (arr.ndim == 1 and arr.shape[0] == dep + 1)):
                raise ShapeError(f"{name}: expected shape () or ({dep + 1},) for depth {dep}, "
                                 f"got {describe_shape(arr.shape)}")

    def _repr_extra(self):
        return [f"depth={self.depth}"]

    def _layer(self, name, layer):
        arr = getattr(self, name)
        return arr if arr.ndim == 0 else arr[layer]

    def _collect(self, name, per_layer):
        """Per-layer gradients -> the parameter's shape (summed when shared)."""
        xp = self.xp
        if getattr(self, name).ndim == 0:
            total = per_layer[0]
            for g in per_layer[1:]:
                total = total + g
            return total
        return xp.stack(per_layer)

    # ---------------------------------------------------------------------------- forward
    # The (n1, n2) temporaries are updated in place where the array is this code's own: on
    # NumPy every fresh array of that size is page-faulted in anew, which otherwise costs more
    # than the arithmetic (docs/benchmarks.md).
    def _forward(self, X1, X2, keep):
        """Run the recursion; returns the final ``K``, the layer-0 pieces and per-layer caches.

        Each cache holds ``(k1, k2, nrm, pi - t, sin t, E)`` of one layer.
        """
        xp = get_namespace(X1)
        same = X2 is None
        d = X1.shape[1]
        Xb = X1 if same else X2
        S = X1 @ Xb.T
        if same:
            S = (S + S.T) * 0.5
        S *= 1.0 / float(d)
        s1 = xp.sum(X1 * X1, axis=1) / float(d)
        s2 = s1 if same else xp.sum(Xb * Xb, axis=1) / float(d)
        w0, b0 = self._layer("weight_variance", 0), self._layer("bias_variance", 0)
        K = w0 * S
        K += b0
        k1 = b0 + w0 * s1
        k2 = k1 if same else b0 + w0 * s2
        eye = None
        if same and self.depth > 0:
            idx = xp.arange(X1.shape[0], device=device_of(X1))
            eye = idx[:, None] == idx[None, :]
        caches = []
        for layer in range(1, self.depth + 1):
            nrm = xp.sqrt(k1)[:, None] * xp.sqrt(k2)[None, :]
            c = K  # K (this code's own array) is not needed after this layer: divide in place
            c /= nrm
            c = xp.clip(c, -1.0, 1.0)
            if eye is not None:
                # The diagonal is exactly t = 0: no rounding puts c just below 1 there. (The
                # backward pass needs no special case: with K(x, x) and the norm moving together,
                # dE/dK = 1/2 at t = 0 gives the same gradient as E = nrm / 2.)
                c = xp.where(eye, xp.ones_like(c), c)
            # sin t from t itself, so that near t = 0 it cancels consistently against (pi - t) cos t
            # (forming sqrt(1 - c^2) separately would not).
            pmt = xp.acos(c)
            sin = xp.sin(pmt)
            pmt *= -1.0
            pmt += math.pi  # pi - t
            E = pmt * c
            E += sin
            E *= nrm
            E *= _INV_2PI
            w, b = self._layer("weight_variance", layer), self._layer("bias_variance", layer)
            if keep:
                caches.append((k1, k2, nrm, pmt, sin, E))
                K = w * E
            else:
                K = E
                K *= w
            K += b
            k1 = b + (0.5 * w) * k1
            k2 = k1 if same else b + (0.5 * w) * k2
        return K, (S, s1, s2), caches

    def _gram(self, X1, X2):
        return self._forward(X1, X2, keep=False)[0]

    def _diag_levels(self, X):
        xp = get_namespace(X)
        s = xp.sum(X * X, axis=1) / float(X.shape[1])
        k = self._layer("bias_variance", 0) + self._layer("weight_variance", 0) * s
        levels = [k]
        for layer in range(1, self.depth + 1):
            k = self._layer("bias_variance", layer) + (0.5 * self._layer("weight_variance", layer)) * k
            levels.append(k)
        return s, levels

    def _diag(self, X):
        return self._diag_levels(X)[1][-1]

    # --------------------------------------------------------------------------- backward
    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        same = X2 is None
        d = X1.shape[1]
        _, (S, s1, s2), caches = self._forward(X1, X2, keep=True)
        n1 = X1.shape[0]
        n2 = n1 if same else X2.shape[0]
        Gl = G
        g1 = xp.zeros((n1,), dtype=G.dtype, device=device_of(G))  # cotangent of K_l(x, x)
        g2 = xp.zeros((n2,), dtype=G.dtype, device=device_of(G))  # ... of K_l(x', x')
        gw = [None] * (self.depth + 1)
        gb = [None] * (self.depth + 1)
        for layer in range(self.depth, 0, -1):
            k1, k2, nrm, pmt, sin, E = caches[layer - 1]
            w = self._layer("weight_variance", layer)
            gb[layer] = xp.sum(Gl) + xp.sum(g1) + xp.sum(g2)
            gw[layer] = xp.sum(Gl * E) + 0.5 * (xp.sum(g1 * k1) + xp.sum(g2 * k2))
            # E = nrm J(c) / 2 with c = K / nrm: dE/dK = (pi - t) / (2 pi) and
            # dE/dnrm = sin t / (2 pi); nrm = sqrt(k1 k2) gives d nrm / d k1 = nrm / (2 k1).
            Hn = w * Gl
            Hn *= sin
            Hn *= nrm
            Hn *= 0.5 * _INV_2PI
            g1 = xp.sum(Hn, axis=1) / k1 + (0.5 * w) * g1
            g2 = xp.sum(Hn, axis=0) / k2 + (0.5 * w) * g2
            Gl = w * Gl
            Gl *= pmt
            Gl *= _INV_2PI
        gb[0] = xp.sum(Gl) + xp.sum(g1) + xp.sum(g2)
        gw[0] = xp.sum(Gl * S) + xp.sum(g1 * s1) + xp.sum(g2 * s2)
        scale = self._layer("weight_variance", 0) / float(d)
        params = {"weight_variance": self._collect("weight_variance", gw),
                  "bias_variance": self._collect("bias_variance", gb)}
        if same:
            gX = scale * ((Gl + Gl.T) @ X1 + 2.0 * ((g1 + g2)[:, None] * X1))
            return params, gX, None
        gX1 = scale * (Gl @ X2 + 2.0 * (g1[:, None] * X1))
        gX2 = scale * (Gl.T @ X1 + 2.0 * (g2[:, None] * X2))
        return params, gX1, gX2

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        s, levels = self._diag_levels(X)
        gw = [None] * (self.depth + 1)
        gb = [None] * (self.depth + 1)
        gk = g
        for layer in range(self.depth, 0, -1):
            gb[layer] = xp.sum(gk)
            gw[layer] = 0.5 * xp.sum(gk * levels[layer - 1])
            gk = (0.5 * self._layer("weight_variance", layer)) * gk
        gb[0] = xp.sum(gk)
        gw[0] = xp.sum(gk * s)
        scale = 2.0 * self._layer("weight_variance", 0) / float(X.shape[1])
        params = {"weight_variance": self._collect("weight_variance", gw),
                  "bias_variance": self._collect("bias_variance", gb)}
        return params, scale * (gk[:, None] * X)
