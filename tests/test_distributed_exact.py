"""The exact GP's CG products on Dask workers (issue 33): gpnum.distributed.objective_and_grad
on a GPR(solver="cg") against the single-process CG path with the same probes."""

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import Matern32, White
from gpnum.likelihoods import Gaussian

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

TIGHT = {"train_rtol": 1e-12, "maxiter": 600}


@pytest.fixture(scope="module")
def client():
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1,
                            dashboard_address=None) as c:
        yield c


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 3))
    y = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def _model(X, y, xp=np, device=None, white=False, **options):
    kw = {"xp": xp, "dtype": xp.float64, "device": device}
    kern = Matern32(lengthscale=np.array([0.7, 1.0, 1.5]), variance=1.2, **kw)
    if white:  # a kernel that differs on the diagonal of k(X, X): the chunks' square blocks
        kern = kern + White(variance=0.02, **kw)
    return gpnum.GPR(kern, Gaussian(variance=0.05, **kw), B.asarray(X, xp=xp, device=device),
                     B.asarray(y, xp=xp, device=device), mean=0.1, solver="cg",
                     cg_options={"precond_rank": 30, **options})


def _rel(a, b):
    a = np.asarray(B.to_numpy(a), dtype=float)
    b = np.asarray(B.to_numpy(b), dtype=float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _check(value, grads, ref_value, ref_grads, tol):
    assert _rel(value, ref_value) < tol
    assert set(grads) == set(ref_grads)
    for k in ref_grads:
        assert _rel(grads[k], ref_grads[k]) < tol, (k, _rel(grads[k], ref_grads[k]))


@pytest.mark.parametrize("white", [False, True])
def test_lml_and_gradient_equal_the_single_process_cg(client, xp, device, white):
    X, y = _data(300)
    Xd, yd = da.from_array(X, chunks=(80, 3)), da.from_array(y, chunks=80)
    # Converged solves: the same probes and the same estimator, so the results agree to the
    # order of the sums, against the in-memory dense kernel matrix and the blocked one.
    model = _model(X, y, xp, device, white, **TIGHT)
    value, grads = gpnum.distributed.objective_and_grad(model, Xd, yd, client)
    _check(value, grads, *model.objective_and_grad(), 1e-10)
    blocked = _model(X, y, xp, device, white, dense_limit_mib=0.0, memory_budget_mib=0.5,
                     **TIGHT)
    _check(value, grads, *blocked.objective_and_grad(), 1e-10)


def test_at_the_training_tolerance(client):
    # At train_rtol 1.0 the CG stops after min_iter (20) iterations, short of convergence, and
    # its iterates depend on rounding: reordering the sums (Dask chunks, or even the in-memory
    # blocked product instead of the dense one) moves the mean's gradient by ~1e-9 relative.
    X, y = _data()
    model = _model(X, y)
    value, grads = gpnum.distributed.objective_and_grad(
        model, da.from_array(X, chunks=(150, 3)), da.from_array(y, chunks=150), client)
    _check(value, grads, *model.objective_and_grad(), 1e-7)


def test_refusals(client):
    X, y = _data(60)
    Xd, yd = da.from_array(X, chunks=(25, 3)), da.from_array(y, chunks=25)
    model = _model(X, y)
    shifted = da.from_array(X + np.where(np.arange(60) == 40, 1.0, 0.0)[:, None], chunks=(25, 3))
    with pytest.raises(ValueError, match=r"X: the dask array's rows 25:50 differ from the "):
        gpnum.distributed.objective_and_grad(model, shifted, yd, client)
    with pytest.raises(ShapeError, match=r"X: expected the model's training inputs, shape"):
        gpnum.distributed.objective_and_grad(model, Xd[:50], yd, client)
    with pytest.raises(ValueError, match="rows=, scale= and return_data= are for minibatch"):
        gpnum.distributed.objective_and_grad(model, Xd, yd, client, rows=np.arange(5))
    exact = gpnum.GPR(Matern32(lengthscale=np.ones(3)), Gaussian(variance=0.1), X, y)
    with pytest.raises(ValueError, match="the Dask path needs solver='cg'"):
        gpnum.distributed.objective_and_grad(exact, Xd, yd, client)


@pytest.mark.filterwarnings("ignore::gpnum.errors.ConvergenceWarning")  # maxiter=3 stops short
def test_fit_follows_the_single_process_run(client):
    # gpnum.fit with client= trains a GPR(solver="cg") by L-BFGS-B with every evaluation on
    # the workers: the same iterates as in memory (converged solves, fixed probes).
    X, y = _data(100, seed=2)
    single, dist = _model(X, y, **TIGHT), _model(X, y, **TIGHT)
    gpnum.fit(single, maxiter=3)
    gpnum.fit(dist, da.from_array(X, chunks=(50, 3)), da.from_array(y, chunks=50),
              client=client, maxiter=3)
    p1, p2 = single.parameters(), dist.parameters()
    moved = _rel(p1["kernel.lengthscale"], np.array([0.7, 1.0, 1.5]))
    assert moved > 1e-3  # the runs did train
    for k in p1:
        assert _rel(p2[k], p1[k]) < 1e-8, k


def test_worker_tasks_keep_their_products_in_numpy_pool(scipy_blas_spy):
    # A worker's task multiplies kernel blocks with NumPy's @; the kernel's own products must
    # not wake SciPy's BLAS pool beside it. Results against the dense kernel matrix.
    from gpnum.checkpoint import model_state
    from gpnum.distributed._exact import _chunk_matmat, _chunk_param_vjp

    rng = np.random.default_rng(4)
    X = rng.uniform(-2.0, 2.0, (400, 18))  # 18 inputs: the distances by products
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(400)
    model = gpnum.GPR(Matern32(lengthscale=np.ones(18)), Gaussian(variance=0.05), X, y,
                      solver="cg")
    state = model_state(model)
    fetched = scipy_blas_spy()
    R = np.random.default_rng(3).standard_normal((400, 4))
    got = _chunk_matmat(state, X[100:300], 100, 300, R)
    _chunk_param_vjp(state, X[100:300], 100, 300, R[100:300], R)
    assert fetched == []
    K = B.to_numpy(model.kernel(model.X))
    np.testing.assert_allclose(got, K[100:300] @ R, rtol=1e-12, atol=1e-12)
    fetched = scipy_blas_spy()
    model.kernel(model.X[100:300], model.X)  # outside a task's block: the spy sees them
    assert fetched
