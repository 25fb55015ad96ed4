"""GPR on one input through the kernel's state-space form: O(n J^3), exact.

``GPR(kernel, likelihood, X, y, solver="state_space")`` with ``X`` of one column and a kernel
with an exact state-space form (:func:`gpnum.kernels.state_space_form`). The inputs are sorted
(stably: ties stay, with a step of zero, ``A = I`` and ``Q = 0``) and the model becomes a
linear-Gaussian state-space model (Hartikainen & Sarkka 2010):

- log marginal likelihood and its gradient w.r.t. every hyper-parameter (the kernel's, the
  noise variance, the constant mean): a blocked scan of the Kalman filter, the gradient by
  its hand-written reverse pass (:mod:`gpnum.models._kalman_blocked`);
- predictions at any new inputs: the parallel RTS smoother over the training inputs, then one
  prediction and one smoothing step per new input from its neighbours
  (:mod:`gpnum.models._kalman_smoother`);
- posterior samples by pathwise conditioning, the prior drawn by the state-space recursion.

Several series sharing the hyper-parameters (kernel ``k_t * SameGroup(active_dims=[j])``, the
labels in column ``j``): sorted by (label, time), one recursion restarting from the prior at
every series' first point (:mod:`gpnum.models._state_space_series`).

Everything runs in float64 (as GPR's Cholesky path): a float32 model's transitions are formed
in float32 from its parameters and cast up.
"""

from __future__ import annotations

from gpnum.backend import default_rng, device_of
from gpnum.kernels import has_state_space_form
from gpnum.models import _kalman_smoother as smoother
from gpnum.models import _state_space_series as series
from gpnum.models._kalman_blocked import lml_blocked
from gpnum.models._state_space_series import applies

__all__ = ["applies", "check_state_space", "has_state_space_form", "lml", "predict",
           "prediction_state", "sample_f"]

#: Steps per block of the likelihood's blocked scan (None: about sqrt(n / 2),
#: :func:`gpnum.models._kalman_blocked.steps_per_block`).
STEPS_PER_BLOCK = None


def check_state_space(kernel, X):
    """Raise a clear error unless ``X`` has one column and ``kernel`` a state-space form, or
    ``kernel`` is ``k_t * SameGroup(active_dims=[j])`` for several series (labels in
    ``X[:, j]``)."""
    series.check(kernel, X)


def _high(xp, a):
    return xp.astype(a, xp.float64, copy=False)


def _sorted(model, X, y):
    """Inputs sorted (stable), the permutation and the targets minus the mean, in float64."""
    xp = model.xp
    t = _high(xp, X[:, 0])
    n = t.shape[0]
    # inputs in order already (time series usually are): one comparison instead of a sort
    # and two gathers; NaN compares false and takes the sort's path
    if n < 2 or bool(xp.all(t[1:] >= t[:-1])):
        order = xp.arange(n, device=device_of(t))
        return t, order, _high(xp, y) - _high(xp, model.mean)
    order = xp.argsort(t, stable=True)
    t = xp.take(t, order)
    resid = _high(xp, xp.take(y, order)) - _high(xp, model.mean)
    return t, order, resid


def _steps(xp, t):
    """Steps between consecutive sorted inputs, the first 0."""
    zero = xp.zeros((1,), dtype=t.dtype, device=device_of(t))
    return xp.concat([zero, t[1:] - t[:-1]]) if t.shape[0] > 1 else zero


def _sequence(model, X, y):
    """``(t, order, resid, reset, labels)``: :func:`_sorted`'s three, then for several
    series (sorted by (label, time), stably) the first point of every series (n,) bool and
    the labels in that order (n,); None and None for one series."""
    col = series.label_column(model.kernel)
    if col is None:
        return (*_sorted(model, X, y), None, None)
    xp = model.xp
    t = _high(xp, X[:, 0])
    order, reset = series.arrange(xp, t, X[:, col])
    resid = _high(xp, xp.take(y, order)) - _high(xp, model.mean)
    return xp.take(t, order), order, resid, reset, xp.take(X[:, col], order)


def _located(model, state, Xnew):
    """``predict_at``'s ``at`` for several series (None for one)."""
    col = series.label_column(model.kernel)
    if col is None:
        return None
    xp = model.xp
    return series.locate(state["t"], state["labels"], _high(xp, Xnew[:, 0]), Xnew[:, col], xp)


def _noise(model):
    xp = model.xp
    return _high(xp, model.likelihood.variance) + float(model.jitter)


def lml(model, X, y, need_grad):
    """Log marginal likelihood on (X, y) and (``need_grad``) its gradients, keyed like
    ``model.parameters()``."""
    xp = model.xp
    form = series.form(model.kernel)
    t, _, resid, reset, _ = _sequence(model, X, y)
    dt = _steps(xp, t) if reset is None else xp.where(reset, xp.zeros_like(t), _steps(xp, t))
    value, parts = lml_blocked(form, dt, resid, _noise(model), need_grad,
                               L=STEPS_PER_BLOCK, reset=reset)
    value = model._scalar(value)
    if not need_grad:
        return value, None
    d_kernel, d_R, d_y = parts
    params = model.kernel.parameters()
    grads = {"mean": model._scalar(-d_y)}
    for i, name in enumerate(form.names):
        grads[f"kernel.{name}"] = model._shaped(d_kernel[i], params[name].shape)
    grads["likelihood.variance"] = model._shaped(d_R, model.likelihood.variance.shape)
    return value, grads


# ------------------------------------------------------------------------ predictions
def prediction_state(model):
    """Filtered and smoothed moments at the sorted training inputs (what every prediction
    needs), computed once per :meth:`GPR.predict_f` call."""
    xp = model.xp
    form = series.form(model.kernel)
    t, _, resid, reset, labels = _sequence(model, model.X, model.y)
    state = smoother.smoothed_state(form, t, resid[:, None], _noise(model), xp, reset)
    state["labels"] = labels
    return state


def predict(model, Xnew, state, full_cov):
    """Posterior mean and variance of f at ``Xnew`` (m, 1), in the model's dtype."""
    xp = model.xp
    form = series.form(model.kernel)
    tnew = _high(xp, Xnew[:, 0])
    at = _located(model, state, Xnew)
    mean, var = smoother.predict_at(form, state, tnew, xp, at)
    mean = mean[:, 0] + _high(xp, model.mean)
    if full_cov:
        # K_** - K_*X K_y^{-1} K_X*: the smoothed means of the m columns of K_X* as data
        # (one smoother pass with m right-hand sides; O(n m) memory)
        t, order, _, reset, _ = _sequence(model, model.X, model.y)
        K_xs = _high(xp, model.kernel(xp.take(model.X, order, axis=0), Xnew))
        cols = smoother.smoothed_state(form, t, K_xs, _noise(model), xp, reset)
        proj, _ = smoother.predict_at(form, cols, tnew, xp, at)
        cov = _high(xp, model.kernel(Xnew)) - proj
        return xp.astype(mean, model.dtype), xp.astype(cov, model.dtype)
    return xp.astype(mean, model.dtype), xp.astype(var, model.dtype)


def sample_f(model, X, num_samples, seed, jitter):
    """Posterior samples of f at ``X`` (m, 1) by pathwise conditioning (Wilson et al. 2020):
    a joint prior draw ``(f_X + e, f_*)`` by the state-space recursion, then
    ``f_* + K_*X K_y^{-1} (y - c - f_X - e)``, the second term the smoothed mean of the
    residual data (one smoother pass for all samples)."""
    xp = model.xp
    form = series.form(model.kernel)
    col = series.label_column(model.kernel)
    n, m = model.X.shape[0], X.shape[0]
    high = xp.float64
    dev = device_of(model.X)
    t_train = _high(xp, model.X[:, 0])
    t_new = _high(xp, X[:, 0])
    rng = default_rng(seed, xp=xp, device=dev)
    t_all = xp.concat([t_train, t_new])
    arrangement = None if col is None else series.arrange(
        xp, t_all, xp.concat([model.X[:, col], X[:, col]]))
    f_all = smoother.prior_draw(form, t_all, num_samples, rng, xp, arrangement)
    R = _noise(model)
    eps = rng.normal((n, num_samples), dtype=high) * xp.sqrt(R)
    f_train, f_new = f_all[:n, :], f_all[n:, :]
    if jitter > 0.0:
        f_new = f_new + rng.normal((m, num_samples), dtype=high) * (jitter ** 0.5)
    t, order, resid, reset, labels = _sequence(model, model.X, model.y)
    data = resid[:, None] - xp.take(f_train + eps, order, axis=0)
    state = smoother.smoothed_state(form, t, data, R, xp, reset)
    state["labels"] = labels
    update, _ = smoother.predict_at(form, state, t_new, xp, _located(model, state, X))
    samples = _high(xp, model.mean) + f_new + update
    return xp.astype(samples.T, model.dtype, copy=False)
