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
