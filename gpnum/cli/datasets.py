"""``gpnum datasets``: list the bundled data sets."""

from __future__ import annotations

__all__ = ["add_parser", "run"]


def add_parser(sub):
    return sub.add_parser("datasets", help="list the bundled data sets")


def run(args):
    from gpnum import datasets

    for info in datasets.available():
        print(info)
    return 0
