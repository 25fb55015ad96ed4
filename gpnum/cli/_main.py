"""The ``gpnum`` command: its parser and the dispatch to one module per subcommand."""

from __future__ import annotations

import sys

from gpnum.cli import compare, datasets, demo, fit, hmm
from gpnum.cli._options import CLIError, Parser

__all__ = ["build_parser", "main"]

_COMMANDS = {"fit": fit, "compare": compare, "hmm": hmm, "datasets": datasets, "demo": demo}


def build_parser():
    """The argument parser of the ``gpnum`` command."""
    parser = Parser(prog="gpnum", description=(
        "Scalable Gaussian processes: train whitened sparse variational GPs with natural "
        "gradients, Cholesky or CIQ whitening, on bundled real data or any CSV."))
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in _COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of ``gpnum`` / ``python -m gpnum``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        import gpnum

        print(gpnum.__version__)
        return 0
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        runner = lambda a: demo.run(a.n, a.seed)  # noqa: E731
    else:
        runner = _COMMANDS[args.command].run
    from gpnum.errors import BackendError, NotPSDError

    try:
        return runner(args)
    except (CLIError, BackendError, NotPSDError, ValueError, FileNotFoundError) as exc:
        print(f"gpnum: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpnum: interrupted", file=sys.stderr)
        return 130
