"""GPRegressor with several target columns against a dense NumPy Gaussian process on the
(n t) x (n t) covariance built here from the fitted hyper-parameters, and scikit-learn's
composition tools (clone, pickle, GridSearchCV) on such targets."""

import pickle

import numpy as np
import pytest

pytest.importorskip("sklearn")

from kernel_refs_everyday import matern32_reference, rbf_reference
from sklearn.base import clone
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV

from conftest import _BACKEND_PARAMS
from gpnum import backend as B
from gpnum.kernels import ICM, RBF, IndependentOutputs, Matern32
from gpnum.sklearn import GPRegressor

T = 3


def _data(n=30, missing=0.3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    F = np.c_[np.sin(2.0 * X[:, 0]), np.sin(2.0 * X[:, 0]) + 0.4 * X[:, 1],
              3.0 * np.cos(X[:, 1]) + 1.0]
    Y = F + 0.1 * rng.standard_normal(F.shape)
    Y[rng.uniform(size=Y.shape) < missing] = np.nan
    Xt = rng.uniform(-2.5, 2.5, (7, 2))
    return X, Y, Xt


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


def _terms(est, X1, X2):
    """[(K_q, B_q)] of the fitted multi-output kernel, from its parameters and the textbook
    formulas (RBF / Matern-3/2 grams, ``B = W W^T + diag(kappa)``, unit vectors)."""
    k = est.kernel_
    if isinstance(k, ICM):
        W, kappa = _np(k.coregion.W), _np(k.coregion.kappa)
        gram = rbf_reference(X1, X2, _np(k.kernel.lengthscale), _np(k.kernel.variance))
        return [(gram, W @ W.T + np.diag(kappa))]
    assert isinstance(k, IndependentOutputs)
    out = []
    for a, kern in enumerate(k.kernels):
        ref = rbf_reference if isinstance(kern, RBF) else matern32_reference
        E = np.zeros((T, T))
        E[a, a] = 1.0
        out.append((ref(X1, X2, _np(kern.lengthscale), _np(kern.variance)), E))
    return out


def _dense_posterior(est, X, Y, Xt):
    """Mean (m, t), standard deviation (m, t) and joint covariance (m t, m t) of f at Xt in the
    units of Y: a Cholesky-free dense solve on the observed entries of vec(Y)."""
    mu, sd = est._y_train_mean, est._y_train_std
    Z = (Y - mu) / sd
    obs = ~np.isnan(Z.reshape(-1))

    def cov(A, C):
        return sum(np.kron(K, Bq) for K, Bq in _terms(est, A, C))

    noise = np.tile(np.asarray(est.noise_variance_, dtype=np.float64) * np.ones(T), X.shape[0])
    S = cov(X, X) + np.diag(noise)
    S = S[np.ix_(obs, obs)]
    Ks = cov(Xt, X)[:, obs]
    mean = Ks @ np.linalg.solve(S, Z.reshape(-1)[obs])
    joint = cov(Xt, Xt) - Ks @ np.linalg.solve(S, Ks.T)
    m = Xt.shape[0]
    scale = np.tile(sd, m)
    joint = joint * scale[:, None] * scale[None, :]
    mean = mean.reshape(m, T) * sd + mu
    return mean, np.sqrt(np.diag(joint)).reshape(m, T), joint


CASES = {
    "icm": lambda: GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01),
    "icm-rank2-normalised": lambda: GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01,
                                                rank=2, normalize_y=True),
    "icm-learn-noise": lambda: GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.05,
                                           learn_noise=True, normalize_y=True),
    "independent": lambda: GPRegressor(Matern32(lengthscale=np.ones(2)), alpha=0.01,
                                       multioutput="independent", normalize_y=True),
}


@pytest.mark.parametrize("missing", [0.0, 0.3], ids=["isotopic", "missing"])
@pytest.mark.parametrize("case", list(CASES))
def test_predictions_equal_the_dense_gp_of_the_fitted_hyperparameters(case, missing):
    X, Y, Xt = _data(missing=missing)
    est = CASES[case]().fit(X, Y)
    assert est.n_outputs_ == T and est.kernel_.num_outputs == T
    assert est.n_iter_ > 0
    mean, std = est.predict(Xt, return_std=True)
    ref_mean, ref_std, ref_joint = _dense_posterior(est, X, Y, Xt)
    assert mean.shape == std.shape == (Xt.shape[0], T)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(std, ref_std, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(est.predict(Xt), mean)
    _, cov = est.predict(Xt, return_cov=True)
    m = Xt.shape[0]
    assert cov.shape == (m, m, T)
    for a in range(T):
        np.testing.assert_allclose(cov[:, :, a], ref_joint[a::T, a::T], rtol=1e-8, atol=1e-8)
    if case == "icm-learn-noise":
        assert est.noise_variance_.shape == (T,)
        assert not np.allclose(est.noise_variance_, 0.05)
    else:
        np.testing.assert_array_equal(est.noise_variance_, np.full(T, est.alpha))


def test_the_rule_icm_of_the_kernel_with_the_stated_rank():
    X, Y, _ = _data()
    est = GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01, rank=2).fit(X, Y)
    assert isinstance(est.kernel_, ICM) and est.kernel_.rank == 2
    assert isinstance(est.kernel_.kernel, RBF)
    assert isinstance(GPRegressor().fit(X, Y).kernel_, ICM)  # default: ICM of RBF, rank 1
    assert GPRegressor().fit(X, Y).kernel_.rank == 1
    est = GPRegressor(RBF(), multioutput="independent").fit(X, Y)
    assert isinstance(est.kernel_, IndependentOutputs)
    assert len({id(k) for k in est.kernel_.kernels}) == T  # separate hyper-parameters


def test_correlated_outputs_help_where_an_output_is_missing():
    """Output 1 is -0.8 times output 0: with output 1 missing on half the inputs, the ICM
    predicts it there from output 0 far better than an independent GP does (a check that the
    joint model is used, not that it is exact: the dense test does that)."""
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(-3.0, 3.0, (40, 1)), axis=0)
    f = np.sin(3.0 * X[:, 0])
    Y = np.c_[f, -0.8 * f] + 0.05 * rng.standard_normal((40, 2))
    hidden = X[:, 0] > 0.0
    Y_train = Y.copy()
    Y_train[hidden, 1] = np.nan
    icm = GPRegressor(RBF(), alpha=0.01, normalize_y=True).fit(X, Y_train)
    ind = GPRegressor(RBF(), alpha=0.01, normalize_y=True,
                      multioutput="independent").fit(X, Y_train)
    err_icm = np.sqrt(np.mean((icm.predict(X)[hidden, 1] - Y[hidden, 1]) ** 2))
    err_ind = np.sqrt(np.mean((ind.predict(X)[hidden, 1] - Y[hidden, 1]) ** 2))
    assert err_icm < 0.15 < 0.5 < err_ind  # noise sd 0.05; the independent GP reverts to 0


def test_one_column_is_the_single_output_estimator():
    X, Y, Xt = _data(missing=0.0)
    one = GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01).fit(X, Y[:, 0])
    col = GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01).fit(X, Y[:, :1])
    assert col.n_outputs_ == one.n_outputs_ == 1
    for a, b in zip(one.predict(Xt, return_std=True), col.predict(Xt, return_std=True),
                    strict=True):
        assert a.shape == (Xt.shape[0],)
        np.testing.assert_array_equal(a, b)
    assert isinstance(one.noise_variance_, float)


def test_sample_y_draws_the_outputs_jointly_by_monte_carlo():
    X, Y, _ = _data()
    est = GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01, normalize_y=True).fit(X, Y)
    Xt = X[:3] + 0.3
    draws = est.sample_y(Xt, 20000, random_state=1)
    assert draws.shape == (3, T, 20000)
    _, _, joint = _dense_posterior(est, X, Y, Xt)
    mean = est.predict(Xt)
    flat = draws.reshape(3 * T, -1)
    sd = np.sqrt(np.diag(joint))
    np.testing.assert_allclose(flat.mean(axis=1), mean.reshape(-1), atol=5 * sd.max() / 140)
    corr = np.corrcoef(flat)
    np.testing.assert_allclose(corr, joint / np.outer(sd, sd), atol=0.03)


def test_score_skips_missing_entries_and_equals_r2_without_them():
    X, Y, _ = _data(missing=0.0)
    est = GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01).fit(X, Y)
    assert est.score(X, Y) == pytest.approx(r2_score(Y, est.predict(X)), rel=1e-12)
    Ym = Y.copy()
    Ym[0, 1] = np.nan
    pred = est.predict(X)
    keep = np.arange(X.shape[0]) != 0
    expected = np.mean([r2_score(Y[:, 0], pred[:, 0]), r2_score(Y[keep, 1], pred[keep, 1]),
                        r2_score(Y[:, 2], pred[:, 2])])
    assert est.score(X, Ym) == pytest.approx(expected, rel=1e-12)


def test_clone_pickle_and_grid_search_with_missing_targets():
    X, Y, Xt = _data(n=40)
    est = GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01, rank=2, normalize_y=True)
    twin = clone(est)
    assert twin.get_params()["rank"] == 2 and twin.get_params()["multioutput"] == "icm"
    est.fit(X, Y)
    assert est.rank == 2 and est.multioutput == "icm"  # constructor arguments untouched
    again = pickle.loads(pickle.dumps(est))
    for a, b in zip(est.predict(Xt, return_std=True), again.predict(Xt, return_std=True),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert repr(again.kernel_) == repr(est.kernel_)
    search = GridSearchCV(GPRegressor(RBF(lengthscale=np.ones(2)), alpha=0.01,
                                      normalize_y=True),
                          {"multioutput": ["icm", "independent"], "rank": [1, 2]}, cv=2)
    search.fit(X, Y)
    assert search.cv_results_["mean_test_score"].shape == (4,)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.best_estimator_.predict(Xt).shape == (Xt.shape[0], T)


@pytest.mark.parametrize("backend", [p for p in _BACKEND_PARAMS if p.values[0] != "numpy"])
def test_backend_argument_gives_the_numpy_results(backend):
    X, Y, Xt = _data()
    kw = dict(alpha=0.01, optimizer=None, normalize_y=True)
    ref = GPRegressor(RBF(lengthscale=np.ones(2)), **kw).fit(X, Y)
    est = GPRegressor(RBF(lengthscale=np.ones(2)), backend=backend, **kw).fit(X, Y)
    assert est.model_.xp is B.namespace_by_name(backend)
    for a, b in zip(est.predict(Xt, return_std=True), ref.predict(Xt, return_std=True),
                    strict=True):
        assert type(a) is np.ndarray
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    _, _, joint = _dense_posterior(est, X, Y, Xt)
    np.testing.assert_allclose(est.predict(Xt, return_std=True)[1],
                               np.sqrt(np.diag(joint)).reshape(-1, T), rtol=1e-8, atol=1e-10)


def test_clear_errors():
    X, Y, _ = _data()
    bad = Y.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="y contains infinity"):
        GPRegressor().fit(X, bad)
    empty = Y.copy()
    empty[:, 1] = np.nan
    with pytest.raises(ValueError, match=r"output column\(s\) \[1\] have no observed entry"):
        GPRegressor().fit(X, empty)
    with pytest.raises(ValueError, match="multioutput: expected one of"):
        GPRegressor(multioutput="lmc").fit(X, Y)
    with pytest.raises(ValueError, match="rank: expected an integer >= 1"):
        GPRegressor(rank=0).fit(X, Y)
    with pytest.raises(ValueError, match="solver: with several target columns"):
        GPRegressor(solver="cg").fit(X, Y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        GPRegressor().fit(X[:-1], Y)
