"""Symmetric eigendecomposition and the symmetric product ``a a^T``, by LAPACK's and BLAS's
routines for symmetric matrices on NumPy; the namespace's own ``eigh`` and ``@`` elsewhere."""

from __future__ import annotations

import array_api_compat

from gpnum.backend._blas import _scipy_pool, matmul
from gpnum.backend._convert import get_namespace

__all__ = ["eigh", "outer_self"]


def eigh(A, *, floor=None):
    """Eigenvalues (ascending) and orthonormal eigenvectors of the symmetric ``A``; with
    ``floor``, only the eigenvectors whose eigenvalue exceeds ``floor ||A||_F``.

    On NumPy: LAPACK's divide-and-conquer driver ``?syevd`` through SciPy (``driver="evd"``),
    reading the lower triangle only, without SciPy's finiteness scan; for a dense kernel
    matrix it was faster than the relatively robust representations driver ``?syevr`` (SciPy's
    default) and than ``numpy.linalg.eigh`` (docs/multioutput.md, "Speed"). It runs in SciPy's
    BLAS pool (:func:`gpnum.backend.blas_pool`). Other namespaces: ``xp.linalg.eigh`` of
    ``(A + A^T) / 2``, so that what they read of ``A`` does not matter.

    With ``floor`` on NumPy, ``?syevd``'s three stages are called one by one: the
    tridiagonal reduction ``A = Q T Q^T`` (``?sytrd``), all eigenpairs of ``T`` by divide and
    conquer (``?stevd``), and the back-transformation ``U = Q Z`` (``?ormqr`` on ``Q``'s
    Householder vectors) for the wanted columns of ``Z`` only: that last stage, ``2 n^2 r``
    flops for ``r`` vectors instead of ``2 n^3``, is what a subset saves. (``?syevr`` with a
    value range, SciPy's ``subset_by_value``, finds a subset's vectors by bisection and
    inverse iteration, several times slower than the whole ``?syevd`` on a kernel matrix's
    clustered small eigenvalues.) This route reads one triangle of ``A`` (the upper one of a
    C-ordered ``A``), so ``A`` must be exactly symmetric.

    Parameters
    ----------
    A : array (n, n)
        Symmetric and finite (callers check; a NaN gives NaN or a LAPACK error).
    floor : float, optional
        Return the eigenvectors of the eigenvalues ``> floor ||A||_F`` only, with the
        Frobenius norm ``||A||_F = sqrt(sum(eigenvalues^2))`` from the eigenvalues (no pass
        over ``A``).

    Returns
    -------
    eigenvalues : array (n,)
        All of them, ascending.
    eigenvectors : array (n, r)
        Column ``p`` belongs to ``eigenvalues[n - r + p]``; ``r = n`` without ``floor``, else
        the number of eigenvalues ``> floor ||A||_F``.
    """
    xp = get_namespace(A)
    if (array_api_compat.is_numpy_namespace(xp) and A.ndim == 2
            and A.dtype in (xp.float32, xp.float64)):
        import numpy as np
        import scipy.linalg

        if A.shape[0] == 0:
            return xp.linalg.eigh(A)
        if floor is not None:
            return _eigh_subset_lapack(A, float(floor))
        # A C-ordered A is the Fortran-ordered A^T = A: its upper triangle in Fortran terms is
        # A's lower one, and LAPACK reads it in place (SciPy copies a C-ordered input).
        At = A.T if A.flags.c_contiguous else np.asfortranarray(A)
        w, V = scipy.linalg.eigh(At, lower=not A.flags.c_contiguous, driver="evd",
                                 check_finite=False)
        return w, V
    w, V = xp.linalg.eigh(0.5 * (A + xp.matrix_transpose(A)))
    if floor is None:
        return w, V
    n = A.shape[0]
    r = int(xp.sum(xp.astype(w > floor * xp.linalg.vector_norm(w), xp.int64)))
    return w, V[:, n - r:]


def _eigh_subset_lapack(A, floor):
    """:func:`eigh` with ``floor`` on a NumPy ``A`` (n, n), n >= 1: ``?sytrd``, ``?stevd``,
    then ``?ormqr`` on the wanted columns only (LAPACK's ``?syevd`` without the rest of its
    back-transformation)."""
    import numpy as np
    from scipy.linalg import LinAlgError
    from scipy.linalg.lapack import get_lapack_funcs

    n = A.shape[0]
    sytrd, sytrd_lwork, stevd, ormqr = get_lapack_funcs(
        ("sytrd", "sytrd_lwork", "stevd", "ormqr"), (A,))
    # a C-ordered A is the Fortran-ordered A^T; ?sytrd works on a copy c of it (on the copy
    # made here of a strided A, in place)
    At = A.T if A.flags.c_contiguous else np.asfortranarray(A)
    own = not (A.flags.c_contiguous or A.flags.f_contiguous)
    lwork, info = sytrd_lwork(n, lower=1)
    c, d, e, tau, info = sytrd(At, lower=1, lwork=int(lwork), overwrite_a=own)
    if info != 0:
        raise LinAlgError(f"?sytrd failed (info {info})")
    w, Z, info = stevd(d, e if n > 1 else np.zeros(1, dtype=A.dtype), compute_v=1)
    if info != 0:
        raise LinAlgError(f"?stevd did not converge (info {info})")
    first = int(np.searchsorted(w, floor * np.sqrt(np.dot(w, w)), side="right"))
    r = n - first
    if r == 0 or n == 1:
        return w, np.array(Z[:, first:], order="F")
    # Q = H(1) ... H(n-1) with H(i) = I - tau_i v_i v_i^T, v_i zero above row i + 1, one there,
    # and the rest below the subdiagonal of c's column i (LAPACK's ?sytrd, uplo "L"): on rows
    # 1.. it is ?ormqr's Q. Row 0 of U = Q Z is Z's. ?ormqr gets views one element into the
    # Fortran buffers, with leading dimension n and n rows, so no (n, n) or (n, r) copy: the
    # views' last row (c's row 0 right of the diagonal, zeroed here, and U's row 0 one column
    # on) is multiplied by the reflectors' zero entries there and keeps its values.
    c[0, 1:] = 0.0
    reflectors = c.ravel(order="F")[1:1 + n * (n - 1)].reshape((n, n - 1), order="F")
    buf = np.empty(n * r + 1, dtype=A.dtype)
    U = buf[:n * r].reshape((n, r), order="F")
    U[...] = Z[:, first:]
    rows = buf[1:].reshape((n, r), order="F")
    # ?ormqr's optimal workspace, r NB + 65 x 64 (NB <= 64), without a query (which would
    # copy rows)
    out, _, info = ormqr("L", "N", reflectors, tau, rows, 64 * r + 65 * 64, overwrite_c=1)
    if info != 0:
        raise LinAlgError(f"?ormqr failed (info {info})")
    if not np.shares_memory(out, U):  # SciPy worked on a copy
        U[1:, :] = out[:n - 1, :]
    return w, U


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
