"""Array backends: the default namespace, conversions, and the linear algebra the standard lacks.

Library code follows its inputs (:func:`get_namespace`); only code that creates arrays from
nothing uses :func:`namespace`, chosen by the environment variable ``GPNUM_BACKEND``
(``numpy`` by default, ``cupy``, ``torch``, ``array_api_strict``), with the floating dtype
``GPNUM_DTYPE`` (``float64`` by default, or ``float32``).
"""

from gpnum.backend._blas import (
    blas_pool,
    column_dots,
    flat_dot,
    lower_matmul,
    matmul,
    matmul_writer,
    row_dots,
)
from gpnum.backend._cg_blocks import cg_direction, cg_update, scaled_add
from gpnum.backend._convert import (
                                    asarray,
                                    device_of,
                                    get_namespace,
                                    host_device,
                                    is_array,
                                    same_namespace_dtype_device,
                                    to_numpy,
)
from gpnum.backend._eigh import eigh, outer_self
from gpnum.backend._linalg import (
                                    cho_inverse,
                                    cho_solve,
                                    cholesky,
                                    cholesky_vjp,
                                    cholesky_vjp_inner,
                                    default_jitter,
                                    relative_jitter,
                                    solve_triangular,
                                    triangular_inverse,
                                    triangular_matmul,
)
from gpnum.backend._namespace import (
                                    BACKENDS,
                                    backend_name,
                                    default_dtype,
                                    namespace,
                                    namespace_by_name,
)
from gpnum.backend._parallel import (
    available_memory,
    default_workers,
    run_in_threads,
    run_row_split,
    usable_cores,
)
from gpnum.backend._random import Generator, default_rng
from gpnum.backend._scan import associative_scan, vector_prefix_scan
from gpnum.backend._scatter import scatter_add
from gpnum.backend._sparse import SparseRows
from gpnum.backend._threads import blas_threads, set_blas_threads

__all__ = [
    "BACKENDS",
    "Generator",
    "SparseRows",
    "asarray",
    "associative_scan",
    "available_memory",
    "backend_name",
    "blas_pool",
    "blas_threads",
    "cg_direction",
    "cg_update",
    "cho_inverse",
    "cho_solve",
    "column_dots",
    "cholesky",
    "cholesky_vjp",
    "cholesky_vjp_inner",
    "default_dtype",
    "default_jitter",
    "relative_jitter",
    "default_rng",
    "default_workers",
    "eigh",
    "device_of",
    "get_namespace",
    "host_device",
    "is_array",
    "flat_dot",
    "lower_matmul",
    "matmul",
    "matmul_writer",
    "namespace",
    "namespace_by_name",
    "outer_self",
    "row_dots",
    "run_in_threads",
    "run_row_split",
    "same_namespace_dtype_device",
    "scaled_add",
    "scatter_add",
    "set_blas_threads",
    "solve_triangular",
    "to_numpy",
    "triangular_inverse",
    "triangular_matmul",
    "usable_cores",
    "vector_prefix_scan",
]
