"""Data-parallel training on Dask (``pip install "gpnum[distributed]"``).

- :func:`objective_and_grad`: a minibatch model's objective and gradients on dask arrays, the
  data term evaluated by the workers that hold the rows.
- :func:`fit`: :func:`gpnum.fit` (Adam) with each step's minibatch evaluated that way: the same
  seed gives the same batches, hence the same parameters, as the single-process run.
"""

from gpnum.distributed._objective import chunk_futures, objective_and_grad, row_chunks
from gpnum.distributed._fit import fit

__all__ = ["chunk_futures", "fit", "objective_and_grad", "row_chunks"]
