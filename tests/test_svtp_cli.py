"""The command line of issue 21: ``gpnum fit --model svtp``, ``gpnum compare --models``,
``--outliers``."""

import json

import numpy as np
import pytest

from gpnum.cli import main
from gpnum.datasets import add_outliers


@pytest.mark.parametrize("extra", [[], ["--kl", "upper-bound", "--optimizer", "adam"]])
def test_fit_svtp_on_a_bundled_data_set(tmp_path, capsys, extra):
    out = tmp_path / "res"
    status = main(["fit", "--model", "svtp", "--dataset", "energy", "--num-inducing", "15",
                   "--epochs", "2", "--batch-size", "128", "--outliers", "0.05", "--out",
                   str(out), "--no-progress", *extra])
    assert status == 0
    assert "model=svtp" in capsys.readouterr().out
    res = json.loads((out / "metrics.json").read_text())
    assert np.isfinite(res["metrics"]["test"]["nll"])
    assert res["settings"]["model"] == "svtp" and res["settings"]["outliers"] == 0.05
    assert res["dataset"]["likelihood"] == "studentt-process"


def test_fit_svtp_saves_and_resumes(tmp_path):
    ck = tmp_path / "svtp.npz"
    args = ["fit", "--model", "svtp", "--dataset", "energy", "--num-inducing", "10",
            "--batch-size", "200", "--no-progress", "--save", str(ck)]
    assert main(args + ["--epochs", "1", "--out", str(tmp_path / "a")]) == 0
    assert main(args + ["--epochs", "2", "--resume", str(ck), "--out", str(tmp_path / "b")]) == 0
    assert main(args + ["--epochs", "2", "--out", str(tmp_path / "c")]) == 0
    b = json.loads((tmp_path / "b" / "metrics.json").read_text())["metrics"]["test"]
    c = json.loads((tmp_path / "c" / "metrics.json").read_text())["metrics"]["test"]
    assert b == c


def test_compare_models_with_outliers(tmp_path):
    out = tmp_path / "cmp"
    status = main(["compare", "--models", "svgp,svgp-studentt,svtp", "--outliers", "0.05",
                   "--dataset", "energy", "--num-inducing", "10", "--epochs", "1",
                   "--batch-size", "200", "--out", str(out)])
    assert status == 0
    rows = json.loads((out / "compare_models.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["svgp", "svgp-studentt", "svtp"]
    assert all(np.isfinite(r["test_nll"]) and r["outliers"] == 0.05 for r in rows)
    assert (out / "compare_models.md").read_text().count("\n") == 5


def test_outliers_shift_that_fraction_by_three_standard_deviations():
    y = np.random.default_rng(0).normal(size=200)
    z = add_outliers(y, 0.05, seed=3)
    moved = np.flatnonzero(z != y)
    assert moved.size == 10
    np.testing.assert_allclose(np.abs(z[moved] - y[moved]), 3.0 * y.std(), rtol=1e-12)
    assert add_outliers(y, 0.0, seed=3) is y


@pytest.mark.parametrize("argv,message", [
    (["fit", "--outliers", "1.5"], "--outliers: expected a fraction in [0, 1)"),
    (["compare", "--models", "svgp,gp"], "--models: expected a comma-separated list"),
    (["fit", "--model", "tp"], "invalid choice: 'tp'"),
    (["fit", "--kl", "exact"], "invalid choice: 'exact'"),
    (["fit", "--model", "svtp", "--dataset", "elec", "--num-inducing", "5", "--epochs", "1"],
     "--model svtp is a regression model"),
    (["fit", "--model", "svtp", "--dataset", "energy", "--whitening", "ciq"],
     "drop --whitening ciq"),
])
def test_bad_arguments_give_one_line_errors(argv, message, capsys, tmp_path):
    try:
        status = main(argv + ["--out", str(tmp_path)])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err
