"""Helpers shared by the benchmark modules: backends present here, data creation, syncing."""

import os

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


def spd_matrix(m, seed=0, jitter=1e-2):
    """Matern-5/2 gram matrix (lengthscale 0.3) of m uniform points in [0, 1]^2, plus jitter I."""
    from scipy.spatial.distance import cdist

    x = np.random.default_rng(seed).uniform(size=(m, 2))
    # cdist: no (m, m, 2) temporary, which at m = 4000 made every setup cost a second
    d = cdist(x, x) * (np.sqrt(5) / 0.3)
    K = (1 + d + d**2 / 3) * np.exp(-d)
    K[np.diag_indices(m)] += jitter
    return K


def repeats(n):
    """How many times a ``track_`` helper repeats a measurement: ``n``, capped by the
    environment variable ``GPNUM_ASV_MAX_REPEATS`` when it is set (the smoke test,
    tests/test_benchmarks_smoke.py, sets 1 to run each benchmark once; asv never sets it)."""
    cap = os.environ.get("GPNUM_ASV_MAX_REPEATS")
    return min(n, int(cap)) if cap else n
