"""The data sets of issue 34 (digits, bikecount, bikelog) against their raw files, read here
with gzip + NumPy (never through gpnum)."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from gpnum import datasets as D
from gpnum.likelihoods import from_name

DATA_DIR = Path(D.__file__).parent / "data"


def _raw(name):
    with gzip.open(DATA_DIR / f"{name}.csv.gz", "rt") as fh:
        return np.loadtxt(fh, delimiter=",")


def test_digits_is_the_scikit_learn_copy():
    table = _raw("digits")
    assert table.shape == (1797, 65)
    assert set(np.unique(table[:, -1])) == set(range(10))
    assert table[:, :64].min() == 0 and table[:, :64].max() == 16
    sklearn = pytest.importorskip("sklearn.datasets")
    X, y = sklearn.load_digits(return_X_y=True)
    np.testing.assert_array_equal(table[:, :64], X)
    np.testing.assert_array_equal(table[:, -1], y)
    ds = D.load("digits", xp="numpy", dtype="float64")
    assert ds.task == "multiclass" and ds.likelihood == "softmax"
    # labels are not standardised; inputs are
    assert set(np.unique(np.concatenate([ds.y_train, ds.y_val, ds.y_test]))) == set(range(10))
    np.testing.assert_array_equal(ds.y_test, table[ds.test_index, -1])


def test_bike_counts_and_their_log():
    bike = _raw("bike")
    count = bike[:, 15] + bike[:, 16]
    count = count - count.min() + 1.0
    assert np.max(np.abs(count - np.round(count))) < 0.01  # the centred columns keep integers
    count = np.round(count)
    assert count.min() == 1 and count.max() == 977  # UCI's hourly cnt range
    # the bundled bike target is an affine function of log(count): the derivation is right
    A = np.stack([np.log(count), np.ones_like(count)], axis=1)
    resid = bike[:, -1] - A @ np.linalg.lstsq(A, bike[:, -1], rcond=None)[0]
    assert np.std(resid) < 1e-4 * np.std(bike[:, -1])
    for split in ("random", 4):
        ds = D.load("bikecount", split=split, xp="numpy", dtype="float64")
        assert ds.task == "counts" and ds.likelihood == "poisson" and ds.y_std == 1.0
        assert ds.X_train.shape[1] == 15
        np.testing.assert_array_equal(ds.y_test, count[ds.test_index])
        log = D.load("bikelog", split=split, xp="numpy", dtype="float64")
        np.testing.assert_allclose(log.unstandardize_y(log.y_test), np.log(count[log.test_index]),
                                   rtol=1e-12)
        assert log.likelihood == "heteroscedastic-gaussian"


@pytest.mark.parametrize("info", D.available(), ids=lambda i: i.name)
def test_every_registry_likelihood_builds(info):
    k = 10 if info.task == "multiclass" else None
    lik = from_name(info.likelihood, num_classes=k, xp=np, dtype=np.float64)
    ds = D.load(info.name, xp="numpy", dtype="float64") if info.n_rows < 20_000 else None
    if ds is not None and info.task in ("multiclass", "counts"):
        lik.check_targets(ds.y_train)
