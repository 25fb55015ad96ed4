"""A long real series with GPR(solver="state_space"): half-hourly NSW electricity demand, Elec2
(45,312 points, May 1996 - Dec 1998; bundled, gpnum.datasets.load_series), docs/timeseries.md.

Model, time in days: Matern-3/2 (short-term level) + SHO terms near 1 day and half a day (the
daily cycle and its first harmonic) + SHO near 7 days (the weekly cycle) + Gaussian noise,
constant mean. Hyper-parameters by gpnum.fit (L-BFGS-B) on the 8 weeks before the held-out
last 7 days; the posterior conditions on all 44,976 earlier half-hours and forecasts the last
336. Reported: the fitted
hyper-parameters, the forecast's RMSE and mean negative log predictive density on the held-out
week (standardised demand), against two baselines (the same half-hour a week earlier, and the
training mean), and the iterations and wall time of the fit. With a figure path, plots the last
three weeks and the forecast.

Usage:
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python asv_benchmarks/scripts/state_space_elec.py \
        [MAXITER] [docs/figures/timeseries_elec_forecast.png]
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

import gpnum
from gpnum.kernels import SHO, Matern32
from gpnum.likelihoods import Gaussian

maxiter = int(sys.argv[1]) if len(sys.argv) > 1 else 100
figure = sys.argv[2] if len(sys.argv) > 2 else None
FIT_DAYS = 56

Y, _, names, label = gpnum.datasets.load_series(columns=["nswdemand"])
y = Y[:, 0]
t = np.arange(y.shape[0]) / 48.0  # days
hold = 7 * 48
t_train, y_train, t_test, y_test = t[:-hold], y[:-hold], t[-hold:], y[-hold:]
kernel = (Matern32(lengthscale=0.5, variance=0.2)
          + SHO(variance=0.5, period=1.0, quality=100.0)
          + SHO(variance=0.2, period=0.5, quality=100.0)
          + SHO(variance=0.2, period=7.0, quality=30.0))
# hyper-parameters fitted on the last FIT_DAYS days before the forecast (a few seconds per
# L-BFGS evaluation); the posterior then conditions on the whole series
fit_from = t_train.shape[0] - FIT_DAYS * 48
model = gpnum.GPR(kernel, Gaussian(variance=0.01), t_train[fit_from:, None], y_train[fit_from:],
                  solver="state_space")
print(f"{label}: n_train={t_train.shape[0]} (hyper-parameters fitted on the last "
      f"{FIT_DAYS * 48}), forecast {hold} half-hours", flush=True)
start = float(model.log_marginal_likelihood())
t0 = time.perf_counter()
history = gpnum.fit(model, optimizer="lbfgs", maxiter=maxiter)
elapsed = time.perf_counter() - t0
lml = float(model.log_marginal_likelihood())
print(f"fit: LML {start:.1f} -> {lml:.1f} in {elapsed:.1f} s "
      f"({history.num_steps} evaluations of the LML and its gradient)", flush=True)
for key, value in model.parameters().items():
    print(f"  {key} = {float(np.reshape(value, ())):.5g}")
model = gpnum.GPR(model.kernel, model.likelihood, t_train[:, None], y_train, mean=model.mean,
                  solver="state_space")
t0 = time.perf_counter()
lml = float(model.log_marginal_likelihood())
print(f"whole series: LML {lml:.1f} ({time.perf_counter() - t0:.2f} s)", flush=True)
t0 = time.perf_counter()
mean, var = model.predict_y(t_test[:, None])
print(f"forecast: {time.perf_counter() - t0:.2f} s", flush=True)
rmse = math.sqrt(float(np.mean((mean - y_test) ** 2)))
nlpd = float(np.mean(0.5 * np.log(2.0 * np.pi * var) + 0.5 * (y_test - mean) ** 2 / var))
naive = math.sqrt(float(np.mean((y[-2 * hold:-hold] - y_test) ** 2)))
const = math.sqrt(float(np.mean((y_train.mean() - y_test) ** 2)))
print(f"held-out week: RMSE {rmse:.4f} (a week earlier: {naive:.4f}, training mean: "
      f"{const:.4f}), NLPD {nlpd:.4f}", flush=True)
if figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    show = t >= t[-1] - 21.0
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.plot(t[show], y[show], lw=0.7, color="0.3", label="demand (standardised)")
    sd = np.sqrt(var)
    ax.plot(t_test, mean, color="C0", lw=1.0, label="forecast mean")
    ax.fill_between(t_test, mean - 1.96 * sd, mean + 1.96 * sd, color="C0", alpha=0.25,
                    label="95% predictive band")
    ax.axvline(t_test[0], color="0.5", lw=0.6, ls="--")
    ax.set_xlabel("day")
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    print(f"wrote {figure}")
