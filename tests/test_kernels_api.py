"""Kernel parameters, composites, the unconstrained transform, and every error path."""

import numpy as np
import pytest
from gradcheck import check_grad
from test_kernels_reference import ref_gram

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.kernels import (
    RBF,
    ArcCosine,
    Kernel,
    Matern12,
    Matern32,
    Matern52,
    Polynomial,
    Product,
    Sum,
)


def _np(v):
    return np.asarray(B.to_numpy(v), dtype=np.float64)


def test_parameters_follow_the_kernel_namespace(xp, dtype, device, to_xp):
    k = Matern52(lengthscale=[0.5, 2.0], variance=1.5, xp=xp, dtype=dtype, device=device)
    assert isinstance(k, Kernel)
    assert k.lengthscale.shape == (2,) and k.variance.shape == ()
    for v in k.parameters().values():
        assert v.dtype == dtype and B.device_of(v) == device and B.get_namespace(v) is xp
    k.variance = np.asarray(3.0)  # converted on assignment
    assert B.get_namespace(k.variance) is xp and B.device_of(k.variance) == device
    # namespace, dtype and device inferred from an array-valued parameter
    k2 = RBF(to_xp(np.array([1.0, 2.0])))
    assert k2.xp is xp and k2.dtype == dtype and B.device_of(k2.variance) == device
    assert k2.gram(to_xp(np.zeros((2, 2)))).dtype == dtype
    k3 = Polynomial(2, dtype="float32")
    assert k3.dtype == k3.xp.float32


def test_kernel_repr_names_the_parameters():
    assert repr(Matern32(0.5, 2.0)) == "Matern32(lengthscale=0.5, variance=2.0)"
    assert repr(Polynomial(3) + ArcCosine(1)) == (
        "Sum(Polynomial(degree=3, variance=1.0, offset=1.0), "
        "ArcCosine(depth=1, weight_variance=1.0, bias_variance=1.0))")


def test_composite_parameters_are_flat_and_prefixed():
    k = Sum(RBF([1.0, 2.0], 0.5), Product(Matern12(0.3), Polynomial(2, 0.2, 0.4)))
    assert list(k.parameters()) == ["0.lengthscale", "0.variance", "1.0.lengthscale",
                                    "1.0.variance", "1.1.variance", "1.1.offset"]
    k.set_parameters({"1.1.offset": 0.9, "0.lengthscale": np.array([3.0, 4.0])})
    assert float(k.kernels[1].kernels[1].offset) == 0.9
    np.testing.assert_array_equal(k.kernels[0].lengthscale, [3.0, 4.0])
    # all values are validated before any is set
    with pytest.raises(ValueError, match="variance: expected values > 0"):
        k.set_parameters({"0.variance": 7.0, "1.0.variance": -1.0})
    assert float(k.kernels[0].variance) == 0.5
    with pytest.raises(KeyError, match="unknown parameter"):
        k.set_parameters({"2.variance": 1.0})
    with pytest.raises(KeyError, match="unknown parameter"):
        k.set_parameters({"0.offset": 1.0})
    with pytest.raises(KeyError, match="unknown parameter"):
        k.grad_to_unconstrained({"variance": 1.0})
    with pytest.raises(KeyError, match="unknown parameter"):
        RBF().set_parameters({"offset": 1.0})
    assert isinstance(RBF() + Matern32(), Sum) and isinstance(RBF() * Matern32(), Product)


@pytest.mark.parametrize("make", [
    lambda: Matern52(np.array([0.7, 1.9, 1.2]), 1.3),
    lambda: ArcCosine(2, np.array([1.5, 0.8, 2.0]), 0.4),
    lambda: Product(Sum(RBF(0.8, 1.1), Polynomial(2, 0.4, 0.6)), Matern32(np.array([1.0, 2.0, 0.5]))),
])
def test_unconstrained_round_trip_and_chain_rule(make):
    rng = np.random.default_rng(0)
    X1, X2, G = rng.normal(size=(5, 3)), rng.normal(size=(4, 3)), rng.normal(size=(5, 4))
    k = make()
    u = k.unconstrained()
    assert list(u) == list(k.parameters())
    natural = {n: _np(v) for n, v in k.parameters().items()}
    k2 = make()
    k2.set_parameters({n: v * 1.7 for n, v in natural.items()})
    k2.set_unconstrained(u)
    for n, v in k2.parameters().items():
        np.testing.assert_allclose(_np(v), natural[n], rtol=1e-12)
    gu = k.grad_to_unconstrained(k.gram_vjp(G, X1, X2)["params"])
    names, sizes = list(u), [np.size(u[n]) for n in u]
    flat = np.concatenate([np.ravel(_np(u[n])) for n in names])
    shapes = [np.shape(u[n]) for n in names]

    def f(vec):
        kk = make()
        parts = np.split(vec, np.cumsum(sizes)[:-1])
        kk.set_unconstrained({n: p.reshape(s) for n, p, s in zip(names, parts, shapes, strict=False)})
        return float(np.sum(G * kk(X1, X2)))

    check_grad(f, flat, np.concatenate([np.ravel(_np(gu[n])) for n in names]))


def test_unconstrained_gradient_matches_reference_model():
    # The same chain rule against the independent reference: value = softplus(u).
    rng = np.random.default_rng(1)
    X1, G = rng.normal(size=(4, 2)), rng.normal(size=(4, 4))
    k = RBF(0.9, 1.4)
    u = {n: _np(v) for n, v in k.unconstrained().items()}
    gu = k.grad_to_unconstrained(k.gram_vjp(G, X1)["params"])

    def f(vec):
        ell, var = np.logaddexp(0.0, vec)
        return np.sum(G * ref_gram(("RBF", {}, {"lengthscale": ell, "variance": var}), X1, X1))

    check_grad(f, np.array([u["lengthscale"], u["variance"]]),
               np.array([_np(gu["lengthscale"]), _np(gu["variance"])]))


# --------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("make, err, match", [
    (lambda: RBF(0.0), ValueError, r"lengthscale: expected values > 0, got 0.0"),
    (lambda: Matern12([1.0, -2.0]), ValueError, r"lengthscale: expected values > 0"),
    (lambda: Matern32(1.0, float("nan")), ValueError, r"variance: expected finite values"),
    (lambda: Matern52(np.ones((2, 2))), ShapeError, r"lengthscale: expected shape \(\) or \(d,\)"),
    (lambda: RBF(1.0, [1.0, 2.0]), ShapeError, r"variance: expected shape \(\), got \(2,\)"),
    (lambda: Polynomial(0), ValueError, r"degree: expected a positive integer, got 0"),
    (lambda: Polynomial(1.5), TypeError, r"degree: expected a positive integer, got 1.5"),
    (lambda: Polynomial(True), TypeError, r"degree: expected a positive integer"),
    (lambda: Polynomial(2, offset=-1.0), ValueError, r"offset: expected values > 0"),
    (lambda: ArcCosine(-1), ValueError, r"depth: expected an integer >= 0, got -1"),
    (lambda: ArcCosine(2.0), TypeError, r"depth: expected an integer >= 0"),
    (lambda: ArcCosine(2, np.ones(2)), ShapeError,
     r"weight_variance: expected shape \(\) or \(3,\) for depth 2, got \(2,\)"),
    (lambda: ArcCosine(1, 1.0, 0.0), ValueError, r"bias_variance: expected values > 0"),
    (lambda: Sum(RBF()), ValueError, r"Sum: expected at least two kernels, got 1"),
    (lambda: Product(RBF(), 2.0), TypeError, r"Product: argument 1: expected a gpnum kernel"),
    (lambda: Sum(RBF(), RBF(dtype="float32")), TypeError, r"Sum: argument 1: expected the namespace"),
])
def test_invalid_construction(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_same_kernel_object_twice_is_refused():
    k = RBF()
    with pytest.raises(ValueError, match="appears twice"):
        Sum(k, Product(Matern32(), k))


def test_invalid_parameter_assignment():
    k = RBF([1.0, 2.0])
    with pytest.raises(ValueError, match="lengthscale: expected values > 0"):
        k.lengthscale = np.array([1.0, 0.0])
    with pytest.raises(ShapeError, match=r"lengthscale: expected shape \(2,\), got \(3,\)"):
        k.lengthscale = np.ones(3)
    # softplus(-800) underflows to 0 in float64: the transform's floor (issue 31) keeps it
    # positive, the smallest normal number, so an optimiser's far trial point is not refused
    k.set_unconstrained({"variance": np.asarray(-800.0)})
    assert float(k.variance) == np.finfo(np.float64).smallest_normal


def test_bad_inputs_raise_clear_errors(xp, dtype, device, to_xp):
    k = Matern52([1.0, 2.0, 0.5], xp=xp, dtype=dtype, device=device)
    X = to_xp(np.ones((4, 3)))
    with pytest.raises(ShapeError, match=r"X1: expected a 2-D array of shape \(n, d\), got shape \(3,\)"):
        k(to_xp(np.ones(3)))
    with pytest.raises(ShapeError, match=r"X1: expected 3 columns to match lengthscale of shape \(3,\), got 2"):
        k(to_xp(np.ones((4, 2))))
    with pytest.raises(ShapeError, match=r"X2: expected 3 columns"):
        k(X, to_xp(np.ones((4, 2))))
    with pytest.raises(ShapeError, match="X: expected at least one row"):
        k.diag(to_xp(np.ones((0, 3))))
    bad = np.ones((4, 3))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"X2: expected finite values, got 1 NaN"):
        k.gram(X, to_xp(bad))
    with pytest.raises(TypeError, match="X1: expected a 2-D array of shape"):
        k([[1.0, 2.0, 3.0]])
    other = xp.float64 if dtype == xp.float32 else xp.float32
    with pytest.raises(TypeError, match="X1: expected dtype"):
        k(to_xp(np.ones((4, 3)), dtype=other))
    if xp is not B.namespace_by_name("numpy"):
        with pytest.raises(TypeError, match="cannot be mixed"):
            k(np.ones((4, 3)))
    # cotangents
    with pytest.raises(ShapeError, match=r"G: expected shape \(4, 2\), got \(2, 4\)"):
        k.gram_vjp(to_xp(np.ones((2, 4))), X, to_xp(np.ones((2, 3))))
    with pytest.raises(ShapeError, match=r"G: expected shape \(4, 4\), got \(4, 3\)"):
        k.gram_vjp(to_xp(np.ones((4, 3))), X)
    gbad = np.ones((4, 4))
    gbad[0, 0] = np.inf
    with pytest.raises(ValueError, match="G: expected finite values, got infinite"):
        k.gram_vjp(to_xp(gbad), X)
    with pytest.raises(ShapeError, match=r"g: expected shape \(4,\), got \(3,\)"):
        k.diag_vjp(to_xp(np.ones(3)), X)
    with pytest.raises(TypeError, match="g: expected an array"):
        k.diag_vjp(1.0, X)
    # composites check their parts' dimensions too
    with pytest.raises(ShapeError, match="X1: expected 3 columns"):
        (RBF(xp=xp, dtype=dtype, device=device) + k)(to_xp(np.ones((4, 2))))


def test_device_mismatch_is_reported():
    xps = pytest.importorskip("array_api_strict")
    k = RBF(xp=xps, dtype=xps.float64, device=xps.Device("device1"))
    X = xps.asarray(np.ones((3, 2)), device=xps.Device("CPU_DEVICE"))
    with pytest.raises(ValueError, match="X1: expected an array on the kernel's device"):
        k(X)
