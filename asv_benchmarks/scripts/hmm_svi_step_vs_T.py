"""Time per SVI step against the chain length: it must not grow with T (no per-step copy).

Each step gathers S subchains (plus buffers) from the device-resident chain by index; nothing
else touches the chain. Prints the mean time per step (the history clock, which excludes the
final whole-chain ELBO evaluation) for T = 1e5, 1e6, 1e7 by default.

    OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/hmm_svi_step_vs_T.py --backend numpy

``--per-observation``: the cost of an SVI step per observation of its subchains (buffers
included in the cost, not in the count: S L observations per step) against batch VB's cost per
observation (one iteration over the whole chain, T observations), on a T-step chain (default
10^6, 50 subchains of 20 steps, GrowBuf), interleaved round by round (one VB iteration, then
``--steps`` SVI steps) so that load hits both alike; prints the median per-round ratio and the
mean buffer, and the ratio per observation actually processed (window steps of every growth
round counted).

    OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/hmm_svi_step_vs_T.py --per-observation
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from hmm_svi_vs_vb import synthetic_chain  # noqa: E402

from gpnum import backend as B  # noqa: E402
from gpnum.hmm import GaussianHMM  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--lengths", default="100000,1000000,10000000")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--per-observation", action="store_true",
                        help="SVI step against batch VB per observation (see the docstring)")
    parser.add_argument("--subchain-length", type=int, default=20)
    parser.add_argument("--num-subchains", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    xp = B.namespace_by_name(args.backend)
    if args.per_observation:
        return per_observation(args, xp)
    if args.backend == "torch":
        import torch

        torch.set_num_threads(1)
    for T in (int(t) for t in args.lengths.split(",")):
        Y_host, _ = synthetic_chain(T, K=5)
        Y = B.asarray(Y_host, dtype="float64", xp=xp)
        del Y_host
        for buffer in ("grow", 0):
            model = GaussianHMM(5, 2, seed=0)
            h = model.fit(Y, method="svi", subchain_length=100, num_subchains=10, buffer=buffer,
                          steps=args.steps, seed=1)
            print(f"[{args.backend}] T = {T:>9d}, buffer {buffer!s:>4}: "
                  f"{1e3 * h['time'][-1] / args.steps:.2f} ms per SVI step", flush=True)


def per_observation(args, xp):
    import time

    import numpy as np

    T = int(args.lengths.split(",")[1]) if "," in args.lengths else int(args.lengths)
    S, L = args.num_subchains, args.subchain_length
    Y = B.asarray(synthetic_chain(T, K=5)[0], dtype="float64", xp=xp)
    vb = GaussianHMM(5, 2, seed=0)
    vb.fit(Y, method="vb", max_iter=2)
    svi = GaussianHMM(5, 2, seed=0)
    svi.fit(Y, method="svi", subchain_length=L, num_subchains=S, steps=5, seed=1)
    vb_cost, svi_cost, processed_cost, buffers = [], [], [], []
    for r in range(args.rounds):
        tic = time.perf_counter()
        vb.fit(Y, method="vb", max_iter=1, warm_start=True)
        vb_cost.append((time.perf_counter() - tic) / T)
        # the SVI history clock excludes its final whole-chain ELBO evaluation
        h = svi.fit(Y, method="svi", subchain_length=L, num_subchains=S, steps=args.steps,
                    seed=10 + r, warm_start=True)
        svi_cost.append(h["time"][-1] / (args.steps * S * L))
        buffer = np.mean(h["buffer"])
        buffers.append(buffer)
        # window steps over the growth rounds b = 0, g, ..., buffer (g = L // 4)
        g = max(1, L // 4)
        rounds = [min(T, L + 2 * b) for b in range(0, int(buffer) + 1, g)]
        processed_cost.append(h["time"][-1] / (args.steps * S * sum(rounds)))
    vb_cost, svi_cost = np.asarray(vb_cost), np.asarray(svi_cost)
    print(f"[{args.backend}] T = {T}, S = {S}, L = {L}, GrowBuf, {args.rounds} rounds")
    print(f"batch VB: median {1e6 * np.median(vb_cost):.3f} us per observation")
    print(f"SVI step: median {1e6 * np.median(svi_cost):.3f} us per subchain observation "
          f"(mean buffer {np.mean(buffers):.1f}); ratio SVI / VB per round: median "
          f"{np.median(svi_cost / vb_cost):.2f} (min {np.min(svi_cost / vb_cost):.2f}, max "
          f"{np.max(svi_cost / vb_cost):.2f}); per window step processed: median "
          f"{np.median(np.asarray(processed_cost) / vb_cost):.2f}")


if __name__ == "__main__":
    main()
