"""Squared 2-Wasserstein distance between multivariate Gaussians, and the GWI batch estimate.

With ``Sq = Lq Lq^T`` and ``Sp = Lp Lp^T`` (any square roots), the cross term of

    W2^2 = |mq - mp|^2 + tr Sq + tr Sp - 2 tr (Sp^{1/2} Sq Sp^{1/2})^{1/2}

is the nuclear norm of ``Lp^T Lq``: its singular values are the square roots of the eigenvalues
of the *symmetric* ``Lp^T Sq Lp``, which is orthogonally similar to ``Sp^{1/2} Sq Sp^{1/2}``. So
one SVD replaces both matrix square roots, and no eigenvalues of the non-symmetric ``Sq Sp`` are
ever taken (docs/divergences.md). With ``Lp^T Lq = U diag(s) V^T`` and ``R = U V^T`` (the orthogonal
polar factor), ``tr Sq + tr Sp - 2 sum(s) = |Lq - Lp R|_F^2`` (Bures distance as a Procrustes
problem), and the value is computed in that form: a sum of squares, >= 0, with errors in ``R``
entering only at second order because ``R`` minimises ``|Lq - Lp R|_F`` over orthogonal matrices.
"""

from __future__ import annotations

from gpnum.divergences._checks import (
    check_mean,
    check_same_shape,
    covariance_arg,
    mvn_args,
    namespace_of,
)
from gpnum.divergences._checks import validate as _validate
from gpnum.divergences._matrix import eye_like, gradient_entry

__all__ = ["wasserstein_mvn", "wasserstein_mvn_and_grad", "wasserstein_gwi",
           "wasserstein_gwi_and_grad"]

_NAMES = ("mq", "mp", "Sq", "Lq", "Sp", "Lp")
_GWI_NAMES = ("mq", "mp", "Kq", "Lq", "Kp", "Lp")


def _w2(xp, delta, cq, cp, want_grad):
    U, s, Vh = xp.linalg.svd(cp.L.T @ cq.L, full_matrices=False)
    R = U @ Vh
    E = cq.L - cp.L @ R
    value = xp.asarray(xp.sum(delta * delta) + xp.sum(E * E))
    if not want_grad:
        return value
    grads = {"mq": 2.0 * delta, "mp": -2.0 * delta}
    eye = eye_like(xp, E)
    inv_s = (1.0 / s)[None, :]
    # d/dSq = I - T with T = Lp U diag(1/s) U^T Lp^T the optimal transport map from Q to P;
    # d/dLq (full square root) = 2 (Lq - Lp R) by the envelope theorem (R is optimal).
    if cq.is_factor:
        grads[cq.key] = gradient_entry(xp, cq, F_L=2.0 * E)
    else:
        LpU = cp.L @ U
        grads[cq.key] = gradient_entry(xp, cq, G_S=eye - (LpU * inv_s) @ LpU.T)
    if cp.is_factor:
        grads[cp.key] = gradient_entry(xp, cp, F_L=-2.0 * (E @ R.T))
    else:
        LqV = cq.L @ Vh.T
        grads[cp.key] = gradient_entry(xp, cp, G_S=eye - (LqV * inv_s) @ LqV.T)
    return value, grads


def _wasserstein(mq, Sq, mp, Sp, Lq, Lp, validate, want_grad):
    xp, _ = namespace_of({"mq": mq, "Sq": Sq, "mp": mp, "Sp": Sp, "Lq": Lq, "Lp": Lp})
    _, cq, cp = mvn_args(xp, mq, mp, Sq, Sp, Lq, Lp, _NAMES, validate)
    return _w2(xp, mq - mp, cq, cp, want_grad)


def wasserstein_mvn(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None, validate=True):
    """Squared 2-Wasserstein distance between ``Q = N(mq, Sq)`` and ``P = N(mp, Sp)``.

    ``W2^2(Q, P) = |mq - mp|^2 + tr Sq + tr Sp - 2 tr (Sp^{1/2} Sq Sp^{1/2})^{1/2}``
    (Gelbrich 1990; symmetric in Q and P). The cross term comes from one SVD of ``Lp^T Lq``,
    i.e. from the symmetric form, never from eigenvalues of ``Sq Sp`` (module docstring).

    Parameters
    ----------
    mq, mp : array (M,)
        Means of Q and P (``mp`` required).
    Sq, Sp : array (M, M), optional
        Covariances, symmetric positive definite (factorised with the jittered
        :func:`gpnum.backend.cholesky`). Give exactly one of ``Sq``/``Lq`` and of ``Sp``/``Lp``.
    Lq, Lp : array (M, M), optional, keyword-only
        Lower Cholesky factors (only the lower triangle is read).
    validate : bool
        Check values (finite, non-singular factors) with one host synchronisation.

    Returns
    -------
    value : array ()
        ``W2^2 >= 0`` (squared distance, in squared units of the means).

    Raises
    ------
    ShapeError, TypeError, NotPSDError, ValueError
        As :func:`gpnum.divergences.kl_mvn`.

    Notes
    -----
    Costs one SVD of an (M, M) matrix (about 10-40 GEMMs of that size, see the benchmarks).
    """
    return _wasserstein(mq, Sq, mp, Sp, Lq, Lp, validate, False)


def wasserstein_mvn_and_grad(mq, Sq=None, mp=None, Sp=None, *, Lq=None, Lp=None,
                             validate=True):
    """:func:`wasserstein_mvn` and its gradients ``(value, grads)`` (docs/gradients.md).

    - ``d/dmq = 2 (mq - mp) = -d/dmp``
    - ``d/dSq = I - T``, ``T = Sp^{1/2} (Sp^{1/2} Sq Sp^{1/2})^{-1/2} Sp^{1/2}`` (the optimal
      transport map from Q to P); ``d/dSp = I - T^{-1}``
    - ``d/dLq = tril(2 (Lq - Lp R))``, ``d/dLp = tril(-2 (Lq - Lp R) R^T)``, ``R`` the polar factor
      of ``Lp^T Lq``.

    The covariance gradients need both covariances non-singular.
    """
    return _wasserstein(mq, Sq, mp, Sp, Lq, Lp, validate, True)


def _gwi(mq, Kq, mp, Kp, Lq, Lp, eigen_term, validate, want_grad):
    xp, _ = namespace_of({"mq": mq, "Kq": Kq, "mp": mp, "Kp": Kp, "Lq": Lq, "Lp": Lp})
    if eigen_term:
        N, cq, cp = mvn_args(xp, mq, mp, Kq, Kp, Lq, Lp, _GWI_NAMES, validate)
        out = _w2(xp, mq - mp, cq, cp, want_grad)
        if not want_grad:
            return xp.asarray(out / N)
        value, grads = out
        return xp.asarray(value / N), {k: g / N for k, g in grads.items()}
    # Without the eigenvalue term only the diagonals of the gram matrices are read.
    N = check_mean(mq, "mq")
    check_mean(mp, "mp")
    check_same_shape(mp, "mp", mq, "mq")
    kq, Aq, fq = covariance_arg(Kq, Lq, "Kq", "Lq", N)
    kp, Ap, fp = covariance_arg(Kp, Lp, "Kp", "Lp", N)
    if validate:
        _validate(xp, finite=[("mq", mq), ("mp", mp), (kq, Aq), (kp, Ap)])
    Aq = xp.tril(Aq) if fq else Aq
    Ap = xp.tril(Ap) if fp else Ap

    def trace(A, is_factor):
        return xp.sum(A * A) if is_factor else xp.sum(xp.linalg.diagonal(A))

    delta = mq - mp
    value = xp.asarray((xp.sum(delta * delta) + trace(Aq, fq) + trace(Ap, fp)) / N)
    if not want_grad:
        return value

    def grad(A, is_factor):
        return (2.0 / N) * A if is_factor else eye_like(xp, A) / N

    return value, {"mq": (2.0 / N) * delta, "mp": (-2.0 / N) * delta, kq: grad(Aq, fq),
                   kp: grad(Ap, fp)}


def wasserstein_gwi(mq, Kq=None, mp=None, Kp=None, *, Lq=None, Lp=None, eigen_term=True,
                    validate=True):
    """Batch estimate of the squared 2-Wasserstein distance between two GPs (GWI).

    The estimator of Wild et al. (2022, "Generalized variational inference in function spaces:
    Gaussian measures meet Bayesian deep learning") used by Gaussian Wasserstein inference, in
    the same-batch form of J. Wu (2023, MSc thesis, UCL, "Wasserstein distance approximations",
    ``X_{N_S} = X_{N_B}``): for a variational GP
    ``Q = GP(mq, r)`` and a prior ``P = GP(mp, k)`` on a batch of ``N`` inputs,

        W^2 ~= 1/N sum_n (mq_n - mp_n)^2 + 1/N tr Kp + 1/N tr Kq
               - 2/N sum_n sqrt(lambda_n(Kq Kp)),

    with gram matrices ``Kq = r(X, X)`` and ``Kp = k(X, X)``. The last ("eigenvalue") term is
    computed from the symmetric form, ``sum_n sqrt(lambda_n(Kq Kp)) = |Lp^T Lq|_*``, so the
    estimate equals ``wasserstein_mvn(mq, Kq, mp, Kp) / N``. With ``eigen_term=False`` the
    term is dropped (Wu 2023, "Dropping the eigendecomposition"): O(N), only the diagonals of
    the gram matrices are read and nothing is factorised; the result is then an upper bound.

    Parameters
    ----------
    mq, mp : array (N,)
        Variational and prior means at the batch inputs.
    Kq, Kp : array (N, N), optional
        Variational and prior gram matrices at the batch inputs (with ``eigen_term`` they must
        be positive definite; the jittered :func:`gpnum.backend.cholesky` factorises them).
        Give exactly one of ``Kq``/``Lq`` and of ``Kp``/``Lp``.
    Lq, Lp : array (N, N), optional, keyword-only
        Lower Cholesky factors of the gram matrices instead.
    eigen_term : bool
        Include the eigenvalue (cross) term.
    validate : bool
        Check values with one host synchronisation.

    Returns
    -------
    value : array ()
    """
    return _gwi(mq, Kq, mp, Kp, Lq, Lp, eigen_term, validate, False)


def wasserstein_gwi_and_grad(mq, Kq=None, mp=None, Kp=None, *, Lq=None, Lp=None,
                             eigen_term=True, validate=True):
    """:func:`wasserstein_gwi` and its gradients ``(value, grads)``.

    With ``eigen_term`` the gradients are those of :func:`wasserstein_mvn_and_grad` divided by
    ``N``; without it, ``d/dmq = 2 (mq - mp) / N``, ``d/dKq = I / N``, ``d/dLq = 2 tril(Lq) / N``.
    """
    return _gwi(mq, Kq, mp, Kp, Lq, Lp, eigen_term, validate, True)
