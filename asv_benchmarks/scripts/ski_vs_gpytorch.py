"""One SKI (KISS-GP) training step: gpnum ``GPR(solver="ski")`` against GPyTorch's
``GridInterpolationKernel``, side by side in one process (issue 49).

Data: n points uniform on [0, 1]^2, ``y = sin(6 x_1) cos(4 x_2) + 0.1 eps``. Both sides: an RBF
ARD kernel with an output scale (lengthscales 0.2, output scale 1), constant mean 0, Gaussian
noise 0.05, float64, a G x G interpolation grid (cubic interpolation, grid spacing
``range / (G - 3)`` in gpnum, ``range / (G - 2)`` in GPyTorch), ``K_UU`` a Kronecker product of
Toeplitz factors in GPyTorch, a 2-level Toeplitz operator in gpnum. The same BBMM settings
(Gardner et al. 2018): pivoted-Cholesky preconditioner of rank RANK (GPyTorch's default 15),
10 probe vectors, training CG tolerance 1.0, 20 Lanczos iterations (at least 20 CG
iterations), at most 1000 CG iterations. One step = the negative log marginal likelihood, its
gradient and an Adam update (lr 0.01). gpnum: best of REPS steps after a first (warm-up) one;
GPyTorch: best of PEER_REPS steps after its first, or with PEER_REPS = 0 its first step alone
(it keeps nothing between steps but the grid's bounds; at n = 10^5 one of its steps takes
minutes).

Environment: ``SKI_RANK`` (preconditioner rank, default 15; 0 for none), ``SKI_MAXITER``
(default 1000) and ``SKI_STOP`` (gpnum's ``cg_options["train_stop"]``, default ``all``).
GPyTorch stops CG once the mean relative residual over the columns is below the tolerance,
gpnum by default once every column's is, so without a preconditioner gpnum runs more
iterations at tolerance 1.0; ``SKI_STOP=mean`` gives gpnum GPyTorch's rule, and
``SKI_MAXITER=20`` makes both run exactly 20.

Threads: ``torch.set_num_threads(T)`` and ``GPNUM_BLAS_THREADS=T`` (gpnum's SKI objective
splits its sparse products and CG's vector work over T threads of its own, with its BLAS
pools at one thread: ``GPR.split_rows``).

Usage (the scratch venv with torch and gpytorch, never gpnum dependencies; exclusive lock):
    PYTHONPATH=. flock -x /tmp/cpu.lock /work/scratch-peer/bin/python \
        asv_benchmarks/scripts/ski_vs_gpytorch.py [N] [G] [THREADS] [REPS] [PEER_REPS] \
        [gpnum|gpytorch|both]
"""

import os
import sys
import time
import warnings

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
G = int(sys.argv[2]) if len(sys.argv) > 2 else 100
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 2
peer_reps = int(sys.argv[5]) if len(sys.argv) > 5 else 0
which = sys.argv[6] if len(sys.argv) > 6 else "both"
os.environ["GPNUM_BLAS_THREADS"] = str(THREADS)

import gpytorch  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import gpnum  # noqa: E402
from gpnum.kernels import RBF  # noqa: E402
from gpnum.likelihoods import Gaussian  # noqa: E402
from gpnum.optim import Adam  # noqa: E402

torch.set_num_threads(THREADS)
warnings.simplefilter("ignore")
RANK = int(os.environ.get("SKI_RANK", "15"))
MAXITER = int(os.environ.get("SKI_MAXITER", "1000"))
STOP = os.environ.get("SKI_STOP", "all")
PROBES, TOL, LANCZOS = 10, 1.0, 20

rng = np.random.default_rng(0)
X = rng.uniform(0.0, 1.0, (n, 2))
y = np.sin(6 * X[:, 0]) * np.cos(4 * X[:, 1]) + 0.1 * rng.standard_normal(n)


def timed(step, reps):
    time.sleep(1.0)      # let the other library's thread pool go idle first
    t0 = time.perf_counter()
    step()               # warm-up: builds caches both libraries keep between steps
    first = time.perf_counter() - t0
    ts = [] if reps else [first]
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return first, ts


def gpnum_step_fn():
    model = gpnum.GPR(RBF(lengthscale=[0.2, 0.2], variance=1.0), Gaussian(variance=0.05), X, y,
                      mean=0.0, solver="ski", grid_size=G,
                      cg_options={"precond_rank": RANK, "num_probes": PROBES, "train_rtol": TOL,
                                  "min_iter": LANCZOS, "maxiter": MAXITER,
                                  "train_stop": STOP})
    adam = Adam(lr=0.01)

    def step():
        value, g = model.log_marginal_likelihood_and_grad()
        step.loss = -float(value) / n
        h = model.grad_to_unconstrained(g)
        u = model.unconstrained()
        model.set_unconstrained(adam.step({k: u[k] for k in h}, h, maximize=True))

    return model, step


class Peer(gpytorch.models.ExactGP):
    def __init__(self, Xt, yt, lik):
        super().__init__(Xt, yt, lik)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.GridInterpolationKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=2), grid_size=G, num_dims=2))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def peer_step_fn():
    Xt, yt = torch.tensor(X), torch.tensor(y)
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    peer = Peer(Xt, yt, lik).double()
    peer.covar_module.base_kernel.base_kernel.lengthscale = torch.full((2,), 0.2,
                                                                       dtype=torch.float64)
    peer.covar_module.outputscale = 1.0
    lik.noise = 0.05
    peer.train()
    lik.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, peer)
    opt = torch.optim.Adam(peer.parameters(), lr=0.01)

    def step():
        with gpytorch.settings.max_cholesky_size(0), gpytorch.settings.cg_tolerance(TOL), \
                gpytorch.settings.max_cg_iterations(MAXITER), \
                gpytorch.settings.max_preconditioner_size(RANK), \
                gpytorch.settings.num_trace_samples(PROBES), \
                gpytorch.settings.max_lanczos_quadrature_iterations(LANCZOS):
            opt.zero_grad()
            loss = -mll(peer(Xt), yt)
            loss.backward()
            opt.step()
        step.loss = float(loss)

    return None, step


print(f"SKI n={n} d=2 grid {G}x{G}, float64, preconditioner rank {RANK}, {PROBES} probes, "
      f"CG tol {TOL} (gpnum's rule {STOP!r}), {LANCZOS} Lanczos iterations, maxiter {MAXITER}, "
      f"threads {THREADS} "
      f"(torch {torch.get_num_threads()}, GPNUM_BLAS_THREADS={os.environ['GPNUM_BLAS_THREADS']})",
      flush=True)
results = {}
runs = [("gpnum", gpnum_step_fn, reps), ("gpytorch", peer_step_fn, peer_reps)]
for name, make, r in runs:
    if which not in ("both", name):
        continue
    model, step = make()
    first, ts = timed(step, r)
    results[name] = min(ts)
    info = f"; {model.cg_info}" if model is not None else ""
    info = f"; -LML/n {step.loss:.4f}{info}"
    print(f"{name}: first {first:.2f} s, steps {', '.join(f'{t:.2f}' for t in ts)} s{info}",
          flush=True)
if len(results) == 2:
    print(f"GPyTorch / gpnum: {results['gpytorch'] / results['gpnum']:.1f}x")
