"""Row subsets and perturbations of training data: a random subset, a held-out part, outliers.

Index choices are drawn on the host with NumPy's generator from the seed (so that a run is
reproducible on every backend); the arrays stay on their own backend and device.
"""

from __future__ import annotations

import math

import numpy as np

from gpnum import backend as B

__all__ = ["add_outliers", "holdout", "random_subset"]


def _check_rows(X, y, caller):
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"{caller}: expected X (n, d) and y (n,) with the same n, got shapes "
                         f"{tuple(X.shape)} and {tuple(y.shape)}")


def _take_rows(arrays, idx):
    xp = B.get_namespace(arrays[0])
    idx = B.asarray(idx, dtype=xp.int64, xp=xp, device=B.device_of(arrays[0]))
    return tuple(xp.take(a, idx, axis=0) for a in arrays)


def random_subset(X, y, size, *, seed=0):
    """At most ``size`` rows of ``(X, y)``, chosen uniformly without replacement, in their order.

    Parameters
    ----------
    X : array (n, d)
    y : array (n,)
    size : int
        Rows to keep; ``size >= n`` returns the inputs unchanged.
    seed : int
        Seed of the host generator that picks the rows.

    Returns
    -------
    X_sub : array (min(size, n), d)
    y_sub : array (min(size, n),)
    """
    _check_rows(X, y, "random_subset")
    size = int(size)
    if size < 1:
        raise ValueError(f"random_subset: size must be a positive integer, got {size}")
    n = X.shape[0]
    if size >= n:
        return X, y
    idx = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
    return _take_rows((X, y), idx)


def holdout(X, y, fraction=0.1, *, seed=0):
    """Split ``(X, y)`` into a training part and a held-out part of ``floor(fraction n)`` rows
    (at least one), chosen at random; both keep the rows' order.

    Parameters
    ----------
    X : array (n, d)
    y : array (n,)
    fraction : float in (0, 1)
    seed : int

    Returns
    -------
    X_train, y_train, X_held, y_held : arrays (n - k, d), (n - k,), (k, d), (k,)
    """
    _check_rows(X, y, "holdout")
    fraction = float(fraction)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"holdout: fraction must lie in (0, 1), got {fraction}")
    n = X.shape[0]
    if n < 2:
        raise ValueError(f"holdout: need at least 2 rows to hold some out, got {n}")
    perm = np.random.default_rng(seed).permutation(n)
    k = min(n - 1, max(1, math.floor(fraction * n + 1e-9)))
    X_tr, y_tr = _take_rows((X, y), np.sort(perm[k:]))
    X_ho, y_ho = _take_rows((X, y), np.sort(perm[:k]))
    return X_tr, y_tr, X_ho, y_ho


def add_outliers(y, fraction, *, seed=0, scale=3.0):
    """``y`` with ``round(fraction n)`` entries shifted by ``+-scale * std(y)`` (random signs):
    gross errors in the targets, for robustness studies (the outlier experiment of Xu, Zeng &
    Paisley 2024).

    Parameters
    ----------
    y : array (n,)
    fraction : float in [0, 1]
    seed : int
        The rows and signs come from their own stream (``[seed, 21]``), so that a split or
        inducing points drawn from ``seed`` elsewhere are not disturbed.
    scale : float
        The shift in standard deviations of ``y``.

    Returns
    -------
    array (n,)
        A new array (``y`` itself when no entry is shifted).
    """
    if y.ndim != 1:
        raise ValueError(f"add_outliers: expected y of shape (n,), got {tuple(y.shape)}")
    fraction = float(fraction)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"add_outliers: fraction must lie in [0, 1], got {fraction}")
    count = int(round(fraction * y.shape[0]))
    if count == 0:
        return y
    xp = B.get_namespace(y)
    host = B.to_numpy(y).astype(np.float64)
    rng = np.random.default_rng([seed, 21])
    idx = rng.choice(host.shape[0], count, replace=False)
    host[idx] += float(scale) * host.std() * rng.choice([-1.0, 1.0], count)
    return B.asarray(host, dtype=y.dtype, xp=xp, device=B.device_of(y))
