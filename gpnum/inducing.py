"""Choosing inducing points: k-means++/Lloyd centres and greedy conditional-variance selection.

Both run on any array backend and return arrays in the namespace, dtype and device of ``X``.

- :func:`kmeans`: k-means++ seeding (Arthur & Vassilvitskii 2007) followed by Lloyd iterations,
  processed in row blocks so that the ``(n, m)`` distance matrix never exists at once.
- :func:`greedy_variance`: the greedy conditional-variance rule of Burt, Rasmussen & van der Wilk
  (2020), a partial pivoted Cholesky factorisation of ``k(X, X)`` that never forms the matrix.

See ``docs/inducing.md``.
"""

from __future__ import annotations

import warnings

from gpnum.backend import default_rng, device_of, get_namespace, is_array
from gpnum.errors import (
    ShapeError,
    check_finite,
    check_int,
    check_points_shape,
    check_positive,
    describe_shape,
)

__all__ = ["kmeans", "greedy_variance"]

#: Default number of elements of one (chunk, m) block of distances: 16 MB in float64.
_BLOCK_ELEMENTS = 2**21
#: Lloyd iterations between host synchronisations that test for convergence.
_KMEANS_CHECK_EVERY = 4
#: Pivoted-Cholesky steps between host synchronisations that test the stopping rules.
_GREEDY_CHECK_EVERY = 8


# ---------------------------------------------------------------------------------- checks
def _check_points(X, name="X"):
    if not is_array(X):
        raise TypeError(f"{name}: expected a 2-D array of shape (n, d), got {type(X).__name__}")
    xp = get_namespace(X)
    check_points_shape(X, name)
    if not xp.isdtype(X.dtype, "real floating"):
        raise TypeError(f"{name}: expected a real floating dtype, got {X.dtype}")
    check_finite(xp, X, name)
    return xp


def _check_count(value, name, *, low, high=None, high_what=None):
    value = check_int(value, name, minimum=low)
    if high is not None and value > high:
        raise ValueError(f"{name}: expected at most {high_what}, got {value}")
    return value


# ----------------------------------------------------------------------------------- k-means
def _near_tol(xp, Xc):
    """Squared distance below which two points count as the same (near-duplicates): ``sqrt(eps)``
    of the dtype times the mean squared norm of the centred rows (1.5e-8 in float64, 3.5e-4 in
    float32, relative), as a 0-d array. Two inducing points that close make ``K_ZZ`` singular to
    working precision whatever the lengthscale."""
    eps = float(xp.finfo(Xc.dtype).eps)
    return (eps ** 0.5) * xp.mean(xp.sum(Xc * Xc, axis=1))


def _kmeanspp(xp, Xc, m, rng):
    """k-means++ seeding: the indices (m,) of the chosen rows, and how many of the rows are
    distinguishable (further apart than :func:`_near_tol`) if fewer than ``m`` (else None).

    Each new centre is row ``i`` with probability ``D_i / sum(D)``, ``D_i`` the squared distance
    from row ``i`` to its nearest chosen centre. Memory O(n); one host synchronisation.
    """
    n = Xc.shape[0]
    dev = device_of(Xc)
    rows = xp.arange(n, dtype=xp.int64, device=dev)
    no_row = xp.full((n,), -1, dtype=xp.int64, device=dev)
    picks = [rng.integers(0, n, (1,))]
    u = rng.uniform((m,), dtype=Xc.dtype)
    # Differences, not the |x|^2 - 2 x.c + |c|^2 expansion: D_i is then exactly 0 for copies of
    # a chosen centre, which is what makes the count of distinct rows exact.
    tol = _near_tol(xp, Xc)

    def gap(i):  # squared distances to row i, 0 for its near-duplicates: never picked
        D_i = xp.sum((Xc - xp.take(Xc, i, axis=0)) ** 2, axis=1)
        return xp.where(D_i > tol, D_i, xp.zeros_like(D_i))

    D = gap(picks[0])
    totals = []
    for j in range(1, m):
        cum = xp.cumulative_sum(D)
        total = cum[-1]
        totals.append(total)
        # side="right" lands on a row with D_i > 0 whenever total > 0; rounding at the top end
        # is caught by capping at the last row with D_i > 0.
        i = xp.searchsorted(cum, xp.reshape(u[j] * total, (1,)), side="right")
        last = xp.max(xp.where(D > 0.0, rows, no_row))
        i = xp.clip(xp.minimum(i, last), 0, n - 1)
        picks.append(i)
        D = xp.minimum(D, gap(i))
    idx = xp.concat(picks)
    if totals:
        totals = xp.stack(totals)
        # once every row coincides with a centre the total stays 0: rows are then exhausted
        if bool(xp.any(totals <= 0.0)):
            return idx, 1 + int(xp.sum(xp.astype(totals > 0.0, xp.int64)))
    return idx, None


def _lloyd_pass(xp, Xc1, C, chunk):
    """One assignment pass in row blocks of ``chunk``.

    ``Xc1`` (n, d + 1) holds the points with a column of ones appended, so that one GEMM with
    the one-hot assignment block gives both the per-centre sums and the counts. Returns labels
    (n,), squared distance to the nearest centre (n,), sums (m, d) and counts (m,). Memory
    O(chunk * m) besides the outputs.
    """
    n, d = Xc1.shape[0], Xc1.shape[1] - 1
    m = C.shape[0]
    dev = device_of(Xc1)
    centre_ids = xp.arange(m, dtype=xp.int64, device=dev)
    # [x, 1] . [-2c, |c|^2] = |x - c|^2 - |x|^2: the row constant does not change the argmin
    scores = xp.concat([-2.0 * C, xp.sum(C * C, axis=1)[:, None]], axis=1).T
    sums1 = xp.zeros((m, d + 1), dtype=Xc1.dtype, device=dev)
    labels, nearest = [], []
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)  # out-of-range slice ends are unspecified in the standard
        Xb = Xc1[start:stop, :]
        lab = xp.argmin(Xb @ scores, axis=1)
        labels.append(lab)
        # O(chunk d) from the gathered centres, instead of another pass over (chunk, m)
        nearest.append(xp.sum((Xb[:, :d] - xp.take(C, lab, axis=0)) ** 2, axis=1))
        # scatter-add through a one-hot block: the array API has no bincount / index_add
        onehot = xp.astype(lab[:, None] == centre_ids[None, :], Xc1.dtype)
        sums1 = sums1 + onehot.T @ Xb
    return xp.concat(labels), xp.concat(nearest), sums1[:, :d], sums1[:, d]


def _lloyd_step(xp, Xc1, C, chunk):
    """One Lloyd iteration: assign rows to centres ``C`` (m, d), move each centre to the mean
    of its rows; a centre left without rows takes the k-th farthest row from its own centre,
    for the k-th empty cluster. ``Xc1`` is (n, d + 1): the points and a column of ones.
    Returns the new centres, the labels (n,) and the empty flags (m,).
    """
    n, d = Xc1.shape[0], Xc1.shape[1] - 1
    labels, nearest, sums, counts = _lloyd_pass(xp, Xc1, C, chunk)
    empty = counts == 0.0
    means = sums / xp.where(empty, 1.0, counts)[:, None]
    farthest = xp.argsort(nearest, descending=True)
    rank = xp.clip(xp.cumulative_sum(xp.astype(empty, xp.int64)) - 1, 0, n - 1)
    reseed = xp.take(Xc1, xp.take(farthest, rank, axis=0), axis=0)[:, :d]
    return xp.where(empty[:, None], reseed, means), labels, empty


def kmeans(X, m, *, seed, num_iter=50, tol=1e-4, chunk_size=None):
    """k-means centres of the rows of ``X``, for initialising inducing points.

    k-means++ seeding (Arthur & Vassilvitskii 2007, "k-means++: the advantages of careful
    seeding") followed by Lloyd iterations. Distances are computed for blocks of ``chunk_size``
    rows at a time, so memory is O(n d + chunk_size m) and the (n, m) distance matrix is never
    formed; each iteration costs two GEMMs of (n, d) by (d, m). A cluster that loses all its
    points is re-seeded at the point farthest from its centre (the k-th empty cluster takes the
    k-th farthest point).

    Iteration stops after ``num_iter`` iterations, or earlier (tested every few iterations, to
    keep host synchronisations rare) once an iteration moves no point between clusters (a fixed
    point of Lloyd's algorithm), or once the centres move little: as in scikit-learn, the summed
    squared shift of the centres is at most ``tol`` times the mean per-column variance of ``X``.

    Parameters
    ----------
    X : array (n, d)
        Finite points of a real floating dtype, any backend.
    m : int
        Number of centres, 1 <= m <= number of distinct rows of ``X``.
    seed : int
        Seed of the k-means++ draws (required: the result depends on it).
    num_iter : int
        Maximum number of Lloyd iterations, >= 0 (0 returns the k-means++ seeds, rows of X).
    tol : float
        Relative tolerance on the centre shift, >= 0 (0: run to a fixed point or ``num_iter``).
    chunk_size : int, optional
        Rows per distance block, >= 1. Default ``max(1, 2**21 // m)`` (16 MB blocks in float64).

    Returns
    -------
    Z : array (m, d)
        The centres, in the namespace, dtype and device of ``X``.

    Raises
    ------
    ValueError
        If ``m`` exceeds the number of rows or of distinct rows, ``X`` is not finite, or a
        numeric argument is out of range.
    ShapeError, TypeError
        If ``X`` is not a 2-D floating array or an argument has the wrong type.
    """
    xp = _check_points(X)
    n, d = X.shape
    m = _check_count(m, "m", low=1, high=n, high_what=f"n = {n} (the rows of X)")
    num_iter = _check_count(num_iter, "num_iter", low=0)
    seed = _check_count(seed, "seed", low=0)
    tol = check_positive(tol, "tol", allow_zero=True)
    if chunk_size is None:
        chunk_size = max(1, _BLOCK_ELEMENTS // m)
    chunk = _check_count(chunk_size, "chunk_size", low=1)
    dev = device_of(X)

    # Centring keeps |x|^2 - 2 x.c + |c|^2 accurate in float32 for data far from the origin.
    mean = xp.mean(X, axis=0)
    Xc = X - mean
    rng = default_rng(seed, xp=xp, device=dev)
    idx, distinct = _kmeanspp(xp, Xc, m, rng)
    if distinct is not None:
        raise ValueError(f"m: expected at most the number of distinct rows of X, got m = {m} "
                         f"but X (shape {describe_shape(X.shape)}) has only {distinct} distinct "
                         "rows")
    C = xp.take(Xc, idx, axis=0)
    seeds = C

    shift_tol = tol * xp.mean(Xc * Xc)  # tol times the mean column variance
    Xc1 = xp.concat([Xc, xp.ones((n, 1), dtype=X.dtype, device=dev)], axis=1)
    previous = None
    for it in range(num_iter):
        C_new, labels, empty = _lloyd_step(xp, Xc1, C, chunk)
        if previous is not None and ((it + 1) % _KMEANS_CHECK_EVERY == 0):
            fixed = ~(xp.any(labels != previous) | xp.any(empty))
            small = xp.sum((C_new - C) ** 2) <= shift_tol
            if bool(fixed | small):
                C = C_new
                break
        C, previous = C_new, labels
    return _separate_centres(xp, C, seeds, Xc) + mean


def _sq_dists(xp, A, B):
    """Squared distances (n1, n2) by the expansion (its error, eps |a|^2, is far below the
    near-duplicate tolerance of :func:`_near_tol`)."""
    na = xp.sum(A * A, axis=1)
    nb = xp.sum(B * B, axis=1)
    return xp.clip(na[:, None] + nb[None, :] - 2.0 * (A @ B.T), min=0.0)


def _separate_centres(xp, C, seeds, Xc):
    """``C`` with any centre that has become a near-duplicate of an earlier one (Lloyd can
    move two centres into one tight cluster) replaced by its k-means++ seed, a row of ``X`` at
    least :func:`_near_tol` away from every other seed; if that still collides, by the row of
    ``X`` farthest from all centres. One host synchronisation when nothing collides."""
    tol = _near_tol(xp, Xc)
    m = C.shape[0]
    if m < 2:
        return C
    dev = device_of(C)
    upper = xp.arange(m, device=dev)[:, None] < xp.arange(m, device=dev)[None, :]
    for _ in range(2 * m):
        D = _sq_dists(xp, C, C)
        close = (D <= tol) & upper
        if not bool(xp.any(close)):
            return C
        j = int(xp.argmax(xp.astype(xp.any(close, axis=0), xp.int32)))  # the later of a pair
        cand = seeds[j:j + 1, :]
        if bool(xp.any(xp.sum((C - cand) ** 2, axis=1) <= tol)):
            far = xp.min(_sq_dists(xp, Xc, C), axis=1)
            cand = xp.take(Xc, xp.reshape(xp.argmax(far), (1,)), axis=0)
        rows = xp.arange(m, device=dev)[:, None] == j
        C = xp.where(rows, cand, C)
    return C


# ------------------------------------------------------------------------- greedy variance
def greedy_variance(X, m, kernel, *, threshold=0.0):
    """Inducing points by greedy conditional variance (a partial pivoted Cholesky of k(X, X)).

    Burt, Rasmussen & van der Wilk (2020), "Convergence of sparse variational inference in
    Gaussian processes regression", JMLR 21(131)): repeatedly pick the point whose
    variance conditioned on the points chosen so far, ``d_i = k(x_i, x_i) - Q_ii`` with
    ``Q = K_XZ K_ZZ^{-1} K_ZX``, is largest. This is the pivot rule of the partial pivoted
    Cholesky factorisation ``K ~= L L^T`` (L of shape (n, m)); the residual trace ``sum(d) =
    tr(K - Q)`` bounds the KL gap of the sparse approximation. It uses ``kernel.diag(X)`` and
    one column ``kernel(X, x_i)`` per chosen point and never forms ``k(X, X)``: O(n m^2) time,
    O(n m) memory.

    Selection stops early, returning fewer than ``m`` points, when

    - the residual trace ``tr(K - Q)`` is at most ``threshold`` (the points chosen so far are
      good enough by Burt et al.'s criterion); or
    - the largest residual variance falls to ``max(m eps, sqrt(eps)) max(diag)``: the
      remaining points are (numerically) in the span of the chosen ones, e.g. duplicates or
      near-duplicates, whose addition would make ``K_ZZ`` singular to working precision. This
      case warns, since the caller asked for more points than the data can support.

    At least one point is always returned.

    Parameters
    ----------
    X : array (n, d)
        Candidate points, any backend.
    m : int
        Maximum number of points, 1 <= m <= n.
    kernel : callable
        ``kernel(X1, X2) -> (n1, n2)`` in ``X``'s namespace and dtype, with
        ``kernel.diag(X) -> (n,)`` (every :mod:`gpnum.kernels` kernel qualifies).
    threshold : float
        Stop once the residual trace is <= threshold (>= 0; default 0: take ``m`` points).

    Returns
    -------
    Z : array (m_out, d)
        The chosen points, in the order chosen (``m_out <= m``).
    indices : array (m_out,) of int64
        Their row indices in ``X``.

    Raises
    ------
    ValueError
        If ``m`` is out of range, ``threshold`` is negative, ``X`` or the kernel diagonal is not
        finite, or the kernel diagonal is negative somewhere (not a covariance function).
    ShapeError, TypeError
        If ``X`` or the kernel's outputs have the wrong shape, dtype or library.
    """
    xp = _check_points(X)
    n, d = X.shape
    m = _check_count(m, "m", low=1, high=n, high_what=f"n = {n} (the rows of X)")
    threshold = check_positive(threshold, "threshold", allow_zero=True)
    if not callable(kernel) or not callable(getattr(kernel, "diag", None)):
        raise TypeError(f"kernel: expected a covariance function k(X1, X2) with a k.diag(X) "
                        f"method, got {type(kernel).__name__}")
    dev = device_of(X)

    diag = _kernel_output(kernel.diag(X), X, (n,), "kernel.diag(X)")
    if not bool(xp.all(xp.isfinite(diag))):
        check_finite(xp, diag, "kernel.diag(X)")
    if bool(xp.any(diag < 0.0)):
        raise ValueError("kernel.diag(X): expected variances >= 0, got negative values; "
                         "kernel is not a covariance function")
    eps = float(xp.finfo(X.dtype).eps)
    # A point whose residual variance is below sqrt(eps) of the largest prior variance is a
    # near-duplicate of the chosen ones (or in their span): taking it would make K_ZZ
    # singular to working precision.
    tiny = max(m * eps, eps ** 0.5) * xp.max(diag)

    rows = xp.arange(n, dtype=xp.int64, device=dev)
    L = xp.zeros((n, m), dtype=X.dtype, device=dev)
    resid = diag
    pivots, trace_ok, var_ok = [], [], []  # the rules' verdicts since the last check
    m_out, rank_stop = m, False
    for j in range(m):
        pivot = xp.reshape(xp.argmax(resid), (1,))
        pivot_var = xp.take(resid, pivot, axis=0)
        if j > 0:
            # the two rules for taking point j, tested in blocks to avoid a sync per step
            trace_ok.append(xp.sum(resid) > threshold)
            var_ok.append(pivot_var[0] > tiny)
        pivots.append(pivot)
        col = _kernel_output(kernel(X, xp.take(X, pivot, axis=0)), X, (n, 1),
                             "kernel(X, X[i:i+1])")[:, 0]
        if j > 0:
            col = col - L[:, :j] @ xp.take(L, pivot, axis=0)[0, :j]
        # a zero pivot only occurs past a stop, in a column that is then discarded
        col = col / xp.sqrt(xp.where(pivot_var > 0.0, pivot_var, 1.0))
        L[:, j] = col
        # the chosen point's residual is exactly 0 (not rounding noise), and none is negative
        resid = xp.where(rows == pivot, 0.0, xp.maximum(resid - col * col, 0.0))
        if trace_ok and ((j + 1) % _GREEDY_CHECK_EVERY == 0 or j == m - 1):
            by_trace, by_var = xp.stack(trace_ok), xp.stack(var_ok)
            if not bool(xp.all(by_trace & by_var)):
                # the first refusal truncates the selection; the columns computed after it
                # are discarded
                k = int(xp.argmin(xp.astype(by_trace & by_var, xp.int32)))
                m_out = j + 1 - len(trace_ok) + k  # the refused point's step number
                # with threshold 0 a failed trace rule means an exactly zero residual: rank
                rank_stop = bool(by_trace[k]) or threshold == 0.0
                break
            trace_ok, var_ok = [], []
    if rank_stop:
        warnings.warn(f"greedy_variance: the largest residual variance fell to rounding level "
                      f"after {m_out} points: the other rows of X are numerically in their span "
                      f"(e.g. duplicates); returning {m_out} < m = {m} points", stacklevel=2)
    indices = xp.concat(pivots[:m_out])
    return xp.take(X, indices, axis=0), indices


def _kernel_output(K, X, shape, what):
    """Check that a kernel evaluation has the expected shape, library, dtype and device."""
    if not is_array(K):
        raise TypeError(f"{what}: expected an array of shape {describe_shape(shape)}, got "
                        f"{type(K).__name__}")
    get_namespace(K, X)
    if tuple(K.shape) != tuple(shape):
        raise ShapeError(f"{what}: expected shape {describe_shape(shape)}, got "
                         f"{describe_shape(K.shape)}")
    if K.dtype != X.dtype:
        raise TypeError(f"{what}: expected dtype {X.dtype} (that of X), got {K.dtype}")
    return K
