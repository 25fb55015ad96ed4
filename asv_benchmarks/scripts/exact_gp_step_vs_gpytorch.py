"""One exact-GP training step by conjugate gradients: gpnum GPR(solver="cg") against GPyTorch's
ExactGP in its CG mode, side by side in one process (issue 33).

Data: a random n of the bundled elevators training rows (18 inputs, standardised); Matern-3/2
ARD kernel with an output scale, constant mean, Gaussian noise; the same initial values
(lengthscales 1, output scale 1, noise 0.1), float64. Both sides run Gardner et al. 2018's BBMM
with the same settings: pivoted-Cholesky preconditioner rank 100, 10 probe vectors, training CG
tolerance 1.0, 20 Lanczos iterations; GPyTorch with max_cholesky_size(0) (never Cholesky). One
step = the negative log marginal likelihood, its gradient and an Adam update (lr 0.01).

gpnum runs twice: with the kernel matrix formed once per step and reused by every CG iteration
("dense", dense_limit_mib large enough: GPyTorch on a CPU also evaluates the lazy kernel matrix
to a dense one), and with its default row blocks ("blocked": the kernel recomputed in blocks at
every product, O(n) memory).

Usage (scratch venv with torch and gpytorch, never gpnum dependencies; quiet machine):
    PYTHONPATH=. /work/scratch-peer/bin/python asv_benchmarks/scripts/exact_gp_step_vs_gpytorch.py [N] [REPS] [no-blocked]
"""

import sys
import time
import warnings

import numpy as np
import torch
import gpytorch

import gpnum
from gpnum.kernels import Matern32
from gpnum.likelihoods import Gaussian
from gpnum.optim import Adam

torch.set_num_threads(2)
warnings.simplefilter("ignore")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
with_blocked = not (len(sys.argv) > 3 and sys.argv[3] == "no-blocked")
RANK, PROBES, TOL, LANCZOS = 100, 10, 1.0, 20

data = gpnum.datasets.load("elevators", xp="numpy", dtype="float64")
X, y = gpnum.datasets.random_subset(data.X_train, data.y_train, n, seed=0)
X, y = np.ascontiguousarray(X), np.ascontiguousarray(y)
d = X.shape[1]


def timed(step):
    # each library's thread pool spins for a while after use: let the other's go idle first
    time.sleep(1.0)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return ts


def gpnum_step_fn(dense):
    limit = 8.0 * 3 * n * n / 2**20 + 64 if dense else 0.0
    model = gpnum.GPR(Matern32(lengthscale=np.ones(d), variance=1.0), Gaussian(variance=0.1),
                      X, y, mean=0.0, solver="cg", jitter=1e-4,
                      cg_options={"precond_rank": RANK, "num_probes": PROBES, "train_rtol": TOL,
                                  "min_iter": LANCZOS, "dense_limit_mib": limit})
    adam = Adam(lr=0.01)

    def step():
        _, g = model.log_marginal_likelihood_and_grad()
        h = model.grad_to_unconstrained(g)
        u = model.unconstrained()
        model.set_unconstrained(adam.step({k: u[k] for k in h}, h, maximize=True))

    return model, step


class Peer(gpytorch.models.ExactGP):
    def __init__(self, Xt, yt, lik):
        super().__init__(Xt, yt, lik)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=d))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


Xt, yt = torch.tensor(X), torch.tensor(y)
lik = gpytorch.likelihoods.GaussianLikelihood().double()
peer = Peer(Xt, yt, lik).double()
peer.covar_module.base_kernel.lengthscale = torch.ones(d, dtype=torch.float64)
peer.covar_module.outputscale = 1.0
lik.noise = 0.1
peer.train()
lik.train()
mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, peer)
opt = torch.optim.Adam(peer.parameters(), lr=0.01)


def peer_step():
    with gpytorch.settings.max_cholesky_size(0), gpytorch.settings.cg_tolerance(TOL), \
            gpytorch.settings.max_preconditioner_size(RANK), \
            gpytorch.settings.num_trace_samples(PROBES), \
            gpytorch.settings.max_lanczos_quadrature_iterations(LANCZOS):
        opt.zero_grad()
        loss = -mll(peer(Xt), yt)
        loss.backward()
        opt.step()


print(f"elevators n={n} d={d}, float64, rank {RANK}, {PROBES} probes, tol {TOL}, "
      f"{LANCZOS} Lanczos iterations, torch threads {torch.get_num_threads()}", flush=True)
results = {}
runs = [("gpnum dense", lambda: gpnum_step_fn(True)),
        ("gpnum blocked", lambda: gpnum_step_fn(False)),
        ("gpytorch", lambda: (None, peer_step))]
for name, make in (runs if with_blocked else runs[::2]):
    model, step = make()
    ts = timed(step)
    results[name] = min(ts)
    info = f"; {model.cg_info}" if model is not None else ""
    print(f"{name}: steps {', '.join(f'{t:.2f}' for t in ts)} s{info}", flush=True)
for name in ("gpnum dense", "gpnum blocked")[:2 if with_blocked else 1]:
    print(f"GPyTorch / {name}: {results['gpytorch'] / results[name]:.2f}x (best of {reps})")
