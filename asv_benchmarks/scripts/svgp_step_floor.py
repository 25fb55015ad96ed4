"""The Cholesky-whitened SVGP fit step against its floor: the factorisations, triangular solves
and products it must do, each timed alone at the step's sizes, in the same process (issue 37).

    PYTHONPATH=. python asv_benchmarks/scripts/svgp_step_floor.py [m=500] [reps=15]

The step is the CLI's default training step: one minibatch of b = 256 points with d = 9 inputs,
Matern-5/2 ARD, Gaussian likelihood, whitened SVGP with Cholesky whitening, a dense natural-
gradient step on q (gamma 0.1) and an Adam step on the hyper-parameters and inducing points,
float64. The floor lists what any implementation of that step needs, with gpnum.backend's
routines (SciPy's LAPACK and BLAS on NumPy):

- the Cholesky factor of K_ZZ + jitter I (m^3 / 3) and A = L^-1 K_ZX (m^2 b);
- the marginals' R^T A and the backward pass's R (R^T A), R = q_sqrt lower (2 m^2 b);
- the whitening's backward pass: K_ZX_bar = L^-T A_bar (m^2 b), the lower triangle of
  -A_bar A^T (~0.6 m^2 b) and the Cholesky backward that turns it into K_ZZ_bar (Murray 2016);
- the natural-gradient step: A diag(g) A^T (m^2 b), the Cholesky of the new precision and the
  triangular inverse that gives the new q_sqrt (2 m^3 / 3);
- the kernel's K_ZZ and K_ZX with their backward passes (gpnum's own elementwise code, shown
  apart: the floor is given with and without them).

Each is the best of ``reps`` timings alone; the step is the best of ``reps`` too. Quiet machine.
"""

import os
import sys
import warnings

import numpy as np

import gpnum
from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian

sys.path.insert(0, os.path.dirname(__file__))
from _svgp_step import best, svgp_fit_step  # noqa: E402

warnings.simplefilter("ignore")
m = int(sys.argv[1]) if len(sys.argv) > 1 else 500
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
b, d, N = 256, 9, 100_000
rng = np.random.default_rng(0)
X = rng.uniform(-1, 1, (b, d))
y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(b)
Z = rng.uniform(-1, 1, (m, d))
kernel = Matern52(lengthscale=np.full(d, 0.8), variance=1.0)
model = gpnum.SVGP(kernel, Gaussian(variance=0.1), Z, num_data=N, jitter=1e-4)
ngd = gpnum.optim.NaturalGradient(0.1, "dense")
ngd.prepare(model)
adam = gpnum.optim.Adam(lr=0.01)


def step():
    svgp_fit_step(model, ngd, adam, X, y)


for _ in range(5):  # a few steps first: q moves away from its initial identity
    step()
t_step = best(step, reps)

# Operands at the step's sizes, from the model as it stands.
Kzz = kernel(Z) + 1e-4 * np.eye(m)
L = B.cholesky(Kzz)
Kzx = kernel(Z, X)
A = B.solve_triangular(L, Kzx, lower=True)
R = np.asarray(model.parameters()["q_sqrt"])
A_bar = rng.standard_normal((m, b))
g = -np.abs(rng.standard_normal(b))
P = B.matmul(A * g[None, :], A.T)
P = np.eye(m) - 2.0 * P * (N / b) * 1e-6
M_low = B.lower_matmul(-A_bar, A.T)
G_zz = rng.standard_normal((m, m))
G_zz = G_zz + G_zz.T
G_zx = rng.standard_normal((m, b))
_, vjp_zz = kernel.gram_and_vjp(Z)
_, vjp_zx = kernel.gram_and_vjp(Z, X)

linalg = [
    ("Cholesky of K_ZZ + jitter I", lambda: B.cholesky(Kzz)),
    ("A = L^-1 K_ZX", lambda: B.solve_triangular(L, Kzx, lower=True)),
    ("R^T A (marginals)", lambda: B.triangular_matmul(R, A, lower=True, trans=True)),
    ("R (R^T A) (backward)", lambda: B.triangular_matmul(R, A, lower=True)),
    ("K_ZX_bar = L^-T A_bar", lambda: B.solve_triangular(L, A_bar, lower=True, trans=True)),
    ("lower(-A_bar A^T)", lambda: B.lower_matmul(-A_bar, A.T)),
    ("Cholesky backward -> K_ZZ_bar", lambda: B.cholesky_vjp_inner(L, M_low, symmetrize=False)),
    ("NGD: A diag(g) A^T", lambda: B.matmul(A * g[None, :], A.T)),
    ("NGD: Cholesky of the new precision", lambda: B.cholesky(P)),
    ("NGD: triangular inverse -> q_sqrt", lambda: B.triangular_inverse(L, lower=True)),
]
kernels = [
    ("kernel: K_ZZ with its backward's state", lambda: kernel.gram_and_vjp(Z)),
    ("kernel: K_ZZ backward", lambda: vjp_zz(G_zz)),
    ("kernel: K_ZX with its backward's state", lambda: kernel.gram_and_vjp(Z, X)),
    ("kernel: K_ZX backward", lambda: vjp_zx(G_zx)),
]
print(f"SVGP fit step, Cholesky whitening, dense NGD + Adam: m = {m}, b = {b}, d = {d}, "
      f"float64, best of {reps}")
print(f"  the step: {t_step * 1e3:.1f} ms")
floor_linalg = 0.0
for label, f in linalg:
    t = best(f, reps)
    floor_linalg += t
    print(f"  {label:42s} {t * 1e3:7.2f} ms")
floor_kernel = 0.0
for label, f in kernels:
    t = best(f, reps)
    floor_kernel += t
    print(f"  {label:42s} {t * 1e3:7.2f} ms")
floor = floor_linalg + floor_kernel
print(f"  floor: factorisations, solves and products {floor_linalg * 1e3:.1f} ms; with the "
      f"kernel's own work {floor * 1e3:.1f} ms")
print(f"  step / floor: {t_step / floor:.2f}x (without the kernel: "
      f"{t_step / floor_linalg:.2f}x)")
