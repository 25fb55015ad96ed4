"""Issue 20's "done when" experiment: GVI objectives against SVGP from the command line.

    python gvi_experiment.py OUT [M] [EPOCHS]          # default OUT=gvi_results, M=200, EPOCHS=20

1. For elevators, bike, energy (fixed split 0) and elec (random 75/10/15 split, seed 0) runs

       python -m gpnum compare --dataset D [--split 0] --objectives
           svgp,gwi,pgvi-bhattacharyya,pgvi-kl --num-inducing M --epochs E --temper --out OUT/D

   (energy, with 3 steps per epoch, gets 10 E epochs), then the three GVI objectives again with
   ``--regulariser-fit svgp`` (P's kernel and Z from an SVGP trained first), and gathers the rows
   into OUT/table.md and one figure, OUT/gvi_objectives.png.
2. Times one GWI step (objective and gradients, then the Adam update, as ``gpnum.fit`` does)
   at batch 1000 on elevators, with and without the Wasserstein cross term, interleaved in one
   process (median of 7 each), and writes OUT/step_cost.md.

Run single-threaded (OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1) on a quiet machine for timings.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else "gvi_results"
M = int(sys.argv[2]) if len(sys.argv) > 2 else 200
EPOCHS = int(sys.argv[3]) if len(sys.argv) > 3 else 20
OBJECTIVES = "svgp,gwi,pgvi-bhattacharyya,pgvi-kl"
GVI_ONLY = "gwi,pgvi-bhattacharyya,pgvi-kl"
SETS = [("elevators", ["--split", "0"], EPOCHS), ("bike", ["--split", "0"], EPOCHS),
        ("energy", ["--split", "0"], 10 * EPOCHS), ("elec", [], EPOCHS)]


def gather():
    """The rows of a finished run (to redraw the table and figure without training)."""
    rows = []
    for name, _, _ in SETS:
        for sub in ("algorithm2", "svgp_fit"):
            with open(os.path.join(OUT, name, sub, "objectives.json")) as f:
                rows += [{"dataset": name, **r} for r in json.load(f)["rows"]]
    return rows


def run_compare():
    rows = []
    for name, split, epochs in SETS:
        # The seed's pipeline (Algorithm 2 fits P), then P taken from an SVGP trained first.
        for objectives, extra, sub in ((OBJECTIVES, [], "algorithm2"),
                                       (GVI_ONLY, ["--regulariser-fit", "svgp"], "svgp_fit")):
            out = os.path.join(OUT, name, sub)
            cmd = [sys.executable, "-m", "gpnum", "compare", "--dataset", name, *split,
                   "--objectives", objectives, "--num-inducing", str(M), "--epochs",
                   str(epochs), "--temper", *extra, "--out", out]
            print(" ".join(cmd[1:]), flush=True)
            subprocess.run(cmd, check=True)
            with open(os.path.join(out, "objectives.json")) as f:
                for r in json.load(f)["rows"]:
                    rows.append({"dataset": name, **r})
    return rows


def write_table(rows):
    lines = ["| data set | objective | test NLL | test RMSE / accuracy | wall time (s) | "
             "time/step (ms) | steps |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        metric = r.get("test_rmse", r.get("test_accuracy"))
        lines.append(f"| {r['dataset']} | {r['objective']} | {r['test_nll']:.3f} | "
                     f"{metric:.3f} | {r['wall_time_s']:.1f} | "
                     f"{1e3 * r['time_per_step_s']:.1f} | {r['num_steps']} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "table.md"), "w") as f:
        f.write(text)
    print(text)


def figure(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s[0] for s in SETS]
    objs = list(dict.fromkeys(r["objective"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    w = 0.8 / len(objs)
    for j, obj in enumerate(objs):
        nll = [next(r["test_nll"] for r in rows if r["dataset"] == n and r["objective"] == obj)
               for n in names]
        tps = [next(1e3 * r["time_per_step_s"] for r in rows
                    if r["dataset"] == n and r["objective"] == obj) for n in names]
        x = np.arange(len(names)) + (j - (len(objs) - 1) / 2) * w
        axes[0].bar(x, nll, w, label=obj)
        axes[1].bar(x, tps, w, label=obj)
    for ax, title in ((axes[0], "test NLL (lower is better)"),
                      (axes[1], "time per training step (ms), batch 256")):
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.set_title(title, fontsize=9)
        ax.axhline(0.0, color="k", lw=0.5)
    axes[1].set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7)
    fig.suptitle(f"GVI objectives (tempered) vs SVGP, m = {M} (single thread)")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(os.path.join(OUT, "gvi_objectives.png"), dpi=110)


def step_cost(batch=1000, repeats=7):
    import warnings

    import gpnum
    from gpnum.kernels import Matern52
    from gpnum.likelihoods import Gaussian
    from gpnum.optim import Adam

    ds = gpnum.datasets.load("elevators", split=0)
    X, y = ds.X_train, ds.y_train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = gpnum.optim.select_inducing(X, y, Matern52(lengthscale=np.ones(X.shape[1])),
                                          Gaussian(0.1), M, max_iter=3)
    rng = np.random.default_rng(0)
    models = {e: gpnum.GVI(sel.kernel, Gaussian(0.693), sel.inducing_points,
                           num_data=X.shape[0], divergence="wasserstein", eigen_term=e)
              for e in (True, False)}
    adams = {e: Adam(lr=0.1) for e in models}
    times = {e: [] for e in models}
    for _ in range(repeats):
        idx = rng.choice(X.shape[0], batch, replace=False)
        Xb, yb = X[idx], y[idx]
        for e, model in models.items():
            t0 = time.perf_counter()
            _, g = model.objective_and_grad(Xb, yb, validate=False)
            gu = model.grad_to_unconstrained(g)
            u = model.unconstrained()
            model.set_unconstrained(adams[e].step({k: u[k] for k in gu}, gu, maximize=True))
            times[e].append(time.perf_counter() - t0)
    full, cheap = statistics.median(times[True]), statistics.median(times[False])
    text = (f"| GWI step at batch {batch}, m = {M} (elevators) | median of {repeats} (s) |\n"
            f"|---|---|\n| with the cross term | {full:.4f} |\n"
            f"| without it (eigen_term=False) | {cheap:.4f} |\n"
            f"| ratio without / with | {cheap / full:.4f} |\n")
    with open(os.path.join(OUT, "step_cost.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    if os.environ.get("GVI_REDRAW"):  # GVI_REDRAW=1: table and figure from a finished run
        rows = gather()
        write_table(rows)
        figure(rows)
        sys.exit(0)
    step_cost()
    rows = run_compare()
    write_table(rows)
    figure(rows)
