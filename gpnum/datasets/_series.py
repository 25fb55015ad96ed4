"""Multivariate series (columns of a CSV, or the bundled Elec2 demand) for hidden Markov models."""

from __future__ import annotations

import numpy as np

from gpnum.datasets._csv import read_table
from gpnum.datasets._registry import bundled_file

__all__ = ["load_series"]

#: The bundled real series: the two demand columns of Elec2 (NSW and Victoria, half-hourly).
ELEC_COLUMNS = ("nswdemand", "vicdemand")


def load_series(path=None, columns=None, *, standardize=True):
    """Read a series of ``T`` steps and ``D`` channels from columns of a CSV.

    Parameters
    ----------
    path : str or os.PathLike, optional
        A CSV with a header row (``.gz`` allowed). Default: the bundled ``elec`` data, with
        columns ``nswdemand, vicdemand`` unless ``columns`` says otherwise.
    columns : sequence of str, optional
        Column names, or 0-based indices written as strings (``"0"``); default: every column
        of ``path``.
    standardize : bool
        Centre each column and scale it to unit standard deviation (constant columns are only
        centred).

    Returns
    -------
    Y : numpy.ndarray (T, D), float64
        The series, standardised if asked.
    Y_raw : numpy.ndarray (T, D), float64
        The columns as read.
    names : list of str
        The columns' names.
    label : str
        Where the series came from, for messages and reports.
    """
    if path is None:
        source, label = bundled_file("elec.csv.gz"), "elec (bundled)"
        wanted = list(ELEC_COLUMNS) if columns is None else list(columns)
    else:
        source, label = path, str(path)
        wanted = None if columns is None else list(columns)
    if wanted is not None and not wanted:
        raise ValueError("load_series: columns is empty; name at least one column")
    data, names, _ = read_table(source)
    names = list(names)
    if wanted is None:
        idx = list(range(data.shape[1]))
    else:
        idx = []
        for w in wanted:
            w = str(w)
            if w in names:
                idx.append(names.index(w))
            elif w.isdigit() and int(w) < data.shape[1]:
                idx.append(int(w))
            else:
                raise ValueError(f"columns: no column {w!r} in {label}; its columns are "
                                 f"{', '.join(names)}")
    Y_raw = np.ascontiguousarray(data[:, idx])
    if Y_raw.shape[0] < 2:
        raise ValueError(f"{label}: expected a series of at least 2 steps, got {Y_raw.shape[0]}")
    Y = Y_raw
    if standardize:
        sd = Y_raw.std(axis=0)
        Y = (Y_raw - Y_raw.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return Y, Y_raw, [names[i] for i in idx], label
