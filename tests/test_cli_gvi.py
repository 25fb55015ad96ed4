"""The command line for GVI (issue 20): ``gpnum fit --objective``, ``gpnum compare
--objectives``, their options and one-line errors."""

import json

import numpy as np
import pytest

import gpnum
from gpnum.cli import main


def test_fit_gvi_tempered_on_a_fixed_split(tmp_path, capsys):
    out = tmp_path / "res"
    ckpt = tmp_path / "gvi.npz"
    status = main(["fit", "--dataset", "energy", "--split", "0", "--objective",
                   "pgvi-bhattacharyya", "--num-inducing", "30", "--epochs", "10",
                   "--batch-size", "64", "--temper", "--regulariser-mode", "posterior",
                   "--out", str(out), "--no-progress", "--save", str(ckpt)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "objective=pgvi-bhattacharyya" in printed and "Algorithm 2:" in printed
    res = json.loads((out / "metrics.json").read_text())
    # far below the constant predictor's RMSE of 1.0 on standardised targets
    assert res["metrics"]["test"]["rmse"] < 0.35
    assert len(res["metrics"]["temper_scale"]) == 1 and res["metrics"]["temper_scale"][0] > 0
    # 10% of energy's 692 training points held out for tempering: 623 train, 10 steps/epoch
    assert res["metrics"]["num_steps"] == 10 * 10
    model = gpnum.load(ckpt)
    assert isinstance(model, gpnum.GVI) and model.mode == "posterior"
    assert model.divergence == "projected-bhattacharyya"


def test_compare_objectives_writes_one_table_and_one_figure(tmp_path):
    out = tmp_path / "cmp"
    status = main(["compare", "--dataset", "energy", "--split", "0", "--objectives",
                   "svgp,gwi,pgvi-kl", "--num-inducing", "20", "--epochs", "2",
                   "--batch-size", "128", "--out", str(out)])
    assert status == 0
    rows = json.loads((out / "objectives.json").read_text())["rows"]
    assert [r["objective"] for r in rows] == ["svgp", "gwi", "pgvi-kl"]
    assert all(np.isfinite(r["test_nll"]) and r["num_steps"] == rows[0]["num_steps"]
               for r in rows)
    assert (out / "objectives.md").read_text().count("\n") == 5
    pytest.importorskip("matplotlib")
    assert (out / "objectives.png").stat().st_size > 1000


def test_compare_with_the_regulariser_from_an_svgp(tmp_path):
    out = tmp_path / "cmp"
    status = main(["compare", "--dataset", "energy", "--split", "0", "--objectives",
                   "pgvi-hellinger", "--regulariser-fit", "svgp", "--regulariser-mode",
                   "posterior", "--num-inducing", "20", "--epochs", "3", "--out", str(out)])
    assert status == 0
    rows = json.loads((out / "objectives.json").read_text())["rows"]
    assert rows[0]["objective"] == "pgvi-hellinger [P from SVGP]"
    assert rows[0]["test_rmse"] < 1.0  # better than the constant predictor


@pytest.mark.parametrize("argv,message", [
    (["compare", "--dataset", "energy", "--objectives", "svgp,elbo"], "--objectives: expected"),
    (["fit", "--dataset", "energy", "--objective", "pgvi-renyi", "--renyi-alpha", "1",
      "--num-inducing", "10", "--epochs", "1"], "alpha: the Renyi order must lie in"),
    (["fit", "--variational-kernel", "svgp"], "invalid choice: 'svgp'"),
    (["fit", "--objective", "gvi"], "invalid choice: 'gvi'"),
    (["fit", "--dataset", "precip", "--objective", "gwi", "--max-train", "300",
      "--num-inducing", "10"], "GVI supports the Gaussian and Bernoulli"),
])
def test_bad_gvi_arguments_give_one_line_errors(argv, message, capsys, tmp_path):
    argv = argv + ["--out", str(tmp_path)]
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
