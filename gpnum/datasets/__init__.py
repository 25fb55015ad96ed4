"""Real data sets: bundled loaders, any-CSV loading, standardisation and train/val/test splits.

Five data sets ship inside the package (compressed, about 2.3 MB), so the examples and the
command line run on a fresh machine with no download:

============  ========  ===  ==============  ==========  ============
name          rows      d    task            likelihood  fixed masks
============  ========  ===  ==============  ==========  ============
energy        768       8    regression      gaussian    10
elevators     16,599    18   regression      gaussian    10
bike          17,379    17   regression      gaussian    10
elec          45,312    6    classification  bernoulli   --
precip        101,270   3    regression      studentt    --
============  ========  ===  ==============  ==========  ============

Parsing, splitting and standardising happen in NumPy float64 on the host; the finished arrays
cross to the target backend (``GPNUM_BACKEND`` or ``xp=``) once, in the requested dtype.
"""

from gpnum.datasets._dataset import LIKELIHOODS, RANDOM_FRACTIONS, TASKS, Dataset
from gpnum.datasets._load import load, load_csv
from gpnum.datasets._registry import DatasetInfo, available
from gpnum.datasets._series import load_series
from gpnum.datasets._subsets import add_outliers, holdout, random_subset
from gpnum.datasets._stream import NpyBatches

__all__ = ["Dataset", "DatasetInfo", "LIKELIHOODS", "NpyBatches", "RANDOM_FRACTIONS", "TASKS",
           "add_outliers", "available", "holdout", "load", "load_csv", "load_series",
           "random_subset"]
