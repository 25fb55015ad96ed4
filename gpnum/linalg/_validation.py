"""Argument checks shared by the solvers: right-hand sides, tolerances, iteration counts."""

from __future__ import annotations

import math

import array_api_compat

from gpnum.backend import get_namespace, is_array
from gpnum.errors import ShapeError, check_finite, describe_shape
from gpnum.linalg._operators import aslinearoperator

__all__ = ["prepare_system", "check_tolerances", "check_maxiter", "default_check_every",
           "on_host"]


def prepare_system(A, B, name_b="B"):
    """Validate ``A`` (operator, array or callable) against ``B`` (n,) or (n, k).

    Returns
    -------
    op : LinearOperator (n, n)
    B2 : array (n, k)
    vector : bool
        Whether ``B`` was one-dimensional (the caller squeezes its outputs back).
    """
    if not is_array(B):
        raise TypeError(f"{name_b}: expected an array of shape (n,) or (n, k), got "
                        f"{type(B).__name__}")
    xp = get_namespace(B)
    if not xp.isdtype(B.dtype, "real floating"):
        raise TypeError(f"{name_b}: expected a real floating dtype, got {B.dtype}")
    op = aslinearoperator(A, like=B)
    if op.shape[0] != op.shape[1]:
        raise ShapeError(f"A: expected a square operator of shape (n, n), got "
                         f"{describe_shape(op.shape)}")
    n = op.shape[0]
    if op.xp is not xp:
        raise TypeError(f"{name_b}: expected an array of A's namespace {op.xp.__name__}, got "
                        f"{xp.__name__}")
    if B.ndim not in (1, 2) or B.shape[0] != n:
        raise ShapeError(f"{name_b}: expected shape ({n},) or ({n}, k), got "
                         f"{describe_shape(B.shape)}")
    if B.dtype != op.dtype:
        raise TypeError(f"{name_b}: expected dtype {op.dtype} (A's), got {B.dtype}")
    check_finite(xp, B, name_b)
    vector = B.ndim == 1
    return op, (B[:, None] if vector else B), vector


def check_tolerances(rtol, atol):
    """Validate SciPy-style tolerances; returns them as floats."""
    out = []
    for value, name in ((rtol, "rtol"), (atol, "atol")):
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected a real number, got {value!r}") from None
        if not (v >= 0.0) or math.isinf(v):
            raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        out.append(v)
    return out[0], out[1]


def check_maxiter(maxiter, default, name="maxiter"):
    """``maxiter`` as a positive int (``None`` gives ``default``)."""
    if maxiter is None:
        return int(default)
    if isinstance(maxiter, bool) or not isinstance(maxiter, int) or maxiter < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {maxiter!r}")
    return maxiter


def on_host(xp, device) -> bool:
    """Whether arrays of ``xp`` on ``device`` live in host memory (NumPy, torch CPU)."""
    if array_api_compat.is_numpy_namespace(xp):
        return True
    return array_api_compat.is_torch_namespace(xp) and getattr(device, "type", None) == "cpu"


def default_check_every(xp, device, check_every):
    """How often to test convergence (a host synchronisation).

    On the host (NumPy, torch CPU) a test costs nothing, so every iteration; on an accelerator
    (CuPy, torch CUDA, array_api_strict's simulated device) every 5 iterations, so the device
    is not stalled each step.
    """
    if check_every is not None:
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise ValueError(f"check_every: expected an integer >= 1, got {check_every!r}")
        return check_every
    return 1 if on_host(xp, device) else 5
