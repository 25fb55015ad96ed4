"""GPR(solver="state_space") against celerite2 and celerite on a Matern-3/2 + SHO kernel, side
by side in one run, and against gpnum's Cholesky GPR (issue 50).

The same series for every library: n points at sorted uniform random times on [0, n / 10],
``y = sin(t) + 0.3 N(0, 1)``; kernel Matern-3/2 (variance 1, lengthscale 2) + SHO (variance 1,
undamped period 5, quality 3), Gaussian noise variance 0.1, float64. Timed, best of REPS:

- gpnum: ``log_marginal_likelihood()`` and ``log_marginal_likelihood_and_grad()`` (7
  hyper-parameters: both kernels', the noise variance and the constant mean), the state-space
  path; the Cholesky path at n <= CHOLESKY_MAX_N;
- celerite2 (C++): ``compute`` + ``log_likelihood`` (the factorisation belongs to the value
  when the hyper-parameters change);
- celerite 0.4 (C++): ``grad_log_likelihood`` with the noise variance and the mean fitted.

The peers run in the scratch venv (never gpnum's dependencies): this script starts
``PEER_PYTHON`` on itself with ``--peer`` for each n, right after gpnum's timings. The
log-likelihood values of gpnum and celerite2 are printed side by side (they differ slightly:
celerite2's Matern32Term is an approximation with ``eps = 0.01``; gpnum's Cholesky and
state-space values agree to rounding).

Usage (quiet machine, single-threaded BLAS on both sides):
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. flock -x /tmp/cpu.lock \
        python asv_benchmarks/scripts/state_space_vs_celerite.py 10000 100000 1000000 \
        [--cholesky-grad]
    ... state_space_vs_celerite.py --crossover     (Cholesky against state space, small n)
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np

PEER_PYTHON = os.environ.get("PEER_PYTHON", "/work/scratch-peer/bin/python")
CHOLESKY_MAX_N = 10000
#: Also time the Cholesky path's LML + gradient (its K_y^{-1} doubles the cost): --cholesky-grad
CHOLESKY_GRAD = "--cholesky-grad" in sys.argv
VAR32, ELL32 = 1.0, 2.0
VAR_SHO, PERIOD, QUALITY = 1.0, 5.0, 3.0
NOISE = 0.1


def series(n):
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0.0, n / 10.0, n))
    return t, np.sin(t) + 0.3 * rng.standard_normal(n)


def best(f, reps):
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return min(ts), out


def reps_for(n):
    # best of 3 at 10^6 too: a single first call pays for touching its new memory, and
    # single runs varied by 1.7x on either side
    return 5 if n <= 10 ** 4 else 3


def peer(n):
    import celerite
    import celerite2
    from celerite import terms as cterms
    from celerite2 import terms

    t, y = series(n)
    reps = reps_for(n)
    k2 = (terms.Matern32Term(sigma=math.sqrt(VAR32), rho=ELL32)
          + terms.SHOTerm(sigma=math.sqrt(VAR_SHO), rho=PERIOD, Q=QUALITY))
    gp2 = celerite2.GaussianProcess(k2, mean=0.0)

    def value2():
        gp2.compute(t, diag=np.full(n, NOISE))
        return gp2.log_likelihood(y)

    t2, v2 = best(value2, reps)
    # celerite 0.4: SHO with S0 = variance / (w0 Q); its Matern32Term is an approximation
    w0 = 2.0 * math.pi / PERIOD
    k1 = (cterms.Matern32Term(log_sigma=0.5 * math.log(VAR32), log_rho=math.log(ELL32))
          + cterms.SHOTerm(log_S0=math.log(VAR_SHO / (w0 * QUALITY)), log_Q=math.log(QUALITY),
                           log_omega0=math.log(w0)))
    gp1 = celerite.GP(k1, mean=0.0, fit_mean=True)
    gp1.compute(t, yerr=math.sqrt(NOISE))

    def grad1():
        gp1.compute(t, yerr=math.sqrt(NOISE))
        return gp1.grad_log_likelihood(y)

    t1, (_, g1) = best(grad1, reps)
    print(json.dumps({"celerite2_value_s": t2, "celerite2_lml": float(v2),
                      "celerite_grad_s": t1,
                      "celerite_num_grads": int(np.size(g1)),
                      "celerite2_version": celerite2.__version__,
                      "celerite_version": celerite.__version__}))


def gpnum_side(n):
    import gpnum
    from gpnum.kernels import SHO, Matern32
    from gpnum.likelihoods import Gaussian

    t, y = series(n)
    reps = reps_for(n)

    def model(solver):
        kern = Matern32(lengthscale=ELL32, variance=VAR32) + SHO(VAR_SHO, PERIOD, QUALITY)
        return gpnum.GPR(kern, Gaussian(variance=NOISE), t[:, None], y, solver=solver)

    ss = model("state_space")
    out = {}
    out["ss_value_s"], v = best(ss.log_marginal_likelihood, reps)
    out["ss_lml"] = float(v)
    out["ss_grad_s"], _ = best(ss.log_marginal_likelihood_and_grad, reps)
    if n <= CHOLESKY_MAX_N:
        chol = model("cholesky")
        out["chol_value_s"], v = best(chol.log_marginal_likelihood, 1)
        out["chol_lml"] = float(v)
        if CHOLESKY_GRAD:
            out["chol_grad_s"], _ = best(chol.log_marginal_likelihood_and_grad, 1)
    return out


def crossover():
    """LML + gradient, Cholesky against state space, at small n: where ``solver="auto"``
    should switch (GPR.AUTO_STATE_SPACE_MIN_N)."""
    import gpnum
    from gpnum.kernels import SHO, Matern32
    from gpnum.likelihoods import Gaussian

    for n in (100, 200, 300, 400, 800):
        t, y = series(n)
        times = []
        for solver in ("cholesky", "state_space"):
            kern = Matern32(lengthscale=ELL32, variance=VAR32) + SHO(VAR_SHO, PERIOD, QUALITY)
            model = gpnum.GPR(kern, Gaussian(variance=NOISE), t[:, None], y, solver=solver)
            times.append(best(model.log_marginal_likelihood_and_grad, 7)[0])
        print(f"n={n:>5d}  LML+grad: Cholesky {times[0] * 1e3:7.1f} ms, state space "
              f"{times[1] * 1e3:7.1f} ms", flush=True)


def main(ns):
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"peers: {PEER_PYTHON}", flush=True)
    for n in ns:
        mine = gpnum_side(n)
        run = subprocess.run([PEER_PYTHON, __file__, "--peer", str(n)], capture_output=True,
                             text=True, check=True)
        theirs = json.loads(run.stdout.strip().splitlines()[-1])
        line = (f"n={n:>8d}  gpnum LML {mine['ss_value_s'] * 1e3:9.1f} ms  "
                f"celerite2 {theirs['celerite2_value_s'] * 1e3:8.1f} ms  "
                f"(x{mine['ss_value_s'] / theirs['celerite2_value_s']:.1f})  |  "
                f"gpnum LML+grad {mine['ss_grad_s'] * 1e3:9.1f} ms  "
                f"celerite grad {theirs['celerite_grad_s'] * 1e3:8.1f} ms  "
                f"(x{mine['ss_grad_s'] / theirs['celerite_grad_s']:.1f})")
        print(line, flush=True)
        print(f"           LML values: gpnum {mine['ss_lml']:.10f}, celerite2 "
              f"{theirs['celerite2_lml']:.10f} (Matern-3/2 approximated)", flush=True)
        if "chol_value_s" in mine:
            grad = ("" if "chol_grad_s" not in mine else
                    f"LML+grad {mine['chol_grad_s'] * 1e3:.1f} ms "
                    f"(x{mine['chol_grad_s'] / mine['ss_grad_s']:.0f}); ")
            print(f"           Cholesky GPR: LML {mine['chol_value_s'] * 1e3:.1f} ms "
                  f"(state space x{mine['chol_value_s'] / mine['ss_value_s']:.0f} faster), "
                  f"{grad}its LML {mine['chol_lml']:.10f}", flush=True)
        print(f"           versions: celerite2 {theirs['celerite2_version']}, celerite "
              f"{theirs['celerite_version']}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--peer":
        peer(int(sys.argv[2]))
    elif "--crossover" in sys.argv:
        crossover()
    else:
        sizes = [int(float(a)) for a in sys.argv[1:] if not a.startswith("--")]
        main(sizes or [10 ** 4, 10 ** 5, 10 ** 6])
