"""Central finite-difference gradient checks in float64, shared by every gradient test."""

from __future__ import annotations

import numpy as np


def numerical_grad(f, x, eps=1e-6):
    """Central differences of scalar ``f`` at NumPy float64 array ``x`` (any shape)."""
    # C order: reshape(-1) must be a view to perturb x in place (of a Fortran-ordered copy it
    # would be a copy, and the differences would all be zero).
    x = np.array(x, dtype=np.float64, copy=True, order="C")
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        orig = flat[i]
        h = eps * max(1.0, abs(orig))
        flat[i] = orig + h
        fp = float(f(x))
        flat[i] = orig - h
        fm = float(f(x))
        flat[i] = orig
        gflat[i] = (fp - fm) / (2.0 * h)
    return g


def relative_error(a, b):
    """``||a - b|| / max(||a||, ||b||)``, 0 when both vanish."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(np.linalg.norm(a), np.linalg.norm(b))
    return 0.0 if scale == 0.0 else float(np.linalg.norm(a - b) / scale)


def check_grad(f, x, grad, *, eps=1e-6, rtol=1e-6, atol=1e-12, name="gradient"):
    """Assert that ``grad`` (analytic, at ``x``) matches central differences of ``f``.

    Parameters
    ----------
    f : callable
        NumPy float64 array of ``x``'s shape -> float.
    x : array_like
        Point of evaluation.
    grad : array_like
        Analytic gradient at ``x``, same shape.
    atol : float
        Absolute floor: a gradient that vanishes analytically passes when both are below it
        (the relative error of two round-off-sized numbers means nothing).
    """
    num = numerical_grad(f, x, eps=eps)
    grad = np.asarray(grad, dtype=np.float64)
    assert num.shape == grad.shape, f"{name}: shape {grad.shape} != {num.shape}"
    err = relative_error(grad, num)
    if max(np.linalg.norm(grad), np.linalg.norm(num)) < atol:
        return 0.0
    assert err < rtol, f"{name}: relative error {err:.2e} >= {rtol:.0e}\nanalytic={grad}\nnumerical={num}"
    return err


def check_model_grad(model, grads, value, *, eps=1e-6, names=None):
    """:func:`check_grad` of every parameter of ``model`` (or those in ``names``): ``value()``
    evaluated with one parameter moved through ``model.set_parameters``, the others held and
    the parameter restored afterwards, against ``grads[name]``."""
    params = model.parameters()
    for name in params if names is None else names:
        x0 = np.asarray(params[name], dtype=np.float64)

        def f(x, name=name, x0=x0):
            model.set_parameters({name: x})
            out = float(value())
            model.set_parameters({name: x0})
            return out

        check_grad(f, x0, grads[name], name=name, eps=eps)
