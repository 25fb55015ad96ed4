"""gpnum's batch VB against hmmlearn's VariationalGaussianHMM: held-out score and time/iteration.

hmmlearn is never a gpnum dependency: run this from a scratch environment that has it, e.g.

    python -m venv /tmp/hmmpeer
    /tmp/hmmpeer/bin/pip install hmmlearn numpy scipy array-api-compat
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. /tmp/hmmpeer/bin/python \\
        asv_benchmarks/scripts/hmm_vs_hmmlearn.py --T 1000000

Both models: K states, full covariances, fitted on one synthetic chain (the sticky chain of
hmm_svi_vs_vb.py) and scored on a second chain of T / 10 steps drawn from the same HMM (``score``: the log
likelihood under the posterior-mean parameters, hmmlearn's definition). Time per iteration:
gpnum from its history clock; hmmlearn as the difference of two fits with ``n_iter = 1`` and
``n_iter = 1 + k`` (the same initialisation), divided by k. Both on NumPy, one BLAS thread;
gpnum in float64 and float32 (hmmlearn computes in float64 only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from hmm_svi_vs_vb import relabelled_accuracy, synthetic_chain  # noqa: E402

from gpnum.hmm import GaussianHMM  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=1_000_000)
    parser.add_argument("--states", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--timing-iterations", type=int, default=4)
    parser.add_argument("--dtypes", default="float64,float32",
                        help="gpnum working precisions to run (hmmlearn is float64 only)")
    args = parser.parse_args()
    from hmmlearn import vhmm

    K = args.states
    Y, states = synthetic_chain(args.T, K=K, seed=0)
    Y_test, states_test = synthetic_chain(args.T // 10, K=K, seed=1)

    from gpnum import backend as B

    ours_per_iter = {}
    for dtype in args.dtypes.split(","):
        Yx = B.asarray(Y, dtype=dtype, xp=B.namespace_by_name("numpy"))
        Yx_test = B.asarray(Y_test, dtype=dtype, xp=B.namespace_by_name("numpy"))
        ours = GaussianHMM(K, 2, seed=0)
        h = ours.fit(Yx, method="vb", max_iter=args.iterations, tol=1e-9)
        per_iter = np.diff([0.0] + h["time"])
        ours_per_iter[dtype] = np.median(per_iter)
        score = ours.score(Yx_test) / len(Y_test)
        acc = relabelled_accuracy(np.asarray(ours.decode(Yx_test)), states_test, K)
        print(f"gpnum {dtype}: {len(h['elbo'])} iterations, median {np.median(per_iter):.3f} "
              f"s/iteration, held-out score {score:.6f} per step, held-out accuracy {acc:.4f}",
              flush=True)

    times = {}
    for n in (1, 1 + args.timing_iterations):
        model = vhmm.VariationalGaussianHMM(K, covariance_type="full", n_iter=n, tol=-np.inf,
                                            random_state=0)
        tic = time.perf_counter()
        model.fit(Y)
        times[n] = time.perf_counter() - tic
    their_iter = (times[1 + args.timing_iterations] - times[1]) / args.timing_iterations
    model = vhmm.VariationalGaussianHMM(K, covariance_type="full", n_iter=args.iterations,
                                        tol=1e-9 * args.T, random_state=0)
    model.fit(Y)
    their_score = model.score(Y_test) / len(Y_test)
    their_acc = relabelled_accuracy(model.predict(Y_test), states_test, K)
    print(f"hmmlearn: {len(model.monitor_.history)} iterations, {their_iter:.3f} s/iteration, "
          f"held-out score {their_score:.6f} per step, held-out accuracy {their_acc:.4f}")
    for dtype, t in ours_per_iter.items():
        print(f"ratio hmmlearn (float64) / gpnum {dtype} time per iteration: {their_iter / t:.2f}")


if __name__ == "__main__":
    main()
