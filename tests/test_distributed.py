"""Data-parallel evaluation and training on a 2-worker Dask LocalCluster (loopback only)."""

import numpy as np
import pytest

import gpnum
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian, StudentT

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       worker_dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _data(n=600, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)
    return X, y


def _model(X, likelihood=None, m=20):
    rng = np.random.default_rng(1)
    model = gpnum.SVGP(Matern52(lengthscale=0.7 * np.ones(X.shape[1])),
                       likelihood or Gaussian(variance=0.2), X[:m].copy(), num_data=X.shape[0])
    model.set_parameters({"q_mu": 0.3 * rng.standard_normal(m),
                          "q_sqrt": np.tril(0.1 * rng.standard_normal((m, m))) + 0.8 * np.eye(m)})
    return model


def _rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("likelihood", [Gaussian(variance=0.2), StudentT(df=4.0, scale=0.3)])
def test_objective_equals_the_in_memory_one(client, likelihood):
    X, y = _data()
    model = _model(X, likelihood)
    Xd, yd = da.from_array(X, chunks=(170, 3)), da.from_array(y, chunks=170)
    value, grads = gpnum.distributed.objective_and_grad(model, Xd, yd, client)
    ref_v, ref_g = model.objective_and_grad(X, y)
    assert _rel(value, ref_v) < 1e-10
    assert set(grads) == set(ref_g)
    for k in ref_g:
        assert _rel(grads[k], ref_g[k]) < 1e-10, k
    # a minibatch: each worker gathers its own rows; the scale is num_data / b as in memory
    rows = np.random.default_rng(3).choice(X.shape[0], 64, replace=False)
    value, grads = gpnum.distributed.objective_and_grad(model, Xd, yd, client, rows=rows)
    ref_v, ref_g = model.objective_and_grad(X[rows], y[rows])
    assert _rel(value, ref_v) < 1e-10
    for k in ref_g:
        assert _rel(grads[k], ref_g[k]) < 1e-10, k


def _train_both(client, callbacks=(), **opts):
    """The same model trained by gpnum.fit in memory and on the cluster (20 steps); asserts
    that the distributed run followed the single-process one."""
    X, y = _data()
    single, dist = _model(X), _model(X)
    opts = dict(epochs=4, batch_size=120, lr=0.05, progress=False, **opts)
    h1 = gpnum.fit(single, X, y, **opts)
    # gpnum.fit with client= is gpnum.distributed.fit
    h2 = gpnum.fit(dist, da.from_array(X, chunks=(200, 3)), da.from_array(y, chunks=200),
                   client=client, callbacks=callbacks, **opts)
    assert h1.num_steps == h2.num_steps == 20
    assert dist.training_state.step == 20
    np.testing.assert_allclose(h2.step_elbo, h1.step_elbo, rtol=1e-8)
    p1, p2 = single.parameters(), dist.parameters()
    for k in p1:
        assert _rel(p2[k], p1[k]) < 1e-8, k
    return X, y, single


def test_twenty_steps_follow_the_single_process_run(client):
    _train_both(client, optimizer="adam", seed=7)


def test_natural_gradient_steps_follow_the_single_process_run(client):
    X, y, single = _train_both(client, optimizer="ngd", gamma=0.3, seed=5)
    # the statistics themselves: sums over the workers' chunks equal the batch's in memory
    rows = np.arange(0, 600, 7)
    _, _, data = gpnum.distributed.objective_and_grad(
        single, da.from_array(X, chunks=(200, 3)), da.from_array(y, chunks=200), client,
        rows=rows, return_data=True)
    ref = gpnum.optim.natural_statistics(single.objective_and_grad(X[rows], y[rows],
                                                                   return_data=True)[2])
    for k in ref:
        assert _rel(data["natural_statistics"][k], ref[k]) < 1e-10, k


def test_bad_input(client):
    X, y = _data(n=50)
    Xd, yd = da.from_array(X, chunks=(25, 3)), da.from_array(y, chunks=25)
    gpr = gpnum.GPR(Matern52(lengthscale=np.ones(3)), Gaussian(variance=0.1), X, y)
    with pytest.raises(ValueError, match="full-batch"):
        gpnum.distributed.objective_and_grad(gpr, Xd, yd, client)
    model = _model(X, m=5)
    with pytest.raises(ValueError, match=r"rows: indices must lie in \[0, 50\)"):
        gpnum.distributed.objective_and_grad(model, Xd, yd, client, rows=np.array([0, 50]))
    with pytest.raises(gpnum.ShapeError, match="same n"):
        gpnum.distributed.objective_and_grad(model, Xd, yd[:40], client)
    with pytest.raises(ValueError, match="'ngd' or 'adam'"):
        gpnum.distributed.fit(model, Xd, yd, client, optimizer="lbfgs")
    with pytest.raises(ValueError, match="dense"):
        gpnum.distributed.fit(model, Xd, yd, client, ngd_method="krylov")


def test_a_killed_worker_does_not_lose_the_run(client):
    import os
    import signal

    killed = []

    def kill_one_worker(model, history, epoch):
        if epoch == 1:  # mid-run: after 10 of 20 steps
            pids = client.run(os.getpid)
            address, pid = sorted(pids.items())[0]
            os.kill(pid, signal.SIGKILL)  # the nanny starts a new worker; Dask re-runs the
            killed.append(address)        # lost chunks from the graph and retries the tasks
        return False

    _train_both(client, callbacks=[kill_one_worker], optimizer="adam", seed=7)
    assert killed
    client.wait_for_workers(2, timeout=60)
