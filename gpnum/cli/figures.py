"""The figures of ``gpnum fit`` and ``gpnum compare`` (matplotlib, imported on first use, with
the Agg backend so that they render without a screen)."""

from __future__ import annotations

import os

__all__ = ["elbo_figure", "plot_elbo", "plot_precip_map", "plot_objectives", "plot_compare"]


def elbo_figure(hist, title, ylabel=None):
    """The training curve: the whole run on a symmetric-log axis, and its second half zoomed.

    ``ylabel`` names the objective (default: the minibatch ELBO; GPR's is its log marginal
    likelihood).

    Early minibatch ELBOs are orders of magnitude below the final ones; a linear axis either
    flattens the tail or cuts the start off. The left panel shows every step (nothing clipped);
    the right one the second half of training on a linear axis, so that the tail can be read.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, v = list(hist.step_time), list(hist.step_elbo)
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax.plot(t, v, lw=0.8)
    if v:
        # symlog is linear within +-linthresh: below the smallest |ELBO| it acts like log |ELBO|.
        ax.set_yscale("symlog", linthresh=max(min(abs(x) for x in v), 1e-12))
        lo, hi = min(v), max(v)
        pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
        ax.set_ylim(lo - pad, hi + pad)
        # A range within one decade gets at most one automatic tick: label five, evenly spaced
        # on the axis, in plain numbers.
        import numpy as np
        from matplotlib.ticker import FuncFormatter, NullFormatter

        if lo < 0 < hi or lo == hi:
            ticks = np.linspace(lo, hi, 5)
        else:
            sign = -1.0 if hi < 0 else 1.0
            ticks = sign * np.geomspace(abs(lo), abs(hi), 5)
        ax.set_yticks([float(f"{t:.2g}") for t in ticks])
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if abs(x) >= 100
                                                   else f"{x:.3g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training time (s)")
    ax.set_ylabel(ylabel or "minibatch ELBO (whole-data scale)")
    ax.set_title("whole run (symmetric-log axis)", fontsize=9)
    half = len(v) // 2
    zoom.plot(t[half:], v[half:], lw=0.8, color="C1")
    zoom.set_xlabel("training time (s)")
    zoom.set_title(f"second half: steps {half + 1}-{len(v)} (linear axis)", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_elbo(path, hist, title, ylabel=None):
    import matplotlib.pyplot as plt

    fig = elbo_figure(hist, title, ylabel)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_precip_map(path, model, ds):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpnum import backend as B

    Xt = B.to_numpy(ds.X_test)
    raw = Xt * ds.x_std + ds.x_mean  # Year, lon, lat
    mean, _ = model.predict_y(ds.X_test)
    mu = B.to_numpy(mean) * ds.y_std + ds.y_mean
    fig, ax = plt.subplots(figsize=(8, 4))
    sc = ax.scatter(raw[:, 1], raw[:, 2], c=mu, s=3, cmap="viridis")
    fig.colorbar(sc, ax=ax, label="predictive mean of prcp (standardised units of the file)")
    ax.set_xlabel("longitude")
    ax.set_ylabel("latitude")
    ax.set_title("precip: predictive mean at the test locations (all years)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_objectives(path, rows, name):
    """Test NLL (and RMSE or accuracy) per objective and m beside training time per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "test_rmse" if "test_rmse" in rows[0] else "test_accuracy"
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    labels = [f"{r['objective']}\nm={r['m']}" for r in rows]
    pos = range(len(rows))
    for ax, key, title in ((axes[0], "test_nll", "test NLL"),
                           (axes[1], metric, metric.replace("_", " ")),
                           (axes[2], "time_per_step_s", "time per step (s)")):
        ax.bar(pos, [r[key] for r in rows], color=[f"C{i % 10}" for i in pos])
        ax.set_xticks(list(pos))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{name}: training objectives")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_compare(out, rows, name):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, fname, label in (("train_time_s", "compare_time.png", "training time (s)"),
                              ("test_nll", "compare_nll.png", "test NLL")):
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for whitening, style in (("cholesky", "o-"), ("ciq", "s--")):
            pts = [(r["m"], r[key]) for r in rows if r["whitening"] == whitening]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                    label=f"{whitening} whitening")
        ax.set_xlabel("inducing points m")
        ax.set_ylabel(label)
        ax.set_title(f"{name}: {label} vs m")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=110)
        plt.close(fig)
