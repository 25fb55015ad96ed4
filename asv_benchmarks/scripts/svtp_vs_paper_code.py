"""gpnum.SVTP against the seed paper's public code (xujianscut/svtp, svtp_natgrad.py) on energy.

The public code is not a gpnum dependency and is not in this repository: pass the path of a
module holding its ``SVTP_Diag``, ``train_natgrad`` and ``train_adam`` (a scratch copy; its own
``load_uci`` needs scikit-learn and the network, so this script feeds both sides the same data
instead). Both sides get: energy, the random 75/10/15 split of the seed, 5% of the training
targets shifted by +-3 standard deviations (``gpnum.datasets.add_outliers``), M = 100 inducing
points, minibatch 256, the same number of steps, one thread. Test NLL on the clean test points:
gpnum's ``log_predictive_density``; for the public code (which reports only MSE) the same
estimator written here in torch on its model: ``log mean_s ST(y | nu + M, mu(u_s), s(u_s))``
over 1024 draws of its q. Training time excludes that evaluation (the public loops evaluate
the test MSE every 100 steps: included, it is small).

Usage::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python asv_benchmarks/scripts/svtp_vs_paper_code.py \\
        /tmp/svtp_peer/peer_svtp.py [steps] [seeds]
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time

import numpy as np


def peer_nll(peer, model, X, y, num=1024):
    import torch

    with torch.no_grad():
        lls = []
        for _ in range(num):
            u = model.sample_q_u(1).squeeze(0)
            mu, sig, _, _ = model.predict_given_u(X, u)
            df = model.nu + model.M
            disp = sig + torch.exp(model.log_noise) ** 2
            z2 = (y - mu) ** 2 / ((df - 2) * disp)
            lls.append(torch.lgamma((df + 1) / 2) - torch.lgamma(df / 2)
                       - 0.5 * torch.log((df - 2) * math.pi * disp)
                       - 0.5 * (df + 1) * torch.log1p(z2))
        ll = torch.stack(lls).double()
        lpd = torch.logsumexp(ll, 0) - math.log(num)
        rmse = ((model.predict_mean(X) - y) ** 2).mean().sqrt().item()
    return -lpd.mean().item(), rmse


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    spec = importlib.util.spec_from_file_location("peer_svtp", path)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    import torch

    torch.set_num_threads(1)
    import gpnum
    from gpnum.datasets import add_outliers
    from gpnum.kernels import Matern52

    M = 100
    rows = []
    for seed in range(seeds):
        ds = gpnum.datasets.load("energy", xp="numpy", seed=seed)
        X, y = ds.X_train, add_outliers(ds.y_train, 0.05, seed)
        # gpnum: NGD for q + Adam (0.03), everything learned; steps = epochs * 3.
        model = gpnum.SVTP(Matern52(lengthscale=np.ones(X.shape[1])),
                           gpnum.inducing.kmeans(X, M, seed=seed), num_data=X.shape[0],
                           seed=seed)
        spe = -(-X.shape[0] // 256)
        t0 = time.perf_counter()
        gpnum.fit(model, X, y, optimizer="ngd", gamma=0.1, lr=0.03, epochs=steps // spe,
                  seed=seed, progress=False)
        t_ours = time.perf_counter() - t0
        ev = gpnum.optim.evaluate(model, ds.X_test, ds.y_test)
        rows.append(("gpnum SVTP, NGD + Adam", seed, ev["nll"], ev["rmse"], t_ours,
                     (steps // spe) * spe))
        f32 = torch.float32
        Xt, yt = torch.tensor(X, dtype=f32), torch.tensor(y, dtype=f32)
        Xs, ys = torch.tensor(ds.X_test, dtype=f32), torch.tensor(ds.y_test, dtype=f32)
        for name, train in (("public code, NatGrad(m) + Adam", peer.train_natgrad),
                            ("public code, Adam", peer.train_adam)):
            torch.manual_seed(seed)
            pm = peer.SVTP_Diag(X.shape[1], M)
            t0 = time.perf_counter()
            train(pm, Xt, yt, Xs, ys, n_iter=steps)
            t_peer = time.perf_counter() - t0
            nll, rmse = peer_nll(peer, pm, Xs, ys)
            rows.append((name, seed, nll, rmse, t_peer, steps))
        for r in rows[-3:]:
            print(f"seed {r[1]}: {r[0]:32s} test NLL {r[2]:.3f}  RMSE {r[3]:.3f}  "
                  f"train {r[4]:.1f} s ({r[5]} steps)", flush=True)
    print("\n| method | test NLL (mean +- sd) | test RMSE | training time (s) |")
    print("|---|---|---|---|")
    for name in dict.fromkeys(r[0] for r in rows):
        sel = [r for r in rows if r[0] == name]
        nll = np.array([r[2] for r in sel])
        print(f"| {name} | {nll.mean():.3f} +- {nll.std():.3f} | "
              f"{np.mean([r[3] for r in sel]):.3f} | {np.mean([r[4] for r in sel]):.1f} |")


if __name__ == "__main__":
    main()
