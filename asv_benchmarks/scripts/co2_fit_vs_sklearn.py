"""Mauna Loa CO2: ``gpnum.fit`` with its defaults against scikit-learn's GaussianProcessRegressor,
the same starts, side by side in one process (issue 48).

    PYTHONPATH=. python asv_benchmarks/scripts/co2_fit_vs_sklearn.py [starts=5]

The book's kernel (co2_study.py) from scikit-learn's gallery start and ``starts - 1`` log-uniform
perturbations of it (factors in [e^-1.5, e^1.5], seed 0), the period fixed at one year, the
noise at 1e-10. Per start: ``gpnum.fit(model, optimizer="lbfgs", fixed=...)`` with every other
argument at its default, then ``GaussianProcessRegressor(kernel, alpha=1e-10).fit`` (its own
L-BFGS-B, counted). Then the kernel written as the expression
``"rbf + rbf*periodic + rq + rbf + white"`` with the data-informed starts of
``gpnum.kernels.from_expression`` and ``gpnum.fit``'s defaults. One BLAS thread for both
(``OPENBLAS_NUM_THREADS=1``, set here). Prints per start the LML and the evaluations, then the
totals and the ratio of the fit times.
"""

import os
import sys
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from scipy.optimize import minimize
from sklearn.gaussian_process import GaussianProcessRegressor

import gpnum
from gpnum import kernels as K

sys.path.insert(0, os.path.dirname(__file__))
import co2_study as S  # the kernels, starts and fixed parameters

STARTS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def main():
    ds = gpnum.datasets.load("co2", split=0, standardize=False, xp="numpy", dtype="float64")
    X = np.concatenate([ds.X_train, ds.X_test])
    y = np.concatenate([ds.y_train, ds.y_test])
    y = y - y.mean()
    start0 = np.array([h[2] for h in S.HYPER])
    rng = np.random.default_rng(0)
    starts = [start0] + [start0 * np.exp(rng.uniform(-1.5, 1.5, start0.shape))
                         for _ in range(STARTS - 1)]
    t_gp = t_sk = 0.0
    rows = []
    for s in starts:
        model = gpnum.GPR(S.gpnum_kernel(s), gpnum.likelihoods.Gaussian(1e-10, dtype="float64"),
                          X, y)
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hist = gpnum.fit(model, optimizer="lbfgs", fixed=S.GPNUM_FIXED, progress=False)
        t_gp += time.perf_counter() - t
        counts = []

        def optimizer(obj_func, initial_theta, bounds, counts=counts):
            res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds)
            counts.append(int(res.nfev))
            return res.x, res.fun

        reg = GaussianProcessRegressor(S.sklearn_kernel(s), alpha=1e-10, optimizer=optimizer)
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg.fit(X, y)
        t_sk += time.perf_counter() - t
        rows.append((float(model.log_marginal_likelihood()), hist.num_eval,
                     float(reg.log_marginal_likelihood_value_), counts[0]))
        print(f"start {len(rows)}: gpnum LML {rows[-1][0]:.8f} ({rows[-1][1]} evaluations, "
              f"warnings {sorted({str(w.message)[:60] for w in caught})}) | scikit-learn "
              f"{rows[-1][2]:.8f} ({rows[-1][3]} evaluations)", flush=True)
    best_gp, best_sk = max(r[0] for r in rows), max(r[2] for r in rows)
    print(f"gpnum.fit: best LML {best_gp:.8f}, {sum(r[1] for r in rows)} evaluations, "
          f"{t_gp:.2f} s | scikit-learn: best LML {best_sk:.8f}, "
          f"{sum(r[3] for r in rows)} evaluations, {t_sk:.2f} s | time ratio {t_gp / t_sk:.3f}")

    t = time.perf_counter()
    kernel = K.from_expression("rbf + rbf*periodic + rq + rbf + white", input_dim=1, X=X, y=y,
                               xp="numpy", dtype="float64")
    model = gpnum.GPR(kernel, gpnum.likelihoods.Gaussian(1e-10, dtype="float64"), X, y)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        hist = gpnum.fit(model, optimizer="lbfgs", fixed=S.GPNUM_FIXED, progress=False)
    t_ex = time.perf_counter() - t
    print(f"expression kernel, gpnum.fit defaults: LML "
          f"{float(model.log_marginal_likelihood()):.8f}, {hist.num_eval} evaluations, "
          f"{t_ex:.2f} s ({t_ex / t_sk:.3f} of scikit-learn's five fits)")


if __name__ == "__main__":
    main()
