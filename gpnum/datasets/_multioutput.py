"""Bundled multi-output data: several outputs per input, some entries missing (NaN)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpnum.backend import asarray, namespace
from gpnum.datasets._csv import read_table
from gpnum.datasets._registry import bundled_file

__all__ = ["MultiOutputData", "load_multioutput"]

#: name -> (file, description)
MULTIOUTPUT = {
    "elnino": ("elnino.csv.gz",
               "monthly sea surface temperature (deg C), Nino 1+2 region, 1950-2010: input the "
               "year, 12 outputs the months (NOAA ERSST.V3B via statsmodels; public domain)"),
}


@dataclass(frozen=True)
class MultiOutputData:
    """A multi-output data set split by entries (not by rows).

    Attributes
    ----------
    X : array (n, d)
        Inputs (every row is kept: a row with held-out entries still has observed ones).
    Y_train : array (n, t)
        Training targets, NaN at the held-out entries (and at any entry the data set lacks).
    Y_test : array (n, t)
        The held-out entries, NaN elsewhere.
    input_names, output_names : tuple of str
    description : str
    """

    X: object
    Y_train: object
    Y_test: object
    input_names: tuple
    output_names: tuple
    description: str


def load_multioutput(name="elnino", *, holdout=0.3, seed=0, xp=None, dtype=None, device=None):
    """Load a bundled multi-output data set and hold out a random fraction of its entries.

    Parameters
    ----------
    name : {"elnino"}
        ``elnino``: 61 years (1950-2010) x 12 months of the Nino 1+2 sea surface temperature.
        Input: the year; outputs: January ... December (``elnino_SOURCE.md``).
    holdout : float in [0, 1)
        Fraction of the observed entries moved to ``Y_test``, drawn uniformly (a row may lose
        all its entries: its outputs are then predicted from the other rows alone).
    seed : int
        Seed of the draw (the same seed gives the same split).
    xp, dtype, device : optional
        Namespace (default ``GPNUM_BACKEND``), floating dtype and device of the arrays.

    Returns
    -------
    MultiOutputData
        Raw units (not standardised).
    """
    if name not in MULTIOUTPUT:
        raise ValueError(f"name: expected one of {sorted(MULTIOUTPUT)}, got {name!r}")
    if not (0.0 <= float(holdout) < 1.0):
        raise ValueError(f"holdout: expected a fraction in [0, 1), got {holdout!r}")
    filename, description = MULTIOUTPUT[name]
    data, names, _ = read_table(bundled_file(filename))
    X, Y = data[:, :1], data[:, 1:]
    observed = ~np.isnan(Y)
    rng = np.random.default_rng(seed)
    test = observed & (rng.uniform(size=Y.shape) < float(holdout))
    Y_train = np.where(test, np.nan, Y)
    Y_test = np.where(test, Y, np.nan)
    xp = namespace() if xp is None else xp
    kw = {"xp": xp, "dtype": dtype, "device": device}
    return MultiOutputData(asarray(X, **kw), asarray(Y_train, **kw), asarray(Y_test, **kw),
                           tuple(names[:1]), tuple(names[1:]), description)
