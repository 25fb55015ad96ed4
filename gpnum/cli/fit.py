"""``gpnum fit``: train a model on a bundled data set or a CSV and report its test metrics."""

from __future__ import annotations

import json
import os
import time

from gpnum.cli import _common as common
from gpnum.cli import _multioutput as multioutput
from gpnum.cli import figures
from gpnum.cli._options import FULL_BATCH_MODELS, CLIError, add_training_args, resolve_optimizer

__all__ = ["add_parser", "run"]


def add_parser(sub):
    p = sub.add_parser("fit", help="train an SVGP and report test metrics",
                       description="Train a whitened SVGP and report test RMSE/NLL (accuracy "
                                   "for classification), wall time and time per step; "
                                   "write OUT/metrics.json and PNG plots.")
    add_training_args(p)
    return p


def _check_save_path(path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"--save {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"--save {path}: the folder {folder} is not writable")


def _resume_model(args, X, dtype, xp):
    """The model of ``--resume``, checked against the data it is to continue on."""
    import gpnum

    if not os.path.exists(args.resume):
        raise CLIError(f"--resume: file not found: {args.resume}")
    model = gpnum.load(args.resume, xp=xp, device=gpnum.backend.device_of(X))
    state = model.training_state
    if state is None:
        raise CLIError(f"--resume {args.resume}: the checkpoint holds no training state (it was "
                       "not written by 'gpnum fit --save' or gpnum.fit)")
    if model.dtype != dtype:
        raise CLIError(f"--resume {args.resume}: the checkpoint is in "
                       f"{'float32' if model.dtype == xp.float32 else 'float64'}; pass the same "
                       "--dtype")
    if model.full_batch:
        n_model, d_model = model.data()["X"].shape
    else:
        n_model, d_model = model.num_data, model.inducing_points.shape[-1]
    if n_model != X.shape[0] or d_model != X.shape[1]:
        raise CLIError(f"--resume {args.resume}: the checkpoint was trained on "
                       f"{n_model} points with {d_model} inputs, "
                       f"this data has {X.shape[0]} with {X.shape[1]}; pass the same data options "
                       "(--dataset/--csv, --split, --seed, --max-train)")
    if args.epochs is not None and state.epoch > args.epochs:
        raise CLIError(f"--resume {args.resume}: the checkpoint is at epoch {state.epoch}, past "
                       f"--epochs {args.epochs} (the total to train to)")
    return model


def _model_name(args, model):
    import gpnum

    if model is not None:
        return type(model).__name__.lower() if isinstance(model, (gpnum.SVTP, gpnum.GPR,
                                                                  gpnum.SGPR)) else "svgp"
    return args.model


def run(args):
    import gpnum

    if args.targets > 1:
        return multioutput.run(args)
    if args.model is None:
        args.model = "svgp"
    resolve_optimizer(args)
    common.solver_options(args, args.model)  # refuse --solver with another model, before data
    xp, dtype = common.select_backend(args)
    common.prepare_out(args.out)
    if args.save is not None:
        _check_save_path(args.save)
    ds, X, y = common.load_data(args, xp, dtype)
    model = _resume_model(args, X, dtype, xp) if args.resume is not None else None
    name = os.path.basename(args.csv) if args.csv else args.dataset
    kind = _model_name(args, model)
    if kind == "gpr":
        m = "n/a"  # the exact GP has no inducing points
    else:
        m = args.num_inducing if model is None else model.num_inducing
    if kind in FULL_BATCH_MODELS:
        whitening = "n/a"
    else:
        whitening = args.whitening if model is None else (model.whitening or "cholesky")
    solver = (getattr(args, "solver", None) or "cholesky") if model is None else model.solver
    if kind == "gpr" and X.shape[0] > 10000 and solver == "cholesky":
        print(f"note: the exact GP costs O(n^3) = O({X.shape[0]}^3) per L-BFGS iteration and "
              f"{8e-9 * X.shape[0] ** 2:.1f} GB per n x n matrix; --max-train N or --model sgpr "
              "train faster", flush=True)
    print(f"gpnum {gpnum.__version__} fit: {name} (n_train={X.shape[0]}, d={X.shape[1]}, "
          f"n_test={ds.X_test.shape[0]}), model={kind}, m={m}, "
          f"whitening={whitening}, " + (f"solver={solver}, " if kind == "gpr" else "")
          + f"objective={args.objective}, "
          f"optimizer={args.optimizer}, backend={gpnum.backend.backend_name()}, "
          f"dtype={'float32' if dtype == xp.float32 else 'float64'}", flush=True)
    if model is not None:
        total = args.epochs if args.epochs is not None else "the default number"
        print(f"resuming {args.resume} at epoch {model.training_state.epoch} of {total} "
              "(the checkpoint's model, optimiser state and minibatch order)", flush=True)
    callbacks = ()
    if args.save is not None:
        def save_every_epoch(model, history, epoch):
            gpnum.save(model, args.save)
            return False

        callbacks = (save_every_epoch,)
    t0 = time.perf_counter()
    model, lik_name, hist, res = common.train(args, ds, X, y, m, args.whitening, xp, dtype,
                                              not args.no_progress, model=model,
                                              callbacks=callbacks)
    wall = time.perf_counter() - t0
    res["wall_time_s"] = wall
    if args.save is not None:
        gpnum.save(model, args.save)  # also after a stop mid-epoch: the last good parameters
    print(f"{common.metrics_line(res['test'])}  wall time={wall:.1f} s  "
          f"time/step={1e3 * res['time_per_step_s']:.1f} ms ({res['num_steps']} steps)")
    if hist.stopped:
        print(f"note: training stopped early: {hist.stopped}")
    if hist.solver_warnings:
        print(f"note: {hist.solver_warnings} solver call(s) stopped short of their tolerance "
              f"(raise --ciq-maxiter or the jitter for CIQ whitening)")
    out = {
        "settings": common.settings(args),
        "dataset": {"name": name, "n_train": int(X.shape[0]), "n_test": int(ds.X_test.shape[0]),
                    "d": int(X.shape[1]), "likelihood": lik_name},
        "metrics": res,
        "parameters": common.params_summary(model),
        "history": {"epoch_elbo": hist.epoch_elbo, "val": hist.val,
                    "first_epoch": hist.first_epoch},
        "environment": common.environment(),
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(out, f, indent=2)
    written = ["metrics.json"]
    if common.have_matplotlib():
        title = (f"{name}: m={m}, {whitening} whitening" if kind not in FULL_BATCH_MODELS
                 else f"{name}: {kind.upper()}" + (f", m={m}" if kind == "sgpr" else ""))
        figures.plot_elbo(os.path.join(args.out, "elbo.png"), hist, title,
                          ylabel=None if kind not in FULL_BATCH_MODELS else
                          {"gpr": "log marginal likelihood",
                           "sgpr": "collapsed bound (Titsias)"}[kind])
        written.append("elbo.png")
        if name == "precip":
            figures.plot_precip_map(os.path.join(args.out, "precip_map.png"), model, ds)
            written.append("precip_map.png")
    else:
        print("note: matplotlib is not installed; skipped the PNG plots "
              "(pip install \".[cli]\")")
    paths = [os.path.join(args.out, w) for w in written]
    if args.save is not None:
        paths.append(args.save)
    print(f"wrote {', '.join(paths)}")
    return 0
