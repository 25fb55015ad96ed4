"""The coregionalisation kernel of multi-task (intrinsic coregionalisation) models."""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.errors import ShapeError, check_int, describe_shape
from gpnum.kernels._base import Kernel

__all__ = ["Coregion"]


class Coregion(Kernel):
    """Task covariance ``k(x, x') = B[t, t']`` with ``B = W W^T + diag(kappa)``.

    ``t = x_0`` is an integer task index in ``0 .. num_outputs - 1`` held in the (single) input
    column the kernel sees (pick it with ``active_dims``). Multiplied by a kernel on the other
    columns, ``Coregion(P, R, active_dims=[d]) * RBF(active_dims=range(d))``, this is the
    intrinsic coregionalisation model (Bonilla et al. 2008; Alvarez et al. 2012, section 4):
    the outputs share one latent covariance, correlated by ``B``, which is positive definite
    for any ``W`` since ``kappa > 0``.

    Parameters
    ----------
    num_outputs : int
        Number of tasks ``P``.
    rank : int
        Columns ``R`` of ``W``.
    W : array (P, R), optional
        Unconstrained mixing matrix. Default: a fixed, deterministic matrix with unequal
        columns (``W = 0`` would be a saddle point where its gradient vanishes).
    kappa : array (P,), optional
        Positive per-task variances (default 1).
    active_dims, xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF`.

    Notes
    -----
    Task indices are not differentiable: the input gradients are zero. A non-integer or
    out-of-range task index raises a ``ValueError``.
    """

    _param_names = ("W", "kappa")
    _positive = ("kappa",)

    def __init__(self, num_outputs=2, rank=1, W=None, kappa=None, *, active_dims=None, xp=None,
                 dtype=None, device=None):
        P = check_int(num_outputs, "num_outputs", minimum=1, expected="a positive integer")
        R = check_int(rank, "rank", minimum=1, expected="a positive integer")
        self.num_outputs, self.rank = P, R
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device, W, kappa)
        if W is None:
            W = [[0.5 * math.cos(0.3 * (i + 1) * r) for r in range(R)] for i in range(P)]
        self.W = W
        self.kappa = [1.0] * P if kappa is None else kappa
        for name, shape in (("W", (P, R)), ("kappa", (P,))):
            arr = getattr(self, name)
            if tuple(arr.shape) != shape:
                raise ShapeError(f"{name}: expected shape {describe_shape(shape)} for "
                                 f"num_outputs={P}, rank={R}, got {describe_shape(arr.shape)}")

    def _repr_extra(self):
        return [f"num_outputs={self.num_outputs}", f"rank={self.rank}"]

    def _check_dim(self, d, name):
        if d != 1:
            raise ShapeError(f"{name}: Coregion expects one task-index column (choose it with "
                             f"active_dims), got {d} columns")

    def _onehot(self, X):
        xp = get_namespace(X)
        t = X[:, 0]
        P = self.num_outputs
        if not bool(xp.all((t == xp.round(t)) & (t >= 0.0) & (t <= P - 1.0))):
            raise ValueError(f"X: Coregion expects integer task indices in 0..{P - 1}")
        tasks = xp.arange(P, device=device_of(X))
        return xp.astype(xp.astype(t, tasks.dtype)[:, None] == tasks[None, :], X.dtype)

    def _B(self):
        B = self.W @ self.W.T
        B = (B + B.T) * 0.5
        xp = get_namespace(B)
        return B + xp.eye(self.num_outputs, dtype=B.dtype, device=device_of(B)) * \
            self.kappa[None, :]

    def _gram(self, X1, X2):
        O1 = self._onehot(X1)
        O2 = O1 if X2 is None else self._onehot(X2)
        return (O1 @ self._B()) @ O2.T  # one-hot products select entries of B exactly

    def _diag(self, X):
        xp = get_namespace(X)
        b = xp.sum(self.W * self.W, axis=1) + self.kappa
        return self._onehot(X) @ b

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        O1 = self._onehot(X1)
        O2 = O1 if X2 is None else self._onehot(X2)
        dB = O1.T @ G @ O2
        params = {"W": (dB + dB.T) @ self.W, "kappa": xp.linalg.diagonal(dB)}
        return params, xp.zeros_like(X1), None if X2 is None else xp.zeros_like(X2)

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        gb = self._onehot(X).T @ g
        return {"W": 2.0 * gb[:, None] * self.W, "kappa": gb}, xp.zeros_like(X)
