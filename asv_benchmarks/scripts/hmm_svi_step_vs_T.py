"""Time per SVI step against the chain length: it must not grow with T (no per-step copy).

Each step gathers S subchains (plus buffers) from the device-resident chain by index; nothing
else touches the chain. Prints the mean time per step (the history clock, which excludes the
final whole-chain ELBO evaluation) for T = 1e5, 1e6, 1e7 by default.

    OPENBLAS_NUM_THREADS=1 python asv_benchmarks/scripts/hmm_svi_step_vs_T.py --backend numpy
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
    args = parser.parse_args()
    xp = B.namespace_by_name(args.backend)
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


if __name__ == "__main__":
    main()
