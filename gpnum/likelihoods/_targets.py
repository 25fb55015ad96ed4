"""One-line target errors shared by the likelihoods of counts, positive and bounded data."""

from __future__ import annotations

from gpnum.backend import to_numpy

__all__ = ["count_bad", "describe_bad"]


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
