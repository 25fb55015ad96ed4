import numpy as np
import pytest
from gradcheck import check_grad

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.params import (
    Parameterised,
    chain_to_unconstrained,
    from_unconstrained,
    softplus,
    softplus_grad,
    softplus_inverse,
    to_unconstrained,
)


class Toy(Parameterised):
    _param_names = ("scale", "shift")
    _positive = ("scale",)

    def __init__(self, scale, shift, xp=None, dtype=None, device=None):
        self._init_namespace(xp, dtype, device)
        self.scale = scale
        self.shift = shift

    def value(self, x):
        return self.scale * x + self.shift


def test_softplus_round_trip(xp, to_xp, dtype):
    v = np.array([1e-30, 1e-8, 0.5, 1.0, 30.0, 1e30]) if dtype == xp.float64 else \
        np.array([1e-30, 1e-8, 0.5, 1.0, 30.0, 1e30])
    out = B.to_numpy(softplus(softplus_inverse(to_xp(v))))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, v, rtol=1e-5 if dtype == xp.float32 else 1e-12)
    ref = np.log1p(np.exp(np.array([-3.0, 0.0, 2.0])))
    np.testing.assert_allclose(B.to_numpy(softplus(to_xp(np.array([-3.0, 0.0, 2.0])))), ref,
                               rtol=1e-6)


def test_softplus_grad_matches_finite_differences():
    u0 = np.array([-2.0, 0.1, 3.0])
    g = softplus_grad(softplus(u0))
    for i in range(3):
        check_grad(lambda u, i=i: softplus(u)[i], u0, np.eye(3)[i] * g)


def test_dictionary_transform_with_bounds(xp, to_xp, dtype):
    """``to_unconstrained`` / ``from_unconstrained`` invert each other, apply ``lower +
    log(1 + exp(u))`` (NumPy reference) to the constrained names only, and leave the rest as is."""
    natural = {"a": np.array([0.3, 4.0]), "nu": np.array(5.5), "free": np.array([-1.0, 2.0])}
    positive, lower = ("a", "nu"), {"nu": 2.0}
    u = to_unconstrained({n: to_xp(v) for n, v in natural.items()}, positive, lower)
    np.testing.assert_array_equal(B.to_numpy(u["free"]), natural["free"])
    u_np = {n: B.to_numpy(v).astype(np.float64) for n, v in u.items()}
    ref = {"a": np.log1p(np.exp(u_np["a"])), "nu": 2.0 + np.log1p(np.exp(u_np["nu"]))}
    tol = 1e-5 if dtype == xp.float32 else 1e-12
    for n in ref:
        np.testing.assert_allclose(ref[n], natural[n], rtol=tol)
    back = from_unconstrained(u, positive, lower)
    for n, v in natural.items():
        np.testing.assert_allclose(B.to_numpy(back[n]), v, rtol=tol)


def test_dictionary_chain_rule_matches_finite_differences():
    """``chain_to_unconstrained`` of the gradient of ``f(natural) = sum(c * natural)`` against
    central differences of ``f(from_unconstrained(u))``, with and without a lower bound."""
    positive, lower = ("a", "nu"), {"nu": 2.0}
    c = {"a": np.array([0.7, -1.3]), "nu": np.array(2.1), "free": np.array([0.4, 0.9])}
    natural = {"a": np.array([0.3, 4.0]), "nu": np.array(5.5), "free": np.array([-1.0, 2.0])}
    u0 = to_unconstrained(natural, positive, lower)
    g = chain_to_unconstrained(c, natural, positive, lower)
    sizes = [np.size(u0[n]) for n in c]

    def f(flat):
        parts = np.split(flat, np.cumsum(sizes)[:-1])
        u = {n: p.reshape(np.shape(u0[n])) for n, p in zip(c, parts, strict=True)}
        nat = from_unconstrained(u, positive, lower)
        return sum(float(np.sum(c[n] * nat[n])) for n in c)

    check_grad(f, np.concatenate([np.ravel(u0[n]) for n in c]),
               np.concatenate([np.ravel(g[n]) for n in c]))


def test_parameterised_conversion_and_validation(xp, dtype, device, to_xp):
    t = Toy(np.array([2.0]), 0.5, xp=xp, dtype=dtype, device=device)
    assert t.scale.dtype == dtype and B.device_of(t.scale) == device
    t.scale = np.array([3.0])  # NumPy assignment converted to the object's backend
    assert B.get_namespace(t.scale) is xp and B.device_of(t.scale) == device
    with pytest.raises(ValueError, match=r"scale: expected values > 0, got \[-1.0\]"):
        t.scale = np.array([-1.0])
    with pytest.raises(ValueError, match="shift: expected finite values"):
        t.shift = float("nan")
    with pytest.raises(ShapeError, match=r"scale: expected shape \(1,\), got \(2,\)"):
        t.scale = np.array([1.0, 2.0])
    with pytest.raises(KeyError, match="unknown parameter"):
        t.set_parameters({"nope": 1.0})
    # a failed set_parameters leaves everything unchanged
    with pytest.raises(ValueError):
        t.set_parameters({"shift": 1.0, "scale": np.array([0.0])})
    assert float(B.to_numpy(t.shift)) == 0.5


def test_unconstrained_round_trip_and_chain_rule():
    t = Toy(np.array([2.0]), 0.5)
    u = t.unconstrained()
    t2 = Toy(np.array([1.0]), 0.0)
    t2.set_unconstrained(u)
    np.testing.assert_allclose(t2.scale, [2.0])
    np.testing.assert_allclose(t2.shift, 0.5)
    x = 1.7
    g = t.grad_to_unconstrained({"scale": np.array([x]), "shift": np.asarray(1.0)})

    def f(uvec):
        t3 = Toy(np.array([1.0]), 0.0)
        t3.set_unconstrained({"scale": uvec[:1], "shift": uvec[1]})
        return float(t3.value(x)[0])

    check_grad(f, np.array([u["scale"][0], float(u["shift"])]),
               np.array([g["scale"][0], float(g["shift"])]))
