"""Observation models ``p(y | f)``: variational expectations, predictive densities, gradients.

Every likelihood is a :class:`gpnum.params.Parameterised` object with parameters in natural
form and offers

- ``variational_expectations(y, mu, var)`` -> (n,): ``E_{N(f; mu, var)}[log p(y | f)]``;
- ``variational_expectations_and_grad(y, mu, var)`` -> ``(ve, {"mu", "var", "params"})``;
- ``predictive_log_density(y, mu, var)`` -> (n,): ``log E_{N(f; mu, var)}[p(y | f)]``;
- ``predict_mean_and_var(mu, var)`` -> mean and variance of ``y``;
- ``check_targets(y)``: a clear error for targets outside the support.

:class:`Gaussian`, :class:`Laplace`, :class:`HeteroscedasticGaussian` and the variational
expectations of :class:`Poisson`, :class:`Exponential` and :class:`Gamma` are closed form; the
others use a Gauss-Hermite rule whose derivative is taken exactly (docs/likelihoods.md), and
:class:`Softmax` a fixed quasi-Monte-Carlo cubature in ``K`` dimensions.
:func:`from_name` builds one from a short name (``gpnum fit --likelihood NAME``).
"""

from gpnum.likelihoods._base import Likelihood
from gpnum.likelihoods._bernoulli import Bernoulli
from gpnum.likelihoods._beta import Beta
from gpnum.likelihoods._counts import NegativeBinomial, Poisson
from gpnum.likelihoods._factory import (
    LIKELIHOOD_NAMES,
    LIKELIHOOD_TARGETS,
    canonical_name,
    from_name,
)
from gpnum.likelihoods._gaussian import Gaussian
from gpnum.likelihoods._heteroscedastic import HeteroscedasticGaussian
from gpnum.likelihoods._laplace import Laplace
from gpnum.likelihoods._ordinal import Ordinal
from gpnum.likelihoods._positive import Exponential, Gamma
from gpnum.likelihoods._quadrature import gauss_hermite
from gpnum.likelihoods._robust_max import RobustMax
from gpnum.likelihoods._softmax import Softmax, normal_cubature_points
from gpnum.likelihoods._student_t import StudentT
from gpnum.special import (
    erfcx,
    log_gamma_half_ratio,
    log_gamma_half_ratio_and_grad,
    log_ndtr,
    log_ndtr_and_grad,
    logsumexp,
    ndtr,
)

__all__ = [
    "Bernoulli",
    "Beta",
    "Exponential",
    "Gamma",
    "Gaussian",
    "HeteroscedasticGaussian",
    "LIKELIHOOD_NAMES",
    "LIKELIHOOD_TARGETS",
    "Laplace",
    "Likelihood",
    "NegativeBinomial",
    "Ordinal",
    "Poisson",
    "RobustMax",
    "Softmax",
    "StudentT",
    "canonical_name",
    "from_name",
    "normal_cubature_points",
    "erfcx",
    "gauss_hermite",
    "log_gamma_half_ratio",
    "log_gamma_half_ratio_and_grad",
    "log_ndtr",
    "log_ndtr_and_grad",
    "logsumexp",
    "ndtr",
]
