"""What ``gpnum fit`` and ``gpnum compare`` share, by concern: data (``_data``), the model the
options describe (``_building``), training (``_training``) and reports (``_reports``). Every
capability is a library function; these modules only map options onto them."""

from gpnum.cli._building import solver_options
from gpnum.cli._data import load_data, select_backend
from gpnum.cli._reports import (
                                environment,
                                have_matplotlib,
                                metrics_line,
                                params_summary,
                                prepare_out,
                                settings,
                                write_rows,
)
from gpnum.cli._training import train

__all__ = ["select_backend", "load_data", "train", "prepare_out", "settings", "environment",
           "metrics_line", "write_rows", "params_summary", "have_matplotlib", "solver_options"]
