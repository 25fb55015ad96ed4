"""Multi-output GPs against independent GPs on the bundled fertility data (issue 51,
docs/multioutput.md): a data set with missing entries of its own.

52 years (1960-2011) x 8 Eastern Caribbean countries' total fertility rate (World Bank, via
statsmodels); 91 of the 416 entries are missing in the source (Dominica and St. Kitts and Nevis
are observed in seven and six years only). A random fraction of the OBSERVED entries (a
different draw per seed) is held out; the rest trains, so the models see the source's gaps and
ours. Each output is standardised with its training entries; the year is scaled to decades.
Models, all exact (gpnum.models.MultiOutputGPR), trained by gpnum.fit (L-BFGS-B, 500
iterations at most), each from the same start:

- "independent": IndependentOutputs, one Matern-5/2 kernel per country (its own lengthscale
  and variance), own noise: eight separate GPs;
- "icm": ICM(Matern-5/2, 8, rank 2), per-country noise;
- "lmc": LMC([Matern-5/2, RBF], 8, rank [2, 1]): a short and a long time scale.
- "icm1-zero-mean": ICM(Matern-5/2, 8, rank 1) with every output's prior mean held at 0 (the
  outputs are standardised): fewer free parameters per output, a variant tried after the three
  above had been measured.

With ``--priors`` the models are fitted by maximum a posteriori (``gpnum.fit(...,
priors=...)``, gpnum.priors) instead of type-II maximum likelihood. The priors follow one rule,
fixed before any test NLL of a prior fit was computed: boundary-avoiding Gamma(2, rate) densities
(Chung et al. 2013, Psychometrika 78(4)) on the variances that maximum likelihood drives to 0,
with the rate set by the standardised scale of the outputs, not by this data set:

- ``kappa``: each output's own variance in B = W W^T + diag(kappa) (every coregionalised
  term's), Gamma(2, 2): mean 1, the variance of a standardised output, so a priori an output may
  have all of its variance of its own; density 0 at kappa = 0, growing linearly, so the data can
  still make kappa small but not exactly 0. The independent GPs have no kappa: unchanged.
- ``kappa+noise``: the above, and on every model (the independent GPs too) each output's noise
  variance Gamma(2, 100): mode 0.01, a noise standard deviation of 10% of the output's.

Prints the test NLL (mean over the held-out entries of -log p(y | data), in births per woman)
and RMSE per model and seed, and their means over the splits: over all held-out entries, over
those of the six completely observed countries, and over those of the two sparse ones.

With a third argument, draws the first split's predictions for the two sparse countries by
the independent GPs, the ICM and the LMC into that PNG file (docs/figures/multioutput_fertility.png).

Usage:
    python asv_benchmarks/scripts/multioutput_fertility.py [SEEDS] [HOLDOUT] [FIGURE]
        [--priors {none,kappa,kappa+noise}]
"""

import argparse
import time
import warnings

import numpy as np

import gpnum
from gpnum.kernels import ICM, LMC, RBF, IndependentOutputs, Matern52
from gpnum.likelihoods import Gaussian
from gpnum.models import MultiOutputGPR
from gpnum.priors import Gamma

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("seeds", nargs="?", type=int, default=5)
parser.add_argument("holdout", nargs="?", type=float, default=0.3)
parser.add_argument("figure", nargs="?", default=None)
parser.add_argument("--priors", choices=("none", "kappa", "kappa+noise"), default="none")
args = parser.parse_args()
seeds, holdout, figure = args.seeds, args.holdout, args.figure
T = 8
SPARSE = (2, 4)  # Dominica, St. Kitts and Nevis


def build(kind):
    if kind == "independent":
        return IndependentOutputs([Matern52(lengthscale=1.0) for _ in range(T)])
    if kind == "icm":
        return ICM(Matern52(lengthscale=1.0), T, 2)
    if kind == "icm1-zero-mean":
        return ICM(Matern52(lengthscale=1.0), T, 1)
    lmc = LMC([Matern52(lengthscale=0.3), RBF(lengthscale=2.0)], T, [2, 1])
    # the terms start apart (LMC's default W are equal)
    lmc.set_parameters({"1.coregion.W": 0.3 * np.ones((T, 1))})
    return lmc


def priors_for(model):
    """The priors of the rule in the module docstring, keyed by the model's parameter names."""
    if args.priors == "none":
        return None
    names = model.parameters()
    out = {k: Gamma(2.0, 2.0) for k in names if k.endswith("coregion.kappa")}
    if args.priors == "kappa+noise":
        out["likelihood.variance"] = Gamma(2.0, 100.0)
    return out


def draw(path, data, curves, X):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    years = np.asarray(data.X)[:, 0]
    Y, Ytest = np.asarray(data.Y_train), np.asarray(data.Y_test)
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for ax, a in zip(axes, SPARSE, strict=True):
        for kind, colour in (("independent", "tab:orange"), ("icm", "tab:blue"),
                             ("lmc", "tab:green")):
            mean, sd = curves[kind][0][:, a], np.sqrt(curves[kind][1][:, a])
            ax.plot(years, mean, color=colour, label=f"{kind} mean +- 2 sd (priors: {args.priors})")
            ax.fill_between(years, mean - 2 * sd, mean + 2 * sd, color=colour, alpha=0.15)
        ax.plot(years, Y[:, a], "k.", label="training entries")
        ax.plot(years, Ytest[:, a], "rx", label="held-out entries")
        ax.set_ylabel(f"{data.output_names[a]}: births per woman")
    axes[0].legend(fontsize=8, ncol=2)
    axes[-1].set_xlabel("year")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def run(seed):
    data = gpnum.datasets.load_multioutput("fertility", holdout=holdout, seed=seed, xp=np)
    X = (np.asarray(data.X) - 1985.0) / 10.0
    Y, Ytest = np.asarray(data.Y_train), np.asarray(data.Y_test)
    mu, sd = np.nanmean(Y, axis=0), np.nanstd(Y, axis=0)
    Ys = (Y - mu) / sd
    test = ~np.isnan(Ytest)
    sparse = np.zeros_like(test)
    sparse[:, list(SPARSE)] = True
    out, curves = {}, {}
    for kind in ("independent", "icm", "lmc", "icm1-zero-mean"):
        model = MultiOutputGPR(build(kind), Gaussian(variance=np.full(T, 0.1)), X, Ys)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gpnum.fit(model, maxiter=500, fixed=["mean"] if kind.endswith("zero-mean") else (),
                      priors=priors_for(model))
        seconds = time.perf_counter() - t0
        mean, var = model.predict_y(X)
        mean, var = mu + sd * mean, var * sd * sd
        curves[kind] = (mean, var)
        params = model.parameters()
        # each sparse country's own variance in B (kappa times the latent's variance, summed
        # over the terms) and its noise, in standardised units: what a prior should keep off 0
        own = sum(np.asarray(params[k])[list(SPARSE)] * float(params[k.replace(
            "coregion.kappa", "kernel.variance")]) for k in params if k.endswith("coregion.kappa"))
        noise = np.asarray(params["likelihood.variance"])[list(SPARSE)]
        nll_all = 0.5 * np.log(2 * np.pi * var) + 0.5 * (Ytest - mean) ** 2 / var
        r = (Ytest - mean)[test]
        r_dense = (Ytest - mean)[test & ~sparse]
        out[kind] = (np.mean(nll_all[test]), np.sqrt(np.mean(r * r)),
                     np.mean(nll_all[test & sparse]), int((test & sparse).sum()),
                     float(model.log_marginal_likelihood()), seconds,
                     np.mean(nll_all[test & ~sparse]), np.sqrt(np.mean(r_dense ** 2)),
                     np.sqrt(np.mean((Ytest - mean)[test & sparse] ** 2)), own, noise)
    if figure is not None and seed == 0:
        draw(figure, data, curves, X)
    return out, int(test.sum())


results = [run(s) for s in range(seeds)]
for s, (res, n_test) in enumerate(results):
    print(f"seed {s} ({n_test} held-out entries): "
          + "; ".join(f"{k} NLL {v[0]:.3f} RMSE {v[1]:.3f} NLL(DMA,KNA: {v[3]}) {v[2]:.3f} "
                      f"NLL(complete) {v[6]:.3f} LML {v[4]:.1f} ({v[5]:.1f} s)"
                      + ("" if k == "independent" else
                         f" own var(DMA,KNA) {np.array2string(np.asarray(v[9]), precision=3)}")
                      + f" noise(DMA,KNA) {np.array2string(np.asarray(v[10]), formatter={'float': '{:.1e}'.format})}"
                      for k, v in res.items()))
print(f"priors: {args.priors}")
print(f"means over {len(results)} splits ({holdout:.0%} of the observed entries held out); "
      "NLL per held-out entry (births per woman), +- one standard error over the splits")
for k in results[0][0]:
    cols = np.array([r[0][k][:9] for r in results], dtype=np.float64)

    def mean_se(j, cols=cols):
        v = cols[:, j]
        se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
        return f"{v.mean():.3f} +- {se:.3f}"

    print(f"{k:12s} per split, NLL (all): "
          + ", ".join(f"{v:.3f}" if abs(v) < 1e3 else f"{v:.2e}" for v in cols[:, 0])
          + "; NLL (DMA and KNA): "
          + ", ".join(f"{v:.2f}" if abs(v) < 1e3 else f"{v:.2e}" for v in cols[:, 2]))
    print(f"{k:12s} all: NLL {mean_se(0)}, RMSE {cols[:, 1].mean():.4f} | six complete "
          f"countries: NLL {mean_se(6)}, RMSE {cols[:, 7].mean():.4f} | DMA and KNA: NLL "
          f"{mean_se(2)}, RMSE {cols[:, 8].mean():.4f}; median over splits of the NLL (all) "
          f"{np.median(cols[:, 0]):.3f}")
    if k != "independent":
        # paired over the splits: the same held-out entries for both models
        ind = np.array([r[0]["independent"][:9] for r in results], dtype=np.float64)
        d = cols[:, 0] - ind[:, 0]
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
        print(f"{k:12s} minus independent, NLL (all), paired: {d.mean():.3f} +- {se:.3f}; "
              f"lower on {int((d < 0).sum())} of {len(d)} splits")
