"""forward_backward and viterbi against brute-force enumeration and a NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.hmm import forward_backward, viterbi
from test_hmm_reference import brute_force, numpy_forward_backward, numpy_viterbi, random_hmm
from test_hmm_reference import to64  # noqa: F401 (a fixture)

METHODS = ["scan", "sequential"]


def _np(a):
    return B.to_numpy(a)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("K,T", [(3, 5), (2, 7), (1, 4), (4, 1), (3, 2)])
def test_forward_backward_brute_force(xp, dtype, to_xp, tol, method, K, T):
    rng = np.random.default_rng(K * 10 + T)
    log_pi, log_A, log_lik = random_hmm(rng, K, T, batch=(2,))
    weights = rng.uniform(0.5, 2.0, size=(2, max(T - 1, 0)))
    res = forward_backward(to_xp(log_pi), to_xp(log_A), to_xp(log_lik),
                           transition_weights=to_xp(weights), method=method)
    assert res.marginals.shape == (2, T, K) and res.pairwise.shape == (2, K, K)
    assert res.log_normalizer.shape == (2,)
    assert res.marginals.dtype == dtype
    for b in range(2):
        marg, pair, log_z, _, _ = brute_force(log_pi, log_A, log_lik[b], weights[b])
        np.testing.assert_allclose(_np(res.marginals)[b], marg, atol=50 * tol)
        np.testing.assert_allclose(_np(res.pairwise)[b], pair, atol=50 * tol)
        np.testing.assert_allclose(_np(res.log_normalizer)[b], log_z, rtol=10 * tol,
                                   atol=10 * tol)


@pytest.mark.parametrize("method", METHODS)
def test_viterbi_brute_force(xp, dtype, to_xp, tol, method):
    rng = np.random.default_rng(3)
    log_pi, log_A, log_lik = random_hmm(rng, 3, 6, batch=(3,))
    path, log_prob = viterbi(to_xp(log_pi), to_xp(log_A), to_xp(log_lik), method=method)
    assert path.shape == (3, 6) and log_prob.shape == (3,)
    for b in range(3):
        _, _, _, best_path, best = brute_force(log_pi, log_A, log_lik[b])
        np.testing.assert_array_equal(_np(path)[b], best_path)
        np.testing.assert_allclose(_np(log_prob)[b], best, rtol=10 * tol)


def test_viterbi_single_step_and_single_state(xp, dtype, to_xp):
    rng = np.random.default_rng(4)
    log_pi, log_A, log_lik = random_hmm(rng, 3, 1)
    path, _ = viterbi(to_xp(log_pi), to_xp(log_A), to_xp(log_lik))
    assert _np(path).tolist() == [int(np.argmax(log_pi + log_lik[0]))]
    log_pi, log_A, log_lik = random_hmm(rng, 1, 5)
    path, log_prob = viterbi(to_xp(log_pi), to_xp(log_A), to_xp(log_lik))
    assert _np(path).tolist() == [0] * 5


def test_forward_backward_forbidden_transitions(xp, to64):
    """-inf entries (a left-to-right chain) against brute force, in float64."""
    rng = np.random.default_rng(5)
    log_pi, _, log_lik = random_hmm(rng, 3, 6)
    A = np.triu(rng.uniform(0.2, 1.0, size=(3, 3)))
    A /= A.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_A = np.log(A)
    marg, pair, log_z, path, best = brute_force(log_pi, log_A, log_lik)
    for method in METHODS:
        res = forward_backward(to64(log_pi), to64(log_A),
                               to64(log_lik), method=method)
        np.testing.assert_allclose(_np(res.marginals), marg, atol=1e-12)
        np.testing.assert_allclose(_np(res.pairwise), pair, atol=1e-12)
        np.testing.assert_allclose(_np(res.log_normalizer), log_z, rtol=1e-12)
        p, s = viterbi(to64(log_pi), to64(log_A),
                       to64(log_lik), method=method)
        np.testing.assert_array_equal(_np(p), path)


@pytest.mark.parametrize("T", [257, 1000])
def test_scan_long_chain_against_numpy(xp, dtype, to_xp, tol, T):
    """Odd and even lengths, several scan levels, log Z in the thousands: against NumPy's
    log-space recursions; plus the identities: marginals sum to one, pairwise marginals sum
    to the single-site ones."""
    rng = np.random.default_rng(T)
    log_pi, log_A, log_lik = random_hmm(rng, 4, T, scale=3.0)
    log_lik = log_lik - 5.0  # log Z around -5 T: far outside exp's range
    marg, xi, log_z = numpy_forward_backward(log_pi, log_A, log_lik)
    res = forward_backward(to_xp(log_pi), to_xp(log_A), to_xp(log_lik))
    m = _np(res.marginals)
    np.testing.assert_allclose(m, marg, atol=100 * tol)
    np.testing.assert_allclose(_np(res.pairwise), xi.sum(0), atol=100 * tol * T, rtol=100 * tol)
    np.testing.assert_allclose(_np(res.log_normalizer), log_z, rtol=10 * tol)
    np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=10 * tol)
    pair = _np(res.pairwise)
    np.testing.assert_allclose(pair.sum(axis=1), m[:-1].sum(axis=0), rtol=100 * tol)
    np.testing.assert_allclose(pair.sum(axis=0), m[1:].sum(axis=0), rtol=100 * tol)
    path, log_prob = viterbi(to_xp(log_pi), to_xp(log_A), to_xp(log_lik))
    ref_path, ref_best = numpy_viterbi(log_pi, log_A, log_lik)
    np.testing.assert_allclose(_np(log_prob), ref_best, rtol=10 * tol)
    if dtype == xp.float64:  # float32 may resolve a near-tie differently
        np.testing.assert_array_equal(_np(path), ref_path)
    else:
        assert np.mean(_np(path) == ref_path) > 0.95


def test_batched_log_pi(xp, to64):
    """A different initial distribution per chain (the subchains' case)."""
    rng = np.random.default_rng(6)
    _, log_A, log_lik = random_hmm(rng, 3, 5, batch=(2,))
    log_pis = np.log(rng.dirichlet(np.ones(3), size=2))
    res = forward_backward(to64(log_pis), to64(log_A),
                           to64(log_lik))
    for b in range(2):
        marg, pair, log_z, _, _ = brute_force(log_pis[b], log_A, log_lik[b])
        np.testing.assert_allclose(_np(res.marginals)[b], marg, atol=1e-12)
        np.testing.assert_allclose(_np(res.log_normalizer)[b], log_z, rtol=1e-12)


def test_bad_inputs(xp, to64):
    rng = np.random.default_rng(7)
    log_pi, log_A, log_lik = (to64(a) for a in random_hmm(rng, 3, 4))
    with pytest.raises(ShapeError, match="log_A"):
        forward_backward(log_pi, log_A[:2, :], log_lik)
    with pytest.raises(ShapeError, match="log_pi"):
        forward_backward(log_pi[:2], log_A, log_lik)
    with pytest.raises(ShapeError, match="log_lik"):
        forward_backward(log_pi, log_A, log_lik[0, :])
    bad = to64(np.where(np.arange(12).reshape(4, 3) == 5, np.nan, 0.0))
    with pytest.raises(ValueError, match="NaN"):
        forward_backward(log_pi, log_A, bad)
    with pytest.raises(ValueError, match="method"):
        forward_backward(log_pi, log_A, log_lik, method="loop")
    with pytest.raises(TypeError, match="log_A"):
        viterbi(log_pi, [[0.0]], log_lik)
