"""Per-point observation noise in the state-space machinery (``R`` of shape (n,)).

References: the dense Gaussian log density ``log N(y; 0, K + diag(R))`` by a NumPy Cholesky,
its closed-form derivative w.r.t. each ``R_i`` (``(alpha_i^2 - (C^{-1})_ii) / 2``), central
finite differences of the dense value w.r.t. the kernel's parameters, and the dense posterior
marginals. Irregular, tied times.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import gpnum.kernels as K
from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.models import _kalman_blocked, _kalman_smoother
from gpnum.models._kalman_blocked import lml_blocked
from gpnum.models._kalman_blocked_marginals import smoothed_marginals


def _kernel(**kw):
    return (K.Matern32(lengthscale=2.5, variance=0.8, **kw)
            + K.SHO(variance=1.1, period=6.0, quality=3.0, **kw))


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, 60.0, n))
    t[7] = t[8]  # a tie
    y = np.sin(0.8 * t) + 0.3 * rng.standard_normal(n)
    R = np.exp(rng.uniform(np.log(0.01), np.log(2.0), n))  # two orders of magnitude
    return t, y, R


def _steps(t):
    return np.concatenate([[0.0], np.diff(t)])


def dense_lml(kernel, t, y, R):
    C = np.asarray(B.to_numpy(kernel(t[:, None])), dtype=np.float64) + np.diag(R)
    L = np.linalg.cholesky(C)
    a = np.linalg.solve(L.T, np.linalg.solve(L, y))
    value = -0.5 * y @ a - np.sum(np.log(np.diag(L))) - 0.5 * len(y) * np.log(2.0 * np.pi)
    Ci = np.linalg.inv(C)
    return value, 0.5 * (a * a - np.diag(Ci))


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("steps", [None, 1, 9, 300])
def test_lml_and_noise_gradient_match_dense(steps):
    t, y, R = _data(300)
    kern = _kernel()
    form = K.state_space_form(kern)
    v, (_, d_R, d_y) = lml_blocked(form, _steps(t), y, R, True, L=steps)
    v_d, dR_d = dense_lml(kern, t, y, R)
    assert abs(float(v) - v_d) <= 1e-9 * abs(v_d)
    assert d_R.shape == (300,)
    assert _rel(d_R, dR_d) < 1e-9


@pytest.mark.parametrize("steps, slab, group", [(None, 1 << 13, 1 << 20), (7, 20, 50)])
def test_kernel_gradient_finite_differences(monkeypatch, steps, slab, group):
    monkeypatch.setattr(_kalman_blocked, "SLAB", slab)
    monkeypatch.setattr(_kalman_blocked, "GROUP", group)
    t, y, R = _data(80, seed=1)
    kern = _kernel()
    form = K.state_space_form(kern)
    _, (g, d_R, _) = lml_blocked(form, _steps(t), y, R, True, L=steps)
    params = kern.parameters()
    for i, name in enumerate(form.names):
        x0 = np.asarray(params[name], dtype=np.float64)

        def f(x, name=name, x0=x0):
            kern.set_parameters({name: x})
            out = dense_lml(kern, t, y, R)[0]
            kern.set_parameters({name: x0})
            return out

        check_grad(f, x0, np.reshape(np.asarray(g[i]), x0.shape), name=name)
    check_grad(lambda r: dense_lml(kern, t, y, r)[0], R, d_R, name="R")


def test_scalar_noise_is_a_constant_vector():
    t, y, _ = _data(200, seed=2)
    form = K.state_space_form(_kernel())
    v1, (g1, r1, y1) = lml_blocked(form, _steps(t), y, np.asarray(0.3), True)
    v2, (g2, r2, y2) = lml_blocked(form, _steps(t), y, np.full(200, 0.3), True)
    assert abs(float(v1) - float(v2)) <= 1e-12 * abs(float(v1))
    assert _rel(g2, g1) < 1e-11
    assert abs(float(np.sum(r2)) - float(r1)) <= 1e-10 * abs(float(r1))


def test_smoothed_marginals_match_dense():
    t, y, R = _data(150, seed=3)
    kern = _kernel()
    form = K.state_space_form(kern)
    state = _kalman_smoother.smoothed_state(form, t, y[:, None], R, np)
    h = np.asarray(form.H)
    mean = np.einsum("j,njr->nr", h, state["ms"])[:, 0]
    var = np.einsum("i,nij,j->n", h, state["Ps"], h)
    Kx = np.asarray(kern(t[:, None]))
    C = Kx + np.diag(R)
    mean_d = Kx @ np.linalg.solve(C, y)
    var_d = np.diag(Kx - Kx @ np.linalg.solve(C, Kx))
    assert _rel(mean, mean_d) < 1e-9
    assert _rel(var, var_d) < 1e-9


def _dense_marginals(kern, t, R, y):
    Kx = np.asarray(kern(t[:, None]))
    C = Kx + np.diag(R)
    return Kx @ np.linalg.solve(C, y), np.diag(Kx - Kx @ np.linalg.solve(C, Kx))


@pytest.mark.parametrize("steps, slab", [(None, 1 << 13), (1, 1 << 13), (13, 20), (150, 7)])
def test_blocked_smoothed_marginals_match_dense(monkeypatch, steps, slab):
    # one step per block, one block of every step, and slabs that cut blocks: the RTS step
    # into a slab's last step takes its transition from the next slab
    monkeypatch.setattr(_kalman_blocked, "SLAB", slab)
    t, y, R = _data(150, seed=6)
    kern = _kernel()
    mean, var = smoothed_marginals(K.state_space_form(kern), _steps(t), y, R, L=steps)
    mean_d, var_d = _dense_marginals(kern, t, R, y)
    assert _rel(mean, mean_d) < 1e-9
    assert _rel(var, var_d) < 1e-9


def test_every_backend(xp, dtype, device, to_xp):
    # a float32 kernel's transitions are formed in float32 and cast up (the filter runs in
    # float64): the loose tolerance is that of the float32 parameters
    t, y, R = _data(120, seed=4)
    kw = {"xp": xp, "dtype": dtype, "device": device}
    kern = _kernel(**kw)
    form = K.state_space_form(kern)
    as64 = lambda a: B.asarray(a, dtype=xp.float64, xp=xp, device=device)  # noqa: E731
    v, (g, d_R, _) = lml_blocked(form, as64(_steps(t)), as64(y), as64(R), True)
    v_d, dR_d = dense_lml(_kernel(), t, y, R)
    tol = 1e-4 if dtype == xp.float32 else 1e-9
    assert abs(float(v) - v_d) <= tol * abs(v_d)
    assert _rel(B.to_numpy(d_R), dR_d) < tol
    _, (g_np, _, _) = lml_blocked(K.state_space_form(_kernel()), _steps(t), y, R, True)
    assert _rel(B.to_numpy(g), g_np) < tol
    state = _kalman_smoother.smoothed_state(form, as64(t), as64(y[:, None]), as64(R), xp)
    mean = B.to_numpy(state["ms"])[:, :, 0] @ np.asarray(B.to_numpy(form.H), dtype=np.float64)
    mean_d, var_d = _dense_marginals(_kernel(), t, R, y)
    assert _rel(mean, mean_d) < tol * 10
    mean, var = smoothed_marginals(form, as64(_steps(t)), as64(y), as64(R))
    assert _rel(B.to_numpy(mean), mean_d) < tol * 10
    assert _rel(B.to_numpy(var), var_d) < tol * 10


def test_noise_of_the_wrong_shape_is_rejected():
    t, y, R = _data(50)
    form = K.state_space_form(_kernel())
    with pytest.raises(ShapeError, match=r"R: .*\(50,\)"):
        lml_blocked(form, _steps(t), y, R[:49], False)


def test_numpy_fast_path_equals_the_generic_path(monkeypatch):
    t, y, R = _data(257, seed=5)
    form = K.state_space_form(_kernel())
    fast = lml_blocked(form, _steps(t), y, R, True, L=11)
    monkeypatch.setattr(_kalman_blocked.array_api_compat, "is_numpy_namespace",
                        lambda xp: False)
    generic = lml_blocked(form, _steps(t), y, R, True, L=11)
    assert abs(float(fast[0]) - float(generic[0])) <= 1e-12 * abs(float(generic[0]))
    for a, b in zip(fast[1], generic[1], strict=True):
        assert _rel(a, b) < 1e-11
