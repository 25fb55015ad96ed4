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

__all__ = ["EXACT_MAX_DIM", "sqdist", "sqdist_upper_blocks", "sqdist_vjp", "SqdistVJPRows"]

#: Inputs with at most this many columns get exactly formed differences (below the measured
#: crossover with the GEMM expansion, docs/benchmarks.md).
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
    split = _split_dominant(xp, Ac, Bc)
    r2_exact = None
    if split is not None:
        dominant, keep = split
        r2_exact = sqdist(_cols(xp, A, dominant), None if same else _cols(xp, Bm, dominant),
                          exact=True)
        if not keep:
            return r2_exact
        Ac, Bc = _cols(xp, Ac, keep), _cols(xp, Bc, keep)
        d = len(keep)
    # Soft threshold: subtract the rounding-error bound tau = c (|a|^2 + |b|^2) of the
    # expansion, then clamp at 0. Coincident rows (error below tau) give exactly 0, negative
    # values cannot occur, and the shift is within the error of the expansion itself.
    c = 4.0 * math.sqrt(d) * float(xp.finfo(A.dtype).eps)
    sa = (1.0 - c) * xp.sum(Ac * Ac, axis=1)
    sb = sa if same else (1.0 - c) * xp.sum(Bc * Bc, axis=1)
    r2 = matmul(-2.0 * Ac, Bc.T)  # the factor -2 applied to the (n1, d) input, not the (n1, n2) result
    # In-place updates where the standard allows them: every fresh (n1, n2) array costs its
    # page faults, which on NumPy cost more than the arithmetic.
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


def sqdist_upper_blocks(A, *, block_elements, min_rows=16, exact=None):
    """The upper block rows of ``sqdist(A)``, one at a time: for building a symmetric matrix
    (a gram matrix and its slope) block by block, while each block is in cache.

    Yields ``(i0, i1, r2)`` with ``r2 = sqdist(A)[i0:i1, i0:]`` of shape (i1 - i0, n - i0), about
    ``block_elements`` elements each (at least ``min_rows`` rows). The inputs are centred and
    their norms formed once, not per block. Each block's leading (i1 - i0) square tile is made
    exactly symmetric (the mean of it and its transpose) with an exactly zero diagonal, as
    :func:`sqdist` ``(A)`` is; mirroring the rest of each block row below the diagonal then
    gives an exactly symmetric matrix. Values agree with :func:`sqdist` to its rounding error
    (the same exact / expansion forms, the same soft threshold).

    Parameters
    ----------
    A : array (n, d)
    block_elements : int
    min_rows : int
    exact : bool, optional
        As in :func:`sqdist`.
    """
    xp = get_namespace(A)
    n, d = A.shape
    if exact is None:
        exact = d <= EXACT_MAX_DIM
    Ac = r2_exact_cols = sa = None
    if not exact:
        Ac, _ = _centred(A, None)
        split = _split_dominant(xp, Ac, Ac)
        if split is not None:
            dominant, keep = split
            r2_exact_cols = _cols(xp, A, dominant)
            Ac = _cols(xp, Ac, keep) if keep else None
        if Ac is not None:
            c = 4.0 * math.sqrt(Ac.shape[1]) * float(xp.finfo(A.dtype).eps)
            sa = (1.0 - c) * xp.sum(Ac * Ac, axis=1)
            Am2 = -2.0 * Ac
    i0 = 0
    while i0 < n:
        i1 = min(n, i0 + max(min_rows, block_elements // (n - i0)))
        b = i1 - i0
        if exact:
            r2 = sqdist(A[i0:i1, :], A[i0:, :], exact=True)
        else:
            r2 = None
            if Ac is not None:
                r2 = matmul(Am2[i0:i1, :], Ac[i0:, :].T)
                r2 += sa[i0:i1, None]
                r2 += sa[None, i0:]
                r2[r2 < 0.0] = 0.0
            if r2_exact_cols is not None:
                part = sqdist(r2_exact_cols[i0:i1, :], r2_exact_cols[i0:, :], exact=True)
                r2 = part if r2 is None else r2 + part
        tile = r2[:, :b]
        tile = 0.5 * (tile + tile.T)
        r2[:, :b] = _zero_diagonal(xp, tile)
        yield i0, i1, r2
        i0 = i1


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


def _cols(xp, X, cols):
    return xp.take(X, xp.asarray(cols, device=device_of(X)), axis=1)


def _split_dominant(xp, Ac, Bc):
    """``(dominant, rest)``: the column index lists of the centred inputs that are formed
    exactly (see :data:`_DOMINANT_RATIO`) and by the expansion, or None when none dominates."""
    spread = xp.max(Ac * Ac, axis=0) + xp.max(Bc * Bc, axis=0)
    dominant = _dominant_columns(xp, spread)
    if not dominant:
        return None
    return dominant, [j for j in range(Ac.shape[1]) if j not in dominant]


def _merge_columns(xp, parts, d):
    """``(gA, gB, S)`` over all ``d`` columns from ``[(columns, (gA, gB, S))]`` of subsets."""
    where = {}
    for p, (cols, _) in enumerate(parts):
        for i, j in enumerate(cols):
            where[j] = (p, i)

    def merged(k, stack_axis):
        if parts[0][1][k] is None:
            return None
        pieces = []
        for j in range(d):
            p, i = where[j]
            arr = parts[p][1][k]
            pieces.append(arr[:, i] if stack_axis == 1 else arr[i])
        return xp.stack(pieces, axis=stack_axis if stack_axis == 1 else 0)

    gA, gB = merged(0, 1), merged(1, 1)
    S = merged(2, 0)
    return gA, gB, S


def sqdist_vjp(W, A, B=None, *, per_dim=False, exact=None, _check_dominant=True):
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
    if _check_dominant:
        split = _split_dominant(xp, Ac, Bc)
        if split is not None:
            # as in sqdist: a dominant column's squared differences would be lost in the
            # expansion's rounding of its |a|^2 (and with them its lengthscale's gradient)
            dom, keep = split
            parts = [(dom, sqdist_vjp(W, _cols(xp, A, dom), None if same else _cols(xp, B, dom),
                                      per_dim=per_dim, exact=True))]
            if keep:
                parts.append((keep, sqdist_vjp(W, _cols(xp, A, keep),
                                               None if same else _cols(xp, B, keep),
                                               per_dim=per_dim, exact=False,
                                               _check_dominant=False)))
            return _merge_columns(xp, parts, d)
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


class SqdistVJPRows:
    """:func:`sqdist_vjp` of ``(W, A, B)`` accumulated over blocks of ``W``, given one block at
    a time (for cotangents too large to form whole).

    A block covers rows ``s:e`` and the columns from ``c0`` on: whole rows, or the upper block
    rows of a symmetric problem. The inputs are centred and their norms formed once; per block
    the work is the block's own plus two GEMMs with ``d`` columns, not the O(n2 d) set-up a call
    of :func:`sqdist_vjp` per block would repeat. ``B`` None means ``B = A``: :meth:`result`'s
    ``gA`` then holds the row and the column contributions and ``gB`` is None.

    Parameters
    ----------
    A : array (n1, d)
    B : array (n2, d) or None
    per_dim, exact
        As in :func:`sqdist_vjp`.
    """

    def __init__(self, A, B=None, *, per_dim=False, exact=None, _check_dominant=True):
        xp = get_namespace(A)
        self.xp, self.A, self.B, self.per_dim = xp, A, B, per_dim
        self.Bm = A if B is None else B
        self.d = A.shape[1]
        self.exact = A.shape[1] <= EXACT_MAX_DIM if exact is None else exact
        self.split = None
        if not self.exact:
            # centred on the column points' mean: shift-invariant, and it keeps |a|^2 small
            centre = xp.mean(self.Bm, axis=0)
            self.Ac, self.Bc = A - centre, self.Bm - centre
            split = _split_dominant(xp, self.Ac, self.Bc) if _check_dominant else None
            if split is not None:
                # dominant columns exactly, as sqdist forms them (see sqdist_vjp)
                self.split = [(cols, SqdistVJPRows(
                    _cols(xp, A, cols), None if B is None else _cols(xp, B, cols),
                    per_dim=per_dim, exact=exact_cols, _check_dominant=False))
                    for cols, exact_cols in ((split[0], True), (split[1], False)) if cols]
                return
            self.row = xp.zeros((A.shape[0],), dtype=A.dtype, device=device_of(A))
            self.col = xp.zeros((self.Bm.shape[0],), dtype=A.dtype, device=device_of(A))
        self.gA = xp.zeros_like(A)
        self.gB = xp.zeros_like(self.Bm)
        self.S = None

    def add(self, W, s, e, c0=0):
        """Add the block ``W`` (e - s, n2 - c0) of the cotangent: rows ``s:e``, columns
        ``c0:``."""
        xp = self.xp
        if self.split is not None:
            for _, part in self.split:
                part.add(W, s, e, c0)
            return
        if self.exact:
            gA, gB, S = sqdist_vjp(W, self.A[s:e, :], self.Bm[c0:, :], per_dim=self.per_dim,
                                   exact=True)
            self.gA[s:e, :] += gA
            self.gB[c0:, :] += gB
        else:
            Ac, Bc = self.Ac[s:e, :], self.Bc[c0:, :]
            self.row[s:e] += xp.sum(W, axis=1)
            self.col[c0:] += xp.sum(W, axis=0)
            WB = matmul(W, Bc)
            self.gA[s:e, :] -= 2.0 * WB
            self.gB[c0:, :] -= 2.0 * matmul(xp.matrix_transpose(W), Ac)
            S = -2.0 * xp.sum(Ac * WB, axis=0) if self.per_dim else None
        if S is not None:
            self.S = S if self.S is None else self.S + S

    def result(self):
        """``(gA, gB, S)`` as :func:`sqdist_vjp` of the whole cotangent returns them."""
        if self.split is not None:
            return _merge_columns(self.xp, [(cols, part.result()) for cols, part in self.split],
                                  self.d)
        gA, gB, S = self.gA, self.gB, self.S
        if not self.exact:
            gA = gA + 2.0 * (self.row[:, None] * self.Ac)
            gB = gB + 2.0 * (self.col[:, None] * self.Bc)
            if self.per_dim:
                S = (S + matmul(self.xp.matrix_transpose(self.Ac * self.Ac), self.row)
                     + matmul(self.xp.matrix_transpose(self.Bc * self.Bc), self.col))
        if self.B is None:
            return gA + gB, None, S
        return gA, gB, S
