"""Scatter-add (``out[indices[i]] += values[i]`` with repeated indices), which the array API
standard lacks: ``numpy.bincount``, ``torch.Tensor.index_add`` and ``cupyx.scatter_add`` where
available, and a sort-and-segment sum in float64 for any other namespace."""

from __future__ import annotations

import array_api_compat

from gpnum.backend._convert import device_of, get_namespace
from gpnum.errors import ShapeError, describe_shape

__all__ = ["scatter_add"]


def scatter_add(indices, values, size: int):
    """Sums of the rows of ``values`` grouped by ``indices``.

    Parameters
    ----------
    indices : integer array (L,)
        Target rows, each in ``[0, size)``; repeats are summed.
    values : array (L, k)
    size : int
        Rows of the result.

    Returns
    -------
    out : array (size, k), ``out[j] = sum_{i : indices[i] = j} values[i]``, in ``values``'s dtype.
    """
    xp = get_namespace(indices, values)
    if indices.ndim != 1 or values.ndim != 2 or values.shape[0] != indices.shape[0]:
        raise ShapeError(f"values: expected shape ({indices.shape[0]}, k) for indices of shape "
                         f"{describe_shape(indices.shape)}, got {describe_shape(values.shape)}")
    size = int(size)
    k = values.shape[1]
    device = device_of(values)
    if array_api_compat.is_numpy_namespace(xp):
        import numpy as np

        cols = [np.bincount(indices, weights=values[:, j], minlength=size) for j in range(k)]
        out = np.stack(cols, axis=1) if cols else np.zeros((size, 0))
        return xp.asarray(out, dtype=values.dtype)
    if array_api_compat.is_torch_namespace(xp):
        out = xp.zeros((size, k), dtype=values.dtype, device=device)
        return out.index_add(0, indices, values)
    if array_api_compat.is_cupy_namespace(xp):
        import cupyx

        out = xp.zeros((size, k), dtype=values.dtype, device=device)
        cupyx.scatter_add(out, indices, values)
        return out
    # Sort by target, then each segment's sum as a difference of prefix sums (in float64, so
    # that long prefixes keep the digits of short segments).
    order = xp.argsort(indices)
    sorted_idx = xp.take(indices, order)
    high = xp.astype(xp.take(values, order, axis=0), xp.float64)
    prefix = xp.concat([xp.zeros((1, k), dtype=xp.float64, device=device),
                        xp.cumulative_sum(high, axis=0)], axis=0)
    targets = xp.arange(size, dtype=sorted_idx.dtype, device=device)
    start = xp.searchsorted(sorted_idx, targets, side="left")
    stop = xp.searchsorted(sorted_idx, targets, side="right")
    out = xp.take(prefix, stop, axis=0) - xp.take(prefix, start, axis=0)
    return xp.astype(out, values.dtype)
