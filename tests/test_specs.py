"""Kernel and likelihood specs (gpnum.models.kernel_spec & co.), the one home that checkpoints
and the scikit-learn estimators share: every kernel class, with children and list settings,
round-trips, clones, pickles and fits in GPRegressor; a periodic kernel in GridSearchCV."""

import json
import pickle

import numpy as np
import pytest

import gpnum
import gpnum.kernels as K
from gpnum import backend as B
from gpnum.likelihoods import LIKELIHOOD_NAMES, canonical_name, from_name
from gpnum.models import kernel_from_spec, kernel_spec, likelihood_from_spec, likelihood_spec


def _every_kernel():
    """One instance of every concrete kernel class in gpnum.kernels, with children and list
    settings where the class has them; on 2 input columns."""
    return {
        "ArcCosine": K.ArcCosine(depth=2, weight_variance=[1.5, 0.5, 1.0], active_dims=[0, 1]),
        "ChangePoints": K.ChangePoints([K.RBF(0.7), K.Linear(0.3)], locations=0.1,
                                       steepness=2.0),
        "Constant": K.Constant(0.4),
        "Coregion": K.Coregion(3, 2, active_dims=[1]) * K.Matern32(0.7, active_dims=[0]),
        "Cosine": K.Cosine(1.3, 0.8),
        "Linear": K.Linear([0.5, 1.5]),
        "Matern12": K.Matern12(0.9),
        "Matern32": K.Matern32([0.9, 1.1]),
        "Matern52": K.Matern52([0.9, 1.1], 2.0, active_dims=[0, 1]),
        "Periodic": K.RBF([1.0, 2.0]) * K.Periodic(K.Matern52(0.8), period=[1.5, 2.5]),
        "Polynomial": K.Polynomial(3, variance=0.2, offset=0.5),
        "RBF": K.RBF(0.6, 1.7, active_dims=[1]),
        "RationalQuadratic": K.RationalQuadratic(0.8, alpha=2.0),
        "SHO": K.SHO(0.7, period=1.3, quality=2.0, active_dims=[0]),
        "SameGroup": K.Matern32(0.7, active_dims=[0]) * K.SameGroup(active_dims=[1]),
        "PeriodicSeries": K.PeriodicSeries(0.8, 0.9, period=1.4, order=3, active_dims=[0]),
        "SpectralMixture": K.SpectralMixture(2, 2),
        "Sum": K.Sum(K.RBF(1.0), K.White(0.1), active_dims=[0, 1]),
        "White": K.White(0.2) + K.RBF(),
        "expression": K.from_expression("rbf + rbf*periodic + rq + white", input_dim=2,
                                        ard=True, dtype="float64"),
    }


def _X(n=9, seed=0):
    X = np.random.default_rng(seed).uniform(-1.0, 1.0, (n, 2))
    X[:, 1] = np.arange(n) % 3  # Coregion's output index
    return X


def test_every_kernel_class_is_covered():
    covered = {type(k).__name__ for k in _every_kernel().values()}
    stack = list(_every_kernel().values())
    while stack:
        k = stack.pop()
        covered.add(type(k).__name__)
        if isinstance(k, K.ParentKernel):
            stack.extend(c for _, c in k.children())
    concrete = {n for n in K.__all__ if isinstance(getattr(K, n), type)
                and issubclass(getattr(K, n), K.Kernel)
                and getattr(K, n) not in (K.Kernel, K.ParentKernel, K.Stationary)}
    concrete = {getattr(K, n).__name__ for n in concrete}
    assert concrete <= covered, concrete - covered


@pytest.mark.parametrize("name", sorted(_every_kernel()))
def test_kernel_spec_round_trips_through_json(name):
    kernel = _every_kernel()[name]
    spec = json.loads(json.dumps(kernel_spec(kernel)))
    params = {k: B.to_numpy(v) for k, v in kernel.parameters().items()}
    # perturb the values so that a rebuilt kernel at its defaults would not pass
    params = {k: v * 1.1 for k, v in params.items()}
    again = kernel_from_spec(spec, params, xp=B.namespace_by_name("numpy"), dtype=np.float64)
    assert type(again) is type(kernel)
    kernel.set_parameters(params)
    X = _X()
    np.testing.assert_allclose(B.to_numpy(again(X)), B.to_numpy(kernel(X)), rtol=1e-14,
                               atol=0)
    assert kernel_spec(again) == spec


def test_likelihood_specs_and_the_one_name_table():
    xp = B.namespace_by_name("numpy")
    for name in LIKELIHOOD_NAMES:
        lik = from_name(name, num_classes=3 if name in ("softmax", "robust-max", "ordinal")
                        else None)
        spec = json.loads(json.dumps(likelihood_spec(lik)))
        params = {k: B.to_numpy(v) for k, v in lik.parameters().items()}
        again = likelihood_from_spec(spec, params, xp=xp, dtype=np.float64)
        assert repr(again) == repr(lik)
    assert canonical_name("StudentT") == canonical_name("student_t") == "student-t"
    assert canonical_name("RobustMax") == "robust-max"
    with pytest.raises(ValueError, match="unknown name 'nope'"):
        canonical_name("nope")
    with pytest.raises(ValueError, match="not one of gpnum's kernels or likelihoods"):
        kernel_from_spec({"module": "os", "class": "system", "settings": {}})
    with pytest.raises(ValueError, match="is not a kernel"):
        kernel_from_spec(likelihood_spec(from_name("gaussian")))


def test_likelihoods_factory_does_not_import_its_own_package():
    import ast
    import pathlib

    import gpnum.likelihoods._factory as factory

    tree = ast.parse(pathlib.Path(factory.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module != "gpnum.likelihoods" and not (
                node.module == "gpnum" and any(a.name == "likelihoods" for a in node.names))


@pytest.mark.parametrize("name", sorted(_every_kernel()))
def test_every_kernel_clones_pickles_and_fits_in_gpregressor(name):
    pytest.importorskip("sklearn")
    from sklearn.base import clone

    from gpnum.sklearn import GPRegressor

    kernel = _every_kernel()[name]
    X = _X(12, seed=1)
    y = np.sin(2.0 * X[:, 0]) + 0.1 * X[:, 1]
    est = GPRegressor(kernel, alpha=0.05, maxiter=15)
    twin = clone(est)
    assert twin.kernel is not kernel and type(twin.kernel) is type(kernel)
    np.testing.assert_allclose(B.to_numpy(twin.kernel(X)), B.to_numpy(kernel(X)), rtol=1e-14)
    params = est.get_params()
    twin.set_params(**{k: v for k, v in params.items() if k.startswith("kernel__")})
    np.testing.assert_allclose(B.to_numpy(twin.kernel(X)), B.to_numpy(kernel(X)), rtol=1e-14)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.errors.ConvergenceWarning)
        est.fit(X, y)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_allclose(back.predict(X), est.predict(X), rtol=1e-12, atol=1e-12)
    # the fitted model's LML equals a dense NumPy evaluation at the fitted kernel
    K_ = B.to_numpy(est.kernel_(X)) + 0.05 * np.eye(12)
    sign, logdet = np.linalg.slogdet(K_)
    lml = -0.5 * y @ np.linalg.solve(K_, y) - 0.5 * logdet - 6.0 * np.log(2 * np.pi)
    assert sign > 0
    np.testing.assert_allclose(est.log_marginal_likelihood_value_, lml, rtol=1e-8)


def test_nested_parameter_names_of_a_periodic_product():
    pytest.importorskip("sklearn")
    from gpnum.sklearn import GPRegressor

    est = GPRegressor(K.RBF(1.0) * K.Periodic(K.RBF(0.5), period=2.0))
    params = est.get_params()
    assert {"kernel__0__lengthscale", "kernel__1__period", "kernel__1__base__lengthscale",
            "kernel__1__base__variance", "kernel__1__active_dims"} <= set(params)
    est.set_params(kernel__1__base__lengthscale=0.25, kernel__1__period=3.0)
    assert float(B.to_numpy(est.kernel.kernels[1].base.lengthscale)) == 0.25
    assert float(B.to_numpy(est.kernel.kernels[1].period)) == 3.0
    with pytest.raises(ValueError, match="kernel__1__base__bogus"):
        est.set_params(kernel__1__base__bogus=1.0)


def test_a_periodic_kernel_in_grid_search():
    pytest.importorskip("sklearn")
    from sklearn.model_selection import GridSearchCV

    from gpnum.sklearn import GPRegressor

    rng = np.random.default_rng(2)
    X = rng.uniform(0.0, 6.0, (30, 1))
    y = np.sin(2.0 * np.pi * X[:, 0] / 1.5) + 0.05 * rng.normal(size=30)
    search = GridSearchCV(GPRegressor(K.Periodic(K.RBF(1.0), period=1.0), alpha=0.01,
                                      optimizer=None),
                          {"kernel__period": [0.7, 1.5, 3.0]}, cv=3)
    search.fit(X, y)
    assert search.best_params_ == {"kernel__period": 1.5}
