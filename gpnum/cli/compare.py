"""``gpnum compare``: Cholesky against CIQ whitening over several m, or several models, or
several training objectives, in one table and figure."""

from __future__ import annotations

import os

from gpnum.cli import _common as common
from gpnum.cli import figures
from gpnum.cli._options import OBJECTIVES, CLIError, add_training_args, resolve_optimizer

__all__ = ["add_parser", "run"]


def add_parser(sub):
    p = sub.add_parser("compare", help="Cholesky vs CIQ whitening over several m",
                       description="Train Cholesky- and CIQ-whitened SVGPs for each number "
                                   "of inducing points; write the training-time and test-NLL "
                                   "figures (PNG), a table (Markdown, CSV) and a JSON.")
    add_training_args(p, compare=True)
    return p


def run(args):
    resolve_optimizer(args)
    xp, dtype = common.select_backend(args)
    common.prepare_out(args.out)
    ds, X, y = common.load_data(args, xp, dtype)
    name = os.path.basename(args.csv) if args.csv else args.dataset
    if getattr(args, "objectives", None) is not None and getattr(args, "models", None) is not None:
        raise CLIError("--objectives and --models: compare one or the other")
    if getattr(args, "objectives", None) is not None:
        return _compare_objectives(args, ds, X, y, xp, dtype, name)
    if getattr(args, "models", None) is not None:
        return _compare_models(args, ds, X, y, name, xp, dtype)
    rows = []
    for m in args.num_inducing:
        for whitening in ("cholesky", "ciq"):
            print(f"{name}: m={m} {whitening} ...", flush=True)
            _, _, hist, res = common.train(args, ds, X, y, m, whitening, xp, dtype, False)
            row = {"m": m, "whitening": whitening, **{f"test_{k}": v
                                                      for k, v in res["test"].items()},
                   "train_time_s": res["train_time_s"], "time_per_step_s": res["time_per_step_s"],
                   "num_steps": res["num_steps"]}
            rows.append(row)
            print(f"  {common.metrics_line(res['test'])}  train time={res['train_time_s']:.1f} s  "
                  f"time/step={1e3 * res['time_per_step_s']:.1f} ms", flush=True)
    keys = list(rows[0])
    with open(os.path.join(args.out, "compare.csv"), "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r[k]) for k in keys) + "\n")
    written = ["compare.csv", *common.write_rows(args, "compare", rows, name)]
    if common.have_matplotlib():
        figures.plot_compare(args.out, rows, name)
        written += ["compare_time.png", "compare_nll.png"]
    print(f"wrote {', '.join(os.path.join(args.out, w) for w in written)}")
    return 0


def _objective_list(text):
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in OBJECTIVES]
    if not names or bad:
        raise CLIError(f"--objectives: expected comma-separated names from "
                       f"{', '.join(OBJECTIVES)}, got {text!r}")
    return names


def _compare_objectives(args, ds, X, y, xp, dtype, name):
    """``gpnum compare --objectives``: one row per (objective, m), one table, one figure."""
    objectives = _objective_list(args.objectives)
    rows = []
    for m in args.num_inducing:
        for obj in objectives:
            args.objective = obj
            label = obj + (" (no cross term)" if obj == "gwi" and args.no_eigen_term else "")
            if obj != "svgp" and args.regulariser_fit == "svgp":
                label += " [P from SVGP]"
            print(f"{name}: m={m} {label} ...", flush=True)
            model, _, hist, res = common.train(args, ds, X, y, m, "cholesky", xp, dtype, False)
            row = {"objective": label, "m": m,
                   **{f"test_{k}": v for k, v in res["test"].items()},
                   "init_time_s": res["init_time_s"], "train_time_s": res["train_time_s"],
                   "wall_time_s": (res["init_time_s"] + res["train_time_s"]
                                   + res.get("temper_time_s", 0.0)),
                   "time_per_step_s": res["time_per_step_s"], "num_steps": res["num_steps"],
                   "tempered": "temper_scale" in res}
            rows.append(row)
            print(f"  {common.metrics_line(res['test'])}  train time={res['train_time_s']:.1f} s  "
                  f"time/step={1e3 * res['time_per_step_s']:.1f} ms", flush=True)
    del args.objective
    written = common.write_rows(args, "objectives", rows, name)
    if common.have_matplotlib():
        figures.plot_objectives(os.path.join(args.out, "objectives.png"), rows, name)
        written.append("objectives.png")
    print(f"wrote {', '.join(os.path.join(args.out, w) for w in written)}")
    return 0


def _compare_models(args, ds, X, y, name, xp, dtype):
    """``gpnum compare --models``: each model at each m, Cholesky whitening, one table."""
    rows = []
    for m in args.num_inducing:
        for kind in args.models:
            print(f"{name}: m={m} {kind} ...", flush=True)
            _, _, hist, res = common.train(args, ds, X, y, m, "cholesky", xp, dtype, False,
                                           kind=kind)
            rows.append({"m": m, "model": kind, "outliers": args.outliers,
                         **{f"test_{k}": v for k, v in res["test"].items()},
                         "final_elbo": hist.epoch_elbo[-1] if hist.epoch_elbo else None,
                         "train_time_s": res["train_time_s"], "num_steps": res["num_steps"]})
            print(f"  {common.metrics_line(res['test'])}  train time={res['train_time_s']:.1f} s",
                  flush=True)
    written = common.write_rows(args, "compare_models", rows, name)
    print(f"wrote {', '.join(os.path.join(args.out, w) for w in written)}")
    return 0
