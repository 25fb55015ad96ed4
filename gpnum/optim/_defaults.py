"""The default training recipe: one for :func:`gpnum.fit`, ``gpnum fit`` and the scikit-learn
estimators, chosen by the sweep in docs/benchmarks.md ("The default recipe").

Minibatch training runs ``EPOCHS`` passes over the data or ``MIN_STEPS`` steps, whichever is
more: a fixed number of epochs gives a 768-row set 60 steps in all (energy: test RMSE 0.174
after 20 epochs, 0.046 after 1,500 steps) and a 100,000-row set 8,000.

Adam starts at ``LR`` and the natural-gradient step at ``GAMMA``; both are cut by
``PLATEAU["factor"]`` (at most ``PLATEAU["max_decays"]`` times) when the training objective per
data point has not improved for ``max(2 epochs, 100 steps)``: a schedule that adapts to the data
(:func:`default_schedules`). No constant rate served every bundled set: 0.03 suits bike and
elevators, 0.01 precipitation and energy; the cut gives each what it needs, since a set that
keeps improving is never cut.
"""

from __future__ import annotations

from types import MappingProxyType

from gpnum.errors import check_int, check_positive
from gpnum.optim._schedules import PlateauDecay

__all__ = ["BATCH_SIZE", "DEFAULT_RECIPE", "EPOCHS", "GAMMA", "LR", "MIN_STEPS", "PLATEAU",
           "TiedStep", "default_epochs", "default_schedules"]

#: Passes over the data at least.
EPOCHS = 20
#: Minibatch steps at least (``default_epochs`` adds epochs on small data sets).
MIN_STEPS = 1500
#: Minibatch size.
BATCH_SIZE = 256
#: Adam's learning rate (hyper-parameters; every parameter with ``optimizer="adam"``).
LR = 0.03
#: Natural-gradient step size for q.
GAMMA = 0.1

#: The cut on a plateau of the training objective: factor, cuts at most, patience in steps
#: (and at least ``min_patience`` epochs).
PLATEAU = MappingProxyType({"factor": 0.3, "max_decays": 2, "patience_steps": 100,
                            "min_patience": 2})

#: The recipe as one read-only mapping (what the docs and the command line's help print).
DEFAULT_RECIPE = MappingProxyType({"epochs": EPOCHS, "min_steps": MIN_STEPS,
                                   "batch_size": BATCH_SIZE, "lr": LR, "gamma": GAMMA,
                                   "schedule": "plateau", **{f"plateau_{k}": v
                                                             for k, v in PLATEAU.items()}})


def default_epochs(num_data, batch_size=BATCH_SIZE) -> int:
    """The default number of epochs for ``num_data`` points in minibatches of ``batch_size``:
    ``max(EPOCHS, ceil(MIN_STEPS / ceil(num_data / batch_size)))``.

    >>> default_epochs(12449), default_epochs(691)  # elevators' and energy's training parts
    (31, 500)
    """
    num_data = check_int(num_data, "num_data", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    steps_per_epoch = -(-num_data // batch_size)
    return max(EPOCHS, -(-MIN_STEPS // steps_per_epoch))


class TiedStep:
    """The natural-gradient step ``gamma`` cut whenever ``schedule`` (a
    :class:`gpnum.optim.PlateauDecay`) cuts Adam's rate: ``step -> gamma * factor**cuts``.

    It holds no state of its own (the cuts are the schedule's, saved in checkpoints), so a
    resumed run steps as an uninterrupted one does.
    """

    def __init__(self, gamma, schedule):
        self.gamma = check_positive(gamma, "gamma")
        self.schedule = schedule

    def __call__(self, step) -> float:
        return self.gamma * self.schedule.factor ** self.schedule.num_decays

    def __repr__(self):
        return f"TiedStep({self.gamma!r}, {self.schedule!r})"


def default_schedules(lr=LR, gamma=GAMMA, steps_per_epoch=None):
    """The default recipe's ``(lr_schedule, gamma_schedule)``.

    A :class:`gpnum.optim.PlateauDecay` on the training objective (``metric="objective"``: no
    validation data needed) with patience ``max(2, ceil(100 / steps_per_epoch))`` epochs (2
    when ``steps_per_epoch`` is None), cutting by 0.3 at most twice, and the natural-gradient
    step tied to it (:class:`TiedStep`).

    Parameters
    ----------
    lr, gamma : float
        Initial Adam rate and natural-gradient step.
    steps_per_epoch : int, optional
    """
    min_patience = PLATEAU["min_patience"]
    patience = (min_patience if steps_per_epoch is None else
                max(min_patience, -(-PLATEAU["patience_steps"]
                                    // check_int(steps_per_epoch, "steps_per_epoch", minimum=1))))
    schedule = PlateauDecay(lr, factor=PLATEAU["factor"], patience=patience,
                            max_decays=PLATEAU["max_decays"], metric="objective")
    return schedule, TiedStep(gamma, schedule)
