"""Dense NumPy float64 reference kernels (shared by the kernel tests) and checks of the references.

The references form every pairwise difference explicitly (no GEMM expansion) and follow the
textbook formulas; the arc-cosine step is checked here against Monte Carlo, the polynomial
kernel against its explicit feature map.
"""

import itertools
import math

import numpy as np

SQ3, SQ5 = math.sqrt(3.0), math.sqrt(5.0)

PROFILES = {
    "RBF": lambda r: np.exp(-0.5 * r * r),
    "Matern12": lambda r: np.exp(-r),
    "Matern32": lambda r: (1.0 + SQ3 * r) * np.exp(-SQ3 * r),
    "Matern52": lambda r: (1.0 + SQ5 * r + 5.0 / 3.0 * r * r) * np.exp(-SQ5 * r),
}


def ref_stationary(name, X1, X2, lengthscale, variance):
    diff = (X1[:, None, :] - X2[None, :, :]) / np.asarray(lengthscale, dtype=np.float64)
    r = np.sqrt(np.sum(diff * diff, axis=-1))
    return float(variance) * PROFILES[name](r)


def ref_polynomial(X1, X2, degree, variance, offset):
    inner = np.einsum("id,jd->ij", X1, X2)
    return (variance * inner + offset) ** degree


def relu_expectation(k11, k22, k12):
    """E[relu(u) relu(v)] for (u, v) ~ N(0, [[k11, k12], [k12, k22]]) (Cho & Saul 2009)."""
    nrm = np.sqrt(k11 * k22)
    cos = np.clip(k12 / nrm, -1.0, 1.0)
    t = np.arccos(cos)
    return nrm * (np.sin(t) + (np.pi - t) * cos) / (2.0 * np.pi)


def ref_arccos(X1, X2, depth, weight_variance, bias_variance):
    w = np.broadcast_to(np.asarray(weight_variance, dtype=np.float64), (depth + 1,))
    b = np.broadcast_to(np.asarray(bias_variance, dtype=np.float64), (depth + 1,))
    d = X1.shape[1]
    K = b[0] + w[0] * np.einsum("id,jd->ij", X1, X2) / d
    k1 = b[0] + w[0] * np.sum(X1 ** 2, axis=1) / d
    k2 = b[0] + w[0] * np.sum(X2 ** 2, axis=1) / d
    for layer in range(1, depth + 1):
        K = b[layer] + w[layer] * relu_expectation(k1[:, None], k2[None, :], K)
        k1 = b[layer] + w[layer] * relu_expectation(k1, k1, k1)
        k2 = b[layer] + w[layer] * relu_expectation(k2, k2, k2)
    return K


def ref_gram(spec, X1, X2):
    """Reference gram of a test ``spec`` = (kind, options, params dict)."""
    kind, opts, p = spec
    if kind in PROFILES:
        return ref_stationary(kind, X1, X2, p["lengthscale"], p["variance"])
    if kind == "Polynomial":
        return ref_polynomial(X1, X2, opts["degree"], p["variance"], p["offset"])
    if kind == "ArcCosine":
        return ref_arccos(X1, X2, opts["depth"], p["weight_variance"], p["bias_variance"])
    if kind in ("Sum", "Product"):
        parts = [ref_gram(s, X1, X2) for s in opts["parts"]]
        return sum(parts) if kind == "Sum" else np.prod(parts, axis=0)
    raise KeyError(kind)


# ------------------------------------------------------------------ checks of the references
def test_relu_expectation_matches_monte_carlo():
    rng = np.random.default_rng(0)
    n = 400_000
    for k11, k22, k12 in [(1.0, 2.0, 0.7), (0.5, 1.5, -0.6), (2.0, 2.0, 1.999), (1.0, 1.0, 0.0)]:
        C = np.array([[k11, k12], [k12, k22]])
        L = np.linalg.cholesky(C + 1e-12 * np.eye(2))
        uv = rng.standard_normal((n, 2)) @ L.T
        prod = np.maximum(uv[:, 0], 0.0) * np.maximum(uv[:, 1], 0.0)
        mc, se = prod.mean(), prod.std() / np.sqrt(n)
        assert abs(relu_expectation(k11, k22, k12) - mc) < 5 * se


def test_arccos_reference_matches_wide_network():
    # A finite network of width 256 with Gaussian weights: its output covariance over 400 weight
    # draws approaches the NNGP recursion (bias O(1/width), noise about 7 % relative).
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3, 4))
    w, b, width, draws = np.array([1.5, 2.0, 0.7]), np.array([0.3, 0.1, 0.5]), 256, 400
    outs = np.empty((draws, 3))
    for t in range(draws):
        h = X @ rng.normal(scale=np.sqrt(w[0] / 4), size=(4, width)) + \
            rng.normal(scale=np.sqrt(b[0]), size=width)
        for layer in (1, 2):
            out_width = 1 if layer == 2 else width
            h = np.maximum(h, 0.0) @ rng.normal(scale=np.sqrt(w[layer] / width),
                                                size=(width, out_width)) + \
                rng.normal(scale=np.sqrt(b[layer]), size=out_width)
        outs[t] = h[:, 0]
    emp = outs.T @ outs / draws
    ref = ref_arccos(X, X, 2, w, b)
    assert np.max(np.abs(emp - ref)) < 0.25 * np.max(np.abs(ref))


def test_polynomial_reference_is_a_feature_map_inner_product():
    # (v x.y + c)^2 = phi(x).phi(y) with the monomials of degree <= 2, weighted.
    rng = np.random.default_rng(2)
    X1, X2 = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    v, c = 0.7, 1.3

    def phi(x):
        feats = [c]
        feats += [math.sqrt(2.0 * c * v) * xi for xi in x]
        feats += [v * x[i] * x[j] * (1.0 if i == j else math.sqrt(2.0))
                  for i, j in itertools.combinations_with_replacement(range(3), 2)]
        return np.array(feats)

    F1, F2 = np.stack([phi(x) for x in X1]), np.stack([phi(x) for x in X2])
    np.testing.assert_allclose(ref_polynomial(X1, X2, 2, v, c), F1 @ F2.T, rtol=1e-12)


# ---------------------------------------------------------------------- test specifications
def kernel_specs(d):
    """Kernel configurations covered by the tests, for inputs with ``d`` columns."""
    ard = np.linspace(0.6, 1.8, d)
    return {
        "RBF": ("RBF", {}, {"lengthscale": 0.9, "variance": 1.3}),
        "RBF-ARD": ("RBF", {}, {"lengthscale": ard, "variance": 0.7}),
        "Matern12": ("Matern12", {}, {"lengthscale": 1.1, "variance": 0.8}),
        "Matern12-ARD": ("Matern12", {}, {"lengthscale": ard, "variance": 1.2}),
        "Matern32-ARD": ("Matern32", {}, {"lengthscale": ard[::-1].copy(), "variance": 1.4}),
        "Matern52": ("Matern52", {}, {"lengthscale": 1.3, "variance": 0.9}),
        "Matern52-ARD": ("Matern52", {}, {"lengthscale": ard, "variance": 1.1}),
        "Polynomial3": ("Polynomial", {"degree": 3}, {"variance": 0.6, "offset": 0.8}),
        "ArcCosine2": ("ArcCosine", {"depth": 2}, {"weight_variance": 1.7, "bias_variance": 0.4}),
        "ArcCosine3-layers": ("ArcCosine", {"depth": 3},
                              {"weight_variance": np.array([1.5, 2.0, 0.8, 1.2]),
                               "bias_variance": np.array([0.3, 0.1, 0.6, 0.2])}),
        "ArcCosine0": ("ArcCosine", {"depth": 0}, {"weight_variance": 1.3, "bias_variance": 0.5}),
        "Sum": ("Sum", {"parts": [("Matern52", {}, {"lengthscale": ard, "variance": 1.1}),
                                  ("Polynomial", {"degree": 2}, {"variance": 0.3, "offset": 0.7})]},
                {}),
        "Product": ("Product", {"parts": [("RBF", {}, {"lengthscale": 1.4, "variance": 0.9}),
                                          ("ArcCosine", {"depth": 1},
                                           {"weight_variance": 1.2, "bias_variance": 0.6})]},
                    {}),
    }


SPEC_NAMES = list(kernel_specs(3))


def build(spec, xp=None, dtype=None, device=None):
    """The gpnum kernel described by ``spec``."""
    from gpnum import kernels as K

    kind, opts, p = spec
    kw = dict(xp=xp, dtype=dtype, device=device)
    if kind in PROFILES:
        return getattr(K, kind)(np.asarray(p["lengthscale"], dtype=np.float64),
                                np.asarray(p["variance"], dtype=np.float64), **kw)
    if kind == "Polynomial":
        return K.Polynomial(opts["degree"], p["variance"], p["offset"], **kw)
    if kind == "ArcCosine":
        return K.ArcCosine(opts["depth"], np.asarray(p["weight_variance"], dtype=np.float64),
                           np.asarray(p["bias_variance"], dtype=np.float64), **kw)
    parts = [build(s, xp, dtype, device) for s in opts["parts"]]
    return K.Sum(*parts) if kind == "Sum" else K.Product(*parts)


def spec_params(spec, prefix=""):
    """Flat ``{name: float64 array}`` with gpnum's prefixed names for composites."""
    kind, opts, p = spec
    if kind in ("Sum", "Product"):
        out = {}
        for i, s in enumerate(opts["parts"]):
            out.update(spec_params(s, f"{prefix}{i}."))
        return out
    return {prefix + n: np.asarray(v, dtype=np.float64) for n, v in p.items()}


def spec_with(spec, values, prefix=""):
    """Copy of ``spec`` with the flat parameters in ``values`` replaced."""
    kind, opts, p = spec
    if kind in ("Sum", "Product"):
        parts = [spec_with(s, values, f"{prefix}{i}.") for i, s in enumerate(opts["parts"])]
        return (kind, {**opts, "parts": parts}, p)
    return (kind, opts, {n: values.get(prefix + n, v) for n, v in p.items()})


def test_specs_round_trip_through_flat_parameters():
    spec = kernel_specs(3)["Sum"]
    flat = spec_params(spec)
    assert list(flat) == ["0.lengthscale", "0.variance", "1.variance", "1.offset"]
    changed = spec_with(spec, {"1.offset": np.asarray(2.5)})
    assert float(spec_params(changed)["1.offset"]) == 2.5
    assert float(spec_params(changed)["1.variance"]) == 0.3
