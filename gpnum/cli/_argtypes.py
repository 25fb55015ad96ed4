"""argparse types shared by gpnum's commands.

Each converts one argument and, on bad input, raises ``argparse.ArgumentTypeError`` with a
one-line message naming what was expected.
"""

from __future__ import annotations

import argparse

__all__ = ["choice_list", "fraction", "int_list", "kernel_expression", "nonnegative_int",
           "positive_float", "positive_int", "split"]


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


def nonnegative_int(text):
    """An integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text):
    """A finite number > 0 (NaN and inf refused)."""
    return _number(text, float, lambda v: v > 0.0 and v != float("inf"), "a positive number")


def fraction(text):
    """A number in [0, 1)."""
    return _number(text, float, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)")


def int_list(text):
    """Comma-separated positive integers, such as ``250,500,1000``."""
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 250,500,1000, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def split(text):
    """``random`` or a fixed mask index."""
    if text == "random":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'random' or a mask index 0..9, got {text!r}") \
            from None


def choice_list(choices):
    """A type for a comma-separated list of names from ``choices``."""
    def convert(text):
        vals = [t.strip() for t in text.split(",") if t.strip()]
        bad = [v for v in vals if v not in choices]
        if not vals or bad:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of "
                                             f"{', '.join(choices)}, got {text!r}")
        return vals
    return convert


def kernel_expression(text):
    """A kernel expression (``"matern52"``, ``"rbf + rbf*periodic + white"``), checked for
    unknown names and syntax now rather than after the data are loaded."""
    from gpnum.kernels import from_expression

    try:
        from_expression(text, input_dim=1, xp="numpy")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
