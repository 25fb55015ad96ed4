"""Hand-derived gradients of the multivariate divergences against float64 finite differences.

Covariance gradients must be symmetric and factor gradients lower triangular
(docs/gradients.md); the finite differences perturb single entries, which the functions see
through ``(S + S^T)/2`` and ``tril(L)``, so they check exactly that convention.
"""

import numpy as np
import pytest
from gradcheck import check_grad
from test_divergences_reference import num, problem, to, with_junk_above

from gpnum import divergences as D


def _inputs(mq, Sq, mp, Sp, form, cov, seed=3):
    rng = np.random.default_rng(seed)
    inputs = {"mq": mq, "mp": mp}
    for which, S, f in (("q", Sq, form[0]), ("p", Sp, form[1])):
        if f == "S":
            inputs[cov + which] = S
        else:
            inputs["L" + which] = with_junk_above(np.linalg.cholesky(S), rng)
    return inputs


def check_all_grads(xp, device, fn, inputs, **kw):
    fn_and_grad = getattr(D, fn.__name__ + "_and_grad")

    def conv(args):
        return {k: to(xp, device, v) for k, v in args.items()}

    value, grads = fn_and_grad(**conv(inputs), **kw)
    assert set(grads) == set(inputs)
    np.testing.assert_allclose(num(value), num(fn(**conv(inputs), **kw)), rtol=1e-14)
    for name, x0 in inputs.items():
        g = num(grads[name])
        assert g.shape == x0.shape and grads[name].dtype == xp.float64
        if name.startswith(("S", "K")):
            assert np.array_equal(g, g.T), f"{name}: gradient not symmetric"
        if name.startswith("L"):
            assert not np.any(np.triu(g, 1)), f"{name}: gradient not lower triangular"

        def f(x, name=name):
            return float(num(fn(**conv({**inputs, name: x}), validate=False, **kw)))

        check_grad(f, x0, g, name=f"{fn.__name__} {kw} d/d{name}")


CASES = [
    (D.kl_mvn, {}),
    (D.wasserstein_mvn, {}),
    (D.bhattacharyya_mvn, {}),
    (D.hellinger_mvn, {}),
    (D.renyi_mvn, {"alpha": 0.3}),
    (D.renyi_mvn, {"alpha": 0.9}),   # spectral evaluation (|1 - alpha| < 1/4)
    (D.renyi_mvn, {"alpha": 1.0}),
    (D.renyi_mvn, {"alpha": 1.1}),
    (D.renyi_mvn, {"alpha": 2.5}),
]


@pytest.mark.parametrize("form", ["SS", "LL"])
@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: CASES[i][0].__name__
                         + "".join(f"-{k}{v}" for k, v in CASES[i][1].items()))
def test_mvn_gradients(xp, device, case, form):
    fn, kw = CASES[case]
    mq, Sq, mp, Sp = problem(3, 20 + case, scale_q=0.3, scale_p=1.2)
    check_all_grads(xp, device, fn, _inputs(mq, Sq, mp, Sp, form, "S"), **kw)


@pytest.mark.parametrize("eigen_term", [True, False])
@pytest.mark.parametrize("form", ["SS", "LL"])
def test_gwi_gradients(xp, device, form, eigen_term):
    mq, Kq, mp, Kp = problem(4, 30)
    check_all_grads(xp, device, D.wasserstein_gwi, _inputs(mq, Kq, mp, Kp, form, "K"),
                    eigen_term=eigen_term)


def test_kl_whitened_gradient(xp, device):
    rng = np.random.default_rng(31)
    M = 4
    L = np.tril(rng.standard_normal((M, M))) + 1.5 * np.eye(M)
    L[2, 2] = -0.8
    inputs = {"m": rng.standard_normal(M), "L": with_junk_above(L, rng)}
    check_all_grads(xp, device, D.kl_whitened, inputs)
    # the closed form of the convention: {"m": m, "L": tril(L) - diag(1 / diag L)}
    _, grads = D.kl_whitened_and_grad(to(xp, device, inputs["m"]), to(xp, device, inputs["L"]))
    np.testing.assert_allclose(num(grads["L"]), L - np.diag(1.0 / np.diag(L)), rtol=1e-14)


def test_gradients_near_equal_distributions(xp, device):
    # Q = P exactly is a stationary point of every divergence: all gradients vanish there.
    mq, Sq, _, _ = problem(3, 32)
    for fn, kw in CASES:
        for form in ("SS", "LL"):
            inputs = _inputs(mq, Sq, mq, Sq, form, "S")
            _, grads = getattr(D, fn.__name__ + "_and_grad")(
                **{k: to(xp, device, v) for k, v in inputs.items()}, **kw)
            for name, g in grads.items():
                assert np.max(np.abs(num(g))) < 1e-9, (fn.__name__, kw, form, name)
