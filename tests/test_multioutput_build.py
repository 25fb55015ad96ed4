"""gpnum.models.build_multioutput_model and gpnum.optim.evaluate_outputs on every backend: the
model it builds, and per-output test metrics against a NumPy computation from the model's own
predictive means and variances (checked against the dense posterior in test_multioutput.py)."""

import numpy as np
import pytest

from gpnum import backend as B
from gpnum.kernels import ICM, RBF, IndependentOutputs, Matern52
from gpnum.models import MultiOutputGPR, build_multioutput_model
from gpnum.optim import evaluate_outputs


def _data(to_xp):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (12, 2))
    Y = np.c_[np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 0]] + 0.1 * rng.standard_normal((12, 3))
    Y[rng.uniform(size=Y.shape) < 0.3] = np.nan
    return X, Y, to_xp(X), to_xp(Y)


def test_builds_an_icm_or_independent_copies(to_xp, xp, dtype):
    X, Y, Xb, Yb = _data(to_xp)
    icm = build_multioutput_model(Xb, Yb, kernel="rbf", rank=2, noise_variance=0.3)
    assert isinstance(icm, MultiOutputGPR) and isinstance(icm.kernel, ICM)
    assert icm.kernel.rank == 2 and isinstance(icm.kernel.kernel, RBF)
    assert icm.kernel.kernel.lengthscale.shape == (2,)  # ARD, one per input column
    assert icm.dtype == dtype and icm.xp is xp
    np.testing.assert_allclose(B.to_numpy(icm.likelihood.variance), [0.3] * 3)
    np.testing.assert_allclose(B.to_numpy(icm.mean), [0.0] * 3)
    given = Matern52(lengthscale=0.7, xp=xp, dtype=dtype)
    ind = build_multioutput_model(Xb, Yb, kernel=given, multioutput="independent")
    assert isinstance(ind.kernel, IndependentOutputs)
    assert len({id(k) for k in ind.kernel.kernels} | {id(given)}) == 4  # copies, not the object
    for k in ind.kernel.kernels:
        np.testing.assert_allclose(float(B.to_numpy(k.lengthscale)), 0.7, rtol=1e-6)
    with pytest.raises(ValueError, match="multioutput: expected one of"):
        build_multioutput_model(Xb, Yb, multioutput="lmc")
    with pytest.raises(ValueError, match="rank: expected an integer >= 1"):
        build_multioutput_model(Xb, Yb, rank=0)


def test_evaluate_outputs_per_output_and_over_all(to_xp, xp, dtype):
    X, Y, Xb, Yb = _data(to_xp)
    model = build_multioutput_model(Xb, Yb, kernel="rbf", noise_variance=0.2)
    rng = np.random.default_rng(1)
    Xt = rng.uniform(-2.0, 2.0, (6, 2))
    Yt = rng.standard_normal((6, 3))
    Yt[[0, 3], 1] = np.nan
    Yt[:, 2] = np.nan  # an output without test entries
    res = evaluate_outputs(model, to_xp(Xt), to_xp(Yt))
    mean, var = (np.asarray(B.to_numpy(a), dtype=np.float64) for a in model.predict_y(to_xp(Xt)))
    seen = ~np.isnan(Yt)
    nlp = 0.5 * np.log(2 * np.pi * var) + 0.5 * (Yt - mean) ** 2 / var
    rtol = 1e-10 if dtype == xp.float64 else 1e-5
    per = res["per_output"]
    assert per["num_test"] == [6, 4, 0]
    assert per["rmse"][2] is None and per["nll"][2] is None
    for a in range(2):
        e = (Yt - mean)[seen[:, a], a]
        assert per["rmse"][a] == pytest.approx(np.sqrt(np.mean(e * e)), rel=rtol)
        assert per["nll"][a] == pytest.approx(np.mean(nlp[seen[:, a], a]), rel=rtol)
    assert res["rmse"] == pytest.approx(np.sqrt(np.mean((Yt - mean)[seen] ** 2)), rel=rtol)
    assert res["nll"] == pytest.approx(np.mean(nlp[seen]), rel=rtol)
    with pytest.raises(ValueError, match="no test entry"):
        evaluate_outputs(model, to_xp(Xt), to_xp(np.full((6, 3), np.nan)))
