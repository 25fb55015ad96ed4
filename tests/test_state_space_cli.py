"""``gpnum fit --solver state_space``, GPRegressor(solver="state_space") and the "sho" kernel
name: the state-space path through the command line, scikit-learn and checkpoints, against the
same runs with the Cholesky solver."""

import json

import numpy as np
import pytest

import gpnum
from gpnum.cli import main
from gpnum.kernels import SHO, Matern32, Sum, from_expression


def _fit(tmp_path, name, *extra):
    out = tmp_path / name
    argv = ["fit", "--model", "gpr", "--dataset", "co2", "--split", "0", "--maxiter", "40",
            "--kernel", "matern32+matern12", "--out", str(out), "--no-progress",
            "--save", str(tmp_path / f"{name}.npz"), *extra]
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text())


def test_cli_state_space_matches_cholesky(tmp_path, capsys):
    exact = _fit(tmp_path, "cholesky", "--solver", "cholesky")
    ss = _fit(tmp_path, "ss", "--solver", "state_space")
    assert "solver=state_space" in capsys.readouterr().out
    assert ss["settings"]["solver"] == "state_space"
    # Two L-BFGS-B runs whose gradients agree to ~1e-9 part by rounding-sized steps; after 40
    # iterations their fits agree to a few 1e-6.
    for key in ("rmse", "nll"):
        assert ss["metrics"]["test"][key] == pytest.approx(exact["metrics"]["test"][key],
                                                           rel=2e-5)
    model = gpnum.load(str(tmp_path / "ss.npz"))
    assert model.solver == "state_space" and model.uses_state_space


def test_cli_refuses_a_kernel_without_a_form(tmp_path, capsys):
    with pytest.raises((SystemExit, TypeError, ValueError)) as err:
        main(["fit", "--model", "gpr", "--dataset", "co2", "--split", "0", "--kernel", "rbf",
              "--solver", "state_space", "--out", str(tmp_path / "x"), "--no-progress"])
    text = capsys.readouterr().err + str(err.value)
    assert "RBF" in text


def test_sho_expression():
    k = from_expression("matern32 + sho", input_dim=1)
    assert isinstance(k, Sum) and isinstance(k.kernels[1], SHO)


def test_gpregressor_state_space_predicts_as_cholesky():
    from gpnum.sklearn import GPRegressor

    rng = np.random.default_rng(0)
    t = rng.uniform(0.0, 30.0, (120, 1))
    y = np.sin(t[:, 0]) + 0.2 * rng.standard_normal(120)
    ts = np.linspace(-2.0, 32.0, 17)[:, None]
    out = []
    for solver in ("cholesky", "state_space"):
        est = GPRegressor(Matern32(lengthscale=1.0, variance=1.0), alpha=0.04, solver=solver,
                          maxiter=50).fit(t, y)
        out.append(est.predict(ts, return_std=True))
        assert est.model_.solver == solver
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-6, atol=1e-8)
