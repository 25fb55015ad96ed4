"""Namespace discovery and explicit conversions between backends."""

from __future__ import annotations

import array_api_compat
import numpy as np

from gpnum.backend._namespace import default_dtype, namespace

__all__ = ["get_namespace", "asarray", "to_numpy", "device_of", "is_array", "host_device",
           "same_namespace_dtype_device"]


def is_array(x) -> bool:
    """True for an array of any supported library (not for Python scalars or lists)."""
    # NumPy scalars (np.float64 subclasses float) count as arrays; Python numbers do not.
    return array_api_compat.is_array_api_obj(x) and type(x) not in (int, float, complex, bool)


#: Namespace of a single array by its type (every library here maps a type to one namespace;
#: JAX is left out: its float0 arrays take another). Lookups are per SVI step and per
#: operator call, and a dictionary lookup costs less than array_api_compat's discovery.
_NAMESPACE_OF_TYPE = {}


def get_namespace(*arrays):
    """The array namespace shared by ``arrays`` (Python scalars and ``None`` are ignored).

    Raises
    ------
    TypeError
        If the arrays come from different libraries, or none of the arguments is an array.
    """
    if len(arrays) == 1:
        xp = _NAMESPACE_OF_TYPE.get(type(arrays[0]))
        if xp is not None:
            return xp
    arrs = [a for a in arrays if a is not None and is_array(a)]
    if not arrs:
        raise TypeError("get_namespace: expected at least one array argument, got none")
    try:
        xp = array_api_compat.array_namespace(*arrs)
    except TypeError as exc:
        kinds = sorted({type(a).__module__.split(".")[0] + "." + type(a).__name__ for a in arrs})
        raise TypeError(
            f"arrays from different libraries cannot be mixed: got {', '.join(kinds)}. "
            "Convert them with gpnum.backend.asarray(x, like=...) first."
        ) from exc
    if len(arrays) == 1 and len(arrs) == 1 and not array_api_compat.is_jax_array(arrs[0]):
        _NAMESPACE_OF_TYPE[type(arrs[0])] = xp
    return xp


def device_of(x):
    """The device of array ``x``."""
    return array_api_compat.device(x)


def same_namespace_dtype_device(a, b) -> bool:
    """Whether arrays ``a`` and ``b`` share namespace, dtype and device (so that one can stand
    in for the other's kind: a kept start block against a new matrix, for example)."""
    return (get_namespace(a) is get_namespace(b) and a.dtype == b.dtype
            and device_of(a) == device_of(b))


def host_device(xp):
    """The CPU device of namespace ``xp`` (used when bringing data back to the host)."""
    if array_api_compat.is_array_api_strict_namespace(xp):
        return xp.Device("CPU_DEVICE")
    if array_api_compat.is_torch_namespace(xp):
        return "cpu"
    return None


def to_numpy(x) -> np.ndarray:
    """Copy array ``x`` of any backend to a NumPy array on the host (an explicit transfer)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (int, float, bool, complex, list, tuple, np.generic)):
        return np.asarray(x)
    if array_api_compat.is_torch_array(x):
        return x.detach().cpu().numpy()
    if array_api_compat.is_cupy_array(x):
        return x.get()
    xp = array_api_compat.array_namespace(x)
    if array_api_compat.is_array_api_strict_namespace(xp):
        return np.asarray(x.to_device(xp.Device("CPU_DEVICE")))
    return np.asarray(x)


def asarray(x, dtype=None, like=None, *, xp=None, device=None):
    """Convert ``x`` (array of any backend, list, scalar) to an array of a target namespace.

    Parameters
    ----------
    x : array_like
        Data to convert. Arrays of another library are copied through the host explicitly.
    dtype : dtype or str, optional
        Target dtype (a dtype object or ``"float32"``/``"float64"``). Default: ``like``'s dtype
        if given, else the dtype of ``x`` if it is floating, else ``GPNUM_DTYPE``.
    like : array, optional
        An array whose namespace, device (and default dtype) the result takes.
    xp : namespace, optional
        Target namespace when ``like`` is not given; default ``gpnum.backend.namespace()``.
    device : optional
        Target device; default ``like``'s device or the namespace's default.
    """
    if like is not None:
        xp = get_namespace(like)
        device = device_of(like) if device is None else device
    elif xp is None:
        xp = namespace()
    if isinstance(dtype, str):
        dtype = getattr(xp, dtype)
    if dtype is None:
        if like is not None:
            dtype = like.dtype
        elif is_array(x) and get_namespace(x) is xp and xp.isdtype(x.dtype, "real floating"):
            dtype = x.dtype
        elif is_array(x) or isinstance(x, (list, tuple, float, int)):
            src = to_numpy(x)
            dtype = (default_dtype(xp) if not np.issubdtype(src.dtype, np.floating)
                     else getattr(xp, str(src.dtype)))
        else:
            dtype = default_dtype(xp)
    if is_array(x) and get_namespace(x) is xp:
        out = x if x.dtype == dtype else xp.astype(x, dtype)
        if device is not None and device_of(out) != device:
            out = out.to_device(device) if hasattr(out, "to_device") else xp.asarray(out, device=device)
        return out
    host = to_numpy(x)
    if device is None:
        return xp.asarray(host, dtype=dtype)
    return xp.asarray(host, dtype=dtype, device=device)
