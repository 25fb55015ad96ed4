"""The precip study of docs/structure.md: an exact GP on the 10 x 144 x 72 precipitation grid.

The 75,952 training rows of the random split are cells of the 103,680-cell grid (year,
longitude, latitude; standardised columns keep it a grid), so GPR(solver="grid") runs BBMM on
the observed cells of the Matern-5/2 kernel's 3-level Toeplitz matrix. Training follows Wang et
al. (2019)'s recipe (gpnum.optim.fit_exact_gp): L-BFGS-B on a Cholesky GP of a random subset,
then Adam steps on all the data with the grid solver. The subset GP's own test metrics are
printed beside the full model's.

Run: PYTHONPATH=. python asv_benchmarks/scripts/precip_grid.py [full_adam_steps]
"""

import sys
import time

import numpy as np

from gpnum.datasets import load
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian
from gpnum.models import GPR
from gpnum.optim import fit_exact_gp


def metrics(model, X, y):
    mean, var = model.predict_y(X)
    mean, var = np.asarray(mean), np.asarray(var)
    rmse = float(np.sqrt(np.mean((mean - y) ** 2)))
    nll = float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))
    return rmse, nll


def main(full_steps=3):
    ds = load("precip", seed=0, xp="numpy", dtype="float64")
    X, y = ds.X_train, ds.y_train
    model = GPR(Matern52(lengthscale=[1.0, 1.0, 1.0], variance=1.0), Gaussian(variance=0.1),
                X, y, solver="grid")
    grid, _ = model._grid_cells[1]
    print(f"n_train {X.shape[0]} on a grid of {grid.shape} = {grid.size} cells, n_test "
          f"{ds.X_test.shape[0]}", flush=True)
    t = time.perf_counter()
    fit_exact_gp(model, subset_size=2000, lbfgs_maxiter=50, subset_adam_steps=10,
                        full_adam_steps=0)
    print(f"subset pretraining {time.perf_counter() - t:.1f} s", flush=True)
    sub_idx = np.random.default_rng(0).permutation(X.shape[0])[:2000]
    subset = GPR(model.kernel, model.likelihood, X[sub_idx], y[sub_idx], mean=model.mean)
    rmse, nll = metrics(subset, ds.X_test, ds.y_test)
    print(f"subset GP (Cholesky, 2,000 rows): test RMSE {rmse:.4f} NLL {nll:.4f}", flush=True)
    t = time.perf_counter()
    v, _ = model.objective_and_grad()
    print(f"one grid training step on all rows: {time.perf_counter() - t:.1f} s, LML {float(v):.1f}"
          f", {model.cg_info}", flush=True)
    if full_steps:
        t = time.perf_counter()
        from gpnum.optim import fit

        fit(model, epochs=full_steps, optimizer="adam", lr=0.01)
        print(f"{full_steps} Adam steps on all rows: {time.perf_counter() - t:.1f} s", flush=True)
    t = time.perf_counter()
    rmse, nll = metrics(model, ds.X_test, ds.y_test)
    print(f"grid GP (all {X.shape[0]} rows): test RMSE {rmse:.4f} NLL {nll:.4f}", flush=True)
    print(f"prediction of {ds.X_test.shape[0]} points: {time.perf_counter() - t:.1f} s "
          f"{model.cg_predict_info}", flush=True)
    print({k: np.asarray(v).round(4).tolist() for k, v in model.parameters().items()})


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
