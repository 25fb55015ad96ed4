"""Test problems shared by the linalg tests: an RBF kernel callable with its gradient, and
kernel matrices of a chosen condition number (plus checks that these fixtures are what they
claim to be)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad
from kernel_refs_everyday import rbf_reference

from gpnum.backend import asarray, device_of, get_namespace


@pytest.fixture(autouse=True)
def torch_single_thread():
    """Run torch single-threaded during these tests, then restore the setting.

    On this shared 2-core machine torch's intra-op thread pool turns tiny products into
    multi-millisecond waits (a (7, 32) x (32, 5) float64 product measured 28 ms with two
    threads under load, 2 us with one); results do not depend on it. Test modules import this
    fixture by name.
    """
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class RBFKernel:
    """``k(x, z) = variance * exp(-|x - z|^2 / (2 lengthscale^2))`` on any array namespace.

    Implements the callable protocol that ``KernelMatrix`` consumes: ``__call__``, ``diag``
    and ``gram_vjp`` (gradient of ``sum(G * k(X1, X2))``).
    """

    def __init__(self, variance=1.3, lengthscale=0.4, with_diag=True, with_vjp=True):
        self.variance = float(variance)
        self.lengthscale = float(lengthscale)
        if not with_diag:
            self.diag = None
        if not with_vjp:
            self.gram_vjp = None

    def _sqdist(self, X1, X2):
        xp = get_namespace(X1, X2)
        diff = X1[:, None, :] - X2[None, :, :]
        return xp.sum(diff * diff, axis=-1) / (self.lengthscale ** 2)

    def __call__(self, X1, X2):
        xp = get_namespace(X1, X2)
        return self.variance * xp.exp(-0.5 * self._sqdist(X1, X2))

    def diag(self, X):
        xp = get_namespace(X)
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=device_of(X)) + self.variance

    def gram_vjp(self, G, X1, X2):
        xp = get_namespace(G, X1, X2)
        d2 = self._sqdist(X1, X2)
        GK = G * self.variance * xp.exp(-0.5 * d2)
        ls2 = self.lengthscale ** 2
        g1 = -(xp.sum(GK, axis=1)[:, None] * X1 - GK @ X2) / ls2
        g2 = -(xp.sum(GK, axis=0)[:, None] * X2 - GK.T @ X1) / ls2
        return {"params": {"variance": xp.sum(GK) / self.variance,
                           "lengthscale": xp.sum(GK * d2) / self.lengthscale},
                "X1": g1, "X2": g2}


def rbf_numpy(X1, X2, variance, lengthscale):
    """Dense float64 reference of :class:`RBFKernel` (the shared one, arguments reordered)."""
    return rbf_reference(X1, X2, lengthscale, variance)


def kernel_problem(n, cond, seed=0, d=2, lengthscale=0.3):
    """Inputs ``X`` (n, d) and noise ``s2`` with ``cond(K(X, X) + s2 I) == cond`` (NumPy).

    Returns ``X, s2, A`` with ``A = K + s2 I`` in float64.
    """
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    K = rbf_numpy(X, X, 1.0, lengthscale)
    ev = np.linalg.eigvalsh(K)
    s2 = (ev[-1] - cond * ev[0]) / (cond - 1.0)
    return X, s2, K + s2 * np.eye(n)


def cast_reference(A, xp, dtype, device):
    """``A`` rounded to the working dtype and back to float64: the matrix a backend solves."""
    from gpnum.backend import to_numpy

    return to_numpy(asarray(A, dtype=dtype, xp=xp, device=device)).astype(np.float64)


@pytest.mark.parametrize("cond", [1e2, 1e4, 1e6])
def test_kernel_problem_has_the_requested_condition_number(cond):
    X, s2, A = kernel_problem(40, cond)
    assert s2 > 0.0
    np.testing.assert_allclose(np.linalg.cond(A), cond, rtol=1e-6)


def test_rbf_kernel_callable_matches_numpy_and_its_gradient(xp, to_xp):
    rng = np.random.default_rng(3)
    X1, X2, G = rng.normal(size=(5, 2)), rng.normal(size=(4, 2)), rng.normal(size=(5, 4))
    k = RBFKernel(1.3, 0.7)
    np.testing.assert_allclose(np.asarray(_np(k(to_xp(X1), to_xp(X2)))),
                               rbf_numpy(X1, X2, 1.3, 0.7), rtol=1e-5)
    if to_xp(X1).dtype != xp.float64:
        return
    g = k.gram_vjp(to_xp(G), to_xp(X1), to_xp(X2))
    check_grad(lambda v: (G * rbf_numpy(X1, X2, float(v), 0.7)).sum(), np.array(1.3),
               _np(g["params"]["variance"]))
    check_grad(lambda v: (G * rbf_numpy(X1, X2, 1.3, float(v))).sum(), np.array(0.7),
               _np(g["params"]["lengthscale"]))
    check_grad(lambda v: (G * rbf_numpy(v, X2, 1.3, 0.7)).sum(), X1, _np(g["X1"]))
    check_grad(lambda v: (G * rbf_numpy(X1, v, 1.3, 0.7)).sum(), X2, _np(g["X2"]))


def _np(x):
    from gpnum.backend import to_numpy

    return to_numpy(x)
