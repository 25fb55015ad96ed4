"""``gpnum fit --model gpr --solver cg``: the BBMM exact GP on the command line (issue 33)."""

import json

import pytest

import gpnum
from gpnum.cli import main


def _fit(tmp_path, name, *extra):
    out = tmp_path / name
    argv = ["fit", "--model", "gpr", "--dataset", "elevators", "--split", "0", "--max-train",
            "200", "--maxiter", "100", "--kernel", "rbf", "--out", str(out), "--no-progress",
            "--save", str(tmp_path / f"{name}.npz"), *extra]
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text())


def test_cg_solver_metrics_match_the_cholesky_run(tmp_path, capsys):
    # The same L-BFGS-B training with the exact LML and with BBMM's stochastic (seeded) one;
    # the hyper-parameters land at slightly different points, the test metrics stay close
    # (measured with the log-coordinate L-BFGS-B driver: RMSE 0.4185 vs 0.4176, NLL 0.5365 vs
    # 0.5339).
    exact = _fit(tmp_path, "cholesky", "--solver", "cholesky")
    assert "model=gpr, m=n/a, whitening=n/a, solver=cholesky" in capsys.readouterr().out
    cg = _fit(tmp_path, "cg", "--solver", "cg", "--cg-probes", "32", "--cg-precond-rank", "40")
    assert "solver=cg" in capsys.readouterr().out
    assert cg["settings"]["solver"] == "cg" and cg["settings"]["cg_probes"] == 32
    t_exact, t_cg = exact["metrics"]["test"], cg["metrics"]["test"]
    assert t_cg["rmse"] == pytest.approx(t_exact["rmse"], rel=0.03)
    assert t_cg["nll"] == pytest.approx(t_exact["nll"], abs=0.03)
    assert t_exact["rmse"] < 0.45  # elevators: far below the constant predictor's 1
    # the checkpoint holds the model that was trained: CG with the given options
    model = gpnum.load(str(tmp_path / "cg.npz"))
    assert model.solver == "cg" and model.uses_cg
    assert model.cg_options.num_probes == 32 and model.cg_options.precond_rank == 40
    assert gpnum.load(str(tmp_path / "cholesky.npz")).solver == "cholesky"


@pytest.mark.parametrize("argv,message", [
    (["fit", "--solver", "cg"], "--solver cg: only --model gpr has a solver choice"),
    (["fit", "--model", "sgpr", "--solver", "auto"],
     "--solver auto: only --model gpr has a solver choice (got --model sgpr)"),
    (["fit", "--model", "svtp", "--cg-probes", "4"], "--cg-probes: only --model gpr"),
    (["fit", "--model", "gpr", "--cg-precond-rank", "5"],
     "--cg-precond-rank: sets the conjugate-gradient solver; add --solver cg"),
    (["fit", "--model", "gpr", "--solver", "cg", "--cg-precond-rank", "-1"],
     "--cg-precond-rank: expected an integer >= 0"),
    (["fit", "--model", "gpr", "--solver", "lu"], "invalid choice: 'lu'"),
])
def test_solver_options_refused_in_one_line(argv, message, capsys, tmp_path):
    try:
        status = main(argv + ["--out", str(tmp_path)])
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_build_model_passes_the_solver_through():
    ds = gpnum.datasets.load("energy", split=0)
    X, y = ds.X_train[:50], ds.y_train[:50]
    model = gpnum.models.build_model(X, y, model="gpr", solver="cg",
                                     cg_options={"num_probes": 7})
    assert model.solver == "cg" and model.cg_options.num_probes == 7
    assert gpnum.models.build_model(X, y, model="gpr").solver == "cholesky"
    with pytest.raises(ValueError, match="solver: only model='gpr' has a solver choice"):
        gpnum.models.build_model(X, y, model="sgpr", solver="cg", num_inducing=5)
