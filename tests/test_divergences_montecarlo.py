"""Divergences against Monte Carlo estimates from their defining integrals.

Samples are drawn once (fixed seed, NumPy float64) from Q; each divergence is estimated from its
definition as an expectation under Q, and the library value must lie within 5 standard errors
(delta method for the logarithms of means). The squared difference of moments is not an
expectation and is checked against its closed form only (test_divergences_pointwise.py).
"""

import functools

import numpy as np
import pytest
import scipy.stats
from test_divergences_reference import num, problem, ref_transport_map, to

from gpnum import divergences as D

N_SAMPLES = 100_000
Z = 5.0


def _log_mean_exp_estimate(w):
    """log mean(w) and its standard error for positive weights ``w``."""
    mean = w.mean()
    return np.log(mean), w.std(ddof=1) / (np.sqrt(w.size) * mean)


def _estimates(log_q, log_p, sample_cost):
    """Monte Carlo estimates (value, standard error) of each divergence from log densities."""
    n = log_q.size
    r = log_q - log_p
    out = {"kl": (r.mean(), r.std(ddof=1) / np.sqrt(n))}
    bc = np.exp(-0.5 * r)                              # sqrt(p / q): Bhattacharyya coefficient
    out["hellinger"] = (1.0 - bc.mean(), bc.std(ddof=1) / np.sqrt(n))
    log_bc, se = _log_mean_exp_estimate(bc)
    out["bhattacharyya"] = (-log_bc, se)
    for alpha in (0.5, 1.5):
        log_m, se = _log_mean_exp_estimate(np.exp((alpha - 1.0) * r))
        out[f"renyi{alpha}"] = (log_m / (alpha - 1.0), se / abs(alpha - 1.0))
    out["wasserstein"] = (sample_cost.mean(), sample_cost.std(ddof=1) / np.sqrt(n))
    return out


@functools.cache
def mvn_case():
    # Sq below Sp keeps the importance weights of the alpha = 1.5 estimate light-tailed.
    mq, Sq, mp, Sp = problem(3, 40, scale_q=0.5, scale_p=1.0)
    rng = np.random.default_rng(41)
    x = mq + rng.standard_normal((N_SAMPLES, 3)) @ np.linalg.cholesky(Sq).T
    log_q = scipy.stats.multivariate_normal(mq, Sq).logpdf(x)
    log_p = scipy.stats.multivariate_normal(mp, Sp).logpdf(x)
    # W2: the cost of the optimal coupling x -> mp + T (x - mq)
    y = mp + (x - mq) @ ref_transport_map(Sq, Sp).T
    cost = np.sum((x - y) ** 2, axis=1)
    return (mq, Sq, mp, Sp), _estimates(log_q, log_p, cost)


@functools.cache
def pointwise_case():
    mq, mp = np.array([0.3, -1.0, 2.0]), np.array([0.0, 0.5, 1.0])
    vq, vp = np.array([0.5, 2.0, 0.05]), np.array([1.0, 1.5, 0.3])
    rng = np.random.default_rng(42)
    z = rng.standard_normal((N_SAMPLES, 3))
    x = mq + np.sqrt(vq) * z
    log_q = scipy.stats.norm(mq, np.sqrt(vq)).logpdf(x)
    log_p = scipy.stats.norm(mp, np.sqrt(vp)).logpdf(x)
    per_point = []
    for i in range(3):
        # W2 in 1-D: the monotone coupling x -> mp + sp / sq (x - mq)
        y = mp[i] + np.sqrt(vp[i] / vq[i]) * (x[:, i] - mq[i])
        per_point.append(_estimates(log_q[:, i], log_p[:, i], (x[:, i] - y) ** 2))
    return (mq, vq, mp, vp), per_point


FUNCTIONS = {
    "kl": ("kl", {}), "hellinger": ("hellinger", {}), "bhattacharyya": ("bhattacharyya", {}),
    "renyi0.5": ("renyi", {"alpha": 0.5}), "renyi1.5": ("renyi", {"alpha": 1.5}),
    "wasserstein": ("wasserstein", {}),
}


def _assert_within(got, estimate, se, what, dtype_tol):
    assert abs(got - estimate) <= Z * se + dtype_tol * abs(estimate), \
        f"{what}: {got} vs Monte Carlo {estimate} +- {se}"


@pytest.mark.parametrize("key", list(FUNCTIONS))
def test_mvn_against_monte_carlo(xp, dtype, device, key):
    (mq, Sq, mp, Sp), est = mvn_case()
    name, kw = FUNCTIONS[key]
    fn = getattr(D, name + "_mvn")
    got = num(fn(to(xp, device, mq, dtype), to(xp, device, Sq, dtype), to(xp, device, mp, dtype),
                 to(xp, device, Sp, dtype), **kw))
    estimate, se = est[key]
    assert 0.0 < se < 0.02 * abs(estimate) + 1e-3   # the test has teeth
    _assert_within(got, estimate, se, key, 1e-4 if dtype == xp.float32 else 0.0)


@pytest.mark.parametrize("key", list(FUNCTIONS))
def test_pointwise_against_monte_carlo(xp, dtype, device, key):
    arrays, per_point = pointwise_case()
    name, kw = FUNCTIONS[key]
    fn = getattr(D, name + "_normal")
    got = num(fn(*(to(xp, device, a, dtype) for a in arrays), reduction="none", **kw))
    for i in range(3):
        estimate, se = per_point[i][key]
        _assert_within(got[i], estimate, se, f"{key}[{i}]", 1e-4 if dtype == xp.float32 else 0.0)


def test_gwi_estimate_against_monte_carlo(xp, device):
    # wasserstein_gwi is W2^2 / N between the finite-dimensional marginals on the batch
    (mq, Sq, mp, Sp), est = mvn_case()
    got = num(D.wasserstein_gwi(*(to(xp, device, a) for a in (mq, Sq, mp, Sp))))
    estimate, se = est["wasserstein"]
    _assert_within(3.0 * got, estimate, se, "gwi", 0.0)


def test_monte_carlo_rejects_the_seed_formulas():
    """The seed's per-point KL and Hellinger (design notes 4.5) fail these Monte Carlo bounds."""
    (mq, vq, mp, vp), per_point = pointwise_case()
    sq, sp, d = np.sqrt(vq), np.sqrt(vp), mq - mp
    seed_kl = np.log(vq / vp) + (vp + d**2) / (2.0 * vq) - 0.5
    seed_hellinger = 1.0 - np.sqrt(2.0 * sp * sq / (vp + vq)) * np.exp(d**2 / (4.0 * (vp + vq)))
    for key, seed in (("kl", seed_kl), ("hellinger", seed_hellinger)):
        for i in range(3):
            estimate, se = per_point[i][key]
            assert abs(seed[i] - estimate) > 2.0 * Z * se, (key, i)
