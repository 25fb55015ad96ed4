"""Likelihoods by name, for command lines and configuration files."""

from __future__ import annotations

from gpnum.likelihoods._bernoulli import Bernoulli
from gpnum.likelihoods._beta import Beta
from gpnum.likelihoods._counts import NegativeBinomial, Poisson
from gpnum.likelihoods._gaussian import Gaussian
from gpnum.likelihoods._heteroscedastic import HeteroscedasticGaussian
from gpnum.likelihoods._laplace import Laplace
from gpnum.likelihoods._ordinal import Ordinal
from gpnum.likelihoods._positive import Exponential, Gamma
from gpnum.likelihoods._robust_max import RobustMax
from gpnum.likelihoods._softmax import Softmax
from gpnum.likelihoods._student_t import StudentT

__all__ = ["LIKELIHOOD_NAMES", "LIKELIHOOD_TARGETS", "canonical_name", "from_name"]

#: name -> (class, needs num_classes, targets); names are lower case. ``targets``: "real",
#: "count", "positive", "unit" (in (0, 1)), "binary" or "classes" (class labels).
_TABLE = {
    "gaussian": (Gaussian, False, "real"),
    "student-t": (StudentT, False, "real"),
    "laplace": (Laplace, False, "real"),
    "heteroscedastic-gaussian": (HeteroscedasticGaussian, False, "real"),
    "bernoulli": (Bernoulli, False, "binary"),
    "bernoulli-logit": (Bernoulli, False, "binary"),
    "poisson": (Poisson, False, "count"),
    "negative-binomial": (NegativeBinomial, False, "count"),
    "exponential": (Exponential, False, "positive"),
    "gamma": (Gamma, False, "positive"),
    "beta": (Beta, False, "unit"),
    "softmax": (Softmax, True, "classes"),
    "robust-max": (RobustMax, True, "classes"),
    "ordinal": (Ordinal, True, "classes"),
}

#: the names :func:`from_name` accepts
LIKELIHOOD_NAMES = tuple(_TABLE)

#: what each name's targets are: "real", "count", "positive", "unit", "binary", "classes"
LIKELIHOOD_TARGETS = {name: row[2] for name, row in _TABLE.items()}

#: "student-t", "studentt", "StudentT" and "Student_T" are one name
_SQUEEZED = {k.replace("-", ""): k for k in _TABLE}


def canonical_name(name):
    """The :data:`LIKELIHOOD_NAMES` entry that ``name`` spells (case-insensitive; ``-`` and
    ``_`` optional, so class names such as ``"StudentT"`` or ``"RobustMax"`` resolve too).

    Raises
    ------
    ValueError
        Unknown name.
    """
    key = _SQUEEZED.get(str(name).strip().lower().replace("_", "").replace("-", ""))
    if key is None:
        raise ValueError(f"likelihood: unknown name {name!r}; expected one of "
                         f"{', '.join(LIKELIHOOD_NAMES)}")
    return key


def from_name(name, *, num_classes=None, xp=None, dtype=None, device=None):
    """A likelihood with its default settings, from a short name.

    Parameters
    ----------
    name : str
        One of :data:`LIKELIHOOD_NAMES` (case-insensitive; ``-`` and ``_`` are optional):
        ``gaussian``, ``student-t``, ``laplace``, ``heteroscedastic-gaussian``, ``bernoulli``
        (probit), ``bernoulli-logit``, ``poisson``, ``negative-binomial``, ``exponential``,
        ``gamma``, ``beta``, ``softmax``, ``robust-max``, ``ordinal``.
    num_classes : int, optional
        Required by ``softmax``, ``robust-max`` and ``ordinal``; refused by the others.
    xp, dtype, device : optional
        Namespace, dtype and device of the likelihood's parameters.

    Returns
    -------
    gpnum.likelihoods.Likelihood

    Raises
    ------
    ValueError
        Unknown name, or ``num_classes`` missing / not wanted.
    """
    key = canonical_name(name)
    cls, multiclass, _ = _TABLE[key]
    kw = dict(xp=xp, dtype=dtype, device=device)
    if multiclass:
        if num_classes is None:
            raise ValueError(f"likelihood: {key!r} needs num_classes (the number of classes)")
        return cls(int(num_classes), **kw)
    if num_classes is not None:
        raise ValueError(f"likelihood: {key!r} takes no num_classes (got {num_classes!r})")
    if key == "bernoulli-logit":
        return cls("logit", **kw)
    return cls(**kw)
