"""Choosing the default array namespace from ``GPNUM_BACKEND`` and ``GPNUM_DTYPE``."""

from __future__ import annotations

import importlib
import os

from gpnum.errors import BackendError

__all__ = ["BACKENDS", "namespace", "default_dtype", "namespace_by_name", "backend_name"]

#: Backend names accepted by ``GPNUM_BACKEND``, in the order they are documented.
BACKENDS = ("numpy", "cupy", "torch", "array_api_strict")

_INSTALL_HINT = {
    "numpy": "pip install numpy",
    "cupy": ("pip install \".[cuda]\" from a gpnum checkout (or pip install cupy-cuda12x) on a "
             "machine with an NVIDIA GPU and CUDA 12"),
    "torch": ("pip install torch --index-url https://download.pytorch.org/whl/cpu (the CPU "
              "build is enough; a plain 'pip install torch' may pull a several-GB CUDA build)"),
    "array_api_strict": "pip install array-api-strict",
}


def _cupy_usable():
    """Return ``None`` if CuPy can run a kernel here, else a reason string."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or CUDA libraries missing at import
        return f"cupy could not be imported ({type(exc).__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"cupy found no usable CUDA runtime ({type(exc).__name__}: {exc})"
    if n < 1:
        return "cupy found no CUDA device"
    return None


def namespace_by_name(name: str):
    """Return the array-API namespace for backend ``name``.

    Raises
    ------
    BackendError
        If ``name`` is unknown, its library is not installed, or (for ``cupy``) no GPU is usable.
    """
    key = name.strip().lower()
    if key not in BACKENDS:
        raise BackendError(
            f"GPNUM_BACKEND={name!r} is not a known backend; expected one of "
            f"{', '.join(BACKENDS)}. Unset it to use numpy."
        )
    if key == "cupy":
        reason = _cupy_usable()
        if reason is not None:
            raise BackendError(
                f"GPNUM_BACKEND=cupy needs a usable NVIDIA GPU: {reason}. Install it with "
                f"{_INSTALL_HINT['cupy']}, or set GPNUM_BACKEND=numpy to run on the CPU."
            )
    module = {
        "numpy": "array_api_compat.numpy",
        "cupy": "array_api_compat.cupy",
        "torch": "array_api_compat.torch",
        "array_api_strict": "array_api_strict",
    }[key]
    library = "array_api_strict" if key == "array_api_strict" else key
    try:
        importlib.import_module(library)
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendError(
            f"GPNUM_BACKEND={key} but {library} is not installed ({exc}). Install it with "
            f"{_INSTALL_HINT[key]}, or choose another of {', '.join(BACKENDS)}."
        ) from exc


def backend_name() -> str:
    """The backend named by ``GPNUM_BACKEND`` (``"numpy"`` when unset), not yet validated."""
    return os.environ.get("GPNUM_BACKEND", "numpy").strip().lower() or "numpy"


def namespace():
    """The default array namespace, read from ``GPNUM_BACKEND`` at each call.

    ``numpy`` (default), ``cupy``, ``torch`` or ``array_api_strict``. Only functions that create
    arrays from nothing use it; everything else follows its inputs' namespace.
    """
    return namespace_by_name(backend_name())


def default_dtype(xp=None):
    """The default floating dtype of ``xp`` named by ``GPNUM_DTYPE`` (``float64`` when unset)."""
    name = os.environ.get("GPNUM_DTYPE", "float64").strip().lower() or "float64"
    if name not in ("float32", "float64"):
        raise BackendError(f"GPNUM_DTYPE={name!r} is not supported; expected float32 or float64")
    xp = namespace() if xp is None else xp
    return getattr(xp, name)
