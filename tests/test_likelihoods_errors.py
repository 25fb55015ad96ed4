"""Bad input to the likelihoods raises clear errors naming the argument, on every backend."""

import numpy as np
import pytest
import scipy.special as sp

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.likelihoods import Bernoulli, Gaussian, RobustMax, StudentT, gauss_hermite


@pytest.mark.parametrize("make,match", [
    (lambda: Gaussian(0.0), r"variance: expected values > 0, got \[?0.0"),
    (lambda: Gaussian(float("nan")), "variance: expected finite values"),
    (lambda: StudentT(df=-1.0), "df: expected values > 0"),
    (lambda: StudentT(df=0.0), "df: expected values > 0"),
    (lambda: StudentT(scale=0.0), "scale: expected values > 0"),
    (lambda: Bernoulli("tanh"), r"link: expected one of \('probit', 'logit'\), got 'tanh'"),
    (lambda: RobustMax(1), "num_classes: expected an integer >= 2, got 1"),
    (lambda: RobustMax(2.0), "num_classes: expected an integer >= 2, got 2.0"),
    (lambda: RobustMax(3, epsilon=0.0), r"epsilon: expected a number in \(0, 1\), got 0.0"),
    (lambda: RobustMax(3, epsilon=1.0), r"epsilon: expected a number in \(0, 1\)"),
    (lambda: StudentT(num_gauss_hermite=0),
     r"num_gauss_hermite: expected an integer in \[1, 300\], got 0"),
    (lambda: Bernoulli(num_gauss_hermite=2.5), "num_gauss_hermite: expected an integer"),
    (lambda: RobustMax(3, num_gauss_hermite=True), "num_gauss_hermite: expected an integer"),
    (lambda: gauss_hermite(301), r"num_gauss_hermite: expected an integer in \[1, 300\], got 301"),
])
def test_invalid_construction(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_invalid_parameter_assignment_and_type():
    lik = StudentT()
    with pytest.raises(ValueError, match="df: expected values > 0"):
        lik.set_parameters({"df": -2.0})
    assert float(B.to_numpy(lik.df)) == 5.0
    with pytest.raises(TypeError, match="epsilon: expected a real number, got 'a'"):
        RobustMax(3, epsilon="a")


def _single_latent_liks(xp, dtype, device):
    kw = dict(xp=xp, dtype=dtype, device=device)
    return [Gaussian(0.5, **kw), StudentT(4.0, 1.0, **kw), Bernoulli(**kw),
            Bernoulli("logit", **kw)]


def test_shape_errors(xp, dtype, device, to_xp):
    y, mu, var = to_xp(np.array([0.0, 1.0, 1.0])), to_xp(np.zeros(3)), to_xp(np.ones(3))
    for lik in _single_latent_liks(xp, dtype, device):
        for method in (lik.variational_expectations, lik.variational_expectations_and_grad,
                       lik.predictive_log_density):
            with pytest.raises(ShapeError, match=r"mu: expected shape \(n,\), got \(3, 1\)"):
                method(y, xp.reshape(mu, (3, 1)), xp.reshape(var, (3, 1)))
            with pytest.raises(ShapeError, match=r"var: expected shape \(3,\) \(that of mu\), "
                                                 r"got \(2,\)"):
                method(y, mu, var[:2])
            with pytest.raises(ShapeError, match=r"y: expected shape \(3,\), got \(2,\)"):
                method(y[:2], mu, var)
        with pytest.raises(ShapeError, match=r"var: expected shape \(3,\)"):
            lik.predict_mean_and_var(mu, var[:2])
        with pytest.raises(ShapeError, match=r"y: expected shape \(n,\), got \(3, 1\)"):
            lik.check_targets(xp.reshape(y, (3, 1)))
    rm = RobustMax(3, xp=xp, device=device)
    M, V = to_xp(np.zeros((3, 3))), to_xp(np.ones((3, 3)))
    with pytest.raises(ShapeError, match=r"mu: expected shape \(n, 3\), got \(3, 4\)"):
        rm.variational_expectations(y, to_xp(np.zeros((3, 4))), to_xp(np.ones((3, 4))))
    with pytest.raises(ShapeError, match=r"mu: expected shape \(n, 3\), got \(3,\)"):
        rm.predict_mean_and_var(mu, var)
    with pytest.raises(ShapeError, match=r"var: expected shape \(3, 3\)"):
        rm.variational_expectations(y, M, V[:, :2])


def test_value_errors(xp, dtype, device, to_xp):
    y, mu, var = to_xp(np.array([0.0, 1.0, 1.0])), to_xp(np.zeros(3)), to_xp(np.ones(3))
    bad_var = to_xp(np.array([1.0, 0.0, -2.0]))
    nan_mu = to_xp(np.array([0.0, np.nan, 1.0]))
    for lik in _single_latent_liks(xp, dtype, device):
        for method in (lik.variational_expectations, lik.variational_expectations_and_grad,
                       lik.predictive_log_density):
            with pytest.raises(ValueError, match=r"var: expected values > 0, got 2 value\(s\) "
                                                 r"<= 0 \(smallest -2\)"):
                method(y, mu, bad_var)
            with pytest.raises(ValueError, match=r"mu: expected finite values, got 1 NaN"):
                method(y, nan_mu, var)
        with pytest.raises(ValueError, match="var: expected values > 0"):
            lik.predict_mean_and_var(mu, bad_var)
    # check=False skips the value checks (and their device synchronisation)
    out = Gaussian(0.5, xp=xp, dtype=dtype, device=device).variational_expectations(
        y, mu, bad_var, check=False)
    assert out.shape == (3,)


def test_target_errors(xp, dtype, device, to_xp):
    mu, var = to_xp(np.zeros(3)), to_xp(np.ones(3))
    bern = Bernoulli(xp=xp, device=device)
    for y in (to_xp(np.array([0.0, 2.0, 1.0])), to_xp(np.array([-1.0, 0.0, 0.5]))):
        with pytest.raises(ValueError, match=r"y: expected labels in \{0, 1\}, got \d value"):
            bern.check_targets(y)
        with pytest.raises(ValueError, match=r"y: expected labels in \{0, 1\}"):
            bern.variational_expectations(y, mu, var)
    int_y = B.asarray(np.array([0, 3, 1]), dtype=xp.int64, xp=xp, device=device)
    with pytest.raises(ValueError, match=r"expected labels in \{0, 1\}, got 1 value\(s\) outside "
                                         r"\(y ranges over \[0, 3\]\)"):
        bern.check_targets(int_y)
    bern.check_targets(B.asarray(np.array([0, 1, 1]), dtype=xp.int64, xp=xp, device=device))
    bern.check_targets(to_xp(np.array([0.0, 1.0])))
    for lik in [bern, StudentT(xp=xp, dtype=dtype, device=device)]:
        with pytest.raises(ValueError, match=r"y: expected finite values, got 1 NaN and 1 inf"):
            lik.check_targets(to_xp(np.array([0.0, np.nan, np.inf])))
    rm = RobustMax(3, xp=xp, device=device)
    M, V = to_xp(np.zeros((3, 3))), to_xp(np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"y: expected class labels in 0..2, got values in "
                                         r"\[-1, 3\]"):
        rm.check_targets(B.asarray(np.array([-1, 0, 3]), dtype=xp.int64, xp=xp, device=device))
    with pytest.raises(ValueError, match=r"y: expected class labels in 0..2"):
        rm.variational_expectations(to_xp(np.array([0.0, 3.0, 1.0])), M, V)
    with pytest.raises(ValueError, match=r"y: expected integer class labels, got 1 non-integer"):
        rm.check_targets(to_xp(np.array([0.0, 1.5, 2.0])))
    with pytest.raises(ValueError, match="y: expected finite values"):
        rm.check_targets(to_xp(np.array([0.0, np.nan, 2.0])))
    rm.check_targets(to_xp(np.array([0.0, 2.0, 1.0])))
    with pytest.raises(TypeError, match="y: expected an array, got list"):
        bern.check_targets([0, 1])


def test_dtype_and_namespace_errors():
    torch = pytest.importorskip("torch")
    y, mu = np.array([0.0, 1.0]), np.zeros(2)
    with pytest.raises(TypeError, match="var: expected dtype float64 .that of mu., got float32"):
        Bernoulli().variational_expectations(y, mu, np.ones(2, dtype=np.float32))
    with pytest.raises(TypeError, match="mu: expected a real floating dtype"):
        Bernoulli().variational_expectations(y, np.zeros(2, dtype=np.int64),
                                             np.ones(2, dtype=np.int64))
    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        Bernoulli().variational_expectations(torch.zeros(2, dtype=torch.float64), mu, np.ones(2))
    lik = Gaussian(0.5, xp=B.namespace_by_name("numpy"))
    with pytest.raises(TypeError, match="Gaussian: parameters live in .*numpy but the inputs are "
                                        ".*torch arrays; create the likelihood with xp="):
        lik.variational_expectations(torch.zeros(2, dtype=torch.float64),
                                     torch.zeros(2, dtype=torch.float64),
                                     torch.ones(2, dtype=torch.float64))


def test_float32_extremes_stay_finite(xp, device):
    f32 = xp.float32
    conv = lambda a: B.asarray(np.asarray(a), dtype=f32, xp=xp, device=device)  # noqa: E731
    y = conv([1.0, 0.0, 1.0, 0.0])
    mu = conv([-60.0, 60.0, 1e4, 0.0])
    var = conv([1e-6, 1e-6, 10.0, 1e4])
    for lik in [Bernoulli(xp=xp, device=device), Bernoulli("logit", xp=xp, device=device)]:
        ve, g = lik.variational_expectations_and_grad(y, mu, var)
        vals = [ve, g["mu"], g["var"], lik.predictive_log_density(y, mu, var),
                *lik.predict_mean_and_var(mu, var)]
        for v in vals:
            assert v.dtype == f32 and bool(xp.all(xp.isfinite(v)))
        # a large, finite penalty: log Phi(-60), log sigmoid(-60) (var = 1e-6 barely matters)
        expected = sp.log_ndtr(-60.0) if lik.link == "probit" else -np.logaddexp(0.0, 60.0)
        np.testing.assert_allclose(float(B.to_numpy(ve)[0]), expected, rtol=1e-5)
    t = StudentT(0.5, 1e-3, xp=xp, dtype=f32, device=device)
    y = conv([1e6, -3.0])
    ve, g = t.variational_expectations_and_grad(y, conv([0.0, 1e5]), conv([1e-3, 1e6]))
    for v in [ve, g["mu"], g["var"], *g["params"].values()]:
        assert bool(xp.all(xp.isfinite(v)))
