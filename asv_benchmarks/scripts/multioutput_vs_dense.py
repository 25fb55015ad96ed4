"""Multi-output exact GP (issue 51): the log marginal likelihood with its gradient through the
Kronecker path against the dense (n t) x (n t) Cholesky path, side by side in one process; and
optionally one training step against GPyTorch's multitask recipe.

Data: n random inputs in 3 dimensions, t outputs drawn from an ICM with RBF latent kernel
(rank 2) plus per-output noise, float64. Model: gpnum.models.MultiOutputGPR with
ICM(RBF(ARD), t, rank), per-output noise variances, a constant mean per output.

- "kronecker": MultiOutputGPR (solver="auto": eigendecompositions of K (n, n) and
  D^-1/2 B D^-1/2 (t, t)).
- "dense": the same LML and gradient by one Cholesky factorisation of the whole (n t, n t)
  covariance: LAPACK potrf and potri in place (SciPy, two (n t)^2 arrays), the gradient
  contracted block by block (dK = sum_ab Sigma_bar_ab B_ab, dB_ab = sum(Sigma_bar_ab * K)),
  the kernel's backward pass through gpnum. The two values and gradients are compared.
  At n = 2,000, t = 10 the dense path holds two or three 3.2 GB matrices.
- "gpytorch" (argument ``gpytorch``; run with the scratch venv's python): one training step
  (loss, backward, Adam) of ExactGP with MultitaskMean(ConstantMean), MultitaskKernel(RBF ARD,
  rank), MultitaskGaussianLikelihood(has_global_noise=False: per-task noise only, as gpnum's),
  float64, against one gpnum step (LML + gradient + Adam), the same start.

Threads: the fourth argument (default 2) is the number of BLAS threads of both sides: gpnum's
hot-path pool (:func:`gpnum.backend.set_blas_threads`; gpnum's default is 1) and torch's
(``torch.set_num_threads``; torch's default is every core). Compare at equal settings.

Usage (quiet machine, under the exclusive lock):
    flock -x /tmp/cpu.lock python asv_benchmarks/scripts/multioutput_vs_dense.py 2000 10 dense
    flock -x /tmp/cpu.lock /work/scratch-peer/bin/python \
        asv_benchmarks/scripts/multioutput_vs_dense.py 2000 10 gpytorch 1
    flock -x /tmp/cpu.lock /work/scratch-peer/bin/python \
        asv_benchmarks/scripts/multioutput_vs_dense.py 2000 10 gpytorch 2
"""

import sys
import time

import numpy as np
import torch

from gpnum.backend import blas_pool, blas_threads, eigh, set_blas_threads
from gpnum.kernels import ICM, RBF
from gpnum.likelihoods import Gaussian
from gpnum.models import MultiOutputGPR
from gpnum.optim import Adam

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
t = int(sys.argv[2]) if len(sys.argv) > 2 else 10
mode = sys.argv[3] if len(sys.argv) > 3 else "dense"
THREADS = int(sys.argv[4]) if len(sys.argv) > 4 else 2
RANK, D = 2, 3
# the same number of BLAS threads for gpnum's hot paths (its default is one) and for torch
set_blas_threads(THREADS)
torch.set_num_threads(THREADS)

rng = np.random.default_rng(0)
X = rng.uniform(-2.0, 2.0, (n, D))
W_true = rng.normal(size=(t, RANK))
K_true = RBF(lengthscale=np.full(D, 0.8))(X) + 1e-8 * np.eye(n)
F = np.linalg.cholesky(K_true) @ rng.normal(size=(n, RANK)) @ W_true.T
Y = F + 0.3 * rng.normal(size=(n, t))


def make_model():
    kern = ICM(RBF(lengthscale=np.ones(D), variance=1.0), t, RANK)
    return MultiOutputGPR(kern, Gaussian(variance=np.full(t, 0.2)), X, Y)


def best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def dense_lml_and_grad(model):
    """The model's LML and gradient by one Cholesky of the full (n t) covariance."""
    kern = model.kernel
    K, vjp = kern.kernel.gram_and_vjp(X)
    B = np.asarray(kern.coregion_matrices()[0])
    s2 = np.asarray(model.likelihood.variance)
    N = n * t
    S = np.empty((N, N))
    for a in range(t):
        for b in range(t):
            S[a::t, b::t] = K * B[a, b]
    S[np.diag_indices(N)] += np.tile(s2, n)
    # torch's LAPACK for the factorisation and the inverse: SciPy's 32-bit-integer LAPACK
    # crashed on this machine at n t = 20,000 (3.2 GB matrices)
    St = torch.from_numpy(S)
    L = torch.linalg.cholesky(St)
    del St, S
    r = (Y - np.asarray(model.mean)[None, :]).reshape(-1)
    alpha = torch.cholesky_solve(torch.from_numpy(r)[:, None], L)[:, 0].numpy()
    logdet = 2.0 * float(torch.sum(torch.log(torch.diagonal(L))))
    value = -0.5 * (r @ alpha) - 0.5 * logdet - 0.5 * N * np.log(2.0 * np.pi)
    # Sigma^{-1} = L^{-T} L^{-1}: a triangular solve and a product, both torch's (MKL).
    # torch.cholesky_inverse was 15x slower than this here; NumPy's A^T A (OpenBLAS syrk)
    # crashed at n t = 20,000, as SciPy's potrf/potri did
    Linv = torch.linalg.solve_triangular(L, torch.eye(N, dtype=L.dtype), upper=False)
    del L
    Sinv = (Linv.T @ Linv).numpy()
    del Linv
    A = alpha.reshape(n, t)
    dK = np.zeros((n, n))
    dB = np.zeros((t, t))
    for a in range(t):
        for b in range(t):
            block = 0.5 * (np.outer(A[:, a], A[:, b]) - Sinv[a::t, b::t])
            dK += block * B[a, b]
            dB[a, b] = np.sum(block * K)
    d_noise = 0.5 * (np.sum(A * A, axis=0)
                     - np.array([np.trace(Sinv[a::t, a::t]) for a in range(t)]))
    g = {f"kernel.kernel.{k}": v for k, v in vjp(dK)["params"].items()}
    W = np.asarray(kern.coregion.W)
    g["kernel.coregion.W"] = (dB + dB.T) @ W
    g["kernel.coregion.kappa"] = np.diag(dB).copy()
    g["likelihood.variance"] = d_noise
    g["mean"] = A.sum(axis=0)
    return value, g


def compare_dense():
    model = make_model()
    model.log_marginal_likelihood_and_grad()    # warm-up
    t_kron, (v_kron, g_kron) = best(model.log_marginal_likelihood_and_grad, 3)
    torch.linalg.cholesky(torch.eye(64, dtype=torch.float64))  # warm-up
    t_dense, (v_dense, g_dense) = best(lambda: dense_lml_and_grad(model), 1)
    err = max(np.linalg.norm(np.asarray(g_kron[k]) - g_dense[k])
              / max(np.linalg.norm(g_dense[k]), 1e-300) for k in g_dense)
    print(f"n={n} t={t} rank={RANK} threads={THREADS}: LML+grad kronecker {t_kron:.3f} s, dense Cholesky "
          f"{t_dense:.2f} s, ratio {t_dense / t_kron:.1f}x; |dLML| "
          f"{abs(float(v_kron) - v_dense):.2e} (LML {float(v_kron):.6f}), worst relative "
          f"gradient difference {err:.2e}")


def compare_gpytorch():
    import gpytorch

    Xt, Yt = torch.tensor(X), torch.tensor(Y)

    class Peer(gpytorch.models.ExactGP):
        def __init__(self, lik):
            super().__init__(Xt, Yt, lik)
            self.mean_module = gpytorch.means.MultitaskMean(gpytorch.means.ConstantMean(),
                                                            num_tasks=t)
            self.covar_module = gpytorch.kernels.MultitaskKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=D), num_tasks=t, rank=RANK)

        def forward(self, x):
            return gpytorch.distributions.MultitaskMultivariateNormal(
                self.mean_module(x), self.covar_module(x))

    model = make_model()
    lik = gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=t, has_global_noise=False)
    peer = Peer(lik).double()
    # gpnum's start: lengthscales 1, B = W W^T + diag(1) with Coregion's default W, noise 0.2
    peer.covar_module.data_covar_module.lengthscale = torch.ones(1, D, dtype=torch.float64)
    task = peer.covar_module.task_covar_module
    task.covar_factor.data = torch.tensor(np.asarray(model.kernel.coregion.W))
    task.var = torch.ones(t, dtype=torch.float64)
    lik.task_noises = torch.full((t,), 0.2, dtype=torch.float64)
    peer.train()
    lik.train()
    opt = torch.optim.Adam(peer.parameters(), lr=0.01)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, peer)

    def peer_step():
        opt.zero_grad()
        loss = -mll(peer(Xt), Yt)
        loss.backward()
        opt.step()
        return float(loss.detach())

    adam = Adam(lr=0.01)

    def our_step():
        v, g = model.objective_and_grad()
        h = model.grad_to_unconstrained(g)
        u = model.unconstrained()
        model.set_unconstrained(adam.step({k: u[k] for k in h}, h, maximize=True))
        return float(v)

    first = (peer_step(), -our_step() / (n * t))   # the same start: the same objective
    time.sleep(1.0)
    t_peer, loss = best(peer_step, 3)
    time.sleep(1.0)
    t_ours, lml = best(our_step, 3)
    # the floor of both: one symmetric eigendecomposition of the (n, n) kernel matrix
    K = np.asarray(model.kernel.kernel(X))
    with blas_pool("scipy"):
        t_eigh, _ = best(lambda: eigh(K), 2)
    t_torch_eigh, _ = best(lambda: torch.linalg.eigh(torch.from_numpy(K)), 2)
    print(f"n={n} t={t} rank={RANK} threads={THREADS} (gpnum {blas_threads()}, torch "
          f"{torch.get_num_threads()}): one training step gpnum {t_ours:.3f} s, GPyTorch "
          f"{gpytorch.__version__} (torch {torch.__version__}) {t_peer:.3f} s, ratio "
          f"{t_peer / t_ours:.1f}x; first-step objective per entry: GPyTorch {first[0]:.6f}, "
          f"gpnum {first[1]:.6f}; one (n, n) eigh: gpnum.backend.eigh {t_eigh:.3f} s, "
          f"torch.linalg.eigh {t_torch_eigh:.3f} s")


if mode == "dense":
    compare_dense()
elif mode == "gpytorch":
    compare_gpytorch()
else:
    raise SystemExit(f"mode: expected 'dense' or 'gpytorch', got {mode!r}")
