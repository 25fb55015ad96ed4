"""One-line target errors shared by the likelihoods of counts, positive and bounded data, and the
class-label check of the many-class likelihoods (RobustMax, Softmax, Ordinal)."""

from __future__ import annotations

from gpnum.backend import device_of, to_numpy

__all__ = ["count_bad", "describe_bad", "labels_bad", "labels_ok"]


def count_bad(xp, bad):
    """Number of ``True`` entries of the boolean array ``bad`` (host int; error path only)."""
    return int(xp.sum(xp.astype(bad, xp.int32)))


def describe_bad(lik, xp, y, bad, expected):
    """``"<Likelihood>: y must be <expected>; got k bad value(s) of n (e.g. v)"``."""
    k = count_bad(xp, bad)
    first = to_numpy(y)[to_numpy(bad)]
    example = f" (e.g. {first[0].item()!r})" if first.size else ""
    return (f"{type(lik).__name__}: y must be {expected}; got {k} value(s) outside that of "
            f"{y.shape[0]}{example}")


def labels_ok(xp, y, num_classes):
    """0-d bool: ``y`` holds class labels ``0..num_classes-1`` (bool, integer, or integral
    floating values)."""
    top = num_classes - 1
    if xp.isdtype(y.dtype, "bool"):
        return xp.asarray(True, device=device_of(y))
    if xp.isdtype(y.dtype, "integral"):
        return xp.all((y >= 0) & (y <= top))
    return xp.all(xp.isfinite(y) & (y >= 0.0) & (y <= float(top)) & (xp.floor(y) == y))


def labels_bad(xp, y, num_classes):
    """(n,) bool: the entries of ``y`` that are not labels ``0..num_classes-1`` (error path)."""
    top = num_classes - 1
    if xp.isdtype(y.dtype, "integral"):
        return (y < 0) | (y > top)
    return ~(xp.isfinite(y) & (y >= 0.0) & (y <= float(top)) & (xp.floor(y) == y))
