"""The model protocol in code (gpnum.models.Model): every gpnum model satisfies it, and a
foreign object gets one clear TypeError naming what it lacks wherever it enters gpnum."""

import pickle

import numpy as np
import pytest

import gpnum
from gpnum.kernels import ICM, RBF, Matern52
from gpnum.likelihoods import Bernoulli, Gaussian
from gpnum.models import Model, ModelDefaults, check_model, model_members


def _models():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = np.sin(X[:, 0])
    Y = rng.normal(size=(30, 3))
    Z = X[:5]
    k = lambda: Matern52(lengthscale=np.ones(2))  # noqa: E731
    return {
        "GPR": gpnum.GPR(k(), Gaussian(variance=0.1), X, y),
        "SGPR": gpnum.SGPR(k(), Gaussian(variance=0.1), X, y, Z),
        "SVGP": gpnum.SVGP(k(), Gaussian(variance=0.1), Z, num_data=30),
        "GVI": gpnum.GVI(k(), Gaussian(variance=0.1), Z, num_data=30),
        "SVTP": gpnum.SVTP(k(), Z, num_data=30),
        "MultiOutputGPR": gpnum.models.MultiOutputGPR(ICM(k(), 3, 1),
                                                      Gaussian(variance=np.full(3, 0.1)), X, Y),
        "LMCSVGP": gpnum.models.LMCSVGP([k(), k()], Gaussian(variance=np.full(3, 0.1)), Z,
                                        num_outputs=3, num_data=30),
        "OILMM": gpnum.models.OILMM([k(), k()], Gaussian(variance=0.1), X, Y),
        "MarkovVGP": gpnum.MarkovVGP(Matern52(), Bernoulli(), X[:, :1], X[:, 1] > 0.0),
    }


def test_every_model_class_is_exported_and_satisfies_the_protocol():
    made = _models()
    exported = {n for n in gpnum.models.__all__
                if isinstance(getattr(gpnum.models, n), type)
                and issubclass(getattr(gpnum.models, n), ModelDefaults)
                and getattr(gpnum.models, n) is not ModelDefaults}
    assert exported == set(made)
    for name, model in made.items():
        assert isinstance(model, Model), name
        check_model(model, ("fit", "predict", "checkpoint", "distributed"))
        # positive_names lists exactly the positive parameters that exist
        assert set(model.positive_names()) <= set(model.parameters()), name
        # every kernel lengthscale (multi-output kernels' too) is positive, for L-BFGS-B's
        # log coordinates
        scales = [n for n in model.parameters() if n.endswith("lengthscale")]
        assert scales and set(scales) <= set(model.positive_names()), name
    assert "likelihood.variance" in made["GPR"].positive_names()
    assert "mean" not in made["GPR"].positive_names()


def test_optional_members_have_their_defaults():
    made = _models()
    assert made["GPR"].objective_name == "lml"
    assert made["SVGP"].objective_name == "elbo"
    assert made["SVGP"].natural_gradient_step is None
    assert callable(made["SVTP"].natural_gradient_step)
    assert made["SVGP"].natural_gradient_names == ("q_mu", "q_sqrt", "q_theta1", "q_precision")
    assert made["SVGP"].prior_term_and_grad is not None
    assert made["GVI"].prior_term_and_grad is None
    assert made["GPR"].cg_objective_and_grad is not None
    assert made["SGPR"].cg_objective_and_grad is None and made["SGPR"].uses_cg is False
    assert made["SVGP"].whitening == "cholesky" and made["SVTP"].whitening is None
    assert all(m.training_state is None for m in made.values())
    made["GPR"].to_cholesky()  # the default is a no-op


def test_positive_names_follow_nested_kernels():
    from gpnum.kernels import Periodic

    kernel = RBF(lengthscale=np.ones(2)) * Periodic(RBF(), period=2.0)
    assert kernel.positive_names() == ("0.lengthscale", "0.variance", "1.period",
                                       "1.base.lengthscale", "1.base.variance")


class _Foreign:
    """An object with some of the protocol: parameters and an objective, nothing else."""

    def parameters(self):
        return {}

    def objective_and_grad(self, X, y):
        return 0.0, {}


def test_check_model_names_what_is_missing():
    with pytest.raises(TypeError, match=r"_Foreign is not a model .* lacks xp, dtype, device,"
                                        r" full_batch, num_data, set_parameters"):
        check_model(_Foreign(), "fit")
    with pytest.raises(ValueError, match="need"):
        model_members("nonsense")
    assert "predict_f" in model_members("predict")


def test_a_foreign_model_is_refused_clearly_at_fit_ngd_checkpoint_and_distributed(tmp_path):
    X, y = np.zeros((4, 1)), np.zeros(4)
    with pytest.raises(TypeError, match=r"gpnum.fit: .*_Foreign .* lacks .*set_parameters"):
        gpnum.fit(_Foreign(), X, y)
    with pytest.raises(TypeError, match=r"NaturalGradient.step: .*_Foreign"):
        gpnum.optim.NaturalGradient(0.1).step(_Foreign(), X, y)
    with pytest.raises(TypeError, match=r"save: .*_Foreign .* lacks .*config, data, from_config"):
        gpnum.save(_Foreign(), tmp_path / "x.npz")
    with pytest.raises(TypeError, match=r"model_state: .*_Foreign"):
        gpnum.checkpoint.model_state(_Foreign())


def test_a_foreign_model_is_refused_clearly_by_the_estimators():
    pytest.importorskip("sklearn")
    from gpnum.sklearn import GPRegressor

    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 1))
    est = GPRegressor(optimizer=None).fit(X, np.sin(X[:, 0]))
    est.model_ = _Foreign()
    with pytest.raises(TypeError, match=r"_Foreign is not a model .* lacks"):
        pickle.dumps(est)
