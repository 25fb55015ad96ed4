"""Exact inference in a hidden Markov model: forward-backward and Viterbi.

Both recursions are products of per-step matrices, and matrix products are associative, so
they run as parallel prefix computations over time (Sarkka & Garcia-Fernandez 2021, "Temporal
parallelization of Bayesian smoothers", IEEE TAC 66(1)) in O(log T) batched array operations
instead of a Python loop of T steps. The sequential recursions are kept
(``method="sequential"``) as the reference the tests compare against.

- Sum-product (:func:`forward_backward`): the one-step predictions obey
  ``pred_{t+1} = pred_t diag(p(y_t | .)) A`` and the backward messages
  ``beta_t^T = beta_{t+1}^T diag(p(y_{t+1} | .)) A^T``: one constant matrix with the data as row
  scales. :func:`gpnum.hmm._chain._chain_products` computes all prefixes by a two-level
  (Brent) parallel prefix whose steps are GEMMs with that constant matrix, the block entries
  coming from the odd/even scan :func:`gpnum.hmm._scan.vector_prefix_scan`.
- Max-product (:func:`gpnum.hmm.viterbi`, in :mod:`gpnum.hmm._viterbi`): the same two-level
  scheme in the (max, +) semiring (:func:`gpnum.hmm._viterbi._max_plus_chain`), then the
  back-pointer maps composed by :func:`gpnum.backend.associative_scan`.

Numerics. The sum-product works in the log domain with the log-sum-exp shift applied per row:
each vector or matrix row is stored normalised to sum 1 with its log scale kept separately, so
the log normaliser never under- or overflows however long the chain, and combining two
elements is a matmul, a row sum and K logarithms instead of K^3 exponentials of a naive
log-space matmul. What the stored form drops are probabilities more than ``1 / tiny`` (about
1e308 in float64, 1e38 in float32) below the largest one *in the same row*; with transition
matrices whose entries are bounded away from zero (as expected log parameters of a Dirichlet
posterior always are) such terms cannot affect a marginal. Viterbi needs no exponentials.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import array_api_compat

from gpnum.backend import device_of, get_namespace, is_array
from gpnum.errors import ShapeError, describe_shape
from gpnum.hmm._chain import (
    _chain_products,
    _chain_products_blocked,
    _chain_setup,
    _finite_or_zero,
    _range_t,
    _row_max,
    _row_sum,
    _safe_log,
    logsumexp,
)

__all__ = ["ForwardBackwardResult", "forward_backward"]


class ForwardBackwardResult(NamedTuple):
    """Posterior of the hidden states given the per-step log likelihoods.

    Attributes
    ----------
    marginals : array (..., T, K)
        ``q(x_t = k)``: each row sums to one.
    pairwise : array (..., K, K)
        ``sum_t w_t q(x_{t-1} = i, x_t = j)`` over ``t = 1 .. T-1`` (``w_t = 1`` unless
        ``transition_weights`` were given): the expected transition counts, summed from the
        pairwise marginals (not from products of single-site ones).
    log_normalizer : array (...)
        ``log sum_x pi(x_0) p(y_0|x_0) prod_t A(x_{t-1}, x_t) p(y_t|x_t)``.
    """

    marginals: object
    pairwise: object
    log_normalizer: object


# ------------------------------------------------------------------------------- checking
def _check_inputs(log_pi, log_A, log_lik, transition_weights=None):
    for name, a in (("log_pi", log_pi), ("log_A", log_A), ("log_lik", log_lik)):
        if not is_array(a):
            raise TypeError(f"{name}: expected an array, got {type(a).__name__}")
    xp = get_namespace(log_pi, log_A, log_lik)
    if log_lik.ndim < 2:
        raise ShapeError("log_lik: expected shape (..., T, K), got "
                         f"{describe_shape(log_lik.shape)}")
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    if K < 1:
        raise ValueError(f"log_lik: expected at least one state (K >= 1), got K = {K}")
    if T < 1:
        raise ValueError(f"log_lik: expected at least one time step, got T = {T}")
    if log_A.ndim != 2 or log_A.shape != (K, K):
        raise ShapeError(f"log_A: expected shape ({K}, {K}), got {describe_shape(log_A.shape)}")
    if log_pi.ndim < 1 or log_pi.shape[-1] != K:
        raise ShapeError(f"log_pi: expected shape (..., {K}), got {describe_shape(log_pi.shape)}")
    batch, pi_batch = log_lik.shape[:-2], log_pi.shape[:-1]
    if len(pi_batch) > len(batch) or any(
            p != 1 and p != b for p, b in zip(pi_batch[::-1], batch[::-1], strict=False)):
        raise ShapeError("log_pi: expected a shape that broadcasts to "
                         f"{describe_shape(batch + (K,))}, got {describe_shape(log_pi.shape)}")
    for name, a in (("log_pi", log_pi), ("log_A", log_A), ("log_lik", log_lik)):
        if not xp.isdtype(a.dtype, "real floating"):
            raise TypeError(f"{name}: expected a real floating dtype, got {a.dtype}")
    # One reduction and one synchronisation at the boundary; -inf (probability 0) is allowed.
    if bool(xp.any(xp.isnan(log_lik)) | xp.any(xp.isnan(log_A)) | xp.any(xp.isnan(log_pi))):
        raise ValueError("log_pi, log_A, log_lik: expected no NaN values, got NaN")
    if transition_weights is not None:
        if not is_array(transition_weights):
            raise TypeError("transition_weights: expected an array of shape (..., T - 1), got "
                            f"{type(transition_weights).__name__}")
        if transition_weights.ndim < 1 or transition_weights.shape[-1] != T - 1:
            raise ShapeError(f"transition_weights: expected shape (..., {T - 1}), got "
                             f"{describe_shape(transition_weights.shape)}")
    return xp


#: Chains shorter than this run forward and backward in one sequential loop (the blocked
#: solver would have at most one block there, so it has nothing to speculate on).
_SHORT_CHAIN_STEPS = 128


def _short_chains(xp, log_pi, log_A, log_lik, lik, lik_shift):
    """Forward and backward recursions of short chains in one loop over time.

    The two directions are stacked on a leading axis of two and advanced together, one
    batched GEMM ``(2, chains, K) @ (2, K, K)`` per step, so a batch of short chains (SVI's
    subchains) costs ``T - 1`` sequential steps instead of ``2 (T - 1)``: the steps are
    call-bound there, not data-bound. Each step is :func:`_run_steps_lean`'s (the same
    scaling by :func:`_chain_setup`, log scales kept in float64 for float32 data).

    Returns ``(pred, c_pred, beta_rev)`` as the two chain calls of
    :func:`_forward_backward_scan` give them, or ``None`` when a message went to zero (the
    exact scan then keeps its ``-inf``).
    """
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    batch = log_lik.shape[:-2]
    S = math.prod(batch)
    dtype, dev = log_lik.dtype, device_of(log_lik)
    wide = xp.float64 if dtype == xp.float32 else dtype
    n = T - 1
    zeros = xp.zeros(batch + (K,), dtype=dtype, device=dev)
    fwd = _chain_setup(xp, log_pi, log_A, log_lik, lik, lik_shift)
    bwd = _chain_setup(xp, zeros, xp.matrix_transpose(log_A), xp.flip(log_lik, axis=-2),
                       xp.flip(lik, axis=-2), xp.flip(lik_shift, axis=-1))

    def flat(a, tail):
        return xp.reshape(xp.broadcast_to(a, batch + tail), (S,) + tail)

    V = xp.stack([flat(fwd[0], (K,)), flat(bwd[0], (K,))])  # (2, S, K)
    c = xp.astype(xp.stack([flat(fwd[1], ()), flat(bwd[1], ())]), wide)  # (2, S)
    M = xp.stack([fwd[2], bwd[2]])  # (2, K, K)
    L = xp.stack([flat(fwd[3], fwd[3].shape[-2:]), flat(bwd[3], bwd[3].shape[-2:])])
    shift = xp.astype(xp.stack([flat(fwd[4], fwd[4].shape[-1:]),
                                flat(bwd[4], bwd[4].shape[-1:])]), wide)  # (2, S, >= n)
    ones = xp.ones((K, 1), dtype=dtype, device=dev)
    one = xp.ones((1, 1), dtype=dtype, device=dev)
    out_v = xp.empty((T, 2, S, K), dtype=dtype, device=dev)
    out_c = xp.empty((T, 2, S), dtype=wide, device=dev)
    for j in range(n):
        out_v[j, ...] = V
        out_c[j, ...] = c
        u = xp.matmul(V * L[:, :, j, :], M)
        total = xp.matmul(u, ones)  # (2, S, 1): a row sum as a GEMV (faster in NumPy)
        total = xp.where(total > 0.0, total, one)
        V = u / total
        c = c + (xp.astype(xp.log(total[..., 0]), wide) + shift[:, :, j])
    out_v[n, ...] = V
    out_c[n, ...] = c
    if not bool(xp.min(xp.sum(V, axis=-1)) > 0.0):  # a message went to zero: need -inf
        return None
    pred = xp.reshape(xp.permute_dims(out_v[:, 0, ...], (1, 0, 2)), batch + (T, K))
    beta_rev = xp.reshape(xp.permute_dims(out_v[:, 1, ...], (1, 0, 2)), batch + (T, K))
    c_pred = xp.reshape(xp.permute_dims(xp.astype(out_c[:, 0, :], dtype), (1, 0)), batch + (T,))
    return pred, c_pred, beta_rev


def _forward_backward_scan(xp, log_pi, log_A, log_lik, transition_weights,
                           chain=_chain_products):
    """Forward and backward messages by prefix products (``chain``: :func:`_chain_products`
    or :func:`_chain_products_blocked`).

    Forward: the one-step predictions ``pred_t = alpha_{t-1} A`` obey ``pred_{t+1} =
    pred_t diag(p(y_t | .)) A`` with ``pred_0 = pi``; backward: ``beta_t^T = beta_{t+1}^T
    diag(p(y_{t+1} | .)) A^T`` with ``beta_{T-1} = 1``, run on the reversed sequence.
    """
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    batch = log_lik.shape[:-2]
    dev = device_of(log_lik)
    lik_shift = _finite_or_zero(xp, _row_max(xp, log_lik))
    lik = xp.exp(log_lik - lik_shift[..., None])  # (..., T, K), max 1 per step

    zeros = xp.zeros(batch + (K,), dtype=log_lik.dtype, device=dev)
    short = None
    if chain is _chain_products_blocked and 1 < T < _SHORT_CHAIN_STEPS:
        short = _short_chains(xp, log_pi, log_A, log_lik, lik, lik_shift)
        if short is None:
            chain = _chain_products  # a message went to zero: the scan keeps its -inf
    if short is not None:
        pred, c_pred, beta_rev = short
    else:
        # The chains take all T rows and num_steps = T - 1: the unused last row is padding
        # the blocked solver may read.
        pred, c_pred = chain(xp, log_pi, log_A, log_lik, rows=lik, rows_shift=lik_shift,
                             num_steps=T - 1)
        beta_rev, _ = chain(xp, zeros, xp.matrix_transpose(log_A), xp.flip(log_lik, axis=-2),
                            rows=xp.flip(lik, axis=-2), rows_shift=xp.flip(lik_shift, axis=-1),
                            num_steps=T - 1)
    beta = xp.flip(beta_rev, axis=-2)  # beta_t up to a per-t scale (irrelevant below)

    # alpha_t = pred_t lik_t and b_t = lik_t beta_t, each up to a per-t scale.
    last_sum = xp.sum(pred[..., T - 1, :] * lik[..., T - 1, :], axis=-1)
    log_normalizer = c_pred[..., T - 1] + lik_shift[..., T - 1] + _safe_log(xp, last_sum)
    b = lik * beta
    marginals = pred * b  # alpha_t beta_t, normalised in place below (a fresh array)
    z = _row_sum(xp, marginals)  # (..., T): pred_t . b_t
    marginals /= z[..., None]

    if T == 1:
        pairwise = xp.zeros(batch + (K, K), dtype=log_lik.dtype, device=dev)
    else:
        # xi_t(i, j) = a_{t-1}(i) A(i, j) b_t(j) / n_t, n_t = a_{t-1}^T A b_t. Since
        # a_{t-1}^T A = kappa_t pred_t with kappa_t = a_{t-1}^T A 1 (pred_t sums to 1),
        # n_t = kappa_t z_t: one matrix-vector product instead of a (T, K) @ (K, K) product
        # and a row sum. The sum over t is one (K, T) @ (T, K) product per batch. One global
        # shift of log_A here (a per-row shift would weight the rows).
        A = xp.exp(log_A - _finite_or_zero(xp, xp.max(log_A)))
        a_prev = _range_t(pred, 0, T - 1) * _range_t(lik, 0, T - 1)
        kappa = xp.matmul(a_prev, xp.sum(A, axis=-1))  # (..., T - 1)
        n = kappa * _range_t(z, 1, T, axis=-1)
        n = xp.where(n > 0.0, n, xp.ones_like(n))
        coef = 1.0 / n if transition_weights is None else transition_weights / n
        a_prev *= coef[..., None]
        pairwise = A * xp.matmul(xp.matrix_transpose(a_prev), _range_t(b, 1, T))
    return ForwardBackwardResult(marginals, pairwise, log_normalizer)


def _forward_backward_sequential(xp, log_pi, log_A, log_lik, transition_weights):
    """The textbook log-space recursions, one Python step per time step (the reference)."""
    T, K = log_lik.shape[-2], log_lik.shape[-1]
    log_alpha = [log_pi + log_lik[..., 0, :]]
    for t in range(1, T):
        prev = log_alpha[-1]
        log_alpha.append(logsumexp(xp, prev[..., :, None] + log_A, axis=-2) + log_lik[..., t, :])
    zero = xp.zeros_like(log_lik[..., 0, :])
    log_beta = [zero]
    for t in range(T - 1, 0, -1):
        nxt = log_lik[..., t, :] + log_beta[0]
        log_beta.insert(0, logsumexp(xp, log_A + nxt[..., None, :], axis=-1))
    la = xp.stack(log_alpha, axis=-2)
    lb = xp.stack(log_beta, axis=-2)
    log_normalizer = logsumexp(xp, la[..., T - 1, :], axis=-1)
    marginals = xp.exp(la + lb - log_normalizer[..., None, None])
    pairwise = xp.zeros(log_lik.shape[:-2] + (K, K), dtype=log_lik.dtype,
                        device=device_of(log_lik))
    for t in range(1, T):
        log_xi = (la[..., t - 1, :][..., :, None] + log_A
                  + (log_lik[..., t, :] + lb[..., t, :])[..., None, :]
                  - log_normalizer[..., None, None])
        xi = xp.exp(log_xi)
        if transition_weights is not None:
            xi = xi * transition_weights[..., t - 1][..., None, None]
        pairwise = pairwise + xi
    return ForwardBackwardResult(marginals, pairwise, log_normalizer)


# The blocked solver is used on a CPU ("auto") for chains of at least _BLOCKED_MIN_STEPS steps
# and at least _BLOCKED_MIN_WORK steps over the whole batch: below that the scan's O(log T)
# depth beats the blocked solver's ~sqrt(T) + 64 sequential steps (measured in NumPy, K = 5:
# the scan is faster at T = 1000 alone or 10 x 200, the blocked solver from T = 4000 alone or
# 10 x 1000 on). Shorter chains in batches of at least _BLOCKED_MIN_BATCH (SVI's subchains)
# also go to the blocked solver, whose short chains are one sequential loop vectorised over
# the batch: O(T K^2) work against the scan's O(T K^3) (faster from 50 chains of 20 steps on;
# they tie at 5 x 100 and the scan wins at 1 x 100: docs/benchmarks.md, "Measurements behind
# implementation choices").
_BLOCKED_MIN_STEPS = 512
_BLOCKED_MIN_WORK = 4096
_BLOCKED_MIN_BATCH = 16


def _auto_method(xp, log_lik):
    """``"blocked"`` for long chains, or batches of many short ones, on a CPU (NumPy, or
    torch on its CPU device), where a step's cost is its data; ``"scan"`` elsewhere, where
    kernel launches (depth) dominate."""
    T = log_lik.shape[-2]
    batch = math.prod(log_lik.shape[:-2])
    long_chains = T >= _BLOCKED_MIN_STEPS and batch * T >= _BLOCKED_MIN_WORK
    many_short = T >= 2 and batch >= _BLOCKED_MIN_BATCH
    if not (long_chains or many_short):
        return "scan"
    on_cpu = array_api_compat.is_numpy_namespace(xp) or (
        array_api_compat.is_torch_namespace(xp) and log_lik.device.type == "cpu")
    return "blocked" if on_cpu else "scan"


def forward_backward(log_pi, log_A, log_lik, *, transition_weights=None, method="auto",
                     check=True):
    """Posterior state marginals of a hidden Markov model, in log space, batched.

    Parameters
    ----------
    log_pi : array (..., K)
        Log initial-state weights (broadcast against the batch axes of ``log_lik``); need not
        be normalised (expected log parameters of a Dirichlet posterior are not).
    log_A : array (K, K)
        Log transition weights, ``log_A[i, j]`` for ``x_{t-1} = i -> x_t = j``; ``-inf``
        allowed (forbidden transitions).
    log_lik : array (..., T, K)
        ``log p(y_t | x_t = k)``; leading axes batch independent chains (e.g. many subchains).
    transition_weights : array (..., T - 1), optional
        Weights ``w_t`` of the pairwise marginals in ``pairwise`` (for scaled subchain
        statistics); default all ones.
    method : {"auto", "scan", "blocked", "sequential"}
        ``"scan"``: associative scans over time, O(log T) depth (Sarkka & Garcia-Fernandez
        2021), O(T K^2) elementwise work. ``"blocked"``: about ``sqrt(T)`` blocks run side by
        side from speculated entry messages, each checked against the previous block's exit
        (then exact; falls back to the scan when a chain mixes too slowly), O(T K) work and
        O(sqrt(T)) depth: about twice as fast as the scan on a CPU at T = 10^6, K = 5.
        ``"auto"`` (default): ``"blocked"`` on a CPU (NumPy, or torch on its CPU device) for
        chains of at least 512 steps and 4096 steps over the batch, and for batches of at
        least 16 shorter chains (SVI's subchains: one loop over time, vectorised over the
        batch), ``"scan"`` otherwise (a few short chains, and GPUs, where depth costs kernel
        launches). ``"sequential"``: the
        textbook log-space recursions with a Python loop over T, kept as the reference. All
        agree to rounding.
    check : bool
        Validate shapes, dtypes and NaN (one host synchronisation). Internal callers that have
        validated their data pass ``False``.

    Returns
    -------
    ForwardBackwardResult
        ``marginals`` (..., T, K), ``pairwise`` (..., K, K) (summed over t), ``log_normalizer``
        (...).

    Raises
    ------
    ShapeError, TypeError, ValueError
        Wrong shapes or dtypes, no states or steps, or NaN in the inputs.
    """
    if check:
        xp = _check_inputs(log_pi, log_A, log_lik, transition_weights)
    else:
        xp = get_namespace(log_pi, log_A, log_lik)
    if method == "auto":
        method = _auto_method(xp, log_lik)
    if method == "scan":
        return _forward_backward_scan(xp, log_pi, log_A, log_lik, transition_weights)
    if method == "blocked":
        return _forward_backward_scan(xp, log_pi, log_A, log_lik, transition_weights,
                                      chain=_chain_products_blocked)
    if method == "sequential":
        return _forward_backward_sequential(xp, log_pi, log_A, log_lik, transition_weights)
    raise ValueError(
        f"method: expected 'auto', 'scan', 'blocked' or 'sequential', got {method!r}")
