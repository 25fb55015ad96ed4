"""Step-size schedules: callables mapping an epoch (or step) index ``t = 0, 1, ...`` to a value.

The fixed schedules hold no state, so a resumed run gets the same value from the same index.
:class:`PlateauDecay` adapts to the validation metrics :func:`gpnum.fit` records; its few
numbers of state travel in the training state (and so in checkpoints). Typical use::

    lr = step_decay(0.01, milestones=[1, 5, 10, 15])      # Pleiss et al. 2020: 10x decay at these epochs
    gamma = warmup(0.1, num_steps=20)                     # natural-gradient step size
    for epoch in range(epochs):
        adam.lr = lr(epoch)
        ...
"""

from __future__ import annotations

from gpnum.errors import check_int, check_positive

__all__ = ["Constant", "PlateauDecay", "StepDecay", "Warmup", "constant", "step_decay", "warmup"]


def _index(t, name="t") -> int:
    """Validate an epoch/step index: a non-negative integer."""
    return check_int(t, name)


class Constant:
    """The same value at every index; see :func:`constant`."""

    def __init__(self, value):
        self.value = check_positive(value, "value")

    def __call__(self, t) -> float:
        _index(t)
        return self.value

    def __repr__(self):
        return f"constant({self.value!r})"


class StepDecay:
    """``value * factor ** (number of milestones <= t)``; see :func:`step_decay`."""

    def __init__(self, value, milestones, factor=0.1):
        self.value = check_positive(value, "value")
        try:
            marks = [_index(mk, "milestones") for mk in milestones]
        except TypeError as exc:
            if "milestones" in str(exc):
                raise
            raise TypeError(f"milestones: expected a sequence of integers >= 0, got "
                            f"{milestones!r}") from None
        if any(b <= a for a, b in zip(marks, marks[1:], strict=False)):
            raise ValueError(f"milestones: expected strictly increasing integers, got {marks}")
        self.milestones = tuple(marks)
        factor = check_positive(factor, "factor")
        if factor > 1.0:
            raise ValueError(f"factor: expected a number in (0, 1], got {factor!r}")
        self.factor = factor

    def __call__(self, t) -> float:
        t = _index(t)
        passed = sum(1 for mk in self.milestones if mk <= t)
        return self.value * self.factor**passed

    def __repr__(self):
        return f"step_decay({self.value!r}, milestones={list(self.milestones)}, " \
               f"factor={self.factor!r})"


class Warmup:
    """Linear ramp from ``start`` to ``value`` over ``num_steps``; see :func:`warmup`."""

    def __init__(self, value, num_steps, start=None):
        self.value = check_positive(value, "value")
        self.num_steps = _index(num_steps, "num_steps")
        if start is None:
            start = self.value / self.num_steps if self.num_steps else self.value
        self.start = check_positive(start, "start", allow_zero=True)

    def __call__(self, t) -> float:
        t = _index(t)
        if t >= self.num_steps:
            return self.value
        return self.start + (self.value - self.start) * (t / self.num_steps)

    def __repr__(self):
        return f"warmup({self.value!r}, num_steps={self.num_steps}, start={self.start!r})"


def constant(value) -> Constant:
    """The schedule ``t -> value``.

    Parameters
    ----------
    value : float
        The value, > 0.
    """
    return Constant(value)


def step_decay(value, milestones, factor=0.1) -> StepDecay:
    """Piecewise-constant decay: ``t -> value * factor ** #{milestones <= t}``.

    The step-size schedule of the SVGP experiments of Pleiss et al. (2020): Adam's
    learning rate 0.01, decayed 10x at epochs 1, 5, 10 and 15, i.e.
    ``step_decay(0.01, [1, 5, 10, 15])``; epochs are counted from 0, so epoch 0 uses ``value``
    and epoch 1 already the first decayed value.

    Parameters
    ----------
    value : float
        Value before the first milestone, > 0.
    milestones : sequence of int
        Strictly increasing indices >= 0 at which the value is multiplied by ``factor``.
    factor : float
        Multiplier in (0, 1] applied at each milestone.
    """
    return StepDecay(value, milestones, factor)


def warmup(value, num_steps, start=None) -> Warmup:
    """Linear warm-up: ``t -> start + (value - start) * t / num_steps`` for ``t < num_steps``,
    then ``value``.

    Used for the natural-gradient step size ``gamma``: with non-conjugate likelihoods a full step
    from a poor initial ``q`` can leave the positive-definite cone, and a few small steps first
    avoid that (Salimbeni, Eleftheriadis & Hensman 2018, "Natural gradients in practice", increase
    gamma over the first iterations for the same reason).

    Parameters
    ----------
    value : float
        Final value, > 0, reached at ``t = num_steps``.
    num_steps : int
        Length of the ramp, >= 0 (0: no warm-up).
    start : float, optional
        Value at ``t = 0``, >= 0. Default ``value / num_steps``: a small but useful first step
        (0 would waste it).
    """
    return Warmup(value, num_steps, start)


class PlateauDecay:
    """Adam's learning rate, cut by ``factor`` after ``patience`` epochs without a better
    validation score; a schedule that adapts to the data.

    :func:`gpnum.fit` reads the rate for each epoch by calling the schedule with the epoch
    index, and after each epoch shows it that epoch's metrics through :meth:`observe`: the
    validation metrics (when ``X_val``, ``y_val`` are given) and ``"objective"``, the training
    objective per data point (minus the epoch's mean minibatch ELBO over ``num_data``), which
    needs no validation data. The score is the validation NLL by default (``metric="nll"``);
    "better" means lower than the best so far by more than ``min_delta``. Once the rate has been
    cut ``max_decays`` times it stays.

    Parameters
    ----------
    value : float
        The initial rate, > 0.
    factor : float in (0, 1)
        Multiplier at each cut.
    patience : int >= 1
        Epochs without improvement before a cut.
    min_delta : float >= 0
        Improvement that counts.
    max_decays : int >= 0
        Cuts at most.
    metric : str
        Key of the metrics to minimise: ``"nll"``, ``"rmse"`` (validation data needed) or
        ``"objective"`` (the training objective).

    Notes
    -----
    The state (best score, epochs since it, cuts so far) is a dict of numbers
    (:meth:`state_dict`), kept in ``model.training_state.schedule`` so that a resumed run cuts
    where an uninterrupted one does.
    """

    def __init__(self, value, *, factor=0.3, patience=1, min_delta=0.0, max_decays=3,
                 metric="nll"):
        self.value = check_positive(value, "value")
        factor = check_positive(factor, "factor")
        if not factor < 1.0:
            raise ValueError(f"factor: expected a number in (0, 1), got {factor!r}")
        self.factor = factor
        self.patience = check_int(patience, "patience", minimum=1)
        self.min_delta = check_positive(min_delta, "min_delta", allow_zero=True)
        self.max_decays = check_int(max_decays, "max_decays")
        if not isinstance(metric, str):
            raise TypeError(f"metric: expected a metric name such as 'nll', got {metric!r}")
        self.metric = metric
        self.reset()

    def reset(self) -> None:
        """Forget what was observed (:func:`gpnum.fit` calls it at the start of a new run)."""
        self.best = None
        self.bad_epochs = 0
        self.num_decays = 0

    def __call__(self, t) -> float:
        _index(t)
        return self.value * self.factor**self.num_decays

    def observe(self, metrics) -> None:
        """Take one epoch's validation metrics (a dict with ``metric``) into account."""
        try:
            score = float(metrics[self.metric])
        except (KeyError, TypeError):
            raise ValueError(f"PlateauDecay: the validation metrics {metrics!r} have no "
                             f"{self.metric!r}") from None
        if self.best is None or score < self.best - self.min_delta:
            self.best, self.bad_epochs = score, 0
            return
        self.bad_epochs += 1  # a NaN score counts as no improvement
        if self.bad_epochs >= self.patience and self.num_decays < self.max_decays:
            self.num_decays += 1
            self.bad_epochs = 0

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_epochs": self.bad_epochs, "num_decays": self.num_decays}

    def load_state_dict(self, state) -> None:
        self.best = None if state.get("best") is None else float(state["best"])
        self.bad_epochs = int(state["bad_epochs"])
        self.num_decays = int(state["num_decays"])

    def __repr__(self):
        return (f"PlateauDecay({self.value!r}, factor={self.factor!r}, "
                f"patience={self.patience}, min_delta={self.min_delta!r}, "
                f"max_decays={self.max_decays}, metric={self.metric!r})")
