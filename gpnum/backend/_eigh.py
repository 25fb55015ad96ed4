"""Symmetric eigendecomposition and the symmetric product ``a a^T``, by LAPACK's and BLAS's
routines for symmetric matrices on NumPy; the namespace's own ``eigh`` and ``@`` elsewhere."""

from __future__ import annotations

import array_api_compat

from gpnum.backend._blas import _scipy_pool, matmul
from gpnum.backend._convert import get_namespace

__all__ = ["eigh", "outer_self"]


def eigh(A):
    """Eigenvalues (ascending) and orthonormal eigenvectors of the symmetric ``A``.

    On NumPy: LAPACK's divide-and-conquer driver ``?syevd`` through SciPy (``driver="evd"``),
    reading the lower triangle only, without SciPy's finiteness scan; for a dense kernel
    matrix it was faster than the relatively robust representations driver ``?syevr`` (SciPy's
    default) and than ``numpy.linalg.eigh`` (docs/multioutput.md, "Speed"). It runs in SciPy's
    BLAS pool (:func:`gpnum.backend.blas_pool`). Other namespaces: ``xp.linalg.eigh`` of
    ``(A + A^T) / 2``, so that what they read of ``A`` does not matter.

    Parameters
    ----------
    A : array (n, n)
        Symmetric and finite (callers check; a NaN gives NaN or a LAPACK error).

    Returns
    -------
    eigenvalues : array (n,)
    eigenvectors : array (n, n)
        Column ``p`` belongs to ``eigenvalues[p]``.
    """
    xp = get_namespace(A)
    if (array_api_compat.is_numpy_namespace(xp) and A.ndim == 2
            and A.dtype in (xp.float32, xp.float64)):
        import numpy as np
        import scipy.linalg

        if A.shape[0] == 0:
            return xp.linalg.eigh(A)
        # A C-ordered A is the Fortran-ordered A^T = A: its upper triangle in Fortran terms is
        # A's lower one, and LAPACK reads it in place (SciPy copies a C-ordered input).
        At = A.T if A.flags.c_contiguous else np.asfortranarray(A)
        w, V = scipy.linalg.eigh(At, lower=not A.flags.c_contiguous, driver="evd",
                                 check_finite=False)
        return w, V
    return xp.linalg.eigh(0.5 * (A + xp.matrix_transpose(A)))


def outer_self(a, *, plus=None, shift=0.0):
    """``a a^T + P Q^T + shift I`` for ``a`` (n, k), exactly symmetric, with ``a a^T`` in half
    the multiply-adds of a general product.

    On NumPy one ``(n, n)`` array is written, in place: BLAS ``?syrk`` for ``a a^T`` (within
    :func:`gpnum.backend.blas_pool` ``("scipy")`` SciPy's, else NumPy's ``@``, which calls
    ``?syrk`` for an array times its own transpose), ``?gemm`` with ``beta = 1`` for
    ``P Q^T``, the shift on the diagonal, then one triangle mirrored. Other namespaces: the
    sum of the products, symmetrised.

    Parameters
    ----------
    a : array (n, k)
    plus : tuple (P, Q) of arrays (n, r), optional
        A low-rank term whose product ``P Q^T`` is symmetric (as ``(A B) A^T`` with ``B``
        symmetric); only one of its triangles is used on NumPy.
    shift : float

    Returns
    -------
    array (n, n)
    """
    xp = get_namespace(a)
    n, k = a.shape
    if array_api_compat.is_numpy_namespace(xp) and a.dtype in (xp.float32, xp.float64):
        import numpy as np

        from gpnum.backend._blas import _mirror_lower

        if _scipy_pool(xp, n * n * k):
            from scipy.linalg import blas

            syrk = blas.get_blas_funcs("syrk", (a,))
            # a C-ordered a is the Fortran-ordered a^T: c = (a^T)^T (a^T) with trans=1; c is
            # Fortran-ordered with its upper triangle written
            at, trans = (a.T, 1) if a.flags.c_contiguous else (a, 0)
            c = syrk(1.0, at, trans=trans, lower=0)
            if plus is not None:
                P, Q = plus
                gemm = blas.get_blas_funcs("gemm", (c, P, Q))
                c = gemm(1.0, P, Q, trans_b=1, beta=1.0, c=c, overwrite_c=1)
            c = c.T  # C order: the written triangle is now the lower one
        else:
            a = np.ascontiguousarray(a)  # NumPy takes the ?syrk route for a BLAS-ready array
            c = a @ a.T
            if plus is not None:
                c += plus[0] @ plus[1].T
        if shift:
            c.flat[::n + 1] += shift
        _mirror_lower(c)
        return c
    c = matmul(a, xp.matrix_transpose(a))
    if plus is not None:
        c = c + matmul(plus[0], xp.matrix_transpose(plus[1]))
    c = 0.5 * (c + xp.matrix_transpose(c))  # a general product is symmetric up to rounding
    if shift:
        c = c + shift * xp.eye(n, dtype=c.dtype, device=c.device)
    return c
