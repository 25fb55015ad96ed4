"""Wall time of one CIQ training step by phase (the step of ``training_step_floor.py``).

    python training_step_phases.py [m=1000] [method=krylov] [rtol=1e-3]

Wraps the step's phases (deflation search, msMINRES, PCG, preconditioner search, ...) with
timers, runs three untimed steps and then five, and prints the mean time per step of each
phase (nested phases are counted in their parents too) and the deflation's pairs and the
msMINRES iterations of the last step. Run it on a quiet machine: it prints times.
"""
import collections
import functools
import os
import sys
import time
import warnings

import gpnum
import gpnum.linalg._ciq as ciq
import gpnum.linalg._ciq_backward as ciq_backward
import gpnum.linalg._ciq_deflation as ciq_deflation
import gpnum.linalg._ciq_solves as ciq_solves
import gpnum.linalg._deflation as deflation
import gpnum.models._distributions as distributions
import gpnum.models._whitening as whitening
from gpnum.linalg import _operators

sys.path.insert(0, os.path.dirname(__file__))
from _svgp_step import ciq_training_step  # noqa: E402

warnings.simplefilter("ignore")
model, step, (m, method, rtol), rng = ciq_training_step(sys.argv[1:])

seconds, calls, last = collections.Counter(), collections.Counter(), {}


def timed(owner, name, label, keep=None):
    f = getattr(owner, name)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = f(*args, **kwargs)
        seconds[label] += time.perf_counter() - t0
        calls[label] += 1
        if keep is not None:
            keep(out)
        return out

    setattr(owner, name, wrapper)


def keep_ciq(res):
    last["pairs deflated"] = res.num_deflated


def keep_msminres(res):
    last.setdefault("msMINRES iterations", []).append(res.num_iter)


timed(ciq, "_resolve_bounds", "Lanczos eigenvalue bounds")
timed(ciq, "_find_deflation", "deflation search (CIQ forward)")
timed(ciq_deflation, "_deflated_matrix", "deflated matrix")
timed(ciq_solves, "msminres", "msMINRES (forward and backward)", keep_msminres)
timed(ciq_backward, "_inv_sqrt_backward", "CIQ backward (msMINRES, cotangent)")
timed(whitening, "inv_sqrt_matmul", "CIQ forward (search, msMINRES)", keep_ciq)
timed(deflation, "_orthonormal_basis", "Cholesky QR passes (both searches)")
timed(deflation, "_orthonormal_factors", "Cholesky QR passes (both searches)")
timed(distributions.NaturalForm, "preconditioner", "precision's preconditioner search")
timed(distributions, "pcg", "PCG against the precision")
timed(distributions, "slq_logdet", "SLQ log-determinant (KL estimate)")
timed(_operators.Dense, "_param_vjp", "K_ZZ cotangent product")
timed(gpnum.optim.NaturalGradient, "step", "natural-gradient step")
timed(type(model.kernel), "gram_and_vjp", "kernel matrices and their backward")


def measured_step():
    last.clear()
    step()


for _ in range(3):
    measured_step()
seconds.clear()
calls.clear()
reps = 5
t0 = time.perf_counter()
for _ in range(reps):
    measured_step()
total = (time.perf_counter() - t0) / reps
print(f"m = {m}, {method}, rtol {rtol:g}: {total * 1e3:.0f} ms per step; last step: {last}")
for label, t in sorted(seconds.items(), key=lambda kv: -kv[1]):
    print(f"  {label:42s} {t / reps * 1e3:7.1f} ms  ({calls[label] / reps:.0f} calls)")
