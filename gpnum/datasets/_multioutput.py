"""Multi-output data: several outputs per input, some entries missing (NaN), split by entries."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpnum.backend import asarray
from gpnum.datasets._csv import read_table
from gpnum.datasets._dataset import _resolve_backend
from gpnum.datasets._registry import bundled_file

__all__ = ["MultiOutputData", "load_multioutput", "load_multioutput_csv", "MULTIOUTPUT"]

#: name -> (file, description)
MULTIOUTPUT = {
    "elnino": ("elnino.csv.gz",
               "monthly sea surface temperature (deg C), Nino 1+2 region, 1950-2010: input the "
               "year, 12 outputs the months (NOAA ERSST.V3B via statsmodels; public domain)"),
    "fertility": ("fertility.csv.gz",
                  "total fertility rate (births per woman), 1960-2011, of eight Eastern "
                  "Caribbean countries: input the year, 8 outputs the countries; 91 of the 416 "
                  "entries missing in the source (World Bank World Development Indicators via "
                  "statsmodels; CC BY 4.0)"),
}


@dataclass(frozen=True)
class MultiOutputData:
    """A multi-output data set split by entries (not by rows).

    Attributes
    ----------
    X : array (n, d)
        Inputs (every row is kept: a row with held-out entries still has observed ones).
    Y_train : array (n, t)
        Training targets, NaN at the held-out entries and at any entry the data set lacks.
    Y_test : array (n, t)
        The held-out entries, NaN elsewhere.
    input_names, output_names : tuple of str
    description : str
    y_mean, y_std : numpy arrays (t,)
        What was removed from each output: ``Y = (Y_raw - y_mean) / y_std`` (zeros and ones
        when the targets are in raw units).
    """

    X: object
    Y_train: object
    Y_test: object
    input_names: tuple
    output_names: tuple
    description: str
    y_mean: np.ndarray = field(default=None)
    y_std: np.ndarray = field(default=None)


def _check_holdout(holdout):
    if not (0.0 <= float(holdout) < 1.0):
        raise ValueError(f"holdout: expected a fraction in [0, 1), got {holdout!r}")
    return float(holdout)


def _split(X, Y, names, num_inputs, description, holdout, seed, standardize, xp, dtype,
           device):
    """Hold out a seeded fraction of the observed entries; optionally standardise each input
    column (over all rows) and each output (over its training entries)."""
    observed = ~np.isnan(Y)
    rng = np.random.default_rng(seed)
    test = observed & (rng.uniform(size=Y.shape) < holdout)
    Y_train = np.where(test, np.nan, Y)
    Y_test = np.where(test, Y, np.nan)
    t = Y.shape[1]
    y_mean, y_std = np.zeros(t), np.ones(t)
    if standardize:
        empty = [names[num_inputs + a] for a in range(t) if np.isnan(Y_train[:, a]).all()]
        if empty:
            raise ValueError(f"output(s) {empty}: no observed training entry to standardise by")
        x_std = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(x_std > 0.0, x_std, 1.0)
        y_mean = np.nanmean(Y_train, axis=0)
        std = np.nanstd(Y_train, axis=0)
        y_std = np.where(std > 0.0, std, 1.0)
        Y_train = (Y_train - y_mean) / y_std
        Y_test = (Y_test - y_mean) / y_std
    xp, dtype, device = _resolve_backend(xp, dtype, device)
    kw = {"xp": xp, "dtype": dtype, "device": device}
    return MultiOutputData(asarray(X, **kw), asarray(Y_train, **kw), asarray(Y_test, **kw),
                           tuple(names[:num_inputs]), tuple(names[num_inputs:]), description,
                           y_mean, y_std)


def load_multioutput(name="elnino", *, holdout=0.3, seed=0, xp=None, dtype=None, device=None):
    """Load a bundled multi-output data set and hold out a random fraction of its entries.

    Parameters
    ----------
    name : {"elnino", "fertility"}
        ``elnino``: 61 years (1950-2010) x 12 months of the Nino 1+2 sea surface temperature,
        nothing missing (``elnino_SOURCE.md``). ``fertility``: 52 years (1960-2011) x 8 Eastern
        Caribbean countries' total fertility rate (Antigua and Barbuda, Barbados, Dominica,
        Grenada, St. Kitts and Nevis, St. Lucia, St. Vincent and the Grenadines, Trinidad and
        Tobago), with 91 entries missing in the source: Dominica and St. Kitts and Nevis are
        observed in a few years only (``fertility_SOURCE.md``). Input: the year.
    holdout : float in [0, 1)
        Fraction of the observed entries moved to ``Y_test``, drawn uniformly (a row may lose
        all its entries: its outputs are then predicted from the other rows alone). Entries
        missing in the source are in neither part.
    seed : int
        Seed of the draw (the same seed gives the same split).
    xp, dtype, device : optional
        Namespace or backend name (default ``GPNUM_BACKEND``), floating dtype and device of
        the arrays.

    Returns
    -------
    MultiOutputData
        Raw units (not standardised).
    """
    if name not in MULTIOUTPUT:
        raise ValueError(f"name: expected one of {sorted(MULTIOUTPUT)}, got {name!r}")
    holdout = _check_holdout(holdout)
    filename, description = MULTIOUTPUT[name]
    data, names, _ = read_table(bundled_file(filename), missing=True)
    return _split(data[:, :1], data[:, 1:], names, 1, description, holdout, seed, False, xp,
                  dtype, device)


def load_multioutput_csv(path, num_outputs, *, holdout=0.15, seed=0, standardize=True,
                         header="infer", xp=None, dtype=None, device=None):
    """Load a CSV whose last ``num_outputs`` columns are outputs and hold out some entries.

    Parameters
    ----------
    path : str or path-like
        Numbers, comma-separated, gzip allowed; a header is inferred. In the output columns an
        empty cell, ``nan`` or ``NA`` is a missing entry; the input columns must be complete.
    num_outputs : int
        ``t``: the last ``t`` columns are the outputs, the columns before them the inputs (at
        least one).
    holdout : float in [0, 1)
        Fraction of the observed entries held out as ``Y_test`` (seeded by ``seed``).
    standardize : bool
        Remove each input column's mean and standard deviation (over all rows) and each
        output's (over its training entries); ``y_mean`` and ``y_std`` record the latter.
    header, xp, dtype, device
        As for :func:`gpnum.datasets.load_csv`.

    Returns
    -------
    MultiOutputData
    """
    holdout = _check_holdout(holdout)
    data, names, _ = read_table(path, header=header, missing=True)
    t = int(num_outputs)
    if t < 1 or t >= data.shape[1]:
        raise ValueError(f"num_outputs: expected 1 <= t < {data.shape[1]} (the columns of "
                         f"{path}, at least one of them an input), got {num_outputs!r}")
    X, Y = data[:, :-t], data[:, -t:]
    bad = np.argwhere(np.isnan(X))
    if bad.size:
        r, j = (int(v) for v in bad[0])
        raise ValueError(f"{path}: data row {r + 1}, column {j + 1} ({names[j]!r}) is an input "
                         "and is missing; only the output columns (the last "
                         f"{t}) may have missing cells")
    empty = [names[X.shape[1] + a] for a in range(t) if np.isnan(Y[:, a]).all()]
    if empty:
        raise ValueError(f"{path}: output column(s) {empty} have no observed entry")
    return _split(X, Y, names, X.shape[1], f"{path}: {t} outputs", holdout, seed, standardize,
                  xp, dtype, device)
