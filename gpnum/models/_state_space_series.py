"""Several series sharing hyper-parameters on the state-space path.

A kernel ``k_t * SameGroup(active_dims=[j])`` (either order), with ``k_t`` a kernel with a
state-space form on the time column 0 and the series' labels in column ``j``, makes the series
independent draws of one GP: ``cov(f_s(t), f_s'(t')) = k_t(t, t') [s == s']``. Sorted by
(label, time), the series follow one another, and one Kalman recursion runs over the
concatenation in which the first step of every series restarts from the prior (``A = 0``,
``Q = P_inf``), exactly as the first step of a single series does: the log marginal likelihood
is the sum of the series' own (the state carries nothing across a restart), and the smoother
and predictions see only a series' own data. This module recognises the pattern, sorts, marks
the restarts and finds where new (time, label) points fall; the recursions are those of
:mod:`gpnum.models._kalman_blocked` and :mod:`gpnum.models._kalman_smoother` with a restart
mask.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of
from gpnum.errors import ShapeError, check_finite, describe_shape
from gpnum.kernels import (
    ParentKernel,
    Product,
    SameGroup,
    StateSpaceForm,
    has_state_space_form,
    state_space_form,
)

__all__ = ["applies", "arrange", "check", "form", "label_column", "locate", "split"]


def _on_time_column(kernel):
    """Whether every part of ``kernel`` sees input column 0 only (``active_dims=[0]`` on the
    way down from the top; a part without ``active_dims`` under none would see every column)."""
    dims = kernel.active_dims
    if dims is not None:
        return tuple(dims) == (0,)
    children = _children(kernel)
    return bool(children) and all(_on_time_column(c) for c in children)


def _children(kernel):
    return [c for _, c in kernel.children()] if isinstance(kernel, ParentKernel) else []


def split(kernel):
    """``(i, k_t, j)`` for ``Product`` of a kernel ``k_t`` (factor ``i``) and a
    ``SameGroup(active_dims=[j])``, in either order; else None."""
    if type(kernel) is not Product or kernel.active_dims is not None or \
            len(kernel.kernels) != 2:
        return None
    for i in (0, 1):
        time, group = kernel.kernels[i], kernel.kernels[1 - i]
        if type(group) is SameGroup and group.active_dims is not None \
                and len(group.active_dims) == 1 and type(time) is not SameGroup:
            return i, time, group.active_dims[0]
    return None


def label_column(kernel):
    """The label column of a several-series kernel (:func:`split`), else None."""
    parts = split(kernel)
    return None if parts is None else parts[2]


def _has_group(kernel):
    return type(kernel) is SameGroup or any(_has_group(c) for c in _children(kernel))


def check(kernel, X):
    """Raise a clear error unless ``(kernel, X)`` suit ``solver="state_space"``: one column
    and a kernel with a form, or several series (:func:`split`) with their labels in ``X``."""
    parts = split(kernel)
    if parts is None:
        if _has_group(kernel):
            raise TypeError(f"state space: {kernel!r} uses SameGroup, but not as "
                            "k_t * SameGroup(active_dims=[j]) (two factors, either order, k_t a "
                            "kernel with a state-space form on column 0): the form the "
                            "state-space solver takes for several series")
        if X.shape[1] != 1:
            raise ShapeError(f"X: solver='state_space' is for one input column (time), or "
                             f"several series with kernel k_t * SameGroup(active_dims=[j]); got "
                             f"shape {describe_shape(X.shape)}")
        state_space_form(kernel)  # raises TypeError naming a kernel without a form
        return
    _, time, col = parts
    if col == 0:
        raise ValueError("state space: SameGroup sees column 0, the time column; put the "
                         "series' labels in another column (SameGroup(active_dims=[1]))")
    if X.shape[1] <= col:
        raise ShapeError(f"X: the series' labels are column {col} (SameGroup's active_dims), "
                         f"but X has shape {describe_shape(X.shape)}; expected [time, ..., "
                         "label] rows")
    if not _on_time_column(time):
        raise TypeError(f"state space: {time!r}, the time factor of a several-series kernel, "
                        "must see the time column only: give it active_dims=[0]")
    try:
        state_space_form(time)
    except TypeError as exc:
        raise TypeError(f"state space, several series: the time factor has no state-space "
                        f"form: {exc}") from None
    check_finite(time.xp, X[:, col], f"X[:, {col}] (the series' labels)")


def applies(kernel, X) -> bool:
    """Whether ``solver="state_space"`` can run ``kernel`` on ``X`` (``solver="auto"``)."""
    parts = split(kernel)
    if parts is None:
        return X.shape[1] == 1 and has_state_space_form(kernel)
    _, time, col = parts
    return 0 < col < X.shape[1] and _on_time_column(time) and has_state_space_form(time)


def form(kernel) -> StateSpaceForm:
    """The state-space form of ``kernel`` (one series), or of its time factor for several
    series, with the parameter names of ``kernel`` (the factor's prefix ``"i."``)."""
    parts = split(kernel)
    if parts is None:
        return state_space_form(kernel)
    i, time, _ = parts
    f = state_space_form(time)
    return StateSpaceForm([f"{i}.{n}" for n in f.names], f.H, f.P_inf, f.dP_inf, f.transition,
                          f.transition_vjp)


def arrange(xp, t, labels):
    """Sort by (label, time), stably: the permutation (n,) and the series' first points
    (n,) bool (the first entry True).

    ``t`` and ``labels`` (n,) in any order; ties in time keep their order (steps of zero).
    """
    order = xp.argsort(t, stable=True)
    order = xp.take(order, xp.argsort(xp.take(labels, order), stable=True))
    lab = xp.take(labels, order)
    first = xp.ones((1,), dtype=xp.bool, device=device_of(t))
    if lab.shape[0] < 2:
        return order, first
    return order, xp.concat([first, lab[1:] != lab[:-1]])


def locate(t, labels, tnew, labels_new, xp):
    """Where new points fall among the training points sorted by (label, time).

    Parameters
    ----------
    t, labels : arrays (n,)
        The training times and labels in (label, time) order (:func:`arrange`).
    tnew, labels_new : arrays (m,)
        New times and labels, any order.

    Returns
    -------
    idx : array (m,) int64
        The last training point of the same series at or before each new time (``-1`` or a
        point of another series when there is none: see ``before``).
    before : array (m,) bool
        No point of the series at or before the new time (or a label without data).
    has_next : array (m,) bool
        The point ``idx + 1`` belongs to the same series.
    """
    n = t.shape[0]
    labels_new = xp.asarray(labels_new, copy=True)  # a column of X: contiguous for the search
    lo = xp.astype(xp.searchsorted(labels, labels_new, side="left"), xp.int64)
    hi = xp.astype(xp.searchsorted(labels, labels_new, side="right"), xp.int64)
    # binary search for the first point of the series after the new time, in [lo, hi]
    a, b = lo, hi
    for _ in range(max(1, math.ceil(math.log2(n + 1)))):
        mid = (a + b) // 2
        right = (a < b) & (xp.take(t, xp.clip(mid, 0, n - 1)) <= tnew)
        left = (a < b) & ~right
        a = xp.where(right, mid + 1, a)
        b = xp.where(left, mid, b)
    idx = a - 1
    return idx, idx < lo, a < hi
