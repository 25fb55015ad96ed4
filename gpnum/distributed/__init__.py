"""Data-parallel training on Dask (``pip install "gpnum[distributed]"``).

- :func:`objective_and_grad`: a minibatch model's objective and gradients on dask arrays, the
  data term evaluated by the workers that hold the rows.
- the exact GP: with ``gpnum.GPR(..., solver="cg")``, :func:`objective_and_grad` computes the
  conjugate-gradient products with the kernel matrix on the workers, one row chunk per task
  (:class:`DaskKernelMatrix`, Wang et al. 2019's partitioning).
- :func:`fit`: :func:`gpnum.fit` (Adam) with each step's minibatch evaluated that way: the same
  seed gives the same batches, hence the same parameters, as the single-process run.
"""

from gpnum.distributed._exact import DaskKernelMatrix
from gpnum.distributed._fit import fit
from gpnum.distributed._objective import chunk_futures, objective_and_grad, row_chunks

__all__ = ["DaskKernelMatrix", "chunk_futures", "fit", "objective_and_grad", "row_chunks"]
