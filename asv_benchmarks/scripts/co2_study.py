"""Mauna Loa CO2 (Rasmussen & Williams 2006, section 5.4.3): gpnum.GPR vs scikit-learn, one run.

    PYTHONPATH=. python asv_benchmarks/scripts/co2_study.py [restarts=5] [out_dir=docs]

Both libraries fit the book's kernel (5.19) -- long-term RBF + RBF x Periodic (period fixed at
one year) + RationalQuadratic + short RBF + White -- to the monthly series of
``gpnum.datasets.load("co2")`` (1958-2001, 521 months, mean subtracted), by L-BFGS-B from the
same starting points: scikit-learn's gallery initialisation and ``restarts - 1`` log-uniform
perturbations of it (factors in [e^-1.5, e^1.5], seed 0). scikit-learn's alpha and gpnum's
likelihood variance are both 1e-10 (fixed), the constant mean is 0 (fixed), so the two log
marginal likelihoods are of the same model. Writes ``out_dir/figures/co2_forecast.png`` (the
forecast to 2030: mean and 95% band of each) and ``out_dir/co2_results/co2_study.json`` (the
numbers on the docs page). Timings are wall-clock of each library's fits in this process.
"""

import json
import os
import sys
import time
import warnings

# One BLAS thread for both libraries: on a shared 2-core machine a 521 x 521 Cholesky took
# 1 s with OpenBLAS's two spinning threads against 8 ms with one.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy.optimize import minimize  # noqa: E402
from sklearn.gaussian_process import GaussianProcessRegressor  # noqa: E402
from sklearn.gaussian_process import kernels as skk  # noqa: E402

import gpnum  # noqa: E402
from gpnum import kernels as K  # noqa: E402

RESTARTS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
OUT = sys.argv[2] if len(sys.argv) > 2 else "docs"

# (name, book value (R&W table for (5.19)), scikit-learn gallery start) in natural units:
# amplitudes are standard deviations (ppm), lengthscales in years
HYPER = [
    ("trend amplitude", 66.0, 50.0), ("trend lengthscale", 67.0, 50.0),
    ("seasonal amplitude", 2.4, 2.0), ("seasonal decay lengthscale", 90.0, 100.0),
    ("seasonal smoothness (periodic lengthscale)", 1.3, 1.0),
    ("irregular amplitude", 0.66, 0.5), ("irregular lengthscale", 1.2, 1.0),
    ("irregular shape alpha", 0.78, 1.0),
    ("noise RBF amplitude", 0.18, 0.1), ("noise RBF lengthscale", 0.134, 0.1),
    ("white noise std", 0.19, 0.1),
]


def gpnum_kernel(t):
    # one five-part Sum (a + b + c would nest pairwise): parameters "0.lengthscale", ...
    return K.Sum(K.RBF(t[1], t[0] ** 2, dtype="float64"),
                 K.RBF(t[3], t[2] ** 2, dtype="float64")
                 * K.Periodic(K.RBF(t[4], 1.0, dtype="float64"), 1.0),
                 K.RationalQuadratic(t[6], t[7], t[5] ** 2, dtype="float64"),
                 K.RBF(t[9], t[8] ** 2, dtype="float64"), K.White(t[10] ** 2, dtype="float64"))


GPNUM_FIXED = ("mean", "likelihood.variance", "kernel.1.1.period", "kernel.1.1.base.variance")


def gpnum_theta(kernel):
    p = {k: float(np.asarray(v)) for k, v in kernel.parameters().items()}
    return [np.sqrt(p["0.variance"]), p["0.lengthscale"], np.sqrt(p["1.0.variance"]),
            p["1.0.lengthscale"], p["1.1.base.lengthscale"], np.sqrt(p["2.variance"]),
            p["2.lengthscale"], p["2.alpha"], np.sqrt(p["3.variance"]), p["3.lengthscale"],
            np.sqrt(p["4.variance"])]


def sklearn_kernel(t):
    return (skk.ConstantKernel(t[0] ** 2) * skk.RBF(t[1])
            + skk.ConstantKernel(t[2] ** 2) * skk.RBF(t[3])
            * skk.ExpSineSquared(t[4], 1.0, periodicity_bounds="fixed")
            + skk.ConstantKernel(t[5] ** 2) * skk.RationalQuadratic(t[6], t[7])
            + skk.ConstantKernel(t[8] ** 2) * skk.RBF(t[9])
            + skk.WhiteKernel(t[10] ** 2, noise_level_bounds=(1e-5, 1e5)))


def sklearn_theta(kernel):
    leaves = []

    def walk(k):
        if hasattr(k, "k1"):
            walk(k.k1)
            walk(k.k2)
        else:
            leaves.append(k)

    walk(kernel)
    c1, r1, c2, r2, ess, c3, rq, c4, r4, white = leaves
    return [np.sqrt(c1.constant_value), r1.length_scale, np.sqrt(c2.constant_value),
            r2.length_scale, ess.length_scale, np.sqrt(c3.constant_value), rq.length_scale,
            rq.alpha, np.sqrt(c4.constant_value), r4.length_scale, np.sqrt(white.noise_level)]


def fit_log_lbfgs(model, X, y, fixed, maxiter=1000, tight=False):
    """L-BFGS-B on the logarithms of the free (positive) parameters, with gpnum's gradients.

    What scikit-learn optimises (log hyper-parameters). gpnum.fit's L-BFGS-B works on the
    softplus-unconstrained values, which for a variance of 2500 ppm^2 or a lengthscale of 50
    years are the values themselves: badly scaled, it stops early (see the docs page).
    """
    params = {k: np.asarray(v, dtype=np.float64) for k, v in model.parameters().items()}
    names = [k for k in params if k not in fixed]
    nfev = [0]

    def objective(logx):
        nfev[0] += 1
        new = dict(params)
        new.update({k: np.exp(v) for k, v in zip(names, logx, strict=True)})
        model.set_parameters(new)
        try:
            value, grads = model.objective_and_grad(X, y, validate=False)
        except Exception:  # not positive definite at a trial point: back off
            return np.inf, np.zeros_like(logx)
        g = np.array([float(grads[k]) * float(new[k]) for k in names])
        return -float(value), -g

    x0 = np.log([float(params[k]) for k in names])
    res = minimize(objective, x0, jac=True, method="L-BFGS-B",
                   bounds=[(np.log(1e-5), np.log(1e5))] * len(names),  # scikit-learn's bounds
                   # tight: beyond scikit-learn's defaults (ftol 2.2e-9, gtol 1e-5, which
                   # scipy's L-BFGS-B also uses by default), settling the last 1e-8 of the LML
                   options={"maxiter": maxiter, **({"ftol": 1e-13, "gtol": 1e-8} if tight
                                                   else {})})
    objective(res.x)
    return res, nfev[0]


def main():
    ds = gpnum.datasets.load("co2", split=0, standardize=False, xp="numpy", dtype="float64")
    X = np.concatenate([ds.X_train, ds.X_test])  # both parts in time order: the whole series
    y_raw = np.concatenate([ds.y_train, ds.y_test])
    y_mean = float(y_raw.mean())
    y = y_raw - y_mean
    rng = np.random.default_rng(0)
    start0 = np.array([h[2] for h in HYPER])
    starts = [start0] + [start0 * np.exp(rng.uniform(-1.5, 1.5, start0.shape))
                         for _ in range(RESTARTS - 1)]

    def new_model(s):
        return gpnum.GPR(gpnum_kernel(s), gpnum.likelihoods.Gaussian(1e-10, dtype="float64"),
                         X, y)

    # ---- gpnum: same starting points, L-BFGS-B on log parameters over gpnum's gradients,
    # with scikit-learn's settings (default) and with tight tolerances
    def gpnum_runs(tight):
        runs, t0 = [], time.perf_counter()
        for s in starts:
            model = new_model(s)
            res, nfev = fit_log_lbfgs(model, X, y, GPNUM_FIXED, tight=tight)
            runs.append((float(model.log_marginal_likelihood()), model, res.nit, nfev,
                         str(res.message)))
        return runs, time.perf_counter() - t0

    gp_runs, gp_time = gpnum_runs(tight=True)
    same_runs, same_time = gpnum_runs(tight=False)

    # ---- gpnum.fit(optimizer="lbfgs") as it is (its L-BFGS-B driver, gpnum.optim.lbfgs)
    fit_runs, t0 = [], time.perf_counter()
    for s in starts:
        model_f = new_model(s)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                hist = gpnum.fit(model_f, optimizer="lbfgs", fixed=GPNUM_FIXED, maxiter=1000,
                                 progress=False)
            except ValueError as exc:  # a start the model refuses
                fit_runs.append((float("nan"), None, [f"failed: {exc}"]))
                continue
        fit_runs.append((float(model_f.log_marginal_likelihood()), len(hist.step_elbo),
                         sorted({str(w.message) for w in caught})))
    fit_time = time.perf_counter() - t0

    # ---- gpnum.fit with its defaults on the kernel written as an expression, starting from
    # the data-informed values of gpnum.kernels.from_expression (period fixed at one year),
    # with as many restarts as scikit-learn has starting points (drawn by gpnum.fit's rule)
    t0 = time.perf_counter()
    expr_kernel = K.from_expression("rbf + rbf*periodic + rq + rbf + white", input_dim=1,
                                    X=X, y=y, xp="numpy", dtype="float64")
    model_e = gpnum.GPR(expr_kernel, gpnum.likelihoods.Gaussian(1e-10, dtype="float64"), X, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist_e = gpnum.fit(model_e, optimizer="lbfgs", fixed=GPNUM_FIXED,
                           n_restarts=RESTARTS - 1, progress=False)
    expr_result = {"best_lml": float(model_e.log_marginal_likelihood()),
                   "fit_seconds_all_starts": time.perf_counter() - t0,
                   "lbfgs_iterations": len(hist_e.step_elbo),
                   "stop_reason": getattr(hist_e, "stop_reason", None),
                   "warnings": sorted({str(w.message) for w in caught})}

    # ---- scikit-learn: one GaussianProcessRegressor per starting point (its own L-BFGS-B)
    sk_counts = []

    def sk_optimizer(obj_func, initial_theta, bounds):
        # what scikit-learn's default optimizer="fmin_l_bfgs_b" runs, counting its work
        res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds)
        sk_counts.append((int(res.nit), int(res.nfev)))
        return res.x, res.fun

    sk_runs, t0 = [], time.perf_counter()
    for s in starts:
        reg = GaussianProcessRegressor(sklearn_kernel(s), alpha=1e-10, normalize_y=False,
                                       optimizer=sk_optimizer)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            reg.fit(X, y)
        sk_runs.append((float(reg.log_marginal_likelihood_value_), reg))
    sk_time = time.perf_counter() - t0

    # ---- one LML + gradient evaluation of each at the gallery start, alternating, best of 7
    probe = new_model(start0)
    probe_reg = GaussianProcessRegressor(sklearn_kernel(start0), alpha=1e-10,
                                         optimizer=None).fit(X, y)
    theta0 = probe_reg.kernel_.theta
    per_eval = {"gpnum": [], "sklearn": []}
    for _ in range(7):
        t = time.perf_counter()
        probe.objective_and_grad(X, y, validate=False)
        per_eval["gpnum"].append(time.perf_counter() - t)
        t = time.perf_counter()
        probe_reg.log_marginal_likelihood(theta0, eval_gradient=True, clone_kernel=False)
        per_eval["sklearn"].append(time.perf_counter() - t)

    gp_best = max(gp_runs, key=lambda r: r[0])
    sk_best = max(sk_runs, key=lambda r: r[0])
    model, reg = gp_best[1], sk_best[1]

    # the same hyper-parameters in both libraries give the same LML
    theta_sk = sklearn_theta(reg.kernel_)
    check = gpnum.GPR(gpnum_kernel(theta_sk), gpnum.likelihoods.Gaussian(1e-10, dtype="float64"),
                      X, y)
    lml_gp_at_sk = float(check.log_marginal_likelihood())

    # forecast to 2030
    Xs = np.arange(1958.0, 2030.0 + 1e-9, 1.0 / 12.0)[:, None]
    mean_gp, var_gp = model.predict_f(Xs)
    mean_gp, std_gp = np.asarray(mean_gp) + y_mean, np.sqrt(np.asarray(var_gp))
    mean_sk, std_sk = reg.predict(Xs, return_std=True)
    mean_sk = mean_sk + y_mean
    i2030 = -1
    i2001 = int(np.argmin(np.abs(Xs[:, 0] - 2002.0)))

    results = {
        "data": {"n": int(X.shape[0]), "first": float(X[0, 0]), "last": float(X[-1, 0]),
                 "y_mean": y_mean},
        "restarts": RESTARTS,
        "gpnum": {"best_lml": gp_best[0], "lml_per_start": [r[0] for r in gp_runs],
                  "fit_seconds_all_starts": gp_time,
                  "lbfgs_iterations": [r[2] for r in gp_runs],
                  "evaluations": [r[3] for r in gp_runs],
                  "messages": [r[4] for r in gp_runs],
                  "theta": gpnum_theta(model.kernel)},
        "gpnum_sklearn_tolerances": {
            "best_lml": max(r[0] for r in same_runs), "lml_per_start": [r[0] for r in same_runs],
            "fit_seconds_all_starts": same_time, "lbfgs_iterations": [r[2] for r in same_runs],
            "evaluations": [r[3] for r in same_runs]},
        "seconds_per_lml_and_gradient": {k: min(v) for k, v in per_eval.items()},
        "gpnum_fit_softplus": {"best_lml": max((r[0] for r in fit_runs if r[0] == r[0]),
                                               default=float("nan")),
                               "lml_per_start": [r[0] for r in fit_runs],
                               "fit_seconds_all_starts": fit_time,
                               "lbfgs_iterations": [r[1] for r in fit_runs],
                               "warnings": sorted({m for r in fit_runs for m in r[2]})},
        "gpnum_fit_expression": expr_result,
        "sklearn": {"best_lml": sk_best[0], "lml_per_start": [r[0] for r in sk_runs],
                    "fit_seconds_all_starts": sk_time, "theta": theta_sk,
                    "lbfgs_iterations": [c[0] for c in sk_counts],
                    "evaluations": [c[1] for c in sk_counts],
                    "kernel": str(reg.kernel_),
                    "gpnum_lml_at_sklearn_theta": lml_gp_at_sk,
                    "relative_difference": abs(lml_gp_at_sk - sk_best[0]) / abs(sk_best[0])},
        "book": {"theta": [h[1] for h in HYPER], "lml": -108.5},
        "names": [h[0] for h in HYPER],
        "forecast_2030": {"gpnum_mean": float(mean_gp[i2030]),
                          "gpnum_std": float(std_gp[i2030]),
                          "sklearn_mean": float(mean_sk[i2030]),
                          "sklearn_std": float(std_sk[i2030]),
                          "gpnum_mean_2002": float(mean_gp[i2001])},
        "max_abs_mean_difference_ppm": float(np.max(np.abs(mean_gp - mean_sk))),
    }
    os.makedirs(os.path.join(OUT, "co2_results"), exist_ok=True)
    with open(os.path.join(OUT, "co2_results", "co2_study.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    print(json.dumps({k: results[k] for k in ("gpnum", "gpnum_sklearn_tolerances",
                                              "seconds_per_lml_and_gradient",
                                              "gpnum_fit_softplus", "gpnum_fit_expression",
                                              "sklearn",
                                              "forecast_2030")}, indent=1))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.plot(X[:, 0], y_raw, "k.", ms=2, label="monthly mean (Mauna Loa)")
    ax.plot(Xs[:, 0], mean_gp, color="C0", lw=1, label="gpnum GPR mean")
    ax.fill_between(Xs[:, 0], mean_gp - 1.96 * std_gp, mean_gp + 1.96 * std_gp, color="C0",
                    alpha=0.25, label="gpnum 95% band")
    ax.plot(Xs[:, 0], mean_sk, "--", color="C3", lw=0.8, label="scikit-learn mean")
    ax.plot(Xs[:, 0], mean_sk - 1.96 * std_sk, ":", color="C3", lw=0.8)
    ax.plot(Xs[:, 0], mean_sk + 1.96 * std_sk, ":", color="C3", lw=0.8,
            label="scikit-learn 95% band")
    ax.set_xlabel("year")
    ax.set_ylabel("CO2 (ppm)")
    ax.set_title("Mauna Loa CO2: book kernel (R&W 5.4.3) fitted to 1958-2001, forecast to 2030")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.join(OUT, "figures"), exist_ok=True)
    fig.savefig(os.path.join(OUT, "figures", "co2_forecast.png"), dpi=110)


if __name__ == "__main__":
    main()
