"""Linear operators and Krylov solvers.

Operators (:class:`LinearOperator` and its structured kinds) are matrices known through their
products, with the gradient seam :meth:`LinearOperator.param_vjp`. The solvers keep SciPy's
vocabulary (``rtol``, ``atol``, ``maxiter``, ``M``, ``x0``) and return result objects with
``x``, ``info``, ``num_iter`` and ``residual_norm``:

- :func:`pcg`: preconditioned conjugate gradients on a block of right-hand sides;
- :func:`pcg_lanczos`: block PCG that also returns Lanczos tridiagonals (BBMM), with
  :func:`lanczos_quadrature` and :func:`preconditioner_probes`;
- :func:`msminres`: multi-shift MINRES, ``(A + s_j I) X_j = B`` for all shifts at once;
- :func:`lanczos` and :func:`eigen_bounds`: tridiagonalisation and safe spectrum bounds;
- :func:`slq_logdet` / :func:`slq_logdet_and_grad`: stochastic Lanczos quadrature;
- :func:`pivoted_cholesky` and :func:`pivoted_cholesky_preconditioner` (Woodbury);
- :func:`top_eigenpairs`: leading eigenpairs by randomized subspace iteration (deflation), and
  :class:`SpectralPreconditioner` built from them for PCG.
- :func:`inv_sqrt_matmul`, :func:`sqrt_matmul` (and their backward passes
  :func:`inv_sqrt_matmul_vjp`, :func:`sqrt_matmul_vjp`), :func:`sample_mvn`: ``K^{-1/2} B`` and
  ``K^{1/2} B`` by contour integral quadrature (CIQ, :func:`ciq_quadrature`) and one msMINRES
  call, with deflation by leading eigenpairs; also importable from :mod:`gpnum.ciq`.

Every function accepts a plain array wherever an operator is expected (wrapped in
:class:`Dense`).
"""

from gpnum.linalg._bbmm import (
    PCGLanczosResult,
    lanczos_quadrature,
    pcg_lanczos,
    preconditioner_probes,
)
from gpnum.linalg._ciq import inv_sqrt_matmul, sqrt_matmul
from gpnum.linalg._ciq_backward import inv_sqrt_matmul_vjp, sqrt_matmul_vjp
from gpnum.linalg._ciq_quadrature import ciq_quadrature
from gpnum.linalg._ciq_result import CIQResult, SearchStart
from gpnum.linalg._ciq_sample import sample_mvn
from gpnum.linalg._deflation import SpectralPreconditioner, default_block_size, top_eigenpairs
from gpnum.linalg._interpolated import Interpolated, cubic_interpolation_weights, grid_points
from gpnum.linalg._kernel_matrix import KernelMatrix, block_rows_for_budget
from gpnum.linalg._kronecker import Kronecker, KroneckerShiftedEig
from gpnum.linalg._lanczos import LanczosResult, eigen_bounds, lanczos
from gpnum.linalg._masked import Masked
from gpnum.linalg._msminres import MultiShiftResult, Workspace, msminres
from gpnum.linalg._operators import (
    AddedDiag,
    Dense,
    Diagonal,
    LinearOperator,
    LowRank,
    Scaled,
    Sum,
    Transposed,
    aslinearoperator,
)
from gpnum.linalg._pcg import SolveResult, pcg
from gpnum.linalg._pivoted_cholesky import (
    WoodburyInverse,
    pivoted_cholesky,
    pivoted_cholesky_preconditioner,
)
from gpnum.linalg._slq import slq_logdet, slq_logdet_and_grad
from gpnum.linalg._toeplitz import Toeplitz

__all__ = [
    "AddedDiag",
    "CIQResult",
    "Dense",
    "Diagonal",
    "Interpolated",
    "KernelMatrix",
    "Kronecker",
    "KroneckerShiftedEig",
    "LanczosResult",
    "LinearOperator",
    "LowRank",
    "Masked",
    "MultiShiftResult",
    "PCGLanczosResult",
    "SearchStart",
    "Scaled",
    "SolveResult",
    "SpectralPreconditioner",
    "Sum",
    "Toeplitz",
    "Transposed",
    "WoodburyInverse",
    "Workspace",
    "aslinearoperator",
    "block_rows_for_budget",
    "ciq_quadrature",
    "cubic_interpolation_weights",
    "default_block_size",
    "eigen_bounds",
    "grid_points",
    "inv_sqrt_matmul",
    "inv_sqrt_matmul_vjp",
    "lanczos",
    "lanczos_quadrature",
    "msminres",
    "pcg",
    "pcg_lanczos",
    "pivoted_cholesky",
    "pivoted_cholesky_preconditioner",
    "preconditioner_probes",
    "sample_mvn",
    "slq_logdet",
    "slq_logdet_and_grad",
    "sqrt_matmul",
    "sqrt_matmul_vjp",
    "top_eigenpairs",
]
