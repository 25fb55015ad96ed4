"""The bundled multi-output data set: shape, values against the file, the entry split."""

import gzip

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.datasets._registry import bundled_file


def test_elnino_split_by_entries(xp, device):
    d = gpnum.datasets.load_multioutput("elnino", holdout=0.3, seed=1, xp=xp, device=device)
    Y, Yt = B.to_numpy(d.Y_train), B.to_numpy(d.Y_test)
    assert B.to_numpy(d.X).shape == (61, 1) and Y.shape == (61, 12)
    assert d.output_names[0] == "JAN" and d.output_names[-1] == "DEC"
    # every entry is in exactly one part
    assert np.all(np.isnan(Y) != np.isnan(Yt))
    frac = np.isnan(Y).mean()
    assert 0.2 < frac < 0.4
    with bundled_file("elnino.csv.gz").open("rb") as fh:
        rows = gzip.decompress(fh.read()).decode().strip().splitlines()
    first = [float(v) for v in rows[1].split(",")]
    assert first[0] == 1950.0
    both = np.where(np.isnan(Y), Yt, Y)
    np.testing.assert_allclose(both[0], first[1:], rtol=1e-6)
    np.testing.assert_allclose(B.to_numpy(d.X)[-1, 0], 2010.0)
    again = gpnum.datasets.load_multioutput("elnino", holdout=0.3, seed=1, xp=xp, device=device)
    np.testing.assert_array_equal(np.isnan(B.to_numpy(again.Y_train)), np.isnan(Y))


def test_bad_arguments():
    with pytest.raises(ValueError, match="name"):
        gpnum.datasets.load_multioutput("jura")
    with pytest.raises(ValueError, match="holdout"):
        gpnum.datasets.load_multioutput("elnino", holdout=1.0)


def test_fertility_has_the_sources_own_missing_entries(xp, device):
    d = gpnum.datasets.load_multioutput("fertility", holdout=0.3, seed=2, xp=xp, device=device)
    Y, Yt = B.to_numpy(d.Y_train), B.to_numpy(d.Y_test)
    assert B.to_numpy(d.X).shape == (52, 1) and Y.shape == (52, 8)
    assert d.output_names == ("ATG", "BRB", "DMA", "GRD", "KNA", "LCA", "VCT", "TTO")
    with bundled_file("fertility.csv.gz").open("rb") as fh:
        rows = [r.split(",") for r in gzip.decompress(fh.read()).decode().strip().splitlines()]
    raw = np.array([[float(c) if c else np.nan for c in r[1:]] for r in rows[1:]])
    native = np.isnan(raw)
    assert native.sum() == 91 and (~native).sum(axis=0).tolist() == [52, 52, 7, 52, 6, 52, 52, 52]
    assert raw[12, 2] == 5.5  # Dominica, 1972 (statsmodels' fertility.csv)
    # a native gap is in neither part; every observed entry is in exactly one
    assert np.all(np.isnan(Y[native]) & np.isnan(Yt[native]))
    assert np.all(np.isnan(Y[~native]) != np.isnan(Yt[~native]))
    np.testing.assert_allclose(np.where(np.isnan(Y), Yt, Y)[~native], raw[~native], rtol=1e-6)
    assert 0.2 < np.isnan(Y[~native]).mean() < 0.4


def test_load_multioutput_csv_standardises_by_the_training_entries(tmp_path, xp, device):
    path = tmp_path / "t.csv"
    path.write_text("x,y1,y2\n0,1,\n1,2,10\n2,NA,20\n3,4,nan\n4,5,40\n")
    d = gpnum.datasets.load_multioutput_csv(path, 2, holdout=0.0, xp=xp, device=device)
    X, Y = B.to_numpy(d.X), B.to_numpy(d.Y_train)
    raw = np.array([[1, np.nan], [2, 10], [np.nan, 20], [4, np.nan], [5, 40]])
    np.testing.assert_allclose(X[:, 0], (np.arange(5) - 2.0) / np.sqrt(2.0), rtol=1e-6)
    np.testing.assert_allclose(d.y_mean, [3.0, 70.0 / 3.0])
    np.testing.assert_allclose(d.y_std, [np.std([1, 2, 4, 5]), np.std([10, 20, 40])])
    np.testing.assert_array_equal(np.isnan(Y), np.isnan(raw))
    np.testing.assert_allclose(Y[~np.isnan(raw)],
                               ((raw - d.y_mean) / d.y_std)[~np.isnan(raw)], rtol=1e-6)
    assert d.input_names == ("x",) and d.output_names == ("y1", "y2")
    assert np.all(np.isnan(B.to_numpy(d.Y_test)))


def test_csv_cells_may_be_missing_only_when_asked():
    from gpnum.datasets._csv import decode_table

    data, _, _ = decode_table("a,b\n1,\n2,NA\n3,nan\n", missing=True)
    assert np.isnan(data[:, 1]).all() and data[:, 0].tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="an empty cell"):
        decode_table("a,b\n1,\n", missing=False)
    with pytest.raises(ValueError, match="infinite value"):
        decode_table("a,b\n1,inf\n", missing=True)
    with pytest.raises(ValueError, match="expected 2 comma-separated cells"):
        decode_table("a,b\n1,2,3\n", missing=True)
