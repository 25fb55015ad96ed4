"""The default training recipe: one for :func:`gpnum.fit`, ``gpnum fit`` and the scikit-learn
estimators, chosen by the sweep in docs/benchmarks.md ("The default recipe").

Minibatch training runs ``EPOCHS`` passes over the data or ``MIN_STEPS`` steps, whichever is
more: a fixed number of epochs gives a 768-row set 60 steps in all (energy: test RMSE 0.174
after 20 epochs, 0.046 after 1,500 steps) and a 100,000-row set 8,000.
"""

from __future__ import annotations

from types import MappingProxyType

from gpnum.errors import check_int

__all__ = ["BATCH_SIZE", "DEFAULT_RECIPE", "EPOCHS", "GAMMA", "LR", "MIN_STEPS", "default_epochs"]

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

#: The recipe as one read-only mapping (what the docs and the command line's help print).
DEFAULT_RECIPE = MappingProxyType({"epochs": EPOCHS, "min_steps": MIN_STEPS,
                                   "batch_size": BATCH_SIZE, "lr": LR, "gamma": GAMMA})


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
