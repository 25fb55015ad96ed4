"""The everyday kernels (RQ, Periodic, Cosine, Linear, Constant, White, SpectralMixture,
ChangePoints, active_dims) against dense NumPy references and finite differences."""

import numpy as np
import pytest
from gradcheck import check_grad
from kernel_refs_everyday import NAMES, SPECS, build, reference

from gpnum import backend as B
from gpnum import kernels as K


def _np(v):
    return np.asarray(B.to_numpy(v), dtype=np.float64)


def _inputs(seed=0, d=2):
    rng = np.random.default_rng(seed)
    X1 = rng.normal(size=(5, d))
    X2 = rng.normal(size=(4, d))
    X2[1] = X1[3]  # a coincident pair
    return X1, X2, rng.normal(size=(5, 4)), rng.normal(size=(5, 5)), rng.normal(size=5)


def _with(name, pname, value):
    p = dict(SPECS[name][2])
    p[pname] = value
    return p


@pytest.mark.parametrize("name", NAMES)
def test_gram_and_diag_match_reference(name, xp, dtype, device, to_xp, tol):
    k = build(name, xp, dtype, device)
    X1, X2, _, _, _ = _inputs()
    A, Bx = to_xp(X1), to_xp(X2)
    scale = np.max(np.abs(reference(name, X1, X2))) + 1.0
    atol = tol * 10 * scale
    np.testing.assert_allclose(_np(k(A, Bx)), reference(name, X1, X2), rtol=tol * 10, atol=atol)
    K11 = _np(k(A))
    np.testing.assert_allclose(K11, reference(name, X1), rtol=tol * 10, atol=atol)
    assert np.array_equal(K11, K11.T)  # exactly symmetric
    np.testing.assert_allclose(_np(k.diag(A)), np.diag(reference(name, X1)), rtol=tol * 10,
                               atol=atol)
    # the shared forward/backward path gives the same matrix
    Kf, _ = k.gram_and_vjp(A, Bx)
    np.testing.assert_allclose(_np(Kf), reference(name, X1, X2), rtol=tol * 10, atol=atol)


@pytest.mark.parametrize("name", NAMES)
def test_gram_vjp_matches_finite_differences(name, xp, device):
    """Parameter and input gradients, on every backend in float64, against central finite
    differences of the NumPy reference (both with two sets and with one)."""
    dtype = xp.float64
    k = build(name, xp, dtype, device)
    X1, X2, G, Gs, _ = _inputs(seed=1)
    conv = lambda a: B.asarray(a, dtype=dtype, xp=xp, device=device)  # noqa: E731
    params = SPECS[name][2]
    for use_shared in (False, True):
        if use_shared:
            _, vjp = k.gram_and_vjp(conv(X1), conv(X2))
            out = vjp(conv(G))
        else:
            out = k.gram_vjp(conv(G), conv(X1), conv(X2))
        assert list(out["params"]) == list(params)
        for pname, value in params.items():
            check_grad(lambda v, pname=pname: np.sum(G * reference(name, X1, X2, _with(name, pname, v))),
                       value, _np(out["params"][pname]), name=f"{name} {pname}")
        check_grad(lambda x: np.sum(G * reference(name, x, X2)), X1, _np(out["X1"]), name="X1")
        check_grad(lambda x: np.sum(G * reference(name, X1, x)), X2, _np(out["X2"]), name="X2")
    same = k.gram_vjp(conv(Gs), conv(X1))
    assert same["X2"] is None
    check_grad(lambda x: np.sum(Gs * reference(name, x)), X1, _np(same["X1"]), name="X")
    for pname, value in params.items():
        check_grad(lambda v, pname=pname: np.sum(Gs * reference(name, X1, None, _with(name, pname, v))),
                   value, _np(same["params"][pname]), name=f"{name} {pname} (one set)")


@pytest.mark.parametrize("name", NAMES)
def test_params_only_backward_matches_finite_differences(name, xp, device):
    """``vjp.params(G)``, the parameters' gradients without the inputs' (what exact GP
    training reads), against central finite differences of the NumPy reference, with two sets
    and with one, float64, every backend."""
    dtype = xp.float64
    k = build(name, xp, dtype, device)
    X1, X2, G, Gs, _ = _inputs(seed=2)
    conv = lambda a: B.asarray(a, dtype=dtype, xp=xp, device=device)  # noqa: E731
    params = SPECS[name][2]
    for Xb, Gc, label in ((X2, G, "two sets"), (None, Gs, "one set")):
        _, vjp = k.gram_and_vjp(conv(X1), None if Xb is None else conv(Xb))
        got = vjp.params(conv(Gc))
        assert list(got) == list(params)
        for pname, value in params.items():
            check_grad(lambda v, pname=pname, Xb=Xb, Gc=Gc: np.sum(
                Gc * reference(name, X1, Xb, _with(name, pname, v))),
                value, _np(got[pname]), name=f"{name} {pname} ({label})")


@pytest.mark.parametrize("name", NAMES)
def test_diag_vjp_matches_finite_differences(name, xp, device):
    dtype = xp.float64
    k = build(name, xp, dtype, device)
    X1, _, _, _, g = _inputs(seed=2)
    out = k.diag_vjp(B.asarray(g, dtype=dtype, xp=xp, device=device),
                     B.asarray(X1, dtype=dtype, xp=xp, device=device))
    for pname, value in SPECS[name][2].items():
        check_grad(lambda v, pname=pname: np.sum(g * np.diag(reference(name, X1, None,
                                                          _with(name, pname, v)))),
                   value, _np(out["params"][pname]), name=f"{name} {pname}")
    check_grad(lambda x: np.sum(g * np.diag(reference(name, x))), X1, _np(out["X"]), name="X")


@pytest.mark.parametrize("name", NAMES)
def test_gram_is_positive_semidefinite(name):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2)) * 1.5
    Kx = _np(build(name, dtype="float64")(X))
    eig = np.linalg.eigvalsh(Kx)
    assert eig.min() > -1e-10 * max(1.0, eig.max()), (name, eig.min())


def test_periodic_has_the_period():
    k = K.Periodic(K.Matern32(0.7, dtype="float64"), period=1.9)
    X = np.linspace(-2.0, 2.0, 7)[:, None]
    np.testing.assert_allclose(k(X, X + 1.9), k(X, X), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k(X, X + 3 * 1.9), k(X), rtol=1e-12, atol=1e-14)


def test_changepoints_switch_between_kernels():
    # far left only the first kernel acts, far right only the last
    k = K.ChangePoints([K.Constant(2.0), K.Constant(5.0)], locations=0.0, steepness=50.0)
    X = np.array([[-3.0], [3.0]])
    np.testing.assert_allclose(k(X), [[2.0, 0.0], [0.0, 5.0]], atol=1e-12)


def test_white_is_zero_between_different_sets_and_lazy_matrix_keeps_it():
    from gpnum.linalg import KernelMatrix

    rng = np.random.default_rng(4)
    X = rng.normal(size=(7, 2))
    k = K.RBF([0.8, 1.3]) + K.White(0.3)  # the white spec's variance
    assert k.depends_on_same_set and not K.RBF().depends_on_same_set
    np.testing.assert_array_equal(K.White(0.4)(X, X), np.zeros((7, 7)))  # two sets
    dense = reference("white", X) + K.RBF([0.8, 1.3])(X)
    op = KernelMatrix(k, X, block_size=3)  # blocks 3 + 3 + 1: off-diagonal and edge pieces
    np.testing.assert_allclose(op.to_dense(), dense, rtol=1e-13)
    R = rng.normal(size=(7, 2))
    np.testing.assert_allclose(op @ R, dense @ R, rtol=1e-12)
    np.testing.assert_allclose(op.diagonal(), np.diag(dense), rtol=1e-13)
    idx = np.array([5, 0, 2])
    np.testing.assert_allclose(op.columns(idx), dense[:, idx], rtol=1e-13)
    # param_vjp: gradient of sum_i u_i^T K v_i, the white variance's is tr(U V^T)
    U, V = rng.normal(size=(7, 2)), rng.normal(size=(7, 2))
    g = op.param_vjp(U, V)
    full = k.gram_vjp(U @ V.T, X)
    for name in full["params"]:
        np.testing.assert_allclose(g["kernel"][name], full["params"][name], rtol=1e-12)
    np.testing.assert_allclose(g["kernel"]["1.variance"], np.trace(U @ V.T), rtol=1e-12)
    np.testing.assert_allclose(g["X"], full["X1"], rtol=1e-12, atol=1e-14)


def test_active_dims_scatter_and_errors():
    X = np.random.default_rng(5).normal(size=(4, 3))
    k = K.RBF(0.9, active_dims=[2])
    np.testing.assert_allclose(k(X), K.RBF(0.9)(X[:, [2]]), rtol=1e-14)
    gX = k.gram_vjp(np.ones((4, 4)) + np.eye(4), X)["X1"]
    assert gX.shape == (4, 3) and np.all(gX[:, :2] == 0.0)
    with pytest.raises(Exception, match=r"active_dims \[2\] needs at least 3 columns, got 2"):
        k(X[:, :2])
    with pytest.raises(ValueError, match="distinct non-negative"):
        K.RBF(active_dims=[0, 0])
    with pytest.raises(TypeError, match="active_dims"):
        K.RBF(active_dims="0")
    with pytest.raises(Exception, match="expected 2 columns to match lengthscale"):
        K.RBF([1.0, 2.0], active_dims=[0, 1, 2])(X)


def test_spectral_mixture_from_data_finds_the_period():
    t = np.linspace(0.0, 20.0, 400)
    y = np.sin(2.0 * np.pi * t / 2.5) + 0.3 * np.sin(2.0 * np.pi * t / 0.7)
    k = K.SpectralMixture.from_data(t[:, None], y, 2)
    means = np.sort(_np(k.mixture_means)[:, 0])
    np.testing.assert_allclose(means, [1 / 2.5, 1 / 0.7], rtol=0.03)
    w = _np(k.mixture_weights)
    np.testing.assert_allclose(w.sum(), np.var(y), rtol=1e-6)


def test_coregion_matches_B_and_gradients():
    rng = np.random.default_rng(6)
    W = rng.normal(size=(3, 2))
    kappa = np.array([0.3, 0.5, 0.2])
    t1 = np.array([0, 2, 1, 2, 0], dtype=np.float64)
    t2 = np.array([1, 1, 0, 2], dtype=np.float64)
    X1 = np.c_[rng.normal(size=5), t1]
    X2 = np.c_[rng.normal(size=4), t2]
    k = K.Coregion(3, 2, W=W, kappa=kappa, active_dims=[1]) * K.RBF(0.8, active_dims=[0])

    def ref(X1, X2, W, kappa, ell=0.8):
        Bm = W @ W.T + np.diag(kappa)
        r2 = (X1[:, None, 0] - X2[None, :, 0]) ** 2 / ell ** 2
        return Bm[X1[:, 1].astype(int)][:, X2[:, 1].astype(int)] * np.exp(-0.5 * r2)

    np.testing.assert_allclose(k(X1, X2), ref(X1, X2, W, kappa), rtol=1e-13)
    np.testing.assert_allclose(k.diag(X1), np.diag(ref(X1, X1, W, kappa)), rtol=1e-13)
    G = rng.normal(size=(5, 4))
    out = k.gram_vjp(G, X1, X2)
    check_grad(lambda w: np.sum(G * ref(X1, X2, w, kappa)), W, out["params"]["0.W"], name="W")
    check_grad(lambda c: np.sum(G * ref(X1, X2, W, c)), kappa, out["params"]["0.kappa"],
               name="kappa")
    col0 = lambda x: np.c_[x, X1[:, 1]]  # noqa: E731 (only the continuous column moves)
    check_grad(lambda x: np.sum(G * ref(col0(x), X2, W, kappa)), X1[:, :1], out["X1"][:, :1],
               name="X1")
    assert np.all(out["X1"][:, 1] == 0.0)
    g = rng.normal(size=5)
    d = k.diag_vjp(g, X1)
    check_grad(lambda w: np.sum(g * np.diag(ref(X1, X1, w, kappa))), W, d["params"]["0.W"],
               name="diag W")
    assert np.linalg.eigvalsh(k(np.c_[rng.normal(size=9), np.arange(9) % 3])).min() > -1e-12
    with pytest.raises(ValueError, match="integer task indices in 0..2"):
        k(np.c_[X1[:, 0], X1[:, 1] + 0.5])
