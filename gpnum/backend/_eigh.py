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


def outer_self(a):
    """``a @ a^T`` for ``a`` (n, k): exactly symmetric, in half the multiply-adds of a general
    product.

    NumPy's ``@`` calls BLAS ``?syrk`` when it sees an array times its own transpose; within
    :func:`gpnum.backend.blas_pool` ``("scipy")`` SciPy's ``?syrk`` does, and its lower
    triangle is mirrored. Other namespaces: ``a @ a^T``, symmetrised.
    """
    xp = get_namespace(a)
    n, k = a.shape
    if (array_api_compat.is_numpy_namespace(xp) and a.dtype in (xp.float32, xp.float64)
            and _scipy_pool(xp, n * n * k)):
        from scipy.linalg import blas

        from gpnum.backend._blas import _mirror_lower

        syrk = blas.get_blas_funcs("syrk", (a,))
        # a C-ordered a is the Fortran-ordered a^T: C = (a^T)^T (a^T), trans=1, in Fortran
        # order; its upper triangle (Fortran) is the lower one of the C-ordered transpose
        at = a.T if a.flags.c_contiguous else a
        trans = 1 if a.flags.c_contiguous else 0
        c = syrk(1.0, at, trans=trans, lower=0)
        c = c.T  # C-ordered view; Fortran-upper is now the lower triangle
        if not c.flags.writeable:
            c = c.copy()
        _mirror_lower(c)
        return c
    if array_api_compat.is_numpy_namespace(xp):
        import numpy as np

        # NumPy takes the ?syrk route only for a BLAS-ready (contiguous) array
        a = np.ascontiguousarray(a)
        return a @ a.T
    c = matmul(a, xp.matrix_transpose(a))
    return 0.5 * (c + xp.matrix_transpose(c))  # a general product is symmetric up to rounding
