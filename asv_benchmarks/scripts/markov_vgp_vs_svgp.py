"""MarkovVGP (CVI in state-space form) against gpnum's dense alternative, an SVGP with an
inducing point at every data point, on the same binary series, side by side in one run.

Data: the bundled Elec2 "class" column (the NSW price went up (1) or down (0) against its 24 h
average), the first n half-hours, time in days. Kernel Matern-3/2 (lengthscale 1 day) + SHO
(period 1 day, quality 5), Bernoulli (logit). Both models reach the same q (the optimal
Gaussian q is the GP posterior under one Gaussian site per point; SVGP with Z = X holds the
same family): the script prints both ELBOs at convergence.

Timed (best of REPS, float64):
- MarkovVGP: one CVI step of every site (smoother + likelihood) and the ELBO with its
  gradient at fixed sites (``_elbo(need_grad=True)``), and converging the sites from scratch;
- SVGP(Z = X): one full-batch ELBO with gradient plus one natural-gradient step (dense
  method), the per-iteration cost of the same alternation, up to SVGP_MAX_N.

``--fit``: ``gpnum.fit`` (L-BFGS-B) on the first four weeks (1,344 half-hours), then the
next day's 48 labels predicted: accuracy and mean negative log predictive density, against
"the last label persists", the training majority and the training frequency of 1.

Usage (quiet machine): OPENBLAS_NUM_THREADS=1 PYTHONPATH=. flock -x /tmp/cpu.lock \
    python asv_benchmarks/scripts/markov_vgp_vs_svgp.py 1000 2000 45312 [--fit]
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import gpnum
from gpnum import kernels as K
from gpnum.datasets import load_series
from gpnum.likelihoods import Bernoulli
from gpnum.optim import NaturalGradient

SVGP_MAX_N = 3000
REPS = 3


def kernel():
    return (K.Matern32(lengthscale=1.0, variance=1.0)
            + K.SHO(variance=1.0, period=1.0, quality=5.0))


def best(f, reps=REPS):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return min(ts), out


def measure(y):
    """One line of timings for the binary series ``y`` (n,), time in days."""
    n = y.shape[0]
    t = np.arange(n) / 48.0
    X = t[:, None]
    model = gpnum.MarkovVGP(kernel(), Bernoulli("logit"), X, y, tol=1e-9)

    def converge():
        model.set_sites(np.zeros(n), np.full(n, 1e-2))
        return model.converge_sites()

    t_conv, steps = best(converge, reps=1)
    t_step, _ = best(model.update_sites)
    t_elbo, (elbo, _, _) = best(lambda: model._elbo(need_grad=True))
    line = (f"n={n:>7}  MarkovVGP: CVI step {1e3 * t_step:8.1f} ms, ELBO+grad "
            f"{1e3 * t_elbo:8.1f} ms, converge ({steps} steps) {t_conv:7.2f} s, "
            f"ELBO {float(elbo):.6f}")
    if n > SVGP_MAX_N:
        return line
    svgp = gpnum.SVGP(kernel(), Bernoulli("logit"), X, num_data=n)
    ngd = NaturalGradient(1.0)

    def svgp_iteration():
        _, _, data = svgp.objective_and_grad(X, y, return_data=True)
        ngd.step(svgp, data=data)

    for _ in range(30):  # to the fixed point, for the ELBO comparison
        svgp_iteration()
    t_svgp, _ = best(svgp_iteration)
    v_svgp = float(svgp.objective_and_grad(X, y)[0])
    return line + (f"  |  SVGP(Z=X): ELBO+grad+NGD step {1e3 * t_svgp:9.1f} ms "
                   f"(x{t_svgp / (t_step + t_elbo):.0f}), ELBO {v_svgp:.6f}")


def fit_and_forecast(raw, n=1344, ahead=48):
    y = raw[:n + ahead, 0]
    t = np.arange(n + ahead) / 48.0
    model = gpnum.MarkovVGP(kernel(), Bernoulli("logit"), t[:n, None], y[:n])
    t0 = time.perf_counter()
    history = gpnum.fit(model, progress=False)
    t_fit = time.perf_counter() - t0
    p, _ = model.predict_y(t[n:, None])
    test = y[n:]
    acc = np.mean((p > 0.5) == (test > 0.5))
    nll = -np.mean(np.asarray(model.log_predictive_density(t[n:, None], test)))
    base = np.mean(test == y[n - 1])
    freq = np.mean(y[:n])
    nll_freq = -np.mean(test * np.log(freq) + (1 - test) * np.log(1 - freq))
    print(f"fit on {n}: {t_fit:.1f} s, {history.num_eval} evaluations, "
          f"{model.num_site_steps} CVI steps, {history.stop_reason}")
    print("  " + ", ".join(f"{k} {float(v):.3g}" for k, v in model.parameters().items()))
    majority = np.mean(test == float(freq > 0.5))
    print(f"next {ahead}: accuracy {acc:.3f} (last label persists {base:.3f}, training "
          f"majority {majority:.3f}), NLPD {nll:.3f} (training frequency {nll_freq:.3f})")


def main(sizes):
    _, raw, _, _ = load_series(columns=["class"], standardize=False)
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    for n in sizes:
        print(measure(raw[:n, 0]), flush=True)
    if "--fit" in sys.argv:
        fit_and_forecast(raw)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:] if not a.startswith("--")])
