"""One SVGP step: gpnum elbo_and_grad / training step vs GPyTorch loss+backward(+NGD), one process."""
import sys, time, warnings
import numpy as np
import torch, gpytorch
torch.set_num_threads(2)
import gpnum
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian
warnings.simplefilter("ignore")
mode = sys.argv[1]          # "elbo" (issue 7) or "train" (issue 8)
ms = [int(a) for a in sys.argv[2].split(",")]
# msMINRES tolerance of both sides in "train" mode: 1e-3, or GPyTorch's default 1e-4
rtol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-3
b, d, N = 256, 2, 100_000
rng = np.random.default_rng(0)

def best(f, reps):
    # NumPy's, SciPy's and torch's thread pools each spin for a while after use: let the
    # other library's workers go idle first, so that neither side pays for the other.
    time.sleep(1.0)
    f(); ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts)

class Peer(gpytorch.models.ApproximateGP):
    def __init__(self, Z, ciq):
        if ciq:
            q = gpytorch.variational.NaturalVariationalDistribution(Z.shape[0])
            s = gpytorch.variational.CiqVariationalStrategy(self, Z, q, learn_inducing_locations=True)
        else:
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            s = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True)
        super().__init__(s)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

for m in ms:
    X = rng.uniform(-1, 1, (b, d)); y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(b)
    Z = rng.uniform(-1, 1, (m, d))
    ciq = mode == "train"
    # --- gpnum
    model = gpnum.SVGP(Matern52(lengthscale=0.3), Gaussian(variance=0.1), Z, num_data=N,
                       whitening="ciq" if ciq else "cholesky", jitter=1e-4,
                       ciq_options={"num_quad": 15, "rtol": 1e-3, "maxiter": 200})
    if mode == "elbo":
        tg = best(lambda: model.elbo_and_grad(X, y), 5)
        variants = {"cholesky": tg}
    else:
        variants = {}
        for method in ("krylov", "dense"):
            mdl = gpnum.SVGP(Matern52(lengthscale=0.3), Gaussian(variance=0.1), Z, num_data=N,
                             whitening="ciq", jitter=1e-4,
                             ciq_options={"num_quad": 15, "rtol": rtol, "maxiter": 200})
            ngd = gpnum.optim.NaturalGradient(0.1, method); ngd.prepare(mdl)
            adam = gpnum.optim.Adam(lr=0.01)
            def step(mdl=mdl, ngd=ngd, adam=adam):
                v, g, data = mdl.elbo_and_grad(X, y, return_data=True)
                ngd.step(mdl, data=data)
                h = mdl.grad_to_unconstrained({k: v for k, v in g.items() if k not in ("q_mu", "q_sqrt")})
                u = mdl.unconstrained()
                mdl.set_unconstrained(adam.step({k: u[k] for k in h}, h, maximize=True))
            variants["ciq+" + method] = best(step, 2)
    # --- GPyTorch
    Zt = torch.tensor(Z); Xt = torch.tensor(X); yt = torch.tensor(y)
    peer = Peer(Zt, ciq).double()
    peer.covar_module.base_kernel.lengthscale = 0.3
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    mll = gpytorch.mlls.VariationalELBO(lik, peer, num_data=N)
    if mode == "elbo":
        def pstep():
            peer.zero_grad(); lik.zero_grad()
            with gpytorch.settings.cholesky_jitter(1e-4):
                loss = -mll(peer(Xt), yt); loss.backward()
        tp = best(pstep, 5)
    else:
        vopt = gpytorch.optim.NGD(peer.variational_parameters(), num_data=N, lr=0.1)
        hopt = torch.optim.Adam([p for n, p in peer.named_parameters() if "variational" not in n] + list(lik.parameters()), lr=0.01)
        def pstep():
            vopt.zero_grad(); hopt.zero_grad()
            with gpytorch.settings.num_contour_quadrature(15), gpytorch.settings.minres_tolerance(rtol), gpytorch.settings.max_cg_iterations(200):
                loss = -mll(peer(Xt), yt); loss.backward()
            vopt.step(); hopt.step()
        tp = best(pstep, 1)
    print(f"m={m} {mode}" + (f" rtol={rtol:g}" if mode == "train" else "") + ": " + ", ".join(f"gpnum {k} {v*1e3:.0f} ms ({tp / v:.1f}x faster)" for k, v in variants.items())
          + f" | GPyTorch {tp*1e3:.0f} ms", flush=True)
