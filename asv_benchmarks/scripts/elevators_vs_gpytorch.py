"""Time to accuracy on elevators (issue 18): GPyTorch's 20-epoch test NLL, and how long gpnum.fit
takes to reach it.

Same data (bundled elevators, standardised, 75/10/15 random split, seed 0), the same 500
inducing points (k-means), Matern-5/2 ARD, Gaussian likelihood, minibatches of 256, natural
gradients (0.1) for q alternating with Adam for the rest, float64. GPyTorch:
VariationalStrategy + NaturalVariationalDistribution + NGD + Adam (lr 0.01), 20 epochs. gpnum:
``gpnum fit``'s settings (Adam lr 0.03), evaluated on the test set after every epoch (evaluation
time excluded from the training clock), until its test NLL is at or below GPyTorch's.

    PYTHONPATH=. /tmp/peer/bin/python asv_benchmarks/scripts/elevators_vs_gpytorch.py [LR]

``LR``: gpnum's Adam learning rate (default 0.03, the CLI's; 0.01 is GPyTorch's here).
"""
import math
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
ds = gpnum.datasets.load("elevators", xp="numpy", seed=0)
X, y, Xt, yt = ds.X_train, ds.y_train, ds.X_test, ds.y_test
n, d, b, m, epochs = X.shape[0], X.shape[1], 256, 500, 20
lr = float(sys.argv[1]) if len(sys.argv) > 1 else 0.03
Z = gpnum.inducing.kmeans(X, m, seed=0)


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


# --- GPyTorch, 20 epochs
peer = Peer(torch.tensor(Z)).double()
lik = gpytorch.likelihoods.GaussianLikelihood().double()
mll = gpytorch.mlls.VariationalELBO(lik, peer, num_data=n)
vopt = gpytorch.optim.NGD(peer.variational_parameters(), num_data=n, lr=0.1)
hopt = torch.optim.Adam([p for name, p in peer.named_parameters() if "variational" not in name]
                        + list(lik.parameters()), lr=0.01)
Xtr, ytr = torch.tensor(X), torch.tensor(y)
time.sleep(1.0)
t_peer = 0.0
for epoch in range(epochs):
    order = torch.tensor(np.random.default_rng(epoch).permutation(n))
    t0 = time.perf_counter()
    peer.train()
    lik.train()
    for i in range(0, n, b):
        idx = order[i:i + b]
        vopt.zero_grad()
        hopt.zero_grad()
        loss = -mll(peer(Xtr[idx]), ytr[idx])
        loss.backward()
        vopt.step()
        hopt.step()
    t_peer += time.perf_counter() - t0
peer.eval()
lik.eval()
with torch.no_grad():
    pred = lik(peer(torch.tensor(Xt)))
    mu, var = pred.mean.numpy(), pred.variance.numpy()
peer_nll = float(np.mean(0.5 * np.log(2 * math.pi * var) + 0.5 * (yt - mu) ** 2 / var))
peer_rmse = float(np.sqrt(np.mean((yt - mu) ** 2)))
print(f"GPyTorch: {epochs} epochs in {t_peer:.1f} s, test RMSE {peer_rmse:.4f}, NLL {peer_nll:.4f}",
      flush=True)

# --- gpnum.fit, epoch by epoch until its test NLL reaches GPyTorch's
model = gpnum.SVGP(Matern52(lengthscale=np.ones(d)), Gaussian(variance=0.693), Z, num_data=n)
time.sleep(1.0)
t_gpnum, reached = 0.0, None
for epoch in range(1, epochs + 1):
    t0 = time.perf_counter()
    gpnum.fit(model, X, y, epochs=epoch, batch_size=b, lr=lr, gamma=0.1, progress=False,
              resume=epoch > 1)
    t_gpnum += time.perf_counter() - t0
    metrics = gpnum.optim.evaluate(model, Xt, yt)
    if reached is None and metrics["nll"] <= peer_nll:
        reached = (epoch, t_gpnum, metrics)
        break
if reached is None:
    print(f"gpnum: did not reach NLL {peer_nll:.4f} in {epochs} epochs ({t_gpnum:.1f} s); "
          f"last {metrics}")
else:
    e, t, mtr = reached
    print(f"gpnum (Adam lr {lr:g}): NLL {mtr['nll']:.4f} (RMSE {mtr['rmse']:.4f}) after {e} "
          f"epochs, {t:.1f} s of "
          f"training: {t / t_peer:.2f} of GPyTorch's time")
