"""How long ``gpnum.fit`` (L-BFGS-B) of a Matern-3/2 + SHO state-space GPR takes (issue 50).

Fits GPR(solver="state_space") on the first series of ``state_space_vs_celerite.py`` (n
points at sorted uniform random times on [0, n / 10], ``y = sin(t) + 0.3 N(0, 1)``) from the
same start (Matern-3/2 variance 1, lengthscale 2; SHO variance 1, period 5, quality 3; noise
0.1), counting the evaluations of the LML with its gradient and timing the whole fit.

Usage (quiet machine, one BLAS thread):
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. flock -x /tmp/cpu.lock \\
        python asv_benchmarks/scripts/state_space_fit.py 100000 [--eval 1000000]

``--eval N`` also times one LML + gradient at N points (one repetition) and prints the fit
time at N extrapolated as (evaluations of the fit above) x (that time): an estimate, stated
as one, since the number of evaluations depends on the data.
"""

from __future__ import annotations

import sys
import time

import numpy as np


def model(n):
    import gpnum
    from gpnum.kernels import SHO, Matern32
    from gpnum.likelihoods import Gaussian

    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0.0, n / 10.0, n))
    y = np.sin(t) + 0.3 * rng.standard_normal(n)
    kern = Matern32(lengthscale=2.0, variance=1.0) + SHO(1.0, 5.0, 3.0)
    return gpnum.GPR(kern, Gaussian(variance=0.1), t[:, None], y, solver="state_space")


def main():
    import gpnum

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(float(args[0])) if args else 100000
    m = model(n)
    count = {"evals": 0, "seconds": 0.0}
    inner = m.objective_and_grad

    def counted(*a, **k):
        t0 = time.perf_counter()
        out = inner(*a, **k)
        count["evals"] += 1
        count["seconds"] += time.perf_counter() - t0
        return out

    m.objective_and_grad = counted
    start = float(m.log_marginal_likelihood())
    t0 = time.perf_counter()
    gpnum.fit(m, optimizer="lbfgs", maxiter=1000, progress=False)
    total = time.perf_counter() - t0
    print(f"n={n}: fit {total:.1f} s, {count['evals']} evaluations of the LML + gradient "
          f"({count['seconds'] / max(count['evals'], 1) * 1e3:.0f} ms each); LML {start:.2f} -> "
          f"{float(m.log_marginal_likelihood()):.2f}", flush=True)
    print("  fitted: " + ", ".join(f"{k} {float(np.reshape(v, ())):.4g}"
                                   for k, v in m.parameters().items()), flush=True)
    if "--eval" in sys.argv:
        big = int(float(sys.argv[sys.argv.index("--eval") + 1]))
        mb = model(big)
        t0 = time.perf_counter()
        mb.log_marginal_likelihood_and_grad()
        one = time.perf_counter() - t0
        print(f"n={big}: one LML + gradient {one:.2f} s; a fit of {count['evals']} evaluations "
              f"(as at n={n}) would take about {count['evals'] * one / 60:.1f} min "
              "(extrapolated, not run)", flush=True)


if __name__ == "__main__":
    main()
