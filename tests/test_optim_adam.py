"""Adam and the step-size schedules, against hand-computed NumPy float64 references."""

import io
import math

import numpy as np
import pytest

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.optim._adam import Adam
from gpnum.optim._schedules import constant, step_decay, warmup


def _np(d):
    return {k: B.to_numpy(v).astype(np.float64) for k, v in d.items()}


def _params(to_xp):
    rng = np.random.default_rng(3)
    host = {"a": np.asarray(0.7), "b": rng.normal(size=3), "c": rng.normal(size=(2, 2))}
    return host, {k: to_xp(v) for k, v in host.items()}


def _rtol(xp, dtype):
    return 1e-5 if dtype == xp.float32 else 1e-13


# ------------------------------------------------------------------------------ Adam: values
def test_two_steps_match_hand_computation(xp, dtype, to_xp):
    lr, b1, b2, eps = 0.05, 0.8, 0.99, 1e-6
    host, params = _params(to_xp)
    rng = np.random.default_rng(4)
    g1 = {k: rng.normal(size=v.shape) for k, v in host.items()}
    g2 = {k: rng.normal(size=v.shape) for k, v in host.items()}
    adam = Adam(lr=lr, betas=(b1, b2), eps=eps)
    p1 = adam.step(params, {k: to_xp(v) for k, v in g1.items()})
    p2 = adam.step(p1, {k: to_xp(v) for k, v in g2.items()})
    for k, p0 in host.items():
        # step 1: the bias-corrected moments are g and g^2 exactly
        ref1 = p0 - lr * g1[k] / (np.abs(g1[k]) + eps)
        # step 2 written out: m2 = b1 (1-b1) g1 + (1-b1) g2, v2 likewise, corrected by 1-b^2
        m2 = (b1 * (1 - b1) * g1[k] + (1 - b1) * g2[k]) / (1 - b1**2)
        v2 = (b2 * (1 - b2) * g1[k] ** 2 + (1 - b2) * g2[k] ** 2) / (1 - b2**2)
        ref2 = ref1 - lr * m2 / (np.sqrt(v2) + eps)
        np.testing.assert_allclose(B.to_numpy(p1[k]), ref1, rtol=_rtol(xp, dtype), atol=1e-6)
        np.testing.assert_allclose(B.to_numpy(p2[k]), ref2, rtol=_rtol(xp, dtype), atol=1e-6)
        assert p2[k].dtype == dtype and B.device_of(p2[k]) == B.device_of(params[k])
        assert tuple(p2[k].shape) == host[k].shape
    assert adam.num_steps == 2


def test_maximize_ascends_with_negated_gradient(xp, dtype, to_xp):
    host, params = _params(to_xp)
    grads = {k: to_xp(np.full(v.shape, 2.5)) for k, v in host.items()}
    up = Adam(lr=0.1).step(params, grads, maximize=True)
    down = Adam(lr=0.1).step(params, grads)
    for k, p0 in host.items():
        step = 0.1 * 2.5 / (2.5 + 1e-8)
        np.testing.assert_allclose(B.to_numpy(up[k]), p0 + step, rtol=_rtol(xp, dtype))
        np.testing.assert_allclose(B.to_numpy(down[k]), p0 - step, rtol=_rtol(xp, dtype))


def test_inputs_are_not_modified_and_state_is_lazy(xp, dtype, to_xp):
    host, params = _params(to_xp)
    grads = {k: to_xp(np.ones(v.shape)) for k, v in host.items()}
    before = _np(params), _np(grads)
    adam = Adam()
    assert adam.state_dict()["num_steps"] == 0 and len(adam.state_dict()) == 6
    adam.step(params, grads)
    for k in host:
        np.testing.assert_array_equal(B.to_numpy(params[k]), before[0][k])
        np.testing.assert_array_equal(B.to_numpy(grads[k]), before[1][k])
    state = adam.state_dict()
    for k, v in host.items():
        assert state["exp_avg/" + k].shape == v.shape
        assert state["exp_avg/" + k].dtype == np.dtype(B.to_numpy(params[k]).dtype)
        assert state["step/" + k] == 1


def test_lr_change_between_steps_and_late_parameter(xp, dtype, to_xp):
    adam = Adam(lr=0.1, betas=(0.5, 0.75), eps=1e-3)
    x = adam.step({"x": to_xp(np.array([1.0]))}, {"x": to_xp(np.array([2.0]))})
    adam.lr = 0.01
    # "y" joins at the second step: its own step count gives it a first-step bias correction
    out = adam.step({"x": x["x"], "y": to_xp(np.array([5.0]))},
                    {"x": to_xp(np.array([-1.0])), "y": to_xp(np.array([4.0]))})
    x1 = 1.0 - 0.1 * 2.0 / (2.0 + 1e-3)
    m2 = (0.5 * 0.5 * 2.0 + 0.5 * -1.0) / (1 - 0.25)
    v2 = (0.75 * 0.25 * 4.0 + 0.25 * 1.0) / (1 - 0.75**2)
    np.testing.assert_allclose(B.to_numpy(out["x"]), [x1 - 0.01 * m2 / (math.sqrt(v2) + 1e-3)],
                               rtol=_rtol(xp, dtype))
    np.testing.assert_allclose(B.to_numpy(out["y"]), [5.0 - 0.01 * 4.0 / (4.0 + 1e-3)],
                               rtol=_rtol(xp, dtype))
    # a parameter left out of a step keeps its state untouched
    adam.step({"y": out["y"]}, {"y": to_xp(np.array([1.0]))})
    state = adam.state_dict()
    assert state["step/x"] == 2 and state["step/y"] == 2 and state["num_steps"] == 3


def test_converges_on_an_ill_conditioned_quadratic(xp, dtype, to_xp):
    # f(x) = 1/2 (x - a)^T H (x - a): the minimiser is a; -f is maximised at a too
    a = np.array([1.0, -2.0, 0.5])
    H = np.array([[10.0, 1.0, 0.0], [1.0, 1.0, 0.2], [0.0, 0.2, 0.1]])
    Hx, ax = to_xp(H), to_xp(a)
    for maximize in (False, True):
        adam = Adam(lr=0.2)
        params = {"x": to_xp(np.zeros(3))}
        for it in range(250):
            if it == 150:
                adam.lr = 0.02
            g = Hx @ (params["x"] - ax)
            params = adam.step(params, {"x": -g if maximize else g}, maximize=maximize)
        np.testing.assert_allclose(B.to_numpy(params["x"]), a, atol=1e-3)


# -------------------------------------------------------------------- Adam: checkpointing
def test_state_round_trip_continues_bit_identically(xp, dtype, to_xp):
    host, params = _params(to_xp)
    rng = np.random.default_rng(5)
    grads = [{k: to_xp(rng.normal(size=v.shape)) for k, v in host.items()} for _ in range(6)]

    straight = Adam(lr=0.03)
    p = params
    for g in grads:
        p = straight.step(p, g, maximize=True)

    first = Adam(lr=0.03)
    q = params
    for g in grads[:3]:
        q = first.step(q, g, maximize=True)
    buf = io.BytesIO()
    np.savez(buf, **first.state_dict())
    buf.seek(0)
    saved = dict(np.load(buf))
    resumed = Adam(lr=1.0, betas=(0.1, 0.2), eps=1.0)  # every setting comes from the file
    resumed.load_state_dict(saved, like=q)
    assert (resumed.lr, resumed.betas, resumed.eps, resumed.num_steps) == \
        (0.03, (0.9, 0.999), 1e-8, 3)
    for g in grads[3:]:
        q = resumed.step(q, g, maximize=True)
    for k in host:
        assert q[k].dtype == dtype and B.device_of(q[k]) == B.device_of(params[k])
        np.testing.assert_array_equal(B.to_numpy(q[k]), B.to_numpy(p[k]))


def test_state_dict_of_a_fresh_optimiser_loads(xp, dtype, to_xp):
    _, params = _params(to_xp)
    adam = Adam(lr=0.2)
    adam.load_state_dict(Adam(lr=0.3).state_dict(), like=params)
    assert adam.lr == 0.3 and adam.num_steps == 0


# ------------------------------------------------------------------------- Adam: errors
@pytest.mark.parametrize("kwargs, exc, match", [
    ({"lr": 0.0}, ValueError, "lr: expected a finite number > 0"),
    ({"lr": -1.0}, ValueError, "lr"),
    ({"lr": float("nan")}, ValueError, "lr"),
    ({"lr": "fast"}, TypeError, "lr"),
    ({"betas": (1.0, 0.999)}, ValueError, r"betas\[0\]: expected a number in \[0, 1\)"),
    ({"betas": (0.9, -0.1)}, ValueError, r"betas\[1\]"),
    ({"betas": 0.9}, TypeError, "betas: expected a pair"),
    ({"betas": (0.9, None)}, TypeError, r"betas\[1\]"),
    ({"eps": 0.0}, ValueError, "eps"),
])
def test_invalid_settings(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Adam(**kwargs)


def test_invalid_lr_assignment():
    adam = Adam()
    with pytest.raises(ValueError, match="lr"):
        adam.lr = -0.5
    assert adam.lr == 0.01


def test_step_errors(xp, dtype, to_xp):
    host, params = _params(to_xp)
    grads = {k: to_xp(np.ones(v.shape)) for k, v in host.items()}
    adam = Adam()
    with pytest.raises(KeyError, match=r"missing \['c'\] and unexpected \['z'\]"):
        adam.step(params, {"a": grads["a"], "b": grads["b"], "z": grads["c"]})
    with pytest.raises(ShapeError, match=r"grads\['b'\]: expected shape \(3,\) .* got \(2,\)"):
        adam.step(params, {**grads, "b": to_xp(np.ones(2))})
    other = xp.float64 if dtype == xp.float32 else xp.float32
    with pytest.raises(TypeError, match=r"grads\['c'\]: expected dtype"):
        adam.step(params, {**grads, "c": to_xp(np.ones((2, 2)), dtype=other)})
    with pytest.raises(TypeError, match=r"params\['a'\]: expected an array"):
        adam.step({**params, "a": 0.5}, grads)
    with pytest.raises(TypeError, match=r"grads\['a'\]: expected an array"):
        adam.step(params, {**grads, "a": [1.0]})
    with pytest.raises(TypeError, match="params: expected a dict"):
        adam.step([params["a"]], grads)
    with pytest.raises(TypeError, match=r"params\['i'\]: expected a real floating dtype"):
        ints = to_xp(np.arange(3), dtype=None)
        adam.step({"i": ints}, {"i": ints})
    if xp is not B.namespace_by_name("numpy"):
        with pytest.raises(TypeError, match="cannot be mixed"):
            adam.step(params, {**grads, "b": np.ones(3)})
    assert adam.num_steps == 0 and len(adam.state_dict()) == 6

    adam.step(params, grads)
    with pytest.raises(ShapeError, match=r"params\['b'\]: expected shape \(3,\) \(its optimiser"):
        adam.step({**params, "b": to_xp(np.ones(4))}, {**grads, "b": to_xp(np.ones(4))})


@pytest.mark.parametrize("bad, what", [(np.nan, "1 NaN value"), (np.inf, "infinite")])
def test_non_finite_gradient_names_the_parameter(xp, dtype, to_xp, bad, what):
    host, params = _params(to_xp)
    grads = {k: to_xp(np.ones(v.shape)) for k, v in host.items()}
    adam = Adam()
    adam.step(params, grads)
    before = adam.state_dict()
    bad_c = np.ones((2, 2))
    bad_c[1, 0] = bad
    with pytest.raises(ValueError, match=rf"grads\['c'\]: expected finite values, got {what}"):
        adam.step(params, {**grads, "c": to_xp(bad_c)})
    after = adam.state_dict()
    assert after["num_steps"] == 1
    for k in before:
        np.testing.assert_array_equal(np.asarray(after[k]), np.asarray(before[k]))


def test_load_state_dict_errors(xp, dtype, to_xp):
    host, params = _params(to_xp)
    grads = {k: to_xp(np.ones(v.shape)) for k, v in host.items()}
    src = Adam(lr=0.5)
    src.step(params, grads)
    good = src.state_dict()
    adam = Adam(lr=0.2)

    def fails(state, exc, match, like=params):
        with pytest.raises(exc, match=match):
            adam.load_state_dict(state, like=like)
        # nothing was half-loaded
        assert adam.lr == 0.2 and adam.num_steps == 0 and len(adam.state_dict()) == 6

    fails({k: v for k, v in good.items() if k != "beta2"}, KeyError, r"missing entries \['beta2'\]")
    fails({**good, "format": 2}, ValueError, r"state\['format'\]: expected 1, got 2")
    fails({**good, "lr": -1.0}, ValueError, r"state\['lr'\]")
    fails({**good, "beta1": 1.5}, ValueError, r"state\['beta1'\]")
    fails({**good, "num_steps": -2}, ValueError, r"state\['num_steps'\]")
    fails({**good, "num_steps": 1.5}, TypeError, r"state\['num_steps'\]: expected an integer")
    fails({**good, "lr": np.ones(2)}, ShapeError, r"state\['lr'\]: expected a scalar")
    fails({**good, "momentum": 0.9}, KeyError, "unexpected entry 'momentum'")
    fails({k: v for k, v in good.items() if k != "exp_avg_sq/b"}, KeyError,
          "missing entry 'exp_avg_sq/b'")
    fails({k: v for k, v in good.items() if k != "step/b"}, KeyError, "no matching 'step/b'")
    fails({**good, "step/b": 0}, ValueError, r"state\['step/b'\]: expected an integer >= 1")
    fails({**good, "exp_avg/c": np.ones(4)}, ShapeError,
          r"state\['exp_avg/c'\]: expected shape \(2, 2\) \(the parameter's\), got \(4,\)")
    fails(good, KeyError, "parameter 'c', which is not in like",
          like={k: v for k, v in params.items() if k != "c"})
    fails([1, 2], TypeError, "state: expected a mapping")
    fails(good, TypeError, "like: expected a dict", like=None)


# ------------------------------------------------------------------------------ schedules
def test_schedules_values():
    lr = step_decay(0.01, [1, 5, 10, 15])
    got = [lr(t) for t in (0, 1, 4, 5, 9, 10, 15, 100)]
    want = [0.01, 1e-3, 1e-3, 1e-4, 1e-4, 1e-5, 1e-6, 1e-6]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert step_decay(2.0, [], factor=0.5)(7) == 2.0
    assert step_decay(2.0, (3,), factor=0.5)(np.int64(3)) == 1.0
    assert constant(0.3)(0) == 0.3 and constant(0.3)(10**6) == 0.3

    g = warmup(0.1, 4)
    np.testing.assert_allclose([g(t) for t in range(7)],
                               [0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1], rtol=1e-12)
    g = warmup(1.0, 10, start=0.0)
    assert g(0) == 0.0 and g(5) == 0.5 and g(10) == 1.0 and g(11) == 1.0
    assert warmup(0.5, 0)(0) == 0.5
    assert "milestones=[1, 5]" in repr(step_decay(0.1, [1, 5]))
    assert repr(warmup(1.0, 2)) == "warmup(1.0, num_steps=2, start=0.5)"
    assert repr(constant(2.0)) == "constant(2.0)"


@pytest.mark.parametrize("make, exc, match", [
    (lambda: constant(0.0), ValueError, "value"),
    (lambda: step_decay(-0.1, [1]), ValueError, "value"),
    (lambda: step_decay(0.1, [5, 5]), ValueError, "strictly increasing"),
    (lambda: step_decay(0.1, [-1]), ValueError, "milestones"),
    (lambda: step_decay(0.1, [1.5]), TypeError, "milestones"),
    (lambda: step_decay(0.1, 3), TypeError, "milestones"),
    (lambda: step_decay(0.1, [1], factor=10.0), ValueError, r"factor: expected a number in \(0"),
    (lambda: step_decay(0.1, [1], factor=0.0), ValueError, "factor"),
    (lambda: warmup(0.1, -1), ValueError, "num_steps"),
    (lambda: warmup(0.1, 2.5), TypeError, "num_steps"),
    (lambda: warmup(0.1, 3, start=-0.1), ValueError, "start"),
    (lambda: constant(0.1)(-1), ValueError, "t: expected an integer >= 0"),
    (lambda: step_decay(0.1, [1])(0.5), TypeError, "t: expected an integer"),
    (lambda: warmup(0.1, 3)(True), TypeError, "t: expected an integer"),
])
def test_schedule_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
