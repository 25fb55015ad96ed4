"""Kullback-Leibler divergence between multivariate Gaussians, general and whitened (SVGP).

Both are written with ``A = Lp^{-1} Lq`` (lower triangular) and ``b = Lp^{-1} (mq - mp)``:

    KL(Q || P) = 1/2 [ sum_i phi(A_ii) + sum_{i > j} A_ij^2 + |b|^2 ],
    phi(a) = a^2 - 1 - 2 log|a|  >= 0,

which is the textbook ``1/2 [tr(Sp^{-1} Sq) + b^T b - M + log|Sp| - log|Sq|]`` regrouped into
non-negative terms: no large log-determinants cancel, so the value stays accurate (and >= 0)
as Q approaches P, in float32 too.
"""

from __future__ import annotations

from array_api_compat import is_numpy_namespace

from gpnum.backend import solve_triangular
from gpnum.divergences._checks import check_mean, mvn_args, namespace_of
from gpnum.divergences._checks import validate as _validate
from gpnum.divergences._matrix import eye_like, gradient_entry, inv_sandwich
from gpnum.errors import ShapeError, describe_shape

__all__ = ["kl_mvn", "kl_mvn_and_grad", "kl_whitened", "kl_whitened_and_grad"]

_NAMES = ("mq", "mp", "Sq", "Lq", "Sp", "Lp")


def _phi_sum(xp, a):
    """``sum_i a_i^2 - 1 - 2 log|a_i|``: zero at ``a = 1``, no cancellation between sums."""
    return xp.sum((a - 1.0) * (a + 1.0) - 2.0 * xp.log(xp.abs(a)))


def _diag_matrix(xp, like, v):
    return eye_like(xp, like) * v[None, :]


def _plus_diag(xp, A, v):
    """``A + diag(v)``; on NumPy in place in ``A``, which the caller owns (no (M, M) temporaries)."""
    if is_numpy_namespace(xp):
        A.flat[:: A.shape[0] + 1] += v
        return A
    return A + _diag_matrix(xp, A, v)


def _kl(mq, Sq, mp, Sp, Lq, Lp, validate, want_grad):
    xp, _ = namespace_of({"mq": mq, "Sq": Sq, "mp": mp, "Sp": Sp, "Lq": Lq, "Lp": Lp})
    _, cq, cp = mvn_args(xp, mq, mp, Sq, Sp, Lq, Lp, _NAMES, validate)
    delta = mq - mp
    A = xp.tril(solve_triangular(cp.L, cq.L))
    b = solve_triangular(cp.L, delta)
    off = xp.tril(A, k=-1)
    value = xp.asarray(0.5 * (_phi_sum(xp, xp.linalg.diagonal(A)) + xp.sum(off * off)
                              + xp.sum(b * b)))
    if not want_grad:
        return value
    u = solve_triangular(cp.L, b, trans=True)  # Sp^{-1} (mq - mp)
    grads = {"mq": u, "mp": -u}
    eye = eye_like(xp, A)
    # d/dSq = (Sp^{-1} - Sq^{-1}) / 2;  2 (d/dSq) Lq = Lp^{-T} A - Lq^{-T}, whose lower
    # triangle is tril(Lp^{-T} A) - diag(1 / diag Lq).
    if cq.is_factor:
        F_q = (xp.tril(solve_triangular(cp.L, A, trans=True))
               - _diag_matrix(xp, A, 1.0 / xp.linalg.diagonal(cq.L)))
        grads[cq.key] = gradient_entry(xp, cq, F_L=F_q)
    else:
        G_q = 0.5 * (inv_sandwich(cp.L, eye) - inv_sandwich(cq.L, eye))
        grads[cq.key] = gradient_entry(xp, cq, G_S=G_q)
    # d/dSp = Lp^{-T} (I - A A^T - b b^T) Lp^{-1} / 2
    Y = eye - A @ A.T - b[:, None] * b[None, :]
    if cp.is_factor:
        grads[cp.key] = gradient_entry(xp, cp, F_L=solve_triangular(cp.L, Y, trans=True))
    else:
        grads[cp.key] = gradient_entry(xp, cp, G_S=0.5 * inv_sandwich(cp.L, Y))
    return value, grads


def kl_mvn(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """KL(Q || P) between multivariate Gaussians ``Q = N(mq, Sq)`` and ``P = N(mp, Sp)``.

    ``KL(Q || P) = E_Q[log q - log p]
    = 1/2 [tr(Sp^{-1} Sq) + (mq - mp)^T Sp^{-1} (mq - mp) - M + log|Sp| - log|Sq|]``.
    Each covariance is given either as a matrix (``Sq``, ``Sp``) or as a lower Cholesky factor
    (keyword ``Lq``, ``Lp``; only its lower triangle is read), and the two forms can be mixed.

    Parameters
    ----------
    mq : array (M,)
        Mean of Q.
    Sq : array (M, M), optional
        Covariance of Q, symmetric positive definite (factorised with the jittered
        :func:`gpnum.backend.cholesky`). Give exactly one of ``Sq`` and ``Lq``.
    mp : array (M,)
        Mean of P (required).
    Sp : array (M, M), optional
        Covariance of P. Give exactly one of ``Sp`` and ``Lp``.
    Lq, Lp : array (M, M), optional, keyword-only
        Lower Cholesky factors, ``Sq = Lq Lq^T``, ``Sp = Lp Lp^T`` (any non-zero diagonal).
    validate : bool
        Check values (finite, non-singular factors) at the cost of one host synchronisation.
        With ``False`` bad values give ``inf``/``nan`` instead of an error.

    Returns
    -------
    value : array ()
        The divergence, >= 0, in nats.

    Raises
    ------
    ShapeError, TypeError
        Mismatched shapes, both or neither of ``Sq``/``Lq``, mixed dtypes.
    NotPSDError
        A covariance that is not positive definite, or a factor with a zero diagonal entry.
    ValueError
        NaN or Inf in any argument.

    Notes
    -----
    Costs two triangular solves with ``M`` right-hand sides (plus the Cholesky factorisations of
    covariances given as matrices). Computed as a sum of non-negative terms (module docstring),
    accurate as Q approaches P.
    """
    return _kl(mq, Sq, mp, Sp, Lq, Lp, validate, False)


def kl_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """:func:`kl_mvn` and its gradients ``(value, grads)``.

    ``grads`` holds ``"mq"``, ``"mp"`` and, per covariance argument, either ``"Sq"``/``"Sp"``
    (symmetric gradient w.r.t. the covariance) or ``"Lq"``/``"Lp"`` (lower-triangular gradient
    w.r.t. the factor), following docs/gradients.md:

    - ``d/dmq = Sp^{-1} (mq - mp) = -d/dmp``
    - ``d/dSq = (Sp^{-1} - Sq^{-1}) / 2``
    - ``d/dSp = (Sp^{-1} - Sp^{-1} (Sq + d d^T) Sp^{-1}) / 2`` with ``d = mq - mp``
    - ``d/dL = tril(2 (d/dS) L)`` for a factor ``L``.
    """
    return _kl(mq, Sq, mp, Sp, Lq, Lp, validate, True)


def _whitened(m, L, validate, want_grad):
    xp, _ = namespace_of({"m": m, "L": L})
    M = check_mean(m, "m")
    if L.ndim != 2 or L.shape[0] != M or L.shape[1] != M:
        raise ShapeError(f"L: expected shape ({M}, {M}), got {describe_shape(L.shape)}")
    if validate:
        _validate(xp, finite=[("m", m)], factors=[("L", xp.tril(L))])
    d = xp.linalg.diagonal(L)
    off = xp.tril(L, k=-1)  # becomes the gradient below
    # (not vecdot: on NumPy that is a threaded BLAS call, see gpnum.backend.matmul)
    value = xp.asarray(0.5 * (xp.sum(m * m) + xp.sum(off * off) + _phi_sum(xp, d)))
    if not want_grad:
        return value
    # d/dL of -sum log|L_ii| is -diag(1 / L_ii); of |L|_F^2 / 2 it is L.
    return value, {"m": xp.asarray(m, copy=True), "L": _plus_diag(xp, off, d - 1.0 / d)}


def kl_whitened(m, L, *, validate=True):
    """KL(N(m, L L^T) || N(0, I)): the KL term of the whitened SVGP ELBO.

    ``1/2 [m^T m + tr(L L^T) - M - log|L L^T|]`` (Hensman, Matthews & Ghahramani 2015),
    computed as ``1/2 [m^T m + sum_{i>j} L_ij^2 + sum_i (L_ii^2 - 1 - 2 log|L_ii|)]`` so that no
    large terms cancel. O(M^2), no factorisation.

    Parameters
    ----------
    m : array (M,)
        Whitened variational mean ``m'``.
    L : array (M, M)
        Lower-triangular factor of the whitened variational covariance ``S' = L L^T``; only the
        lower triangle is read. Diagonal entries may have either sign but must be non-zero.
    validate : bool
        Check that ``m`` and ``L`` are finite and ``diag(L)`` non-zero (one host
        synchronisation). Pass ``False`` inside a training loop.

    Returns
    -------
    value : array ()

    Raises
    ------
    ShapeError
        ``m`` not 1-D or ``L`` not (M, M).
    ValueError
        NaN or Inf in ``m`` or ``L``.
    NotPSDError
        A zero on the diagonal of ``L`` (singular covariance, infinite KL).
    """
    return _whitened(m, L, validate, False)


def kl_whitened_and_grad(m, L, *, validate=True):
    """:func:`kl_whitened` and its gradients: ``(value, {"m": m, "L": tril(L) - diag(1/diag L)})``.

    The ``"L"`` gradient is lower triangular (gradient of ``L -> kl_whitened(m, tril(L))``).
    """
    return _whitened(m, L, validate, True)
