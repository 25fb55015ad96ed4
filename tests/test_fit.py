"""The training loop, checkpoints and resuming."""

import warnings

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.kernels import Matern52
from gpnum.likelihoods import Bernoulli, Gaussian


def toy(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 0]
    return X, f + 0.1 * rng.standard_normal(n), f


def new_model(X, m=15, whitening="cholesky", lik=None, seed=0):
    Z = gpnum.inducing.kmeans(X, m, seed=seed)
    return gpnum.SVGP(Matern52(lengthscale=1.0, variance=1.0), lik or Gaussian(variance=0.5), Z,
                      num_data=X.shape[0], whitening=whitening)


@pytest.mark.parametrize("optimizer", ["ngd", "adam"])
def test_fit_learns_a_smooth_function(optimizer):
    X, y, f = toy()
    model = new_model(X)
    # Adam on q alone converges far more slowly than natural gradients (Salimbeni et al. 2018).
    hist = gpnum.fit(model, X, y, epochs=25 if optimizer == "ngd" else 80, batch_size=64,
                     optimizer=optimizer, lr=0.03 if optimizer == "ngd" else 0.05,
                     progress=False, seed=1)
    assert hist.stopped is None and hist.num_steps > 0
    assert hist.epoch_elbo[-1] > hist.epoch_elbo[0]
    mu, _ = model.predict_f(X)
    rmse = float(np.sqrt(np.mean((B.to_numpy(mu) - f) ** 2)))
    assert rmse < (0.1 if optimizer == "ngd" else 0.15), rmse  # constant predictor: ~1.2
    if optimizer == "ngd":
        assert 0.003 < float(model.likelihood.variance) < 0.03  # the true noise variance: 0.01


def test_fit_ciq_krylov_and_validation_metrics():
    X, y, f = toy(200, seed=2)
    model = new_model(X, m=12, whitening="ciq")
    hist = gpnum.fit(model, X[:160], y[:160], epochs=15, batch_size=40, lr=0.03,
                     ngd_method="krylov", X_val=X[160:], y_val=y[160:], progress=False)
    assert model.variational_form == "natural"
    assert len(hist.val) == 15 and hist.val[-1]["rmse"] < 0.2
    assert hist.val[-1]["nll"] < hist.val[0]["nll"]


def test_fit_classification_accuracy():
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (300, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(float)
    model = new_model(X, m=20, lik=Bernoulli())
    hist = gpnum.fit(model, X[:250], y[:250], epochs=30, batch_size=50, lr=0.03,
                     X_val=X[250:], y_val=y[250:], progress=False)
    assert hist.val[-1]["accuracy"] > 0.85


def test_fit_from_batches_iterator():
    X, y, _ = toy(120)
    model = new_model(X, m=8)

    def batches(epoch):
        order = np.random.default_rng(epoch).permutation(120)
        for i in range(0, 120, 40):
            yield X[order[i:i + 40]], y[order[i:i + 40]]

    hist = gpnum.fit(model, batches=batches, epochs=3, progress=False)
    assert hist.num_steps == 9


def test_resume_is_bit_identical(tmp_path):
    X, y, _ = toy(150)
    full = new_model(X, m=8)
    gpnum.fit(full, X, y, epochs=4, batch_size=32, progress=False, seed=5)
    half = new_model(X, m=8)
    gpnum.fit(half, X, y, epochs=2, batch_size=32, progress=False, seed=5)
    gpnum.save(half, tmp_path / "ckpt.npz")
    resumed = gpnum.load(tmp_path / "ckpt.npz")
    assert resumed.training_state.epoch == 2
    gpnum.fit(resumed, X, y, epochs=4, batch_size=32, progress=False, resume=True)
    for k, v in full.parameters().items():
        assert np.array_equal(B.to_numpy(v), B.to_numpy(resumed.parameters()[k])), k


def test_checkpoint_round_trip_natural_form_and_backends(tmp_path, xp, device):
    X, y, _ = toy(60)
    model = new_model(X, m=6, whitening="ciq")
    gpnum.fit(model, X, y, epochs=1, batch_size=30, progress=False, ngd_method="krylov")
    gpnum.save(model, tmp_path / "m.npz")
    loaded = gpnum.load(tmp_path / "m.npz", xp=xp, device=device)
    assert loaded.variational_form == "natural" and loaded.whitening == "ciq"
    for k, v in model.parameters().items():
        got = loaded.parameters()[k]
        assert B.get_namespace(got) is xp
        np.testing.assert_array_equal(B.to_numpy(got), B.to_numpy(v))


def test_checkpoint_errors(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="not a readable gpnum checkpoint"):
        gpnum.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, something=np.ones(2))
    with pytest.raises(ValueError, match="no 'config' entry"):
        gpnum.load(other)
    X, y, _ = toy(40)
    model = new_model(X, m=5)
    gpnum.save(model, tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as f:
        files = dict(f)
    import json

    cfg = json.loads(str(files["config"]))
    cfg["format_version"] = 99
    np.savez(tmp_path / "v99.npz", **{**files, "config": np.array(json.dumps(cfg))})
    with pytest.raises(ValueError, match="format version 99"):
        gpnum.load(tmp_path / "v99.npz")
    files.pop("param/q_mu")
    np.savez(tmp_path / "missing.npz", **files)
    with pytest.raises(ValueError, match="do not match"):
        gpnum.load(tmp_path / "missing.npz")


def test_non_finite_stops_with_a_message():
    X, y, _ = toy(80)
    model = new_model(X, m=6)
    lik = model.likelihood
    original = lik.variational_expectations_and_grad
    calls = {"n": 0}

    def broken(y, mu, var):
        calls["n"] += 1
        ve, g = original(y, mu, var)
        if calls["n"] > 3:
            g = dict(g, params={k: v * np.nan for k, v in g["params"].items()})
        return ve, g

    lik.variational_expectations_and_grad = broken
    with pytest.warns(RuntimeWarning, match="non-finite gradient of likelihood.variance"):
        hist = gpnum.fit(model, X, y, epochs=2, batch_size=20, progress=False)
    assert hist.stopped and hist.num_steps == 3
    assert all(np.all(np.isfinite(B.to_numpy(v))) for v in model.parameters().values())


def test_fit_bad_arguments():
    X, y, _ = toy(50)
    model = new_model(X, m=5)
    with pytest.raises(ValueError, match="optimizer"):
        gpnum.fit(model, X, y, optimizer="sgd")
    with pytest.raises(ValueError, match="resume=True"):
        gpnum.fit(new_model(X, m=5), X, y, resume=True)
    with pytest.raises(ValueError, match="pass X and y"):
        gpnum.fit(model)
    with pytest.raises(gpnum.ShapeError):
        gpnum.fit(model, X, y[:10])


def test_solver_warnings_are_counted_and_reported_once():
    X, y, _ = toy(60)
    model = new_model(X, m=6, whitening="ciq")
    model.ciq_options.update(rtol=1e-14, maxiter=2)  # cannot converge: every call warns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist = gpnum.fit(model, X, y, epochs=1, batch_size=30, progress=False)
    conv = [w for w in caught if issubclass(w.category, gpnum.ConvergenceWarning)]
    assert len(conv) == 1 and "stopped short of their tolerance" in str(conv[0].message)
    assert hist.solver_warnings >= hist.num_steps  # at least one per step


def test_progress_bar_moves_per_step_with_the_elbo_and_an_eta(capsys):
    pytest.importorskip("tqdm")
    X, y, _ = toy(100)
    model = new_model(X, m=6)
    hist = gpnum.fit(model, X, y, epochs=1, batch_size=20, progress=True)
    err = capsys.readouterr().err
    assert hist.num_steps == 5
    assert "5/5" in err and "step" in err, err  # one epoch of five steps, not "1/1" epochs
    assert f"elbo {hist.step_elbo[-1]:.6g}" in err  # the value the history stores
    assert "<00:00" in err  # tqdm's elapsed<remaining


def test_progress_without_tqdm_prints_each_epoch_with_an_eta(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError("no tqdm here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    X, y, _ = toy(60)
    model = new_model(X, m=5)
    hist = gpnum.fit(model, X, y, epochs=2, batch_size=30, progress=True)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("epoch 1/2: mean ELBO")
    assert f"{hist.epoch_elbo[1]:.6g}" in out[1] and "ETA 0 s" in out[1]


@pytest.mark.parametrize("optimizer", ["ngd", "adam"])
def test_fixed_parameters_stay_bit_identical(optimizer):
    X, y, _ = toy(90)
    model = new_model(X, m=6)
    names = ["likelihood.variance", "inducing_points", "kernel.lengthscale"]
    if optimizer == "adam":
        names.append("q_mu")
    before = {k: B.to_numpy(model.parameters()[k]).copy() for k in model.parameters()}
    gpnum.fit(model, X, y, epochs=2, batch_size=30, optimizer=optimizer, lr=0.05,
              fixed=names, progress=False)
    after = {k: B.to_numpy(v) for k, v in model.parameters().items()}
    for k in names:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    # and the others did move
    assert not np.array_equal(after["kernel.variance"], before["kernel.variance"])
    assert not np.array_equal(after["q_sqrt"], before["q_sqrt"])


def test_fixed_errors_and_resume_keeps_them(tmp_path):
    X, y, _ = toy(60)
    model = new_model(X, m=5)
    with pytest.raises(ValueError, match=r"fixed: \['kernel.nope'\] are not parameters"):
        gpnum.fit(model, X, y, fixed=["kernel.nope"], progress=False)
    with pytest.raises(ValueError, match="natural gradients update"):
        gpnum.fit(model, X, y, fixed=["q_mu"], progress=False)
    gpnum.fit(model, X, y, epochs=1, batch_size=30, fixed=["mean"], progress=False)
    gpnum.save(model, tmp_path / "c.npz")
    loaded = gpnum.load(tmp_path / "c.npz")
    assert loaded.training_state.fixed == ("mean",)
    mean = B.to_numpy(loaded.mean).copy()
    gpnum.fit(loaded, X, y, epochs=3, batch_size=30, resume=True, progress=False)
    np.testing.assert_array_equal(B.to_numpy(loaded.mean), mean)


def test_lbfgs_backs_off_from_points_that_are_not_positive_definite():
    """A trial point whose matrix fails to factorise is infinitely bad for the line search,
    not the end of training (here: noise variances below 0.05 'fail')."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (25, 1))
    y = np.sin(2 * X[:, 0])  # noise-free: the optimum wants the noise variance at 0
    model = gpnum.GPR(Matern52(lengthscale=1.0), Gaussian(variance=0.5), X, y)
    original = model.objective_and_grad
    refused = []

    def guarded(*args, **kwargs):
        if float(model.likelihood.variance) < 0.05:
            refused.append(float(model.likelihood.variance))
            raise gpnum.NotPSDError("test: not positive definite below 0.05")
        return original(*args, **kwargs)

    model.objective_and_grad = guarded
    start = float(original()[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
        gpnum.fit(model, maxiter=200)
    assert refused, "the optimiser never tried a refused point"
    assert float(model.likelihood.variance) >= 0.05
    assert float(original()[0]) > start
