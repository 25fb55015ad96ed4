"""Minibatches streamed from .npy files (gpnum.datasets.NpyBatches)."""

import numpy as np
import pytest

import gpnum
from gpnum.datasets import NpyBatches
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian


def _files(tmp_path, n=500, d=3):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (n, d))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return X, y


def test_batches_are_rows_of_the_files_and_reproducible(tmp_path):
    X, y = _files(tmp_path)
    stream = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 64, seed=3)
    assert (stream.num_rows, stream.num_features, stream.steps_per_epoch) == (500, 3, 7)
    seen = []
    for rows, (Xb, yb) in zip(stream.rows(0), stream(0), strict=False):
        assert rows.shape == (64,) and np.all(np.diff(rows) > 0)  # sorted, no repeats
        np.testing.assert_array_equal(Xb, X[rows])
        np.testing.assert_array_equal(yb, y[rows])
        seen.append(rows)
    assert len(seen) == 7
    again = list(NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 64, seed=3).rows(0))
    assert all(np.array_equal(a, b) for a, b in zip(seen, again, strict=False))
    assert not np.array_equal(seen[0], next(stream.rows(1)))  # a new draw each epoch
    # drawn from the whole set: over many batches every region of the file is read
    rows = np.concatenate(list(NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 64,
                                          steps_per_epoch=50).rows(0)))
    assert np.histogram(rows, bins=5, range=(0, 500))[0].min() > 0.15 * rows.size


def test_fit_trains_from_disk(tmp_path):
    X, y = _files(tmp_path)
    model = gpnum.SVGP(Matern52(lengthscale=np.ones(3)), Gaussian(variance=0.5), X[:15].copy(),
                       num_data=500)
    stream = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 100, seed=1)
    before = float(model.elbo(X, y))
    history = gpnum.fit(model, batches=stream, epochs=6, optimizer="adam", lr=0.05,
                        progress=False)
    assert history.num_steps == 30
    assert float(model.elbo(X, y)) > before + 100.0  # the full-data ELBO improved


def test_bad_files(tmp_path):
    _files(tmp_path)
    np.save(tmp_path / "short.npy", np.zeros(10))
    np.save(tmp_path / "ints.npy", np.zeros((500, 3), dtype=np.int64))
    (tmp_path / "junk.npy").write_bytes(b"not an npy file")
    with pytest.raises(gpnum.ShapeError, match="same n"):
        NpyBatches(tmp_path / "X.npy", tmp_path / "short.npy")
    with pytest.raises(ValueError, match="float arrays"):
        NpyBatches(tmp_path / "ints.npy", tmp_path / "y.npy")
    with pytest.raises(ValueError, match="not a readable .npy"):
        NpyBatches(tmp_path / "junk.npy", tmp_path / "y.npy")
    with pytest.raises(ValueError, match="batch_size"):
        NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 501)
