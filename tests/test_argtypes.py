"""The command lines' shared argparse types (gpnum.cli._argtypes): values accepted, and one-line
errors naming what was expected."""

import argparse

import pytest

from gpnum.cli import _argtypes as argtypes


@pytest.mark.parametrize("convert, text, value", [
    (argtypes.positive_int, "3", 3),
    (argtypes.positive_float, "1e-3", 1e-3),
    (argtypes.fraction, "0", 0.0),
    (argtypes.fraction, "0.05", 0.05),
])
def test_accepts(convert, text, value):
    assert convert(text) == value


@pytest.mark.parametrize("convert, text, expected", [
    (argtypes.positive_int, "0", "a positive integer"),
    (argtypes.positive_int, "1.5", "a positive integer"),
    (argtypes.positive_int, "x", "a positive integer"),
    (argtypes.positive_float, "0", "a positive number"),
    (argtypes.positive_float, "-1", "a positive number"),
    (argtypes.positive_float, "nan", "a positive number"),
    (argtypes.positive_float, "inf", "a positive number"),
    (argtypes.positive_float, "x", "a positive number"),
    (argtypes.fraction, "1", r"a fraction in \[0, 1\)"),
    (argtypes.fraction, "-0.1", r"a fraction in \[0, 1\)"),
    (argtypes.fraction, "nan", r"a fraction in \[0, 1\)"),
])
def test_refuses_with_a_message(convert, text, expected):
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^expected {expected}, got '{text}'$"):
        convert(text)
