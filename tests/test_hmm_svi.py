"""Stochastic VI over subchains: batch factors, buffers, and agreement with batch VB.

References: the whole chain's statistics from NumPy's log-space forward-backward (test_hmm_
reference); exact counts (T emissions, T - 1 transitions, one initial state); one batch VB
iteration (for the SVI step with one subchain covering the chain and rho = 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_hmm_reference import numpy_forward_backward, sample_chain

from gpnum import backend as B
from gpnum.hmm import CategoricalHMM, GaussianHMM


def _np(a):
    return B.to_numpy(a)


def _sticky(rng, T, stay=0.97, K=2, D=1, sep=1.5):
    A = np.full((K, K), (1.0 - stay) / (K - 1))
    np.fill_diagonal(A, stay)
    x = sample_chain(rng, A, np.full(K, 1.0 / K), T)
    mu = sep * np.arange(K)[:, None] * np.ones((1, D))
    return mu[x] + rng.normal(size=(T, D)), x


def _whole_chain_statistics(model, Y):
    """The whole chain's sufficient statistics from the NumPy reference forward-backward under
    the model's current expected log parameters (natural coordinates of the Gaussian family)."""
    log_pi, log_A = (_np(a) for a in model._expected_log_params())
    ell = _np(model._expected_log_lik(Y))
    marg, xi, _ = numpy_forward_backward(log_pi, log_A, ell)
    Yn = _np(Y)
    return {"pi": marg[0], "A": xi.sum(0), "kappa": marg.sum(0), "h": marg.T @ Yn,
            "Q": np.einsum("tk,ti,tj->kij", marg, Yn, Yn), "nu": marg.sum(0)}


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_svi_one_subchain_covering_chain_equals_one_vb_iteration(xp, dtype, to_xp, tol,
                                                                 covariance):
    rng = np.random.default_rng(21)
    Y, _ = _sticky(rng, 60, K=3, D=2, sep=2.0)
    Yx = to_xp(Y)
    batch = GaussianHMM(3, 2, covariance=covariance, seed=4)
    batch.fit(Yx, max_iter=2)  # a non-trivial starting posterior
    svi = GaussianHMM(3, 2, covariance=covariance, seed=4)
    svi.initialize(Yx)
    svi.posterior_ = dict(batch.posterior_)
    batch.fit(Yx, method="vb", max_iter=1, warm_start=True)
    # tau = 0, t = 1: rho_1 = 1 whatever kappa
    svi.fit(Yx, method="svi", subchain_length=60, num_subchains=1, buffer=None, steps=1,
            tau=0.0, kappa=0.7, warm_start=True)
    for key in batch.posterior_:
        np.testing.assert_allclose(_np(svi.posterior_[key]), _np(batch.posterior_[key]),
                                   rtol=100 * tol, atol=100 * tol, err_msg=key)


def test_categorical_svi_one_subchain_equals_one_vb_iteration(xp, to64):
    rng = np.random.default_rng(22)
    Y = rng.integers(0, 4, size=40)
    batch = CategoricalHMM(2, 4, seed=1, dtype="float64")
    svi = CategoricalHMM(2, 4, seed=1, dtype="float64")
    batch.fit(to64(Y), max_iter=1)
    svi.initialize(to64(Y))
    svi.posterior_ = dict(batch.posterior_)
    batch.fit(to64(Y), max_iter=1, warm_start=True)
    svi.fit(to64(Y), method="svi", subchain_length=40, num_subchains=1, buffer=0, steps=1,
            tau=0.0, warm_start=True)
    for key in batch.posterior_:
        np.testing.assert_allclose(_np(svi.posterior_[key]), _np(batch.posterior_[key]),
                                   rtol=1e-12, err_msg=key)


@pytest.mark.parametrize("L", [2, 5, 17, 40])
def test_scaled_statistics_unbiased_over_all_subchains(xp, to64, L):
    """With a buffer covering the chain every subchain's marginals are the whole chain's, so
    the batch factors alone decide: the average of the scaled statistics over ALL T - L + 1
    subchains (one call with every start, S = T - L + 1) must equal the whole chain's
    statistics, ends included."""
    rng = np.random.default_rng(23)
    T = 40
    Y, _ = _sticky(rng, T, K=2, D=2)
    Yx = to64(Y)
    model = GaussianHMM(2, 2, seed=0)
    model.fit(Yx, max_iter=3)
    starts = to64(np.arange(T - L + 1))
    stats, _ = model._subchain_statistics(Yx, starts, L, T)
    reference = _whole_chain_statistics(model, Yx)
    for key, value in reference.items():
        np.testing.assert_allclose(_np(stats[key]), value, rtol=1e-10, atol=1e-10, err_msg=key)


@pytest.mark.parametrize("buffer", [0, 3])
def test_scaled_counts_exact_without_full_buffer(xp, to64, buffer):
    """Whatever the local marginals, averaged over all subchains the scaled counts are exact:
    T emissions, T - 1 transitions, one initial state."""
    rng = np.random.default_rng(24)
    T, L = 50, 6
    Y, _ = _sticky(rng, T, K=3, D=1)
    Yx = to64(Y)
    model = GaussianHMM(3, 1, seed=0)
    model.fit(Yx, max_iter=2)
    stats, _ = model._subchain_statistics(Yx, to64(np.arange(T - L + 1)), L,
                                          buffer)
    np.testing.assert_allclose(float(_np(stats["kappa"]).sum()), T, rtol=1e-12)
    np.testing.assert_allclose(float(_np(stats["A"]).sum()), T - 1, rtol=1e-12)
    np.testing.assert_allclose(float(_np(stats["pi"]).sum()), 1.0, rtol=1e-12)


def test_growbuf_reduces_transition_bias_on_sticky_chain():
    """Short subchains of a sticky chain with overlapping emissions: without a buffer the
    local marginals see too little context and the expected transition counts (averaged over
    all subchains) are biased towards switching; GrowBuf removes most of that bias."""
    rng = np.random.default_rng(25)
    T, L = 600, 4
    Y, _ = _sticky(rng, T, stay=0.98, K=2, D=1, sep=1.5)
    model = GaussianHMM(2, 1, seed=0)
    model.fit(Y, max_iter=50)
    reference = _whole_chain_statistics(model, Y)["A"]
    starts = np.arange(T - L + 1)
    none, _ = model._subchain_statistics(Y, starts, L, 0)
    grown, b = model._subchain_statistics(Y, starts, L, "grow", grow_step=4, grow_tol=1e-4)
    bias_none = np.abs(none["A"] - reference).sum()
    bias_grow = np.abs(grown["A"] - reference).sum()
    assert b > 0
    assert bias_grow < 0.2 * bias_none, (bias_none, bias_grow)
    # the off-diagonal (switch) counts are what the missing context inflates
    off = ~np.eye(2, dtype=bool)
    assert none["A"][off].sum() > reference[off].sum()


@pytest.mark.parametrize("buffer", ["grow", 0])
def test_svi_reaches_batch_elbo(buffer):
    """NumPy only (the other backends run the same code in the tests above)."""
    rng = np.random.default_rng(26)
    Y, x = _sticky(rng, 3000, stay=0.95, K=3, D=2, sep=3.0)
    Yx = Y
    batch = GaussianHMM(3, 2, seed=0)
    h_vb = batch.fit(Yx, max_iter=100)
    svi = GaussianHMM(3, 2, seed=0)
    h_svi = svi.fit(Yx, method="svi", subchain_length=30, num_subchains=10, buffer=buffer,
                    steps=150, tau=1.0, kappa=0.6, eval_every=50)
    assert len(h_svi["elbo"]) == 3 and h_svi["step"] == [50, 100, 150]
    assert abs(h_svi["elbo"][-1] - h_vb["elbo"][-1]) < 0.01 * abs(h_vb["elbo"][-1])


def test_svi_argument_errors():
    Y = np.random.default_rng(0).normal(size=(20, 1))
    model = GaussianHMM(2, 1)
    with pytest.raises(ValueError, match="buffer"):
        model.fit(Y, method="svi", subchain_length=5, buffer="big")
    with pytest.raises(ValueError, match="buffer"):
        model.fit(Y, method="svi", subchain_length=5, buffer=-1)
    with pytest.raises(ValueError, match="num_subchains"):
        model.fit(Y, method="svi", subchain_length=5, num_subchains=0)
    with pytest.raises(ValueError, match="subchain_length"):
        model.fit(Y, method="svi", subchain_length=1)


def test_svi_step_sizes_and_interpolation(xp, to64):
    """Two SVI steps against the update written out: rho_t = (t + tau)^-kappa and
    w_t = (1 - rho_t) w_{t-1} + rho_t (prior + scaled statistics), with the same subchain draws
    (the model's generator: gpnum.backend.default_rng(seed).integers)."""
    from gpnum.backend import default_rng, device_of

    rng = np.random.default_rng(27)
    Y, _ = _sticky(rng, 80, K=2, D=1)
    Yx = to64(Y)
    L, S, tau, kappa, seed = 10, 3, 2.0, 0.7, 5
    model = GaussianHMM(2, 1, seed=0)
    model.fit(Yx, max_iter=2)
    start = {k: _np(v) for k, v in model.posterior_.items()}
    manual = GaussianHMM(2, 1, seed=0)
    manual.initialize(Yx)
    manual.posterior_ = dict(model.posterior_)
    model.fit(Yx, method="svi", subchain_length=L, num_subchains=S, buffer=2, steps=2, tau=tau,
              kappa=kappa, seed=seed, warm_start=True)
    draws = default_rng(seed, xp=xp, device=device_of(Yx))
    w = start
    prior = {k: _np(v) for k, v in manual.prior_.items()}
    for t in (1, 2):
        starts = draws.integers(0, 80 - L + 1, (S,))
        stats, _ = manual._subchain_statistics(Yx, starts, L, 2)
        rho = (t + tau) ** (-kappa)
        w = {k: (1.0 - rho) * w[k] + rho * (prior[k] + _np(stats[k])) for k in w}
        manual.posterior_ = {k: to64(v) for k, v in w.items()}
    for key in w:
        np.testing.assert_allclose(_np(model.posterior_[key]), w[key], rtol=1e-12, err_msg=key)


def _reference_subchain_statistics(model, Y, starts, L, buffer, grow_step=None, grow_tol=1e-3,
                                   max_buffer=None):
    """The scaled statistics written out per subchain with NumPy's log-space forward-backward
    on the buffered window ``s - min(b, s) .. e + min(b, T - 1 - e)`` (a buffer stops at the
    chain's ends), started from q(pi) where it reaches the chain's start and from the
    stationary distribution of the expected transition matrix elsewhere; GrowBuf as rounds
    b = 0, g, 2g, ... until the interior marginals of all subchains move by < grow_tol."""
    log_pi0, log_A = (_np(a) for a in model._expected_log_params())
    A = np.exp(log_A)
    A /= A.sum(1, keepdims=True)
    w, v = np.linalg.eig(A.T)
    stat = np.real(v[:, np.argmin(np.abs(w - 1.0))])
    stat /= stat.sum()
    ell = _np(model._expected_log_lik(Y))
    Yn = _np(Y)
    T = len(Yn)
    starts = _np(starts).astype(int)
    S = len(starts)

    def interiors(b):
        out = []
        for s in starts:
            lo, hi = s - min(b, s), s + L - 1 + min(b, T - L - s)
            marg, xi, _ = numpy_forward_backward(log_pi0 if lo == 0 else np.log(stat), log_A,
                                                 ell[lo:hi + 1])
            out.append((marg[s - lo:s - lo + L], xi[s - lo:s - lo + L - 1]))
        return out

    cover = max(starts.max(), T - L - starts.min())
    if max_buffer is not None:
        cover = min(cover, max_buffer)
    if buffer == "grow":
        g = max(1, L // 4) if grow_step is None else grow_step
        b, post = 0, interiors(0)
        while b < cover:
            b = min(b + g, cover)
            new = interiors(b)
            change = max(np.abs(n[0] - o[0]).max() for n, o in zip(new, post, strict=False))
            post = new
            if change < grow_tol:
                break
    else:
        b, post = min(buffer, cover), interiors(buffer)
    n_starts = T - L + 1
    stats = {"pi": np.zeros(model.num_states), "A": 0.0, "kappa": 0.0, "h": 0.0, "Q": 0.0,
             "nu": 0.0}
    for s, (marg, xi) in zip(starts, post, strict=False):
        t = np.arange(s, s + L)
        c_e = np.minimum(t, T - L) - np.maximum(0, t - L + 1) + 1
        c_a = np.minimum(t[1:] - 1, T - L) - np.maximum(0, t[1:] - L + 1) + 1
        g = marg * (n_starts / (S * c_e))[:, None]
        if s == 0:
            stats["pi"] = stats["pi"] + marg[0] * n_starts / S
        stats["A"] = stats["A"] + np.einsum("t,tij->ij", n_starts / (S * c_a), xi)
        stats["kappa"] = stats["kappa"] + g.sum(0)
        stats["nu"] = stats["nu"] + g.sum(0)
        stats["h"] = stats["h"] + g.T @ Yn[t]
        stats["Q"] = stats["Q"] + np.einsum("tk,ti,tj->kij", g, Yn[t], Yn[t])
    return stats, b


def _short_fitted_chain(to64, seed, T):
    """A sticky 3-state chain of ``T`` steps (as the backend's float64) and a GaussianHMM
    fitted to it by three VB iterations."""
    Y, _ = _sticky(np.random.default_rng(seed), T, stay=0.95, K=3, D=2, sep=1.2)
    Yx = to64(Y)
    model = GaussianHMM(3, 2, seed=0)
    model.fit(Yx, max_iter=3)
    return Yx, model


@pytest.mark.parametrize("rescale", ["bound", "every 2 steps"])
@pytest.mark.parametrize("where", ["ends", "inside"])
@pytest.mark.parametrize("buffer", [0, 3, 11, "grow"])
def test_subchain_statistics_against_per_window_forward_backward(xp, to64, buffer, where,
                                                                 rescale, monkeypatch):
    """Every subchain's local step (transfer matrices for the buffers and the interior, all
    GrowBuf rounds scored at once) against the textbook per-window forward-backward, with
    starts at both ends of the chain (buffers cut there) and in between, or only well inside
    it (the first rounds' windows need no clipping and no buffer starts from q(pi)); with
    the products rescaled at the interval their range allows (beyond the interior here: the
    pairs' normalisers are the marginals') or every 2 steps (within it: computed apart); then
    the same with the interior run as a forward-backward (the long-subchain path) instead of
    matrices."""
    from gpnum.hmm import _subchains

    if rescale != "bound":
        monkeypatch.setattr(_subchains, "_rescale_interval", lambda xp, A: 2)
    T, L = 120, 8
    Yx, model = _short_fitted_chain(to64, 31, T)
    starts = (np.array([0, 1, 5, 37, 60, 100, 110, T - L - 1, T - L]) if where == "ends"
              else np.array([37, 44, 60, 70]))
    reference, b_ref = _reference_subchain_statistics(model, Yx, starts, L, buffer,
                                                      grow_step=2, grow_tol=1e-4)
    for entries in (_subchains._TRANSFER_MAX_ENTRIES, 0):
        monkeypatch.setattr(_subchains, "_TRANSFER_MAX_ENTRIES", entries)
        stats, b = model._subchain_statistics(Yx, to64(starts), L, buffer, grow_step=2,
                                              grow_tol=1e-4)
        assert b == b_ref
        if buffer == "grow":
            assert b > 2  # several rounds, beyond the first transfer loop when entries = 0
        for key, value in reference.items():
            np.testing.assert_allclose(_np(stats[key]), value, rtol=1e-10, atol=1e-10,
                                       err_msg=f"{key}, interior matrices up to {entries}")


@pytest.mark.parametrize("expected", ["none", "first round", "round before", "accepted",
                                      "beyond"])
def test_growbuf_expected_buffer_changes_nothing(xp, to64, expected):
    """GrowBuf told which buffer to expect (the rounds up to it scored first, the later ones
    of the same transfer loop only if none of those is accepted; "round before": the
    accepted round is the first of the second batch, its change taken from the first
    batch's last round) against the textbook per-window forward-backward."""
    T, L, g = 120, 8, 2
    Yx, model = _short_fitted_chain(to64, 33, T)
    starts = np.array([0, 9, 37, 60, 100, T - L])
    reference, b_ref = _reference_subchain_statistics(model, Yx, starts, L, "grow",
                                                      grow_step=g, grow_tol=1e-4)
    # within the first transfer loop (L - 1 steps), beyond its first two rounds
    assert 2 * g <= b_ref <= L - 1
    hint = {"none": None, "first round": 0, "round before": b_ref - g, "accepted": b_ref,
            "beyond": 1000}[expected]
    stats, b = model._subchain_statistics(Yx, to64(starts), L, "grow", grow_step=g,
                                          grow_tol=1e-4, expected_buffer=hint)
    assert b == b_ref
    for key, value in reference.items():
        np.testing.assert_allclose(_np(stats[key]), value, rtol=1e-10, atol=1e-10, err_msg=key)


def test_growbuf_rounds_not_evenly_spaced(xp, to64):
    """GrowBuf's rounds b = 0, 2, 4 and the cap 5 (not on the grid), none accepted before the
    cap, scored in one batch (their products gathered, not sliced at a stride) with no buffer
    reaching a chain end, against the textbook per-window forward-backward."""
    T, L = 120, 8
    Yx, model = _short_fitted_chain(to64, 34, T)
    starts = np.array([37, 44, 60, 70])
    reference, b_ref = _reference_subchain_statistics(model, Yx, starts, L, "grow", grow_step=2,
                                                      grow_tol=1e-300, max_buffer=5)
    stats, b = model._subchain_statistics(Yx, to64(starts), L, "grow", grow_step=2,
                                          grow_tol=1e-300, max_buffer=5)
    assert b == b_ref == 5
    for key, value in reference.items():
        np.testing.assert_allclose(_np(stats[key]), value, rtol=1e-10, atol=1e-10, err_msg=key)


def test_subchain_statistics_float32_long_buffers_stay_in_range(xp, to_xp, dtype):
    """Transfer products over long buffers (rescaled only every few steps) on a sticky chain
    with well-separated states (likelihood ratios of e^-50 per step): float32 and float64
    agree with the float64 reference to their precision."""
    rng = np.random.default_rng(32)
    T, L = 400, 4
    Y, _ = _sticky(rng, T, stay=0.99, K=2, D=1, sep=10.0)
    model = GaussianHMM(2, 1, seed=0)
    model.fit(Y, max_iter=20)
    Yx = to_xp(Y)
    model32 = GaussianHMM(2, 1, seed=0)
    model32.initialize(Yx)
    model32.posterior_ = {k: to_xp(np.array(_np(v))) for k, v in model.posterior_.items()}
    model32.prior_ = {k: to_xp(np.array(_np(v))) for k, v in model.prior_.items()}
    starts = np.array([0, 150, 300, T - L])
    reference, _ = _reference_subchain_statistics(model, Y, starts, L, 150)
    stats, b = model32._subchain_statistics(Yx, to_xp(starts, dtype=None), L, 150)
    assert b == 150
    rtol = 1e-3 if dtype == xp.float32 else 1e-9
    for key, value in reference.items():
        np.testing.assert_allclose(_np(stats[key]), value, rtol=rtol,
                                   atol=rtol * np.abs(value).max(), err_msg=key)
