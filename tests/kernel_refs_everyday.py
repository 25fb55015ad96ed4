"""Dense NumPy float64 references of the everyday kernels (periodic, RQ, linear, ...) and test
specifications pairing each with a gpnum builder. Written from the textbook formulas, pair by
pair, independently of gpnum's code paths."""

import math

import numpy as np

from gpnum import kernels as K

SQ5 = math.sqrt(5.0)


def _tau(X1, X2):
    return X1[:, None, :] - X2[None, :, :]  # (n1, n2, d)


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


PROFILES = {
    "RBF": lambda r2, p: np.exp(-0.5 * r2),
    "Matern52": lambda r2, p: (1.0 + SQ5 * np.sqrt(r2) + 5.0 / 3.0 * r2) * np.exp(-SQ5 * np.sqrt(r2)),
    "RationalQuadratic": lambda r2, p: (1.0 + r2 / (2.0 * p["alpha"])) ** (-p["alpha"]),
}


def ref_rbf(X1, X2, same, p):
    r2 = np.sum((_tau(X1, X2) / p["lengthscale"]) ** 2, axis=-1)
    return p["variance"] * np.exp(-0.5 * r2)


def rbf_reference(X1, X2, lengthscale, variance=1.0):
    """Dense RBF gram ``variance exp(-|x1 - x2|^2 / (2 lengthscale^2))`` (n1, n2), float64;
    ``lengthscale`` a number or one per input dimension (ARD). The tests' shared RBF reference."""
    return ref_rbf(X1, X2, X1 is X2, {"lengthscale": lengthscale, "variance": variance})


def matern32_reference(X1, X2, lengthscale, variance=1.0):
    """Dense Matern-3/2 gram ``variance (1 + sqrt(3) r) exp(-sqrt(3) r)``, ``r`` the scaled
    distance (n1, n2), float64; ``lengthscale`` a number or one per input dimension."""
    r = np.sqrt(np.sum((_tau(X1, X2) / lengthscale) ** 2, axis=-1))
    return variance * (1.0 + math.sqrt(3.0) * r) * np.exp(-math.sqrt(3.0) * r)


def ref_rq(X1, X2, same, p):
    r2 = np.sum((_tau(X1, X2) / p["lengthscale"]) ** 2, axis=-1)
    return p["variance"] * PROFILES["RationalQuadratic"](r2, p)


def ref_periodic(profile):
    def ref(X1, X2, same, p):
        base = {k[5:]: v for k, v in p.items() if k.startswith("base.")}
        s = np.sin(np.pi * _tau(X1, X2) / p["period"])
        r2 = np.sum((2.0 * s / base["lengthscale"]) ** 2, axis=-1)
        return base["variance"] * PROFILES[profile](r2, base)
    return ref


def ref_cosine(X1, X2, same, p):
    return p["variance"] * np.cos(2.0 * np.pi * np.sum(_tau(X1, X2) / p["lengthscale"], axis=-1))


def ref_linear(X1, X2, same, p):
    v = np.broadcast_to(p["variance"], (X1.shape[1],))
    return np.einsum("id,jd,d->ij", X1, X2, v)


def ref_constant(X1, X2, same, p):
    return np.full((X1.shape[0], X2.shape[0]), float(p["variance"]))


def ref_white(X1, X2, same, p):
    return float(p["variance"]) * np.eye(X1.shape[0]) if same else np.zeros((X1.shape[0],
                                                                            X2.shape[0]))


def ref_sm(X1, X2, same, p):
    tau = _tau(X1, X2)
    out = 0.0
    for w, mu, s in zip(p["mixture_weights"], p["mixture_means"], p["mixture_scales"], strict=False):
        out = out + w * np.exp(-2.0 * np.pi ** 2 * np.sum(tau ** 2 * s ** 2, axis=-1)) * \
            np.cos(2.0 * np.pi * np.sum(tau * mu, axis=-1))
    return out


def ref_changepoints(part_refs):
    def ref(X1, X2, same, p):
        loc = np.atleast_1d(p["locations"])
        a = np.broadcast_to(p["steepness"], loc.shape)

        def weights(X):
            s = _sig(a[None, :] * (X[:, :1] - loc[None, :]))
            m = loc.shape[0]
            return [(1.0 if i == 0 else s[:, i - 1]) * (1.0 if i == m else 1.0 - s[:, i])
                    for i in range(m + 1)]

        w1, w2 = weights(X1), weights(X2)
        out = 0.0
        for i, part in enumerate(part_refs):
            sub = {k[len(f"{i}."):]: v for k, v in p.items() if k.startswith(f"{i}.")}
            out = out + np.outer(w1[i], w2[i]) * part(X1, X2, same, sub)
        return out
    return ref


def ref_active(X1, X2, same, p):
    """RBF(active_dims=[1]) * Periodic(RBF, active_dims=[0]) + Linear(active_dims=[1, 0])."""
    sub = lambda pre: {k[len(pre):]: v for k, v in p.items() if k.startswith(pre)}  # noqa: E731
    a = ref_rbf(X1[:, [1]], X2[:, [1]], same, sub("0.0."))
    b = ref_periodic("RBF")(X1[:, [0]], X2[:, [0]], same, sub("0.1."))
    c = ref_linear(X1[:, [1, 0]], X2[:, [1, 0]], same, sub("1."))
    return a * b + c


def _f(x):
    return np.asarray(x, dtype=np.float64)


# name -> (builder(params, ns) -> kernel, reference, parameters)
SPECS = {
    "rq_ard": (lambda p, ns: K.RationalQuadratic(p["lengthscale"], p["alpha"], p["variance"], **ns),
               ref_rq, {"lengthscale": _f([0.8, 1.7]), "alpha": _f(0.6), "variance": _f(1.3)}),
    "periodic_rbf": (lambda p, ns: K.Periodic(K.RBF(p["base.lengthscale"], p["base.variance"],
                                                    **ns), p["period"]),
                     ref_periodic("RBF"), {"period": _f([1.3, 2.1]),
                                           "base.lengthscale": _f([0.9, 1.4]),
                                           "base.variance": _f(1.2)}),
    "periodic_m52": (lambda p, ns: K.Periodic(K.Matern52(p["base.lengthscale"],
                                                         p["base.variance"], **ns), p["period"]),
                     ref_periodic("Matern52"), {"period": _f(1.7), "base.lengthscale": _f(0.8),
                                                "base.variance": _f(0.9)}),
    "periodic_rq": (lambda p, ns: K.Periodic(K.RationalQuadratic(
        p["base.lengthscale"], p["base.alpha"], p["base.variance"], **ns), p["period"]),
        ref_periodic("RationalQuadratic"), {"period": _f(1.5), "base.lengthscale": _f(1.1),
                                            "base.alpha": _f(0.8), "base.variance": _f(1.1)}),
    "cosine": (lambda p, ns: K.Cosine(p["lengthscale"], p["variance"], **ns), ref_cosine,
               {"lengthscale": _f([1.3, 2.4]), "variance": _f(0.7)}),
    "linear_ard": (lambda p, ns: K.Linear(p["variance"], **ns), ref_linear,
                   {"variance": _f([0.6, 1.4])}),
    "linear": (lambda p, ns: K.Linear(p["variance"], **ns), ref_linear, {"variance": _f(0.8)}),
    "constant": (lambda p, ns: K.Constant(p["variance"], **ns), ref_constant,
                 {"variance": _f(1.7)}),
    "white": (lambda p, ns: K.White(p["variance"], **ns), ref_white, {"variance": _f(0.3)}),
    "spectral": (lambda p, ns: K.SpectralMixture(2, 2, p["mixture_weights"], p["mixture_means"],
                                                 p["mixture_scales"], **ns), ref_sm,
                 {"mixture_weights": _f([0.7, 0.4]),
                  "mixture_means": _f([[0.3, 0.1], [0.05, 0.4]]),
                  "mixture_scales": _f([[0.2, 0.5], [0.3, 0.1]])}),
    "changepoints": (lambda p, ns: K.ChangePoints(
        [K.RBF(p["0.lengthscale"], p["0.variance"], **ns), K.Linear(p["1.variance"], **ns)],
        p["locations"], p["steepness"]),
        ref_changepoints([ref_rbf, ref_linear]),
        {"locations": _f([0.2]), "steepness": _f(3.0), "0.lengthscale": _f(0.7),
         "0.variance": _f(1.1), "1.variance": _f([0.5, 0.9])}),
    "changepoints3": (lambda p, ns: K.ChangePoints(
        [K.RBF(p["0.lengthscale"], p["0.variance"], **ns), K.Constant(p["1.variance"], **ns),
         K.Cosine(p["2.lengthscale"], p["2.variance"], **ns)], p["locations"], p["steepness"]),
        ref_changepoints([ref_rbf, ref_constant, ref_cosine]),
        {"locations": _f([-0.5, 0.6]), "steepness": _f([2.0, 4.0]), "0.lengthscale": _f(0.7),
         "0.variance": _f(1.1), "1.variance": _f(0.6), "2.lengthscale": _f(2.3),
         "2.variance": _f(0.8)}),
    "active_dims": (lambda p, ns: K.RBF(p["0.0.lengthscale"], p["0.0.variance"], active_dims=[1],
                                        **ns)
                    * K.Periodic(K.RBF(p["0.1.base.lengthscale"], p["0.1.base.variance"], **ns),
                                 p["0.1.period"], active_dims=[0])
                    + K.Linear(p["1.variance"], active_dims=[1, 0], **ns),
                    ref_active, {"0.0.lengthscale": _f(0.9), "0.0.variance": _f(1.2),
                                 "0.1.period": _f(1.6), "0.1.base.lengthscale": _f(1.3),
                                 "0.1.base.variance": _f(0.8), "1.variance": _f([0.4, 1.5])}),
}

NAMES = tuple(SPECS)


def build(name, xp=None, dtype=None, device=None, params=None):
    builder, _, p = SPECS[name]
    return builder(p if params is None else params, {"xp": xp, "dtype": dtype, "device": device})


def reference(name, X1, X2=None, params=None):
    _, ref, p = SPECS[name]
    same = X2 is None
    return ref(X1, X1 if same else X2, same, p if params is None else params)
