"""Real data sets: bundled loaders, any-CSV loading, standardisation and train/val/test splits.

Nine data sets ship inside the package (seven compressed files, about 2.4 MB; ``bikecount``
and ``bikelog`` are derived from ``bike``), so the examples and the command line run on a
fresh machine with no download (``available()`` lists them):

============  ========  ===  ==============  ========================  ============
name          rows      d    task            likelihood                fixed masks
============  ========  ===  ==============  ========================  ============
co2           521       1    regression      gaussian                  1
energy        768       8    regression      gaussian                  10
digits        1,797     64   multiclass      softmax                   --
elevators     16,599    18   regression      gaussian                  10
bike          17,379    17   regression      gaussian                  10
bikecount     17,379    15   counts          poisson                   10
bikelog       17,379    15   regression      heteroscedastic-gaussian  10
elec          45,312    6    classification  bernoulli                 --
precip        101,270   3    regression      studentt                  --
============  ========  ===  ==============  ========================  ============

Parsing, splitting and standardising happen in NumPy float64 on the host; the finished arrays
cross to the target backend (``GPNUM_BACKEND`` or ``xp=``) once, in the requested dtype.
"""

from gpnum.datasets._dataset import LIKELIHOODS, RANDOM_FRACTIONS, TASKS, Dataset
from gpnum.datasets._load import load, load_csv
from gpnum.datasets._multioutput import MultiOutputData, load_multioutput, load_multioutput_csv
from gpnum.datasets._registry import DatasetInfo, available
from gpnum.datasets._series import load_series
from gpnum.datasets._stream import NpyBatches
from gpnum.datasets._subsets import add_outliers, holdout, random_subset

__all__ = ["Dataset", "DatasetInfo", "LIKELIHOODS", "NpyBatches", "RANDOM_FRACTIONS", "TASKS",
           "add_outliers", "available", "holdout", "load", "load_csv", "load_series",
           "random_subset"]
__all__ += ["MultiOutputData", "load_multioutput", "load_multioutput_csv"]
