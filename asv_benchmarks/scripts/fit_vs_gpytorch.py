"""The whole training loop, side by side in one process: gpnum.fit against GPyTorch (issue 18).

Both sides: float64, minibatches of 256, Matern-5/2 ARD kernel (d = 9), Cholesky whitening,
natural gradients (step 0.1) for q alternating with Adam (lr 0.01) for everything else, one
forward/backward pass per step. GPyTorch: VariationalStrategy + NaturalVariationalDistribution +
gpytorch.optim.NGD + torch.optim.Adam. The time per step is the mean over one epoch, after one
warm-up epoch; each side sleeps first so that the other library's BLAS workers have gone idle.

Run with GPyTorch from a scratch venv (never a gpnum dependency):

    PYTHONPATH=. /tmp/peer/bin/python asv_benchmarks/scripts/fit_vs_gpytorch.py 500,1000
"""
import sys
import time
import warnings

import numpy as np
import torch
import gpytorch

import gpnum
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian

torch.set_num_threads(2)
warnings.simplefilter("ignore")
ms = [int(a) for a in (sys.argv[1] if len(sys.argv) > 1 else "500,1000").split(",")]
n, d, b = 10_000, 9, 256
rng = np.random.default_rng(0)
X = rng.uniform(-1, 1, (n, d))
y = np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1]) + 0.5 * X[:, 2] + 0.1 * rng.standard_normal(n)


class Peer(gpytorch.models.ApproximateGP):
    def __init__(self, Z):
        q = gpytorch.variational.NaturalVariationalDistribution(Z.shape[0])
        s = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True)
        super().__init__(s)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=d))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


for m in ms:
    Z = X[rng.choice(n, m, replace=False)].copy()
    # --- gpnum.fit
    model = gpnum.SVGP(Matern52(lengthscale=np.ones(d)), Gaussian(variance=0.1), Z, num_data=n)
    gpnum.fit(model, X, y, epochs=1, batch_size=b, progress=False, lr=0.01, gamma=0.1)
    time.sleep(1.0)
    t0 = time.perf_counter()
    h = gpnum.fit(model, X, y, epochs=1, batch_size=b, progress=False, lr=0.01, gamma=0.1,
                  seed=1)
    t_gpnum = (time.perf_counter() - t0) / h.num_steps
    # --- GPyTorch
    peer = Peer(torch.tensor(Z)).double()
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    mll = gpytorch.mlls.VariationalELBO(lik, peer, num_data=n)
    vopt = gpytorch.optim.NGD(peer.variational_parameters(), num_data=n, lr=0.1)
    hopt = torch.optim.Adam([p for name, p in peer.named_parameters() if "variational" not in name]
                            + list(lik.parameters()), lr=0.01)
    Xt, yt = torch.tensor(X), torch.tensor(y)

    def epoch(seed):
        order = torch.tensor(np.random.default_rng(seed).permutation(n))
        steps = 0
        for i in range(0, n, b):
            idx = order[i:i + b]
            vopt.zero_grad()
            hopt.zero_grad()
            loss = -mll(peer(Xt[idx]), yt[idx])
            loss.backward()
            vopt.step()
            hopt.step()
            steps += 1
        return steps

    epoch(0)
    time.sleep(1.0)
    t0 = time.perf_counter()
    steps = epoch(1)
    t_peer = (time.perf_counter() - t0) / steps
    print(f"m={m}: gpnum.fit {t_gpnum * 1e3:.1f} ms/step, GPyTorch loop {t_peer * 1e3:.1f} "
          f"ms/step: gpnum {t_peer / t_gpnum:.2f}x faster", flush=True)
