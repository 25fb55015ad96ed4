"""GPR on one input through the kernel's state-space form: O(n J^3), exact.

``GPR(kernel, likelihood, X, y, solver="state_space")`` with ``X`` of one column and a kernel
with an exact state-space form (:func:`gpnum.kernels.state_space_form`). The inputs are sorted
(stably: ties stay, with a step of zero, ``A = I`` and ``Q = 0``) and the model becomes a
linear-Gaussian state-space model (Hartikainen & Sarkka 2010):

- log marginal likelihood and its gradient w.r.t. every hyper-parameter (the kernel's, the
  noise variance, the constant mean): the parallel Kalman filter with forward-mode tangents
  (:mod:`gpnum.models._kalman_scan`);
- predictions at any new inputs: the parallel RTS smoother over the training inputs, then one
  prediction and one smoothing step per new input from its neighbours
  (:mod:`gpnum.models._kalman_smoother`);
- posterior samples by pathwise conditioning, the prior drawn by the state-space recursion.

Everything runs in float64 (as GPR's Cholesky path): a float32 model's transitions are formed
in float32 from its parameters and cast up.
"""

from __future__ import annotations

from gpnum.backend import default_rng, device_of
from gpnum.errors import ShapeError, describe_shape
from gpnum.kernels import has_state_space_form, state_space_form
from gpnum.models import _kalman_smoother as smoother
from gpnum.models._kalman_blocked import chunk_terms_blocked
from gpnum.models._kalman_scan import log_marginal_likelihood

__all__ = ["check_state_space", "has_state_space_form", "lml", "predict", "prediction_state", "sample_f"]

#: Steps per scan of the likelihood: memory O(chunk J^2 p).
CHUNK = 1 << 16
#: The likelihood's scan: "blocked" (:mod:`gpnum.models._kalman_blocked`, at most BLOCKS
#: blocks per chunk) or "associative" (:mod:`gpnum.models._kalman_scan`, the odd/even
#: recursion).
METHOD = "blocked"
BLOCKS = 2048


def check_state_space(kernel, X):
    """Raise a clear error unless ``X`` has one column and ``kernel`` a state-space form."""
    if X.shape[1] != 1:
        raise ShapeError(f"X: solver='state_space' is for one input column (time); got shape "
                         f"{describe_shape(X.shape)}")
    state_space_form(kernel)  # raises TypeError naming a kernel without a form


def _high(xp, a):
    return xp.astype(a, xp.float64, copy=False)


def _sorted(model, X, y):
    """Inputs sorted (stable), the permutation and the targets minus the mean, in float64."""
    xp = model.xp
    t = _high(xp, X[:, 0])
    order = xp.argsort(t, stable=True)
    t = xp.take(t, order)
    resid = _high(xp, xp.take(y, order)) - _high(xp, model.mean)
    return t, order, resid


def _steps(xp, t):
    """Steps between consecutive sorted inputs, the first 0."""
    zero = xp.zeros((1,), dtype=t.dtype, device=device_of(t))
    return xp.concat([zero, t[1:] - t[:-1]]) if t.shape[0] > 1 else zero


def _noise(model):
    xp = model.xp
    return _high(xp, model.likelihood.variance) + float(model.jitter)


def lml(model, X, y, need_grad):
    """Log marginal likelihood on (X, y) and (``need_grad``) its gradients, keyed like
    ``model.parameters()``."""
    xp = model.xp
    form = state_space_form(model.kernel)
    t, _, resid = _sorted(model, X, y)
    n = t.shape[0]
    dt = _steps(xp, t)
    P_inf, h = _high(xp, form.P_inf), _high(xp, form.H)
    R = _noise(model)
    pk = len(form.names)
    dev = device_of(t)
    J = form.state_dim

    def steps(s, e):
        A, dA = form.transition(dt[s:e], need_grad)
        Q, dQ = form.process_noise(A, dA)
        A, Q = _high(xp, A), _high(xp, Q)
        Y = resid[s:e, None]
        if s == 0:  # the prior: Q_0 = P_inf
            Q = xp.concat([P_inf[None, :, :], Q[1:, :, :]], axis=0)
        if not need_grad:
            return A, Q, Y
        dA, dQ = _high(xp, dA), _high(xp, dQ)
        if s == 0:
            dQ = xp.concat([_high(xp, form.dP_inf)[:, None, :, :], dQ[:, 1:, :, :]], axis=1)
        m = e - s
        # two more directions: the noise variance (through R) and the mean (through Y)
        zeros = xp.zeros((2, m, J, J), dtype=xp.float64, device=dev)
        dA = xp.concat([dA, zeros], axis=0)
        dQ = xp.concat([dQ, zeros], axis=0)
        dY = xp.concat([xp.zeros((pk + 1, m, 1), dtype=xp.float64, device=dev),
                        -xp.ones((1, m, 1), dtype=xp.float64, device=dev)], axis=0)
        return A, Q, Y, dA, dQ, dY

    dR = None
    if need_grad:
        dR = xp.concat([xp.zeros((pk,), dtype=xp.float64, device=dev),
                        xp.asarray([1.0, 0.0], dtype=xp.float64, device=dev)])
    terms = None
    if METHOD == "blocked":
        def terms(*args):
            # blocks of at least ~32 steps: the scan over the block elements (general
            # combinations with an inverse) stays a small part of the work
            return chunk_terms_blocked(*args, num_blocks=min(BLOCKS, max(64,
                                                                       args[0].shape[0] // 32)))
    value, dvalue = log_marginal_likelihood(n, h, R, steps, dR=dR, chunk=CHUNK,
                                            chunk_terms=terms)
    value = model._scalar(value)
    if not need_grad:
        return value, None
    params = model.kernel.parameters()
    grads = {"mean": model._scalar(dvalue[pk + 1])}
    for i, name in enumerate(form.names):
        grads[f"kernel.{name}"] = model._shaped(dvalue[i], params[name].shape)
    grads["likelihood.variance"] = model._shaped(dvalue[pk], model.likelihood.variance.shape)
    return value, grads


# ------------------------------------------------------------------------ predictions
def prediction_state(model):
    """Filtered and smoothed moments at the sorted training inputs (what every prediction
    needs), computed once per :meth:`GPR.predict_f` call."""
    xp = model.xp
    form = state_space_form(model.kernel)
    t, _, resid = _sorted(model, model.X, model.y)
    return smoother.smoothed_state(form, t, resid[:, None], _noise(model), xp)


def predict(model, Xnew, state, full_cov):
    """Posterior mean and variance of f at ``Xnew`` (m, 1), in the model's dtype."""
    xp = model.xp
    form = state_space_form(model.kernel)
    tnew = _high(xp, Xnew[:, 0])
    mean, var = smoother.predict_at(form, state, tnew, xp)
    mean = mean[:, 0] + _high(xp, model.mean)
    if full_cov:
        # K_** - K_*X K_y^{-1} K_X*: the smoothed means of the m columns of K_X* as data
        # (one smoother pass with m right-hand sides; O(n m) memory)
        t, order, _ = _sorted(model, model.X, model.y)
        K_xs = _high(xp, model.kernel(xp.take(model.X, order, axis=0), Xnew))
        cols = smoother.smoothed_state(form, t, K_xs, _noise(model), xp)
        proj, _ = smoother.predict_at(form, cols, tnew, xp)
        cov = _high(xp, model.kernel(Xnew)) - proj
        return xp.astype(mean, model.dtype), xp.astype(cov, model.dtype)
    return xp.astype(mean, model.dtype), xp.astype(var, model.dtype)


def sample_f(model, X, num_samples, seed, jitter):
    """Posterior samples of f at ``X`` (m, 1) by pathwise conditioning (Wilson et al. 2020):
    a joint prior draw ``(f_X + e, f_*)`` by the state-space recursion, then
    ``f_* + K_*X K_y^{-1} (y - c - f_X - e)``, the second term the smoothed mean of the
    residual data (one smoother pass for all samples)."""
    xp = model.xp
    form = state_space_form(model.kernel)
    n, m = model.X.shape[0], X.shape[0]
    high = xp.float64
    dev = device_of(model.X)
    t_train = _high(xp, model.X[:, 0])
    t_new = _high(xp, X[:, 0])
    rng = default_rng(seed, xp=xp, device=dev)
    f_all = smoother.prior_draw(form, xp.concat([t_train, t_new]), num_samples, rng, xp)
    R = _noise(model)
    eps = rng.normal((n, num_samples), dtype=high) * xp.sqrt(R)
    f_train, f_new = f_all[:n, :], f_all[n:, :]
    if jitter > 0.0:
        f_new = f_new + rng.normal((m, num_samples), dtype=high) * (jitter ** 0.5)
    t, order, resid = _sorted(model, model.X, model.y)
    data = resid[:, None] - xp.take(f_train + eps, order, axis=0)
    state = smoother.smoothed_state(form, t, data, R, xp)
    update, _ = smoother.predict_at(form, state, t_new, xp)
    samples = _high(xp, model.mean) + f_new + update
    return xp.astype(samples.T, model.dtype, copy=False)
