"""Argument checking and covariance resolution shared by every divergence.

Shape and dtype checks are free (host metadata). Value checks (finite, positive, non-singular
factor) are folded into one reduction and one host synchronisation per call, and can be switched
off with ``validate=False`` where a training loop cannot afford even that one sync.
"""

from __future__ import annotations

import numbers

from gpnum.backend import cholesky, get_namespace, is_array
from gpnum.errors import NotPSDError, ShapeError, describe_shape

__all__ = []


class Covariance:
    """A covariance argument resolved to its lower Cholesky factor.

    Attributes
    ----------
    key : str
        The argument name it came in as (``"Sq"`` or ``"Lq"``, ...): the key of its gradient.
    L : array (M, M)
        Lower-triangular factor with ``L @ L.T`` the covariance (plus any Cholesky jitter).
    is_factor : bool
        Whether the caller passed the factor (gradient lower triangular) or the covariance
        (gradient symmetric).
    S : array (M, M) or None
        The symmetrised covariance when it was passed as a matrix.
    """

    __slots__ = ("key", "L", "is_factor", "S")

    def __init__(self, key, L, is_factor, S=None):
        self.key, self.L, self.is_factor, self.S = key, L, is_factor, S


def namespace_of(named):
    """Namespace and common floating dtype of the arrays in ``named`` (name -> array or None).

    Raises ``TypeError`` for non-arrays, non-floating dtypes or mixed dtypes, naming the argument.
    """
    arrays = {k: v for k, v in named.items() if v is not None}
    for name, a in arrays.items():
        if not is_array(a):
            raise TypeError(f"{name}: expected an array, got {type(a).__name__}")
    xp = get_namespace(*arrays.values())
    dtype = None
    first = None
    for name, a in arrays.items():
        if not xp.isdtype(a.dtype, "real floating"):
            raise TypeError(f"{name}: expected a real floating dtype (float32 or float64), "
                            f"got {a.dtype}")
        if dtype is None:
            dtype, first = a.dtype, name
        elif a.dtype != dtype:
            raise TypeError(f"{name}: expected dtype {dtype} like {first}, got {a.dtype}")
    return xp, dtype


def check_mean(x, name):
    """A mean vector of shape (M,); returns M."""
    if x is None:
        raise TypeError(f"{name}: required argument missing (a mean vector of shape (M,))")
    if x.ndim != 1:
        raise ShapeError(f"{name}: expected a mean vector of shape (M,), got "
                         f"{describe_shape(x.shape)}")
    return x.shape[0]


def check_same_shape(x, name, like, like_name):
    if tuple(x.shape) != tuple(like.shape):
        raise ShapeError(f"{name}: expected shape {describe_shape(like.shape)} like {like_name}, "
                         f"got {describe_shape(x.shape)}")


def check_alpha(alpha):
    """Renyi order: a finite real number > 0 (a Python or NumPy scalar, or a 0-d array),
    returned as ``float``."""
    if is_array(alpha) and not isinstance(alpha, numbers.Real):
        if alpha.ndim != 0:
            raise ShapeError(f"alpha: expected a number or a 0-d array, got shape "
                             f"{describe_shape(alpha.shape)}")
        alpha = float(alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha: expected a real number or a 0-d array, got "
                        f"{type(alpha).__name__}")
    a = float(alpha)
    if not (a > 0.0 and a < float("inf")):
        raise ValueError(f"alpha: expected a finite number > 0 (the Renyi order; alpha = 1 is the "
                         f"KL divergence), got {alpha!r}")
    return a


def covariance_arg(S, L, s_name, l_name, M):
    """Check the pair of alternative arguments ``S`` / ``L``; returns (key, array, is_factor)."""
    if S is None and L is None:
        raise TypeError(f"give {s_name}= (covariance) or {l_name}= (lower Cholesky factor), got "
                        f"neither")
    if S is not None and L is not None:
        raise TypeError(f"give {s_name}= (covariance) or {l_name}= (lower Cholesky factor), not "
                        f"both")
    key, A = (s_name, S) if S is not None else (l_name, L)
    if A.ndim != 2 or A.shape[0] != M or A.shape[1] != M:
        raise ShapeError(f"{key}: expected shape ({M}, {M}), got {describe_shape(A.shape)}")
    return key, A, L is not None


def validate(xp, finite=(), factors=(), positive=()):
    """Raise a clear error for non-finite values, singular factors or non-positive variances.

    ``finite``, ``factors`` and ``positive`` are sequences of ``(name, array)``. All checks are
    reduced to one boolean first, so a valid call costs one host synchronisation.
    """
    ok = None
    for _, a in finite:
        t = xp.all(xp.isfinite(a))
        ok = t if ok is None else ok & t
    for _, L in factors:
        t = xp.all(xp.isfinite(L)) & xp.all(xp.linalg.diagonal(L) != 0.0)
        ok = t if ok is None else ok & t
    for _, v in positive:
        t = xp.all(xp.isfinite(v)) & xp.all(v > 0.0)
        ok = t if ok is None else ok & t
    if ok is None or bool(ok):
        return
    # Error path: find the culprit (extra synchronisations are fine here).
    for name, a in list(finite) + list(factors) + list(positive):
        if not bool(xp.all(xp.isfinite(a))):
            n_nan = int(xp.sum(xp.astype(xp.isnan(a), xp.int32)))
            what = f"{n_nan} NaN value(s)" if n_nan else "infinite value(s)"
            raise ValueError(f"{name}: expected finite values, got {what} in an array of shape "
                             f"{describe_shape(a.shape)}")
    for name, L in factors:
        n_zero = int(xp.sum(xp.astype(xp.linalg.diagonal(L) == 0.0, xp.int32)))
        if n_zero:
            raise NotPSDError(f"{name}: expected a Cholesky factor with a non-zero diagonal "
                              f"(a positive-definite covariance), got {n_zero} zero diagonal "
                              f"entr{'y' if n_zero == 1 else 'ies'}")
    for name, v in positive:
        bad = v <= 0.0
        n_bad = int(xp.sum(xp.astype(bad, xp.int32)))
        if n_bad:
            smallest = float(xp.min(v))
            raise ValueError(f"{name}: expected variances > 0, got {n_bad} value(s) <= 0 "
                             f"(smallest {smallest!r})")


def resolve(xp, key, A, is_factor):
    """Turn a checked covariance argument into a :class:`Covariance` (Cholesky if needed)."""
    if is_factor:
        # Only the lower triangle is read, so the gradient is that of L -> value(tril(L)).
        return Covariance(key, xp.tril(A), True)
    S = 0.5 * (A + A.T)  # value(S) == value((S + S^T) / 2), matching the gradient convention
    try:
        L = cholesky(S)
    except NotPSDError as exc:
        raise NotPSDError(f"{key}: {exc}") from None
    return Covariance(key, L, False, S)


def mvn_args(xp, mq, mp, Sq, Sp, Lq, Lp, names, check):
    """Check and resolve the (mq, Sq|Lq, mp, Sp|Lp) arguments of a multivariate divergence.

    Returns ``(M, cov_q, cov_p)``; ``names`` is ``(mq, mp, Sq, Lq, Sp, Lp)`` argument names.
    """
    n_mq, n_mp, n_Sq, n_Lq, n_Sp, n_Lp = names
    M = check_mean(mq, n_mq)
    check_mean(mp, n_mp)
    check_same_shape(mp, n_mp, mq, n_mq)
    kq, Aq, fq = covariance_arg(Sq, Lq, n_Sq, n_Lq, M)
    kp, Ap, fp = covariance_arg(Sp, Lp, n_Sp, n_Lp, M)
    if check:
        # A covariance given as a matrix is checked for finiteness here (so the error names
        # it) and for definiteness by the Cholesky factorisation below.
        finite = [(n_mq, mq), (n_mp, mp)] + [(k, A) for k, A, f in ((kq, Aq, fq), (kp, Ap, fp))
                                             if not f]
        factors = [(k, xp.tril(A)) for k, A, f in ((kq, Aq, fq), (kp, Ap, fp)) if f]
        validate(xp, finite=finite, factors=factors)
    return M, resolve(xp, kq, Aq, fq), resolve(xp, kp, Ap, fp)
