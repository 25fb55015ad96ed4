"""Random numbers that give the same draws on every backend from an explicit seed.

Draws are made on the host with NumPy's PCG64 and then moved to the target namespace and
device in one explicit transfer. This costs one copy of the output, which is small next to the
O(n^2) work that consumes it (probe vectors, samples, minibatch orders), and it buys two things
that native device generators do not: the same numbers on NumPy, torch, CuPy and
array_api_strict for one seed, and a generator state that checkpoints to a plain ``.npz``.
"""

from __future__ import annotations

import json

import numpy as np

from gpnum.backend._convert import asarray
from gpnum.backend._namespace import default_dtype, namespace

__all__ = ["Generator", "default_rng"]


class Generator:
    """Seeded random generator producing arrays of any backend.

    Parameters
    ----------
    seed : int or None
        Seed of the host-side PCG64 generator.
    xp : namespace, optional
        Namespace of the arrays produced; default ``gpnum.backend.namespace()``.
    device : optional
        Device of the arrays produced; default the namespace's default device.
    """

    def __init__(self, seed=None, *, xp=None, device=None):
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self.xp = namespace() if xp is None else xp
        self.device = device

    def _out(self, host, dtype):
        if dtype is None:
            dtype = default_dtype(self.xp)
        return asarray(host, dtype=dtype, xp=self.xp, device=self.device)

    def normal(self, shape, *, dtype=None):
        """Standard normal draws of ``shape``."""
        return self._out(self._rng.standard_normal(shape), dtype)

    def uniform(self, shape, *, low=0.0, high=1.0, dtype=None):
        """Uniform draws on ``[low, high)`` of ``shape``."""
        return self._out(self._rng.uniform(low, high, shape), dtype)

    def rademacher(self, shape, *, dtype=None):
        """Random signs (+1 or -1) of ``shape`` (Hutchinson probe vectors)."""
        return self._out(self._rng.integers(0, 2, shape) * 2.0 - 1.0, dtype)

    def permutation(self, n: int):
        """A random permutation of ``range(n)`` as an ``int64`` array of the target namespace."""
        return asarray(self._rng.permutation(n), dtype=self.xp.int64, xp=self.xp,
                       device=self.device)

    def integers(self, low: int, high: int, shape):
        """Integers drawn uniformly from ``[low, high)``, as an ``int64`` array."""
        return asarray(self._rng.integers(low, high, shape), dtype=self.xp.int64, xp=self.xp,
                       device=self.device)

    def host(self) -> np.random.Generator:
        """The underlying NumPy generator, for host-side choices (indices, shuffles)."""
        return self._rng

    def get_state(self) -> str:
        """The generator state as a JSON string (for checkpoints)."""
        return json.dumps(self._rng.bit_generator.state)

    def set_state(self, state: str) -> None:
        """Restore a state produced by :meth:`get_state`."""
        self._rng.bit_generator.state = json.loads(state)


def default_rng(seed=None, *, xp=None, device=None) -> Generator:
    """Create a :class:`Generator`; ``seed`` is required for reproducible results."""
    return Generator(seed, xp=xp, device=device)
