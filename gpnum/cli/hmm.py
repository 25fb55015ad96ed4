"""``gpnum hmm``: fit a Gaussian HMM to columns of a CSV (or the bundled elec demand series).

Prints the ELBO and the fitting time, writes ``OUT/hmm.json`` (settings, ELBO history, state
means, transition matrix, state occupancy) and ``OUT/hmm_states.png``: the series coloured by
the decoded (Viterbi) state. The series comes from :func:`gpnum.datasets.load_series`, the
model from :class:`gpnum.hmm.GaussianHMM`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from gpnum.cli import _argtypes as argtypes

__all__ = ["add_parser", "run"]

def _buffer(text):
    if text in ("grow", "none"):
        return text
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'grow', 'none' or a buffer length >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a buffer length >= 0, got {text!r}")
    return v


def add_parser(subparsers):
    """Add the ``hmm`` subcommand to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "hmm", help="fit a Gaussian hidden Markov model (batch VB or SVI) to a series",
        description="Fit a Gaussian HMM by batch variational Bayes or stochastic VI over "
                    "subchains (GrowBuf buffers) to columns of a CSV, or to the bundled Elec2 "
                    "demand series; print the ELBO and time, write OUT/hmm.json and a figure "
                    "of the series coloured by the decoded state.")
    data = p.add_argument_group("data")
    data.add_argument("--csv", default=None,
                      help="CSV file (header row; .gz allowed). Default: the bundled elec data")
    data.add_argument("--columns", default=None,
                      help="comma-separated column names (or 0-based indices) forming the "
                           "series (default for elec: nswdemand,vicdemand; for a CSV: all)")
    data.add_argument("--no-standardize", action="store_true",
                      help="fit the raw columns instead of standardised ones")
    model = p.add_argument_group("model")
    model.add_argument("--states", type=argtypes.positive_int, default=3,
                       help="hidden states K (3)")
    model.add_argument("--covariance", choices=("full", "diag"), default="full")
    model.add_argument("--method", choices=("vb", "svi"), default="svi")
    model.add_argument("--max-iter", type=argtypes.positive_int, default=100,
                       help="batch VB iterations")
    model.add_argument("--tol", type=float, default=1e-6, help="batch VB relative tolerance")
    model.add_argument("--subchain-length", type=argtypes.positive_int, default=100)
    model.add_argument("--num-subchains", type=argtypes.positive_int, default=10)
    model.add_argument("--buffer", type=_buffer, default="grow",
                       help="'grow' (GrowBuf), 'none', or a fixed buffer length")
    model.add_argument("--steps", type=argtypes.positive_int, default=500, help="SVI steps")
    model.add_argument("--eval-every", type=int, default=50,
                       help="SVI: whole-series ELBO every this many steps")
    model.add_argument("--tau", type=float, default=1.0)
    model.add_argument("--kappa", type=float, default=0.6)
    model.add_argument("--seed", type=int, default=0)
    run_g = p.add_argument_group("run")
    run_g.add_argument("--backend", default=None,
                       help="numpy, torch, cupy or array_api_strict (default GPNUM_BACKEND)")
    run_g.add_argument("--dtype", choices=("float32", "float64"), default=None)
    run_g.add_argument("--out", default="hmm_out", help="output directory (default hmm_out)")
    return p


def _split_columns(text):
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise ValueError(f"--columns: expected comma-separated column names, got {text!r}")
    return cols


def _plot(path, Y, names, path_states, K, title):
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    D = Y.shape[1]
    fig, axes = plt.subplots(D, 1, figsize=(11, 2.4 * D + 0.6), sharex=True, squeeze=False)
    cmap = plt.get_cmap("tab10")
    t = np.arange(Y.shape[0])
    for d in range(D):
        ax = axes[d, 0]
        ax.plot(t, Y[:, d], color="0.8", linewidth=0.3, zorder=1)
        for k in range(K):
            mask = path_states == k
            ax.scatter(t[mask], Y[mask, d], s=0.6, color=cmap(k % 10),
                       label=f"state {k}", zorder=2, rasterized=True)
        ax.set_ylabel(names[d])
    axes[0, 0].set_title(title)
    axes[0, 0].legend(loc="upper right", markerscale=8, fontsize=7, ncol=min(K, 5))
    axes[-1, 0].set_xlabel("time step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args) -> int:
    """Run ``gpnum hmm`` with parsed ``args``; returns the exit status (2 on bad input)."""
    from gpnum.errors import BackendError

    try:
        return _run(args)
    except (BackendError, ValueError, TypeError, FileNotFoundError) as exc:
        print(f"gpnum hmm: error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    import numpy as np

    if args.backend is not None:
        os.environ["GPNUM_BACKEND"] = args.backend
    if args.dtype is not None:
        os.environ["GPNUM_DTYPE"] = args.dtype
    from gpnum import backend as B
    from gpnum.hmm import GaussianHMM

    xp = B.namespace()
    dtype = B.default_dtype(xp)
    from gpnum.datasets import load_series

    columns = None if args.columns is None else _split_columns(args.columns)
    try:
        Y_host, Y_raw, names, label = load_series(args.csv, columns,
                                                  standardize=not args.no_standardize)
    except ValueError as exc:
        # name the option, as every other message of this command does
        raise ValueError(str(exc).replace("columns: ", "--columns: ", 1)
                         if str(exc).startswith("columns: ") else str(exc)) from None
    Y = B.asarray(Y_host, dtype=dtype, xp=xp)
    T, D = Y_host.shape
    model = GaussianHMM(args.states, D, covariance=args.covariance, seed=args.seed)
    print(f"gpnum hmm: {label}, columns {','.join(names)}, T = {T}, K = {args.states}, "
          f"method {args.method}, backend {B.backend_name()} "
          f"{getattr(dtype, '__name__', str(dtype)).split('.')[-1]}")
    tic = time.perf_counter()
    if args.method == "vb":
        history = model.fit(Y, method="vb", max_iter=args.max_iter, tol=args.tol)
    else:
        L = min(args.subchain_length, T)
        buffer = None if args.buffer == "none" else args.buffer
        history = model.fit(Y, method="svi", subchain_length=L,
                            num_subchains=args.num_subchains, buffer=buffer, steps=args.steps,
                            tau=args.tau, kappa=args.kappa, seed=args.seed,
                            eval_every=max(0, args.eval_every))
    wall = time.perf_counter() - tic
    elbo = history["elbo"][-1]
    path_states = B.to_numpy(model.decode(Y))
    occupancy = np.bincount(path_states, minlength=args.states) / T
    _, A = model.posterior_mean_params()
    print(f"ELBO {elbo:.6g} ({elbo / T:.4f} per step); fit time {history['time'][-1]:.2f} s "
          f"(wall {wall:.2f} s with ELBO evaluations); log-likelihood (score) "
          f"{model.score(Y):.6g}")
    print("state occupancy: " + ", ".join(f"{k}: {o:.3f}" for k, o in enumerate(occupancy)))
    os.makedirs(args.out, exist_ok=True)
    report = {
        "source": label, "columns": names, "T": T, "states": args.states,
        "method": args.method, "covariance": args.covariance,
        "settings": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str))
                     or v is None},
        "elbo": elbo, "history": history, "fit_time": history["time"][-1], "wall_time": wall,
        "score": model.score(Y), "occupancy": occupancy.tolist(),
        "transition_matrix": B.to_numpy(A).tolist(),
        "means_standardized": B.to_numpy(model.means()).tolist(),
    }
    with open(os.path.join(args.out, "hmm.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    try:
        import matplotlib  # noqa: F401  (optional: only the figure needs it)
    except ImportError:
        print("note: matplotlib is not installed; skipped the figure (pip install matplotlib)")
        return 0
    figure = os.path.join(args.out, "hmm_states.png")
    _plot(figure, Y_raw, names, path_states, args.states,
          f"{label}: {args.states}-state Gaussian HMM ({args.method}), decoded states")
    print(f"wrote {os.path.join(args.out, 'hmm.json')} and {figure}")
    return 0
