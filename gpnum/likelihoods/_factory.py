"""Likelihoods by name, for command lines and configuration files."""

from __future__ import annotations

__all__ = ["LIKELIHOOD_NAMES", "from_name"]

#: name -> (class name, needs num_classes); names are lower case
_TABLE = {
    "gaussian": ("Gaussian", False),
    "student-t": ("StudentT", False),
    "laplace": ("Laplace", False),
    "heteroscedastic-gaussian": ("HeteroscedasticGaussian", False),
    "bernoulli": ("Bernoulli", False),
    "bernoulli-logit": ("Bernoulli", False),
    "poisson": ("Poisson", False),
    "negative-binomial": ("NegativeBinomial", False),
    "exponential": ("Exponential", False),
    "gamma": ("Gamma", False),
    "beta": ("Beta", False),
    "softmax": ("Softmax", True),
    "robust-max": ("RobustMax", True),
    "ordinal": ("Ordinal", True),
}

#: the names :func:`from_name` accepts
LIKELIHOOD_NAMES = tuple(_TABLE)


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
    from gpnum import likelihoods

    # "student-t", "studentt" and "Student_T" are one name
    squeeze = {k.replace("-", ""): k for k in _TABLE}
    key = squeeze.get(str(name).strip().lower().replace("_", "").replace("-", ""))
    if key is None:
        raise ValueError(f"likelihood: unknown name {name!r}; expected one of "
                         f"{', '.join(LIKELIHOOD_NAMES)}")
    cls_name, multiclass = _TABLE[key]
    cls = getattr(likelihoods, cls_name)
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
