"""gpnum's batch VB against hmmlearn's VariationalGaussianHMM: held-out score and time/iteration;
gpnum's Viterbi against hmmlearn's compiled one (``--viterbi``).

hmmlearn is never a gpnum dependency: run this from a scratch environment that has it, e.g.

    python -m venv /tmp/hmmpeer
    /tmp/hmmpeer/bin/pip install hmmlearn numpy scipy array-api-compat
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. /tmp/hmmpeer/bin/python \\
        asv_benchmarks/scripts/hmm_vs_hmmlearn.py --T 1000000

Both models: K states, full covariances, fitted on one synthetic chain (the sticky chain of
hmm_svi_vs_vb.py) and scored on a second chain of T / 10 steps drawn from the same HMM
(``score``: the log likelihood under the posterior-mean parameters, hmmlearn's definition).
Time per iteration: after both have converged, ``--rounds`` rounds each time one more iteration
of every model in turn (hmmlearn continuing with ``n_iter=1`` and its ``_init``, which runs
KMeans at every fit, replaced by a no-op), so that load from other processes hits both alike;
the median per-round ratio is reported. Both on NumPy, one BLAS thread; gpnum in float64 and
float32 (hmmlearn computes in float64 only).

``--viterbi``: the most probable path of a T-step, K-state chain (default 10^6 steps, 5 states),
``gpnum.hmm.viterbi`` (``method="auto"``: the blocked solver on a CPU; also the scan with
``--viterbi-scan``) against hmmlearn's compiled ``_hmmc.viterbi`` on the same log start,
transition and per-step log likelihoods, interleaved round by round; both paths and
scores are compared (they must agree exactly / to rounding).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. /work/scratch-hmmlearn/bin/python \\
        asv_benchmarks/scripts/hmm_vs_hmmlearn.py --viterbi --T 1000000
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
    parser.add_argument("--rounds", type=int, default=7,
                        help="interleaved timing rounds (one iteration of each model per round)")
    parser.add_argument("--dtypes", default="float64,float32",
                        help="gpnum working precisions to run (hmmlearn is float64 only)")
    parser.add_argument("--viterbi", action="store_true",
                        help="time Viterbi against hmmlearn's compiled one instead of VB")
    parser.add_argument("--viterbi-scan", action="store_true",
                        help="with --viterbi: also time gpnum's scan method")
    args = parser.parse_args()
    if args.viterbi:
        return compare_viterbi(args)
    from hmmlearn import vhmm

    K = args.states
    Y, states = synthetic_chain(args.T, K=K, seed=0)
    Y_test, states_test = synthetic_chain(args.T // 10, K=K, seed=1)

    from gpnum import backend as B

    xp = B.namespace_by_name("numpy")
    ours = {}
    for dtype in args.dtypes.split(","):
        Yx = B.asarray(Y, dtype=dtype, xp=xp)
        Yx_test = B.asarray(Y_test, dtype=dtype, xp=xp)
        model = GaussianHMM(K, 2, seed=0)
        h = model.fit(Yx, method="vb", max_iter=args.iterations, tol=1e-9)
        score = model.score(Yx_test) / len(Y_test)
        acc = relabelled_accuracy(np.asarray(model.decode(Yx_test)), states_test, K)
        ours[dtype] = (model, Yx)
        print(f"gpnum {dtype}: {len(h['elbo'])} iterations to converge, held-out score "
              f"{score:.6f} per step, held-out accuracy {acc:.4f}", flush=True)

    theirs = vhmm.VariationalGaussianHMM(K, covariance_type="full", n_iter=args.iterations,
                                         tol=1e-9 * args.T, random_state=0)
    theirs.fit(Y)
    their_score = theirs.score(Y_test) / len(Y_test)
    their_acc = relabelled_accuracy(theirs.predict(Y_test), states_test, K)
    print(f"hmmlearn: {len(theirs.monitor_.history)} iterations, held-out score "
          f"{their_score:.6f} per step, held-out accuracy {their_acc:.4f}", flush=True)

    # Time per iteration, interleaved round by round so that a change in the machine's load
    # hits both sides alike: one more iteration of each fitted model (hmmlearn with
    # init_params="" and n_iter=1 continues from its state without re-initialising).
    # VariationalGaussianHMM._init runs KMeans(n_init=10) on X at every fit, whatever
    # init_params says; for the timing rounds it becomes a no-op, so that what is timed is
    # hmmlearn's EM iteration itself (E step in C, lower bound, M step).
    theirs.init_params = ""
    theirs.n_iter = 1
    theirs._init = lambda X, lengths=None: None
    times = {name: [] for name in list(ours) + ["hmmlearn"]}
    for _ in range(args.rounds):
        for dtype, (model, Yx) in ours.items():
            tic = time.perf_counter()
            model.fit(Yx, method="vb", max_iter=1, warm_start=True)
            times[dtype].append(time.perf_counter() - tic)
        tic = time.perf_counter()
        theirs.fit(Y)
        times["hmmlearn"].append(time.perf_counter() - tic)
    their = np.asarray(times["hmmlearn"])
    print(f"hmmlearn: median {np.median(their):.3f} s/iteration over {args.rounds} rounds")
    for dtype in ours:
        mine = np.asarray(times[dtype])
        print(f"gpnum {dtype}: median {np.median(mine):.3f} s/iteration; ratio hmmlearn / gpnum "
              f"per round: median {np.median(their / mine):.2f} (min {np.min(their / mine):.2f},"
              f" max {np.max(their / mine):.2f})")


def compare_viterbi(args):
    """Viterbi on one synthetic chain: gpnum (float64, NumPy) against hmmlearn's C++ loop."""
    from hmmlearn import _hmmc

    from gpnum.hmm import viterbi

    K, T = args.states, args.T
    rng = np.random.default_rng(0)
    Y, _ = synthetic_chain(T, K=K, seed=0)
    # The sticky chain's own parameters: a sticky transition matrix, unit-variance Gaussian
    # emissions around K means (the per-step log likelihoods of the observed chain).
    A = np.full((K, K), 0.05 / (K - 1)) + np.eye(K) * (0.95 - 0.05 / (K - 1))
    means = rng.normal(scale=3.0, size=(K, Y.shape[1]))
    log_lik = -0.5 * ((Y[:, None, :] - means[None]) ** 2).sum(-1)
    log_pi, log_A = np.log(np.full(K, 1.0 / K)), np.log(A)
    runs = {"gpnum auto": lambda: viterbi(log_pi, log_A, log_lik)}
    if args.viterbi_scan:
        runs["gpnum scan"] = lambda: viterbi(log_pi, log_A, log_lik, method="scan")
    # hmmlearn's compiled routine takes the probabilities and their logarithms inside (as its
    # _decode_viterbi calls it), the per-step likelihoods as logarithms.
    pi = np.full(K, 1.0 / K)
    runs["hmmlearn"] = lambda: _hmmc.viterbi(pi, A, log_lik)
    times = {name: [] for name in runs}
    results = {}
    for _ in range(args.rounds):
        for name, run in runs.items():
            tic = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - tic)
    their_score, their_path = results["hmmlearn"]
    their = np.asarray(times["hmmlearn"])
    print(f"Viterbi, T = {T}, K = {K}, float64, NumPy, {args.rounds} interleaved rounds")
    print(f"hmmlearn _hmmc.viterbi: median {np.median(their):.4f} s")
    for name in runs:
        if name == "hmmlearn":
            continue
        path, score = results[name]
        mine = np.asarray(times[name])
        same = np.mean(np.asarray(path) == np.asarray(their_path))
        print(f"{name}: median {np.median(mine):.4f} s; ratio gpnum / hmmlearn per round: "
              f"median {np.median(mine / their):.2f} (min {np.min(mine / their):.2f}, max "
              f"{np.max(mine / their):.2f}); same path at {same:.6f} of the steps; score "
              f"{float(score):.6f} vs {float(their_score):.6f}")


if __name__ == "__main__":
    main()
