"""Products routed to one BLAS thread pool: :func:`matmul`, :func:`flat_dot`, :func:`row_dots`,
:func:`lower_matmul`, :func:`matmul_writer`, and :func:`blas_pool`, which picks the pool.

NumPy and SciPy wheels each bundle an OpenBLAS with its own thread pool; code that alternates
between the two runs more busy threads than cores. These functions send large NumPy products
to the pool of the rest of a code path's work (see :func:`matmul`); other namespaces use their
own ``@``.
"""

from __future__ import annotations

import contextlib
import threading

import array_api_compat

from gpnum.backend import _threads
from gpnum.backend._convert import get_namespace

__all__ = [
    "blas_pool",
    "matmul",
    "matmul_writer",
    "flat_dot",
    "row_dots",
    "lower_matmul",
]


#: Below this many multiply-adds a product stays with NumPy's ``@`` (BLAS threading does not
#: start there, so the pools below cannot collide).
_SCIPY_GEMM_MIN_FLOPS = 1 << 16

_POOL = threading.local()  # .name: the pool of the innermost blas_pool() on this thread
_POOLS = ("scipy", "numpy")


@contextlib.contextmanager
def blas_pool(name, split_rows=False):
    """Within the block, :func:`matmul`, :func:`flat_dot` (and ``matmul``'s matrix-vector
    products) on NumPy run in ``name``'s BLAS thread pool: ``"scipy"`` (the default outside
    any block) or ``"numpy"``.

    NumPy and SciPy wheels each bundle an OpenBLAS with its own thread pool, whose workers
    spin for a while after every call; work that alternates between the two runs more busy
    threads than cores (see :func:`matmul`). A code path picks the pool of the rest of its
    work: the Cholesky-whitened SVGP step factorises and solves with SciPy's LAPACK
    (``"scipy"``), while CIQ whitening and the natural-gradient ``krylov`` method do their
    products, eigendecompositions and orthonormalisations through NumPy (``"numpy"``).
    On a 2-core machine a CIQ-whitened SVGP step with the ``krylov`` natural gradient ran
    1.6-2.5x faster with its kernel and natural-statistics products in NumPy's pool than in
    SciPy's (docs/backends.md).

    Only the thread pool changes, never the arithmetic's algorithm (results agree to
    rounding); other namespaces ignore it. The setting is per thread and restored on exit;
    blocks nest.

    Parameters
    ----------
    name : {"scipy", "numpy"}
    split_rows : bool
        For a code path whose time goes to memory-bound passes (block CG on a sparse or FFT
        operator): the BLAS pools run one thread each, and the passes of
        :func:`gpnum.backend.cg_update`, :func:`gpnum.backend.cg_direction`,
        :func:`gpnum.backend.scaled_add` and :class:`gpnum.backend.SparseRows` split their
        rows over :func:`gpnum.backend.blas_threads` threads. Only the outermost block of
        the process sets thread counts; a nested block keeps the outer one's.
    """
    if name not in _POOLS:
        raise ValueError(f"name: expected 'scipy' or 'numpy', got {name!r}")
    # first: a bad GPNUM_BLAS_THREADS raises before anything changes
    _threads.enter(name, split_rows=bool(split_rows))
    previous = getattr(_POOL, "name", "scipy")
    _POOL.name = name
    try:
        yield
    finally:
        _threads.leave()
        _POOL.name = previous


def _scipy_pool(xp, size):
    """Whether a float product of ``size`` multiply-adds on ``xp`` goes to SciPy's BLAS."""
    return (array_api_compat.is_numpy_namespace(xp) and size >= _SCIPY_GEMM_MIN_FLOPS
            and getattr(_POOL, "name", "scipy") == "scipy")


def matmul(a, b):
    """``a @ b`` for 2-D arrays; on NumPy, large products go through SciPy's BLAS (unless
    within ``blas_pool("numpy")``).

    NumPy and SciPy wheels each bundle their own OpenBLAS, each with its own thread pool, and an
    OpenBLAS pool keeps its workers spinning for a while after every call. A NumPy GEMM followed
    by a SciPy Cholesky or triangular solve therefore runs three busy threads on two cores, and
    the LAPACK call slows down about 2x (a 1000 x 1000 Cholesky within 0.1 s of a NumPy GEMM,
    on a 2-core machine: docs/benchmarks.md). Code that mixes the
    two, as the Cholesky-whitened SVGP step does, uses this function for its big products so that
    one pool does all level-3 work; code whose other work is NumPy's says so with
    :func:`blas_pool`. Other namespaces, integer dtypes and small products: ``@``.

    Parameters
    ----------
    a : array (n1, k)
    b : array (k, n2) or (k,)
        A vector ``b`` gives a matrix-vector product (OpenBLAS threads those too).

    Returns
    -------
    c : array (n1, n2), C-ordered on NumPy, or (n1,) for a vector ``b``.
    """
    xp = get_namespace(a, b)
    if b.ndim == 1:
        return _matvec(xp, a, b)
    if (a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.shape[1] != b.shape[0]
            or not _scipy_pool(xp, a.shape[0] * a.shape[1] * b.shape[1])
            or a.dtype not in (xp.float32, xp.float64)):
        return a @ b
    from scipy.linalg import blas

    gemm = blas.get_blas_funcs("gemm", (a, b))

    # C^T = b^T a^T is formed in Fortran order, which is C in C order: no copy of the output,
    # and none of an input that is C- or Fortran-contiguous (BLAS reads either via its flag).
    def fortran(x):  # (array holding x^T in Fortran order, whether BLAS must transpose it)
        return (x.T, 0) if x.flags.c_contiguous else (x, 1)

    bt, tb = fortran(b)
    at, ta = fortran(a)
    return gemm(1.0, bt, at, trans_a=tb, trans_b=ta).T


def matmul_writer(xp):
    """A function ``write(out, index, a, b)`` that stores the product of ``a`` (..., m, k) and
    ``b`` (..., k, *rest), whose trailing axes are taken as one axis of columns, reshaped to
    the slot's shape, as ``out[index, ...]``.

    The standard's ``matmul`` has no ``out`` argument, so a product stored into a preallocated
    array costs a temporary and a copy. NumPy, CuPy and torch take ``out=`` and write the
    product in place, into a view of the slot with the product's shape (``out`` must be
    contiguous, so that the slot's reshape is a view); other namespaces assign the item.
    The product must have the slot's size and dtype. Resolve the writer once, outside a
    loop: the dispatch costs more than a small product, and so does a namespace's reshape.
    """
    if array_api_compat.is_numpy_namespace(xp):
        import numpy as np

        native = np.matmul

        def contiguous(x):
            return x.flags.c_contiguous
    elif array_api_compat.is_cupy_namespace(xp):
        import cupy

        native = cupy.matmul

        def contiguous(x):
            return x.flags.c_contiguous
    elif array_api_compat.is_torch_namespace(xp):
        import torch

        native = torch.matmul

        def contiguous(x):
            return x.is_contiguous()
    else:
        def write(out, index, a, b):
            columns = xp.reshape(b, b.shape[:a.ndim - 1] + (-1,))
            out[index, ...] = xp.reshape(a @ columns, out.shape[1:])

        return write

    def write_in_place(out, index, a, b):
        # A strided out would make the slot's reshape a copy and lose the product silently.
        if not contiguous(out):
            raise ValueError("matmul_writer: out must be C-contiguous")
        columns = b.reshape(b.shape[:a.ndim - 1] + (-1,))
        native(a, columns, out=out[index, ...].reshape(a.shape[:-1] + columns.shape[-1:]))

    return write_in_place


def _matvec(xp, a, b):
    """``a @ b`` for a vector ``b``: SciPy's gemv on NumPy for large float ``a`` (see
    :func:`matmul`), else ``@``."""
    if (a.ndim != 2 or a.dtype != b.dtype or a.shape[1] != b.shape[0]
            or not _scipy_pool(xp, a.shape[0] * a.shape[1])
            or a.dtype not in (xp.float32, xp.float64)):
        return a @ b
    from scipy.linalg import blas

    gemv = blas.get_blas_funcs("gemv", (a, b))
    if a.flags.c_contiguous:  # a^T in Fortran order: (a^T)^T b
        return gemv(1.0, a.T, b, trans=1)
    return gemv(1.0, a, b)


def flat_dot(a, b):
    """``sum(a * b)`` over all elements of two arrays of one shape, without their product.

    On NumPy a large float product is one dot through SciPy's BLAS, the library :func:`matmul`
    uses, so that a loop mixing the two wakes one thread pool only (NumPy's own dot and vecdot
    are threaded by NumPy's OpenBLAS); elsewhere ``vecdot`` of the flattened arrays.
    """
    xp = get_namespace(a, b)
    fa, fb = xp.reshape(a, (-1,)), xp.reshape(b, (-1,))
    if (a.dtype == b.dtype and a.dtype in (xp.float32, xp.float64)
            and _scipy_pool(xp, fa.shape[0])):
        from scipy.linalg import blas

        return xp.asarray(blas.get_blas_funcs("dot", (fa, fb))(fa, fb), dtype=a.dtype)
    return xp.vecdot(fa, fb)


def row_dots(a, b):
    """``sum(a * b, axis=1)``: the dot products of matching rows of two (n, k) arrays.

    On NumPy by ``einsum``, which reads either memory layout in place; the elementwise form
    first writes an (n, k) temporary (about 25x slower for a (1000, 3840) pair of fresh
    arrays on a virtual machine, where first touches of memory are slow), and
    ``vecdot`` along the rows of a column-major array is 10x slower.

    Returns
    -------
    array (n,)
    """
    return _matched_dots(a, b, axis=1)


def column_dots(a, b):
    """``sum(a * b, axis=0)``: the dot products of matching columns of two (n, k) arrays (the
    per-column reductions of block Krylov solvers).

    On NumPy by ``einsum``, without the (n, k) temporary of the elementwise form (4x faster
    for a (100000, 11) pair on one core); elsewhere the elementwise form.

    Returns
    -------
    array (k,)
    """
    return _matched_dots(a, b, axis=0)


def _matched_dots(a, b, axis):
    """``sum(a * b, axis=axis)`` for two (n, k) arrays: NumPy's ``einsum`` (no temporary),
    elsewhere the elementwise form."""
    xp = get_namespace(a, b)
    if array_api_compat.is_numpy_namespace(xp):
        import numpy as np

        return np.einsum("ij,ij->i" if axis == 1 else "ij,ij->j", a, b)
    return xp.sum(a * b, axis=axis)


def lower_matmul(a, b):
    """The lower triangle of ``a @ b`` (diagonal included), zeros above it.

    For a gradient that only its lower triangle matters for (a Cholesky factor's cotangent,
    the input of :func:`cholesky_vjp_inner`). On NumPy the product runs in row blocks that
    stop at the diagonal, 21/36 = 0.58x the multiply-adds of the full product; elsewhere it is
    ``tril(a @ b)``.

    Parameters
    ----------
    a : array (n1, k)
    b : array (k, n2)

    Returns
    -------
    c : array (n1, n2)
    """
    xp = get_namespace(a, b)
    n1, n2 = a.shape[0], b.shape[1]
    blocks = min(6, n1 // 128)
    if not array_api_compat.is_numpy_namespace(xp) or blocks < 2:
        return xp.tril(matmul(a, b))
    import numpy as np

    # Row blocks up to the diagonal (more blocks would save more products but copy more);
    # what lies above the diagonal (unwritten, or in the straddling blocks) is cleared after.
    c = np.empty((n1, n2), dtype=np.result_type(a.dtype, b.dtype))
    edges = [round(i * n1 / blocks) for i in range(blocks + 1)]
    for r0, r1 in zip(edges[:-1], edges[1:], strict=True):
        c1 = min(r1, n2)
        if c1 > 0:
            c[r0:r1, :c1] = matmul(a[r0:r1, :], b[:, :c1])
    _clear_strict_upper(c)
    return c


def _clear_strict_upper(H, block=256):
    """Zero the strict upper triangle of the NumPy matrix ``H`` in place, in row blocks.

    Assigns rather than multiplies by a mask: the triangle may hold unwritten memory, whose NaN
    or Inf would survive a multiplication by zero.
    """
    import numpy as np

    n1, n2 = H.shape
    for r0 in range(0, n1, block):
        r1 = min(r0 + block, n1)
        H[r0:r1, r1:] = 0
        if r0 < n2:
            blk = H[r0:r1, r0:min(r1, n2)]
            np.copyto(blk, 0, where=~np.tri(r1 - r0, blk.shape[1], dtype=bool))


def _mirror_lower(H, block=256):
    """Copy the strict lower triangle of the square NumPy matrix ``H`` onto its upper one, in
    place, in blocks (``np.triu``/``np.tril`` build a mask and a fresh (n, n) array each)."""
    import numpy as np

    n = H.shape[0]
    for c0 in range(0, n, block):
        c1 = min(c0 + block, n)
        # The column block's rows below the diagonal block, transposed into the upper triangle.
        H[c0:c1, c1:] = H[c1:, c0:c1].T
        d = H[c0:c1, c0:c1]
        upper = np.triu(np.ones(d.shape, dtype=bool), 1)
        np.copyto(d, d.T, where=upper)
