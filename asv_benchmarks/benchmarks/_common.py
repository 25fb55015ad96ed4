"""Helpers shared by the benchmark modules: backends present here, data creation, syncing."""

import numpy as np

from gpnum import backend as B
from gpnum.errors import BackendError


def available_backends():
    names = []
    for name in ("numpy", "torch", "cupy"):
        try:
            B.namespace_by_name(name)
            names.append(name)
        except BackendError:
            pass
    return names


def make(xp, a, dtype):
    return B.asarray(np.asarray(a), dtype=dtype, xp=xp)


def sync(x):
    """Wait for device work to finish before the clock is read (a no-op on the CPU)."""
    B.to_numpy(x[..., :1] if getattr(x, "ndim", 0) else x)
    return x


def spd_matrix(m, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(m, 2))
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)) / 0.3
    K = (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)
    return K + 1e-2 * np.eye(m)
