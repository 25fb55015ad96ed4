"""Issue 34's done-when numbers: the new likelihoods on the bundled data that needs them.

    python asv_benchmarks/scripts/likelihood_families.py digits   # Softmax SVGP vs sklearn GPC
    python asv_benchmarks/scripts/likelihood_families.py digits-inducing  # shared vs separate Z
    python asv_benchmarks/scripts/likelihood_families.py counts   # Poisson / NegBin vs Gaussian
    python asv_benchmarks/scripts/likelihood_families.py hetero   # HeteroscedasticGaussian vs Gaussian

Every run uses the data set's random 75/10/15 split (seed 0); models train on the training
part and are scored on the test part. NLL is the mean negative log predictive density per test
point. Timings are wall-clock seconds of one run on whatever else the machine is doing.

counts: the Gaussian is fitted to z = log(count) (standardised). Its density of a count y is
that of the interval of z that rounds to y: P(Y = y) = P(log(y - 1/2) < Z <= log(y + 1/2))
(Y = round(exp(Z)), with the lower end -inf for y = 0), a proper probability mass function on
{0, 1, ...}, so the two NLLs are comparable (both are -log of a probability of the count).
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from scipy.stats import norm

import gpnum
from gpnum.kernels import RBF, Matern52
from gpnum.likelihoods import (Gaussian, HeteroscedasticGaussian, NegativeBinomial, Poisson,
                               Softmax)


def _svgp(lik, X, m, lengthscale, seed=0, kernel=RBF, separate=False):
    Z = gpnum.inducing.kmeans(X, m, seed=seed)
    if separate:  # one copy of the k-means points per latent function, learned separately
        Z = np.stack([Z] * lik.num_latent)
    return gpnum.SVGP(kernel(lengthscale=lengthscale, variance=1.0, xp=np, dtype=np.float64),
                      lik, Z, num_data=X.shape[0])


def digits(epochs=40, m=100):
    ds = gpnum.datasets.load("digits", xp="numpy", dtype="float64")
    X, y, Xt, yt = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    print(f"digits: train {X.shape}, test {Xt.shape}")
    t0 = time.perf_counter()
    # 256 cubature points while training (a cheaper, noisier objective), 4096 to evaluate
    model = _svgp(Softmax(10, num_points=256, xp=np, dtype=np.float64), X, m, 8.0)
    gpnum.fit(model, X, y, epochs=epochs, batch_size=256, lr=0.01, gamma=0.1, progress=False)
    ours_time = time.perf_counter() - t0
    mu, var = model.predict_f(Xt)
    evaluate = Softmax(10, num_points=4096, xp=np, dtype=np.float64)
    p = evaluate.predict_mean_and_var(mu, var)[0]
    acc = float(np.mean(np.argmax(p, axis=1) == yt))
    nll = -float(np.mean(evaluate.predictive_log_density(yt, mu, var)))
    print(f"gpnum SVGP Softmax (m={m}, {epochs} epochs): accuracy {acc:.4f}  NLL {nll:.4f}  "
          f"time {ours_time:.1f} s")

    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF as SkRBF, ConstantKernel
    t0 = time.perf_counter()
    gpc = GaussianProcessClassifier(ConstantKernel(1.0) * SkRBF(8.0), random_state=0)
    gpc.fit(X, y)
    sk_time = time.perf_counter() - t0
    ps = gpc.predict_proba(Xt)
    acc_s = float(np.mean(np.argmax(ps, axis=1) == yt))
    nll_s = -float(np.mean(np.log(np.clip(ps[np.arange(yt.shape[0]), yt.astype(int)],
                                          1e-300, None))))
    print(f"sklearn GaussianProcessClassifier (one-vs-rest, Laplace): accuracy {acc_s:.4f}  "
          f"NLL {nll_s:.4f}  time {sk_time:.1f} s")
    print(f"time ratio gpnum / sklearn: {ours_time / sk_time:.2f}")


def _gaussian_count_nll(y, mu, var, ds):
    """-log P(round(exp(Z)) = y) with Z the Gaussian's predictive for log counts (raw units)."""
    m = ds.unstandardize_y(mu)
    s = np.sqrt(var) * ds.y_std
    hi = norm.logcdf((np.log(y + 0.5) - m) / s)
    lo = np.where(y > 0, norm.logcdf((np.log(np.maximum(y - 0.5, 1e-300)) - m) / s), -np.inf)
    return -(hi + np.log1p(-np.exp(lo - hi)))


def counts(epochs=20, m=150):
    ds = gpnum.datasets.load("bikecount", xp="numpy", dtype="float64")
    log = gpnum.datasets.load("bikelog", xp="numpy", dtype="float64")
    X, y, Xt, yt = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    print(f"bikecount: train {X.shape}, test {Xt.shape}")
    ell = np.full(X.shape[1], 2.0)
    rows = []
    for name, lik in (("Poisson", Poisson(xp=np, dtype=np.float64)),
                      ("NegativeBinomial", NegativeBinomial(0.2, xp=np, dtype=np.float64))):
        t0 = time.perf_counter()
        model = _svgp(lik, X, m, ell, kernel=Matern52)
        model.mean = math.log(float(np.mean(y)))
        gpnum.fit(model, X, y, epochs=epochs, batch_size=256, lr=0.01, gamma=0.1,
                  progress=False)
        mu, var = model.predict_f(Xt)
        nll = -float(np.mean(model.likelihood.predictive_log_density(yt, mu, var)))
        rows.append((name, nll, time.perf_counter() - t0, model.likelihood))
    t0 = time.perf_counter()
    model = _svgp(Gaussian(0.1, xp=np, dtype=np.float64), log.X_train, m, ell, kernel=Matern52)
    gpnum.fit(model, log.X_train, log.y_train, epochs=epochs, batch_size=256, lr=0.01,
              gamma=0.1, progress=False)
    mu, var = model.likelihood.predict_mean_and_var(*model.predict_f(log.X_test))
    assert np.array_equal(log.test_index, ds.test_index)
    nll = float(np.mean(_gaussian_count_nll(yt, mu, var, log)))
    rows.append(("Gaussian on log counts", nll, time.perf_counter() - t0, model.likelihood))
    for name, nll, secs, lik in rows:
        print(f"{name:<24} test NLL of the counts {nll:.4f}  time {secs:.1f} s  {lik!r}")


def hetero(epochs=20, m=150):
    ds = gpnum.datasets.load("bikelog", xp="numpy", dtype="float64")
    X, y, Xt, yt = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    print(f"bikelog: train {X.shape}, test {Xt.shape}")
    ell = np.full(X.shape[1], 2.0)
    for name, lik in (("Gaussian", Gaussian(0.1, xp=np, dtype=np.float64)),
                      ("HeteroscedasticGaussian",
                       HeteroscedasticGaussian(xp=np, dtype=np.float64))):
        t0 = time.perf_counter()
        model = _svgp(lik, X, m, ell, kernel=Matern52)
        gpnum.fit(model, X, y, epochs=epochs, batch_size=256, lr=0.01, gamma=0.1,
                  progress=False)
        mu, var = model.predict_f(Xt)
        # NLL in the units of log(count): the standardised NLL plus log(y_std)
        nll = -float(np.mean(lik.predictive_log_density(yt, mu, var))) + math.log(ds.y_std)
        print(f"{name:<24} test NLL {nll:.4f}  time {time.perf_counter() - t0:.1f} s")


def digits_inducing(epochs=40, m=100):
    """digits' Softmax SVGP (the settings of :func:`digits`) with one shared set of inducing
    points against one set per latent function (all ten starting at the same k-means points)."""
    ds = gpnum.datasets.load("digits", xp="numpy", dtype="float64")
    X, y, Xt, yt = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    evaluate = Softmax(10, num_points=4096, xp=np, dtype=np.float64)
    for separate in (False, True):
        t0 = time.perf_counter()
        model = _svgp(Softmax(10, num_points=256, xp=np, dtype=np.float64), X, m, 8.0,
                      separate=separate)
        gpnum.fit(model, X, y, epochs=epochs, batch_size=256, lr=0.01, gamma=0.1,
                  progress=False)
        took = time.perf_counter() - t0
        mu, var = model.predict_f(Xt)
        p = evaluate.predict_mean_and_var(mu, var)[0]
        acc = float(np.mean(np.argmax(p, axis=1) == yt))
        nll = -float(np.mean(evaluate.predictive_log_density(yt, mu, var)))
        print(f"inducing points {'separate' if separate else 'shared'} "
              f"{tuple(model.inducing_points.shape)} ({epochs} epochs): accuracy {acc:.4f}  "
              f"NLL {nll:.4f}  time {took:.1f} s", flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "digits"
    kwargs = {}
    if len(sys.argv) > 2:
        kwargs["epochs"] = int(sys.argv[2])
    {"digits": digits, "digits-inducing": digits_inducing, "counts": counts,
     "hetero": hetero}[what](**kwargs)
