"""The command line: a real (small) training run, the comparison, help and one-line errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gpnum.cli import main


def test_fit_on_a_bundled_data_set(tmp_path, capsys):
    out = tmp_path / "res"
    status = main(["fit", "--dataset", "energy", "--num-inducing", "30", "--epochs", "15",
                   "--batch-size", "64", "--lr", "0.03", "--out", str(out), "--no-progress"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "test rmse=" in printed and "time/step=" in printed
    res = json.loads((out / "metrics.json").read_text())
    # energy's heating load is smooth in its inputs: far below the constant predictor's 1.0
    assert res["metrics"]["test"]["rmse"] < 0.35
    assert res["dataset"]["n_train"] == 576 and res["settings"]["num_inducing"] == 30
    assert res["metrics"]["num_steps"] == 15 * 9
    pytest.importorskip("matplotlib")
    assert (out / "elbo.png").stat().st_size > 1000


def test_compare_writes_table_and_figures(tmp_path):
    out = tmp_path / "cmp"
    status = main(["compare", "--dataset", "energy", "--num-inducing", "10,20", "--epochs", "1",
                   "--batch-size", "128", "--out", str(out)])
    assert status == 0
    rows = json.loads((out / "compare.json").read_text())["rows"]
    assert [(r["m"], r["whitening"]) for r in rows] == [(10, "cholesky"), (10, "ciq"),
                                                         (20, "cholesky"), (20, "ciq")]
    assert all(np.isfinite(r["test_nll"]) for r in rows)
    assert (out / "compare.md").read_text().count("\n") == 6
    pytest.importorskip("matplotlib")
    assert (out / "compare_time.png").exists() and (out / "compare_nll.png").exists()


@pytest.mark.parametrize("argv,message", [
    (["fit", "--epochs", "0"], "--epochs: expected a positive integer"),
    (["fit", "--dataset", "nope"], "expected one of the bundled data sets"),
    (["fit", "--whitening", "qr"], "invalid choice: 'qr'"),
    (["fit", "--csv", "/nonexistent.csv"], "file not found"),
    (["compare", "--num-inducing", "a,b"], "comma-separated integers"),
    (["fit", "--backend", "cupy"], "cupy"),
])
def test_bad_arguments_give_one_line_errors(argv, message):
    if argv[-1] == "cupy":
        from gpnum.backend._namespace import _cupy_usable

        if _cupy_usable() is None:
            pytest.skip("a GPU is usable here")
    r = subprocess.run([sys.executable, "-m", "gpnum", *argv], capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_help_lists_every_option():
    r = subprocess.run([sys.executable, "-m", "gpnum", "fit", "--help"], capture_output=True,
                       text=True)
    assert r.returncode == 0
    for opt in ("--dataset", "--csv", "--likelihood", "--whitening", "--optimizer",
                "--num-inducing", "--epochs", "--batch-size", "--backend", "--out"):
        assert opt in r.stdout


def test_datasets_and_demo(capsys):
    assert main(["datasets"]) == 0
    assert "precip" in capsys.readouterr().out
    assert main(["demo", "--n", "100"]) == 0
    assert "relative residual" in capsys.readouterr().out
