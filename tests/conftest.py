"""Backend/dtype test matrix.

Every test that takes the ``xp`` fixture runs on numpy, on array_api_strict with
``Device("device1")`` (so that a hidden round-trip through NumPy raises), on torch CPU when it is
installed and on CuPy when a GPU is usable. Tests that also take ``dtype`` run in float32 and
float64. ``to_xp`` converts a NumPy reference input to the backend under test.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from gpnum import backend as B
from gpnum.errors import BackendError


def _available(name):
    try:
        B.namespace_by_name(name)
        return True
    except BackendError:
        return False


if _available("torch"):
    import torch

    # The suite runs many tiny operations: torch's thread pool costs more than it saves on the
    # 2-core machines here (10-100x slower under load). Tests never measure time.
    torch.set_num_threads(1)

_BACKEND_PARAMS = [
    pytest.param("numpy", id="numpy"),
    pytest.param("array_api_strict", id="strict",
                 marks=pytest.mark.skipif(not _available("array_api_strict"),
                                          reason="array_api_strict not installed")),
    pytest.param("torch", id="torch",
                 marks=pytest.mark.skipif(not _available("torch"), reason="torch not installed")),
    pytest.param("cupy", id="cupy",
                 marks=pytest.mark.skipif(not _available("cupy"), reason="no usable GPU/CuPy")),
]


class Backend:
    """What a test needs to know about the backend under test."""

    def __init__(self, name):
        self.name = name
        self.xp = B.namespace_by_name(name)
        if name == "array_api_strict":
            self.device = self.xp.Device("device1")
        elif name == "torch":
            import torch

            self.device = torch.device("cpu")
        elif name == "numpy":
            self.device = "cpu"
        else:
            self.device = None


@pytest.fixture(params=_BACKEND_PARAMS)
def backend(request):
    return Backend(request.param)


@pytest.fixture
def xp(backend):
    return backend.xp


@pytest.fixture
def device(backend):
    return backend.device


@pytest.fixture(params=["float32", "float64"])
def dtype(request, xp):
    return getattr(xp, request.param)


@pytest.fixture
def to_xp(xp, dtype, device):
    """Convert NumPy data to the backend under test (floating data to ``dtype``)."""

    def convert(a, dtype=dtype):
        a = np.asarray(a)
        if not np.issubdtype(a.dtype, np.floating):
            dtype = getattr(xp, str(a.dtype)) if dtype is None else dtype
        return B.asarray(a, dtype=dtype, xp=xp, device=device)

    return convert


@pytest.fixture
def to64(xp, device):
    """Like conftest's ``to_xp`` but always float64, for tests whose reference needs double
    precision (so they run once per backend, not once per dtype)."""
    def convert(a, dtype=None):
        a = np.asarray(a)
        if np.issubdtype(a.dtype, np.floating):
            target = xp.float64 if dtype is None else dtype
        else:
            target = getattr(xp, str(a.dtype)) if dtype is None else dtype
        return B.asarray(a, dtype=target, xp=xp, device=device)

    return convert


@pytest.fixture
def tol(dtype, xp):
    """A relative tolerance suited to the working precision: float32 1e-4, float64 1e-10."""
    return 1e-4 if dtype == xp.float32 else 1e-10


@pytest.fixture
def scipy_blas_spy(monkeypatch):
    """``start()``: from now on, record in a fresh list (returned) the names of the SciPy BLAS
    functions fetched (``scipy.linalg.blas.get_blas_funcs``): which products woke SciPy's
    BLAS thread pool (``gpnum.backend.blas_pool``)."""
    import scipy.linalg.blas as blas

    real = blas.get_blas_funcs

    def start():
        fetched = []

        def spy(names, arrays=(), *args, **kwargs):
            fetched.append(names)
            return real(names, arrays, *args, **kwargs)

        monkeypatch.setattr(blas, "get_blas_funcs", spy)
        return fetched

    return start
