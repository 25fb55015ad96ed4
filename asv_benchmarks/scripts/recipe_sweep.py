"""The sweep behind the default training recipe (issue 36): every bundled data set, several of
its splits, a grid of settings; the test metrics after every epoch.

Each run trains the model ``gpnum fit`` builds (ARD Matern-5/2 SVGP, m = 500 inducing points by
k-means, the data set's own likelihood, Cholesky whitening, natural gradients for q and Adam for
the hyper-parameters, minibatches of 256) and records, after each epoch, the test RMSE (accuracy
for elec) and NLL and the validation NLL. A setting is ``lr,gamma,schedule``: ``schedule`` is
``const``, ``decayE1-E2`` (Adam's rate x0.1 at those epochs), ``plateauP`` (x0.3 after P epochs
without a lower validation NLL, see :class:`gpnum.optim.PlateauDecay`), ``objplateau`` (x0.3,
twice at most, after max(2 epochs, 100 steps) without a lower training objective) ``halfF``
(x F from half of the epochs on) or ``recipe`` (gpnum's default: ``objplateau`` with the
natural-gradient step cut alongside, :func:`gpnum.optim.default_schedules`); an optional fourth
field ``S`` trains for at least ``S`` steps (``max(epochs, ceil(S / steps per epoch))`` epochs),
which matters on small sets (energy: 3 steps an epoch).

Usage (one JSON line per run appended to OUT; runs already in OUT are skipped, so the sweep can
be split across processes or resumed)::

    OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/recipe_sweep.py OUT.jsonl \
        --settings 0.03,0.1,const 0.01,0.1,const --epochs 30 [--shard 0/2]
    python asv_benchmarks/scripts/recipe_sweep.py OUT.jsonl [MORE.jsonl ...] --report [--epochs-at 20]

One file per process: two processes appending long lines to one file can interleave them.

The splits: energy, elevators and bike fixed masks 0, 1, 2 (90/10 train/test; 10% of the
training rows held out as the validation set, the same for every setting), elec and precip
random 75/10/15 split with seed 0 (its own validation part).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import warnings

RUNS = ([(name, split, 0) for name in ("energy", "elevators", "bike") for split in (0, 1, 2)]
        + [(name, "random", 0) for name in ("elec", "precip")])


def _schedule(spec, lr, gamma, epochs, spe):
    import gpnum

    if spec == "const":
        return None
    if spec.startswith("decay"):
        marks = [int(e) for e in spec[len("decay"):].split("-")]
        return gpnum.optim.step_decay(lr, marks)
    if spec.startswith("plateau"):
        return gpnum.optim.PlateauDecay(lr, patience=int(spec[len("plateau"):]))
    if spec == "objplateau":
        # the training objective's plateau, patience >= 2 epochs and >= 100 steps
        return gpnum.optim.PlateauDecay(lr, patience=max(2, -(-100 // spe)), max_decays=2,
                                        metric="objective")
    if spec == "recipe":
        # gpnum's default recipe: objplateau with the natural-gradient step cut alongside
        return gpnum.optim.default_schedules(lr, gamma, spe)
    if spec.startswith("half"):
        # the rate times F from half of the epochs on
        return lambda t, f=float(spec[len("half"):]): lr * (f if t >= epochs // 2 else 1.0)
    raise ValueError(f"unknown schedule {spec!r}")


def run_one(name, split, seed, setting, epochs, m):
    import numpy as np

    import gpnum

    fields = setting.split(",")
    lr, gamma, sched_spec = float(fields[0]), float(fields[1]), fields[2]
    min_steps = int(fields[3]) if len(fields) > 3 else 0
    ds = gpnum.datasets.load(name, split=split, seed=seed)
    X, y = ds.X_train, ds.y_train
    if ds.X_val.shape[0] > 0:
        X_val, y_val = ds.X_val, ds.y_val
    else:
        X, y, X_val, y_val = gpnum.datasets.holdout(X, y, 0.1, seed=seed + 1)
    model = gpnum.models.build_model(X, kernel="matern52", likelihood=ds.likelihood,
                                     num_inducing=min(m, X.shape[0]), seed=seed)
    test = []

    def record(model, history, epoch):
        test.append(gpnum.optim.evaluate(model, ds.X_test, ds.y_test))
        return False

    spe = -(-X.shape[0] // 256)
    epochs = max(epochs, -(-min_steps // spe))
    sched = _schedule(sched_spec, lr, gamma, epochs, spe)
    sched, gamma_sched = sched if isinstance(sched, tuple) else (sched, None)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hist = gpnum.fit(model, X, y, epochs=epochs, batch_size=256, lr=lr, gamma=gamma,
                         lr_schedule=sched, gamma_schedule=gamma_sched, X_val=X_val, y_val=y_val, callbacks=(record,),
                         progress=False, seed=seed)
    return {"dataset": name, "split": split, "seed": seed, "setting": setting,
            "epochs": epochs, "m": m, "steps_per_epoch": spe, "min_steps": min_steps,
            "test": test, "val": hist.val,
            "stopped": hist.stopped, "train_time_s": time.perf_counter() - t0,
            "lr_final": float(sched(epochs - 1)) if sched is not None else lr,
            "np": np.__version__}


def _key(r):
    return (r["dataset"], str(r["split"]), r["seed"], r["setting"], r["m"])


def _read(paths):
    rows = []
    for path in paths:
        if os.path.exists(path):
            with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows


def sweep(args):
    # runs in any of the files count as done; new ones go to the first
    done = {_key(r) for r in _read(args.out)}
    runs = RUNS
    if args.runs:
        # "energy:3-9": more fixed splits of one set (a smaller standard error of its mean)
        name, span = args.runs.split(":")
        lo, hi = (int(v) for v in span.split("-"))
        runs = [(name, split, 0) for split in range(lo, hi + 1)]
    jobs = [(n, s, sd, st) for st in args.settings for (n, s, sd) in runs]
    k, K = (int(v) for v in args.shard.split("/"))
    for i, (name, split, seed, setting) in enumerate(jobs):
        if i % K != k or (name, str(split), seed, setting, args.m) in done:
            continue
        r = run_one(name, split, seed, setting, args.epochs, args.m)
        with open(args.out[0], "a") as f:
            f.write(json.dumps(r) + "\n")
        last = r["test"][-1] if r["test"] else {}
        print(f"{name} {split}/{seed} {setting}: {last} ({r['train_time_s']:.0f} s)", flush=True)


def report(args):
    """Per data set, each setting's mean test metric and NLL at the chosen epoch, and each
    setting's worst gap to the best setting over the data sets (the selection criterion)."""
    rows = _read(args.out)
    by = {}
    for r in rows:
        # epoch E, or the later one that the setting's minimum number of steps asks for
        at = max(args.epochs_at, -(-r.get("min_steps", 0) // r.get("steps_per_epoch", 1)))
        if len(r["test"]) < at:
            continue
        t = r["test"][at - 1]
        metric = t.get("rmse", None)
        metric = metric if metric is not None else -t["accuracy"]
        by.setdefault((r["dataset"], r["setting"]), []).append((metric, t["nll"]))
    datasets = sorted({d for d, _ in by})
    settings = sorted({s for _, s in by})
    mean = {k: (sum(a for a, _ in v) / len(v), sum(b for _, b in v) / len(v), len(v))
            for k, v in by.items()}
    print(f"test metrics after epoch {args.epochs_at} or the setting's minimum steps (mean over "
          "splits; elec: accuracy)")
    print("| setting | " + " | ".join(datasets) + " | worst RMSE gap | worst NLL gap |")
    print("|---|" + "---|" * (len(datasets) + 2))
    best = {d: (min(mean[(d, s)][0] for s in settings if (d, s) in mean),
                min(mean[(d, s)][1] for s in settings if (d, s) in mean)) for d in datasets}
    for s in settings:
        cells, gap_m, gap_n = [], 0.0, 0.0
        for d in datasets:
            if (d, s) not in mean:
                cells.append("-")
                gap_m = gap_n = float("nan")
                continue
            a, b, cnt = mean[(d, s)]
            cells.append(f"{abs(a):.4f} / {b:.4f} ({cnt})")
            gap_m = max(gap_m, (a - best[d][0]) / abs(best[d][0]))
            gap_n = max(gap_n, b - best[d][1])
        print(f"| {s} | " + " | ".join(cells) + f" | {100 * gap_m:.2f}% | {gap_n:.4f} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="+", help="JSON-lines files: new runs go to the first, runs "
                   "in any of them are skipped; --report reads them all")
    p.add_argument("--settings", nargs="*", default=["0.03,0.1,const"])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--m", type=int, default=500)
    p.add_argument("--shard", default="0/1")
    p.add_argument("--runs", default=None, metavar="SET:LO-HI",
                   help="instead of the standard runs, these fixed splits of one set")
    p.add_argument("--report", action="store_true")
    p.add_argument("--epochs-at", type=int, default=20)
    args = p.parse_args(argv)
    return report(args) if args.report else sweep(args)


if __name__ == "__main__":
    sys.exit(main())
