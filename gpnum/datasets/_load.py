"""Public loaders: :func:`load` for the bundled data sets, :func:`load_csv` for any CSV file."""

from __future__ import annotations

import os

import numpy as np

from gpnum.datasets._csv import read_table
from gpnum.datasets._dataset import Dataset, build_dataset, check_mask
from gpnum.datasets._registry import BUNDLED, read_bundled, read_bundled_mask, unknown_name_error

__all__ = ["load", "load_csv"]


def load(name: str, *, split="random", seed=0, standardize: bool = True, xp=None, dtype=None,
         device=None) -> Dataset:
    """Load a bundled data set, split and standardised, as arrays of the target backend.

    Parameters
    ----------
    name : {"precip", "elevators", "bike", "energy", "elec", "co2"}
        See :func:`available` for sizes and tasks.
    split : "random" or int
        ``"random"``: a 75 / 10 / 15 % train / validation / test split drawn from ``seed``
        (the protocol of Pleiss et al. 2020). An integer ``i`` in ``0..9``: the fixed 90 / 10
        train / test mask ``i`` shipped with elevators, bike and energy (empty validation part);
        co2 has one mask, ``0``, whose test part is the last 52 months (a forecasting split).
    seed : int
        Seed of the random split (ignored for a fixed mask).
    standardize : bool
        Standardise inputs and regression targets with training-set statistics (default). With
        ``False`` the arrays keep their file values and ``x_mean = 0``, ``x_std = 1``.
    xp : namespace or str, optional
        Target array namespace, or a backend name (``"numpy"``, ``"torch"``, ...); default
        ``gpnum.backend.namespace()`` (from ``GPNUM_BACKEND``).
    dtype : dtype or {"float32", "float64"}, optional
        Floating dtype of all arrays, labels included; default ``GPNUM_DTYPE``.
    device : optional
        Target device; default the namespace's default device.

    Returns
    -------
    Dataset

    Raises
    ------
    ValueError
        Unknown ``name`` (the message lists the bundled ones), an integer ``split`` for a data
        set without masks or out of ``0..9``, a bad ``seed`` or ``dtype``.

    Examples
    --------
    >>> from gpnum import datasets
    >>> ds = datasets.load("energy", xp="numpy")
    >>> ds.X_train.shape, ds.X_val.shape, ds.X_test.shape
    ((576, 8), (76, 8), (116, 8))
    """
    if not isinstance(name, str) or name not in BUNDLED:
        raise unknown_name_error(name)
    info, _, _ = BUNDLED[name]
    data, names = read_bundled(name)
    mask = read_bundled_mask(name)
    return build_dataset(data, target=data.shape[1] - 1, name=name, task=info.task,
                         likelihood=info.likelihood, split=split, seed=seed, mask=mask,
                         standardize=standardize, names=names, xp=xp, dtype=dtype, device=device)


def _dataset_name(path) -> str:
    base = os.path.basename(os.fspath(path))
    for suffix in (".gz", ".csv", ".txt"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def _read_mask(test_mask, n_rows):
    """A 0/1 test mask from a CSV path or an array of any backend, as float64 (n, K)."""
    if isinstance(test_mask, (str, os.PathLike)):
        mask_data, _, _ = read_table(test_mask, header=None)
        return check_mask(mask_data, n_rows, source=os.fspath(test_mask))
    from gpnum.backend import is_array, to_numpy

    try:
        raw = to_numpy(test_mask) if is_array(test_mask) else np.asarray(test_mask)
    except Exception as exc:  # a ragged list, an object that is no array
        raise TypeError(f"test_mask: expected a path or an array of 0/1, got "
                        f"{type(test_mask).__name__} ({exc})") from None
    if raw.dtype == bool:
        raw = raw.astype(np.float64)
    if not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise TypeError(f"test_mask: expected a path or an array of 0/1, got an array of "
                        f"dtype {raw.dtype}")
    if raw.ndim == 1:
        raw = raw[:, None]
    if raw.ndim != 2:
        raise ValueError(f"test_mask: expected an array of shape (n,) or (n, K), got shape "
                         f"{raw.shape}")
    return check_mask(np.asarray(raw, dtype=np.float64), n_rows, source="test_mask")


def load_csv(path, *, target=-1, header="infer", task: str = "regression", likelihood=None,
             split="random", seed=0, test_mask=None, standardize: bool = True, name=None,
             xp=None, dtype=None, device=None) -> Dataset:
    """Load any numeric CSV file (optionally gzip-compressed) with the conventions of :func:`load`.

    Parameters
    ----------
    path : str or os.PathLike
        A comma-separated file of numbers, one row per data point; ``.gz`` files (or any file
        starting with the gzip magic bytes) are decompressed.
    target : int or str
        The target column: an index into all columns (negative counts from the end; default the
        last), or a header name. Every other column is an input.
    header : {"infer", None}
        ``"infer"``: the first line is a header if any of its cells is not a number. ``None``:
        there is no header (columns are named ``x0, x1, ...`` and ``y``).
    task : {"regression", "classification"}
        Classification targets must be 0 or 1 and are not standardised.
    likelihood : {"gaussian", "studentt", "bernoulli"}, optional
        Suggested observation model; default ``"gaussian"`` for regression, ``"bernoulli"`` for
        classification.
    split, seed, standardize, xp, dtype, device
        As in :func:`load`. An integer ``split`` needs ``test_mask``.
    test_mask : str, os.PathLike or array, optional
        Fixed train/test splits: a CSV file of 0/1, or an array of 0/1 (or booleans) of shape
        (n,) (one split) or (n, K) (K splits), one row per data row; ``1`` marks a test row.
        ``split`` picks the column.
    name : str, optional
        Name of the data set; default the file name without ``.csv``/``.gz``.

    Returns
    -------
    Dataset

    Raises
    ------
    FileNotFoundError
        ``path`` or ``test_mask`` does not exist.
    TypeError
        ``test_mask`` is neither a path nor a numeric array.
    ValueError
        An empty file, a ragged row, a cell that is not a number or is NaN/Inf (the message gives
        the line and column), a ``target`` out of range or not in the header, classification
        labels other than 0/1, a bad mask file or split.
    """
    data, names, has_header = read_table(path, header=header)
    n, c = data.shape
    if isinstance(target, str):
        if not has_header:
            raise ValueError(f"target: a column name ({target!r}) needs a header line, but "
                             f"{os.fspath(path)!r} has none; pass a column index")
        if target not in names:
            raise ValueError(f"target: expected one of the header's columns "
                             f"({', '.join(names)}), got {target!r}")
        target_index = names.index(target)
    elif isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(f"target: expected a column index or a header name, got {target!r}")
    elif not -c <= target < c:
        raise ValueError(f"target: expected a column index in {-c}..{c - 1} for a file with {c} "
                         f"columns, got {target}")
    else:
        target_index = target % c
    if not has_header:
        names = tuple(f"x{j}" for j in range(c - 1))
        names = names[:target_index] + ("y",) + names[target_index:]

    mask = None
    if test_mask is not None:
        mask = _read_mask(test_mask, n)
    return build_dataset(data, target=target_index, name=name or _dataset_name(path), task=task,
                         likelihood=likelihood, split=split, seed=seed, mask=mask,
                         standardize=standardize, names=names, xp=xp, dtype=dtype, device=device)
