"""Command-line entry point: ``python -m gpnum`` / ``gpnum`` (see :mod:`gpnum.cli`).

All commands live in :mod:`gpnum.cli`; this module only runs them (it imports nothing that
imports it back).
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    from gpnum.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
