"""Squared Euclidean distances between (scaled) inputs, and their vector-Jacobian product.

Two ways to form ``r2[i, j] = |a_i - b_j|^2``:

- up to :data:`EXACT_MAX_DIM` columns, the differences are formed one dimension at a time. This
  is exact up to one rounding per term: never negative, exactly 0 for coincident rows, and
  accurate for close pairs. It costs O(n1 n2 d) elementwise work, which at small ``d`` is no
  more than the expansion below.
- above that, the expansion ``|a|^2 + |b|^2 - 2 a.b`` (one GEMM) on inputs centred at the mean of
  ``b``, which shrinks ``|a|^2`` and ``|b|^2`` and so the cancellation error. The error of the
  expansion is about ``eps (|a|^2 + |b|^2)`` (measured up to 10 ``eps`` at d = 784 on NumPy and
  torch), so ``tau = 4 sqrt(d) eps (|a|^2 + |b|^2)`` is subtracted before clamping at 0 (a soft
  threshold): values that cannot be told from zero become exactly 0, coincident rows included,
  as in the exact path, and the shift of the others is within the expansion's own error.

When the second set is omitted (``B is None``: distances of a set to itself) the result is exactly
symmetric with an exactly zero diagonal.
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace, matmul

__all__ = ["EXACT_MAX_DIM", "sqdist", "sqdist_vjp"]

#: Inputs with at most this many columns get exactly formed differences (measured crossover
#: with the GEMM expansion on 2 CPU cores: about 5 columns at n1 = 4000, n2 = 1000).
EXACT_MAX_DIM = 4


def _zero_diagonal(xp, M):
    """``M`` (n, n) with its diagonal set to 0, through a strided slice of the flattened matrix
    (no (n, n) mask). Where ``reshape`` copies, the copy is set and returned."""
    n = M.shape[0]
    flat = xp.reshape(M, (n * n,))
    flat[::n + 1] = 0.0
    return xp.reshape(flat, (n, n))


def _centred(A, B):
    """``A`` and ``B`` shifted by the column means of ``B`` (of ``A`` when ``B`` is None)."""
    xp = get_namespace(A)
    ref = A if B is None else B
    centre = xp.mean(ref, axis=0)
    Ac = A - centre
    return Ac, (Ac if B is None else B - centre)


def sqdist(A, B=None, *, exact=None):
    """Squared distances ``r2[i, j] = |A[i] - B[j]|^2``.

    Parameters
    ----------
    A : array (n1, d)
    B : array (n2, d) or None
        None means ``B = A``; the result is then exactly symmetric with a zero diagonal.
    exact : bool, optional
        Force the exact per-dimension form (True) or the GEMM expansion (False); by default the
        exact form is used for ``d <= EXACT_MAX_DIM``.

    Returns
    -------
    r2 : array (n1, n2)
        Non-negative squared distances.
    """
    xp = get_namespace(A)
    same = B is None
    Bm = A if same else B
    d = A.shape[1]
    if exact is None:
        exact = d <= EXACT_MAX_DIM
    if exact:
        # In-place updates of this function's own temporaries: no fresh (n1, n2) allocation
        # per column.
        r2 = A[:, 0:1] - Bm[:, 0][None, :]
        r2 *= r2
        for j in range(1, d):
            diff = A[:, j:j + 1] - Bm[:, j][None, :]
            diff *= diff
            r2 += diff
        return r2
    Ac, Bc = _centred(A, B)
    # Columns whose spread dominates (a tiny ARD lengthscale scales one column up by orders of
    # magnitude) would make the expansion's error eps |a|^2 exceed the other columns'
    # contribution, and the matrix lose positive-definiteness: those columns are formed
    # exactly, the rest by the expansion.
    spread = xp.max(Ac * Ac, axis=0) + xp.max(Bc * Bc, axis=0)
    dominant = _dominant_columns(xp, spread)
    r2_exact = None
    if dominant:
        keep = [j for j in range(d) if j not in dominant]
        r2_exact = sqdist(xp.take(A, xp.asarray(dominant, device=device_of(A)), axis=1),
                          None if same else xp.take(Bm, xp.asarray(dominant, device=device_of(A)),
                                                    axis=1), exact=True)
        if not keep:
            return r2_exact
        idx = xp.asarray(keep, device=device_of(A))
        Ac, Bc = xp.take(Ac, idx, axis=1), xp.take(Bc, idx, axis=1)
        d = len(keep)
    # Soft threshold: subtract the rounding-error bound tau = c (|a|^2 + |b|^2) of the
    # expansion, then clamp at 0. Coincident rows (error below tau) give exactly 0, negative
    # values cannot occur, and the shift is within the error of the expansion itself.
    c = 4.0 * math.sqrt(d) * float(xp.finfo(A.dtype).eps)
    sa = (1.0 - c) * xp.sum(Ac * Ac, axis=1)
    sb = sa if same else (1.0 - c) * xp.sum(Bc * Bc, axis=1)
    r2 = matmul(-2.0 * Ac, Bc.T)  # the factor -2 applied to the (n1, d) input, not the (n1, n2) result
    # In-place updates where the standard allows them: every fresh (n1, n2) array costs its
    # page faults (about 0.6 s per 800 MB on this machine's NumPy), more than the arithmetic.
    if same:
        # sa_i + sa_j formed first, so that rounding keeps the result exactly symmetric
        r2 = r2 + r2.T
        r2 *= 0.5
        r2 += sa[:, None] + sa[None, :]
    else:
        r2 += sa[:, None]
        r2 += sb[None, :]
    r2[r2 < 0.0] = 0.0
    if same:
        r2 = _zero_diagonal(xp, r2)
    if r2_exact is not None:
        r2 = r2 + r2_exact
    return r2


#: A column is formed exactly when its squared spread exceeds this many times the sum of the
#: other columns' (then the expansion's error on it would be larger than ~eps x 1e3 of theirs).
_DOMINANT_RATIO = 1e3


def _dominant_columns(xp, spread):
    """Indices (a list, at most EXACT_MAX_DIM) of columns whose squared spread exceeds
    ``_DOMINANT_RATIO`` times the sum over the columns smaller than it; one host sync."""
    from gpnum.backend import to_numpy

    s = [float(v) for v in to_numpy(spread).tolist()]  # d host numbers
    order = sorted(range(len(s)), key=lambda j: -s[j])
    out = []
    rest = math.fsum(s)
    for j in order[:EXACT_MAX_DIM]:
        rest -= s[j]
        if s[j] > 0.0 and s[j] > _DOMINANT_RATIO * max(rest, 0.0):
            out.append(int(j))
        else:
            break
    return sorted(out)


def sqdist_vjp(W, A, B=None, *, per_dim=False, exact=None):
    """Gradient of ``sum(W * sqdist(A, B))`` w.r.t. ``A`` and ``B``.

    Parameters
    ----------
    W : array (n1, n2)
        Cotangent of the squared distances.
    A : array (n1, d)
    B : array (n2, d) or None
        None means ``B = A``: the returned ``gA`` then holds the row and the column
        contributions and ``gB`` is None.
    per_dim : bool
        Also return ``S[k] = sum_ij W[i, j] (A[i, k] - B[j, k])^2`` (used for ARD lengthscales).
    exact : bool, optional
        As in :func:`sqdist`.

    Returns
    -------
    gA : array (n1, d)
    gB : array (n2, d) or None
    S : array (d,) or None
    """
    xp = get_namespace(A, W)
    same = B is None
    Bm = A if same else B
    d = A.shape[1]
    if exact is None:
        exact = d <= EXACT_MAX_DIM
    if exact:
        # Exact differences: the products W * diff stay accurate even where W is large (the
        # Matern-1/2 slope grows like 1/r near coincident points).
        ga_cols, gb_cols, s_parts = [], [], []
        for j in range(d):
            diff = A[:, j:j + 1] - Bm[:, j][None, :]
            wd = W * diff
            ga = 2.0 * xp.sum(wd, axis=1)
            gb = -2.0 * xp.sum(wd, axis=0)
            if same:
                ga = ga + gb
            ga_cols.append(ga)
            gb_cols.append(gb)
            if per_dim:
                diff *= wd  # diff is not needed any more: reuse its buffer
                s_parts.append(xp.sum(diff))
        gA = xp.stack(ga_cols, axis=1)
        gB = None if same else xp.stack(gb_cols, axis=1)
        S = xp.stack(s_parts) if per_dim else None
        return gA, gB, S
    # Expansion: sum_j W_ij (a_i - b_j) = rowsum(W)_i a_i - (W b)_i, on centred inputs (the
    # identity holds for any common shift, and centring keeps the cancellation small).
    Ac, Bc = _centred(A, B)
    row = xp.sum(W, axis=1)
    col = xp.sum(W, axis=0)
    WB = matmul(W, Bc)  # (matmul: see gpnum.backend.matmul on NumPy's and SciPy's BLAS)
    gA = 2.0 * (row[:, None] * Ac - WB)
    WtA = matmul(W.T, Ac)
    gB = 2.0 * (col[:, None] * Bc - WtA)
    S = None
    if per_dim:
        S = row @ (Ac * Ac) + col @ (Bc * Bc) - 2.0 * xp.sum(Ac * WB, axis=0)
    if same:
        return gA + gB, None, S
    return gA, gB, S
