"""The "done when" experiments of issue 21 (SVTP, seed 002), single-threaded.

1. ``ngd``: natural gradients for q (m, sigma, nu_q) + Adam for the rest, against Adam on
   everything, at equal steps: the whole-training-set negative ELBO after every epoch (32 fixed
   draws of q, the same for both and for every epoch), five seeds (split, inducing points,
   minibatches and draws all follow the seed). Same Adam learning rate (0.03, the CLI's) for
   both; gamma = 0.1.
2. ``outliers``: 5% of the training targets shifted by +-3 standard deviations; test NLL on the
   clean test points of SVTP, the Gaussian-likelihood SVGP and the Student-t-likelihood SVGP,
   each trained by ``gpnum compare --models svgp,svgp-studentt,svtp --outliers 0.05`` (the CLI's
   own path and defaults), five seeds.

Usage (from the repository root)::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python asv_benchmarks/scripts/svtp_experiments.py \\
        ngd docs/svtp_results          # -> ngd.json, ngd.png, a table on stdout
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python asv_benchmarks/scripts/svtp_experiments.py \\
        outliers docs/svtp_results     # -> outliers.json, a table on stdout

Options: ``--m`` (inducing points, default 100), ``--seeds`` (default 5), ``--datasets``,
``--fixed-hyper`` (``ngd`` with only q trained: the two optimisers of q alone), ``--gamma``
(the natural-gradient step, default 0.1; other values add ``_gamma<value>`` to the file names),
``--drop-columns`` (``ngd``: input columns removed from every data set of the run, e.g.
``--datasets bike --drop-columns 15,16`` for bike without the two counts its target is made
of; adds ``_drop<cols>`` to the file names).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

import gpnum
from gpnum.kernels import Matern52

EPOCHS = {"energy": 50, "elevators": 8, "bike": 8}  # ~150, 390 and 410 steps of 256


def full_neg_elbo(model, X, y):
    """Negative ELBO on the whole training set at fixed draws (seed 12345)."""
    draws = model.draw(32, rng=gpnum.backend.default_rng(12345))
    return -float(model.elbo(X, y, draws=draws))


def run_ngd(name, m, seed, fixed_hyper=False, gamma=0.1, drop=()):
    ds = gpnum.datasets.load(name, xp="numpy", seed=seed)
    keep = [j for j in range(ds.X_train.shape[1]) if j not in drop]
    X, y = ds.X_train[:, keep], ds.y_train
    Z = gpnum.inducing.kmeans(X, m, seed=seed)
    out = {}
    for opt in ("ngd", "adam"):
        model = gpnum.SVTP(Matern52(lengthscale=np.ones(X.shape[1])), Z, num_data=X.shape[0],
                           seed=seed)
        # --fixed-hyper: only q trains (kernel, noise, prior df, mean and Z held at their
        # starting values), which isolates the two optimisers of q from the hyper-parameters'.
        fixed = tuple(k for k in model.unconstrained() if not k.startswith("q_")) \
            if fixed_hyper else ()
        curve = [full_neg_elbo(model, X, y)]
        eval_time = [0.0]

        def record(mod, hist, epoch):
            t = time.perf_counter()
            curve.append(full_neg_elbo(mod, X, y))
            eval_time[0] += time.perf_counter() - t
            return False

        t0 = time.perf_counter()
        hist = gpnum.fit(model, X, y, optimizer=opt, gamma=gamma, lr=0.03, epochs=EPOCHS[name],
                         seed=seed, progress=False, callbacks=[record], fixed=fixed)
        train = time.perf_counter() - t0 - eval_time[0]
        test = gpnum.optim.evaluate(model, ds.X_test[:, keep], ds.y_test)
        out[opt] = {"neg_elbo": curve, "steps_per_epoch": hist.num_steps // EPOCHS[name],
                    "train_time_s": train, "test": test, "q_df": float(model.q_df),
                    "df": float(model.df), "stopped": hist.stopped}
    return out


def ngd(args):
    results = {}
    for name in args.datasets:
        results[name] = []
        for seed in range(args.seeds):
            r = run_ngd(name, args.m, seed, args.fixed_hyper, args.gamma, args.drop_columns)
            results[name].append(r)
            a, b = r["ngd"]["neg_elbo"], r["adam"]["neg_elbo"]
            print(f"{name} seed {seed}: -ELBO after epochs 1, half, last: NGD "
                  f"{a[1]:.0f} {a[len(a) // 2]:.0f} {a[-1]:.0f} | Adam {b[1]:.0f} "
                  f"{b[len(b) // 2]:.0f} {b[-1]:.0f}  (train {r['ngd']['train_time_s']:.1f} s"
                  f" / {r['adam']['train_time_s']:.1f} s)", flush=True)
    stem = ("ngd_fixed_hyper" if args.fixed_hyper else "ngd") + (
        "" if args.gamma == 0.1 else f"_gamma{args.gamma:g}") + (
        "_drop" + "-".join(map(str, args.drop_columns)) if args.drop_columns else "")
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump({"m": args.m, "epochs": EPOCHS, "gamma": args.gamma,
                   "drop_columns": list(args.drop_columns), "results": results}, f, indent=1)
    print("\n| data set | steps | epoch | NGD -ELBO (mean +- sd) | Adam -ELBO | NGD lower in |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        E = EPOCHS[name]
        spe = runs[0]["ngd"]["steps_per_epoch"]
        for e in sorted({1, E // 4, E // 2, E}):
            a = np.array([r["ngd"]["neg_elbo"][e] for r in runs])
            b = np.array([r["adam"]["neg_elbo"][e] for r in runs])
            print(f"| {name} | {e * spe} | {e} | {a.mean():.0f} +- {a.std():.0f} | "
                  f"{b.mean():.0f} +- {b.std():.0f} | {_wins(a, b)} |")
    _plot(results, os.path.join(args.out, stem + ".png"))


def _wins(a, b):
    """'k/n seeds' where a < b; with more than five seeds also the count among the first five
    (the issue's five seeds, 0-4)."""
    n = len(a)
    head = f"{int(np.sum(a[:5] < b[:5]))}/5 of seeds 0-4, " if n > 5 else ""
    return f"{head}{int(np.sum(a < b))}/{n} seeds"


def _plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4))
    for ax, (name, runs) in zip(np.atleast_1d(axes), results.items()):
        spe = runs[0]["ngd"]["steps_per_epoch"]
        for opt, color in (("ngd", "C0"), ("adam", "C1")):
            curves = np.array([r[opt]["neg_elbo"] for r in runs])
            steps = np.arange(curves.shape[1]) * spe
            for c in curves:
                ax.plot(steps, c, color=color, lw=0.6, alpha=0.4)
            ax.plot(steps, curves.mean(0), color=color, lw=2,
                    label="NGD (q) + Adam" if opt == "ngd" else "Adam")
        ax.set_yscale("symlog", linthresh=100.0)
        ax.set_xlabel("steps (minibatch 256)")
        ax.set_title(name)
        ax.legend(fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel("negative ELBO, whole training set")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def outliers(args):
    from gpnum.cli import main

    rows = []
    for name in args.datasets:
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                status = main(["compare", "--models", "svgp,svgp-studentt,svtp", "--outliers",
                               "0.05", "--dataset", name, "--num-inducing", str(args.m),
                               "--epochs", str(EPOCHS[name]), "--seed", str(seed), "--out", tmp])
                assert status == 0
                with open(os.path.join(tmp, "compare_models.json")) as f:
                    for r in json.load(f)["rows"]:
                        rows.append({"dataset": name, "seed": seed, **r})
    with open(os.path.join(args.out, "outliers.json"), "w") as f:
        json.dump({"m": args.m, "epochs": EPOCHS, "rows": rows}, f, indent=1)
    print("\n| data set | SVGP Gaussian NLL | SVGP Student-t NLL | SVTP NLL | SVTP < Gaussian | "
          "SVTP RMSE | Gaussian RMSE | Student-t RMSE |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        by = {k: np.array([r["test_nll"] for r in rows if r["dataset"] == name
                           and r["model"] == k]) for k in ("svgp", "svgp-studentt", "svtp")}
        rm = {k: np.array([r["test_rmse"] for r in rows if r["dataset"] == name
                           and r["model"] == k]) for k in ("svgp", "svgp-studentt", "svtp")}
        print(f"| {name} | {by['svgp'].mean():.3f} +- {by['svgp'].std():.3f} | "
              f"{by['svgp-studentt'].mean():.3f} +- {by['svgp-studentt'].std():.3f} | "
              f"{by['svtp'].mean():.3f} +- {by['svtp'].std():.3f} | "
              f"{int(np.sum(by['svtp'] < by['svgp']))}/{len(by['svtp'])} seeds | "
              f"{rm['svtp'].mean():.3f} | {rm['svgp'].mean():.3f} | "
              f"{rm['svgp-studentt'].mean():.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("ngd", "outliers"))
    p.add_argument("out")
    p.add_argument("--m", type=int, default=100)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--datasets", type=lambda s: s.split(","), default=list(EPOCHS))
    p.add_argument("--fixed-hyper", action="store_true",
                   help="ngd: train q only (-> ngd_fixed_hyper.json / .png)")
    p.add_argument("--gamma", type=float, default=0.1,
                   help="ngd: the natural-gradient step size (default 0.1)")
    p.add_argument("--drop-columns", type=lambda s: tuple(int(c) for c in s.split(",")),
                   default=(), help="ngd: input columns to remove, e.g. 15,16")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    (ngd if args.what == "ngd" else outliers)(args)


if __name__ == "__main__":
    main()
