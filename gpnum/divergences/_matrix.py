"""Small matrix helpers for the multivariate divergences (triangular sandwiches, symmetrising)."""

from __future__ import annotations

from gpnum.backend import device_of, solve_triangular

__all__ = []


def eye_like(xp, A):
    return xp.eye(A.shape[0], dtype=A.dtype, device=device_of(A))


def symmetrise(X):
    return 0.5 * (X + X.T)


def inv_sandwich(L, Y):
    """``L^{-T} Y L^{-1}`` for symmetric ``Y`` (M, M), by two triangular solves; symmetric."""
    Z = solve_triangular(L, Y, lower=True, trans=True)        # L^{-T} Y
    return symmetrise(solve_triangular(L, Z.T, lower=True, trans=True))  # L^{-T} (Y L^{-1})


def gradient_entry(xp, cov, G_S=None, F_L=None):
    """The gradient w.r.t. a covariance argument in the form its caller passed it.

    Parameters
    ----------
    cov : Covariance
    G_S : array (M, M), optional
        Symmetric gradient w.r.t. the covariance ``S``.
    F_L : array (M, M), optional
        Gradient w.r.t. a full (not triangular) square root ``L`` of ``S = L L^T``, i.e.
        ``2 G_S L``. Only its lower triangle is returned.
    """
    if cov.is_factor:
        return xp.tril(F_L)
    return symmetrise(G_S)
