"""Deflation of CIQ's shifted solves: the eigenpair search and the operator of the complement.

Leading Ritz pairs ``(theta_i, w_i)`` of ``K`` from randomized subspace iteration
(:func:`gpnum.linalg.top_eigenpairs`) are split off the shifted solves exactly,
``(K + s I)^{-1} b = W (Theta + s I)^{-1} W^T b + (P K + s I)^{-1} P b`` with ``P = I - W W^T``,
and msMINRES runs on ``P K`` restricted to the complement of ``W`` (see :mod:`gpnum.linalg._ciq`).
"""

from __future__ import annotations

import math

import numpy as np

from gpnum.backend import asarray, get_namespace, to_numpy
from gpnum.errors import ShapeError, check_int, describe_shape
from gpnum.linalg._ciq_result import CIQResult, SearchStart
from gpnum.linalg._deflation import _top_eigenpairs, default_block_size
from gpnum.linalg._operators import AddedDiag, Dense, LinearOperator

__all__: list[str] = []


class _Complement(LinearOperator):
    """``(I - W W^T) K`` for orthonormal ``W`` (m, r), applied to blocks orthogonal to ``W``.

    On that complement it equals the symmetric ``P K P``; the projection after each product also
    removes the rounding components along ``W``, which Lanczos would otherwise amplify by
    ``theta_1 / lambda_{r+1}`` per step. One projection (2 m r k) per product instead of two.
    For an operator held as a matrix, :func:`_deflated_matrix` is cheaper.
    """

    symmetric = True
    fresh_products = True

    def __init__(self, A, W):
        super().__init__(A.shape, A.dtype, A.device, A.xp)
        self.A, self.W = A, W

    def _matmat(self, X):
        Y = self.A @ X
        return Y - self.W @ (self.W.T @ Y)


def _stored_matrix(A):
    """The matrix of ``A`` if it is held as one (``Dense``, or ``Dense`` plus a diagonal), else
    None: then the deflated operator can be formed once, for about the price of a product."""
    if isinstance(A, Dense):
        return A.A
    if isinstance(A, AddedDiag) and isinstance(A.operator, Dense):
        return A.to_dense()
    return None


def _deflated_matrix(K, W, KW, floor):
    """``K_d = K - W D^T - D W^T`` with ``D = K W - W (W^T K W + floor I) / 2``.

    For orthonormal ``W`` (m, r): ``K_d x = (I - W W^T) K x`` for every ``x`` orthogonal to
    ``W``, and ``K_d W = floor W``, whether or not ``W`` holds exact eigenvectors. Formed once
    (2 m^2 r multiply-adds beside ``K W``, which the eigenpair search has already computed),
    it replaces :class:`_Complement`'s projection (2 m r k per product) in every msMINRES
    iteration: rounding components along ``W`` sit at the eigenvalue ``floor`` (a point of the
    complement's spectrum, the lower eigenvalue bound) and are not amplified by later products,
    so no projection is needed.
    """
    xp = get_namespace(K, W)
    H = W.T @ KW
    D = KW - W @ (0.25 * (H + H.T)) - (0.5 * floor) * W
    return K - xp.concat([W, D], axis=1) @ xp.concat([D, W], axis=1).T


# Subspace iterations of the eigenpair search (block size: linalg.default_block_size).
_DEFLATE_POWER_ITERS = 3


def _round_pays(left, block, m, k, *, held_matrix):
    """Whether another eigenpair round is predicted to save more than it costs.

    Costs and savings in units of one (m, m) x (m, k) product. A round of ``block`` columns
    costs its ``power_iters + 2`` products, ``power_iters + 3`` Cholesky QR passes (two
    (m, l) x (l, l) products each, at about half a product's speed: ``4 l^2 / (m k)``) and,
    for a held matrix, the deflated matrix's update (an inner dimension of ``2 r``, about
    ``block`` new pairs). A lazy operator instead projects the new pairs out in every later
    iteration (``2 r / m`` per iteration with ``r = block / 2`` new pairs). The round is
    predicted to halve the ``left`` iterations (measured: 27 -> 15, 42 -> 22 and 72 -> 38 on
    Matern-5/2 matrices). This reproduces the measured best choices at m = 1000 and 2000 for
    lengthscales 0.1-0.3 (jitter 1e-4, k = 256): a second round pays at m = 2000 with
    lengthscale 0.2 and not at m = 1000 (docs/benchmarks.md, "Measurements behind
    implementation choices").
    """
    cost = ((_DEFLATE_POWER_ITERS + 2) * block
            + (_DEFLATE_POWER_ITERS + 3) * 4.0 * block**2 / m) / k
    if held_matrix:
        cost += 2.0 * block / k
    else:
        cost += 0.5 * left * block / m
    return 0.5 * left > cost


# The adaptive search: at most this many rounds, none with a block under _MIN_ROUND_BLOCK
# (measured: a fourth round never paid for itself on Matern-5/2 matrices at m = 1000-2000).
_MAX_ROUNDS = 3
_MIN_ROUND_BLOCK = 32


def _deflation_block(deflate, m, k):
    if deflate is None:  # automatic: only where the search costs little against the solves
        return default_block_size(m) if k >= 16 else 0
    ell = check_int(deflate, "deflate", minimum=0)
    if ell > m // 2:
        raise ValueError(f"deflate: expected an integer block size <= m / 2 = {m // 2}, got {ell}")
    return ell


def _find_deflation(A, m, k, deflate, rtol, dtype_eps, lmin, start=None):
    """(theta, W) of the accepted Ritz pairs, the number of product columns spent, the
    operator msMINRES runs on in their complement (None without deflation), and a
    :class:`SearchStart` for a later search (None if no search ran).

    An explicit block size searches once. The automatic search (``deflate=None``) adapts to the
    spectrum: after each round it predicts the msMINRES iterations left,
    ``J = sqrt(theta_r / lmin) log(2 / rtol) / 2`` (the Chebyshev bound on the complement, whose
    condition number is about ``theta_r / lmin``), and searches the complement of the pairs found
    so far with another block only while that is predicted to save more products than it
    costs (:func:`_round_pays`). Each further block is at most half of the complement left.

    The complement operator: for an operator held as a matrix, the deflated matrix
    (:func:`_deflated_matrix`), updated after each round from the products the search has
    already made; otherwise :class:`_Complement`, which projects after every product.

    ``start``: where a search on a nearby operator ended (:class:`SearchStart`). Each round
    starts from the first ``block`` of its Ritz vectors that the pairs accepted so far leave
    (:func:`_warm_block`) instead of Gaussian vectors, so that the same subspace iterations
    converge more pairs, and the search runs at least as many rounds as that one did (while
    each keeps a quarter of its block): the cost rule counts one solve, and a training
    step's backward pass is a second, rougher one that fewer pairs slow down more.
    Measured in SVGP training at m = 1000 (Matern-5/2, lengthscale 0.3): 390-510 pairs
    where cold searches keep 315, and the backward msMINRES 8-15 iterations instead of 20.
    Fewer subspace iterations from the warm start (two) left the drift of K_ZZ between steps
    unresolved: 250-430 pairs, and fewer than a cold search after a larger change.
    """
    complement = None
    if isinstance(deflate, CIQResult):  # an earlier result on the same operator
        deflate, complement = deflate.deflation, deflate.complement
        if deflate is None:
            return None, 0, None, None
    if isinstance(deflate, tuple):  # pairs found by an earlier call on the same operator
        theta, W = deflate
        if W.ndim != 2 or W.shape[0] != m or theta.shape != (W.shape[1],):
            raise ShapeError(f"deflate: expected (theta (r,), W ({m}, r)) from an earlier "
                             f"CIQResult.deflation, got shapes {describe_shape(theta.shape)} "
                             f"and {describe_shape(W.shape)}")
        if complement is None:
            complement = _complement_operator(A, W, None, lmin)
        return deflate, 0, complement, None
    adaptive = deflate is None
    ell = _deflation_block(deflate, m, k)
    if ell == 0:
        return None, 0, None, None
    xp = A.xp
    matrix = _stored_matrix(A)
    eta = max(0.1 * rtol, 100.0 * dtype_eps)
    start = _check_start(start, m, xp)
    thetas, Ws, ritz, spent, found, block = [], [], [], 0, 0, ell
    W_all = None
    op = A  # the operator searched: A, then its complement in the pairs found so far
    while True:
        S = None if start is None else _warm_block(xp, start.vectors, W_all, block)
        theta, W, resid, AW = _top_eigenpairs(op, block, power_iters=_DEFLATE_POWER_ITERS,
                                              seed=len(ritz), start=S)
        spent += (_DEFLATE_POWER_ITERS + 2) * block
        # One host synchronisation: keep the pairs accurate to eta (relative). Any accurate
        # pairs will do, not only a leading run: the split is exact for each of them, and an
        # inaccurate pair left in the complement only costs iterations.
        theta_h = np.asarray(to_numpy(theta))
        ritz.append((theta_h, W))
        ok = np.asarray(to_numpy(resid)) <= eta * theta_h
        # Pairs within 2x of the floor do not slow msMINRES, and the deflated matrix holds
        # every direction already split off at lmin: no later round may return it as a pair.
        ok &= theta_h > 2.0 * lmin
        r = int(ok.sum())
        if r == 0:
            break
        if r < ok.shape[0]:
            keep = asarray(np.nonzero(ok)[0], dtype=xp.int64, like=W)
            theta = xp.take(theta, keep)
            W, AW = xp.take(W, keep, axis=1), xp.take(AW, keep, axis=1)
        thetas.append(theta)
        Ws.append(W)
        W_all = Ws[0] if len(Ws) == 1 else xp.concat(Ws, axis=1)
        if matrix is not None:
            # The new pairs are eigenpairs of the operator just searched (orthogonal to the
            # earlier ones up to their accuracy), so its matrix is deflated by them alone.
            matrix = _deflated_matrix(matrix, W, AW, lmin)
            op = Dense(matrix, symmetric=True)
        else:
            op = _Complement(A, W_all)
        found += r
        # The complement shrinks: later blocks take at most half of what is left of it. A
        # round that kept under a quarter of its block has reached the flat part of the
        # spectrum, where subspace iteration converges slowly: stop there too.
        block = min(ell, (m - found) // 2)
        if (not adaptive or len(Ws) == _MAX_ROUNDS or block < _MIN_ROUND_BLOCK
                or 4 * r < ok.shape[0]):
            break
        # The complement's largest eigenvalue: the largest pair left behind, or below the block.
        top_left = float(theta_h[~ok].max()) if r < ok.shape[0] else float(theta_h[-1])
        left = 0.5 * math.sqrt(max(top_left, lmin) / lmin) * math.log(2.0 / rtol)
        # A warm search repeats the rounds of the search it starts from (which paid there, for
        # a nearby operator); beyond them, or cold, a round must be predicted to pay.
        if (start is None or len(ritz) >= start.rounds) and not _round_pays(
                left, block, m, k, held_matrix=matrix is not None):
            break
    # Every round's Ritz vectors by decreasing Ritz value: the start of a later search.
    theta_h = np.concatenate([t for t, _ in ritz])
    order = asarray(np.argsort(-theta_h, kind="stable"), dtype=xp.int64, like=ritz[0][1])
    search_start = SearchStart(xp.take(xp.concat([W for _, W in ritz], axis=1), order, axis=1),
                               len(ritz))
    if not Ws:
        return None, spent, None, search_start
    theta_all = thetas[0] if len(thetas) == 1 else xp.concat(thetas)
    return (theta_all, W_all), spent, op, search_start


def _check_start(start, m, xp):
    """``deflate_start`` checked: a :class:`SearchStart` for (m, m) in namespace ``xp``."""
    if start is None:
        return None
    if not isinstance(start, SearchStart):
        raise TypeError(f"deflate_start: expected a SearchStart (an earlier "
                        f"CIQResult.search_start), got {type(start).__name__}")
    V = start.vectors
    if get_namespace(V) is not xp or V.shape[0] != m:
        raise ShapeError(f"deflate_start: its vectors have shape {describe_shape(V.shape)}, "
                         f"expected ({m}, p) in the operator's namespace")
    return start


def _warm_block(xp, start, W, block):
    """The start block (m, <= block) of a search round from an earlier search's Ritz vectors
    ``start`` (m, p), or None (then the round starts cold).

    The first round takes the leading ``block`` vectors. Later rounds search the complement
    of the pairs ``W`` (m, r) accepted so far, where those directions sit at ``lmin``: they
    are projected out of the start, and of what is left the leading ``block`` vectors that
    keep at least half their length are taken (the others were mostly split off already).
    Fewer than ``block / 2`` such vectors: None.
    """
    if W is None:
        S = start[:, :min(block, start.shape[1])]  # (stops within the axis: array API)
    else:
        P = start - W @ (W.T @ start)
        kept = np.nonzero(np.asarray(to_numpy(xp.sum(P * P, axis=0))) > 0.25)[0][:block]
        S = xp.take(P, asarray(kept, dtype=xp.int64, like=P), axis=1)
    return S if 2 * S.shape[1] >= block else None


def _complement_operator(A, W, AW, floor):
    """The operator of the solves in the complement of ``W``: see :func:`_find_deflation`."""
    matrix = _stored_matrix(A)
    if matrix is None:
        return _Complement(A, W)
    return Dense(_deflated_matrix(matrix, W, A @ W if AW is None else AW, floor), symmetric=True)
