"""What the commands write: the metrics line, parameter summaries, the ``--out`` folder and its
tables, and the settings and environment that go with them."""

from __future__ import annotations

import json
import os
import platform

from gpnum.cli._options import CLIError

__all__ = ["environment", "have_matplotlib", "metrics_line", "params_summary", "prepare_out",
           "settings", "write_rows"]


def params_summary(model):
    from gpnum import backend as B

    out = {}
    for k, v in model.parameters().items():
        if k.startswith(("kernel.", "likelihood.")) or k == "mean":
            out[k] = B.to_numpy(v).tolist()
    return out


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def metrics_line(test):
    return "  ".join(f"test {k}={v:.4f}" for k, v in test.items())


def prepare_out(path):
    """Create ``--out`` and check that it takes files, naming the option when it does not."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".gpnum-write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise CLIError(f"--out {path}: cannot write there ({exc.strerror or exc})") from None


def settings(args):
    """The command's options, as given (not the top-level flags such as --version)."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "version", "command")}


def environment():
    import gpnum

    return {"gpnum": gpnum.__version__, "python": platform.python_version(),
            "backend": gpnum.backend.backend_name()}


def write_rows(args, stem, rows, name):
    """``<stem>.md`` (one row per dict, the first one's keys as columns, floats to 4
    significant digits) and ``<stem>.json`` (rows, settings, environment) in ``args.out``;
    returns the two file names."""
    keys = list(rows[0])
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n")
        for r in rows:
            f.write("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k])
                                      for k in keys) + " |\n")
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump({"settings": settings(args), "dataset": name, "rows": rows,
                   "environment": environment()}, f, indent=2)
    return [stem + ".md", stem + ".json"]
