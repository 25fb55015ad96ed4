"""The paths a user runs, end to end, on every backend of the test matrix.

Load a bundled data set, place inducing points by k-means, train, evaluate, predict, save, load
and predict again; and the command line itself on every CPU backend. The references are
independent of the code under test: the trivial predictors' scores (a constant mean, a coin) and
the predictions made before saving, which a reloaded model must reproduce.
"""

import json
import warnings

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum import datasets, inducing
from gpnum.cli import main
from gpnum.kernels import Matern52
from gpnum.likelihoods import Bernoulli, Gaussian, StudentT


def _likelihood(name, xp, dtype, device):
    if name == "gaussian":
        return Gaussian(variance=0.5, xp=xp, dtype=dtype, device=device)
    if name == "studentt":
        return StudentT(df=5.0, scale=0.3, xp=xp, dtype=dtype, device=device)
    return Bernoulli(xp=xp, dtype=dtype, device=device)


def _same(a, b, xp):
    """Bit-identical on NumPy; on the other CPU backends too (deterministic single-threaded
    kernels), which this asserts as well, with a one-ulp allowance outside NumPy."""
    a, b = B.to_numpy(a), B.to_numpy(b)
    if xp.__name__.endswith("numpy"):
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=4 * np.finfo(a.dtype).eps, atol=0)


@pytest.mark.parametrize("lik_name", ["gaussian", "studentt", "bernoulli"])
@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
def test_load_train_evaluate_save_load_predict(tmp_path, xp, device, dtype, whitening, lik_name):
    # elec's 6,797 test rows span two prediction chunks of 4,096 (a partial last one), energy's
    # 116 fewer than one: both slice bounds the array API leaves unspecified when out of range.
    name = "elec" if lik_name == "bernoulli" else "energy"
    ds = datasets.load(name, xp=xp, dtype=dtype, device=device)
    n = 192
    X, y = ds.X_train[:n, :], ds.y_train[:n]
    Z = inducing.kmeans(X, 12, seed=0)
    assert B.get_namespace(Z) is xp and Z.dtype == dtype
    d = X.shape[1]
    kernel = Matern52(lengthscale=np.full(d, 2.0), variance=1.0, xp=xp, dtype=dtype,
                      device=device)
    model = gpnum.SVGP(kernel, _likelihood(lik_name, xp, dtype, device), Z, num_data=n,
                       whitening=whitening, jitter=1e-4 if dtype == xp.float32 else 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)  # float32 CIQ at rtol 1e-3
        hist = gpnum.fit(model, X, y, epochs=6, batch_size=64, lr=0.05, progress=False, seed=0)
    assert hist.stopped is None and hist.num_steps == 18
    assert np.all(np.isfinite(hist.step_elbo))
    Xt, yt = ds.X_test, ds.y_test
    metrics = gpnum.optim.evaluate(model, Xt, yt)
    yt_np = B.to_numpy(yt)
    if lik_name == "bernoulli":
        coin = max(yt_np.mean(), 1.0 - yt_np.mean())  # predicting the majority class
        assert metrics["accuracy"] > coin + 0.05, metrics
        assert metrics["nll"] < np.log(2.0), metrics
    else:
        const = float(np.sqrt(np.mean((yt_np - B.to_numpy(ds.y_train).mean()) ** 2)))
        assert metrics["rmse"] < 0.6 * const, (metrics, const)
    mean, var = model.predict_y(Xt)
    assert mean.shape == (Xt.shape[0],) and B.get_namespace(mean) is xp
    assert bool(xp.all(var >= 0.0))
    path = tmp_path / "model.npz"
    gpnum.save(model, path)
    loaded = gpnum.load(path, xp=xp, device=device)
    assert loaded.dtype == dtype and loaded.whitening == whitening
    mean2, var2 = loaded.predict_y(Xt)
    _same(mean, mean2, xp)
    _same(var, var2, xp)


def _cli_backends():
    out = []
    for name in ("numpy", "array_api_strict", "torch"):
        try:
            B.namespace_by_name(name)
        except gpnum.BackendError:
            out.append(pytest.param(name, marks=pytest.mark.skip(f"{name} not installed")))
        else:
            out.append(pytest.param(name, id="strict" if name == "array_api_strict" else name))
    return out


@pytest.mark.parametrize("whitening", ["cholesky", "ciq"])
@pytest.mark.parametrize("backend_name", _cli_backends())
def test_cli_fit_on_every_cpu_backend(tmp_path, monkeypatch, capsys, backend_name, whitening):
    # The CLI sets GPNUM_BACKEND itself; monkeypatch puts the old value back afterwards.
    monkeypatch.setenv("GPNUM_BACKEND", "numpy")
    monkeypatch.delenv("GPNUM_DTYPE", raising=False)
    out = tmp_path / "res"
    status = main(["fit", "--dataset", "energy", "--num-inducing", "20", "--epochs", "4",
                   "--batch-size", "64", "--lr", "0.05", "--whitening", whitening,
                   "--backend", backend_name, "--out", str(out), "--no-progress",
                   "--save", str(tmp_path / "ckpt.npz")])
    assert status == 0, capsys.readouterr().err
    res = json.loads((out / "metrics.json").read_text())
    assert res["environment"]["backend"] == backend_name
    assert res["metrics"]["test"]["rmse"] < 0.6  # the constant predictor's is ~1.0
    loaded = gpnum.load(tmp_path / "ckpt.npz", xp=B.namespace_by_name(backend_name))
    assert loaded.training_state.epoch == 4 and loaded.whitening == whitening
