"""forward_backward and viterbi against brute-force enumeration and a NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from test_hmm_reference import brute_force, numpy_forward_backward, numpy_viterbi, random_hmm

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.hmm import forward_backward, viterbi

METHODS = ["scan", "blocked", "sequential"]  # viterbi's
FB_METHODS = ["scan", "blocked", "sequential"]


def _np(a):
    return B.to_numpy(a)


@pytest.mark.parametrize("method", FB_METHODS)
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
    for method in FB_METHODS:
        res = forward_backward(to64(log_pi), to64(log_A),
                               to64(log_lik), method=method)
        np.testing.assert_allclose(_np(res.marginals), marg, atol=1e-12)
        np.testing.assert_allclose(_np(res.pairwise), pair, atol=1e-12)
        np.testing.assert_allclose(_np(res.log_normalizer), log_z, rtol=1e-12)
    for method in METHODS:
        p, s = viterbi(to64(log_pi), to64(log_A),
                       to64(log_lik), method=method)
        np.testing.assert_array_equal(_np(p), path)


@pytest.mark.parametrize("method", ["scan", "blocked"])
@pytest.mark.parametrize("T", [257, 1000, 1024])
def test_long_chain_against_numpy(xp, dtype, to_xp, tol, T, method):
    """Odd and even lengths, several scan levels; for the blocked solver several blocks with
    a tail (T = 257, 1000) and without (T = 1024, 16 blocks of 64); log Z in the thousands:
    against NumPy's log-space recursions; plus the identities: marginals sum to one, pairwise
    marginals sum to the single-site ones."""
    rng = np.random.default_rng(T)
    log_pi, log_A, log_lik = random_hmm(rng, 4, T, scale=3.0)
    log_lik = log_lik - 5.0  # log Z around -5 T: far outside exp's range
    marg, xi, log_z = numpy_forward_backward(log_pi, log_A, log_lik)
    res = forward_backward(to_xp(log_pi), to_xp(log_A), to_xp(log_lik), method=method)
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


# ------------------------------------------------------------------ the blocked solver
def _extended_reference(log_pi, log_A, log_lik):
    """Scaled forward-backward, sequential, in extended precision (np.longdouble): for long
    chains a tighter reference than the log-space recursions, whose log messages in the
    thousands carry absolute errors ~1e-11."""
    ld = np.longdouble
    A = np.exp(np.asarray(log_A, dtype=ld))
    lik = np.exp(np.asarray(log_lik, dtype=ld))
    T, K = lik.shape
    alpha = np.empty((T, K), dtype=ld)
    beta = np.empty((T, K), dtype=ld)
    scale = np.empty(T, dtype=ld)
    a = np.exp(np.asarray(log_pi, dtype=ld)) * lik[0]
    scale[0] = a.sum()
    alpha[0] = a / scale[0]
    for t in range(1, T):
        a = (alpha[t - 1] @ A) * lik[t]
        scale[t] = a.sum()
        alpha[t] = a / scale[t]
    beta[-1] = 1.0
    for t in range(T - 2, -1, -1):
        b = A @ (lik[t + 1] * beta[t + 1])
        beta[t] = b / b.sum()
    marg = alpha * beta
    marg /= marg.sum(axis=1, keepdims=True)
    xi = alpha[:-1, :, None] * A * (lik[1:] * beta[1:])[:, None, :]
    xi /= xi.sum(axis=(1, 2), keepdims=True)
    return (marg.astype(np.float64), xi.sum(0).astype(np.float64),
            float(np.log(scale).sum()))


def _count_scan_calls(monkeypatch):
    """Count calls of the exact scan (the blocked solver's fallback)."""
    from gpnum.hmm import _chain, _inference

    calls = []
    scan = _chain._chain_products

    def counting(*args, **kwargs):
        calls.append(1)
        return scan(*args, **kwargs)

    # the blocked solver's fallback (in _chain) and the short chains' one (in _inference)
    monkeypatch.setattr(_chain, "_chain_products", counting)
    monkeypatch.setattr(_inference, "_chain_products", counting)
    return calls


def test_blocked_accepts_its_speculation_on_a_mixing_chain(xp, to64, monkeypatch):
    """A well-mixing chain: the warm-up guesses pass the exit check, no fallback; the result
    equals NumPy's log-space recursions, batched, with a different start per chain."""
    rng = np.random.default_rng(11)
    T = 3000
    _, log_A, log_lik = random_hmm(rng, 3, T, batch=(2,), scale=3.0)
    log_pis = np.log(rng.dirichlet(np.ones(3), size=2))
    calls = _count_scan_calls(monkeypatch)
    res = forward_backward(to64(log_pis), to64(log_A), to64(log_lik), method="blocked")
    assert calls == []
    for b in range(2):
        marg, pair, log_z = _extended_reference(log_pis[b], log_A, log_lik[b])
        np.testing.assert_allclose(_np(res.marginals)[b], marg, atol=1e-14)
        np.testing.assert_allclose(_np(res.pairwise)[b], pair, rtol=1e-13)
        np.testing.assert_allclose(_np(res.log_normalizer)[b], log_z, rtol=1e-14)


def test_blocked_sweeps_until_exact_on_a_sticky_chain(xp, to64, monkeypatch):
    """A sticky chain with weak evidence forgets its start in ~100 steps, more than the
    warm-up (32) and the blocks (64): the guesses fail the exit check, and further sweeps
    (not the scan) must give the exact result."""
    from gpnum.hmm import _chain

    rng = np.random.default_rng(12)
    T, K = 4000, 3
    A = np.full((K, K), 0.1 / (K - 1)) + np.eye(K) * (1.0 - 0.1 - 0.1 / (K - 1))
    log_A = np.log(A)
    log_pi = np.log(np.full(K, 1.0 / K))
    log_lik = 0.05 * rng.normal(size=(T, K))
    marg, pair, log_z = _extended_reference(log_pi, log_A, log_lik)
    calls = _count_scan_calls(monkeypatch)
    sweeps = []
    run_blocks = _chain._run_blocks
    monkeypatch.setattr(_chain, "_run_blocks",
                        lambda *a, **k: sweeps.append(1) or run_blocks(*a, **k))
    res = forward_backward(to64(log_pi), to64(log_A), to64(log_lik), method="blocked")
    assert calls == [] and len(sweeps) > 2  # more than one sweep per chain
    np.testing.assert_allclose(_np(res.marginals), marg, atol=1e-13)
    np.testing.assert_allclose(_np(res.pairwise), pair, rtol=1e-12)
    np.testing.assert_allclose(_np(res.log_normalizer), log_z, rtol=1e-14)


def test_blocked_falls_back_to_the_scan_when_it_cannot_forget(xp, to64, monkeypatch):
    """The identity transition matrix never forgets the start: no sweep count passes the
    check, so both chains fall back to the exact scan, and the answer is still exact."""
    rng = np.random.default_rng(13)
    T, K = 2000, 3
    with np.errstate(divide="ignore"):
        log_A = np.log(np.eye(K))
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    log_lik = rng.normal(size=(T, K))
    calls = _count_scan_calls(monkeypatch)
    res = forward_backward(to64(log_pi), to64(log_A), to64(log_lik), method="blocked")
    assert len(calls) == 2
    post = log_pi + log_lik.sum(0)  # the state never changes: one draw, T observations
    post = np.exp(post - post.max())
    post /= post.sum()
    np.testing.assert_allclose(_np(res.marginals), np.broadcast_to(post, (T, K)), atol=1e-12)


def test_blocked_float32_log_normalizer(xp, to_xp, dtype):
    """The blocked solver adds its log scales in float64 even for float32 data: log Z of a
    long chain is as accurate as float32 can store it."""
    rng = np.random.default_rng(14)
    T = 20000
    log_pi, log_A, log_lik = random_hmm(rng, 4, T, scale=3.0)
    log_lik = log_lik - 5.0
    res = forward_backward(to_xp(log_pi), to_xp(log_A), to_xp(log_lik), method="blocked")
    # the reference on the inputs as the dtype holds them
    _, _, log_z = _extended_reference(*(_np(to_xp(a)).astype(np.float64)
                                        for a in (log_pi, log_A, log_lik)))
    eps = np.finfo(_np(res.log_normalizer).dtype).eps
    assert abs(float(_np(res.log_normalizer)) - log_z) <= 64 * eps * abs(log_z)


def test_auto_method_choice(xp, to64):
    """"auto" picks the blocked solver for long chains (and enough work over the batch) on a
    CPU namespace only."""
    import array_api_compat

    from gpnum.hmm._inference import _BLOCKED_MIN_STEPS, _BLOCKED_MIN_WORK, _auto_method

    short = to64(np.zeros((_BLOCKED_MIN_STEPS - 1, 2)))
    little = to64(np.zeros((_BLOCKED_MIN_STEPS, 2)))  # long enough, too little work
    long = to64(np.zeros((_BLOCKED_MIN_WORK, 2)))
    batched = to64(np.zeros((_BLOCKED_MIN_WORK // _BLOCKED_MIN_STEPS, _BLOCKED_MIN_STEPS, 2)))
    ns = array_api_compat.array_namespace(long)
    cpu = array_api_compat.is_numpy_namespace(ns) or (
        array_api_compat.is_torch_namespace(ns) and long.device.type == "cpu")
    assert _auto_method(ns, short) == "scan"
    assert _auto_method(ns, little) == "scan"
    assert _auto_method(ns, long) == ("blocked" if cpu else "scan")
    assert _auto_method(ns, batched) == ("blocked" if cpu else "scan")


# ------------------------------------------------------------------ the blocked Viterbi
def _path_score(log_pi, log_A, log_lik, path):
    """log-probability of one given path (independent of any Viterbi code)."""
    T = log_lik.shape[0]
    score = log_pi[path[0]] + log_lik[np.arange(T), path].sum()
    return score + log_A[path[:-1], path[1:]].sum()


def _count_viterbi_fallbacks(monkeypatch):
    from gpnum.hmm import _viterbi

    results = []
    blocked = _viterbi._viterbi_blocked

    def recording(*args, **kwargs):
        out = blocked(*args, **kwargs)
        results.append(out is not None)
        return out

    monkeypatch.setattr(_viterbi, "_viterbi_blocked", recording)
    return results


@pytest.mark.parametrize("T,block", [(1000, None), (3001, None), (200, 16), (201, 16), (37, 8)])
def test_blocked_viterbi_against_numpy(xp, dtype, to_xp, tol, T, block, monkeypatch):
    """Several blocks (with and without a padded last block), batched, different starts per
    chain: the same path as NumPy's textbook Viterbi, and the returned score is the score of
    that path, summed independently."""
    from gpnum.hmm import _viterbi

    rng = np.random.default_rng(T + 7)
    _, log_A, log_lik = random_hmm(rng, 4, T, batch=(3,), scale=2.0)
    log_pis = np.log(rng.dirichlet(np.ones(4), size=3))
    out = _viterbi._viterbi_blocked(xp, to_xp(log_pis), to_xp(log_A), to_xp(log_lik),
                                    block=block)
    assert out is not None  # a mixing chain: no fallback
    path, log_prob = (_np(a) for a in out)
    assert path.shape == (3, T) and log_prob.shape == (3,)
    for b in range(3):
        # the reference on the inputs as the dtype holds them
        pi_b, A_b, ll_b = (_np(to_xp(a)).astype(np.float64) for a in (log_pis[b], log_A,
                                                                       log_lik[b]))
        ref_path, ref_best = numpy_viterbi(pi_b, A_b, ll_b)
        np.testing.assert_allclose(log_prob[b], ref_best, rtol=20 * tol)
        if dtype == xp.float64:
            np.testing.assert_array_equal(path[b], ref_path)
            np.testing.assert_allclose(_path_score(pi_b, A_b, ll_b, path[b]), ref_best,
                                       rtol=1e-12)
        else:  # float32 may resolve a near-tie differently, at no loss of score
            assert np.mean(path[b] == ref_path) > 0.95
            assert _path_score(pi_b, A_b, ll_b, path[b]) >= ref_best - 1e-4 * abs(ref_best)


def test_blocked_viterbi_ties_and_forbidden_transitions(xp, to64):
    """Integer-valued scores (all sums exact, so exact ties everywhere) and -inf transitions
    (a cyclic left-to-right chain): the blocked path equals the textbook one, ties broken
    towards the lower state index at every step, in every block."""
    from gpnum.hmm import _viterbi

    rng = np.random.default_rng(21)
    K, T = 4, 777
    log_lik = rng.integers(-2, 1, size=(2, T, K)).astype(float)  # many exact ties
    log_A = rng.integers(-2, 0, size=(K, K)).astype(float)
    log_A[np.arange(K), (np.arange(K) + 2) % K] = -np.inf  # forbidden jumps
    log_pi = np.array([0.0, 0.0, -1.0, -np.inf])
    for block in (None, 16, 50):
        out = _viterbi._viterbi_blocked(xp, to64(log_pi), to64(log_A), to64(log_lik),
                                        block=block)
        assert out is not None
        for b in range(2):
            ref_path, ref_best = numpy_viterbi(log_pi, log_A, log_lik[b])
            np.testing.assert_array_equal(_np(out[0])[b], ref_path)
            assert _np(out[1])[b] == ref_best == _path_score(log_pi, log_A, log_lik[b],
                                                             ref_path)
    # brute force on a short chain with the same structure (several paths tie for the best,
    # and enumeration may return another of them): the scores must agree
    short = log_lik[0, :7]
    _, _, _, _, best = brute_force(log_pi, log_A, short)
    path, score = viterbi(to64(log_pi), to64(log_A), to64(short), method="blocked")
    assert _np(score) == best == _path_score(log_pi, log_A, short, _np(path))


def test_blocked_viterbi_falls_back_when_paths_never_merge(xp, to64, monkeypatch):
    """With the identity transition matrix the survivor paths never merge (every state keeps
    its own path): the speculation cannot be verified, the scan answers, exactly."""
    rng = np.random.default_rng(22)
    T, K = 3000, 3
    with np.errstate(divide="ignore"):
        log_A = np.log(np.eye(K))
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    log_lik = rng.normal(size=(T, K))
    results = _count_viterbi_fallbacks(monkeypatch)
    path, log_prob = viterbi(to64(log_pi), to64(log_A), to64(log_lik), method="blocked")
    assert results == [False]
    best = log_pi + log_lik.sum(0)
    np.testing.assert_array_equal(_np(path), np.full(T, np.argmax(best)))
    np.testing.assert_allclose(_np(log_prob), best.max(), rtol=1e-12)


def test_blocked_viterbi_sticky_chain_needs_sweeps(xp, to64, monkeypatch):
    """A sticky chain with weak evidence: survivor paths merge slowly (longer than the
    warm-up and some blocks), so guesses fail and further sweeps (or the scan) must still
    give the textbook path."""
    from gpnum.hmm import _viterbi

    rng = np.random.default_rng(23)
    T, K = 4000, 3
    A = np.full((K, K), 0.02 / (K - 1)) + np.eye(K) * (1.0 - 0.02 - 0.02 / (K - 1))
    log_A, log_pi = np.log(A), np.log(np.full(K, 1.0 / K))
    log_lik = 0.3 * rng.normal(size=(T, K))
    ref_path, ref_best = numpy_viterbi(log_pi, log_A, log_lik)
    for block in (None, 64):
        out = _viterbi._viterbi_blocked(xp, to64(log_pi), to64(log_A), to64(log_lik),
                                        block=block)
        if out is None:  # handed to the scan: still exact through the public function
            out = viterbi(to64(log_pi), to64(log_A), to64(log_lik), method="scan")
        np.testing.assert_array_equal(_np(out[0]), ref_path)
        np.testing.assert_allclose(_np(out[1]), ref_best, rtol=1e-12)


def test_viterbi_auto_uses_the_blocked_solver_on_long_chains(xp, to64, monkeypatch):
    rng = np.random.default_rng(24)
    log_pi, log_A, log_lik = random_hmm(rng, 3, 5000)
    results = _count_viterbi_fallbacks(monkeypatch)
    path, _ = viterbi(to64(log_pi), to64(log_A), to64(log_lik))
    import array_api_compat

    ns = array_api_compat.array_namespace(to64(log_lik))
    cpu = array_api_compat.is_numpy_namespace(ns) or (
        array_api_compat.is_torch_namespace(ns) and to64(log_lik).device.type == "cpu")
    assert results == ([True] if cpu else [])
    np.testing.assert_array_equal(_np(path), numpy_viterbi(log_pi, log_A, log_lik)[0])


def test_tiled_transpose_matches_the_transpose_on_every_backend(xp, dtype, device, to_xp):
    # the blocked Viterbi's lane layout: tiles of 7 over a (23, 17) matrix leave ragged edges
    from gpnum.hmm._viterbi import _transpose_tiled

    M = np.arange(23 * 17, dtype=np.float64).reshape(23, 17)
    out = _transpose_tiled(xp, to_xp(M), tile=7)
    assert out.shape == (17, 23) and out.dtype == dtype
    np.testing.assert_array_equal(B.to_numpy(out), M.T.astype(B.to_numpy(out).dtype))
