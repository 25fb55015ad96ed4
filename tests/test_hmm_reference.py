"""Independent NumPy references for the HMM tests (and checks of the references themselves).

Brute-force enumeration of all K^T paths for tiny chains, and a plain NumPy/SciPy log-space
forward-backward (no gpnum code) for longer ones.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import logsumexp


def brute_force(log_pi, log_A, log_lik, transition_weights=None):
    """Marginals (T, K), weighted pairwise sums (K, K), log Z, best path and its score by
    enumerating every path of one chain."""
    T, K = log_lik.shape
    paths = np.array(list(itertools.product(range(K), repeat=T)))  # (K^T, T)
    scores = log_pi[paths[:, 0]] + log_lik[np.arange(T)[None, :], paths].sum(axis=1)
    if T > 1:
        scores = scores + log_A[paths[:, :-1], paths[:, 1:]].sum(axis=1)
    log_z = logsumexp(scores)
    p = np.exp(scores - log_z)
    marg = np.zeros((T, K))
    for t in range(T):
        np.add.at(marg[t], paths[:, t], p)
    pair = np.zeros((K, K))
    w = np.ones(max(T - 1, 0)) if transition_weights is None else transition_weights
    for t in range(1, T):
        np.add.at(pair, (paths[:, t - 1], paths[:, t]), w[t - 1] * p)
    best = int(np.argmax(scores))
    return marg, pair, log_z, paths[best], scores[best]


def numpy_forward_backward(log_pi, log_A, log_lik):
    """Log-space forward-backward of one chain in NumPy/SciPy: marginals (T, K),
    per-step pairwise marginals (T-1, K, K), log Z."""
    T, K = log_lik.shape
    la = np.empty((T, K))
    lb = np.zeros((T, K))
    la[0] = log_pi + log_lik[0]
    for t in range(1, T):
        la[t] = logsumexp(la[t - 1][:, None] + log_A, axis=0) + log_lik[t]
    for t in range(T - 2, -1, -1):
        lb[t] = logsumexp(log_A + (log_lik[t + 1] + lb[t + 1])[None, :], axis=1)
    log_z = logsumexp(la[-1])
    marg = np.exp(la + lb - log_z)
    xi = np.exp(la[:-1, :, None] + log_A[None] + (log_lik[1:] + lb[1:])[:, None, :] - log_z)
    return marg, xi, log_z


def numpy_viterbi(log_pi, log_A, log_lik):
    """Textbook Viterbi of one chain in NumPy."""
    T, K = log_lik.shape
    delta = log_pi + log_lik[0]
    back = np.zeros((T, K), dtype=int)
    for t in range(1, T):
        s = delta[:, None] + log_A
        back[t] = np.argmax(s, axis=0)
        delta = s.max(axis=0) + log_lik[t]
    path = np.zeros(T, dtype=int)
    path[-1] = int(np.argmax(delta))
    for t in range(T - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path, delta.max()


def random_hmm(rng, K, T, batch=(), scale=2.0):
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    log_A = np.log(rng.dirichlet(np.ones(K), size=K))
    log_lik = scale * rng.normal(size=batch + (T, K))
    return log_pi, log_A, log_lik


def sample_chain(rng, A, pi, T):
    K = A.shape[0]
    x = np.empty(T, dtype=int)
    x[0] = rng.choice(K, p=pi)
    u = rng.random(T)
    cum = np.cumsum(A, axis=1)
    for t in range(1, T):
        x[t] = min(int(np.searchsorted(cum[x[t - 1]], u[t])), K - 1)
    return x


# --------------------------------------------------------- the references agree with each other
def test_numpy_reference_matches_brute_force():
    rng = np.random.default_rng(0)
    log_pi, log_A, log_lik = random_hmm(rng, 3, 5)
    marg, pair, log_z, path, best = brute_force(log_pi, log_A, log_lik)
    m2, xi, z2 = numpy_forward_backward(log_pi, log_A, log_lik)
    p2, b2 = numpy_viterbi(log_pi, log_A, log_lik)
    np.testing.assert_allclose(m2, marg, atol=1e-12)
    np.testing.assert_allclose(xi.sum(0), pair, atol=1e-12)
    np.testing.assert_allclose(z2, log_z, rtol=1e-12)
    np.testing.assert_array_equal(p2, path)
    np.testing.assert_allclose(b2, best, rtol=1e-12)
