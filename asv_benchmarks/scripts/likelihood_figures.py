"""The figures of docs/classification.md, docs/counts.md and docs/heteroscedastic.md.

    PYTHONPATH=. python asv_benchmarks/scripts/likelihood_figures.py [out_dir]

Each fits a small SVGP (one input, so that the fit can be drawn) with gpnum.fit and saves one
PNG to docs/figures/ (default):

- likelihood_softmax.png: three classes along one input, Softmax class probabilities;
- likelihood_counts.png: bike rentals against the hour of the day (500 random hours of the
  bundled ``bikecount``), NegativeBinomial fit, predictive median and 5-95 % interval;
- likelihood_heteroscedastic.png: log rentals against the hour (``bikelog``), Gaussian and
  HeteroscedasticGaussian fits with their 90 % bands (the second widens at night, where a
  log count is noisiest).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import nbinom, norm  # noqa: E402

import gpnum  # noqa: E402
from gpnum.kernels import RBF  # noqa: E402
from gpnum.likelihoods import (Gaussian, HeteroscedasticGaussian, NegativeBinomial,  # noqa: E402
                               Softmax)

F64 = dict(xp=np, dtype=np.float64)
HOUR = 6  # the hour-of-day column (0..23) of bike's inputs


def _fit(lik, X, y, m, ell, epochs, mean=0.0):
    Z = np.linspace(X.min(), X.max(), m)[:, None]
    model = gpnum.SVGP(RBF(lengthscale=ell, variance=1.0, **F64), lik, Z, num_data=X.shape[0])
    model.mean = mean
    gpnum.fit(model, X, y, epochs=epochs, batch_size=X.shape[0], lr=0.05, gamma=0.5,
              progress=False)
    return model


def softmax_figure(out):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 300)
    logits = np.stack([-2 * x - 2, 1.5 - 1.5 * x * x, 2 * x - 2], axis=1)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(3, p=row) for row in p], dtype=np.float64)
    model = _fit(Softmax(3, num_points=256, **F64), x[:, None], y, 15, 1.0, 300)
    grid = np.linspace(-3, 3, 200)
    mu, var = model.predict_f(grid[:, None])
    probs = Softmax(3, num_points=4096, **F64).predict_mean_and_var(mu, var)[0]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for k, colour in enumerate(("C0", "C1", "C2")):
        ax.plot(grid, probs[:, k], colour, label=f"P(y = {k}) (Softmax SVGP)")
        ax.plot(grid, (np.exp(np.stack([-2 * grid - 2, 1.5 - 1.5 * grid ** 2, 2 * grid - 2], 1))
                       / np.exp(np.stack([-2 * grid - 2, 1.5 - 1.5 * grid ** 2, 2 * grid - 2],
                                         1)).sum(1, keepdims=True))[:, k], colour, ls=":")
        ax.plot(x[y == k], np.full((y == k).sum(), -0.05 - 0.04 * k), "|", color=colour)
    ax.set_xlabel("x")
    ax.set_ylabel("class probability")
    ax.set_title("Softmax, 3 classes, 300 points (dotted: the true probabilities)")
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(out / "likelihood_softmax.png", dpi=110)


def _bike(name, n=500):
    ds = gpnum.datasets.load(name, xp="numpy", dtype="float64", standardize=False)
    idx = np.random.default_rng(1).choice(ds.X_train.shape[0], n, replace=False)
    hour = ds.X_train[:, HOUR:HOUR + 1]
    # the file stores the column centred; its smallest value is hour 0
    return hour[idx] - hour.min(), ds.y_train[idx]


def counts_figure(out):
    X, y = _bike("bikecount")
    lik = NegativeBinomial(0.5, **F64)
    model = _fit(lik, X, y, 12, 3.0, 300, mean=float(np.log(y.mean())))
    grid = np.linspace(0, 23, 200)
    mu, var = model.predict_f(grid[:, None])
    # predictive quantiles: the NB cdf averaged over f ~ N(mu, var) by Gauss-Hermite
    t, w = np.polynomial.hermite.hermgauss(30)
    w = w / np.sqrt(np.pi)
    r = 1.0 / float(lik.dispersion)
    ks = np.arange(0, 1500)
    lo, med, hi = [], [], []
    for m_, v_ in zip(mu, var):
        f = m_ + np.sqrt(2 * v_) * t
        cdf = (w[:, None] * nbinom.cdf(ks[None, :], r, r / (r + np.exp(f))[:, None])).sum(0)
        lo.append(ks[np.searchsorted(cdf, 0.05)])
        med.append(ks[np.searchsorted(cdf, 0.5)])
        hi.append(ks[np.searchsorted(cdf, 0.95)])
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(X[:, 0] + np.random.default_rng(2).uniform(-0.2, 0.2, len(y)), y, ".", ms=3,
            color="0.5", label="rentals in one hour (500 random hours)")
    ax.fill_between(grid, lo, hi, color="C0", alpha=0.25, label="5-95 % predictive interval")
    ax.plot(grid, med, "C0", label="predictive median")
    ax.set_xlabel("hour of the day")
    ax.set_ylabel("rentals")
    ax.set_title(f"NegativeBinomial SVGP on bikecount (learned dispersion "
                 f"{float(lik.dispersion):.2f})")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "likelihood_counts.png", dpi=110)


def hetero_figure(out):
    X, y = _bike("bikelog")
    y_mean, y_std = y.mean(), y.std()
    z = (y - y_mean) / y_std
    grid = np.linspace(0, 23, 200)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(X[:, 0] + np.random.default_rng(2).uniform(-0.2, 0.2, len(y)), y, ".", ms=3,
            color="0.5", label="log rentals (500 random hours)")
    for lik, colour, name in ((Gaussian(0.3, **F64), "C1", "Gaussian"),
                              (HeteroscedasticGaussian(**F64), "C0", "HeteroscedasticGaussian")):
        model = _fit(lik, X, z, 12, 3.0, 300)
        mean, v = lik.predict_mean_and_var(*model.predict_f(grid[:, None]))
        mean, sd = mean * y_std + y_mean, np.sqrt(v) * y_std
        q = norm.ppf(0.95)
        ax.fill_between(grid, mean - q * sd, mean + q * sd, color=colour, alpha=0.2)
        ax.plot(grid, mean, colour, label=f"{name}: mean and 90 % band")
    ax.set_xlabel("hour of the day")
    ax.set_ylabel("log(rentals)")
    ax.set_title("Noise that varies: a log count is noisiest where the count is small")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "likelihood_heteroscedastic.png", dpi=110)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "figures"
    out.mkdir(parents=True, exist_ok=True)
    for make in (softmax_figure, counts_figure, hetero_figure):
        make(out)
        print("wrote", make.__name__)
