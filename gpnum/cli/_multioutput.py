"""``gpnum fit --csv FILE --targets K`` with K >= 2: one exact multi-output GP.

The last K columns of the CSV are outputs (empty, ``nan`` or ``NA`` cells are missing entries),
the others inputs; :func:`gpnum.datasets.load_multioutput_csv` standardises them and holds out
15% of the observed entries; the model is :class:`gpnum.models.MultiOutputGPR` with an
``ICM(kernel, K, rank)`` or independent outputs, per-output noise variances, trained by
L-BFGS-B (:func:`gpnum.fit`); :func:`gpnum.optim.evaluate_outputs` gives each output's test
RMSE and NLL on its held-out entries (standardised units, as ``gpnum fit`` reports one output;
``rmse_raw`` in the CSV's units)."""

from __future__ import annotations

import json
import os
import time
import warnings

from gpnum.cli import _common as common
from gpnum.cli._options import CLIError

__all__ = ["HOLDOUT", "check_options", "run"]

#: Fraction of the observed entries held out for the test metrics (the random split's share).
HOLDOUT = 0.15


def check_options(args):
    """Refuse the options that a multi-output fit cannot use, naming each."""
    if args.csv is None:
        raise CLIError(f"--targets {args.targets}: needs --csv PATH (the last {args.targets} "
                       "columns are the outputs)")
    if args.model not in (None, "gpr"):
        raise CLIError(f"--targets {args.targets}: fits the exact multi-output GP; drop --model "
                       f"{args.model}")
    refused = [("--likelihood", args.likelihood not in ("auto", "gaussian")),
               ("--test-mask", args.test_mask is not None),
               ("--split", args.split != "random"),
               ("--max-train", args.max_train is not None),
               ("--outliers", args.outliers > 0.0),
               ("--resume", args.resume is not None),
               ("--objective", args.objective != "svgp"),
               ("--whitening", args.whitening != "cholesky"),
               ("--solver", args.solver not in (None, "auto", "cholesky")),
               ("--optimizer", args.optimizer not in (None, "lbfgs")),
               ("--jitter", args.jitter is not None)]
    bad = [flag for flag, given in refused if given]
    if bad:
        raise CLIError(f"--targets {args.targets}: {', '.join(bad)} cannot be used with the "
                       "multi-output GP (a Gaussian likelihood, a random split of the entries, "
                       "L-BFGS-B on all the data)")
    args.model, args.optimizer = "gpr", "lbfgs"


def _model(args, data):
    from gpnum.models import build_multioutput_model

    # the noise starts as gpnum's default Gaussian likelihood's (models.default_likelihood)
    return build_multioutput_model(data.X, data.Y_train, kernel=args.kernel,
                                   multioutput=args.multioutput, rank=args.rank,
                                   solver="cholesky" if args.solver == "cholesky" else "auto")


def run(args):
    import gpnum

    check_options(args)
    xp, dtype = common.select_backend(args)
    common.prepare_out(args.out)
    if not os.path.exists(args.csv):
        raise CLIError(f"--csv: file not found: {args.csv}")
    data = gpnum.datasets.load_multioutput_csv(args.csv, args.targets, holdout=HOLDOUT,
                                               seed=args.seed, xp=xp, dtype=dtype)
    model = _model(args, data)
    name = os.path.basename(args.csv)
    n, t = data.Y_train.shape
    observed = int(xp.sum(xp.astype(~xp.isnan(data.Y_train), xp.int64)))
    held = int(xp.sum(xp.astype(~xp.isnan(data.Y_test), xp.int64)))
    kind = (f"ICM(rank={args.rank})" if args.multioutput == "icm" else "independent outputs")
    print(f"gpnum {gpnum.__version__} fit: {name} (n={n}, d={data.X.shape[1]}, outputs={t}, "
          f"{observed} training entries, {held} held out, {n * t - observed - held} missing), "
          f"model=MultiOutputGPR, kernel={kind} of {args.kernel}, "
          f"path={'kronecker' if model.uses_kronecker else 'cholesky'}, optimizer=lbfgs, "
          f"backend={gpnum.backend.backend_name()}, "
          f"dtype={'float32' if dtype == xp.float32 else 'float64'}", flush=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
        hist = gpnum.fit(model, maxiter=args.maxiter, progress=not args.no_progress)
    wall = time.perf_counter() - t0
    if args.save is not None:
        gpnum.save(model, args.save)
    test = gpnum.optim.evaluate_outputs(model, data.X, data.Y_test)
    per = test["per_output"]
    per["rmse_raw"] = [None if r is None else r * float(s)
                       for r, s in zip(per["rmse"], data.y_std, strict=True)]
    print(f"{common.metrics_line({'rmse': test['rmse'], 'nll': test['nll']})}  (all held-out "
          f"entries, standardised)  wall time={wall:.1f} s")
    for a, out_name in enumerate(data.output_names):
        if per["num_test"][a] == 0:
            print(f"  {out_name}: no held-out entry")
            continue
        print(f"  {out_name}: test rmse={per['rmse'][a]:.4f} nll={per['nll'][a]:.4f} "
              f"({per['num_test'][a]} entries; rmse {per['rmse_raw'][a]:.4g} in the CSV's units)")
    if hist.stopped:
        print(f"note: training stopped early: {hist.stopped}")
    out = {
        "settings": common.settings(args),
        "dataset": {"name": name, "n": int(n), "d": int(data.X.shape[1]), "outputs": int(t),
                    "output_names": list(data.output_names), "training_entries": observed,
                    "test_entries": held, "holdout": HOLDOUT,
                    "y_mean": [float(v) for v in data.y_mean],
                    "y_std": [float(v) for v in data.y_std]},
        "metrics": {"test": test, "wall_time_s": wall, "num_steps": hist.num_steps},
        "parameters": common.params_summary(model),
        "environment": common.environment(),
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(out, f, indent=2)
    paths = [os.path.join(args.out, "metrics.json")]
    if args.save is not None:
        paths.append(args.save)
    print(f"wrote {', '.join(paths)}")
    return 0
