"""Points per second of gpnum.distributed.objective_and_grad against workers, beside the
in-memory evaluation, and the size and time of the model state sent each step.

    python distributed_throughput.py [--n 100000] [--m 500] [--d 8] [--workers 1,2]

A LocalCluster of single-threaded worker processes on this machine (loopback only); the data
persisted on the workers in 8 row chunks; best of 3 evaluations of all n rows.
"""
import argparse
import pickle
import time

import numpy as np

import gpnum
from gpnum.checkpoint import model_state
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian


def best(f, reps=3):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    import dask.array as da
    import distributed
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--m", type=int, default=500)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--workers", default="1,2")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (a.n, a.d))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(a.n)
    model = gpnum.SVGP(Matern52(lengthscale=np.ones(a.d)), Gaussian(variance=0.1),
                       X[:a.m].copy(), num_data=a.n)
    state = model_state(model)
    nbytes = len(pickle.dumps(state, protocol=5))
    t_mem = best(lambda: model.objective_and_grad(X, y))
    print(f"n={a.n:,} m={a.m} d={a.d}: in memory {a.n / t_mem:,.0f} points/s; model state "
          f"{nbytes / 2**20:.2f} MiB per step")
    for w in [int(v) for v in a.workers.split(",")]:
        with distributed.LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            Xd = client.persist(da.from_array(X, chunks=(a.n // 8, a.d)))
            yd = client.persist(da.from_array(y, chunks=a.n // 8))
            distributed.wait([Xd, yd])
            f = lambda: gpnum.distributed.objective_and_grad(model, Xd, yd, client)  # noqa: E731
            t = best(f)
            t_scatter = best(lambda: client.scatter([state], broadcast=True, hash=False))
            print(f"  {w} worker(s): {a.n / t:,.0f} points/s ({t * 1e3:.0f} ms per evaluation; "
                  f"state scatter {t_scatter * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
