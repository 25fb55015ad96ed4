"""argparse types shared by gpnum's command lines (``gpnum/cli.py``, ``gpnum/hmm/_cli.py``).

Each converts one argument and, on bad input, raises ``argparse.ArgumentTypeError`` with a
one-line message naming what was expected. It imports nothing from gpnum, so the command line of
any layer can use it.
"""

from __future__ import annotations

import argparse

__all__ = ["fraction", "positive_float", "positive_int"]


def _number(text, convert, ok, expected):
    """``convert(text)`` if that succeeds and ``ok`` accepts it, else an ArgumentTypeError."""
    try:
        v = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not ok(v):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return v


def positive_int(text):
    """An integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def positive_float(text):
    """A finite number > 0 (NaN and inf refused)."""
    return _number(text, float, lambda v: v > 0.0 and v != float("inf"), "a positive number")


def fraction(text):
    """A number in [0, 1)."""
    return _number(text, float, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)")
