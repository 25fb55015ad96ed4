"""Local step of SVI for HMMs: subchain marginals under buffers of any length, from transfer
matrices (Foti, Xu, Laird & Fox 2014, Algorithms 1-2).

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
steps per SVI step instead of a forward-backward over ``L + 2 b`` steps per round, and the
rounds are scored in one batch with one synchronisation (two when told the likely buffer and it
is not accepted: the rounds up to it first, so that the usual step scores no later round).

Every loop step is one row scaling and one GEMM ``(K, K) @ (K, K S)`` per sequence on the
transposed products of the ``S`` subchains (rescaled only every few steps: only the marginals
are needed, not the normaliser).
"""

from __future__ import annotations

import bisect
import math

from gpnum.backend import device_of, get_namespace, matmul_writer
from gpnum.hmm._inference import _safe_log, forward_backward

__all__ = ["SubchainPosterior", "start_range", "subchain_posterior"]

#: Interior transfer matrices are kept for subchains with ``L S K^2`` at most this many
#: entries (16 MiB in float64); longer subchains run a forward-backward of the interiors per
#: buffer length instead (same result; slower even for a single buffer length: docs/benchmarks.md).
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
    first_start : int
        The smallest subchain start (a host integer: whether any subchain holds the chain's
        first state).
    rows : array (S L, ...)
        The chain's rows ``Y[s .. e]`` of the interiors, subchain by subchain (taken from the
        gathered windows: the caller's statistics need not gather them again).
    """

    def __init__(self, marginals, pairwise, buffer, first_start):
        self.marginals = marginals
        self.pairwise = pairwise
        self.buffer = buffer
        self.first_start = first_start
        self.rows = None


def _transfer_products(xp, M, steps, n, every=1):
    """Transposed transfer products ``Z_k = V_k^T``: ``V_0 = I``, ``V_{k+1} = V_k diag(d_k)
    M_p``, that is ``Z_{k+1} = M_p^T diag(d_k) Z_k``, for every stacked sequence.

    The products of the ``S`` subchains are stored side by side, subchain index last, so that
    a step is a row scaling over contiguous rows of ``S`` and one GEMM ``(K, K) @ (K, K S)``
    per sequence (NumPy broadcasts over a short last axis several times slower).

    Parameters
    ----------
    M : array (P, K, K)
        One step matrix per sequence.
    steps : array (P, K, m, S), m >= n
        The row scales ``d_k`` (likelihoods, maximum 1 per step) of each sequence; the loop
        uses the first ``n``.
    n : int
        The number of steps.
    every : int
        Rescale the products to sum one every this many steps (a product's scale is
        irrelevant to its users; the caller picks ``every`` so that nothing can under- or
        overflow in between).

    Returns
    -------
    array (n + 1, P, K, K, S)
        ``Z_k[p, j, i, s] = V_k[p, s][i, j]``, each up to a positive factor.
    """
    P, K, _, S = steps.shape
    dev, dtype = device_of(steps), steps.dtype
    MT = xp.matrix_transpose(M)
    write = matmul_writer(xp)
    # The GEMMs (P, K, K) @ (P, K, K S) write straight into the store (no temporary, no copy).
    products = xp.empty((n + 1, P, K, K, S), dtype=dtype, device=dev)
    products[0, ...] = (xp.eye(K, dtype=dtype, device=dev) / K)[:, :, None]
    for k in range(n):
        write(products, k + 1, MT, products[k, ...] * steps[:, :, k:k + 1, :])
        if (k + 1) % every == 0:
            total = xp.sum(products[k + 1, ...], axis=(1, 2))  # (P, S)
            products[k + 1, ...] = (products[k + 1, ...]
                                    / xp.where(total > 0.0, total, 1.0)[:, None, None, :])
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
    # Keep the factors above sqrt(smallest normal) and below sqrt(max). (The bound is the
    # limit; the cap only keeps a product from running unscaled for very long. A loop that
    # ends before the interval rescales nothing: the L - 1 = 19 steps of L = 20 at K = 5 in
    # float64 typically, 4 array operations fewer.)
    m = min(math.log(finfo.smallest_normal) / (2.0 * math.log(a / K)),
            math.log(finfo.max) / (2.0 * math.log(K)))
    return max(1, min(64, int(m)))


def start_range(starts):
    """The first and last of the subchain starts, on the host (one synchronisation)."""
    xp = get_namespace(starts)
    lo, hi = (int(v) for v in xp.concat([xp.min(starts, keepdims=True),
                                         xp.max(starts, keepdims=True)]))
    return lo, hi


def subchain_posterior(log_pi0, stationary, A, log_lik_of, Y, starts, L, buffer, *,
                       transition_weights, grow_step=1, grow_tol=1e-3, max_buffer=None,
                       expected_buffer=None, first_last=None):
    """Interior marginals and weighted pairwise sums of ``S`` buffered subchains.

    Parameters
    ----------
    log_pi0 : array (K,)
        Log start weights (any shift) of a buffer that reaches the chain's start (only
        exponentiated when one does).
    stationary : array (K,)
        Start distribution of one that does not.
    A : array (K, K)
        Transition weights ``exp(E log A)`` up to one global factor, scaled so that the
        largest entry is 1.
    log_lik_of : callable
        ``Y[rows] (N, ...) -> (K, N)`` expected log likelihoods (finite), states first.
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
    expected_buffer : int, optional
        GrowBuf's likely outcome (e.g. the last SVI step's buffer): the rounds up to it are
        scored before the later ones of the same transfer loop. The result does not depend
        on it, only the work does.
    first_last : (int, int), optional
        :func:`start_range` of ``starts``, when the caller has it.

    Returns
    -------
    SubchainPosterior
    """
    xp = get_namespace(starts)
    T = Y.shape[0]
    S = starts.shape[0]
    K = A.shape[-1]
    # The first and last start, and the largest buffer any subchain can use (beyond it every
    # buffer is cut at both ends).
    lo, hi = start_range(starts) if first_last is None else first_last
    cover = max(hi, T - L - lo)
    if buffer == "grow":
        limit = cover if max_buffer is None else min(cover, max_buffer)
        rounds = list(range(0, limit, grow_step)) + [limit]
    else:
        rounds = [min(int(buffer), cover)]
    interior_matrices = L * S * K * K <= _TRANSFER_MAX_ENTRIES
    ctx = _Context(xp, log_pi0, stationary, A, log_lik_of, Y, starts, (lo, hi), L,
                   transition_weights, grow_tol, interior_matrices,
                   math.inf if expected_buffer is None else expected_buffer)
    scored, previous = 0, None
    n = rounds[min(1, len(rounds) - 1)]
    while True:
        if interior_matrices:
            n = max(n, L - 1)
        usable = rounds[scored:bisect.bisect_right(rounds, n)]  # rounds are sorted
        final = scored + len(usable) == len(rounds)
        post, previous = ctx.score(n, usable, previous, final)
        if post is not None:
            post.rows = ctx.interior_rows()
            return post
        scored += len(usable)
        n = min(max(2 * n, rounds[scored]), rounds[-1])


class _Context:
    """What every scoring pass of one SVI step's subchains shares."""

    def __init__(self, xp, log_pi0, stationary, A, log_lik_of, Y, starts, start_range, L,
                 transition_weights, grow_tol, interior_matrices, expected_buffer):
        self.xp, self.A, self.log_lik_of, self.Y, self.starts, self.L = (
            xp, A, log_lik_of, Y, starts, L)
        self.start_range = start_range  # (first, last) start, on the host
        self.weights, self.grow_tol = transition_weights, grow_tol
        self.interior_matrices = interior_matrices
        self.expected_buffer = expected_buffer
        # The boundary vectors are normalised, so the start weights' scale is irrelevant.
        self.log_pi0, self.stationary = log_pi0, stationary
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
        lo, hi = self.start_range
        R = len(rounds)
        # The window s - h .. e + h of every subchain: the buffers need h = the largest round,
        # the interior sequences n - (L - 1) steps beyond the interior.
        h = max(rounds[R - 1], n - (L - 1)) if self.interior_matrices else rounds[R - 1]
        W = L + 2 * h
        position = starts[:, None] + xp.arange(-h, W - h, dtype=starts.dtype, device=dev)
        if lo < h or hi > T - L - h:  # clipped at the chain's ends (rows a buffer never uses)
            position = xp.maximum(xp.minimum(position, T - 1), 0)  # (S, W)
        # States first, (K, S, W): NumPy broadcasts and reduces over a last axis as short as
        # K several times slower. (Expected log likelihoods are finite.)
        rows = xp.take(self.Y, xp.reshape(position, (-1,)), axis=0)
        self.window = (rows, h)  # the last pass's, for interior_rows
        ll = xp.reshape(self.log_lik_of(rows), (K, S, W))
        lik = xp.exp(ll - xp.max(ll, axis=0)[None, ...])  # maximum 1 per step
        lik_t = xp.permute_dims(lik, (0, 2, 1))  # (K, W, S)
        # Row scales d_0 .. d_n of the outward sequences: the left buffer (A^T, from s - 1
        # down) and the right buffer (A, from e + 1 up), whose first step has no likelihood
        # (d_0 = 1: the likelihood at s or e is the interior's) and whose scales beyond h are
        # ones (the products there are never read); with interior matrices also the interior
        # forward (A, from s up) and backward (A^T, from e down). The loop uses d_0 ..
        # d_{n-1}; a buffer of b steps ends in the likelihood d_b of its last step.
        # (Written into one array: concatenations and a stack would copy them twice.)
        AT = xp.matrix_transpose(A)
        mats = [AT, A, A, AT] if self.interior_matrices else [AT, A]
        steps = xp.empty((len(mats), K, n + 1, S), dtype=lik.dtype, device=dev)
        steps[:2, :, :1, :] = 1.0
        steps[0, :, 1:h + 1, :] = xp.flip(lik_t[:, :h, :], axis=1)
        steps[1, :, 1:h + 1, :] = lik_t[:, h + L:2 * h + L, :]
        steps[:2, :, h + 1:, :] = 1.0
        if self.interior_matrices:
            steps[2, ...] = lik_t[:, h:h + n + 1, :]
            steps[3, ...] = xp.flip(lik_t[:, h + L - 1 - n:h + L, :], axis=1)
        out = _transfer_products(xp, xp.stack(mats), steps, n, self.every)
        # out: (n + 1, P, K, K, S)
        V = None
        if self.interior_matrices:
            # The interior products V_k (k < L) of each subchain, (2, S, K, K L), the
            # backward ones in time order (their loop runs from e down): the interior
            # marginals then take no reversed, strided operand.
            V = xp.empty((2, S, K, K, L), dtype=out.dtype, device=dev)
            V[0, ...] = xp.permute_dims(out[:L, 2, ...], (3, 2, 1, 0))
            V[1, ...] = xp.permute_dims(xp.flip(out[:L, 3, ...], axis=0), (3, 2, 1, 0))
            V = xp.reshape(V, (2, S, K, K * L))

        # The rounds up to the expected buffer first: the later ones are scored (from the same
        # products) only if none of these is accepted, which spares their interior marginals
        # when the expected buffer is right (the usual case: it is the last step's).
        first = bisect.bisect_right(rounds, self.expected_buffer)
        chunks = [rounds[:first], rounds[first:]] if 0 < first < R else [rounds]
        for i, chunk in enumerate(chunks):
            post, previous = self._score_rounds(chunk, out, V, steps, lik, ll, h, previous,
                                                final and i == len(chunks) - 1)
            if post is not None:
                return post, None
        return None, previous

    def interior_rows(self):
        """The rows of the interiors (S L, ...), from the last pass's window (interior
        positions are never clipped)."""
        rows, h = self.window
        S, L, tail = self.starts.shape[0], self.L, self.Y.shape[1:]
        window = self.xp.reshape(rows, (S, L + 2 * h) + tail)
        return self.xp.reshape(window[:, h:h + L, ...], (S * L,) + tail)

    def _score_rounds(self, rounds, out, V, steps, lik, ll, h, previous, final):
        """Score the buffer lengths ``rounds`` from the transfer products ``out`` (interior
        ones as ``V``, or None) and row scales ``steps`` of :meth:`score`'s pass (window
        half-width ``h``), after the marginals ``previous``; returns as :meth:`score`."""
        xp, L, starts = self.xp, self.L, self.starts
        T = self.Y.shape[0]
        S = starts.shape[0]
        K = self.A.shape[-1]
        dev = device_of(starts)
        lo, hi = self.start_range
        R = len(rounds)
        # The boundary vectors of the rounds, both sides at once: V_b x_b with x_b = d_b times
        # the start weights (left: q(pi) for a buffer of b = s steps, which starts at the
        # chain's start, else the stationary distribution; right: 1), side 0 (pred_s) at
        # b_l = min(b, s), side 1 (beta_e) at b_r = min(b, T - L - s) (each buffer stops at
        # the chain's ends).
        nb = rounds[R - 1] + 1
        if nb <= lo and nb <= T - L - hi + 1:
            # No buffer of this pass reaches an end (the usual case on a long chain): every
            # boundary is at a round itself, so only the rounds' products are contracted.
            at = xp.asarray(rounds, dtype=starts.dtype, device=dev)
            x = xp.take(steps[:2, ...], at, axis=2)  # (2, K, R, S), fresh: scaled in place
            x[0, ...] *= self.stationary[:, None, None]
            step = rounds[1] - rounds[0] if R > 1 else 1
            if rounds == list(range(rounds[0], rounds[R - 1] + 1, step)):
                # evenly spaced (GrowBuf's rounds): a strided view, no gather
                ends = out[rounds[0]:rounds[R - 1] + 1:step, :2, ...]
            else:
                ends = xp.take(out[:, :2, ...], at, axis=0)
            ends = xp.sum(ends * xp.permute_dims(x, (2, 0, 1, 3))[:, :, :, None, :],
                          axis=2)  # (R, 2, K, S)
            v = xp.permute_dims(ends, (1, 0, 2, 3))
        else:
            # Every buffer length up to the largest round, then one gather per round and
            # subchain.
            if lo < nb:  # some buffer of b = s < nb steps reaches the chain's start
                at_start = (xp.arange(nb, dtype=starts.dtype, device=dev)[:, None]
                            == starts[None, :])  # (nb, S)
                pi0 = xp.exp(self.log_pi0 - xp.max(self.log_pi0))
                start = xp.where(at_start, pi0[:, None, None],
                                 self.stationary[:, None, None])
            else:
                start = self.stationary[:, None, None]
            x = xp.stack([steps[0, :, :nb, :] * start, steps[1, :, :nb, :]])  # (2, K, nb, S)
            ends = xp.sum(out[:nb, :2, ...] * xp.permute_dims(x, (2, 0, 1, 3))[:, :, :, None, :],
                          axis=2)  # (nb, 2, K, S)
            rb = xp.asarray(rounds, dtype=starts.dtype, device=dev)[None, :, None]  # (1, R, 1)
            b = xp.minimum(rb, xp.stack([starts, (T - L) - starts])[:, None, :])  # (2, R, S)
            side_i_s = xp.reshape(xp.arange(2 * K * S, dtype=starts.dtype, device=dev),
                                  (2, 1, K, S))
            index = b[:, :, None, :] * (2 * K * S) + side_i_s  # (2, R, K, S)
            v = xp.reshape(xp.take(xp.reshape(ends, (-1,)), xp.reshape(index, (-1,)), axis=0),
                           (2, R, K, S))
        total = xp.sum(v, axis=2, keepdims=True)
        v /= xp.where(total > 0.0, total, 1.0)  # [pred_s, beta_e] (2, R, K, S), fresh

        if self.interior_matrices:
            lik_int = lik[:, :, h:h + L]  # (K, S, L)
            # x^T V_k for k < L, both sides in one batched GEMM (2 S of them), then one copy
            # rounds then states first, (2, R, K, S, L): the sums over states then add
            # contiguous slabs, the normalisations broadcast along a leading axis (NumPy
            # reduces and broadcasts over a short inner axis several times slower), and each
            # round's change from the one before is taken over contiguous slabs.
            along = xp.reshape(xp.permute_dims(v, (0, 3, 1, 2)) @ V,
                               (2, S, R, K, L))
            along = xp.reshape(xp.reshape(xp.permute_dims(along, (0, 2, 3, 1, 4)),
                                          (2, R * K * S * L)), (2, R, K, S, L))
            pred, beta = along[0, ...], along[1, ...]
            gamma = pred * lik_int[None, ...]  # fresh: updated in place below
            gamma *= beta
            z = xp.sum(gamma, axis=1)  # (R, S, L)
            # Host flags, one synchronisation: the change of each round from the one before
            # (the first against ``previous``), then min and max of the normalisers (a zero,
            # infinite or NaN one fails min > 0 or max < inf).
            checks = [xp.min(z)[None], xp.max(z)[None]]  # one concat below, no stack
            z = xp.where(z > 0.0, z, 1.0)
            gamma /= z[:, None, ...]
            if previous is not None:
                checks.append(xp.max(xp.abs(gamma[0, ...] - previous))[None])
            if R > 1:
                checks.append(xp.max(xp.abs(gamma[1:, ...] - gamma[:R - 1, ...]),
                                     axis=(1, 2, 3)))
            flags = [float(f) for f in xp.concat(checks)]
            if flags[0] > 0.0 and flags[1] < math.inf:
                changes = flags[2:] if previous is not None else [math.inf] + flags[2:]
                r = self._accepted(changes, final)
                if r is None:
                    return None, gamma[R - 1, ...]
                marginals = xp.permute_dims(gamma[r, ...], (1, 2, 0))  # (S, L, K)
                return SubchainPosterior(marginals, self._pairwise(
                    pred[r, ...], lik_int, beta[r, ...], z[r, ...]), rounds[r], lo), None
        v = xp.permute_dims(v, (0, 1, 3, 2))  # (2, R, S, K)
        # Long subchains (and any degenerate product above): an exact forward-backward of
        # each round's interior, the buffers folded into its first and last step.
        ll_int = xp.permute_dims(ll[:, :, h:h + L], (1, 2, 0))  # (S, L, K)
        for r in range(R):
            post = self._interior_forward_backward(v[0, r, ...], ll_int, v[1, r, ...], rounds[r])
            change = (None if previous is None else float(xp.max(xp.abs(
                xp.permute_dims(post.marginals, (2, 0, 1)) - previous))))
            if (change is not None and change < self.grow_tol) or (final and r == R - 1):
                return post, None
            previous = xp.permute_dims(post.marginals, (2, 0, 1))  # (K, S, L)
        return None, previous

    def _accepted(self, changes, final):
        """Index of the first accepted round: its change below the tolerance, else the last
        when ``final``, else None."""
        for r, change in enumerate(changes):
            if change < self.grow_tol:
                return r
        return len(changes) - 1 if final else None

    def _pairwise(self, pred, lik, beta, z):
        """``sum w_t xi_t`` over the interior pairs: ``xi_t(i, j) = a_{t-1}(i) A_ij b_t(j) /
        (a_{t-1}^T A b_t)`` with ``a = pred * lik``, ``b = lik * beta`` (K, S, L), states
        first. ``z`` (S, L) are the marginals' normalisers ``sum(pred_t * b_t)`` (zeros
        replaced by ones): ``pred_t = a_{t-1}^T A``, so they are the pairs' normalisers too
        unless the transfer products were rescaled between two interior steps."""
        xp, A = self.xp, self.A
        K, S, L = pred.shape
        N = S * (L - 1)
        # (K, S, L - 1) products, fresh and contiguous: (K, S (L - 1)) for the GEMMs below
        a_prev = xp.reshape(pred[..., :L - 1] * lik[..., :L - 1], (K, N))
        b_next = xp.reshape(lik[..., 1:] * beta[..., 1:], (K, N))
        if self.every >= L:  # no rescaling within the interior's products
            coef = xp.reshape(self.weights / z[:, 1:], (N,))
        else:
            norm = xp.sum(xp.matmul(xp.matrix_transpose(A), a_prev) * b_next, axis=0)  # (N,)
            coef = xp.reshape(self.weights, (N,)) / xp.where(norm > 0.0, norm, 1.0)
        a_prev *= coef[None, :]  # fresh
        return A * (a_prev @ xp.matrix_transpose(b_next))

    def _interior_forward_backward(self, v, ll_int, beta_e, b):
        """Forward-backward of the interiors (S, L, K) from ``pred_s = v`` to ``beta_e``."""
        xp, L = self.xp, self.L
        last = ll_int[:, L - 1:, :] + _safe_log(xp, beta_e)[:, None, :]
        ll = xp.concat([ll_int[:, :L - 1, :], last], axis=1) if L > 1 else last
        fb = forward_backward(_safe_log(xp, v), _safe_log(xp, self.A), ll,
                              transition_weights=self.weights, check=False)
        return SubchainPosterior(fb.marginals, xp.sum(fb.pairwise, axis=0), b,
                                 self.start_range[0])
