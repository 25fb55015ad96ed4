"""The default training recipe (issue 36): one set of defaults for gpnum.fit, the command line
and the scikit-learn estimators; the plateau rule that cuts Adam's rate and the natural-gradient
step together."""

import inspect
import math

import numpy as np
import pytest

import gpnum
from gpnum import kernels, likelihoods
from gpnum.cli import build_parser
from gpnum.optim import DEFAULT_RECIPE, PlateauDecay, TiedStep, default_epochs, default_schedules


@pytest.mark.parametrize("n, batch", [(12449, 256), (691, 256), (100_000, 256), (1, 256),
                                      (5000, 50)])
def test_default_epochs_is_20_epochs_or_1500_steps_whichever_is_more(n, batch):
    steps_per_epoch = math.ceil(n / batch)
    expected = max(20, math.ceil(1500 / steps_per_epoch))
    assert default_epochs(n, batch) == expected
    assert default_epochs(n, batch) * steps_per_epoch >= 1500


def test_default_epochs_refuses_bad_sizes():
    with pytest.raises(ValueError, match="num_data"):
        default_epochs(0)
    with pytest.raises(ValueError, match="batch_size"):
        default_epochs(100, 0)


@pytest.mark.parametrize("spe, patience", [(None, 2), (49, 3), (3, 34), (100, 2), (1000, 2)])
def test_default_schedules_patience_is_2_epochs_or_100_steps(spe, patience):
    lr_s, gamma_s = default_schedules(0.03, 0.1, spe)
    assert isinstance(lr_s, PlateauDecay) and lr_s.metric == "objective"
    assert lr_s.patience == patience
    assert (lr_s.factor, lr_s.max_decays) == (0.3, 2)
    assert gamma_s.schedule is lr_s


def test_the_natural_gradient_step_is_cut_with_adams_rate():
    lr_s, gamma_s = default_schedules(0.03, 0.1, 1000)  # patience 2 epochs
    seen = []
    for objective in [5.0, 4.0, 4.5, 4.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6]:
        lr_s.observe({"objective": objective})
        seen.append((lr_s(0), gamma_s(0)))
    # cut at the 2nd observation in a row without a new best (the 4th), again at the 7th (a
    # new best at the 5th restarts the count), then never again (max_decays 2)
    lrs = [0.03] * 3 + [0.009] * 3 + [0.0027] * 5
    np.testing.assert_allclose([a for a, _ in seen], lrs, rtol=1e-15)
    np.testing.assert_allclose([g for _, g in seen], [v / 0.3 for v in lrs], rtol=1e-15)


def test_tied_step_refuses_a_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        TiedStep(-0.1, PlateauDecay(0.03))


def test_command_line_python_and_scikit_learn_defaults_are_the_recipe():
    args = build_parser().parse_args(["fit"])
    assert (args.lr, args.gamma, args.batch_size) == (DEFAULT_RECIPE["lr"], DEFAULT_RECIPE["gamma"],
                                                     DEFAULT_RECIPE["batch_size"])
    assert args.epochs is None and args.lr_schedule == "plateau"
    sig = inspect.signature(gpnum.optim.fit).parameters  # gpnum.fit passes its options on
    assert sig["lr"].default == DEFAULT_RECIPE["lr"] == 0.03
    assert sig["gamma"].default == DEFAULT_RECIPE["gamma"] == 0.1
    assert sig["batch_size"].default == DEFAULT_RECIPE["batch_size"] == 256
    assert sig["epochs"].default is None and sig["lr_schedule"].default == "plateau"
    pytest.importorskip("sklearn")
    from gpnum.sklearn import SVGPClassifier, SVGPRegressor

    for est in (SVGPRegressor(), SVGPClassifier()):
        p = est.get_params()
        # epochs "auto": the recipe from 3,000 rows on, fewer passes below (docs/sklearn.md)
        assert (p["lr"], p["gamma"], p["batch_size"], p["epochs"]) == (0.03, 0.1, 256, "auto")


def test_fit_by_default_trains_1500_steps_and_cuts_both_steps_together():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (40, 1))
    y = np.sin(2.0 * X[:, 0]) + 0.2 * rng.normal(size=40)
    model = gpnum.SVGP(kernels.RBF(lengthscale=[0.7]), likelihoods.Gaussian(variance=0.1),
                       X[::4].copy(), num_data=40)
    seen = []

    def record(model, history, epoch):
        # the rate this epoch trained with, and the step after the epoch's plateau check
        state = model.training_state
        seen.append((state.adam.lr, state.ngd.gamma(state.step)))
        return False

    hist = gpnum.fit(model, X, y, batch_size=10, progress=False, seed=0, callbacks=(record,))
    # 4 steps an epoch: 375 epochs make 1,500 steps
    assert len(hist.epoch_elbo) == 375 and hist.num_steps == 1500
    lrs = np.array([a for a, _ in seen])
    gammas = np.array([g for _, g in seen])
    # the step after epoch e is the one epoch e + 1 trains with: tied to Adam's rate there
    np.testing.assert_allclose(gammas[:-1] / 0.1, lrs[1:] / 0.03, rtol=1e-12)
    # minibatch noise makes the objective plateau here: both cuts happen, no more
    np.testing.assert_allclose(sorted(set(np.round(lrs, 12))), [0.0027, 0.009, 0.03])
    # the cuts follow the rule, re-run on the recorded per-point objectives
    ref = PlateauDecay(0.03, factor=0.3, patience=25, max_decays=2, metric="objective")
    expected = []
    for e in hist.epoch_elbo:
        expected.append(ref(0))
        ref.observe({"objective": -e / 40})
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)
