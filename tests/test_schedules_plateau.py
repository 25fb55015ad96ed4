"""PlateauDecay: the rule by hand, inside fit, and across a save / resume."""

import numpy as np
import pytest

import gpnum
from gpnum.optim import PlateauDecay


def test_cuts_after_patience_epochs_without_improvement():
    s = PlateauDecay(0.1, factor=0.5, patience=2, min_delta=0.01, max_decays=2)
    rates = []
    for nll in [1.0, 0.9, 0.895, 0.893, 0.7, 0.71, 0.72, 0.73, 0.74, 0.75, 0.76]:
        rates.append(s(0))
        s.observe({"nll": nll})
    # 0.895 and 0.893 are within min_delta of 0.9: the second of them cuts; 0.7 is better;
    # 0.71, 0.72 cut again; max_decays holds the rate at 0.025 after that.
    assert rates == [0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025]
    s.reset()
    assert s(3) == 0.1 and s.state_dict() == {"best": None, "bad_epochs": 0, "num_decays": 0}


@pytest.mark.parametrize("kwargs,message", [
    ({"factor": 1.0}, "factor: expected a number in (0, 1)"),
    ({"patience": 0}, "patience"),
    ({"min_delta": -1.0}, "min_delta"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PlateauDecay(0.1, **kwargs)


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=120)
    return X[:90], y[:90], X[90:], y[90:]


def test_fit_applies_the_rate_it_observed_and_needs_validation_data():
    X, y, Xv, yv = _data()
    model = gpnum.models.build_model(X, num_inducing=10)
    sched = PlateauDecay(0.05, factor=0.5, patience=1)
    hist = gpnum.fit(model, X, y, epochs=40, batch_size=30, lr_schedule=sched, X_val=Xv, y_val=yv,
                     progress=False)
    ref = PlateauDecay(0.05, factor=0.5, patience=1)
    for v in hist.val[:-1]:
        ref.observe(v)
    # the last epoch ran at the rate decided by the epochs before it
    assert model.training_state.adam.lr == 0.05 * 0.5**ref.num_decays
    ref.observe(hist.val[-1])
    assert sched.state_dict() == ref.state_dict()
    assert ref.num_decays >= 1  # noisy targets: the validation NLL does plateau here
    with pytest.raises(ValueError, match="pass X_val and y_val"):
        gpnum.fit(model, X, y, epochs=2, lr_schedule=sched, progress=False)


def test_the_training_objective_needs_no_validation_data():
    """metric="objective": each epoch's score is minus the epoch's mean minibatch ELBO per data
    point, read back from the history; with validation data given it still decides."""
    X, y, Xv, yv = _data()
    for val in ({}, {"X_val": Xv, "y_val": yv}):
        model = gpnum.models.build_model(X, num_inducing=10)
        sched = PlateauDecay(0.05, factor=0.5, patience=1, metric="objective")
        hist = gpnum.fit(model, X, y, epochs=30, batch_size=30, lr_schedule=sched,
                         progress=False, **val)
        ref = PlateauDecay(0.05, factor=0.5, patience=1, metric="objective")
        for e in hist.epoch_elbo:
            ref.observe({"objective": -e / X.shape[0]})
        assert sched.state_dict() == ref.state_dict()
        assert ref.num_decays >= 1


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    X, y, Xv, yv = _data()
    kw = dict(batch_size=30, X_val=Xv, y_val=yv, progress=False, seed=3)
    a = gpnum.models.build_model(X, num_inducing=10)
    gpnum.fit(a, X, y, epochs=8, lr_schedule=PlateauDecay(0.05, factor=0.5), **kw)
    b = gpnum.models.build_model(X, num_inducing=10)
    gpnum.fit(b, X, y, epochs=4, lr_schedule=PlateauDecay(0.05, factor=0.5), **kw)
    gpnum.save(b, str(tmp_path / "b.npz"))
    c = gpnum.load(str(tmp_path / "b.npz"))
    gpnum.fit(c, X, y, epochs=8, lr_schedule=PlateauDecay(0.05, factor=0.5), resume=True, **kw)
    assert c.training_state.schedule == a.training_state.schedule
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(c.parameters()[k]), err_msg=k)
