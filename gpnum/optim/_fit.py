"""The training loop: minibatches, natural gradients for q alternating with Adam for the rest.

The seed-000 protocol (Pleiss et al. 2020): each step takes one minibatch, one natural-gradient
step on ``q(u')`` and one Adam step on every other parameter (kernel, likelihood, inducing points,
mean), both from the same ELBO evaluation (as GPyTorch does with two optimisers on one loss).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

from gpnum import backend as B
from gpnum.errors import ConvergenceWarning
from gpnum.optim._adam import Adam
from gpnum.optim._ngd import NaturalGradient

__all__ = ["fit", "History", "TrainingState"]


@dataclass
class History:
    """What :func:`fit` recorded.

    Attributes
    ----------
    step_elbo : list of float
        Minibatch ELBO estimate (scaled to the whole data set) at each step, before the update.
    step_time : list of float
        Wall-clock seconds since the start of training at the end of each step.
    epoch_elbo : list of float
        Mean minibatch ELBO over each epoch.
    val : list of dict
        Validation metrics after each epoch (when validation data is given).
    first_epoch : int
        The epoch this call of :func:`fit` started at (0, or the checkpoint's epoch when resumed).
    stopped : str or None
        Why training stopped early, if it did.
    solver_warnings : int
        How many solver calls (CIQ's msMINRES, PCG) stopped short of their tolerance; they are
        reported once, as one ConvergenceWarning, at the end of :func:`fit`.
    """

    step_elbo: list = field(default_factory=list)
    step_time: list = field(default_factory=list)
    epoch_elbo: list = field(default_factory=list)
    val: list = field(default_factory=list)
    first_epoch: int = 0
    stopped: str | None = None
    solver_warnings: int = 0

    @property
    def num_steps(self) -> int:
        return len(self.step_elbo)


@dataclass
class TrainingState:
    """Everything :func:`fit` needs to resume exactly: optimisers, counters, RNG state.

    Kept on the model as ``model.training_state`` after :func:`fit` and saved with it by
    ``model.save``.
    """

    epoch: int
    step: int
    rng_state: str
    adam: Adam
    ngd: NaturalGradient | None
    seed: int
    last_error: str | None = None


def _as_batches(X, y, batch_size, rng):
    """Index order of one epoch: a random permutation in blocks of ``batch_size``."""
    n = X.shape[0]
    perm = rng.host().permutation(n)
    return [perm[i:i + batch_size] for i in range(0, n, batch_size)]


def _take(xp, a, idx, device):
    return xp.take(a, B.asarray(idx, dtype=xp.int64, xp=xp, device=device), axis=0)


def _split_q(grads, form):
    q_names = ("q_mu", "q_sqrt") if form == "cholesky" else ()
    return {k: v for k, v in grads.items() if k not in q_names}


def _first_nonfinite(xp, named):
    for k, v in named.items():
        if not bool(xp.all(xp.isfinite(v))):
            return k
    return None


def fit(model, X=None, y=None, *, epochs=20, batch_size=256, optimizer="ngd", lr=0.01,
        gamma=0.1, ngd_method="dense", lr_schedule=None, gamma_schedule=None, batches=None,
        X_val=None, y_val=None, callbacks=(), progress=True, seed=0, resume=False,
        clip_curvature=True):
    """Train an SVGP by stochastic variational inference.

    Parameters
    ----------
    model : gpnum.SVGP
    X, y : arrays (n, d), (n,)
        Training data on any backend (converted to the model's). Alternatively ``batches``.
    epochs : int
        Total number of passes over the data. With ``resume=True`` training continues from the
        epoch stored in ``model.training_state`` up to this total.
    batch_size : int
    optimizer : {"ngd", "adam"}
        ``"ngd"``: natural gradients for ``q`` alternating with Adam for everything else (the
        seed-000 protocol); ``"adam"``: Adam on every parameter.
    lr : float
        Adam's learning rate (or its initial value under ``lr_schedule``).
    gamma : float
        Natural-gradient step size (ignored with ``optimizer="adam"``).
    ngd_method : {"dense", "krylov"}
        Natural-gradient algebra (default ``"dense"``, for both whitenings). ``"krylov"`` holds q
        as natural parameters and needs only PCG solves with the precision, O(J m^2 b) per step
        with no O(m^3) operation; the precision's condition number grows like
        ``num_data / noise``, so J is in the hundreds and the dense O(m^3) step is cheaper unless
        ``J b << m / 3`` (very large m).
    lr_schedule, gamma_schedule : callable, optional
        ``epoch -> lr`` and ``step -> gamma`` (see :func:`gpnum.optim.step_decay` for the
        seed-000 decay at epochs 1, 5, 10, 15, and :func:`gpnum.optim.warmup`).
    batches : callable, optional
        For data that does not fit in memory: ``batches(epoch)`` returns an iterable of
        ``(X_b, y_b)`` minibatches for that epoch (then ``X``, ``y`` are not used).
    X_val, y_val : arrays, optional
        Validation data: RMSE (or accuracy) and NLL are recorded after each epoch.
    callbacks : sequence of callables
        Each is called as ``cb(model, history, epoch)`` after every epoch; returning ``True``
        stops training.
    progress : bool
        Show a progress bar that moves once per step, with the step's minibatch ELBO (the value
        ``History.step_elbo`` records), the epoch and an ETA (tqdm when installed, else one line
        per epoch with an ETA).
    seed : int
        Seed of the minibatch order.
    clip_curvature : bool
        Natural gradients with ``min(g_var, 0)`` (see :class:`gpnum.optim.NaturalGradient`):
        a no-op for log-concave likelihoods, and what keeps Student-t training stable.
    resume : bool
        Continue from ``model.training_state`` (optimiser state, counters, RNG): a resumed run
        matches an uninterrupted one exactly.

    Returns
    -------
    History

    Notes
    -----
    Defaults: NGD ``gamma = 0.1`` and Adam ``lr = 0.01`` without decay. On ~15k points that
    reaches published SVGP accuracy within 20 epochs; the seed's 10x decays at epochs
    1, 5, 10, 15 suit its 300k-point sets and stop far short on small ones, so they are opt-in.
    A non-finite ELBO or parameter stops training with the parameters of the last good step
    restored and a warning naming the parameter.
    """
    xp = model.xp
    if optimizer not in ("ngd", "adam"):
        raise ValueError(f"optimizer: expected 'ngd' or 'adam', got {optimizer!r}")
    epochs = int(epochs)
    batch_size = int(batch_size)
    if epochs < 0 or batch_size < 1:
        raise ValueError(f"epochs >= 0 and batch_size >= 1 expected, got {epochs}, {batch_size}")
    if batches is None:
        if X is None or y is None:
            raise ValueError("fit: pass X and y, or a batches callable")
        X = model._check_X(X)
        y = model._check_y(y, X.shape[0])
        if X.shape[0] > model.num_data:
            raise ValueError(f"num_data: the model says {model.num_data} points but X has "
                             f"{X.shape[0]}")
    if resume:
        state = getattr(model, "training_state", None)
        if state is None:
            raise ValueError("resume=True but the model has no training_state (train or load a "
                             "checkpoint first)")
        if gamma_schedule is not None and state.ngd is not None:
            state.ngd.gamma = gamma_schedule  # schedules are code: they are not saved
    else:
        ngd = (NaturalGradient(gamma_schedule if gamma_schedule is not None else gamma,
                               ngd_method, clip_curvature=clip_curvature)
               if optimizer == "ngd" else None)
        rng0 = B.default_rng(seed)
        state = TrainingState(epoch=0, step=0, rng_state=rng0.get_state(), adam=Adam(lr=lr),
                              ngd=ngd, seed=int(seed))
    if state.ngd is None:
        model.to_cholesky()  # Adam works on q_mu, q_sqrt
    model.training_state = state
    rng = B.default_rng(state.seed)
    rng.set_state(state.rng_state)
    if state.ngd is not None:
        state.ngd.prepare(model)
    history = History(first_epoch=state.epoch)
    with warnings.catch_warnings(record=True) as caught:
        # Solver warnings of every step would bury the progress bar: count them, report once.
        warnings.simplefilter("always", ConvergenceWarning)
        _fit_loop(model, X, y, state, history, rng, epochs, batch_size, lr_schedule, batches,
                  X_val, y_val, callbacks, progress)
    solver = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    for w in caught:
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    history.solver_warnings = len(solver)
    if solver:
        warnings.warn(f"{len(solver)} solver call(s) during training stopped short of their "
                      f"tolerance (over {history.num_steps} steps); the first: "
                      f"{solver[0].message}", ConvergenceWarning, stacklevel=2)
    return history


def _fit_loop(model, X, y, state, history, rng, epochs, batch_size, lr_schedule, batches,
              X_val, y_val, callbacks, progress):
    xp = model.xp
    t_start = time.perf_counter()
    steps_per_epoch = None if batches is not None else -(-X.shape[0] // batch_size)
    bar = _Progress(progress, epochs, state.epoch, steps_per_epoch)
    try:
        for epoch in range(state.epoch, epochs):
            if lr_schedule is not None:
                state.adam.lr = float(lr_schedule(epoch))
            if batches is None:
                it = ((_take(xp, X, idx, model._device), _take(xp, y, idx, model._device))
                      for idx in _as_batches(X, y, batch_size, rng))
            else:
                it = batches(epoch)
            elbos = []
            for Xb, yb in it:
                value = _train_step(model, state, Xb, yb)
                if value is None:
                    history.stopped = state.last_error
                    warnings.warn(f"fit stopped at epoch {epoch}, step {state.step}: "
                                  f"{state.last_error}", RuntimeWarning, stacklevel=4)
                    return
                elbos.append(value)
                history.step_elbo.append(value)
                history.step_time.append(time.perf_counter() - t_start)
                bar.step(epoch, value)
            state.epoch = epoch + 1
            state.rng_state = rng.get_state()
            history.epoch_elbo.append(sum(elbos) / max(len(elbos), 1))
            if X_val is not None and y_val is not None:
                history.val.append(evaluate(model, X_val, y_val))
            bar.epoch_done(epoch, history, time.perf_counter() - t_start)
            if any(cb(model, history, epoch) for cb in callbacks):
                history.stopped = f"stopped by a callback after epoch {epoch + 1}"
                break
    finally:
        bar.close()


def _train_step(model, state, Xb, yb):
    """One NGD + Adam (or Adam only) step; returns the minibatch ELBO, or None if it went bad."""
    xp = model.xp
    before = {k: v for k, v in model.parameters().items()}
    value, grads, data = model.elbo_and_grad(Xb, yb, return_data=True)
    v = float(value)
    if not math.isfinite(v):
        bad = _first_nonfinite(xp, grads) or "the ELBO"
        state.last_error = f"non-finite ELBO ({v}); first non-finite gradient: {bad}"
        return None
    hyper = _split_q(grads, model.variational_form) if state.ngd is not None else grads
    hyper_u = model.grad_to_unconstrained(hyper)
    bad = _first_nonfinite(xp, hyper_u)
    if bad is not None:
        state.last_error = f"non-finite gradient of {bad}"
        return None
    if state.ngd is not None:
        state.ngd.step(model, data=data)
    current_u = model.unconstrained()
    new_u = state.adam.step({k: current_u[k] for k in hyper_u}, hyper_u, maximize=True)
    model.set_unconstrained(new_u)
    bad = _first_nonfinite(xp, model.parameters())
    if bad is not None:
        model.set_parameters(before)
        state.last_error = f"parameter {bad} became non-finite; restored the last good values"
        return None
    state.step += 1
    return v


def evaluate(model, X, y):
    """Test metrics: RMSE (regression) or accuracy (classification) and mean NLL.

    Returns
    -------
    dict with ``rmse`` or ``accuracy``, and ``nll`` (mean negative log predictive density).
    """
    xp = model.xp
    X = model._check_X(X, "X_val")
    y = model._check_y(y, X.shape[0])
    mean, _ = model.predict_y(X)
    nll = -float(xp.mean(model.log_predictive_density(X, y)))
    lik = type(model.likelihood).__name__
    if lik in ("Bernoulli",):
        acc = float(xp.mean(xp.astype((mean > 0.5) == (y > 0.5), model.dtype)))
        return {"accuracy": acc, "nll": nll}
    if mean.ndim == 2:  # multiclass probabilities
        pred = xp.argmax(mean, axis=1)
        acc = float(xp.mean(xp.astype(pred == xp.astype(y, pred.dtype), model.dtype)))
        return {"accuracy": acc, "nll": nll}
    rmse = float(xp.sqrt(xp.mean((mean - y) ** 2)))
    return {"rmse": rmse, "nll": nll}


class _Progress:
    """The progress display of :func:`fit`: a tqdm bar in steps, or one line per epoch.

    The bar's total is the number of steps still to run (known when ``fit`` draws the
    minibatches itself), so tqdm's ETA is the time left; its postfix shows the epoch and the last
    step's minibatch ELBO, the value ``History.step_elbo`` records.
    """

    def __init__(self, enabled, epochs, first_epoch, steps_per_epoch):
        self.enabled = bool(enabled)
        self.epochs = epochs
        self.first_epoch = first_epoch
        self.bar = None
        if not self.enabled or epochs <= first_epoch:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        total = None if steps_per_epoch is None else (epochs - first_epoch) * steps_per_epoch
        self.bar = tqdm(total=total, unit="step", leave=True, dynamic_ncols=True)

    def step(self, epoch, value):
        if self.bar is not None:
            self.bar.set_postfix_str(f"epoch {epoch + 1}/{self.epochs} elbo {value:.6g}",
                                     refresh=False)
            self.bar.update(1)

    def epoch_done(self, epoch, history, elapsed):
        if self.bar is not None or not self.enabled:
            return
        done = epoch + 1 - self.first_epoch
        eta = elapsed / done * (self.epochs - epoch - 1)
        msg = f"epoch {epoch + 1}/{self.epochs}: mean ELBO {history.epoch_elbo[-1]:.6g}"
        if history.val:
            msg += "  " + "  ".join(f"val {k} {v:.4g}" for k, v in history.val[-1].items())
        print(msg + f"  ({elapsed:.1f} s, ETA {eta:.0f} s)", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
