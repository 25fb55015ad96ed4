"""The ``gpnum`` command line: one module per command (``fit``, ``compare``, ``hmm``,
``datasets``, ``demo``), ``figures`` for their plots, ``_options`` for the options ``fit`` and
``compare`` share. Commands parse options, call library functions and report; every capability
they offer is a library function first (:func:`gpnum.models.build_model`,
:func:`gpnum.optim.gvi_by_selection`, :meth:`gpnum.GVI.from_svgp`,
:func:`gpnum.datasets.add_outliers`, :func:`gpnum.datasets.load_series`, ...)."""

from gpnum.cli._main import build_parser, main
from gpnum.cli._options import CLIError
from gpnum.cli.figures import elbo_figure

__all__ = ["CLIError", "build_parser", "elbo_figure", "main"]
