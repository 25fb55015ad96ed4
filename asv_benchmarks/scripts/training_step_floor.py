"""Where one CIQ training step's work goes: (m, m) operator products by phase, against a GEMM.

    python training_step_floor.py [m=1000] [method=krylov] [rtol=1e-3]

The step is the one of ``svgp_vs_gpytorch.py train`` (batch 256, d = 2, Matern-5/2, Q = 15,
msMINRES rtol 1e-3 unless given, natural gradients gamma 0.1 + Adam, float64). It counts the
columns of every product with the (m, m) kernel matrix, by the phase that asked for it, and
converts them into GEMMs of (m, m) x (m, 256); the CIQ backward pass adds the products that
form the cotangent of K_ZZ, at the shapes the step used (one (m, 15 * 256) x (15 * 256, m)
product from the per-shift solves, or, from a short forward Krylov basis of c vectors a
column, the backward's basis of b and r deflated pairs, (m, k b) x (k b, r) and
(m, k c + r) x (k c + r, m)). The sum of those products at
the measured GEMM speed is a floor that no implementation of the same algorithm (same iteration
counts) can beat on this machine. The GEMM, the cotangent's products and the step are timed
side by side in 5 rounds; the median round's ratio is reported, with every round's.
Run it on a quiet machine: it prints times.
"""
import collections
import os
import sys
import traceback
import warnings

from gpnum import backend as B
from gpnum.linalg import _ciq_solves, _operators

sys.path.insert(0, os.path.dirname(__file__))
from _svgp_step import best, ciq_training_step  # noqa: E402

warnings.simplefilter("ignore")
model, step, (m, method, rtol), rng = ciq_training_step(sys.argv[1:])
ROUNDS = 5


PHASES = (("_top_eigenpairs", "eigenpair searches (deflation, preconditioner)"),
          ("inv_sqrt_matmul_vjp", "CIQ backward msMINRES"),
          ("inv_sqrt_matmul", "CIQ forward msMINRES"),
          ("pcg", "PCG against the precision"))
columns = collections.Counter()
plain_matmat = _operators.Dense._matmat
plain_param_vjp = _operators.Dense._param_vjp
plain_factors = _ciq_solves._DeferredSolves.factors_against
cotangent = {}  # the shapes of the products that form the cotangent of K_ZZ in this step


def counting_matmat(self, V):
    if self.shape[0] == m:
        stack = {f.name for f in traceback.extract_stack(limit=16)}
        phase = next((label for name, label in PHASES if name in stack), "other")
        columns[phase] += V.shape[1] if V.ndim == 2 else 1
    return plain_matmat(self, V)


def recording_param_vjp(self, U, V):
    if self.shape[0] == m:
        cotangent["UV"] = U.shape[1]
    return plain_param_vjp(self, U, V)


def recording_factors(self, back, omega):
    if self.affine is not None:
        k, b = back.basis.shape[0], len(back.coeffs)
        cotangent["UD"] = (k * b, self.affine[1].shape[1])
    return plain_factors(self, back, omega)


for _ in range(3):  # past the first steps' larger solves
    step()
_operators.Dense._matmat = counting_matmat
_operators.Dense._param_vjp = recording_param_vjp
_ciq_solves._DeferredSolves.factors_against = recording_factors
step()
_operators.Dense._matmat = plain_matmat
_operators.Dense._param_vjp = plain_param_vjp
_ciq_solves._DeferredSolves.factors_against = plain_factors


K = model._kzz()[0]
R = rng.standard_normal((m, 256))
# The cotangent of K_ZZ as the step forms it: (m, w) x (w, m), w = 15 * 256 from the per-shift
# solves, or k c + r from a short forward basis and the deflated pairs, after an
# (m, k b) x (k b, r) product from the backward's basis (_ciq_solves._DeferredSolves.factors_against).
U = rng.standard_normal((m, cotangent["UV"]))
cot_text = f"(m, {U.shape[1]}) x ({U.shape[1]}, m)"
if "UD" in cotangent:
    kb, r = cotangent["UD"]
    Uq, Dq = rng.standard_normal((kb, m)), rng.standard_normal((kb, r))
    cot_text += f" after (m, {kb}) x ({kb}, {r})"


def floor_parts():
    """(one GEMM, the cotangent's products), each the best of a few timings."""
    t_gemm = best(lambda: B.matmul(K, R), 5)
    t_cot = best(lambda: B.matmul(U, U.T), 3)
    if "UD" in cotangent:
        t_cot += best(lambda: B.matmul(Uq.T, Dq), 3)
    return t_gemm, t_cot


gemms = sum(columns.values()) / 256
# Rounds of (floor, step) side by side: this VM's GEMM speed drifts by tens of per cent within
# minutes, and a ratio of a step and a floor timed apart would carry that drift.
rounds = []
for _ in range(ROUNDS):
    t_gemm, t_cot = floor_parts()
    t_step = best(step, 2)
    rounds.append((t_gemm, t_cot, t_step, t_step / (gemms * t_gemm + t_cot)))
rounds.sort(key=lambda t: t[3])
t_gemm, t_cot, t_step, ratio = rounds[len(rounds) // 2]  # the median round
print(f"m = {m}, {method}, rtol {rtol:g}: one GEMM (m, m) x (m, 256) {t_gemm * 1e3:.2f} ms; "
      f"cotangent {cot_text} {t_cot * 1e3:.1f} ms (the median round of {ROUNDS})")
for label, cols in sorted(columns.items(), key=lambda kv: -kv[1]):
    print(f"  {label:48s} {cols:6d} columns = {cols / 256:5.1f} GEMMs = "
          f"{cols / 256 * t_gemm * 1e3:5.0f} ms")
print(f"  {'CIQ backward cotangent of K_ZZ':48s} {'':6s}         {t_cot / t_gemm:5.1f} GEMMs = "
      f"{t_cot * 1e3:5.0f} ms")
print(f"floor {(gemms * t_gemm + t_cot) * 1e3:.0f} ms; measured step {t_step * 1e3:.0f} ms "
      f"({ratio:.2f}x the floor); ratio per round: "
      + " ".join(f"{t[3]:.2f}" for t in rounds))
