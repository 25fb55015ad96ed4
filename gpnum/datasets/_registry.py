"""The data sets bundled inside the package, read through :mod:`importlib.resources`.

The compressed CSV files live in ``gpnum/datasets/data/`` so that an installed wheel can run the
examples with no download. Parsed host tables are cached for the life of the process (read-only),
so loading several splits or backends of one data set parses its file once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import numpy as np

from gpnum.datasets._csv import read_table

__all__ = ["DatasetInfo", "BUNDLED", "available", "bundled_file", "read_bundled",
           "read_bundled_mask", "unknown_name_error"]


@dataclass(frozen=True)
class DatasetInfo:
    """What :func:`available` says about one bundled data set.

    Attributes
    ----------
    name : str
    n_rows : int
        Number of data rows ``n`` (header excluded).
    n_features : int
        Number of input columns ``d``.
    task : {"regression", "classification", "multiclass", "counts"}
    likelihood : str
        A name :func:`gpnum.likelihoods.from_name` accepts, e.g. "gaussian", "studentt",
        "bernoulli", "softmax", "poisson", "heteroscedastic-gaussian".
        The suggested observation model.
    n_masks : int
        Number of fixed 90/10 train/test masks (``0``: only ``split="random"``).
    description : str
    """

    name: str
    n_rows: int
    n_features: int
    task: str
    likelihood: str
    n_masks: int
    description: str

    def __str__(self) -> str:
        masks = f"{self.n_masks} fixed masks" if self.n_masks else "random split only"
        return (f"{self.name:<10} {self.n_rows:>7} x {self.n_features:<2} {self.task:<14} "
                f"{self.likelihood:<9} {masks:<17} {self.description}")


#: Registry of the bundled data sets: info, file name, header flag and target column.
BUNDLED = {
    "precip": (DatasetInfo(
        "precip", 101_270, 3, "regression", "studentt", 0,
        "global precipitation on a 2.5 deg grid, 2010-2019 (Pleiss et al. 2020); "
        "inputs Year, X (lon), Y (lat), heavy-tailed target prcp"),
        "precip.csv.gz", "infer"),
    "elevators": (DatasetInfo(
        "elevators", 16_599, 18, "regression", "gaussian", 10,
        "UCI elevators (F16 aircraft control), uci_datasets copy"),
        "elevators.csv.gz", None),
    "bike": (DatasetInfo(
        "bike", 17_379, 17, "regression", "gaussian", 10,
        "UCI bike sharing, hourly, uci_datasets copy; "
        "the target is log(count), count = x15 + x16 + const"),
        "bike.csv.gz", None),
    "energy": (DatasetInfo(
        "energy", 768, 8, "regression", "gaussian", 10,
        "UCI energy efficiency of buildings, uci_datasets copy"),
        "energy.csv.gz", None),
    "elec": (DatasetInfo(
        "elec", 45_312, 6, "classification", "bernoulli", 0,
        "Elec2 NSW electricity market: price goes up (1) or down (0) vs its 24 h average"),
        "elec.csv.gz", "infer"),
    "co2": (DatasetInfo(
        "co2", 521, 1, "regression", "gaussian", 1,
        "Mauna Loa CO2 (ppmv), monthly means 1958-2001 of NOAA/SIO weekly data (Keeling & "
        "Whorf 2004, via statsmodels); public domain; split=0 tests the last 52 months"),
        "co2.csv.gz", "infer"),
    # -- issue 34: data for the count, multiclass and heteroscedastic likelihoods
    "digits": (DatasetInfo(
        "digits", 1_797, 64, "multiclass", "softmax", 0,
        "UCI optical handwritten digits, 8x8 pixel counts 0..16, 10 classes, as scikit-learn "
        "ships it (BSD-3; UCI CC BY 4.0)"),
        "digits.csv.gz", None),
    "bikecount": (DatasetInfo(
        "bikecount", 17_379, 15, "counts", "poisson", 10,
        "UCI bike sharing, hourly rentals as counts (1..977), derived from bike: x15 + x16 "
        "(casual + registered, centred) minus their minimum plus 1, those two columns dropped"),
        "bike.csv.gz", None),
    "bikelog": (DatasetInfo(
        "bikelog", 17_379, 15, "regression", "heteroscedastic-gaussian", 10,
        "bikecount's log(count): heteroscedastic, counting noise ~ 1/sqrt(count) on the log "
        "scale makes the quiet night hours far noisier than the rush hours"),
        "bike.csv.gz", None),
}


def _bike_count_table(table):
    """bike's 15 non-leaking inputs and the hourly rental count (docs/datasets.md): the count
    is x15 + x16 shifted so that its smallest value is 1 (the file stores the two columns
    centred, to 1e-3: rounding recovers the integers)."""
    count = table[:, 15] + table[:, 16]
    count = np.round(count - count.min() + 1.0)
    return np.concatenate([table[:, :15], count[:, None]], axis=1)


def _bike_log_table(table):
    counts = _bike_count_table(table)
    return np.concatenate([counts[:, :15], np.log(counts[:, 15:])], axis=1)


#: data sets computed from another bundled file: name -> (source data set, table function)
DERIVED = {"bikecount": ("bike", _bike_count_table), "bikelog": ("bike", _bike_log_table)}


def available():
    """The bundled data sets, smallest first.

    Returns
    -------
    tuple of DatasetInfo
        Name, size (rows x input columns), task, suggested likelihood, number of fixed masks
        and a one-line description of each; ``str(info)`` formats one row of a table.
    """
    return tuple(sorted((entry[0] for entry in BUNDLED.values()), key=lambda i: i.n_rows))


def unknown_name_error(name) -> ValueError:
    names = ", ".join(BUNDLED)
    return ValueError(f"name: expected one of the bundled data sets ({names}), got {name!r}; "
                      "use gpnum.datasets.load_csv(path) for other files")


def bundled_file(filename: str):
    """The packaged file ``gpnum/datasets/data/<filename>``, a Traversable."""
    return resources.files("gpnum.datasets").joinpath("data", filename)


def _freeze(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@functools.cache
def read_bundled(name: str):
    """Parse bundled data set ``name`` once: ``(data (n, d + 1) float64, column names)``."""
    if name in DERIVED:
        source, derive = DERIVED[name]
        data = derive(read_bundled(source)[0])
        return _freeze(data), tuple(f"x{j}" for j in range(data.shape[1] - 1)) + ("y",)
    info, filename, header = BUNDLED[name]
    data, names, has_header = read_table(bundled_file(filename), header=header)
    if not has_header:
        names = tuple(f"x{j}" for j in range(data.shape[1] - 1)) + ("y",)
    return _freeze(data), names


@functools.cache
def read_bundled_mask(name: str):
    """Parse the fixed test masks of ``name`` once: ``(n, n_masks)`` float64 of 0/1, or ``None``."""
    if BUNDLED[name][0].n_masks == 0:
        return None
    source = DERIVED[name][0] if name in DERIVED else name
    data, _, _ = read_table(bundled_file(f"{source}_test_mask.csv.gz"), header=None)
    return _freeze(data)
