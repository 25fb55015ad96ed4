"""Several series sharing hyper-parameters on the state-space path (issue 50), side by side.

1. One LML + gradient and one ``predict_f`` at 10^4 new (time, label) rows, n points in all,
   as one series (kernel Matern-3/2 + SHO on one column) and as S = 100 and 10,000 series
   (the same kernel times ``SameGroup(active_dims=[1])``, labels shuffled among the rows):
   the cost of the sorting by (label, time) and of the restarts.
2. 200 series of 100 points: the one pass of GPR(solver="state_space") over all of them
   against a Python loop of 200 single-series models (state space, then Cholesky), LML and
   gradient.

Usage (quiet machine, one BLAS thread):
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. flock -x /tmp/cpu.lock \\
        python asv_benchmarks/scripts/state_space_series.py 100000
"""

from __future__ import annotations

import sys
import time

import numpy as np


def _kernel(series):
    from gpnum import kernels as K

    k = (K.Matern32(3.0, 0.6, active_dims=[0])
         + K.SHO(1.0, period=5.0, quality=4.0, active_dims=[0]))
    return k * K.SameGroup(active_dims=[1]) if series else k


def _best(f, reps=3):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    from gpnum.likelihoods import Gaussian
    from gpnum.models import GPR

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rng = np.random.default_rng(0)
    for S in (1, 100, 10_000):
        t = rng.uniform(0.0, 1000.0, n)
        labels = np.repeat(np.arange(S, dtype=float), n // S)
        rng.shuffle(labels)
        y = np.sin(t) + 0.3 * rng.standard_normal(n)
        if S == 1:
            model = GPR(_kernel(False), Gaussian(variance=0.1), t[:, None], y,
                        solver="state_space")
            Xs = rng.uniform(0.0, 1000.0, (10_000, 1))
        else:
            model = GPR(_kernel(True), Gaussian(variance=0.1), np.c_[t, labels], y,
                        solver="state_space")
            Xs = np.c_[rng.uniform(0.0, 1000.0, 10_000), rng.integers(0, S, 10_000)]
        t_grad = _best(model.log_marginal_likelihood_and_grad)
        t_pred = _best(lambda m=model, X=Xs: m.predict_f(X), reps=2)
        print(f"n={n} series={S:6d}: LML + gradient {t_grad * 1e3:8.1f} ms, "
              f"predict_f at 10^4 rows {t_pred * 1e3:8.1f} ms", flush=True)

    S, per = 200, 100
    t = rng.uniform(0.0, 100.0, S * per)
    labels = np.repeat(np.arange(S, dtype=float), per)
    y = np.sin(t) + 0.3 * rng.standard_normal(S * per)
    one = GPR(_kernel(True), Gaussian(variance=0.1), np.c_[t, labels], y, solver="state_space")
    loops = {solver: [GPR(_kernel(False), Gaussian(variance=0.1), t[labels == s][:, None],
                          y[labels == s], solver=solver) for s in range(S)]
             for solver in ("state_space", "cholesky")}
    t_one = _best(one.log_marginal_likelihood_and_grad)
    t_loop = {solver: _best(lambda ms=ms: [m.log_marginal_likelihood_and_grad() for m in ms],
                            reps=1) for solver, ms in loops.items()}
    print(f"{S} series x {per} points, LML + gradient: one pass {t_one * 1e3:.1f} ms; a loop "
          f"of single-series models: state space {t_loop['state_space'] * 1e3:.1f} ms, "
          f"Cholesky {t_loop['cholesky'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
