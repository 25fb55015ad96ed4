"""SVI against batch VB on a long synthetic Gaussian HMM (issue 19's acceptance measurement).

A sticky 5-state chain with 2-D Gaussian emissions, T = 1e6 by default. Batch VB runs to its
tolerance; SVI runs with GrowBuf and without a buffer, evaluating the whole-chain ELBO every
``--eval-every`` steps (evaluation time excluded from its clock, as in the library's history).
Printed per backend: batch VB time and ELBO, for each SVI variant the first time its ELBO is
within 1% of batch VB's final ELBO and that time as a fraction of batch VB's, and the decoded
state accuracy (up to relabelling, by the Hungarian assignment on the confusion matrix).

    OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/hmm_svi_vs_vb.py --backend numpy
    OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/hmm_svi_vs_vb.py --backend torch
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from gpnum import backend as B
from gpnum.hmm import GaussianHMM


def synthetic_chain(T, K=5, D=2, stay=0.98, sep=3.0, seed=0):
    """A sticky chain: ``A = stay`` on the diagonal, the rest spread evenly; unit-noise
    Gaussian emissions with means on a circle of radius ``sep`` (neighbours 2 sep sin(pi/K)
    apart, 3.5 noise standard deviations for K = 5, sep = 3), in the first two dimensions."""
    rng = np.random.default_rng(seed)
    A = np.full((K, K), (1.0 - stay) / (K - 1))
    np.fill_diagonal(A, stay)
    # Vectorised sampling: dwell times are geometric, the next state uniform among the others.
    states = []
    total = 0
    x = int(rng.integers(K))
    while total < T:
        run = int(rng.geometric(1.0 - stay))
        states.append(np.full(run, x))
        total += run
        x = int((x + rng.integers(1, K)) % K)
    states = np.concatenate(states)[:T]
    means = np.zeros((K, D))
    angle = 2.0 * np.pi * np.arange(K) / K
    means[:, 0], means[:, 1] = sep * np.cos(angle), sep * np.sin(angle)
    Y = means[states] + rng.normal(size=(T, D))
    return Y, states


def relabelled_accuracy(path, states, K):
    confusion = np.zeros((K, K))
    np.add.at(confusion, (path, states), 1.0)
    rows, cols = linear_sum_assignment(-confusion)
    return confusion[rows, cols].sum() / len(states)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--T", type=int, default=1_000_000)
    parser.add_argument("--states", type=int, default=5)
    parser.add_argument("--vb-iter", type=int, default=100)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--subchain-length", type=int, default=100)
    parser.add_argument("--num-subchains", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    xp = B.namespace_by_name(args.backend)
    if args.backend == "torch":
        import torch

        torch.set_num_threads(1)
    Y_host, states = synthetic_chain(args.T, K=args.states)
    Y = B.asarray(Y_host, dtype="float64", xp=xp)
    K = args.states
    results = {"backend": args.backend, "T": args.T, "K": K}

    vb = GaussianHMM(K, 2, seed=0)
    h_vb = vb.fit(Y, method="vb", max_iter=args.vb_iter, tol=args.tol)
    t_vb, elbo_vb = h_vb["time"][-1], h_vb["elbo"][-1]
    acc_vb = relabelled_accuracy(B.to_numpy(vb.decode(Y)), states, K)
    results["vb"] = {"time": t_vb, "iterations": len(h_vb["elbo"]), "elbo": elbo_vb,
                     "time_per_iteration": t_vb / len(h_vb["elbo"]), "accuracy": acc_vb}
    results["vb"]["first_elbo"] = h_vb["elbo"][0]
    print(f"[{args.backend}] batch VB: ELBO after its first local step {h_vb['elbo'][0]:.6g} "
          f"(rel. gap to its final {abs(h_vb['elbo'][0] - elbo_vb) / abs(elbo_vb):.2e})")
    print(f"[{args.backend}] batch VB: {len(h_vb['elbo'])} iterations, {t_vb:.1f} s "
          f"({t_vb / len(h_vb['elbo']):.2f} s/iteration), ELBO {elbo_vb:.6g}, "
          f"accuracy {acc_vb:.4f}", flush=True)

    for label, buffer in (("grow", "grow"), ("none", 0)):
        svi = GaussianHMM(K, 2, seed=0)
        tic = time.perf_counter()
        h = svi.fit(Y, method="svi", subchain_length=args.subchain_length,
                    num_subchains=args.num_subchains, buffer=buffer, steps=args.steps,
                    eval_every=args.eval_every, tau=1.0, kappa=0.6, seed=1)
        wall = time.perf_counter() - tic
        within = [(t, e, s) for t, e, s in zip(h["time"], h["elbo"], h["step"])
                  if abs(e - elbo_vb) <= 0.01 * abs(elbo_vb)]
        acc = relabelled_accuracy(B.to_numpy(svi.decode(Y)), states, K)
        first = within[0] if within else None
        results[f"svi_{label}"] = {
            "history": h, "accuracy": acc, "wall_with_evaluations": wall,
            "first_within_1pct": None if first is None else
            {"time": first[0], "elbo": first[1], "step": first[2],
             "fraction_of_vb": first[0] / t_vb},
            "mean_buffer": float(np.mean(h["buffer"]))}
        where = ("never within 1%" if first is None else
                 f"within 1% at step {first[2]} after {first[0]:.2f} s = {first[0] / t_vb:.3f} of "
                 f"batch VB's time")
        print(f"[{args.backend}] SVI buffer={label}: final ELBO {h['elbo'][-1]:.6g} "
              f"(rel. gap {abs(h['elbo'][-1] - elbo_vb) / abs(elbo_vb):.2e}), {where}; "
              f"{h['time'][-1]:.2f} s for {args.steps} steps, mean buffer "
              f"{np.mean(h['buffer']):.1f}, accuracy {acc:.4f}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
