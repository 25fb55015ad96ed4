"""What the kernels of one input column that are functions of the lag ``tau = x - x'`` share
(SHO, PeriodicSeries): the one-column check, the lags and the inputs' gradients from
``dk/dtau``."""

from __future__ import annotations

from gpnum.backend import get_namespace
from gpnum.errors import ShapeError
from gpnum.kernels._base import Kernel


class LagKernel(Kernel):
    """A kernel ``k(x, x') = h(x - x')`` on one input column (private base class)."""

    def _check_dim(self, d, name):
        if d != 1:
            raise ShapeError(f"{name}: {type(self).__name__} is a kernel on one input column; "
                             f"got {d} columns (pass active_dims=[j] to pick one)")

    @staticmethod
    def _lags(X1, X2):
        """``tau[i, j] = X1[i, 0] - X2[j, 0]`` (n1, n2); ``X2`` None: ``X1`` with itself."""
        Xb = X1 if X2 is None else X2
        return X1[:, 0][:, None] - Xb[:, 0][None, :]

    @staticmethod
    def _input_grads(W, X2):
        """The inputs' gradients ``(g1, g2)`` from ``W = G * dk/dtau`` (n1, n2): ``tau``
        rises with ``x_i`` and falls with ``x'_j``; with one set (``X2`` None) both roles in
        ``g1`` and ``g2`` None."""
        xp = get_namespace(W)
        g1 = xp.sum(W, axis=1)[:, None]
        g2 = -xp.sum(W, axis=0)[:, None]
        if X2 is None:
            return g1 + g2, None
        return g1, g2
