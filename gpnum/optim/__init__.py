"""Optimisers and the training loop: Adam, natural gradients, schedules, ``fit``."""

from gpnum.optim._adam import Adam
from gpnum.optim._defaults import DEFAULT_RECIPE, TiedStep, default_epochs, default_schedules
from gpnum.optim._evaluate_outputs import evaluate_outputs
from gpnum.optim._exact_recipe import fit_exact_gp
from gpnum.optim._fit import History, TrainingState, evaluate, fit
from gpnum.optim._gvi_recipe import gvi_by_selection
from gpnum.optim._lbfgs import LBFGSResult, lbfgs
from gpnum.optim._ngd import NaturalGradient, natural_statistics
from gpnum.optim._schedules import PlateauDecay, constant, step_decay, warmup
from gpnum.optim._select import InducingSelection, select_inducing

__all__ = ["Adam", "DEFAULT_RECIPE", "TiedStep", "default_epochs", "default_schedules", "History",
           "InducingSelection", "LBFGSResult", "NaturalGradient", "PlateauDecay", "TrainingState",
           "constant", "fit_exact_gp", "evaluate", "evaluate_outputs", "fit", "gvi_by_selection", "lbfgs",
           "natural_statistics", "select_inducing", "step_decay", "warmup"]
