"""The group-indicator kernel: independent copies of a GP, one per label."""

from __future__ import annotations

from gpnum.backend import asarray, device_of, get_namespace
from gpnum.errors import ShapeError
from gpnum.kernels._base import Kernel

__all__ = ["SameGroup"]


class SameGroup(Kernel):
    """1 where the two inputs carry the same label, else 0.

    ``k(x, x') = [x_0 == x'_0]`` on the one input column the kernel sees (pick it with
    ``active_dims``), compared exactly: labels are any finite numbers (star or sensor
    numbers), not necessarily integers or contiguous. Multiplied by a kernel on the time
    column, ``Matern32(active_dims=[0]) * SameGroup(active_dims=[1])`` on inputs ``[time,
    label]``, it makes the series of different labels independent draws of one GP sharing
    its hyper-parameters: ``cov(f_s(t), f_s'(t')) = k(t, t') [s == s']``. Its matrix is the
    block-diagonal pattern of the labels (a block of ones per label, after sorting by label),
    positive semi-definite: it is ``Z Z^T`` with ``Z`` the one-hot encoding of the labels.
    ``GPR(..., solver="state_space")`` recognises such a product and runs one Kalman pass
    over all the series (docs/timeseries.md).

    Parameters
    ----------
    active_dims : list of int, optional
        The one input column holding the labels (default all columns: then inputs must have
        one column).
    xp, dtype, device : optional
        As for :class:`gpnum.kernels.RBF` (the kernel has no parameters to infer them from).

    Notes
    -----
    No parameters; the labels are not differentiable: the input gradients are zero, and
    ``diag`` is 1.
    """

    _param_names = ()
    _positive = ()

    def __init__(self, *, active_dims=None, xp=None, dtype=None, device=None):
        self._set_active_dims(active_dims)
        self._setup_namespace(xp, dtype, device)
        # carries the namespace, dtype and device that a parameter would (``_reference``)
        self._anchor = asarray(0.0, dtype=self.dtype, xp=self.xp, device=self._device)

    def _reference(self):
        return self._anchor

    def _check_dim(self, d, name):
        if d != 1:
            raise ShapeError(f"{name}: SameGroup expects one label column (choose it with "
                             f"active_dims), got {d} columns")

    def _gram(self, X1, X2):
        xp = get_namespace(X1)
        a = X1[:, 0]
        b = a if X2 is None else X2[:, 0]
        return xp.astype(a[:, None] == b[None, :], X1.dtype)

    def _diag(self, X):
        xp = get_namespace(X)
        return xp.ones((X.shape[0],), dtype=X.dtype, device=device_of(X))

    def _gram_vjp(self, G, X1, X2):
        xp = get_namespace(X1)
        return {}, xp.zeros_like(X1), None if X2 is None else xp.zeros_like(X2)

    def _diag_vjp(self, g, X):
        xp = get_namespace(X)
        return {}, xp.zeros_like(X)
