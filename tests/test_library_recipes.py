"""The library functions behind the command line's capabilities (issue 30): each against an
independent construction by hand, on every backend."""

import gzip

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum import datasets, kernels, likelihoods


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=np.float64)


def _data(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X @ np.arange(1.0, d + 1.0)) + 0.1 * rng.normal(size=n)


# ----------------------------------------------------------------------------- datasets


def test_random_subset_keeps_the_chosen_rows_in_order(xp, to_xp):
    X, y = _data()
    Xs, ys = datasets.random_subset(to_xp(X), to_xp(y), 25, seed=4)
    idx = np.sort(np.random.default_rng(4).choice(60, 25, replace=False))
    np.testing.assert_allclose(_np(Xs), X[idx], rtol=1e-6)
    np.testing.assert_allclose(_np(ys), y[idx], rtol=1e-6)
    Xa, ya = datasets.random_subset(to_xp(X), to_xp(y), 600)
    assert Xa.shape == (60, 3) and ya.shape == (60,)


def test_holdout_partitions_the_rows(xp, to_xp):
    X, y = _data(n=57)
    X_tr, y_tr, X_ho, y_ho = datasets.holdout(to_xp(X), to_xp(y), 0.1, seed=2)
    assert X_ho.shape == (5, 3) and X_tr.shape == (52, 3)
    both = np.concatenate([_np(y_tr), _np(y_ho)])
    np.testing.assert_allclose(np.sort(both), np.sort(y.astype(np.float32) if y_tr.dtype == xp.float32
                                                      else y), rtol=1e-6)
    perm = np.random.default_rng(2).permutation(57)
    np.testing.assert_allclose(_np(y_ho), y[np.sort(perm[:5])], rtol=1e-6)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.2])
def test_holdout_refuses_a_fraction_outside_0_1(bad):
    X, y = _data()
    with pytest.raises(ValueError, match="fraction must lie in"):
        datasets.holdout(X, y, bad)


def test_outliers_shift_that_fraction_by_three_standard_deviations(xp, to_xp):
    y = np.random.default_rng(0).normal(size=200)
    z = _np(datasets.add_outliers(to_xp(y), 0.05, seed=3))
    y = _np(to_xp(y))
    moved = np.flatnonzero(np.abs(z - y) > 1e-3)
    assert moved.size == 10
    np.testing.assert_allclose(np.abs(z[moved] - y[moved]), 3.0 * y.std(), rtol=1e-5)


def test_load_series_reads_named_columns_and_standardises(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.normal(size=(30, 3)) * [1.0, 5.0, 2.0] + [0.0, 10.0, -3.0]
    path = tmp_path / "s.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("a,b,c\n" + "\n".join(",".join(f"{v:.17g}" for v in row) for row in data))
    Y, Y_raw, names, _ = datasets.load_series(str(path), ["c", "0"])
    assert names == ["c", "a"]
    np.testing.assert_allclose(Y_raw, data[:, [2, 0]], rtol=1e-14)
    ref = (data[:, [2, 0]] - data[:, [2, 0]].mean(0)) / data[:, [2, 0]].std(0)
    np.testing.assert_allclose(Y, ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="no column 'zz'"):
        datasets.load_series(str(path), ["zz"])


def test_load_series_defaults_to_the_bundled_elec_demand():
    Y, Y_raw, names, label = datasets.load_series(standardize=False)
    assert names == ["nswdemand", "vicdemand"] and label.startswith("elec")
    assert Y.shape == Y_raw.shape and Y.shape[1] == 2 and Y.shape[0] > 40000


# ----------------------------------------------------------------------------- models


def test_build_model_equals_the_model_built_by_hand(xp, dtype, to_xp, device):
    X, y = _data()
    Xb, yb = to_xp(X), to_xp(y)
    built = gpnum.models.build_model(Xb, model="svgp", kernel="matern32", likelihood="gaussian",
                                     num_inducing=12, seed=5)
    kern = kernels.Matern32(lengthscale=np.ones(3), variance=1.0, xp=xp, dtype=dtype,
                            device=device)
    lik = likelihoods.Gaussian(variance=0.693, xp=xp, dtype=dtype, device=device)
    Z = gpnum.inducing.kmeans(Xb, 12, seed=5)
    jitter = 1e-4 if dtype == xp.float32 else 1e-6
    by_hand = gpnum.SVGP(kern, lik, Z, num_data=60, jitter=jitter)
    a, _ = built.objective_and_grad(Xb, yb)
    b, _ = by_hand.objective_and_grad(Xb, yb)
    np.testing.assert_allclose(float(a), float(b), rtol=1e-6 if dtype == xp.float32 else 1e-12)


@pytest.mark.parametrize("kind", ["gpr", "sgpr", "svtp"])
def test_build_model_makes_each_model(kind):
    X, y = _data()
    model = gpnum.models.build_model(X, y, model=kind, num_inducing=10, kernel="rbf")
    assert type(model).__name__ == kind.upper()
    assert np.isfinite(float(model.objective_and_grad(X, y)[0]))


def test_build_model_errors_name_the_problem():
    X, y = _data()
    with pytest.raises(ValueError, match="model 'gpr' holds its training data: pass y"):
        gpnum.models.build_model(X, model="gpr")
    with pytest.raises(ValueError, match="num_inducing: 100 is not in 1..60"):
        gpnum.models.build_model(X, num_inducing=100)
    with pytest.raises(ValueError, match="kernel: kernel expression 'periodicity': unknown"):
        gpnum.models.build_model(X, kernel="periodicity")
    with pytest.raises(ValueError, match="Gaussian-likelihood model"):
        gpnum.models.build_model(X, y, model="gpr", likelihood="studentt")


@pytest.mark.parametrize("mode", ["prior", "posterior"])
def test_gvi_from_svgp_takes_the_svgps_regulariser(mode):
    X, y = _data()
    svgp = gpnum.models.build_model(X, num_inducing=10, seed=1)
    gpnum.fit(svgp, X, y, epochs=2, batch_size=30, progress=False, seed=0)
    lik = likelihoods.Gaussian(variance=0.5)
    gvi = gpnum.GVI.from_svgp(svgp, lik, mode=mode, divergence="projected-kl")
    Z = svgp.inducing_points
    extra = {}
    if mode == "posterior":
        extra = dict(inducing_targets=svgp.predict_f(Z)[0],
                     regulariser_noise=max(float(svgp.likelihood.variance), 1e-4))
    ref = gpnum.GVI(svgp.kernel, likelihoods.Gaussian(variance=0.5), Z, num_data=60,
                    mode=mode, divergence="projected-kl", prior_mean=float(svgp.mean), **extra)
    a = gvi.objective_and_grad(X, y)[0]
    b = ref.objective_and_grad(X, y)[0]
    np.testing.assert_allclose(float(a), float(b), rtol=1e-12)
    assert gvi.kernel is svgp.kernel and gvi.likelihood is lik


def test_gvi_from_svgp_refuses_several_latent_functions():
    X, _ = _data()
    Z = np.stack([X[:5], X[5:10]])
    svgp = gpnum.SVGP(kernels.RBF(), likelihoods.Softmax(2), Z, num_data=60)
    with pytest.raises(ValueError, match="one latent function and one set of inducing points, "
                                         "got num_latent=2, separate_inducing=True"):
        gpnum.GVI.from_svgp(svgp, likelihoods.Gaussian())


def test_gvi_by_selection_is_algorithm2_then_gvi():
    X, y = _data(n=80)
    kern = kernels.RBF(lengthscale=np.ones(3))
    model, sel = gpnum.optim.gvi_by_selection(X, y, kern, likelihoods.Gaussian(variance=0.5), 8,
                                              max_rounds=2, mode="posterior",
                                              divergence="wasserstein")
    noise = likelihoods.Gaussian(variance=0.1)
    sel2 = gpnum.optim.select_inducing(X, y, kernels.RBF(lengthscale=np.ones(3)), noise, 8,
                                       max_iter=2, maxiter=200)
    np.testing.assert_allclose(_np(sel.inducing_points), _np(sel2.inducing_points), rtol=1e-12)
    ref = gpnum.GVI(sel2.kernel, likelihoods.Gaussian(variance=0.5), sel2.inducing_points,
                    num_data=80, mode="posterior", divergence="wasserstein",
                    inducing_targets=sel2.inducing_targets,
                    regulariser_noise=max(float(noise.variance), 1e-4),
                    prior_mean=float(sel2.mean))
    np.testing.assert_allclose(float(model.objective_and_grad(X, y)[0]),
                               float(ref.objective_and_grad(X, y)[0]), rtol=1e-10)
    with pytest.raises(ValueError, match="Gaussian or Bernoulli"):
        gpnum.optim.gvi_by_selection(X, y, kern, likelihoods.StudentT(), 8)


def test_build_model_starts_a_count_model_at_the_log_mean_count():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    y = rng.poisson(300.0, size=50).astype(np.float64)
    model = gpnum.models.build_model(X, y, likelihood="poisson", num_inducing=5)
    np.testing.assert_allclose(float(model.mean), np.log(y.mean()), rtol=1e-12)
    model = gpnum.models.build_model(X, y, likelihood="softmax", num_classes=3, num_inducing=5)
    assert model.num_latent == 3


def test_build_rules_are_one_function_that_names_the_option():
    from gpnum.models import BuildOptionError, check_build_options

    cases = [(dict(model="sgpr", likelihood="poisson"), "likelihood"),
             (dict(model="gpr", likelihood=gpnum.likelihoods.StudentT()), "likelihood"),
             (dict(model="svtp", separate_inducing=True), "separate_inducing"),
             (dict(model="svgp", solver="cg"), "solver"),
             (dict(model="sgpr", cg_options={"num_probes": 4}), "cg_options"),
             (dict(model="svgp", num_inducing=61, num_data=60), "num_inducing")]
    for kwargs, option in cases:
        with pytest.raises(BuildOptionError) as err:
            check_build_options(kwargs.pop("model"), **kwargs)
        assert err.value.option == option
    # what is allowed passes
    check_build_options("gpr", likelihood="Gaussian", solver="cg", num_inducing=10**6,
                        num_data=60)
    check_build_options("svgp", separate_inducing=True, num_inducing=60, num_data=60)
