"""gpnum.datasets: bundled loaders and load_csv, checked against the raw files read independently.

References are the .csv.gz files parsed here with gzip + numpy (never through gpnum), their
row counts and masks, and NumPy float64 statistics of the rows each split claims to hold.
Large data sets run on numpy and torch only; the small one runs on every backend and dtype.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpnum import backend as B
from gpnum import datasets as D

DATA_DIR = Path(D.__file__).parent / "data"
SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

NAMES = ("precip", "elevators", "bike", "energy", "elec", "co2")
HEADERED = {"precip", "elec", "co2"}
MASKED = ("elevators", "bike", "energy")


@functools.cache
def raw(name):
    """The table of ``name`` read straight from its file (header dropped), float64."""
    with gzip.open(DATA_DIR / f"{name}.csv.gz", "rt") as fh:
        text = fh.read()
    return np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1 if name in HEADERED else 0)


@functools.cache
def raw_header(name):
    with gzip.open(DATA_DIR / f"{name}.csv.gz", "rt") as fh:
        return fh.readline().strip().split(",")


@functools.cache
def raw_mask(name):
    with gzip.open(DATA_DIR / f"{name}_test_mask.csv.gz", "rt") as fh:
        return np.loadtxt(fh, delimiter=",", ndmin=2)


@functools.cache
def loaded(name, split="random", seed=0):
    """One float64 NumPy load per (name, split, seed) for the whole session."""
    return D.load(name, split=split, seed=seed, xp="numpy", dtype="float64")


def _torch_or_skip():
    try:
        return B.namespace_by_name("torch")
    except Exception:
        pytest.skip("torch not installed")


# --- the bundled files and the registry ----------------------------------------------------------

def test_bundled_files_are_the_shared_data():
    if not SHARED_DIR.is_dir():
        pytest.skip("the shared data directory is not present on this machine")
    # Every shared file ships byte for byte; the package adds its own sets beside them (co2,
    # digits), each with its source and licence in the registry.
    shared = sorted(p.name for p in SHARED_DIR.glob("*.csv.gz"))
    assert set(shared) <= {p.name for p in DATA_DIR.glob("*.csv.gz")}
    for filename in shared:
        assert (DATA_DIR / filename).read_bytes() == (SHARED_DIR / filename).read_bytes(), filename


def test_loads_from_a_zipped_package(tmp_path):
    """Data are read through importlib.resources, so an installed (even zipped) package works."""
    package = Path(D.__file__).parents[1]
    archive = tmp_path / "gpnum.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(package.parent))
    code = ("import gpnum.datasets as D; ds = D.load('energy', split=2, xp='numpy'); "
            "print(D.__file__, ds.n_train, ds.n_test)")
    env = {**os.environ, "PYTHONPATH": str(archive), "GPNUM_BACKEND": "numpy"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    where, n_train, n_test = out.stdout.split()
    assert where.startswith(str(archive))
    assert (int(n_train), int(n_test)) == (768 - int(raw_mask("energy")[:, 2].sum()),
                                           int(raw_mask("energy")[:, 2].sum()))


def test_available_matches_the_raw_files():
    # digits, bikecount and bikelog (issue 34) are checked in tests/test_datasets_likelihoods.py
    infos = [i for i in D.available() if i.name not in ("digits", "bikecount", "bikelog")]
    assert sorted(i.name for i in infos) == sorted(NAMES)
    assert [i.n_rows for i in infos] == sorted(i.n_rows for i in infos)  # smallest first
    for info in infos:
        table = raw(info.name)
        assert (info.n_rows, info.n_features + 1) == table.shape
        labels = np.unique(table[:, -1])
        is_binary = labels.size == 2 and set(labels) == {0.0, 1.0}
        assert info.task == ("classification" if is_binary else "regression")
        assert info.likelihood == {"precip": "studentt", "elec": "bernoulli"}.get(info.name,
                                                                                   "gaussian")
        if info.name in MASKED:
            assert raw_mask(info.name).shape == (info.n_rows, info.n_masks) == (info.n_rows, 10)
        elif info.name == "co2":  # one forecasting mask
            assert raw_mask(info.name).shape == (info.n_rows, info.n_masks) == (info.n_rows, 1)
        else:
            assert info.n_masks == 0
        assert info.name in str(info)


def test_precip_and_elec_columns():
    precip = loaded("precip")
    assert precip.feature_names == ("Year", "X", "Y") and precip.target_name == "prcp"
    elec = loaded("elec")
    assert list(elec.feature_names) + [elec.target_name] == raw_header("elec")
    assert elec.target_name == "class"
    energy = loaded("energy")
    assert energy.feature_names == tuple(f"x{j}" for j in range(8)) and energy.target_name == "y"


def test_bike_target_is_a_function_of_its_last_two_columns():
    # docs/datasets.md warns of it: the target is the log of the hour's rental count, and the
    # last two inputs (casual and registered rentals, centred) sum to that count.
    table = raw("bike")
    count = table[:, 15] + table[:, 16]
    count = count - count.min()  # the hourly count minus 1 (its smallest value is 1)
    A = np.stack([np.log(count + 1.0), np.ones_like(count)], axis=1)
    coef, *_ = np.linalg.lstsq(A, table[:, -1], rcond=None)
    resid = table[:, -1] - A @ coef
    assert np.std(resid) < 1e-4 * np.std(table[:, -1])
    # The two columns carry it: without them the best linear fit leaves over half the spread.
    L = np.concatenate([table[:, :15], np.ones((table.shape[0], 1))], axis=1)
    coef, *_ = np.linalg.lstsq(L, table[:, -1], rcond=None)
    assert np.std(table[:, -1] - L @ coef) > 0.5 * np.std(table[:, -1])


# --- random split: sizes, partition, standardisation ---------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_random_split_partitions_the_rows(name):
    ds, table = loaded(name), raw(name)
    n, d = table.shape[0], table.shape[1] - 1
    n_train, n_val = int(0.75 * n), int(0.10 * n)
    assert (ds.n_train, ds.n_val, ds.n_test) == (n_train, n_val, n - n_train - n_val)
    assert ds.X_train.shape == (n_train, d) and ds.y_train.shape == (n_train,)
    assert ds.X_val.shape == (n_val, d) and ds.y_val.shape == (n_val,)
    assert ds.X_test.shape == (ds.n_test, d) and ds.y_test.shape == (ds.n_test,)
    allidx = np.concatenate([ds.train_index, ds.val_index, ds.test_index])
    assert np.array_equal(np.sort(allidx), np.arange(n))  # disjoint and covering
    # The parts are really a random draw, not blocks of consecutive rows.
    # (co2's 79 test rows: 0.05 would be under one standard deviation; use three)
    tol = 3.0 * 0.5 / np.sqrt(ds.n_test) if name == "co2" else 0.05
    assert abs(np.mean(ds.test_index < n // 2) - 0.5) < tol
    assert np.ptp(ds.test_index) > 0.9 * n


@pytest.mark.parametrize("name", NAMES)
def test_random_split_standardises_with_training_statistics(name):
    ds, table = loaded(name), raw(name)
    Xr, yr = table[:, :-1], table[:, -1]
    tr = ds.train_index
    np.testing.assert_allclose(ds.x_mean, Xr[tr].mean(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.x_std, Xr[tr].std(0), rtol=1e-12)
    assert np.all(np.abs(ds.X_train.mean(0)) < 1e-10)
    np.testing.assert_allclose(ds.X_train.std(0), 1.0, rtol=1e-10)
    for X, idx in ((ds.X_train, ds.train_index), (ds.X_val, ds.val_index),
                   (ds.X_test, ds.test_index)):
        np.testing.assert_allclose(X * ds.x_std + ds.x_mean, Xr[idx], rtol=1e-12, atol=1e-9)
    if ds.task == "regression":
        assert abs(ds.y_mean - yr[tr].mean()) < 1e-12 and abs(ds.y_std - yr[tr].std()) < 1e-12
        assert abs(ds.y_train.mean()) < 1e-10 and abs(ds.y_train.std() - 1.0) < 1e-10
        # Validation and test targets are mapped with the training constants, not their own.
        assert abs(ds.y_test.mean()) > 1e-6
        np.testing.assert_allclose(ds.unstandardize_y(ds.y_test), yr[ds.test_index], rtol=1e-12,
                                   atol=1e-12)
    else:
        assert (ds.y_mean, ds.y_std) == (0.0, 1.0)
        for y, idx in ((ds.y_train, ds.train_index), (ds.y_test, ds.test_index)):
            np.testing.assert_array_equal(y, yr[idx])


def test_classification_labels_stay_binary():
    ds, table = loaded("elec"), raw("elec")
    ys = np.concatenate([ds.y_train, ds.y_val, ds.y_test])
    assert set(np.unique(ys)) == {0.0, 1.0}
    assert ys.sum() == table[:, -1].sum() == 19237


def test_random_split_is_reproducible_from_the_seed():
    a, b = D.load("energy", seed=3, xp="numpy"), D.load("energy", seed=3, xp="numpy")
    for part in ("train_index", "val_index", "test_index", "X_train", "y_test"):
        assert np.array_equal(getattr(a, part), getattr(b, part))
    c = D.load("energy", seed=4, xp="numpy")
    assert not np.array_equal(a.test_index, c.test_index)
    assert not np.allclose(a.x_mean, c.x_mean)
    assert a.seed == 3 and a.split == "random"


def test_standardize_false_keeps_file_values():
    ds, table = D.load("energy", standardize=False, xp="numpy"), raw("energy")
    np.testing.assert_array_equal(ds.X_train, table[ds.train_index, :-1])
    np.testing.assert_array_equal(ds.y_test, table[ds.test_index, -1])
    assert np.all(ds.x_mean == 0.0) and np.all(ds.x_std == 1.0)
    assert (ds.y_mean, ds.y_std) == (0.0, 1.0)


# --- fixed masks ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MASKED)
@pytest.mark.parametrize("i", [0, 9])
def test_fixed_mask_split(name, i):
    ds, table, mask = loaded(name, split=i), raw(name), raw_mask(name)
    n, d = table.shape[0], table.shape[1] - 1
    np.testing.assert_array_equal(ds.test_index, np.flatnonzero(mask[:, i] == 1))
    np.testing.assert_array_equal(ds.train_index, np.flatnonzero(mask[:, i] == 0))
    assert abs(ds.n_test / n - 0.10) < 0.002
    assert ds.X_val.shape == (0, d) and ds.y_val.shape == (0,) and ds.n_val == 0
    assert ds.split == i and ds.seed is None
    np.testing.assert_allclose(ds.x_mean, table[ds.train_index, :-1].mean(0), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(ds.X_test * ds.x_std + ds.x_mean, table[ds.test_index, :-1],
                               rtol=1e-12, atol=1e-9)


# --- backends, dtypes, devices -------------------------------------------------------------------

@pytest.mark.parametrize("split", ["random", 4])
def test_outputs_on_every_backend(xp, dtype, device, split):
    ds = D.load("energy", split=split, seed=1, xp=xp, dtype=dtype, device=device)
    ref = loaded("energy", split=split, seed=1)
    atol = 1e-5 if dtype == xp.float32 else 1e-12
    for part in ("X_train", "y_train", "X_val", "y_val", "X_test", "y_test"):
        arr = getattr(ds, part)
        assert B.get_namespace(arr) is xp, part
        assert arr.dtype == dtype, part
        assert B.device_of(arr) == device, part
        np.testing.assert_allclose(B.to_numpy(arr), getattr(ref, part), rtol=0, atol=atol)
    assert isinstance(ds.x_mean, np.ndarray) and ds.x_mean.dtype == np.float64
    np.testing.assert_array_equal(ds.test_index, ref.test_index)
    # Mapping new raw inputs and predictions stays in the caller's backend.
    X_raw = B.asarray(raw("energy")[ds.test_index, :-1], dtype=dtype, xp=xp, device=device)
    Xs = ds.standardize_x(X_raw)
    assert B.get_namespace(Xs) is xp and Xs.dtype == dtype and B.device_of(Xs) == device
    np.testing.assert_allclose(B.to_numpy(Xs), ref.X_test, rtol=0, atol=10 * atol)
    y_back = ds.unstandardize_y(ds.y_test)
    assert y_back.dtype == dtype
    np.testing.assert_allclose(B.to_numpy(y_back), raw("energy")[ds.test_index, -1],
                               rtol=1e-5 if dtype == xp.float32 else 1e-12)


@pytest.mark.parametrize("name", ["precip", "elec"])
def test_big_sets_on_torch_float32(name):
    torch_xp = _torch_or_skip()
    ds, ref = D.load(name, xp=torch_xp, dtype="float32"), loaded(name)
    assert ds.X_train.dtype == torch_xp.float32 and ds.y_test.dtype == torch_xp.float32
    assert tuple(ds.X_train.shape) == ref.X_train.shape
    np.testing.assert_allclose(B.to_numpy(ds.X_test), ref.X_test, rtol=0, atol=1e-5)
    np.testing.assert_allclose(B.to_numpy(ds.y_val), ref.y_val, rtol=0, atol=1e-5)


def test_default_backend_and_dtype_come_from_the_environment(monkeypatch):
    torch_xp = _torch_or_skip()
    monkeypatch.setenv("GPNUM_BACKEND", "torch")
    monkeypatch.setenv("GPNUM_DTYPE", "float32")
    ds = D.load("energy")
    assert B.get_namespace(ds.X_train) is torch_xp and ds.X_train.dtype == torch_xp.float32
    monkeypatch.setenv("GPNUM_BACKEND", "numpy")
    monkeypatch.delenv("GPNUM_DTYPE")
    ds = D.load("energy")
    assert isinstance(ds.X_train, np.ndarray) and ds.X_train.dtype == np.float64


def test_dataset_is_immutable_and_loads_are_independent():
    ds = D.load("energy", xp="numpy")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.X_train = None
    with pytest.raises(ValueError, match="read-only"):
        ds.x_mean[0] = 1.0
    ds.X_train[:] = 0.0  # the caller's arrays are its own: the next load is unaffected
    np.testing.assert_array_equal(D.load("energy", xp="numpy").X_train, loaded("energy").X_train)
    assert "energy" in repr(ds) and "train=576" in repr(ds)


def test_standardize_x_checks_the_shape():
    ds = loaded("energy")
    with pytest.raises(Exception, match=r"X: expected shape \(n, 8\), got \(5, 3\)"):
        ds.standardize_x(np.zeros((5, 3)))


# --- load errors ---------------------------------------------------------------------------------

def test_unknown_name_lists_the_available_ones():
    with pytest.raises(ValueError, match="expected one of the bundled data sets "
                                         r"\(precip, elevators, bike, energy, elec, co2, digits, bikecount, bikelog\), got 'precp'"):
        D.load("precp")


@pytest.mark.parametrize("split", [10, -1, True, 2.0])
def test_bad_split_index(split):
    with pytest.raises(ValueError, match=r"split: expected 'random' or an integer mask index"):
        D.load("energy", split=split, xp="numpy")


def test_bad_split_string():
    with pytest.raises(ValueError, match="split: expected 'random' or an integer.*got 'fold'"):
        D.load("energy", split="fold", xp="numpy")


@pytest.mark.parametrize("name", ["precip", "elec"])
def test_split_index_without_masks(name):
    with pytest.raises(ValueError, match=f"{name!r} has no fixed test masks.*split='random'"):
        D.load(name, split=0, xp="numpy")


@pytest.mark.parametrize("seed,err", [(-1, ValueError), ("a", TypeError), (True, TypeError),
                                      (1.5, TypeError)])
def test_bad_seed(seed, err):
    with pytest.raises(err, match="seed: expected a non-negative integer"):
        D.load("energy", seed=seed, xp="numpy")


@pytest.mark.parametrize("dtype", ["float16", "int32"])
def test_bad_dtype(dtype):
    with pytest.raises(ValueError, match="dtype: expected 'float32' or 'float64'"):
        D.load("energy", dtype=dtype, xp="numpy")


def test_integer_dtype_object_rejected():
    with pytest.raises(ValueError, match="dtype: expected float32 or float64"):
        D.load("energy", dtype=np.int64, xp="numpy")


# --- load_csv ------------------------------------------------------------------------------------

def _write(path, text, gz=False):
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def _table(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.normal(size=n) * 3 + 1, rng.uniform(size=n), rng.normal(size=n)])


def _csv_text(t, header=None):
    rows = [",".join(repr(float(v)) for v in row) for row in t]
    return "\n".join(([header] if header else []) + rows) + "\n"


def test_load_csv_header_and_named_target(tmp_path):
    t = _table()
    path = _write(tmp_path / "demo.csv", _csv_text(t, "a,b,c"))
    ds = D.load_csv(path, target="b", xp="numpy")
    assert ds.name == "demo" and ds.feature_names == ("a", "c") and ds.target_name == "b"
    np.testing.assert_allclose(ds.X_train * ds.x_std + ds.x_mean, t[ds.train_index][:, [0, 2]],
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.unstandardize_y(ds.y_val), t[ds.val_index, 1], rtol=1e-12)
    assert (ds.n_train, ds.n_val, ds.n_test) == (30, 4, 6)


def test_load_csv_gzip_without_header_equals_plain(tmp_path):
    t = _table(n=25)
    plain = D.load_csv(_write(tmp_path / "p.csv", _csv_text(t)), target=0, header=None,
                       xp="numpy")
    zipped = D.load_csv(_write(tmp_path / "z.csv.gz", _csv_text(t), gz=True), target=0,
                        xp="numpy")
    assert zipped.name == "z" and plain.feature_names == ("x0", "x1") and plain.target_name == "y"
    np.testing.assert_array_equal(plain.X_train, zipped.X_train)
    np.testing.assert_allclose(plain.unstandardize_y(plain.y_train), t[plain.train_index, 0],
                               rtol=1e-12)


def test_load_csv_constant_columns_give_no_nan(tmp_path):
    t = _table(n=30)
    t[:, 1] = 0.1  # 0.1 is inexact in binary: a naive std is ~1e-17, not 0
    t[:, 2] = 7.0  # constant target
    ds = D.load_csv(_write(tmp_path / "c.csv", _csv_text(t)), header=None, xp="numpy")
    for a in (ds.X_train, ds.X_val, ds.X_test, ds.y_train, ds.y_test):
        assert np.all(np.isfinite(a))
    assert ds.x_std[1] == 1.0 and np.all(ds.X_train[:, 1] == 0.0) and np.all(ds.X_test[:, 1] == 0.0)
    assert ds.y_std == 1.0 and np.all(ds.y_train == 0.0)
    np.testing.assert_allclose(ds.X_train[:, 0].std(), 1.0, rtol=1e-12)


def test_load_csv_classification(tmp_path):
    t = _table(n=50)
    t[:, 2] = (t[:, 0] > 1).astype(float)
    ds = D.load_csv(_write(tmp_path / "cls.csv", _csv_text(t)), task="classification",
                    xp="numpy")
    assert ds.likelihood == "bernoulli" and ds.task == "classification"
    np.testing.assert_array_equal(ds.y_train, t[ds.train_index, 2])
    t[3, 2] = 2.0
    with pytest.raises(ValueError,
                       match="classification expects labels 0 and 1, got values 0, 1, 2"):
        D.load_csv(_write(tmp_path / "bad.csv", _csv_text(t)), task="classification")


def test_load_csv_with_test_masks(tmp_path):
    t = _table(n=20)
    mask = np.zeros((20, 2), dtype=int)
    mask[[1, 5, 9], 0] = 1
    mask[[0, 2], 1] = 1
    data = _write(tmp_path / "m.csv", _csv_text(t))
    mpath = _write(tmp_path / "m_mask.csv", "\n".join(",".join(map(str, r)) for r in mask))
    ds = D.load_csv(data, split=1, test_mask=mpath, xp="numpy")
    assert list(ds.test_index) == [0, 2] and ds.n_train == 18 and ds.n_val == 0
    with pytest.raises(ValueError, match="integer mask index 0..1"):
        D.load_csv(data, split=2, test_mask=mpath)
    with pytest.raises(ValueError, match="'m' has no fixed test masks"):
        D.load_csv(data, split=0)
    short = _write(tmp_path / "short.csv", "\n".join(",".join(map(str, r)) for r in mask[:19]))
    with pytest.raises(ValueError, match="short.csv: expected 20 rows .*got 19"):
        D.load_csv(data, split=0, test_mask=short)
    mask[4, 1] = 3
    three = _write(tmp_path / "three.csv", "\n".join(",".join(map(str, r)) for r in mask))
    with pytest.raises(ValueError,
                       match=r"expected only 0 and 1, got 3 in row 5, column 2"):
        D.load_csv(data, split=1, test_mask=three)
    empty_col = _write(tmp_path / "e.csv", "\n".join("0,1" for _ in range(20)))
    with pytest.raises(ValueError, match=r"split 0 \(mask column 1\) of 'm' must mark at least one test row"):
        D.load_csv(data, split=0, test_mask=empty_col)


def test_load_csv_test_mask_as_an_array(tmp_path, xp, device):
    """An array mask (any backend, (n,) or (n, K), 0/1 or bool) splits as the same file does."""
    t = _table(n=20)
    mask = np.zeros((20, 2), dtype=int)
    mask[[1, 5, 9], 0] = 1
    mask[[0, 2], 1] = 1
    data = _write(tmp_path / "m.csv", _csv_text(t))
    mpath = _write(tmp_path / "m_mask.csv", "\n".join(",".join(map(str, r)) for r in mask))
    from_file = D.load_csv(data, split=1, test_mask=mpath, xp="numpy")
    as_backend = B.asarray(mask, dtype=xp.int64, xp=xp, device=device)
    for m, split in ((as_backend, 1), (mask.astype(bool), 1), (mask[:, 1], 0),
                     (mask[:, 1].tolist(), 0)):
        ds = D.load_csv(data, split=split, test_mask=m, xp="numpy")
        assert list(ds.test_index) == [0, 2] and ds.n_train == 18
        np.testing.assert_array_equal(ds.X_train, from_file.X_train)
    with pytest.raises(ValueError, match="test_mask: expected 20 rows .*got 19"):
        D.load_csv(data, split=0, test_mask=mask[:19])
    with pytest.raises(ValueError, match=r"test_mask: expected an array of shape \(n,\) or "):
        D.load_csv(data, split=0, test_mask=np.zeros((20, 2, 1)))
    with pytest.raises(TypeError, match="test_mask: expected a path or an array of 0/1"):
        D.load_csv(data, split=0, test_mask=np.array(["a"] * 20))


@pytest.mark.parametrize("cell,what", [("nan", r"NaN \(a missing value\)"),
                                       ("inf", "an infinite value")])
def test_load_csv_non_finite_cell(tmp_path, cell, what):
    text = "a,b,c\n1,2,3\n4,5,6\n7," + cell + ",9\n1,1,1\n"
    with pytest.raises(ValueError, match=r"bad.csv: line 4, column 2 \('b'\): expected a finite "
                                         f"number, got {what}"):
        D.load_csv(_write(tmp_path / "bad.csv", text))


@pytest.mark.parametrize("cell,what", [("abc", "'abc'"), ("", "an empty cell"),
                                       ("1.2.3", "'1.2.3'")])
def test_load_csv_non_numeric_cell(tmp_path, cell, what):
    text = "1,2,3\n4,5,6\n\n7,8," + cell + "\n"
    with pytest.raises(ValueError, match=r"line 4, column 3 \('col2'\): expected a number, got "
                                         + what):
        D.load_csv(_write(tmp_path / "bad.csv", text), header=None)


def test_load_csv_ragged_row(tmp_path):
    with pytest.raises(ValueError, match="line 3: expected 3 comma-separated cells, got 2"):
        D.load_csv(_write(tmp_path / "r.csv.gz", "1,2,3\n4,5,6\n7,8\n", gz=True))


def test_load_csv_header_without_inference_is_a_bad_cell(tmp_path):
    with pytest.raises(ValueError,
                       match=r"line 1, column 1 \('col0'\): expected a number, got 'a'"):
        D.load_csv(_write(tmp_path / "h.csv", "a,b\n1,2\n3,4\n"), header=None)
    with pytest.raises(ValueError, match="header: expected None or 'infer', got True"):
        D.load_csv(_write(tmp_path / "h2.csv", "1,2\n3,4\n"), header=True)


def test_load_csv_empty_files(tmp_path):
    with pytest.raises(ValueError, match="expected a table of numbers, got an empty file"):
        D.load_csv(_write(tmp_path / "empty.csv", "\n\n"))
    with pytest.raises(ValueError, match="at least one row of data after the header"):
        D.load_csv(_write(tmp_path / "head.csv", "a,b\n"))
    with pytest.raises(ValueError, match="expected at least 2 columns"):
        D.load_csv(_write(tmp_path / "one.csv", "1\n2\n3\n4\n"))
    with pytest.raises(ValueError, match="needs at least 2 rows, got 1"):
        D.load_csv(_write(tmp_path / "row.csv", "1,2\n"))
    with pytest.raises(FileNotFoundError, match="path: expected an existing CSV file"):
        D.load_csv(tmp_path / "missing.csv")


@pytest.mark.parametrize("target,err,msg", [
    (3, ValueError, r"target: expected a column index in -3..2 for a file with 3 columns, got 3"),
    (-4, ValueError, r"target: expected a column index in -3..2 .*got -4"),
    ("d", ValueError, r"target: expected one of the header's columns \(a, b, c\), got 'd'"),
    (1.0, TypeError, "target: expected a column index or a header name"),
    (True, TypeError, "target: expected a column index or a header name"),
])
def test_load_csv_bad_target(tmp_path, target, err, msg):
    path = _write(tmp_path / "t.csv", _csv_text(_table(n=10), "a,b,c"))
    with pytest.raises(err, match=msg):
        D.load_csv(path, target=target)


def test_load_csv_target_name_needs_a_header(tmp_path):
    path = _write(tmp_path / "t.csv", _csv_text(_table(n=10)))
    with pytest.raises(ValueError, match="target: a column name \\('a'\\) needs a header line"):
        D.load_csv(path, target="a")


@pytest.mark.parametrize("kwargs,msg", [
    ({"task": "ranking"}, "task: expected one of regression, classification, multiclass, counts, got 'ranking'"),
    ({"likelihood": "poison"}, "likelihood: expected one of gaussian, studentt, bernoulli"),
    ({"likelihood": "bernoulli"}, "likelihood: 'bernoulli' does not suit task 'regression'"),
])
def test_load_csv_bad_task_or_likelihood(tmp_path, kwargs, msg):
    path = _write(tmp_path / "t.csv", _csv_text(_table(n=10)))
    with pytest.raises(ValueError, match=msg):
        D.load_csv(path, **kwargs)


def test_load_csv_studentt_and_targets_in_the_middle(tmp_path):
    t = _table(n=12)
    ds = D.load_csv(_write(tmp_path / "s.csv", _csv_text(t)), target=1, likelihood="studentt",
                    name="heavy", xp="numpy")
    assert ds.name == "heavy" and ds.likelihood == "studentt"
    assert ds.feature_names == ("x0", "x1") and ds.target_name == "y"
    np.testing.assert_allclose(ds.X_test * ds.x_std + ds.x_mean, t[ds.test_index][:, [0, 2]],
                               rtol=1e-12, atol=1e-12)
