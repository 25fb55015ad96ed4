"""Local step of SVI for HMMs: subchain marginals under buffers of any length, from transfer
matrices (Foti, Xu, Laird & Fox 2014, Algorithms 1-2; seed 003).

A subchain ``s .. e`` (``e = s + L - 1``) with a buffer of ``b`` steps on each side is the
chain cut to ``s - b_l .. e + b_r``, ``b_l = min(b, s)``, ``b_r = min(b, T - 1 - e)`` (a buffer
stops at the chain's ends), started from ``q(pi)`` when it reaches the chain's start and from the
stationary distribution of the expected transition matrix otherwise. Its interior marginals
depend on the buffers only through two vectors: the forward message entering ``s`` and the
backward message leaving ``e``. Both are products of per-step matrices ``diag(l_t) A`` that grow
outwards from the subchain, so one loop over ``n`` steps yields them for every buffer length up
to ``n`` at once, and with the interior's own prefix products (the same loop) the marginals of
any buffer length are a few array operations. GrowBuf's rounds (``b = 0, g, 2g, ...`` until the
interior marginals move by less than its tolerance) then cost one loop of ``max(L - 1, b)``
steps per SVI step instead of a forward-backward over ``L + 2 b`` steps per round, and all the
rounds are scored in one batch with one synchronisation.

Every loop step is one row scaling and one GEMM ``(K, K) @ (K, K S)`` per sequence on the
transposed products of the ``S`` subchains (rescaled only every few steps: only the marginals
are needed, not the normaliser).
"""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace
from gpnum.hmm._inference import _finite_or_zero, _row_max, _safe_log, forward_backward

__all__ = ["SubchainPosterior", "subchain_posterior"]

#: Interior transfer matrices are kept for subchains with ``L S K^2`` at most this many
#: entries (16 MiB in float64); longer subchains run a forward-backward of the interiors per
#: buffer length instead (same result; measured slower at L = 100, S = 10, K = 5 even for a
#: single buffer length: 5.9 against 4.3 ms a step).
_TRANSFER_MAX_ENTRIES = 2 ** 21


class SubchainPosterior:
    """Interior posterior of ``S`` subchains.

    Attributes
    ----------
    marginals : array (S, L, K)
        ``q(x_t)`` for ``t = s + 0 .. s + L - 1`` of each subchain.
    pairwise : array (K, K)
        ``sum_{t, subchains} w_t q(x_{t-1}, x_t)`` over the interior pairs, ``w`` the given
        transition weights.
    buffer : int
        The buffer length used.
    """

    def __init__(self, marginals, pairwise, buffer):
        self.marginals = marginals
        self.pairwise = pairwise
        self.buffer = buffer


def _transfer_products(xp, M, steps, every=1):
    """Transposed transfer products ``Z_k = V_k^T``: ``V_0 = I``, ``V_{k+1} = V_k diag(d_k)
    M_p``, that is ``Z_{k+1} = M_p^T diag(d_k) Z_k``, for every stacked sequence.

    The products of the ``S`` subchains are stored side by side, subchain index last, so that
    a step is a row scaling over contiguous rows of ``S`` and one GEMM ``(K, K) @ (K, K S)``
    per sequence (NumPy broadcasts over a short last axis several times slower).

    Parameters
    ----------
    M : array (P, K, K)
        One step matrix per sequence.
    steps : array (P, K, n, S)
        The row scales ``d_k`` (likelihoods, maximum 1 per step) of each sequence.
    every : int
        Rescale the products to sum one every this many steps (a product's scale is
        irrelevant to its users; the caller picks ``every`` so that nothing can under- or
        overflow in between).

    Returns
    -------
    array (n + 1, P, K, K, S)
        ``Z_k[p, j, i, s] = V_k[p, s][i, j]``, each up to a positive factor.
    """
    P, K, n, S = steps.shape
    dev, dtype = device_of(steps), steps.dtype
    MT = xp.matrix_transpose(M)
    products = xp.empty((n + 1, P, K, K, S), dtype=dtype, device=dev)
    Z = xp.broadcast_to((xp.eye(K, dtype=dtype, device=dev) / K)[:, :, None], (P, K, K, S))
    products[0, ...] = Z
    for k in range(n):
        Z = xp.reshape(xp.matmul(MT, xp.reshape(Z * steps[:, :, k:k + 1, :], (P, K, K * S))),
                       (P, K, K, S))
        if (k + 1) % every == 0:
            total = xp.sum(Z, axis=(1, 2))  # (P, S)
            Z = Z / xp.where(total > 0.0, total, xp.ones_like(total))[:, None, None, :]
        products[k + 1, ...] = Z
    return products


def _rescale_interval(xp, A):
    """Steps between rescalings of transfer products with step matrices ``diag(l) A`` (max
    ``l`` = 1, largest entry of ``A`` 1): a step multiplies a product's sum by at most ``K``
    and, once the product has taken a step, by at least ``a / K`` with ``a = min A`` (the
    likeliest state receives at least that share of every row). ``m`` steps stay in range
    while ``(a / K)^m`` and ``K^m`` do. One synchronisation."""
    K = max(A.shape[-1], 2)
    finfo = xp.finfo(A.dtype)
    a = float(xp.min(A))
    if not a > 0.0:
        return 1
    # Keep the factors above sqrt(smallest normal) and below sqrt(max).
    m = min(math.log(finfo.smallest_normal) / (2.0 * math.log(a / K)),
            math.log(finfo.max) / (2.0 * math.log(K)))
    return max(1, min(16, int(m)))


def _normalised(xp, u):
    total = xp.sum(u, axis=-1, keepdims=True)
    return u / xp.where(total > 0.0, total, xp.ones_like(total))


def subchain_posterior(pi0, stationary, A, log_lik_of, Y, starts, L, buffer, *,
                       transition_weights, grow_step=1, grow_tol=1e-3, max_buffer=None):
    """Interior marginals and weighted pairwise sums of ``S`` buffered subchains.

    Parameters
    ----------
    pi0 : array (K,)
        Start weights (any positive scale) of a buffer that reaches the chain's start.
    stationary : array (K,)
        Start distribution of one that does not.
    A : array (K, K)
        Transition weights ``exp(E log A)`` up to one global factor, scaled so that the
        largest entry is 1.
    log_lik_of : callable
        ``Y[rows] (N, ...) -> (N, K)`` expected log likelihoods.
    Y : array (T, ...)
        The chain.
    starts : array (S,)
        Subchain starts (integers, ``0 <= s <= T - L``).
    L : int
        Subchain length.
    buffer : int or "grow"
        A fixed buffer length, or GrowBuf: ``b = 0, g, 2 g, ...`` (``g = grow_step``, at most
        ``max_buffer``) until the interior marginals change by less than ``grow_tol``
        (maximum absolute change) from one round to the next, or every buffer reaches both
        ends of the chain.
    transition_weights : array (S, L - 1)
        Weight of each interior pair ``(t - 1, t)``, ``t = s + 1 .. e``, in ``pairwise``.

    Returns
    -------
    SubchainPosterior
    """
    xp = get_namespace(starts)
    T = Y.shape[0]
    S = starts.shape[0]
    K = A.shape[-1]
    # The largest buffer any subchain can use (beyond it every buffer is cut at both ends).
    cover = int(xp.max(xp.stack([xp.max(starts), (T - L) - xp.min(starts)])))
    if buffer == "grow":
        limit = cover if max_buffer is None else min(cover, max_buffer)
        rounds = list(range(0, limit, grow_step)) + [limit]
    else:
        rounds = [min(int(buffer), cover)]
    interior_matrices = L * S * K * K <= _TRANSFER_MAX_ENTRIES
    ctx = _Context(xp, pi0, stationary, A, log_lik_of, Y, starts, L, transition_weights,
                   grow_tol, interior_matrices)
    scored, previous = 0, None
    n = rounds[min(1, len(rounds) - 1)]
    while True:
        if interior_matrices:
            n = max(n, L - 1)
        usable = [b for b in rounds[scored:] if b <= n]
        final = scored + len(usable) == len(rounds)
        post, previous = ctx.score(n, usable, previous, final)
        if post is not None:
            return post
        scored += len(usable)
        n = min(max(2 * n, rounds[scored]), rounds[-1])


class _Context:
    """What every scoring pass of one SVI step's subchains shares."""

    def __init__(self, xp, pi0, stationary, A, log_lik_of, Y, starts, L, transition_weights,
                 grow_tol, interior_matrices):
        self.xp, self.A, self.log_lik_of, self.Y, self.starts, self.L = (
            xp, A, log_lik_of, Y, starts, L)
        self.weights, self.grow_tol = transition_weights, grow_tol
        self.interior_matrices = interior_matrices
        # The boundary vectors are normalised, so the start weights' scale is irrelevant.
        self.pi0, self.stationary = pi0, stationary
        self.every = _rescale_interval(xp, A)

    def score(self, n, rounds, previous, final):
        """Score the buffer lengths ``rounds`` (each <= n) from one transfer loop of ``n``
        steps, after the marginals ``previous`` of the round before them (None for the
        first). Returns ``(posterior, None)`` when a round is accepted (its change below the
        tolerance, or the last round of all when ``final``), else ``(None, marginals of the
        last round)``."""
        xp, L, A, starts = self.xp, self.L, self.A, self.starts
        T = self.Y.shape[0]
        S = starts.shape[0]
        K = A.shape[-1]
        dev = device_of(starts)
        W = L + 2 * n
        # The window s - n .. e + n of every subchain, clipped at the chain's ends (clipped
        # rows are never used: a buffer stops at the ends).
        offsets = xp.arange(W, dtype=starts.dtype, device=dev) - n
        position = starts[:, None] + offsets[None, :]  # (S, W)
        zero = xp.zeros((), dtype=position.dtype, device=dev)
        end = xp.full((), T - 1, dtype=position.dtype, device=dev)
        position = xp.where(position < zero, zero, xp.where(position > end, end, position))
        ll = xp.reshape(self.log_lik_of(xp.take(self.Y, xp.reshape(position, (-1,)), axis=0)),
                        (S, W, K))
        shift = _finite_or_zero(xp, _row_max(xp, ll))
        lik = xp.exp(ll - shift[..., None])  # (S, W, K), maximum 1 per step
        lik_t = xp.permute_dims(lik, (2, 1, 0))  # (K, W, S)
        ones = xp.ones((K, 1, S), dtype=lik.dtype, device=dev)
        # Outward sequences: the left buffer (A^T, from s - 1 down) and the right buffer (A,
        # from e + 1 up), whose first step has no likelihood (it enters the boundary vector
        # below); with interior matrices also the interior forward (A, from s up) and
        # backward (A^T, from e down).
        AT = xp.matrix_transpose(A)
        seqs = [xp.concat([ones, xp.flip(lik_t[:, 1:n, :], axis=1)], axis=1)[:, :n, :],
                xp.concat([ones, lik_t[:, n + L:2 * n + L - 1, :]], axis=1)[:, :n, :]]
        mats = [AT, A]
        if self.interior_matrices:
            seqs += [lik_t[:, n:2 * n, :], xp.flip(lik_t[:, L:n + L, :], axis=1)]
            mats += [A, AT]
        out = _transfer_products(xp, xp.stack(mats), xp.stack(seqs), self.every)
        # out: (n + 1, P, K, K, S)

        # The boundary vectors for every buffer length b <= n: V_b x_b with x_b the
        # likelihood of the buffer's last step (none for b = 0), then one gather per round
        # (R) and subchain.
        bs = xp.arange(n + 1, dtype=starts.dtype, device=dev)
        x = xp.concat([ones, xp.flip(lik_t[:, :n, :], axis=1)], axis=1)  # (K, n + 1, S)
        # A buffer of b = s steps starts at the chain's start: from q(pi) there.
        at_start = (bs[:, None] == starts[None, :])[None, ...]
        x = x * xp.where(at_start, self.pi0[:, None, None], self.stationary[:, None, None])
        left = xp.sum(out[:, 0, ...] * xp.permute_dims(x, (1, 0, 2))[:, :, None, :], axis=1)
        x = xp.concat([ones, lik_t[:, n + L:2 * n + L, :]], axis=1)
        right = xp.sum(out[:, 1, ...] * xp.permute_dims(x, (1, 0, 2))[:, :, None, :], axis=1)
        R = len(rounds)
        rb = xp.asarray(rounds, dtype=starts.dtype, device=dev)[:, None, None]
        i_s = (xp.arange(K, dtype=starts.dtype, device=dev)[None, None, :] * S
               + xp.arange(S, dtype=starts.dtype, device=dev)[None, :, None])  # (1, S, K)
        bl = xp.minimum(rb, starts[None, :, None])  # each buffer stops at the chain's ends
        br = xp.minimum(rb, (T - L) - starts[None, :, None])
        v = xp.take(xp.reshape(left, (-1,)), xp.reshape(bl * (K * S) + i_s, (-1,)), axis=0)
        v = _normalised(xp, xp.reshape(v, (R, S, K)))  # pred_s
        beta_e = xp.take(xp.reshape(right, (-1,)), xp.reshape(br * (K * S) + i_s, (-1,)),
                         axis=0)
        beta_e = _normalised(xp, xp.reshape(beta_e, (R, S, K)))  # beta_e

        if self.interior_matrices:
            # Layout (S, R, K, L): the sums over states then run over contiguous rows of L
            # (NumPy's reductions and broadcasts over a last axis of K are several times
            # slower).
            lik_int = xp.permute_dims(lik[:, n:n + L, :], (0, 2, 1))  # (S, K, L)

            def along(x, side):
                """``x^T V_k`` for k < L, one GEMM per subchain: (S, R, K, L)."""
                V = xp.reshape(xp.permute_dims(out[:L, side, ...], (3, 2, 1, 0)), (S, K, K * L))
                return xp.reshape(xp.matmul(xp.permute_dims(x, (1, 0, 2)), V), (S, R, K, L))

            pred = along(v, 2)
            beta = xp.flip(along(beta_e, 3), axis=-1)
            gamma = pred * lik_int[:, None, ...] * beta
            z = xp.sum(gamma, axis=-2)  # (S, R, L)
            gamma = gamma / xp.where(z > 0.0, z, xp.ones_like(z))[:, :, None, :]
            changes = []
            if previous is not None:
                changes.append(xp.max(xp.abs(gamma[:, 0, ...] - previous)))
            if R > 1:
                steps_r = xp.max(xp.abs(gamma[:, 1:, ...] - gamma[:, :R - 1, ...]), axis=(0, 2, 3))
                changes += [steps_r[r] for r in range(R - 1)]
            ok = xp.astype(xp.all(z > 0.0) & xp.all(xp.isfinite(z)), gamma.dtype)
            flags = [float(f) for f in xp.stack(changes + [ok])]  # one synchronisation
            if flags[-1] > 0.0:
                if previous is None:
                    flags = [math.inf] + flags
                r = self._accepted(flags[:-1], final)
                if r is None:
                    return None, gamma[:, R - 1, ...]
                marginals = xp.permute_dims(gamma[:, r, ...], (0, 2, 1))  # (S, L, K)
                return SubchainPosterior(marginals, self._pairwise(pred[:, r, ...], lik_int,
                                                                   beta[:, r, ...]),
                                         rounds[r]), None
        # Long subchains (and any degenerate product above): an exact forward-backward of
        # each round's interior, the buffers folded into its first and last step.
        ll_int = ll[:, n:n + L, :]
        for r in range(R):
            post = self._interior_forward_backward(v[r, ...], ll_int, beta_e[r, ...], rounds[r])
            change = (None if previous is None else float(xp.max(xp.abs(
                xp.permute_dims(post.marginals, (0, 2, 1)) - previous))))
            if (change is not None and change < self.grow_tol) or (final and r == R - 1):
                return post, None
            previous = xp.permute_dims(post.marginals, (0, 2, 1))
        return None, previous

    def _accepted(self, changes, final):
        """Index of the first accepted round: its change below the tolerance, else the last
        when ``final``, else None."""
        for r, change in enumerate(changes):
            if change < self.grow_tol:
                return r
        return len(changes) - 1 if final else None

    def _pairwise(self, pred, lik, beta):
        """``sum w_t xi_t`` over the interior pairs: ``xi_t(i, j) = a_{t-1}(i) A_ij b_t(j) /
        (a_{t-1}^T A b_t)`` with ``a = pred * lik``, ``b = lik * beta`` (S, K, L)."""
        xp, A = self.xp, self.A
        S, K, L = pred.shape
        N = S * (L - 1)

        def states_first(x):  # (S, K, L - 1) -> (K, S (L - 1)): the sums below are GEMMs
            return xp.reshape(xp.permute_dims(x, (1, 0, 2)), (K, N))

        a_prev = states_first(pred[..., :L - 1] * lik[..., :L - 1])
        b_next = states_first(lik[..., 1:] * beta[..., 1:])
        norm = xp.sum(xp.matmul(xp.matrix_transpose(A), a_prev) * b_next, axis=0)  # (N,)
        coef = xp.reshape(self.weights, (N,)) / xp.where(norm > 0.0, norm, xp.ones_like(norm))
        return A * xp.matmul(a_prev * coef[None, :], xp.matrix_transpose(b_next))

    def _interior_forward_backward(self, v, ll_int, beta_e, b):
        """Forward-backward of the interiors (S, L, K) from ``pred_s = v`` to ``beta_e``."""
        xp, L = self.xp, self.L
        last = ll_int[:, L - 1:, :] + _safe_log(xp, beta_e)[:, None, :]
        ll = xp.concat([ll_int[:, :L - 1, :], last], axis=1) if L > 1 else last
        fb = forward_backward(_safe_log(xp, v), _safe_log(xp, self.A), ll,
                              transition_weights=self.weights, check=False)
        return SubchainPosterior(fb.marginals, xp.sum(fb.pairwise, axis=0), b)
