"""Checkpoints of the multi-output models: MultiOutputGPR (ICM, LMC, independent outputs, with
missing entries), LMCSVGP and OILMM save and load with every parameter equal and the same
predictions (bit for bit on NumPy), and a resumed LMCSVGP run equals an uninterrupted one.

Parameters are moved away from their initial values first (in unconstrained form), so that a
loader that rebuilt any of them from a default changes the predictions."""

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.kernels import ICM, LMC, RBF, IndependentOutputs, Matern32, Matern52
from gpnum.likelihoods import Gaussian
from gpnum.models import LMCSVGP, OILMM, MultiOutputGPR, stack_outputs

T = 3


def _data(missing, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (14, 2))
    Y = np.c_[np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1]] \
        + 0.1 * rng.standard_normal((14, T))
    if missing:
        Y[rng.uniform(size=Y.shape) < 0.3] = np.nan
    return X, Y


def _randomise(model, seed):
    rng = np.random.default_rng(seed)
    new = {}
    for k, v in model.unconstrained().items():
        a = B.to_numpy(v)
        step = 0.3 * rng.standard_normal(a.shape)
        if k == "q_sqrt":
            step = np.tril(step)
        new[k] = B.asarray(a + step, dtype=model.dtype, xp=model.xp, device=B.device_of(v))
    model.set_unconstrained(new)


def _predict(model, Xs):
    if isinstance(model, LMCSVGP):
        return model.predict_outputs(Xs)
    joint = model.predict_f(Xs, full_output_cov=True) if isinstance(model, OILMM) \
        else model.predict_f(Xs, full_cov=True)
    return (*model.predict_f(Xs), joint[1])


def _assert_round_trip(model, path, xp, device):
    Xs = B.asarray(np.random.default_rng(2).standard_normal((5, 2)), dtype=model.dtype, xp=xp,
                   device=device)
    before = _predict(model, Xs)
    gpnum.save(model, path)
    loaded = gpnum.load(path, xp=xp, device=device)
    assert type(loaded) is type(model)
    assert repr(loaded.kernel) == repr(model.kernel)
    assert loaded.config() == model.config()
    assert set(loaded.parameters()) == set(model.parameters())
    for k, v in model.parameters().items():
        got = loaded.parameters()[k]
        assert got.shape == v.shape, k
        np.testing.assert_array_equal(B.to_numpy(got), B.to_numpy(v), err_msg=k)
    for k, v in model.data().items():  # the training targets, NaN where missing
        np.testing.assert_array_equal(B.to_numpy(loaded.data()[k]), B.to_numpy(v), err_msg=k)
    after = _predict(loaded, Xs)
    for a, b in zip(before, after, strict=True):
        a, b = B.to_numpy(a), B.to_numpy(b)
        if xp.__name__.endswith("numpy"):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=4 * np.finfo(a.dtype).eps, atol=0)
    return loaded


def _kernel(kind, kw):
    if kind == "icm":
        return ICM(RBF(lengthscale=np.array([0.7, 1.3]), **kw), T, 2)
    if kind == "lmc":
        return LMC([RBF(lengthscale=np.array([0.7, 1.3]), **kw), Matern32(lengthscale=0.5, **kw)],
                   T, [1, 2])
    return IndependentOutputs([RBF(**kw), Matern32(**kw), Matern52(lengthscale=0.8, **kw)])


@pytest.mark.parametrize("missing", [False, True], ids=["isotopic", "missing"])
@pytest.mark.parametrize("kind", ["icm", "lmc", "independent"])
def test_multioutput_gpr_round_trips(tmp_path, xp, device, dtype, kind, missing):
    kw = dict(xp=xp, dtype=dtype, device=device)
    X, Y = _data(missing)
    model = MultiOutputGPR(_kernel(kind, kw), Gaussian(variance=np.full(T, 0.2), **kw),
                           B.asarray(X, **kw), B.asarray(Y, **kw), mean=0.3,
                           solver="cholesky" if kind == "icm" and missing else "auto")
    _randomise(model, seed=3)
    loaded = _assert_round_trip(model, tmp_path / "mo.npz", xp, device)
    assert loaded.uses_kronecker == model.uses_kronecker
    assert loaded.solver == model.solver
    np.testing.assert_array_equal(np.isnan(B.to_numpy(loaded.Y)), np.isnan(Y))


def test_lmcsvgp_round_trips(tmp_path, xp, device, dtype):
    kw = dict(xp=xp, dtype=dtype, device=device)
    X, Y = _data(True)
    Xp, _ = stack_outputs(X, Y)
    model = LMCSVGP([RBF(**kw), Matern32(lengthscale=0.6, **kw)],
                    Gaussian(variance=np.full(T, 0.1), **kw), B.asarray(X[:5], **kw),
                    num_outputs=T, num_data=Xp.shape[0],
                    jitter=1e-4 if dtype == xp.float32 else 1e-6)
    _randomise(model, seed=4)
    _assert_round_trip(model, tmp_path / "lmc.npz", xp, device)


def test_oilmm_round_trips(tmp_path, xp, device, dtype):
    kw = dict(xp=xp, dtype=dtype, device=device)
    X, Y = _data(False)
    model = OILMM([RBF(**kw), Matern52(lengthscale=0.7, **kw)], Gaussian(variance=0.05, **kw),
                  B.asarray(X, **kw), B.asarray(Y, **kw))
    _randomise(model, seed=5)
    _assert_round_trip(model, tmp_path / "oilmm.npz", xp, device)


@pytest.mark.filterwarnings("ignore::gpnum.errors.ConvergenceWarning")  # 20 iterations only
def test_fitted_exact_models_round_trip(tmp_path):
    """After gpnum.fit (L-BFGS-B for the exact models) the file still loads to the same model."""
    X, Y = _data(True)
    model = MultiOutputGPR(ICM(RBF(), T, 1), Gaussian(variance=np.full(T, 0.2)), X, Y)
    gpnum.fit(model, maxiter=20)
    _assert_round_trip(model, tmp_path / "fitted.npz", np, "cpu")
    oilmm = OILMM([RBF(), RBF()], Gaussian(variance=0.05), *_data(False))
    gpnum.fit(oilmm, maxiter=20)
    _assert_round_trip(oilmm, tmp_path / "fitted-oilmm.npz", np, "cpu")


@pytest.mark.parametrize("optimizer", ["adam", "ngd"])
def test_lmcsvgp_resumed_run_equals_an_uninterrupted_one(tmp_path, optimizer):
    X, Y = _data(True)
    Xp, y = stack_outputs(X, Y)

    def fresh():
        return LMCSVGP([RBF(), Matern32(lengthscale=0.6)], Gaussian(variance=np.full(T, 0.1)),
                       X[:5].copy(), num_outputs=T, num_data=Xp.shape[0])

    opts = dict(optimizer=optimizer, batch_size=8, lr=0.05, progress=False, seed=7,
                lr_schedule=None)
    whole = fresh()
    gpnum.fit(whole, Xp, y, epochs=4, **opts)
    part = fresh()
    gpnum.fit(part, Xp, y, epochs=2, **opts)
    gpnum.save(part, tmp_path / "part.npz")
    resumed = gpnum.load(tmp_path / "part.npz", xp=np)
    assert resumed.training_state is not None and resumed.training_state.epoch == 2
    gpnum.fit(resumed, Xp, y, epochs=4, resume=True, **opts)
    for k, v in whole.parameters().items():
        np.testing.assert_array_equal(B.to_numpy(resumed.parameters()[k]), B.to_numpy(v),
                                      err_msg=k)
