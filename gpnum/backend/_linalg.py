"""Linear algebra the array API standard lacks: jittered Cholesky, triangular and Cholesky solves.

Each function dispatches on the namespace of its inputs: SciPy for NumPy, ``cupyx.scipy.linalg``
for CuPy (imported lazily: it fails to import where the CUDA libraries are missing),
``torch.linalg`` for torch, and a correct but slower fallback through ``xp.linalg.solve`` for any
other namespace (``array_api_strict`` included).
"""

from __future__ import annotations

import contextlib
import math
import threading

import array_api_compat

from gpnum.backend import _threads
from gpnum.backend._convert import get_namespace
from gpnum.errors import NotPSDError, ShapeError, check_finite, describe_shape

__all__ = [
    "blas_pool",
    "matmul",
    "matmul_writer",
    "flat_dot",
    "lower_matmul",
    "cholesky",
    "cholesky_vjp",
    "cholesky_vjp_inner",
    "solve_triangular",
    "triangular_matmul",
    "cho_solve",
    "default_jitter",
    "relative_jitter",
]


def default_jitter(dtype, xp) -> float:
    """First jitter tried by :func:`cholesky`: 1e-6 for float32, 1e-8 for float64."""
    return 1e-6 if dtype == xp.float32 else 1e-8


def _check_square(A, name="A"):
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ShapeError(f"{name}: expected a square matrix of shape (n, n), got "
                         f"{describe_shape(A.shape)}")


#: Below this many multiply-adds a product stays with NumPy's ``@`` (BLAS threading does not
#: start there, so the pools below cannot collide).
_SCIPY_GEMM_MIN_FLOPS = 1 << 16

_POOL = threading.local()  # .name: the pool of the innermost blas_pool() on this thread
_POOLS = ("scipy", "numpy")


@contextlib.contextmanager
def blas_pool(name):
    """Within the block, :func:`matmul`, :func:`flat_dot` (and ``matmul``'s matrix-vector
    products) on NumPy run in ``name``'s BLAS thread pool: ``"scipy"`` (the default outside
    any block) or ``"numpy"``.

    NumPy and SciPy wheels each bundle an OpenBLAS with its own thread pool, whose workers
    spin for a while after every call; work that alternates between the two runs more busy
    threads than cores (see :func:`matmul`). A code path picks the pool of the rest of its
    work: the Cholesky-whitened SVGP step factorises and solves with SciPy's LAPACK
    (``"scipy"``), while CIQ whitening and the natural-gradient ``krylov`` method do their
    products, eigendecompositions and orthonormalisations through NumPy (``"numpy"``).
    Measured on this project's 2-core machine, ``gpnum fit --dataset elevators
    --max-train 3000 --whitening ciq --num-inducing 200 --ngd-method krylov``: 270-287 ms
    a step with the kernel and natural-statistics products in SciPy's pool, 117-170 ms in
    NumPy's (docs/backends.md).

    Only the thread pool changes, never the arithmetic's algorithm (results agree to
    rounding); other namespaces ignore it. The setting is per thread and restored on exit;
    blocks nest.

    Parameters
    ----------
    name : {"scipy", "numpy"}
    """
    if name not in _POOLS:
        raise ValueError(f"name: expected 'scipy' or 'numpy', got {name!r}")
    previous = getattr(_POOL, "name", "scipy")
    _POOL.name = name
    _threads.enter(name)
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
    the LAPACK call slows down about 2x (measured on this project's 2-core machine: Cholesky of
    a 1000 x 1000 matrix 5.7 ms alone, 10 ms within 0.1 s of a NumPy GEMM). Code that mixes the
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
    first writes an (n, k) temporary (measured 51 ms against 2 ms for a (1000, 3840) pair of
    fresh arrays on this project's VM, where first touches of memory are slow), and
    ``vecdot`` along the rows of a column-major array is 10x slower.

    Returns
    -------
    array (n,)
    """
    xp = get_namespace(a, b)
    if array_api_compat.is_numpy_namespace(xp):
        import numpy as np

        return np.einsum("ij,ij->i", a, b)
    return xp.sum(a * b, axis=1)


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
    for r0, r1 in zip(edges[:-1], edges[1:]):
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


def _raw_cholesky(xp, A, shift=0.0):
    """Lower Cholesky factor of ``A + shift I``, or ``None`` if the factorisation fails."""
    if array_api_compat.is_numpy_namespace(xp) and A.dtype in (xp.float32, xp.float64):
        import numpy as np
        from scipy.linalg import lapack

        # One copy, shifted and factorised in place: no (n, n) temporaries for the shift. A
        # C-ordered A is, read as Fortran, A^T, whose upper triangle is A's lower one: potrf
        # on that upper triangle gives U = L^T in Fortran order, i.e. L in C order, and the
        # copy is a plain memcpy rather than a transposition.
        c_order = not A.flags.f_contiguous
        F = np.array(A.T if c_order else A, order="F")
        if shift:
            F.flat[:: F.shape[0] + 1] += shift
        potrf = lapack.get_lapack_funcs("potrf", (F,))
        R, info = potrf(F, lower=0 if c_order else 1, overwrite_a=1, clean=1)
        if info < 0:
            raise ValueError(f"LAPACK potrf: illegal argument {-info}")
        if info != 0:
            return None
        return R.T if c_order else R
    if shift:
        A = A + shift * xp.eye(A.shape[0], dtype=A.dtype, device=array_api_compat.device(A))
    if array_api_compat.is_torch_namespace(xp):
        import torch

        L, info = torch.linalg.cholesky_ex(A)
        return None if int(info) != 0 else L
    try:
        L = xp.linalg.cholesky(A)
    except Exception as exc:  # LinAlgError (numpy, array_api_strict) and the like
        if "positive" in str(exc).lower() or type(exc).__name__ == "LinAlgError":
            return None
        raise
    if array_api_compat.is_cupy_namespace(xp):
        # cupy returns NaNs instead of raising on an indefinite matrix.
        if not bool(xp.all(xp.isfinite(L))):
            return None
    return L


def relative_jitter(dtype, xp, n: int) -> float:
    """First jitter tried by :func:`cholesky`, relative to the mean of the matrix's diagonal.

    ``max(n, 10) * eps`` of the dtype: the size of the round-off that can push the smallest
    eigenvalue of an (n, n) positive semi-definite matrix below zero (about ``n eps ||A||``;
    float64 ``2.2e-14 n``, float32 ``1.2e-7 n``).
    """
    eps = 2.220446049250313e-16 if dtype == xp.float64 else 1.1920928955078125e-07
    return max(int(n), 10) * eps


#: Largest jitter :func:`cholesky` tries by default, relative to the mean of the diagonal: past
#: it the matrix is not "positive definite up to round-off" and adding more would change the
#: model rather than its numerics.
_MAX_RELATIVE_JITTER = {"float64": 1e-6, "float32": 1e-3}


def _diag_scale(xp, A, shift):
    """Mean of ``diag(A)`` plus ``shift``, as a host float; 1.0 when that is not positive."""
    scale = float(xp.mean(xp.linalg.diagonal(A))) + shift
    return scale if (scale > 0.0 and math.isfinite(scale)) else 1.0


def cholesky(A, *, shift: float = 0.0, jitter=None, max_tries=None,
             return_jitter: bool = False, what=None, hint=None):
    """Lower Cholesky factor of a symmetric positive-definite matrix, adding jitter if needed.

    First factorises ``A + shift I``; if that fails, retries with ``A + (shift + j) I`` for an
    escalating jitter ``j = j0, 10 j0, 100 j0, ...``. By default the jitter scales with the
    matrix: ``j0 = max(n, 10) eps s`` with ``s`` the mean of the diagonal of ``A + shift I``
    and ``eps`` the dtype's machine epsilon (:func:`relative_jitter`), and retries go on while
    ``j <= 1e-6 s`` (float64) or ``1e-3 s`` (float32). An absolute jitter fixed for all
    matrices would be too large for a kernel with a small variance and too small for one with
    a large variance (a 100 x 100 kernel matrix with variance 1e3 and near-duplicate inputs
    needs more than 1e-3).

    Parameters
    ----------
    A : array (n, n)
        Symmetric positive (semi-)definite matrix. Only its lower triangle is read.
    shift : float
        Added to the diagonal from the start (a model's fixed jitter), without an (n, n)
        temporary on NumPy. Default 0.
    jitter : float, optional
        First jitter tried after a failure, absolute. Default: relative to the diagonal, above.
    max_tries : int, optional
        Number of jittered retries (0 disables jitter). Default: as many as the escalation to
        the relative ceiling above takes (9 in float64 for n <= 10).
    return_jitter : bool
        Also return the jitter that was added on top of ``shift`` (0.0 when none was needed).
    what : str, optional
        What the matrix is (which model, which parameters), for the error message.
    hint : str, optional
        The option that fixes a failure, for the error message.

    Returns
    -------
    L : array (n, n)
        Lower-triangular with ``L @ L.T == A + (shift + j) I``.
    j : float
        Only if ``return_jitter``.

    Raises
    ------
    NotPSDError
        If every try fails; the message names the matrix (``what``), its size, the largest
        jitter tried and the fix (``hint``).
    ValueError
        If ``A`` holds NaN or Inf, or is not square.
    """
    xp = get_namespace(A)
    _check_square(A)
    check_finite(xp, A, "A" if what is None else what)
    if max_tries is not None and (isinstance(max_tries, bool) or int(max_tries) != max_tries
                                  or max_tries < 0):
        raise ValueError(f"max_tries: expected an integer >= 0, got {max_tries!r}")
    shift = float(shift)
    if not (shift >= 0.0 and math.isfinite(shift)):
        raise ValueError(f"shift: expected a finite number >= 0, got {shift!r}")
    L = _raw_cholesky(xp, A, shift)
    added = 0.0
    if L is None:
        n = A.shape[0]
        scale = _diag_scale(xp, A, shift)
        if jitter is None:
            j0 = relative_jitter(A.dtype, xp, n) * scale
        else:
            j0 = float(jitter)
            if not (j0 > 0.0 and math.isfinite(j0)):
                raise ValueError(f"jitter: expected a finite number > 0, got {jitter!r}")
        if max_tries is None:
            ceiling = _MAX_RELATIVE_JITTER["float64" if A.dtype == xp.float64 else "float32"]
            ceiling = max(ceiling * scale, j0)
            max_tries = 1 + max(0, int(math.floor(math.log10(ceiling / j0) + 1e-9)))
        for t in range(int(max_tries)):
            added = j0 * 10.0**t
            L = _raw_cholesky(xp, A, shift + added)
            if L is not None:
                break
        if L is None:
            tried = (f"up to {added:.1e} ({added / scale:.1e} x the mean diagonal {scale:.3g})"
                     if max_tries else "none (max_tries=0)")
            base = f" on top of a diagonal shift of {shift:.1e}" if shift else ""
            name = "matrix" if what is None else what
            fix = hint if hint is not None else (
                "check the matrix (duplicate inputs, too small a noise variance) or pass a "
                "larger jitter")
            raise NotPSDError(
                f"{name} of size {n} x {n} is not positive definite: Cholesky failed with "
                f"jitter {tried} added to the diagonal{base}; {fix}"
            )
    return (L, added) if return_jitter else L


def _as_2d(B, n, name):
    if B.ndim == 1:
        if B.shape[0] != n:
            raise ShapeError(f"{name}: expected shape ({n},) or ({n}, k), got "
                             f"{describe_shape(B.shape)}")
        return B[:, None], True
    if B.ndim != 2 or B.shape[0] != n:
        raise ShapeError(f"{name}: expected shape ({n},) or ({n}, k), got {describe_shape(B.shape)}")
    return B, False


def triangular_inverse(L, *, lower: bool = True):
    """``L^{-1}`` for a triangular ``L`` (n, n); only the triangle named by ``lower`` is read.

    On NumPy through LAPACK ``trtri`` (n^3 / 3 multiply-adds, in place on one copy) instead of
    a triangular solve against the identity (n^3); elsewhere that solve. The result is
    triangular like ``L``, with zeros in the other triangle.

    Raises
    ------
    NotPSDError
        If ``L`` has a zero on its diagonal (singular).
    """
    xp = get_namespace(L)
    _check_square(L, "L")
    n = L.shape[0]
    if array_api_compat.is_numpy_namespace(xp) and L.dtype in (xp.float32, xp.float64):
        import numpy as np
        from scipy.linalg import lapack

        # A C-ordered L read as Fortran is L^T (the other triangle): invert that in place.
        c_order = not L.flags.f_contiguous
        F = np.array(L.T if c_order else L, order="F")
        trtri = lapack.get_lapack_funcs("trtri", (F,))
        inv, info = trtri(F, lower=int(lower != c_order), overwrite_c=1)
        if info > 0:
            raise NotPSDError(f"triangular matrix of size {n} x {n} is singular: diagonal entry "
                              f"{info - 1} is zero")
        if info < 0:
            raise ValueError(f"LAPACK trtri: illegal argument {-info}")
        inv = inv.T if c_order else inv
        return np.tril(inv) if lower else np.triu(inv)
    eye = xp.eye(n, dtype=L.dtype, device=array_api_compat.device(L))
    X = solve_triangular(L, eye, lower=lower)
    return xp.tril(X) if lower else xp.triu(X)


def cho_inverse(L):
    """``(L L^T)^{-1}`` (n, n), symmetric, from the lower Cholesky factor ``L`` (n, n).

    On NumPy through LAPACK ``potri`` (``trtri`` then ``lauum``: 2 n^3 / 3 multiply-adds on one
    copy of ``L``) instead of ``L^{-T} L^{-1}`` by a triangular solve against the identity and
    a product (3 n^3), which is what makes an exact GP's gradient cost 1.3x its Cholesky
    rather than 5x; elsewhere that solve and product. Only the lower triangle of ``L`` is read.

    Raises
    ------
    NotPSDError
        If ``L`` has a zero on its diagonal (singular).
    """
    xp = get_namespace(L)
    _check_square(L, "L")
    n = L.shape[0]
    if array_api_compat.is_numpy_namespace(xp) and L.dtype in (xp.float32, xp.float64):
        import numpy as np
        from scipy.linalg import lapack

        # A C-ordered L read as Fortran is L^T, an upper factor of the same matrix.
        c_order = not L.flags.f_contiguous
        F = np.array(L.T if c_order else L, order="F")
        potri = lapack.get_lapack_funcs("potri", (F,))
        inv, info = potri(F, lower=int(not c_order), overwrite_c=1)
        if info > 0:
            raise NotPSDError(f"Cholesky factor of size {n} x {n} is singular: diagonal entry "
                              f"{info - 1} is zero")
        if info < 0:
            raise ValueError(f"LAPACK potri: illegal argument {-info}")
        # potri fills one triangle (the lower one of the F-ordered array, or of its transpose).
        out = inv.T if c_order else inv
        _mirror_lower(out)
        return out
    Linv = triangular_inverse(L, lower=True)
    P = matmul(Linv.T, Linv)
    return 0.5 * (P + P.T)  # a GEMM's rounding may differ between the two triangles


def solve_triangular(L, B, *, lower: bool = True, trans: bool = False):
    """Solve ``op(L) X = B`` for triangular ``L``, ``op(L) = L.T`` if ``trans`` else ``L``.

    Parameters
    ----------
    L : array (n, n)
        Triangular matrix; only the triangle named by ``lower`` is read.
    B : array (n,) or (n, k)
        Right-hand side(s).
    lower : bool
        Whether ``L`` is lower (default) or upper triangular.
    trans : bool
        Solve with the transpose of ``L``.

    Returns
    -------
    X : array of the shape of ``B``.
    """
    xp = get_namespace(L, B)
    _check_square(L, "L")
    B2, vec = _as_2d(B, L.shape[0], "B")
    if array_api_compat.is_numpy_namespace(xp):
        import scipy.linalg

        X = scipy.linalg.solve_triangular(L, B2, lower=lower, trans=1 if trans else 0,
                                          check_finite=False)
    elif array_api_compat.is_cupy_namespace(xp):
        import cupyx.scipy.linalg

        X = cupyx.scipy.linalg.solve_triangular(L, B2, lower=lower, trans=1 if trans else 0)
    elif array_api_compat.is_torch_namespace(xp):
        import torch

        if trans:
            X = torch.linalg.solve_triangular(L.mT, B2, upper=lower)
        else:
            X = torch.linalg.solve_triangular(L, B2, upper=not lower)
    else:
        # Generic fallback: keep only the named triangle, then a dense solve.
        T = xp.tril(L) if lower else xp.triu(L)
        X = xp.linalg.solve(T.T if trans else T, B2)
    return X[:, 0] if vec else X


def cho_solve(L, B):
    """Solve ``(L L^T) X = B`` given the lower Cholesky factor ``L`` (n, n); ``B`` (n,) or (n, k)."""
    return solve_triangular(L, solve_triangular(L, B, lower=True), lower=True, trans=True)


def cholesky_vjp(L, L_bar):
    """Backward pass of the Cholesky factorisation ``A = L L^T``.

    Given the lower factor ``L`` (n, n) and the cotangent ``L_bar`` (n, n; only its lower triangle
    is read), returns the symmetric gradient ``A_bar`` (n, n) with
    ``sum(L_bar * dL) = sum(A_bar * dA)`` for every symmetric ``dA`` (the convention of
    docs/gradients.md). Murray (2016), "Differentiation of the Cholesky decomposition":
    ``P = Phi(L^T L_bar)`` (lower triangle, diagonal halved), ``A_bar = sym(L^{-T} P L^{-1})``.
    Costs O(n^3): one triangular product and two triangular solves with n right-hand sides.
    """
    xp = get_namespace(L, L_bar)
    return cholesky_vjp_inner(L, triangular_matmul(L, xp.tril(L_bar), lower=True, trans=True))


#: From this size on, cholesky_vjp_inner uses LAPACK sygst on NumPy (against two trsm, on 2
#: cores: 1.2x the time at n = 256, 0.77x at 512, 0.72x at 1000, 0.70x at 2000).
_SYGST_MIN_N = 400


def _reversed(a, overwrite):
    """The C-contiguous NumPy matrix ``a`` with its memory reversed, i.e. ``flip(a)``.

    In place when ``overwrite`` (swapping mirrored blocks through a small buffer: no fresh
    (n, n) memory, whose first touches cost as much as the copy on virtual machines).
    """
    import numpy as np

    if not overwrite:
        return np.flip(a).copy(order="C")
    flat = a.reshape(-1)
    size, block = flat.shape[0], 8192
    half = size // 2
    for i in range(0, half, block):
        j = min(i + block, half)
        lo, hi = flat[i:j], flat[size - j:size - i][::-1]
        tmp = lo.copy()
        lo[...] = hi
        hi[...] = tmp
    return a


def _cholesky_vjp_inner_sygst(L, M, symmetrize, overwrite_m, overwrite_l):
    """:func:`cholesky_vjp_inner` on NumPy through LAPACK ``sygst`` (see its Notes).

    With ``H2 = Phi(M) + Phi(M)^T`` (the symmetric matrix with M's lower triangle) and the
    reversal J: ``L^{-T} H2 L^{-1} = J Y J``, ``Y = C^{-1} (J H2 J) C^{-T}``, ``C = J L^T J``
    lower triangular. sygst reads the lower triangle of ``J H2 J``, which is that of
    ``J M^T J``, and writes the lower triangle of Y.
    """
    import numpy as np
    from scipy.linalg import lapack

    n = L.shape[0]
    sygst = lapack.get_lapack_funcs("sygst", (L,))
    # In Fortran order, J M^T J is flip(M) in C order: M's memory reversed; likewise C is L's
    # memory reversed when L is C-ordered (a transposing copy otherwise).
    S = _reversed(M, overwrite_m and M.flags.c_contiguous).T
    if L.flags.c_contiguous:
        C = _reversed(L, overwrite_l).T
    else:
        C = np.flip(L).copy(order="C").T
    Y, info = sygst(S, C, itype=1, lower=1, overwrite_a=1)
    if info != 0:
        raise ValueError(f"cholesky_vjp_inner: LAPACK sygst failed (info={info})")
    # The answer is J (Y_low + Y_low^T) J / 2 with Y_low = tril(Y), diagonal halved. Back to
    # C order: J Y^T J = flip(Y.T) (Y's memory reversed), whose lower triangle holds Y_low.
    T = _reversed(Y.T, Y.T.flags.c_contiguous)
    _clear_strict_upper(T)
    T.flat[:: n + 1] *= 0.5
    if not symmetrize:
        return T  # symmetric part: (T + T^T) / 2, the answer
    X = T + T.T
    X *= 0.5
    return X


def cholesky_vjp_inner(L, M, *, symmetrize: bool = True, overwrite_m: bool = False,
                       overwrite_l: bool = False):
    """Cholesky backward pass from ``M = L^T L_bar`` (n, n), without ``L_bar`` itself.

    Returns ``A_bar = L^{-T} H L^{-1}`` with ``H = (Phi(M) + Phi(M)^T) / 2`` (``Phi``: lower
    triangle with the diagonal halved), which is :func:`cholesky_vjp` after its first product.
    Callers that know ``M`` in factored form skip that O(n^3) product: whitening
    ``A = L^{-1} B`` has ``L^T L_bar = -A_bar A^T`` (design notes 4.1). Only the lower triangle
    of ``M`` is read. The result is symmetric up to round-off.

    Parameters
    ----------
    L : array (n, n)
        Lower Cholesky factor.
    M : array (n, n)
    symmetrize : bool
        False may return ``L^{-T} Phi(M) L^{-1}`` instead (NumPy does), whose symmetric part
        is ``A_bar``: enough wherever only ``<A_bar, dA>`` for symmetric ``dA`` matters (a
        kernel's gram backward pass), and one (n, n) transposed sweep cheaper.
    overwrite_m : bool
        Allow the function to use ``M``'s memory for its work and result (NumPy, C-ordered
        ``M``): fewer (n, n) allocations. ``M`` then holds garbage.
    overwrite_l : bool
        Likewise for ``L`` (NumPy, C-ordered ``L``, from n = 400). ``L`` then holds garbage.

    Returns
    -------
    A_bar : array (n, n)

    Notes
    -----
    Two triangular solves with n right-hand sides (n^3 multiply-adds). On NumPy, from
    n = 400 up, LAPACK's two-sided ``sygst`` does them in about half the work, as it exploits
    the symmetry of ``H``: it computes ``inv(C) S inv(C)^T`` for a lower ``C``, so it runs on
    the index-reversed problem (``J L^T J`` is lower triangular for the reversal ``J``), at the
    price of reversing M, L and the result (in place where ``overwrite_m`` / ``overwrite_l``
    allow). Below that, in-place BLAS ``trsm`` calls on one Fortran-ordered buffer.
    """
    xp = get_namespace(L, M)
    _check_square(L, "L")
    n = L.shape[0]
    if M.shape != (n, n):
        raise ShapeError(f"M: expected shape ({n}, {n}), got {describe_shape(M.shape)}")
    if (array_api_compat.is_numpy_namespace(xp) and n >= _SYGST_MIN_N
            and L.dtype == M.dtype and L.dtype in (xp.float32, xp.float64)):
        return _cholesky_vjp_inner_sygst(L, M, symmetrize, overwrite_m, overwrite_l)
    if array_api_compat.is_numpy_namespace(xp):
        import numpy as np
        from scipy.linalg import blas

        if symmetrize:
            T = np.tril(M, -1)
            H = T + T.T                            # symmetric, so H.T is a Fortran view of H
            H.flat[:: n + 1] = np.diagonal(M)
            alpha = 0.5
        else:
            if overwrite_m and M.flags.c_contiguous and M.dtype == L.dtype:
                H = M
                _clear_strict_upper(H)
            else:
                H = np.tril(M)                     # H.T (Fortran view) is Phi(M)^T: S^T below
            H.flat[:: n + 1] *= 0.5
            alpha = 1.0
        trsm = blas.get_blas_funcs("trsm", (L, H))
        if L.flags.f_contiguous:
            a, lower, t1, t2 = L, 1, 1, 0          # L^{-T} . then . L^{-1}
        else:
            a, lower, t1, t2 = L.T, 0, 0, 1        # the same with U = L^T
        X = trsm(alpha, a, H.T, side=0, lower=lower, trans_a=t1, overwrite_b=1)
        X = trsm(1.0, a, X, side=1, lower=lower, trans_a=t2, overwrite_b=1)
        return X.T if X.flags.f_contiguous else X
    T = xp.tril(M, k=-1)
    H = 0.5 * (T + T.T) + 0.5 * (xp.eye(n, dtype=M.dtype, device=array_api_compat.device(M))
                                 * xp.linalg.diagonal(M)[None, :])
    if array_api_compat.is_torch_namespace(xp):
        import torch

        X = torch.linalg.solve_triangular(L.mT, H, upper=True)
        return torch.linalg.solve_triangular(L, X, upper=False, left=False)
    X = solve_triangular(L, H, lower=True, trans=True)             # L^{-T} H
    return solve_triangular(L, X.T, lower=True, trans=True).T      # (L^{-T} H) L^{-1}, H = H^T


def triangular_matmul(L, B, *, lower: bool = True, trans: bool = False):
    """``op(L) @ B`` for triangular ``L``; only the triangle named by ``lower`` is read.

    Parameters
    ----------
    L : array (n, n)
    B : array (n, k)
    lower : bool
        Whether ``L`` is lower (default) or upper triangular.
    trans : bool
        Multiply by ``L.T`` instead of ``L``.

    Returns
    -------
    X : array (n, k)

    Notes
    -----
    On NumPy this is BLAS ``trmm`` (half the multiply-adds of a GEMM); elsewhere the triangle
    is masked and multiplied with ``matmul``.
    """
    xp = get_namespace(L, B)
    _check_square(L, "L")
    if B.ndim != 2 or B.shape[0] != L.shape[0]:
        raise ShapeError(f"B: expected shape ({L.shape[0]}, k), got {describe_shape(B.shape)}")
    if array_api_compat.is_numpy_namespace(xp):
        from scipy.linalg import blas

        trmm = blas.get_blas_funcs("trmm", (L, B))
        if L.flags.f_contiguous:
            return trmm(1.0, L, B, lower=int(lower), trans_a=int(trans))
        # L.T is a Fortran-ordered view of a C-ordered L: no copy of the (n, n) factor.
        return trmm(1.0, L.T, B, lower=int(not lower), trans_a=int(not trans))
    T = xp.tril(L) if lower else xp.triu(L)
    return (T.T if trans else T) @ B
