"""``gpnum fit --csv FILE --targets K``: a multi-output GP from a small CSV with empty cells; the
reported per-output metrics against a dense NumPy posterior of the saved checkpoint's
parameters, and one-line errors for the options it cannot use."""

import json

import numpy as np
import pytest
from kernel_refs_everyday import rbf_reference

import gpnum
from gpnum import backend as B
from gpnum.cli import main
from gpnum.kernels import ICM, IndependentOutputs
from gpnum.models import MultiOutputGPR

T = 3


@pytest.fixture
def csv(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (40, 2))
    f = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, 1]
    Y = np.c_[f, -0.8 * f + 1.0, 2.0 * f + 5.0] + 0.05 * rng.standard_normal((40, T))
    lines = ["x1,x2,a,b,c"]
    for i in range(40):
        cells = [f"{v:.6f}" for v in X[i]]
        cells += ["" if rng.uniform() < 0.2 else f"{v:.6f}" for v in Y[i]]
        lines.append(",".join(cells))
    lines[3] = lines[3].rsplit(",", 1)[0] + ",NA"  # the other spelling of a missing cell
    path = tmp_path / "three.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _dense_metrics(model, X, Y_test):
    """Per-output RMSE and NLL of the held-out entries from the model's parameters, through a
    dense solve with the (n t) x (n t) covariance of the observed training entries."""
    p = {k: np.asarray(B.to_numpy(v), dtype=np.float64) for k, v in model.parameters().items()}
    X = np.asarray(B.to_numpy(X))
    Y = np.asarray(B.to_numpy(model.Y))
    if isinstance(model.kernel, ICM):
        W = p["kernel.coregion.W"]
        terms = [(lambda A, C: rbf_reference(A, C, p["kernel.kernel.lengthscale"],
                                             p["kernel.kernel.variance"]),
                  W @ W.T + np.diag(p["kernel.coregion.kappa"]))]
    else:
        terms = []
        for a in range(T):
            E = np.zeros((T, T))
            E[a, a] = 1.0
            terms.append((lambda A, C, a=a: rbf_reference(A, C, p[f"kernel.{a}.lengthscale"],
                                                          p[f"kernel.{a}.variance"]), E))

    def cov(A, C):
        return sum(np.kron(k(A, C), Bq) for k, Bq in terms)

    s2 = p["likelihood.variance"] * np.ones(T)
    obs = ~np.isnan(Y.reshape(-1))
    S = (cov(X, X) + np.diag(np.tile(s2, X.shape[0])))[np.ix_(obs, obs)]
    r = (Y - p["mean"]).reshape(-1)[obs]
    Ks = cov(X, X)[:, obs]
    mean = (Ks @ np.linalg.solve(S, r)).reshape(-1, T) + p["mean"]
    var = (np.diag(cov(X, X)) - np.einsum("ij,ji->i", Ks, np.linalg.solve(S, Ks.T)))
    var = var.reshape(-1, T) + s2
    test = ~np.isnan(Y_test)
    rmse, nll = [], []
    for a in range(T):
        e = Y_test[test[:, a], a] - mean[test[:, a], a]
        v = var[test[:, a], a]
        rmse.append(np.sqrt(np.mean(e * e)) if e.size else None)
        nll.append(np.mean(0.5 * np.log(2 * np.pi * v) + 0.5 * e * e / v) if e.size else None)
    return rmse, nll


@pytest.mark.parametrize("multioutput", ["icm", "independent"])
def test_fit_reports_per_output_metrics_and_saves_a_loadable_checkpoint(csv, tmp_path, capsys,
                                                                        multioutput):
    out, ckpt = tmp_path / "out", tmp_path / "mo.npz"
    status = main(["fit", "--csv", str(csv), "--targets", "3", "--kernel", "rbf",
                   "--multioutput", multioutput, "--rank", "2", "--seed", "1", "--out", str(out),
                   "--save", str(ckpt), "--no-progress"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "outputs=3" in printed and "  a: test rmse=" in printed
    res = json.loads((out / "metrics.json").read_text())
    per = res["metrics"]["test"]["per_output"]
    assert res["dataset"]["output_names"] == ["a", "b", "c"]
    # the same split as the loader's (15% of the observed entries, --seed 1)
    data = gpnum.datasets.load_multioutput_csv(csv, 3, holdout=0.15, seed=1, xp="numpy")
    Yt = np.asarray(data.Y_test)
    assert per["num_test"] == [int(v) for v in (~np.isnan(Yt)).sum(axis=0)]
    assert res["dataset"]["test_entries"] == int((~np.isnan(Yt)).sum()) > 0
    model = gpnum.load(ckpt, xp=np)
    assert isinstance(model, MultiOutputGPR)
    assert isinstance(model.kernel, ICM if multioutput == "icm" else IndependentOutputs)
    if multioutput == "icm":
        assert model.kernel.rank == 2
    np.testing.assert_array_equal(np.isnan(np.asarray(model.Y)), np.isnan(data.Y_train))
    rmse, nll = _dense_metrics(model, data.X, Yt)
    for a in range(T):
        if per["num_test"][a]:
            assert per["rmse"][a] == pytest.approx(rmse[a], rel=1e-8)
            assert per["nll"][a] == pytest.approx(nll[a], rel=1e-8, abs=1e-10)
            assert per["rmse_raw"][a] == pytest.approx(rmse[a] * data.y_std[a], rel=1e-8)
    # output c is 2 f + 5: from the others it is predicted well (standardised units)
    assert res["metrics"]["test"]["rmse"] < 0.3


def test_one_target_keeps_the_single_output_fit(csv, tmp_path, capsys):
    full = tmp_path / "full.csv"
    rows = [ln.split(",") for ln in csv.read_text().splitlines()]
    full.write_text("\n".join(",".join(r[:3]) for r in rows if r[2] and r[2] != "NA") + "\n")
    status = main(["fit", "--csv", str(full), "--targets", "1", "--model", "gpr", "--out",
                   str(tmp_path / "o1"), "--no-progress", "--maxiter", "20"])
    assert status == 0
    assert "model=gpr" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--model", "svgp"], "drop --model svgp"),
    (["--likelihood", "studentt"], "--likelihood cannot be used"),
    (["--max-train", "10"], "--max-train cannot be used"),
    (["--solver", "cg"], "--solver cannot be used"),
    (["--optimizer", "adam"], "--optimizer cannot be used"),
    (["--jitter", "1e-4", "--test-mask", "m.csv"], "--test-mask, --jitter cannot be used"),
])
def test_options_it_cannot_use_give_one_line_errors(csv, tmp_path, capsys, extra, message):
    status = main(["fit", "--csv", str(csv), "--targets", "3", "--out", str(tmp_path / "o"),
                   *extra])
    assert status == 2
    assert message in capsys.readouterr().err


def test_bad_targets_and_cells(csv, tmp_path, capsys):
    assert main(["fit", "--targets", "2", "--out", str(tmp_path / "o")]) == 2
    assert "needs --csv PATH" in capsys.readouterr().err
    assert main(["fit", "--csv", str(csv), "--targets", "5", "--out", str(tmp_path / "o")]) == 2
    assert "num_outputs: expected 1 <= t < 5" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("x,a,b\n1,2,3\n,4,5\n2,6,\n")
    assert main(["fit", "--csv", str(bad), "--targets", "2", "--out", str(tmp_path / "o")]) == 2
    assert "column 1 ('x') is an input and is missing" in capsys.readouterr().err
    words = tmp_path / "words.csv"
    words.write_text("x,a,b\n1,2,3\n2,four,5\n")
    assert main(["fit", "--csv", str(words), "--targets", "2", "--out", str(tmp_path / "o")]) == 2
    assert "expected a number or an empty cell (missing), got 'four'" in capsys.readouterr().err
