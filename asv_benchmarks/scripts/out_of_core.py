"""Train an SVGP on a regression set stored on disk, far larger than what the process holds.

    python out_of_core.py [--n 10000000] [--d 10] [--steps 500] [--dir /tmp/gpnum_ooc]

Writes X.npy (n, d) and y.npy (n,) once (in blocks of 10^6 rows, never whole in memory):
``y = sin(3 x_0) + x_1^2 / 2 + 0.1 eps`` on uniform inputs. Then trains by natural gradients +
Adam from ``gpnum.datasets.NpyBatches`` (batches of 1024 rows drawn from the whole file) and
prints the file size, the process's peak resident memory (``ru_maxrss``), the time, and the test
RMSE on 10^4 fresh points against the noise level 0.1.
"""
import argparse
import multiprocessing
import os
import resource
import time

import numpy as np
from numpy.lib.format import open_memmap

import gpnum
from gpnum.datasets import NpyBatches
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian


def target(X, rng):
    return np.sin(3 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.standard_normal(X.shape[0])


def write(directory, n, d, block=1_000_000):
    xp_, yp_ = os.path.join(directory, "X.npy"), os.path.join(directory, "y.npy")
    if (os.path.exists(xp_) and os.path.exists(yp_)
            and np.load(xp_, mmap_mode="r").shape == (n, d)):
        return xp_, yp_
    os.makedirs(directory, exist_ok=True)
    X = open_memmap(xp_, mode="w+", dtype=np.float64, shape=(n, d))
    y = open_memmap(yp_, mode="w+", dtype=np.float64, shape=(n,))
    rng = np.random.default_rng(0)
    for start in range(0, n, block):
        Xb = rng.uniform(-1, 1, (min(block, n - start), d))
        X[start:start + Xb.shape[0]] = Xb
        y[start:start + Xb.shape[0]] = target(Xb, rng)
        X.flush(); y.flush()
    del X, y
    return xp_, yp_


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--d", type=int, default=10)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--m", type=int, default=200)
    p.add_argument("--dir", default="/tmp/gpnum_ooc")
    a = p.parse_args()
    # Written by a child process, so that this one's peak memory is the training's alone.
    proc = multiprocessing.get_context("spawn").Process(target=write, args=(a.dir, a.n, a.d))
    proc.start(); proc.join()
    xp_, yp_ = os.path.join(a.dir, "X.npy"), os.path.join(a.dir, "y.npy")
    size = os.path.getsize(xp_) + os.path.getsize(yp_)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stream = NpyBatches(xp_, yp_, 1024, seed=0, steps_per_epoch=a.steps)
    Z = stream.read(next(stream.rows(99)))[0][: a.m]  # inducing points: a random batch's rows
    model = gpnum.SVGP(Matern52(lengthscale=np.ones(a.d)), Gaussian(variance=0.5), Z,
                       num_data=a.n)
    t0 = time.perf_counter()
    gpnum.fit(model, batches=stream, epochs=1, progress=False)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(1)
    Xt = rng.uniform(-1, 1, (10_000, a.d))
    yt = np.sin(3 * Xt[:, 0]) + 0.5 * Xt[:, 1] ** 2
    mean, _ = model.predict_f(Xt)
    rmse = float(np.sqrt(np.mean((np.asarray(mean) - yt) ** 2)))
    print(f"n={a.n:,} d={a.d}: files {size / 2**20:,.0f} MiB; peak RSS {rss:,.0f} MiB "
          f"(before training {rss0:,.0f} MiB); {a.steps} steps of 1024 rows, m={a.m}, "
          f"{wall:.1f} s ({1e3 * wall / a.steps:.0f} ms/step); test RMSE of the mean "
          f"{rmse:.3f} (noise sd 0.1)")


if __name__ == "__main__":
    main()
