"""Stochastic Lanczos quadrature for ``log det A`` and its gradient through ``param_vjp``."""

from __future__ import annotations

from gpnum.backend import default_rng, is_array
from gpnum.errors import NotPSDError, ShapeError, describe_shape
from gpnum.linalg._lanczos import _lanczos_rows, tridiagonal
from gpnum.linalg._operators import aslinearoperator, transpose_copy
from gpnum.linalg._validation import prepare_system

__all__ = ["slq_logdet", "slq_logdet_and_grad"]


def _probes(op, num_probes, seed, probes):
    if probes is not None:
        if not is_array(probes) or probes.ndim != 2 or probes.shape[0] != op.shape[0]:
            got = describe_shape(probes.shape) if is_array(probes) else type(probes).__name__
            raise ShapeError(f"probes: expected shape ({op.shape[0]}, t), got {got}")
        return probes
    if isinstance(num_probes, bool) or not isinstance(num_probes, int) or num_probes < 1:
        raise ValueError(f"num_probes: expected an integer >= 1, got {num_probes!r}")
    rng = default_rng(seed, xp=op.xp, device=op.device)
    return rng.rademacher((op.shape[0], num_probes), dtype=op.dtype)


def _quadrature(A, num_probes, num_iter, seed, probes, want_solves):
    op = aslinearoperator(A)
    Z = _probes(op, num_probes, seed, probes)
    op, Z, _ = prepare_system(op, Z, "probes")
    xp = op.xp
    n, t = Z.shape
    if isinstance(num_iter, bool) or not isinstance(num_iter, int) or num_iter < 1:
        raise ValueError(f"num_iter: expected an integer >= 1, got {num_iter!r}")
    z_norm = xp.linalg.vector_norm(Z, axis=0)
    if not bool(xp.all(z_norm > 0.0)):
        raise ValueError("probes: expected non-zero probe vectors, got a zero column")
    j = min(num_iter, n)
    basis, alpha, beta, z_norm = _lanczos_rows(op, transpose_copy(xp, Z), j, True)
    T = tridiagonal(alpha, beta[:, :-1])
    theta, S = xp.linalg.eigh(T)                             # (t, j), (t, j, j)
    tau = S[:, 0, :]                                         # first components (t, j)
    weights = tau * tau
    # A Ritz value of a decoupled block (after an invariant subspace) has zero weight.
    used = weights > 0.0
    if not bool(xp.all(xp.where(used, theta, 1.0) > 0.0)):
        raise NotPSDError(
            f"A: a Ritz value {float(xp.min(theta)):.3e} <= 0: the operator is not positive "
            "definite, so its log-determinant is undefined (add jitter or check the matrix)")
    log_theta = xp.log(xp.where(used, theta, 1.0))
    # z^T log(A) z ~= ||z||^2 sum_i tau_i^2 log(theta_i)   (Golub & Meurant 2010)
    per_probe = z_norm * z_norm * xp.sum(weights * log_theta, axis=1)
    value = xp.sum(per_probe) / float(t)
    if not want_solves:
        return op, value, None, Z
    # A^{-1} z ~= ||z|| Q T^{-1} e_1 = ||z|| Q S diag(1/theta) S^T e_1: the CG iterate that
    # the same Lanczos run gives for free.
    coef = (S @ (tau / theta)[:, :, None])[:, :, 0] * z_norm[:, None]       # (t, j)
    solves = (coef[:, None, :] @ basis)[:, 0, :]                           # (t, n)
    return op, value, transpose_copy(xp, solves), Z


def slq_logdet(A, *, num_probes=10, num_iter=30, seed=0, probes=None):
    """Stochastic Lanczos quadrature estimate of ``log det A`` for positive definite ``A``.

    ``log det A = tr log A ~= (1/t) sum_p z_p^T log(A) z_p`` with Rademacher probes ``z_p``
    (Hutchinson), each quadratic form evaluated by Gauss quadrature from ``num_iter`` Lanczos
    steps started at ``z_p`` (Ubaru, Chen & Saad 2017; Golub & Meurant 2010). All probes share
    each product with ``A``.

    Parameters
    ----------
    A : LinearOperator, array (n, n) or callable
        Symmetric positive definite.
    num_probes : int
        Number t of Rademacher probe vectors.
    num_iter : int
        Lanczos steps per probe (capped at n; reorthogonalised).
    seed : int
        Seed of the probes, so repeated calls see the same probes.
    probes : array (n, t), optional
        Probe vectors to use instead (their outer products should average to the identity,
        e.g. ``sqrt(n)`` times an orthogonal matrix).

    Returns
    -------
    0-d array
        The estimate; its standard error falls like ``1/sqrt(t)``.

    Raises
    ------
    NotPSDError
        If a Ritz value is <= 0.
    """
    return _quadrature(A, num_probes, num_iter, seed, probes, False)[1]


def slq_logdet_and_grad(A, *, num_probes=10, num_iter=30, seed=0, probes=None):
    """:func:`slq_logdet` and the stochastic estimate of its gradient w.r.t. ``A``'s parameters.

    ``d log det A = tr(A^{-1} dA) ~= (1/t) sum_p (A^{-1} z_p)^T dA z_p``, i.e.
    ``A.param_vjp(A^{-1} Z / t, Z)`` (the ``param_vjp`` convention, docs/linalg.md), with
    ``A^{-1} z_p`` taken from the same Lanczos run (the conjugate-gradient iterate after
    ``num_iter`` steps). Both parts use the same probes, so with probes whose outer products sum
    exactly to ``t I`` and ``num_iter = n`` the value and gradient are exact.

    Returns
    -------
    value : 0-d array
    grads : dict
        ``A.param_vjp(...)`` (keys as documented by the operator).
    """
    op, value, solves, Z = _quadrature(A, num_probes, num_iter, seed, probes, True)
    t = Z.shape[1]
    return value, op.param_vjp(solves * (1.0 / float(t)), Z)
