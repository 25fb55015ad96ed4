"""Contour integral quadrature (CIQ): ``K^{-1/2} B`` and ``K^{1/2} B`` with one msMINRES call.

For a symmetric positive-definite ``K`` with spectrum in ``[lmin, lmax]``, the rational quadrature
of Hale, Higham & Trefethen (2008, "Computing A^alpha, log(A), and related matrix functions by
contour integrals", method 2 for ``z^{-1/2}``) gives

    K^{-1/2} B  ~=  sum_q w_q (K + s_q I)^{-1} B,        q = 1..Q,

with positive shifts ``s_q`` and weights ``w_q`` from Jacobi elliptic functions. All Q shifted
systems share one Krylov space, so multi-shift MINRES solves them for the price of one product
with ``K`` per iteration (Pleiss et al. 2020, "Fast matrix square roots with applications to
Gaussian processes and Bayesian optimization", the seed-000 study). ``K^{1/2} B = K (K^{-1/2} B)``.

The backward passes reuse the forward's shifts, weights and per-shift solves (no new Lanczos):
for ``x = sum_q w_q (K + s_q)^{-1} b`` and cotangent ``xbar``,
``bbar = sum_q w_q (K + s_q)^{-1} xbar`` (one more msMINRES) and the gradient w.r.t. the
parameters of ``K`` is ``-sum_q w_q param_vjp((K + s_q)^{-1} xbar, (K + s_q)^{-1} b)``, evaluated as
a single ``param_vjp`` over ``Q k`` stacked columns.

Never precondition the whitening solve: a preconditioned CIQ returns ``R`` with ``R R^T = K^{-1}``
but ``R^T R != K^{-1}``, which is not a valid whitening (design notes 4.1).

Deflation (``deflate=``) accelerates the shifted solves without changing what is computed. Kernel
matrices have a few large, fast-decaying eigenvalues above a cluster at the jitter; they set the
condition number and, once Lanczos has found them, come back as spurious copies that stall it.
Leading Ritz pairs ``(theta_i, w_i)`` from randomized subspace iteration
(:func:`gpnum.linalg.top_eigenpairs`) whose residual is below ``rtol / 10`` relative are split off
exactly: ``(K + s I)^{-1} b = W (Theta + s I)^{-1} W^T b + (P K + s I)^{-1} P b`` with
``P = I - W W^T``, and msMINRES runs on ``P K`` restricted to the complement of ``W``, whose
condition number is ``lambda_{r+1} / lambda_min`` instead of ``lambda_1 / lambda_min``. The
quadrature and the per-shift solves (hence the backward passes) are the same as without
deflation; the error the split adds is of the order of the accepted Ritz residuals.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from gpnum.backend import asarray, default_rng, get_namespace, to_numpy
from gpnum.errors import (ConvergenceWarning, NotPSDError, ShapeError, check_finite, check_int,
                          describe_shape)
from gpnum.linalg import (AddedDiag, Dense, LinearOperator, default_block_size,
                          eigen_bounds as lanczos_eigen_bounds, msminres)
from gpnum.linalg._deflation import _top_eigenpairs
from gpnum.linalg._msminres import _combine_basis

__all__ = [
    "CIQResult",
    "SearchStart",
    "ciq_quadrature",
    "inv_sqrt_matmul",
    "inv_sqrt_matmul_vjp",
    "sqrt_matmul",
    "sqrt_matmul_vjp",
    "sample_mvn",
]


@dataclass(frozen=True, repr=False)
class SearchStart:
    """Where an eigenpair search for CIQ's deflation ended: a start for the next search on a
    nearby operator (``deflate_start`` of :func:`inv_sqrt_matmul`).

    Attributes
    ----------
    vectors : array (m, p)
        The Ritz vectors of every round of the search, accepted or not, by decreasing Ritz
        value.
    rounds : int
        The number of rounds the search ran.
    """

    vectors: object
    rounds: int

    def __repr__(self):
        return (f"SearchStart(vectors shape {describe_shape(self.vectors.shape)}, "
                f"rounds={self.rounds})")


@dataclass(frozen=True)
class CIQResult:
    """Output of :func:`inv_sqrt_matmul` / :func:`sqrt_matmul`.

    Attributes
    ----------
    x : array (m, k)
        ``K^{-1/2} B`` or ``K^{1/2} B``.
    shifts, weights : array (q,)
        Quadrature shifts ``s_q`` and weights ``w_q`` (working dtype, device of ``B``).
    solves : array (q, m, k)
        The per-shift solutions ``(K + s_q I)^{-1} B`` (kept for the backward pass).
    inv_sqrt_x : array (m, k)
        ``K^{-1/2} B`` (equal to ``x`` for the inverse square root).
    num_iter : int
        msMINRES iterations (= products with ``K``); :func:`sqrt_matmul` uses one more product.
    info : int
        0 converged; > 0 msMINRES stopped at ``maxiter`` short of ``rtol``; < 0 breakdown.
    eigen_bounds : tuple of float
        The ``(lmin, lmax)`` used to place the quadrature nodes.
    kind : str
        ``"inv_sqrt"`` or ``"sqrt"``.
    deflation : tuple or None
        ``(theta (r,), W (m, r))``: the Ritz pairs split off the solves (None: no deflation).
        The backward passes reuse them.
    deflation_products : int
        Columns multiplied by ``K`` to find them (``(power_iters + 2) * block``; 0 without
        deflation), to set against ``num_iter * k``.
    complement : LinearOperator or None
        The operator the deflated solves ran on (``K`` restricted to the complement of ``W``;
        for a ``K`` held as a matrix, an (m, m) deflated matrix); the backward passes reuse it.
    search_start : SearchStart or None
        Where the eigenpair search ended (None when no search ran): pass it as
        ``deflate_start`` to a call on a nearby operator.
    """

    x: object
    shifts: object
    weights: object
    _solves: object = field(repr=False)  # the solves, or a _DeferredSolves that forms them
    inv_sqrt_x: object
    num_iter: int
    info: int
    eigen_bounds: tuple
    kind: str
    deflation: object = None
    deflation_products: int = 0
    complement: object = field(default=None, repr=False)
    search_start: object = field(default=None, repr=False)

    @property
    def solves(self):
        """The per-shift solutions ``(K + s_q I)^{-1} B`` (q, m, k); a forward call without a
        workspace forms them from the Lanczos basis on first access (a backward pass)."""
        return _solves_of(self._solves)

    @property
    def num_deflated(self) -> int:
        """Number of eigenpairs split off the shifted solves."""
        return 0 if self.deflation is None else int(self.deflation[0].shape[0])

    @property
    def status(self) -> str:
        if self.info == 0:
            return f"converged in {self.num_iter} iterations"
        if self.info > 0:
            return f"stopped after {self.num_iter} iterations without reaching rtol"
        return f"breakdown (info={self.info})"

    def __repr__(self) -> str:
        lo, hi = self.eigen_bounds
        return (f"CIQResult(kind={self.kind!r}, x.shape={tuple(self.x.shape)}, "
                f"q={self.shifts.shape[0]}, eigen_bounds=({lo:.3g}, {hi:.3g}), "
                f"num_deflated={self.num_deflated}, {self.status})")


def _elliptic_agm(k2: float, frac):
    """``K(m)`` and ``sn, cn, dn(u | m)`` at ``u = frac K(m)`` for the parameter ``m = 1 - k2``,
    ``0 < k2 <= 1``.

    The arithmetic-geometric mean method (Abramowitz & Stegun 16.4 and 17.6), started from
    ``b_0 = sqrt(k2)`` so that parameters within ``1e-16`` of 1 (condition numbers beyond
    1e16) keep full precision; one AGM gives ``K`` and the functions (``u`` in units of ``K``:
    ``2^n a_n u = 2^(n-1) pi frac``). Host float64; ``frac`` an ndarray. (Here rather than from
    ``scipy.special``, whose import costs a CIQ call's worth of time on first use.)
    """
    a, b, c = 1.0, math.sqrt(k2), math.sqrt(1.0 - k2)
    aa, cc = [a], [c]
    for _ in range(64):
        if abs(c) <= 1e-16 * a:
            break
        a, b, c = 0.5 * (a + b), math.sqrt(a * b), 0.5 * (a - b)
        aa.append(a)
        cc.append(c)
    n = len(aa) - 1
    phi = (2.0 ** (n - 1) * math.pi) * np.asarray(frac, dtype=np.float64)
    for j in range(n, 0, -1):
        phi = 0.5 * (phi + np.arcsin(np.clip(cc[j] / aa[j] * np.sin(phi), -1.0, 1.0)))
    sn, cn = np.sin(phi), np.cos(phi)
    # dn^2 = 1 - m sn^2 = k2 + m cn^2: no cancellation where sn is near 1 (cn near 0).
    dn = np.sqrt(k2 + (1.0 - k2) * cn * cn)
    return math.pi / (2.0 * aa[n]), sn, cn, dn


def ciq_quadrature(lmin: float, lmax: float, num_quad: int):
    """Shifts and weights of the Hale-Higham-Trefethen rule for ``z^{-1/2}`` on ``[lmin, lmax]``.

    Computed on the host in float64 (Jacobi elliptic functions by the AGM method).

    Returns
    -------
    shifts, weights : ndarray (num_quad,)
        Positive, with ``sum_q w_q / (z + s_q) ~= z^{-1/2}`` for ``z`` in ``[lmin, lmax]``; the
        relative error falls like ``exp(-2 pi^2 Q / (log(lmax/lmin) + 3))``.
    """
    num_quad = int(num_quad)
    if num_quad < 1:
        raise ValueError(f"num_quad: expected an integer >= 1, got {num_quad}")
    if not (0.0 < lmin <= lmax and math.isfinite(lmax)):
        raise ValueError(f"eigen_bounds: expected 0 < lmin <= lmax < inf, got ({lmin}, {lmax})")
    if lmin == lmax:  # a multiple of the identity: the rule below degenerates
        lmax = lmin * (1.0 + 1e-8)
    k2 = lmin / lmax
    frac = (np.arange(1, num_quad + 1, dtype=np.float64) - 0.5) / num_quad
    kp, sn, cn, dn = _elliptic_agm(k2, frac)
    shifts = lmin * (sn / cn) ** 2
    weights = 2.0 * math.sqrt(lmin) * kp * dn / (math.pi * num_quad * cn**2)
    return shifts, weights


def _as_operator(A, B):
    if isinstance(A, LinearOperator):
        return A
    if hasattr(A, "shape") and hasattr(A, "__matmul__"):
        return Dense(A, symmetric=True)
    raise TypeError(f"A: expected a LinearOperator or a square array, got {type(A).__name__}")


def _check_inputs(A, B):
    xp = get_namespace(B)
    if B.ndim not in (1, 2):
        raise ShapeError(f"B: expected shape (m,) or (m, k), got {describe_shape(B.shape)}")
    m = A.shape[0]
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"A: expected a square operator (m, m), got {describe_shape(A.shape)}")
    if B.shape[0] != m:
        raise ShapeError(f"B: expected shape ({m},) or ({m}, k) to match A, got "
                         f"{describe_shape(B.shape)}")
    check_finite(xp, B, "B")
    return xp


def _resolve_bounds(A, eigen_bounds, num_lanczos):
    if eigen_bounds is not None:
        lo, hi = (float(v) for v in eigen_bounds)
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"eigen_bounds: expected 0 < lower <= upper < inf, got {eigen_bounds}")
        return lo, hi
    # With a known positive floor (jitter in an AddedDiag) the first Lanczos run's bounds are
    # final: doubling the iterations could only lift the lower bound above the floor, and an
    # under-estimated lmin costs CIQ little (module notes), while the further 90 matrix-vector
    # products cost eight (m, m) x (m, 256) products' time at m = 2000 (memory-bound).
    floor = A._spectrum_floor()
    lo, hi = lanczos_eigen_bounds(A, num_iter=num_lanczos,
                                  max_iter=num_lanczos if floor > 0.0 else None)
    if not (hi > 0.0) or not (lo > 0.0):
        raise NotPSDError(
            f"A ({A.shape[0]} x {A.shape[0]}) is not positive definite, or its smallest "
            f"eigenvalue could not be bounded away from zero: Lanczos bounds its spectrum by "
            f"[{lo:.3g}, {hi:.3g}]. CIQ needs a positive-definite operator: add jitter as an "
            f"AddedDiag (whose diagonal floors the spectrum), or pass eigen_bounds.")
    return lo, hi


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
    lengthscale 0.2 (1.42 s against 1.76 s) and not at m = 1000 (0.49 s against 0.44 s).
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


class _DeferredSolves:
    """The per-shift solves ``(K + s_q I)^{-1} B`` (q, m, k) kept as the Lanczos basis and its
    coefficients, with their weighted sum formed directly (a (k, J) x (J, m) product per
    column). The (q, m, k) solves are formed only if asked for (a backward pass): a forward
    call then touches no q m k values of fresh memory (61 MB at m = 2000, k = 256, q = 15,
    where first touches cost as much as the solve). The basis is the call's own, a copy of a
    short one out of a shared workspace (which a later call overwrites), or, for a backward
    pass that is done with it before the workspace's next use, the workspace's memory.
    """

    def __init__(self, xp, basis, coeffs, weights):
        self.xp, self.basis, self.coeffs = xp, basis, coeffs
        self._solves = None
        # sum_q w_q y_i[q, :] for every basis vector i: (k, 1, J), then one batched product
        cw = xp.stack([weights @ y for y in coeffs], axis=-1)  # (k, J)
        self.weighted = (cw[:, None, :] @ basis)[:, 0, :].T  # (m, k) (a transposed view)
        # (scale (k,), W (m, r), C (k, r), g (q, r)) of a deflated solve: the solves'
        # components along W are D = C[:, None, :] * g[None, :, :] (k, q, r), with C the
        # right-hand sides' components along W and g = 1 / (theta + s_q), kept in that form
        self.affine = None

    def factors_against(self, back, omega):
        """``(F, G)`` with ``F G^T = sum_q omega_q U_q V_q^T`` (m, m) for ``V`` these solves and
        ``U`` the per-shift solves ``back`` of a backward pass on the same deflation (another
        :class:`_DeferredSolves`, a basis of ``b`` vectors per column), forming neither: ``F``,
        ``G`` are (m, k c [+ r]).

        With ``V_q[:, j] = sf_j V_j yf_qj + W D_jq`` and ``U_q[:, j] = sb_j U_j yb_qj + W E_jq``
        (bases ``V_j`` (m, c), ``U_j`` (m, b) per column ``j``), the sum is
        ``sum_j (U_j M_j + W P_j) V_j^T + (sum_j U_j N_j + W Gamma) W^T`` with the small
        ``M_j = sum_q omega_q sb_j yb_qj (sf_j yf_qj)^T`` (b, c), ``P_j`` (r, c),
        ``N_j = sum_q omega_q sb_j yb_qj D_jq^T`` (b, r) and
        ``Gamma = (C_b^T C_f) o (g^T diag(omega) g)`` (r, r), all from the factors of
        ``D = C_f g`` and ``E = C_b g`` (``affine``). The one large product is
        (m, k b) x (k b, r), where forming ``U`` (q, m, k) costs a (k q, r) x (r, m) product
        for its ``W E`` part and contracting it with ``D`` an (m, k q) x (k q, r) one (and
        forming ``V`` and the (m, k q) x (k q, m) product about ``q / c`` times more).
        """
        xp = self.xp
        k, c, m = self.basis.shape
        b = len(back.coeffs)
        Yf = xp.stack(self.coeffs, axis=0)  # (c, q, k)
        Yb = xp.stack(back.coeffs, axis=0)  # (b, q, k)
        if self.affine is not None:
            Yf, Yb = Yf * self.affine[0], Yb * back.affine[0]
        Yfw = xp.permute_dims(Yf * omega[None, :, None], (2, 0, 1))  # (k, c, q)
        MT = Yfw @ xp.permute_dims(Yb, (2, 1, 0))  # (k, c, b)
        FT = xp.reshape(MT @ back.basis, (k * c, m))
        G = xp.reshape(self.basis, (k * c, m)).T
        if self.affine is None:
            return FT.T, G
        _, W, Cf, g = self.affine
        Cb = back.affine[2]
        r = W.shape[1]
        # P_j^T = sum_q omega_q yf_qj E_jq and N_j, their sums over q as (k, ., q) x (q, r)
        FT = FT + xp.reshape((Yfw @ g) * Cb[:, None, :], (k * c, r)) @ W.T
        N = (xp.permute_dims(Yb * omega[None, :, None], (2, 0, 1)) @ g) * Cf[:, None, :]
        L = W @ ((Cb.T @ Cf) * (g.T @ (omega[:, None] * g)))  # (m, r)
        # the (m, k b) x (k b, r) product over blocks of columns: the basis is a strided
        # slice of the workspace, and reshaping it whole would copy it into fresh memory
        step = max(1, 2**18 // (b * m))
        for k0 in range(0, k, step):
            k1 = min(k, k0 + step)
            L = L + (xp.reshape(back.basis[k0:k1, ...], ((k1 - k0) * b, m)).T
                     @ xp.reshape(N[k0:k1, ...], ((k1 - k0) * b, r)))
        return xp.concat([FT.T, L], axis=1), xp.concat([G, W], axis=1)

    def solves(self):
        if self._solves is None:
            self._solves = _assemble_solves(self.xp, self.basis, self.coeffs, self.affine)
            self.basis = self.coeffs = None  # the solves replace them
        return self._solves


def _solves_of(value):
    """The (q, m, k) solves of a :func:`_shifted_solves` output (formed if deferred)."""
    return value.solves() if isinstance(value, _DeferredSolves) else value


def _shifted_solves(A, B2, shifts, deflation, complement, rtol, maxiter, workspace,
                    weights=None, keep_basis=False):
    """(solves (q, m, k) of ``(K + s_q I) X = B``, msMINRES result), deflated if asked
    (``complement``: the operator of :func:`_find_deflation`). With ``weights``, and no
    ``workspace`` or a basis of at most ``q / 2`` vectors, the solves come as a
    :class:`_DeferredSolves` holding their weighted sum (unless msMINRES folded its basis).
    ``keep_basis`` (with ``weights``): deferred whatever the basis length, on the workspace's
    memory itself, for a caller that is done with it before the workspace's next use."""
    xp = get_namespace(B2)
    q = shifts.shape[0]

    def combine(basis, coeffs, assemble):
        # Deferred without a workspace (the basis is the call's own), or for a short basis
        # (a copy of it is smaller than the solves, and a backward pass then needs no solves:
        # _DeferredSolves.factors_against); otherwise assembled now.
        if keep_basis:
            return _DeferredSolves(xp, basis, coeffs, weights)
        if workspace is None or 2 * len(coeffs) <= q:
            if workspace is not None:  # later solves reuse the workspace's memory
                basis = xp.asarray(basis, copy=True)
            return _DeferredSolves(xp, basis, coeffs, weights)
        return assemble(basis, coeffs)

    if deflation is None:
        def plain(basis, coeffs):
            return _assemble_solves(xp, basis, coeffs)

        res = msminres(A, B2, shifts, rtol=rtol, maxiter=maxiter, workspace=workspace,
                       _combine=None if weights is None else
                       (lambda basis, coeffs: combine(basis, coeffs, plain)))
        return res.x, res
    theta, W = deflation
    Bw = W.T @ B2  # (r, k)
    # The solves' components along W, D = C g, as their factors: D (k, q, r) is formed only
    # block by block where the solves are assembled
    C, g = Bw.T, 1.0 / (theta[None, :] + shifts[:, None])  # (k, r), (q, r)
    # The tolerance stays relative to ||b||, not to the much smaller ||P b||: each column is
    # scaled to unit norm and solved to an absolute rtol. (Relative to ||P b|| the complement
    # solve would chase components that the undeflated solve never resolves either.)
    norms = xp.sqrt(xp.sum(B2 * B2, axis=0))
    scale = xp.where(norms > 0.0, norms, xp.ones_like(norms))
    assembled = []

    def assemble(basis, coeffs):
        assembled.append(True)
        return _assemble_solves(xp, basis, coeffs, (scale, W, C, g))

    res = msminres(complement, (B2 - W @ Bw) / scale, shifts, rtol=0.0, atol=rtol,
                   maxiter=maxiter, workspace=workspace,
                   _combine=assemble if weights is None else
                   (lambda basis, coeffs: combine(basis, coeffs, assemble)))
    if isinstance(res.x, _DeferredSolves):
        deferred = res.x
        deferred.affine = (scale, W, C, g)
        deferred.weighted = deferred.weighted * scale + W @ (C * (weights @ g)[None, :]).T
        return deferred, res
    out = res.x
    if not assembled:  # msMINRES folded its basis (past max_basis_bytes): add W D here
        for i in range(shifts.shape[0]):
            out[i, ...] = out[i, ...] * scale + W @ (C * g[i, :][None, :]).T
    return out, res


def _assemble_solves(xp, basis, coeffs, affine=None):
    """The per-shift solves (q, m, k) from msMINRES's basis (k, c, m) and coefficients (c
    arrays (q, k)), deflated by ``affine = (scale, W, C, g)`` if given
    (:func:`_assemble_deflated`)."""
    if affine is None:
        return _combine_basis(xp, basis, len(coeffs), [y[None, ...] for y in coeffs])[0, ...]
    return _assemble_deflated(xp, basis, coeffs, *affine)


def _assemble_deflated(xp, basis, coeffs, scale, W, C, g):
    """The deflated solves ``scale * (V y_q) + W D_q`` (q, m, k) from msMINRES's basis.

    Parameters
    ----------
    basis : array (k, c, m)
        The Lanczos vectors of the complement solve (stored transposed, as msMINRES keeps them).
    coeffs : list of c arrays (q, k)
        Their coefficients per shift and column.
    scale : array (k,)
        The column norms the complement's right-hand sides were divided by.
    W : array (m, r)
    C, g : arrays (k, r), (q, r)
        The solves' components along ``W``, ``D = C[:, None, :] * g[None, :, :]`` (k, q, r).

    Returns
    -------
    array (q, m, k)
        A strided view of a (k, q, m) array, the layout of msMINRES's own solutions. Formed in
        that layout: the scale folds into the (q, k) coefficients and ``W D`` is added by GEMMs
        over blocks of columns, where adding it shift by shift to the (q, m, k) view (strided
        elementwise passes) measured 60 ms of a CIQ call at m = 1000, k = 256, q = 15.
    """
    (k, r), q = C.shape, g.shape[0]
    m = basis.shape[2]
    c = len(coeffs)
    Y = xp.stack([y * scale for y in coeffs], axis=-1)  # (q, k, c)
    # batched BLAS needs contiguous operands: the flat reshape materialises (k, q, c)
    Y = xp.reshape(xp.reshape(xp.permute_dims(Y, (1, 0, 2)), (-1,)), (k, q, c))
    out = Y @ basis[:, :c, :]  # (k, q, m)
    Wt = W.T
    # blocks of ~2 MB temporaries (reused by malloc; a whole (k, q, m) one is fresh memory),
    # D's rows (k, q) in the order of out's
    step = max(1, 2**18 // (q * m))
    for k0 in range(0, k, step):
        k1 = min(k, k0 + step)
        Dk = xp.reshape(C[k0:k1, None, :] * g[None, :, :], ((k1 - k0) * q, r))
        out[k0:k1, ...] += xp.reshape(Dk @ Wt, (k1 - k0, q, m))
    return xp.permute_dims(out, (1, 2, 0))


def _weighted_sum(xp, weights, solves):
    """``sum_q weights[q] solves[q]`` (m, k) for ``solves`` (q, m, k).

    As one (q,) x (k, q, m) product: msMINRES writes its solutions in (k, q, m) memory order,
    where this is a view, while ``tensordot`` would first copy all q m k values into (q, m k)
    order. The result may be a column-major (transposed) view.
    """
    return xp.matmul(weights, xp.permute_dims(solves, (2, 0, 1))).T


def inv_sqrt_matmul(A, B, *, num_quad: int = 15, rtol: float = 1e-3, maxiter: int = 200,
                    eigen_bounds=None, num_lanczos: int = 30, workspace=None,
                    deflate=None, deflate_start=None) -> CIQResult:
    """``K^{-1/2} B`` by contour integral quadrature and multi-shift MINRES.

    Parameters
    ----------
    A : LinearOperator or array (m, m)
        Symmetric positive-definite ``K``.
    B : array (m,) or (m, k)
        Right-hand sides.
    num_quad : int
        Quadrature nodes Q (15 is plenty up to condition numbers of about 1e6).
    rtol : float
        Relative residual tolerance of every shifted system (per shift and column).
    maxiter : int
        Maximum msMINRES iterations J.
    eigen_bounds : (float, float), optional
        Bounds ``lmin <= lambda(K) <= lmax``. Default: :func:`gpnum.linalg.eigen_bounds`
        (``num_lanczos`` Lanczos iterations, Ritz values widened by their residual bounds; for
        an operator with a known positive floor, such as an ``AddedDiag`` with jitter, the
        floor when the smallest Ritz value has not converged, without further iterations).
    workspace : gpnum.linalg.Workspace, optional
        Basis memory reused across calls (a training loop): see :func:`gpnum.linalg.msminres`.
    deflate : int, tuple or None
        Block size of the eigenpair search that deflates the solves (module notes); 0 turns
        deflation off (an integer searches once with that block). Default None: a block of
        ``min(384, m // 2)`` when ``m >= 128`` and ``k >= 16`` (where the search costs a few
        msMINRES iterations' worth of products), else off, followed by up to two further
        rounds on the complement of the pairs found while a round is predicted to save more
        products than it costs (slowly decaying spectra: short lengthscales).
        At most ``m // 2``. Or an earlier :class:`CIQResult` for the same operator, to reuse
        its pairs, its complement operator (for a held matrix, the deflated matrix) and, unless
        ``eigen_bounds`` is given, its eigenvalue bounds: for example over the chunks of a
        prediction. Or that result's ``deflation`` tuple (pass its ``eigen_bounds`` too).
    deflate_start : SearchStart, optional
        The ``search_start`` of an earlier result on a nearby operator (a training loop's
        previous step): the eigenpair search starts from its Ritz vectors instead of Gaussian
        ones, which converges more pairs for the same products, and runs at least its number
        of rounds. Pairs are accepted by the same residual test, so the accuracy does not
        change; fewer iterations are left to msMINRES.

    Returns
    -------
    CIQResult
        ``x`` (m, k) (or (m,) for a vector ``B``) and what the backward pass needs.

    Raises
    ------
    NotPSDError
        If Lanczos shows ``A`` is not positive definite.
    ValueError, ShapeError
        For NaN/Inf in ``B``, mismatched shapes, ``num_quad < 1``.

    Warns
    -----
    ConvergenceWarning
        If msMINRES stops at ``maxiter`` short of ``rtol`` (the result has ``info > 0``).
    """
    if int(num_quad) < 1:
        raise ValueError(f"num_quad: expected an integer >= 1, got {num_quad}")
    A = _as_operator(A, B)
    xp = _check_inputs(A, B)
    vec = B.ndim == 1
    B2 = B[:, None] if vec else B
    if isinstance(deflate, CIQResult) and eigen_bounds is None:
        eigen_bounds = deflate.eigen_bounds
    lo, hi = _resolve_bounds(A, eigen_bounds, num_lanczos)
    shifts_h, weights_h = ciq_quadrature(lo, hi, num_quad)
    shifts = asarray(shifts_h, dtype=B.dtype, like=B2)
    weights = asarray(weights_h, dtype=B.dtype, like=B2)
    deflation, spent, complement, search_start = _find_deflation(
        A, A.shape[0], B2.shape[1], deflate, rtol, float(xp.finfo(B.dtype).eps), lo,
        deflate_start)
    with warnings.catch_warnings():
        # Re-issued below with CIQ's context instead of msMINRES's.
        warnings.simplefilter("ignore", ConvergenceWarning)
        solves, res = _shifted_solves(A, B2, shifts, deflation, complement, rtol, maxiter,
                                      workspace, weights)
    if res.info > 0:
        warnings.warn(f"CIQ: msMINRES stopped after {res.num_iter} iterations (maxiter={maxiter}) "
                      f"before reaching rtol={rtol:g}; K^(-1/2) B is less accurate than asked "
                      f"(info={res.info}).", ConvergenceWarning, stacklevel=2)
    x = solves.weighted if isinstance(solves, _DeferredSolves) else _weighted_sum(xp, weights,
                                                                                   solves)
    return CIQResult(x=x[:, 0] if vec else x, shifts=shifts, weights=weights, _solves=solves,
                     inv_sqrt_x=x[:, 0] if vec else x, num_iter=int(res.num_iter),
                     info=int(res.info), eigen_bounds=(lo, hi), kind="inv_sqrt",
                     deflation=deflation, deflation_products=spent, complement=complement,
                     search_start=search_start)


def sqrt_matmul(A, B, *, num_quad: int = 15, rtol: float = 1e-3, maxiter: int = 200,
                eigen_bounds=None, num_lanczos: int = 30, workspace=None,
                deflate=None, deflate_start=None) -> CIQResult:
    """``K^{1/2} B = K (K^{-1/2} B)`` by contour integral quadrature; see :func:`inv_sqrt_matmul`.

    Returns a :class:`CIQResult` whose ``x`` is ``K^{1/2} B`` (m, k) and ``inv_sqrt_x`` is
    ``K^{-1/2} B``.
    """
    A = _as_operator(A, B)
    r = inv_sqrt_matmul(A, B, num_quad=num_quad, rtol=rtol, maxiter=maxiter,
                        eigen_bounds=eigen_bounds, num_lanczos=num_lanczos, workspace=workspace,
                        deflate=deflate, deflate_start=deflate_start)
    x = A @ r.inv_sqrt_x
    return CIQResult(x=x, shifts=r.shifts, weights=r.weights, _solves=r._solves,
                     inv_sqrt_x=r.inv_sqrt_x, num_iter=r.num_iter + 1, info=r.info,
                     eigen_bounds=r.eigen_bounds, kind="sqrt", deflation=r.deflation,
                     deflation_products=r.deflation_products, complement=r.complement,
                     search_start=r.search_start)


def _inv_sqrt_backward(result, A, B2, xbar2, rtol, maxiter, workspace=None):
    """(bbar (m, k), A.param_vjp dict) for ``x = K^{-1/2} B`` given ``xbar``."""
    xp = get_namespace(B2, xbar2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        complement = result.complement
        if result.deflation is not None and complement is None:
            complement = _complement_operator(A, result.deflation[1], None,
                                              result.eigen_bounds[0])
        # A short forward basis (at most q / 2 vectors a column: K_ZX after deflation) is
        # kept, and then the backward's basis too: the cotangent comes from the two bases,
        # with neither's (q, m, k) solves formed (_DeferredSolves.factors_against).
        forward = result._solves
        factored = (isinstance(forward, _DeferredSolves) and forward.basis is not None
                    and 2 * len(forward.coeffs) <= result.shifts.shape[0])
        U, res = _shifted_solves(A, xbar2, result.shifts, result.deflation, complement, rtol,
                                 maxiter, workspace, weights=result.weights if factored else None,
                                 keep_basis=factored)
    if res.info > 0:
        warnings.warn(f"CIQ backward: msMINRES stopped after {res.num_iter} iterations short of "
                      f"rtol={rtol:g} (info={res.info}).", ConvergenceWarning, stacklevel=3)
    w = result.weights
    if isinstance(U, _DeferredSolves):
        return U.weighted, A.param_vjp(*forward.factors_against(U, -w))
    # U (q, m, k): (K + s_q)^{-1} xbar (msMINRES folded its basis, or a long forward one)
    bbar = _weighted_sum(xp, w, U)
    q, m, k = U.shape
    # sum_q w_q param_vjp(U_q, V_q) as one call over q*k stacked columns. Any column order
    # will do if U and V share it: (k, q) order is the memory layout msMINRES writes (its
    # solutions are views of a (k, q, m) array), so on NumPy these are views, not copies of
    # q m k values each (measured 25 ms each at m = 1000, k = 256, q = 15).
    # U is this call's own msMINRES output: scaled by -w_q in place (two fewer (q, m, k)
    # temporaries, which are fresh memory each step).
    U *= -w[:, None, None]
    Uw = xp.reshape(xp.permute_dims(U, (2, 0, 1)), (k * q, m)).T
    V = xp.reshape(xp.permute_dims(result.solves, (2, 0, 1)), (k * q, m)).T
    grads = A.param_vjp(Uw, V)
    return bbar, grads


def _vjp_inputs(result, B, x_bar):
    """Check the cotangent's shape; return (B was a vector, B as (m, k))."""
    if tuple(x_bar.shape) != tuple(result.x.shape):
        raise ShapeError(f"x_bar: expected shape {describe_shape(result.x.shape)}, got "
                         f"{describe_shape(x_bar.shape)}")
    vec = B.ndim == 1
    return vec, (B[:, None] if vec else B)


def _add_grads(g1, g2):
    """Sum two (possibly nested) gradient dicts with the same structure."""
    out = {}
    for key in g1:
        a, b = g1[key], g2[key]
        if isinstance(a, dict):
            out[key] = _add_grads(a, b)
        elif a is None:
            out[key] = None
        else:
            out[key] = a + b
    return out


def inv_sqrt_matmul_vjp(result: CIQResult, A, B, x_bar, *, rtol=None, maxiter: int = 200,
                        workspace=None):
    """Backward pass of :func:`inv_sqrt_matmul`.

    Parameters
    ----------
    result : CIQResult
        The forward result (its shifts, weights and per-shift solves are reused).
    A : LinearOperator (m, m)
        The same operator as in the forward call.
    B : array (m,) or (m, k)
        The forward right-hand sides.
    x_bar : array like ``result.x``
        Cotangent of ``x``.
    rtol : float, optional
        Tolerance of the one extra msMINRES solve; default 1e-3 or tighter as in the forward.

    Returns
    -------
    B_bar : array like ``B``
        Gradient w.r.t. ``B``.
    A_grads : dict
        Gradient w.r.t. the parameters of ``A``, as returned by ``A.param_vjp``.
    """
    A = _as_operator(A, B)
    vec, B2 = _vjp_inputs(result, B, x_bar)
    xb2 = x_bar[:, None] if vec else x_bar
    rtol = 1e-3 if rtol is None else rtol
    bbar, grads = _inv_sqrt_backward(result, A, B2, xb2, rtol, maxiter, workspace)
    return (bbar[:, 0] if vec else bbar), grads


def sqrt_matmul_vjp(result: CIQResult, A, B, x_bar, *, rtol=None, maxiter: int = 200,
                    workspace=None):
    """Backward pass of :func:`sqrt_matmul`; same conventions as :func:`inv_sqrt_matmul_vjp`.

    With ``y = K z`` and ``z = K^{-1/2} B``: ``zbar = K ybar`` and ``param_vjp(ybar, z)`` from the
    outer product, then the inverse-square-root backward for ``zbar``.
    """
    A = _as_operator(A, B)
    vec, B2 = _vjp_inputs(result, B, x_bar)
    yb = x_bar[:, None] if vec else x_bar
    z = result.inv_sqrt_x[:, None] if vec else result.inv_sqrt_x
    zbar = A @ yb
    g_outer = A.param_vjp(yb, z)
    rtol = 1e-3 if rtol is None else rtol
    bbar, g_inner = _inv_sqrt_backward(result, A, B2, zbar, rtol, maxiter, workspace)
    return (bbar[:, 0] if vec else bbar), _add_grads(g_outer, g_inner)


def sample_mvn(A, num_samples: int, seed, mean=None, *, num_quad: int = 15, rtol: float = 1e-3,
               maxiter: int = 200, eigen_bounds=None, xp=None, device=None, deflate=None):
    """Draw ``num_samples`` samples of ``N(mean, K)`` as ``K^{1/2} eps`` by CIQ.

    Works with a lazy ``KernelMatrix``: memory stays O(J n num_samples) (the Krylov basis), never
    O(n^2), so prior samples are possible at sizes where a dense Cholesky would not fit.

    Parameters
    ----------
    A : LinearOperator (n, n)
        Covariance ``K`` (positive definite: add jitter for smooth kernels).
    num_samples : int
    seed : int
        Seed of the standard-normal draws (:func:`gpnum.backend.default_rng`).
    mean : array (n,), optional
        Added to every sample.
    xp, device : optional
        Namespace and device of the draws (default: ``A``'s).
    deflate : int or None
        As in :func:`inv_sqrt_matmul`.

    Returns
    -------
    samples : array (n, num_samples)
    """
    num_samples = int(num_samples)
    if num_samples < 1:
        raise ValueError(f"num_samples: expected an integer >= 1, got {num_samples}")
    n = A.shape[0]
    A = _as_operator(A, None)
    if xp is None:
        xp = A.xp
        device = A.device if device is None else device
    rng = default_rng(seed, xp=xp, device=device)
    eps = rng.normal((n, num_samples), dtype=A.dtype)
    out = sqrt_matmul(A, eps, num_quad=num_quad, rtol=rtol, maxiter=maxiter,
                      eigen_bounds=eigen_bounds, deflate=deflate).x
    if mean is not None:
        if tuple(mean.shape) != (n,):
            raise ShapeError(f"mean: expected shape ({n},), got {describe_shape(mean.shape)}")
        out = out + mean[:, None]
    return out
