"""Every error path of gpnum.divergences: clear messages naming the argument."""

import numpy as np
import pytest
from test_divergences_reference import num, problem, to

from gpnum import divergences as D
from gpnum.errors import NotPSDError, ShapeError

MVN = [D.kl_mvn, D.wasserstein_mvn, D.bhattacharyya_mvn, D.hellinger_mvn,
       lambda *a, **k: D.renyi_mvn(*a, alpha=0.5, **k), D.kl_mvn_and_grad,
       D.wasserstein_mvn_and_grad, D.hellinger_mvn_and_grad,
       lambda *a, **k: D.renyi_mvn_and_grad(*a, alpha=0.5, **k)]
POINTWISE = [D.kl_normal, D.wasserstein_normal, D.bhattacharyya_normal, D.hellinger_normal,
             lambda *a, **k: D.renyi_normal(*a, alpha=0.5, **k), D.squared_difference_normal,
             D.kl_normal_and_grad, D.hellinger_normal_and_grad]


@pytest.fixture
def mvn(xp, dtype, device):
    mq, Sq, mp, Sp = problem(3, 50)

    def c(a, dt=dtype):
        return to(xp, device, a, dt)

    return c, mq, Sq, mp, Sp


@pytest.mark.parametrize("fn", MVN)
def test_mvn_argument_errors(mvn, fn):
    c, mq, Sq, mp, Sp = mvn
    L = np.linalg.cholesky(Sq)
    with pytest.raises(TypeError, match=r"give Sq= \(covariance\) or Lq= .*not both"):
        fn(c(mq), c(Sq), c(mp), c(Sp), Lq=c(L))
    with pytest.raises(TypeError, match=r"give Sp= \(covariance\) or Lp= .*got neither"):
        fn(c(mq), c(Sq), c(mp))
    with pytest.raises(TypeError, match=r"mp: required argument missing"):
        fn(c(mq), c(Sq), Sp=c(Sp))
    with pytest.raises(ShapeError, match=r"mq: expected a mean vector of shape \(M,\), got \(3, 1\)"):
        fn(c(mq[:, None]), c(Sq), c(mp), c(Sp))
    with pytest.raises(ShapeError, match=r"mp: expected shape \(3,\) like mq, got \(2,\)"):
        fn(c(mq), c(Sq), c(mp[:2]), c(Sp))
    with pytest.raises(ShapeError, match=r"Sq: expected shape \(3, 3\), got \(3, 2\)"):
        fn(c(mq), c(Sq[:, :2]), c(mp), c(Sp))
    with pytest.raises(ShapeError, match=r"Lp: expected shape \(3, 3\), got \(2, 2\)"):
        fn(c(mq), c(Sq), c(mp), Lp=c(L[:2, :2]))


@pytest.mark.parametrize("fn", MVN)
def test_mvn_value_errors(mvn, fn):
    c, mq, Sq, mp, Sp = mvn
    bad = Sq.copy()
    bad[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"Sq: expected finite values, got 1 NaN value\(s\)"):
        fn(c(mq), c(bad), c(mp), c(Sp))
    with pytest.raises(ValueError, match=r"mp: expected finite values, got infinite"):
        fn(c(mq), c(Sq), c(mp + np.array([0.0, np.inf, 0.0])), c(Sp))
    L = np.linalg.cholesky(Sp)
    L_inf = L.copy()
    L_inf[2, 0] = -np.inf
    with pytest.raises(ValueError, match=r"Lp: expected finite values, got infinite"):
        fn(c(mq), c(Sq), c(mp), Lp=c(L_inf))
    L0 = L.copy()
    L0[1, 1] = 0.0
    with pytest.raises(NotPSDError, match=r"Lp: expected a Cholesky factor with a non-zero "
                                          r"diagonal .*got 1 zero diagonal entry"):
        fn(c(mq), c(Sq), c(mp), Lp=c(L0))
    indefinite = np.diag([1.0, -2.0, 1.0])
    with pytest.raises(NotPSDError, match=r"Sp: matrix of size 3 x 3 is not positive definite"):
        fn(c(mq), c(Sq), c(mp), c(indefinite))


def test_mvn_type_errors(mvn, xp, dtype):
    c, mq, Sq, mp, Sp = mvn
    other = xp.float32 if dtype == xp.float64 else xp.float64
    with pytest.raises(TypeError, match=r"Sp: expected dtype .* like mq, got .*"):
        D.kl_mvn(c(mq), c(Sq), c(mp), c(Sp, other))
    with pytest.raises(TypeError, match=r"mq: expected an array, got list"):
        D.wasserstein_mvn(list(mq), c(Sq), c(mp), c(Sp))
    with pytest.raises(TypeError, match=r"mq: expected a real floating dtype"):
        D.kl_mvn(c(np.arange(3), xp.int64), c(Sq), c(mp), c(Sp))
    if xp.__name__ != "array_api_compat.numpy":
        with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
            D.kl_mvn(c(mq), c(Sq), c(mp), Sp)  # a NumPy array among the backend's


def test_validate_false_skips_checks(mvn):
    c, mq, Sq, mp, Sp = mvn
    bad = mq.copy()
    bad[0] = np.nan
    assert np.isnan(num(D.kl_mvn(c(bad), c(Sq), c(mp), c(Sp), validate=False)))
    assert np.isnan(num(D.kl_whitened(c(bad), c(np.eye(3)), validate=False)))
    assert np.isnan(num(D.kl_normal(c(bad), c(np.ones(3)), c(mp), c(np.ones(3)),
                                    validate=False)))


def test_renyi_alpha_errors(mvn):
    c, mq, Sq, mp, Sp = mvn
    args = (c(mq), c(Sq), c(mp), c(Sp))
    for alpha in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"alpha: expected a finite number > 0"):
            D.renyi_mvn(*args, alpha=alpha)
        with pytest.raises(ValueError, match=r"alpha: expected a finite number > 0"):
            D.renyi_normal(c(mq), c(np.diag(Sq).copy()), c(mp), c(np.diag(Sp).copy()),
                               alpha=alpha)
    for alpha in ("0.5", True):
        with pytest.raises(TypeError, match=r"alpha: expected a"):
            D.renyi_mvn_and_grad(*args, alpha=alpha)
    # a 0-d array is a scalar (issue 31), a 1-d one is not
    assert float(D.renyi_mvn(*args, alpha=c(np.array(0.5)))) == float(D.renyi_mvn(*args, alpha=0.5))
    with pytest.raises(ShapeError, match=r"alpha: expected a number or a 0-d array"):
        D.renyi_mvn(*args, alpha=c(np.array([0.5])))
    # alpha > 1 beyond the largest eigenvalue of Sp^{-1} Sq: infinite divergence, with the bound;
    # Sq scaled so the bound falls in the Cholesky (alpha >= 5/4) and the spectral range in turn
    for scale in (0.5, 6.0):
        args = (c(mq), c(scale * Sq), c(mp), c(Sp))
        c_max = np.max(np.linalg.eigvals(np.linalg.solve(Sp, scale * Sq)).real)
        bound = c_max / (c_max - 1.0)
        assert (bound > 1.25) == (scale == 0.5)
        for fn in (D.renyi_mvn, D.renyi_mvn_and_grad):
            with pytest.raises(ValueError, match=r"alpha: D_alpha\(Q \|\| P\) is infinite for "
                                                 r"alpha = (.|\n)*choose alpha < "
                                                 + f"{bound:.6g}"[:4]):
                fn(*args, alpha=bound * 1.01)
        assert np.isfinite(num(D.renyi_mvn(*args, alpha=bound * 0.99)))


def test_kl_whitened_errors(mvn):
    c, mq, _, _, _ = mvn
    L = np.tril(np.ones((3, 3)))
    with pytest.raises(ShapeError, match=r"m: expected a mean vector of shape \(M,\), got \(1, 3\)"):
        D.kl_whitened(c(mq[None, :]), c(L))
    with pytest.raises(ShapeError, match=r"L: expected shape \(3, 3\), got \(3,\)"):
        D.kl_whitened_and_grad(c(mq), c(np.ones(3)))
    L_nan = L.copy()
    L_nan[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"L: expected finite values, got 1 NaN"):
        D.kl_whitened(c(mq), c(L_nan))
    with pytest.raises(NotPSDError, match=r"L: expected a Cholesky factor with a non-zero diagonal"):
        D.kl_whitened_and_grad(c(mq), c(L - np.diag([0.0, 0.0, 1.0])))


def test_gwi_errors(mvn):
    c, mq, Sq, mp, Sp = mvn
    with pytest.raises(TypeError, match=r"give Kq= \(covariance\) or Lq="):
        D.wasserstein_gwi(c(mq), mp=c(mp), Kp=c(Sp))
    for eigen_term in (True, False):
        with pytest.raises(ShapeError, match=r"Kp: expected shape \(3, 3\), got \(3, 2\)"):
            D.wasserstein_gwi(c(mq), c(Sq), c(mp), c(Sp[:, :2]), eigen_term=eigen_term)
        with pytest.raises(ShapeError, match=r"mp: expected shape \(3,\) like mq"):
            D.wasserstein_gwi_and_grad(c(mq), c(Sq), c(mp[:2]), c(Sp), eigen_term=eigen_term)
        with pytest.raises(ValueError, match=r"Kq: expected finite values"):
            D.wasserstein_gwi(c(mq), c(Sq * np.nan), c(mp), c(Sp), eigen_term=eigen_term)
    with pytest.raises(NotPSDError, match=r"Kq: matrix of size 3 x 3 is not positive definite"):
        D.wasserstein_gwi(c(mq), c(-Sq), c(mp), c(Sp))


@pytest.mark.parametrize("fn", POINTWISE)
def test_pointwise_errors(xp, dtype, device, fn):
    def c(a):
        return to(xp, device, a, dtype)

    m, v = c(np.array([0.1, 0.2, 0.3])), c(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ShapeError, match=r"vq: expected shape \(3,\) like mq, got \(2,\)"):
        fn(m, c(np.array([1.0, 2.0])), m, v)
    with pytest.raises(ValueError, match=r"vq: expected variances > 0, got 1 value\(s\) <= 0 "
                                         r"\(smallest -1.0\)"):
        fn(m, c(np.array([1.0, -1.0, 2.0])), m, v)
    with pytest.raises(ValueError, match=r"vp: expected variances > 0, got 3 value\(s\) <= 0"):
        fn(m, v, m, c(np.zeros(3)))
    with pytest.raises(ValueError, match=r"mp: expected finite values, got 1 NaN"):
        fn(m, v, c(np.array([0.0, np.nan, 0.0])), v)
    with pytest.raises(ValueError, match=r"vp: expected finite values, got infinite"):
        fn(m, v, m, c(np.array([1.0, np.inf, 1.0])))
    with pytest.raises(ValueError, match=r"reduction: expected one of 'sum', 'mean', 'none', "
                                         r"got 'max'"):
        fn(m, v, m, v, reduction="max")


def test_pointwise_renyi_and_vjp_errors(xp, device):
    m = to(xp, device, np.zeros(3))
    vq, vp = to(xp, device, np.array([1.0, 5.0, 1.0])), to(xp, device, np.ones(3))
    # alpha vp + (1 - alpha) vq <= 0 at the middle point for alpha >= 5/4
    with pytest.raises(ValueError, match=r"alpha: D_alpha\(Q \|\| P\) is infinite for alpha = "
                                         r"2.0 at 1 point\(s\).*choose alpha < 1.25"):
        D.renyi_normal(m, vq, m, vp, alpha=2.0)
    assert np.isfinite(num(D.renyi_normal(m, vq, m, vp, alpha=1.24)))
    with pytest.raises(ShapeError, match=r"cotangent: expected shape \(3,\) like mq, got \(2,\)"):
        D.kl_normal_vjp(to(xp, device, np.ones(2)), m, vq, m, vp)
    with pytest.raises(ValueError, match=r"alpha: expected a finite number > 0"):
        D.renyi_normal_vjp(to(xp, device, np.ones(3)), m, vq, m, vp, alpha=-0.5)
