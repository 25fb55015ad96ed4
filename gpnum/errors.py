"""Exceptions and warnings shared by every layer of gpnum.

Messages follow one style: say which argument is wrong, what was expected and what was
received, e.g. ``"B: expected shape (500, k), got (499, 3)"``.
"""

from __future__ import annotations

import operator
import warnings

__all__ = [
    "BackendError",
    "NotPSDError",
    "ConvergenceWarning",
    "ShapeError",
    "check_finite",
    "check_int",
    "check_points_shape",
    "check_positive",
    "describe_shape",
]


class BackendError(RuntimeError):
    """The array backend named by ``GPNUM_BACKEND`` (or asked for) cannot be used."""


class NotPSDError(ValueError):
    """A matrix that must be positive definite is not, even after adding jitter."""


class ShapeError(ValueError):
    """An array argument has the wrong number of dimensions or the wrong shape."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before reaching its tolerance."""


def describe_shape(shape) -> str:
    """Format a shape such as ``(3, None)`` as ``(3, k)``-style text."""
    parts = ["?" if s is None else str(s) for s in shape]
    if len(parts) == 1:
        return f"({parts[0]},)"
    return "(" + ", ".join(parts) + ")"


def check_finite(xp, x, name: str) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or Inf.

    One reduction and one host synchronisation: call it at API boundaries, never in a loop.
    The sum of ``x`` is finite only when every value is (NaN and Inf propagate), so one pass
    without an (x.shape) mask settles the common case; an overflowing sum falls back to the
    elementwise test.
    """
    if x.ndim > 0 and x.size != 0 and xp.isdtype(x.dtype, "real floating"):
        with warnings.catch_warnings():  # an overflowing or inf - inf sum is expected here
            warnings.simplefilter("ignore", RuntimeWarning)
            total = xp.sum(x)
        if bool(xp.isfinite(total)):
            return
    if not bool(xp.all(xp.isfinite(x))):
        n_nan = int(xp.sum(xp.astype(xp.isnan(x), xp.int32)))
        what = f"{n_nan} NaN value(s)" if n_nan else "infinite value(s)"
        raise ValueError(f"{name}: expected finite values, got {what} in an array of shape "
                         f"{describe_shape(x.shape)}")


def check_points_shape(X, name: str) -> None:
    """Raise :class:`ShapeError` unless the array ``X`` is 2-D with at least one row and column.

    The shape check of every set of input points (data, inducing points), shape ``(n, d)`` with
    ``n >= 1`` and ``d >= 1``; callers check first that ``X`` is an array at all.
    """
    if X.ndim != 2:
        raise ShapeError(f"{name}: expected a 2-D array of shape (n, d), got shape "
                         f"{describe_shape(X.shape)}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ShapeError(f"{name}: expected at least one row and one column, got shape "
                         f"{describe_shape(X.shape)}")


def check_int(value, name: str, *, minimum: int = 0, expected: str | None = None) -> int:
    """Validate an integer argument ``>= minimum`` (bools rejected) and return it as ``int``.

    ``expected`` words the requirement in the messages (default ``"an integer >= minimum"``).
    Raises ``TypeError`` for a non-integer, ``ValueError`` for one below ``minimum``.
    """
    expected = f"an integer >= {minimum}" if expected is None else expected
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected {expected}, got {value!r}")
    try:
        result = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected {expected}, got {value!r}") from None
    if result < minimum:
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
    return result


def check_positive(value, name: str, *, allow_zero: bool = False) -> float:
    """Validate a positive Python scalar parameter and return it as ``float``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number, got {value!r}") from None
    ok = v >= 0.0 if allow_zero else v > 0.0
    if not ok or v != v or v == float("inf"):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return v
