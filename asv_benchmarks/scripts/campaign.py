"""Reliability campaign (issue 31): run ``gpnum fit`` over data sets x models x options.

Every bundled data set x every model and objective (SVGP with Cholesky and CIQ whitening and
dense and Krylov natural gradients, every GVI objective with and without ``--temper``, SVTP,
GPR and SGPR) x both optimisers of that model x float32 / float64 x the numpy,
array_api_strict and torch backends, a few epochs each on a small subset (``--max-train``, a
small ``--num-inducing``), plus a ``--save`` / ``--resume`` pair per data set and backend.
Each run is a separate ``python -m gpnum fit`` process, so that a crash, a refusal and a
success are told apart as a user would see them:

- ``ok``: exit status 0;
- ``refused``: exit status 2 with exactly one ``gpnum: error: ...`` line on stderr (and no
  traceback);
- ``traceback``: anything else (a Python traceback, another status, a timeout).

The outcome of each run (command, status, the error line or the traceback's last line, time)
goes to a JSON file as the campaign runs (a stopped campaign keeps what it ran); at the end a
matrix of outcome counts per data set and model is printed, with totals.

Usage (from the repository's top folder)::

    python asv_benchmarks/scripts/campaign.py --quick            # < 1 minute: CI's subset
    nice -n 5 python asv_benchmarks/scripts/campaign.py --out campaign.json
    python asv_benchmarks/scripts/campaign.py --time-budget 1800 # stop starting runs after 30 min
    python asv_benchmarks/scripts/campaign.py --shard 0/2 --out c0.json &  # one per core
    python asv_benchmarks/scripts/campaign.py --shard 1/2 --out c1.json
    python asv_benchmarks/scripts/campaign.py --merge c0.json c1.json      # the whole matrix

A model the command line refuses as a whole (an older CLI without ``--model gpr``) is skipped
with a note instead of counted as a refusal.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time

DATASETS = ("energy", "elevators", "bike", "elec", "precip")
BACKENDS = ("numpy", "array_api_strict", "torch")
DTYPES = ("float64", "float32")
GVI_OBJECTIVES = ("gwi", "pgvi-wasserstein", "pgvi-bhattacharyya", "pgvi-hellinger",
                  "pgvi-kl", "pgvi-renyi")


def model_configs():
    """``(label, options, optimisers)`` for every model and objective of the campaign."""
    out = []
    for whitening, ngd in itertools.product(("cholesky", "ciq"), ("dense", "krylov")):
        out.append((f"svgp-{whitening}-{ngd}",
                    ["--model", "svgp", "--whitening", whitening, "--ngd-method", ngd],
                    ("ngd", "adam")))
    for obj in GVI_OBJECTIVES:
        for temper in (False, True):
            out.append((obj + ("+temper" if temper else ""),
                        ["--objective", obj, "--select-rounds", "2"]
                        + (["--temper"] if temper else []), ("adam", "ngd")))
    out.append(("svtp", ["--model", "svtp"], ("ngd", "adam")))
    out.append(("gpr", ["--model", "gpr", "--maxiter", "30"], ("lbfgs", "adam")))
    out.append(("sgpr", ["--model", "sgpr", "--maxiter", "30"], ("lbfgs", "adam")))
    return out


def all_runs(quick=False):
    """Every run of the campaign as a dict (or the quick subset)."""
    runs = []
    for ds, (label, opts, optimisers), opt, dtype, backend in itertools.product(
            DATASETS, model_configs(), (0, 1), DTYPES, BACKENDS):
        runs.append({"dataset": ds, "model": label, "optimizer": optimisers[opt],
                     "dtype": dtype, "backend": backend, "options": opts})
    for ds, backend in itertools.product(DATASETS, BACKENDS):
        runs.append({"dataset": ds, "model": "svgp-save-resume", "optimizer": "ngd",
                     "dtype": "float64", "backend": backend, "options": [], "resume": True})
    if quick:
        # every backend, dtype and model family once, five processes (six with the resume)
        keep = {("energy", "svgp-cholesky-dense", "ngd", "float64", "numpy"),
                ("energy", "svgp-ciq-krylov", "adam", "float32", "array_api_strict"),
                ("energy", "pgvi-bhattacharyya+temper", "adam", "float64", "numpy"),
                ("energy", "gpr", "lbfgs", "float32", "torch"),
                ("energy", "svgp-save-resume", "ngd", "float64", "numpy")}
        runs = [r for r in runs if (r["dataset"], r["model"], r["optimizer"], r["dtype"],
                                    r["backend"]) in keep]
    return runs


def base_command(run, args):
    # The GVI regulariser's Algorithm 2 needs num_inducing points; small everywhere.
    return [sys.executable, "-m", "gpnum", "fit", "--dataset", run["dataset"],
            "--max-train", str(args.max_train), "--num-inducing", str(args.num_inducing),
            "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--optimizer", run["optimizer"], "--dtype", run["dtype"],
            "--backend", run["backend"], "--no-progress", *run["options"]]


def classify(proc):
    """``(status, message)`` of a finished ``gpnum fit`` process."""
    err = proc.stderr.strip().splitlines()
    if "Traceback (most recent call last)" in proc.stderr:
        return "traceback", err[-1] if err else ""
    if proc.returncode == 0:
        return "ok", ""
    errors = [ln for ln in err if ln.startswith("gpnum: error: ")]
    if proc.returncode == 2 and len(errors) == 1:
        return "refused", errors[0][len("gpnum: error: "):]
    return "traceback", f"exit status {proc.returncode}: " + (err[-1] if err else "")


def execute(run, args, workdir):
    """Run one campaign entry; returns its record."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = os.path.join(workdir, "out")
    cmd = base_command(run, args) + ["--out", out]
    t0 = time.perf_counter()
    try:
        if run.get("resume"):
            path = os.path.join(workdir, f"ckpt-{run['dataset']}-{run['backend']}.npz")
            first = subprocess.run(cmd + ["--save", path], capture_output=True, text=True,
                                   timeout=args.timeout, env=env)
            status, message = classify(first)
            proc = first
            if status == "ok":
                cmd = base_command(run, args)
                i = cmd.index("--epochs")
                cmd[i + 1] = str(2 * args.epochs)
                cmd += ["--out", out, "--resume", path]
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=args.timeout, env=env)
                status, message = classify(proc)
        else:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                  env=env)
            status, message = classify(proc)
    except subprocess.TimeoutExpired:
        status, message = "traceback", f"timeout after {args.timeout} s"
    rec = {k: v for k, v in run.items() if k != "options"}
    rec.update(command=" ".join(cmd[1:]), status=status, message=message,
               seconds=round(time.perf_counter() - t0, 1))
    return rec


def whole_model_refused(message):
    """A refusal of a model by an older command line (argparse's 'invalid choice')."""
    return "invalid choice" in message and "--model" in message


def matrix(records):
    """The text matrix: one row per data set x model, columns ok / refused / traceback."""
    rows = {}
    for r in records:
        key = (r["dataset"], r["model"])
        rows.setdefault(key, {"ok": 0, "refused": 0, "traceback": 0, "skipped": 0})
        rows[key][r["status"]] += 1
    lines = [f"| {'data set':10} | {'model / objective':24} | ok | refused | traceback | skipped |",
             "|---|---|---|---|---|---|"]
    for (ds, model), c in sorted(rows.items()):
        lines.append(f"| {ds:10} | {model:24} | {c['ok']} | {c['refused']} | {c['traceback']} "
                     f"| {c['skipped']} |")
    totals = {s: sum(1 for r in records if r["status"] == s)
              for s in ("ok", "refused", "traceback", "skipped")}
    lines.append(f"| **all** | | {totals['ok']} | {totals['refused']} | {totals['traceback']} "
                 f"| {totals['skipped']} |")
    return "\n".join(lines), totals


def tables(records):
    """The outcome counts by model, data set, backend and dtype, optimiser, and the refusals
    (the tables of docs/reliability.md)."""
    def by(key, title):
        rows = {}
        for r in records:
            rows.setdefault(key(r), {"ok": 0, "refused": 0, "traceback": 0, "skipped": 0})
            rows[key(r)][r["status"]] += 1
        out = [f"| {title} | ok | refused | traceback |", "|---|---|---|---|"]
        out += [f"| {k} | {c['ok']} | {c['refused']} | {c['traceback']} |"
                for k, c in sorted(rows.items())]
        return "\n".join(out)

    refusals = {}
    for r in records:
        if r["status"] in ("refused", "traceback"):
            refusals[r["message"]] = refusals.get(r["message"], 0) + 1
    ref = ["| refusal or failure (its last line) | runs |", "|---|---|"]
    ref += [f"| {m} | {c} |" for m, c in sorted(refusals.items(), key=lambda kv: -kv[1])]
    return "\n\n".join([
        by(lambda r: r["model"].replace("+temper", " --temper"), "model / objective"),
        by(lambda r: r["dataset"], "data set"),
        by(lambda r: f"{r['backend']} {r['dtype']}", "backend, dtype"),
        by(lambda r: r["optimizer"], "optimizer"),
        "\n".join(ref)])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the CI subset (well under a minute)")
    p.add_argument("--out", default="campaign.json", help="JSON file of the outcomes")
    p.add_argument("--max-train", type=int, default=300)
    p.add_argument("--num-inducing", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    p.add_argument("--time-budget", type=float, default=None,
                   help="start no run after this many seconds (the JSON says how many ran)")
    p.add_argument("--seed", type=int, default=0,
                   help="order of the runs (shuffled so that a stopped campaign covers every "
                        "axis)")
    p.add_argument("--only", default=None, help="a substring a run's model label must contain")
    p.add_argument("--shard", default="0/1", metavar="K/N",
                   help="run only the K-th of N interleaved parts (one process per core)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="print the matrix of these outcome files (the shards of one campaign)")
    args = p.parse_args(argv)
    if args.merge:
        records = [r for path in args.merge for r in json.load(open(path))["records"]]
        text, totals = matrix(records)
        print(text)
        print()
        print(tables(records))
        print(f"{len(records)} runs: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
        return 1 if totals["traceback"] else 0
    if args.quick:
        args.max_train, args.num_inducing, args.epochs = 120, 8, 1
    runs = all_runs(args.quick)
    if args.only:
        runs = [r for r in runs if args.only in r["model"]]
    random.Random(args.seed).shuffle(runs)
    k, n_shards = (int(v) for v in args.shard.split("/"))
    runs = runs[k::n_shards]
    records, refused_models = [], {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        for i, run in enumerate(runs):
            if args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
                break
            base = run["model"].split("+")[0]
            if base in refused_models:
                rec = {k: v for k, v in run.items() if k != "options"}
                rec.update(status="skipped", message=refused_models[base], seconds=0.0)
            else:
                rec = execute(run, args, workdir)
                if rec["status"] == "refused" and whole_model_refused(rec["message"]):
                    refused_models[base] = (f"skipped: this command line has no {base} model "
                                            f"({rec['message']})")
                    rec["status"], rec["message"] = "skipped", refused_models[base]
            records.append(rec)
            print(f"[{i + 1}/{len(runs)}] {rec['status']:9} {rec['dataset']:9} {rec['model']:22} "
                  f"{rec['optimizer']:5} {rec['dtype']} {rec['backend']:16} {rec['seconds']:6.1f} s"
                  + (f"  {rec['message'][:150]}" if rec["message"] else ""), flush=True)
            with open(args.out, "w") as f:
                json.dump({"planned": len(runs), "ran": len(records), "settings": vars(args),
                           "records": records}, f, indent=1)
    text, totals = matrix(records)
    print(text)
    print(f"ran {len(records)} of {len(runs)} planned runs: " +
          ", ".join(f"{k} {v}" for k, v in totals.items()))
    for note in sorted(set(refused_models.values())):
        print("note:", note)
    return 1 if totals["traceback"] else 0


if __name__ == "__main__":
    sys.exit(main())
