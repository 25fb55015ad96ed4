"""Change-point kernels: sigmoid switching between kernels along one input column."""

from __future__ import annotations

from gpnum.backend import asarray, get_namespace
from gpnum.errors import ShapeError, describe_shape
from gpnum.kernels._nested import ParentKernel, check_children

__all__ = ["ChangePoints"]


def _sigmoid(xp, z):
    return 0.5 * (1.0 + xp.tanh(0.5 * z))  # no overflow warnings for large |z|


class ChangePoints(ParentKernel):
    """Kernels that take over from each other at change points (Lloyd et al. 2014).

    With ``m`` locations ``l_j`` (increasing) and steepnesses ``a_j``, the switch
    ``s_j(x) = sigmoid(a_j (x_0 - l_j))`` moves from 0 to 1 around ``l_j`` along column 0 of the
    inputs the kernel sees. Kernel ``i`` (of ``m + 1``) is weighted by
    ``w_i(x) = s_{i-1}(x) (1 - s_i(x))`` (``s_{-1} = 1``, ``s_m = 0``), and
    ``k(x, x') = sum_i w_i(x) k_i(x, x') w_i(x')``: a sum of kernels each multiplied by a
    rank-one kernel, hence positive semi-definite. As GPflow's ``ChangePoints``.

    Parameters
    ----------
    kernels : list of Kernel
        ``m + 1`` kernels (distinct objects, one namespace, dtype and device); their
        parameters appear as ``"i.<name>"``. They see the same columns as this kernel.
    locations : float or array (m,)
        Change-point locations (unconstrained).
    steepness : float or array () or (m,)
        Positive steepness of the switches (shared or one per change point).
    active_dims : list of int, optional
        The input columns this kernel sees (default all); column 0 of them is switched on.
    """

    _param_names = ("locations", "steepness")
    _positive = ("steepness",)
    _children_arg = "kernels"

    def __init__(self, kernels, locations=0.0, steepness=1.0, *, active_dims=None):
        kernels = tuple(kernels) if isinstance(kernels, (list, tuple)) else (kernels,)
        if len(kernels) < 2:
            raise ValueError(f"ChangePoints: expected at least two kernels, got {len(kernels)}")
        check_children("ChangePoints", kernels)
        self._set_active_dims(active_dims)
        self.kernels = kernels
        first = kernels[0]
        self._init_namespace(first.xp, first.dtype, first._device)
        xp = first.xp
        m = len(kernels) - 1
        loc = asarray(locations, dtype=first.dtype, xp=xp, device=first._device)
        self.locations = xp.reshape(loc, (1,)) if loc.ndim == 0 else loc
        self.steepness = steepness
        if self.locations.ndim != 1 or self.locations.shape[0] != m:
            raise ShapeError(f"locations: expected shape ({m},) for {m + 1} kernels, got "
                             f"{describe_shape(self.locations.shape)}")
        if not (self.steepness.ndim == 0 or tuple(self.steepness.shape) == (m,)):
            raise ShapeError(f"steepness: expected shape () or ({m},), got "
                             f"{describe_shape(self.steepness.shape)}")

    def _children(self):
        return [(str(i), k) for i, k in enumerate(self.kernels)]

    def __repr__(self):
        extra = "" if self.active_dims is None else f", active_dims={list(self.active_dims)}"
        return (f"ChangePoints([{', '.join(repr(k) for k in self.kernels)}], "
                f"locations={self._host_repr(self.locations)}, "
                f"steepness={self._host_repr(self.steepness)}{extra})")

    # ---------------------------------------------------------------------------- weights
    def _switches(self, X):
        """``(s (n, m), weights [w_i (n,)], starts, stops)`` at the rows of ``X``."""
        xp = get_namespace(X)
        x = X[:, 0]
        s = _sigmoid(xp, self.steepness * (x[:, None] - self.locations[None, :]))
        ones = xp.ones_like(x)
        m = s.shape[1]
        starts = [ones] + [s[:, j] for j in range(m)]
        stops = [1.0 - s[:, j] for j in range(m)] + [ones]
        return s, [a * b for a, b in zip(starts, stops, strict=False)], starts, stops

    def _switch_grads(self, X, gws):
        """Cotangents of the weights at ``X`` -> (g_locations, g_steepness, g_X)."""
        xp = get_namespace(X)
        s, _, starts, stops = self._switches(X)
        m = s.shape[1]
        # w_i = start_i stop_i with start_{j+1} = s_j and stop_j = 1 - s_j
        gs = xp.stack([gws[j + 1] * stops[j + 1] - gws[j] * starts[j] for j in range(m)], axis=1)
        gz = gs * s * (1.0 - s)  # (n, m), cotangent of z = a (x - l)
        x = X[:, 0]
        diff = x[:, None] - self.locations[None, :]
        g_a = xp.sum(gz * diff, axis=0)
        if self.steepness.ndim == 0:
            g_a = xp.sum(g_a)
        g_loc = -xp.sum(gz, axis=0) * self.steepness
        gx = xp.sum(gz * (xp.zeros_like(self.locations) + self.steepness)[None, :], axis=1)
        zero = xp.zeros_like(x)
        gX = xp.stack([gx] + [zero] * (X.shape[1] - 1), axis=1)
        return g_loc, g_a, gX

    # ----------------------------------------------------------------------------- values
    def _gram(self, X1, X2):
        _, w1, _, _ = self._switches(X1)
        w2 = w1 if X2 is None else self._switches(X2)[1]
        K = None
        for k, a, b in zip(self.kernels, w1, w2, strict=False):
            term = k._sel_gram(X1, X2) * (a[:, None] * b[None, :])
            K = term if K is None else K + term
        return K

    def _diag(self, X):
        _, w, _, _ = self._switches(X)
        out = None
        for k, a in zip(self.kernels, w, strict=False):
            term = k._sel_diag(X) * (a * a)
            out = term if out is None else out + term
        return out

    def _gram_vjp(self, G, X1, X2):
        _, w1, _, _ = self._switches(X1)
        w2 = w1 if X2 is None else self._switches(X2)[1]
        params, g1, g2, gw1, gw2 = {}, None, None, [], []
        for i, (k, a, b) in enumerate(zip(self.kernels, w1, w2, strict=False)):
            Ki = k._sel_gram(X1, X2)
            p, c1, c2 = k._sel_gram_vjp(G * (a[:, None] * b[None, :]), X1, X2)
            params.update(self._prefixed(i, p))
            g1 = c1 if g1 is None else g1 + c1
            if c2 is not None:
                g2 = c2 if g2 is None else g2 + c2
            M = G * Ki
            if X2 is None:
                gw1.append(M @ b + M.T @ a)
            else:
                gw1.append(M @ b)
                gw2.append(M.T @ a)
        loc, steep, gx1 = self._switch_grads(X1, gw1)
        g1 = g1 + gx1
        if X2 is not None:
            loc2, steep2, gx2 = self._switch_grads(X2, gw2)
            loc, steep, g2 = loc + loc2, steep + steep2, g2 + gx2
        return {"locations": loc, "steepness": steep, **params}, g1, g2

    def _diag_vjp(self, g, X):
        _, w, _, _ = self._switches(X)
        params, gX, gw = {}, None, []
        for i, (k, a) in enumerate(zip(self.kernels, w, strict=False)):
            p, c = k._sel_diag_vjp(g * (a * a), X)
            params.update(self._prefixed(i, p))
            gX = c if gX is None else gX + c
            gw.append(2.0 * g * a * k._sel_diag(X))
        loc, steep, gx = self._switch_grads(X, gw)
        return {"locations": loc, "steepness": steep, **params}, gX + gx
