"""``gpnum fit --model gpr --solver grid|ski`` and ``GPRegressor(solver="grid"|"ski")``
(issue 49): the structured solvers from the command line and scikit-learn."""

import json

import numpy as np
import pytest

import gpnum
from gpnum.cli import main


def _grid_csv(tmp_path):
    """A 16 x 12 grid of a smooth field plus noise: its random 75% training split is an
    incomplete grid."""
    rng = np.random.default_rng(0)
    a, b = np.meshgrid(np.linspace(0.0, 3.0, 16), np.linspace(-1.0, 1.0, 12), indexing="ij")
    y = np.sin(2.0 * a) * np.cos(b) + 0.1 * rng.standard_normal(a.shape)
    path = tmp_path / "grid.csv"
    np.savetxt(path, np.column_stack([a.ravel(), b.ravel(), y.ravel()]), delimiter=",",
               header="a,b,y", comments="")
    return str(path)


def _fit(tmp_path, name, *extra):
    out = tmp_path / name
    argv = ["fit", "--model", "gpr", "--csv", _grid_csv(tmp_path), "--maxiter", "30",
            "--kernel", "rbf", "--likelihood", "gaussian", "--out", str(out), "--no-progress",
            "--save", str(tmp_path / f"{name}.npz"), *extra]
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text())


def test_grid_and_ski_solvers_fit_a_grid(tmp_path, capsys):
    # The training split of a 16 x 12 grid: an incomplete grid for --solver grid (BBMM on
    # the observed cells), scattered 2-d inputs for --solver ski. Both learn the same model as
    # Cholesky up to their errors: test RMSE within 5% of its.
    exact = _fit(tmp_path, "cholesky", "--solver", "cholesky")
    grid = _fit(tmp_path, "grid", "--solver", "grid", "--cg-probes", "16")
    assert "solver=grid" in capsys.readouterr().out
    ski = _fit(tmp_path, "ski", "--solver", "ski", "--grid-size", "40")
    assert grid["settings"]["solver"] == "grid" and ski["settings"]["grid_size"] == 40
    t0 = exact["metrics"]["test"]["rmse"]
    assert t0 < 0.2                                     # the field is learned (noise 0.1)
    assert grid["metrics"]["test"]["rmse"] == pytest.approx(t0, rel=0.05)
    assert ski["metrics"]["test"]["rmse"] == pytest.approx(t0, rel=0.05)
    model = gpnum.load(str(tmp_path / "ski.npz"))
    assert model.solver == "ski" and model.grid_size == 40
    assert gpnum.load(str(tmp_path / "grid.npz")).solver == "grid"


@pytest.mark.parametrize("argv,message", [
    (["fit", "--model", "gpr", "--grid-size", "20"],
     "--grid-size: sets the interpolation grid of --solver ski; add --solver ski"),
    (["fit", "--model", "gpr", "--solver", "grid", "--grid-size", "20"],
     "--grid-size: sets the interpolation grid of --solver ski"),
])
def test_grid_size_refused_without_ski(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_sklearn_regressor_takes_the_structured_solvers():
    from gpnum.sklearn import GPRegressor

    x = np.linspace(0.0, 3.0, 40)[:, None]
    y = np.sin(2.0 * x[:, 0])
    preds = {}
    for solver in ("cholesky", "grid", "ski"):
        est = GPRegressor(alpha=1e-2, solver=solver, optimizer=None).fit(x, y)
        assert est.model_.solver == solver
        preds[solver] = est.predict(x[::7])
    np.testing.assert_allclose(preds["grid"], preds["cholesky"], atol=1e-4)
    np.testing.assert_allclose(preds["ski"], preds["cholesky"], atol=1e-3)
    with pytest.raises(ValueError, match="'grid', 'ski', 'auto', got 'lu'"):
        GPRegressor(solver="lu").fit(x, y)
