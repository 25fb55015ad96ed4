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
    (["fit", "--dataset", "nope"], "or train on your own file with --csv PATH"),
    (["fit", "--dataset", "energy", "--test-mask", "m.csv"], "--test-mask needs --csv"),
    (["fit", "--dataset", "energy", "--out", "/dev/null/sub"], "--out /dev/null/sub: cannot write"),
    (["fit", "--dataset", "energy", "--resume", "/nonexistent.npz"], "--resume: file not found"),
    (["fit", "--dataset", "energy", "--save", "/nonexistent/dir/c.npz"], "--save /nonexistent"),
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


def test_dataset_help_names_every_bundled_data_set():
    # The reference: the bundled files themselves (each data set is <name>.csv.gz; elnino and
    # fertility are multi-output sets for load_multioutput, not training sets of load)
    from pathlib import Path

    import gpnum.datasets

    folder = Path(gpnum.datasets.__file__).parent / "data"
    names = {p.name[:-len(".csv.gz")] for p in folder.glob("*.csv.gz")
             if not p.name.endswith("_test_mask.csv.gz")} - {"elnino", "fertility"}
    assert {"co2", "energy", "elevators", "elec", "precip", "digits", "bike"} <= names
    r = subprocess.run([sys.executable, "-m", "gpnum", "fit", "--help"], capture_output=True,
                       text=True)
    text = " ".join(r.stdout.split())
    start = text.index("--dataset DATASET bundled")
    help_text = text[start:text.index("--csv PATH", start)]
    missing = sorted(n for n in names if n not in help_text)
    assert not missing, f"--dataset help omits {missing}: {help_text}"


def test_datasets_and_demo(capsys):
    assert main(["datasets"]) == 0
    assert "precip" in capsys.readouterr().out
    assert main(["demo", "--n", "100"]) == 0
    printed = capsys.readouterr().out
    assert "relative residual" in printed and "dtype=float64" in printed, printed


def _fit_args(out, *extra):
    return ["fit", "--dataset", "energy", "--num-inducing", "15", "--batch-size", "64",
            "--lr", "0.05", "--out", str(out), "--no-progress", *extra]


def test_metrics_json_names_the_version_and_only_the_commands_options(tmp_path):
    import gpnum

    assert main(_fit_args(tmp_path, "--epochs", "1")) == 0
    res = json.loads((tmp_path / "metrics.json").read_text())
    assert res["environment"]["gpnum"] == gpnum.__version__
    assert "version" not in res["settings"] and "command" not in res["settings"]


def test_jitter_option_reaches_the_model(tmp_path):
    import gpnum

    ckpt = tmp_path / "c.npz"
    assert main(_fit_args(tmp_path, "--epochs", "1", "--jitter", "0.003", "--save",
                          str(ckpt))) == 0
    assert gpnum.load(ckpt).jitter == 0.003


def test_save_every_epoch_and_resume_equals_an_uninterrupted_run(tmp_path, capsys):
    """3 epochs in one go against 2 epochs, a checkpoint, and a resumed third epoch."""
    import gpnum
    from gpnum import backend as B

    full = tmp_path / "full.npz"
    assert main(_fit_args(tmp_path / "a", "--epochs", "3", "--save", str(full))) == 0
    part = tmp_path / "part.npz"
    assert main(_fit_args(tmp_path / "b", "--epochs", "2", "--save", str(part))) == 0
    assert gpnum.load(part).training_state.epoch == 2
    capsys.readouterr()
    assert main(_fit_args(tmp_path / "c", "--epochs", "3", "--resume", str(part), "--save",
                          str(part))) == 0
    assert "resuming" in capsys.readouterr().out
    a, c = gpnum.load(full), gpnum.load(part)
    assert c.training_state.epoch == 3 and c.training_state.step == a.training_state.step
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(B.to_numpy(c.parameters()[k]), B.to_numpy(v), err_msg=k)
    ra = json.loads((tmp_path / "a" / "metrics.json").read_text())["metrics"]["test"]
    rc = json.loads((tmp_path / "c" / "metrics.json").read_text())["metrics"]["test"]
    assert ra == rc
    # Resuming on other data is refused with the options to fix it.
    assert main(_fit_args(tmp_path / "d", "--epochs", "4", "--resume", str(part), "--max-train",
                          "100")) == 2
    assert "pass the same data options" in capsys.readouterr().err


def test_csv_with_a_test_mask_file(tmp_path):
    """--csv with --test-mask trains on the rows the mask leaves and tests on the others."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (120, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.standard_normal(120)
    data = tmp_path / "d.csv"
    np.savetxt(data, np.column_stack([X, y]), delimiter=",", header="a,b,y", comments="")
    mask = np.zeros((120, 2), dtype=int)
    mask[:30, 0] = 1
    mask[90:, 1] = 1
    mpath = tmp_path / "mask.csv"
    np.savetxt(mpath, mask, fmt="%d", delimiter=",")
    out = tmp_path / "res"
    assert main(["fit", "--csv", str(data), "--test-mask", str(mpath), "--split", "1",
                 "--num-inducing", "10", "--epochs", "2", "--batch-size", "30", "--out", str(out),
                 "--no-progress"]) == 0
    res = json.loads((out / "metrics.json").read_text())
    assert res["dataset"]["n_train"] == 90 and res["dataset"]["n_test"] == 30
    assert main(["fit", "--csv", str(data), "--split", "1", "--out", str(out)]) == 2


def test_elbo_figure_shows_the_whole_curve():
    pytest.importorskip("matplotlib")
    from gpnum.cli import elbo_figure
    from gpnum.optim import History

    steps = np.arange(200)
    elbo = -2000.0 - 5e5 * np.exp(-steps / 5.0)  # a first step 250x below the last
    hist = History(step_elbo=list(elbo), step_time=list(0.1 * steps))
    fig = elbo_figure(hist, "t")
    whole = fig.axes[0]
    lo, hi = whole.get_ylim()
    assert lo <= elbo.min() and hi >= elbo.max()
    # the tail panel is readable: its range is the second half's, not the whole run's
    tail = fig.axes[1]
    lo2, hi2 = tail.get_ylim()
    assert hi2 - lo2 < 0.01 * (elbo.max() - elbo.min())
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_fit_the_exact_gp_and_its_predictions_match_a_dense_posterior(tmp_path, capsys):
    # --model gpr trains by L-BFGS; its test metrics must be those of the textbook GP posterior
    # (R&W eq. 2.25-2.26) with the hyper-parameters it reports, computed here in NumPy.
    import gpnum

    out = tmp_path / "gpr"
    status = main(["fit", "--model", "gpr", "--dataset", "energy", "--split", "0",
                   "--max-train", "200", "--kernel", "matern52", "--out", str(out),
                   "--no-progress"])
    assert status == 0
    assert "model=gpr, m=n/a" in capsys.readouterr().out
    res = json.loads((out / "metrics.json").read_text())
    p = res["parameters"]
    ds = gpnum.datasets.load("energy", split=0)
    X, y = (np.asarray(a) for a in gpnum.datasets.random_subset(ds.X_train, ds.y_train, 200,
                                                                 seed=0))
    Xt, yt = np.asarray(ds.X_test), np.asarray(ds.y_test)

    def k(A, B):
        ell = np.asarray(p["kernel.lengthscale"])
        r = np.sqrt(np.maximum(((A[:, None, :] - B[None]) ** 2 / ell**2).sum(-1), 0.0))
        s5 = np.sqrt(5.0) * r
        return p["kernel.variance"] * (1 + s5 + s5**2 / 3) * np.exp(-s5)

    s2, c = p["likelihood.variance"], p["mean"]
    Ky = k(X, X) + s2 * np.eye(len(X))
    mu = c + k(Xt, X) @ np.linalg.solve(Ky, y - c)
    var = p["kernel.variance"] - np.einsum("ij,ji->i", k(Xt, X), np.linalg.solve(Ky, k(X, Xt)))
    var_y = var + s2
    nll = np.mean(0.5 * np.log(2 * np.pi * var_y) + 0.5 * (yt - mu) ** 2 / var_y)
    rmse = np.sqrt(np.mean((yt - mu) ** 2))
    # L-BFGS drives one lengthscale of energy (a two-valued column) to ~1e-5; the kernel's
    # distances form such a dominant column exactly (gpnum/kernels/_distance.py), so the
    # predictions agree with the dense posterior to round-off amplified by K_y's conditioning.
    assert res["metrics"]["test"]["rmse"] == pytest.approx(rmse, rel=1e-7)
    assert res["metrics"]["test"]["nll"] == pytest.approx(nll, rel=1e-7, abs=1e-9)
    assert rmse < 0.1  # energy is smooth: the exact GP is far below the constant predictor's 1


@pytest.mark.parametrize("argv,message", [
    (["fit", "--model", "gpr", "--optimizer", "ngd"], "--model gpr has no variational"),
    (["fit", "--optimizer", "lbfgs"], "--optimizer lbfgs trains the full-batch models"),
    (["fit", "--model", "sgpr", "--dataset", "elec"], "--model sgpr is a Gaussian-likelihood"),
    (["fit", "--model", "gpr", "--dataset", "energy", "--whitening", "ciq"],
     "--model gpr has no whitening"),
])
def test_full_batch_models_refuse_options_they_cannot_use(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_kernel_expressions_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "expr"
    status = main(["fit", "--model", "gpr", "--dataset", "co2", "--split", "0", "--max-train",
                   "80", "--maxiter", "15", "--kernel", "rbf*periodic + white", "--out", str(out),
                   "--no-progress"])
    assert status == 0
    params = json.loads((out / "metrics.json").read_text())["parameters"]
    assert {"kernel.0.0.lengthscale", "kernel.0.1.period", "kernel.1.variance"} <= set(params)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # refused while parsing, before any data is read
        main(["fit", "--kernel", "rbf + perodic", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown kernel name 'perodic'" in err and err.count("\n") == 1


@pytest.mark.parametrize("dataset,likelihood,metric", [
    ("digits", "auto", "accuracy"),          # Softmax, 10 latent functions
    ("bikecount", "auto", "rmse"),           # Poisson counts
    ("bikecount", "negative-binomial", "rmse"),
    ("bikelog", "auto", "rmse"),             # heteroscedastic: two latent functions
])
def test_fit_trains_every_family_of_likelihood(dataset, likelihood, metric, tmp_path):
    out = tmp_path / dataset
    status = main(["fit", "--dataset", dataset, "--likelihood", likelihood, "--num-inducing",
                   "20", "--epochs", "1", "--max-train", "600", "--out", str(out),
                   "--no-progress"])
    assert status == 0
    res = json.loads((out / "metrics.json").read_text())
    assert metric in res["metrics"]["test"] and np.isfinite(res["metrics"]["test"]["nll"])
