"""Linear algebra the array API standard lacks: jittered Cholesky, triangular and Cholesky solves.

Each function dispatches on the namespace of its inputs: SciPy for NumPy, ``cupyx.scipy.linalg``
for CuPy (imported lazily: it fails to import where the CUDA libraries are missing),
``torch.linalg`` for torch, and a correct but slower fallback through ``xp.linalg.solve`` for any
other namespace (``array_api_strict`` included).
"""

from __future__ import annotations

import math

import array_api_compat

from gpnum.backend._blas import _clear_strict_upper, _mirror_lower, matmul
from gpnum.backend._convert import get_namespace
from gpnum.errors import NotPSDError, ShapeError, check_finite, describe_shape

__all__ = [
    "cholesky",
    "cholesky_vjp",
    "cholesky_vjp_inner",
    "solve_triangular",
    "triangular_matmul",
    "triangular_inverse",
    "cho_inverse",
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


def _raw_cholesky(xp, A, shift=0.0):
    """Lower Cholesky factor of ``A + shift I``, or ``None`` if the factorisation fails."""
    if _is_lapack_input(xp, A):
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


def _is_lapack_input(xp, L):
    """Whether ``L`` is a NumPy float32/float64 array that LAPACK can take directly."""
    return array_api_compat.is_numpy_namespace(xp) and L.dtype in (xp.float32, xp.float64)


def _lapack_triangular(L, routine, lower, what):
    """LAPACK ``routine`` (``trtri`` or ``potri``) on one Fortran-ordered copy of ``L`` (n, n).

    A C-ordered ``L`` read as Fortran is ``L^T`` (the other triangle), so that copy is taken of
    ``L.T`` with the triangle flag flipped, and the result transposed back. Raises
    :class:`NotPSDError` naming ``what`` if ``L`` has a zero on its diagonal.
    """
    import numpy as np
    from scipy.linalg import lapack

    n = L.shape[0]
    c_order = not L.flags.f_contiguous
    F = np.array(L.T if c_order else L, order="F")
    func = lapack.get_lapack_funcs(routine, (F,))
    inv, info = func(F, lower=int(lower != c_order), overwrite_c=1)
    if info > 0:
        raise NotPSDError(f"{what} of size {n} x {n} is singular: diagonal entry "
                          f"{info - 1} is zero")
    if info < 0:
        raise ValueError(f"LAPACK {routine}: illegal argument {-info}")
    return inv.T if c_order else inv


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
    if _is_lapack_input(xp, L):
        import numpy as np

        inv = _lapack_triangular(L, "trtri", lower, "triangular matrix")
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
    if _is_lapack_input(xp, L):
        # potri fills one triangle (the lower one of the F-ordered array, or of its transpose).
        out = _lapack_triangular(L, "potri", True, "Cholesky factor")
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
    ``A = L^{-1} B`` (the whitened SVGP of Hensman et al. 2015) has ``L^T L_bar = -A_bar A^T``.
    Only the lower triangle of ``M`` is read. The result is symmetric up to round-off.

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
