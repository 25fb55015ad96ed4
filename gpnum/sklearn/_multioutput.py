"""``GPRegressor`` with several target columns: ``y`` of shape (n, t), NaN for a missing entry.

The rule: ``y`` with ``t >= 2`` columns gives a :class:`gpnum.models.MultiOutputGPR` whose
kernel is built from the estimator's ``kernel`` by ``multioutput``:

- ``"icm"`` (default): ``ICM(kernel, t, rank)``, ``B = W W^T + diag(kappa)`` with ``W`` of
  ``rank`` columns (Bonilla, Chai & Williams 2008), learned with the kernel;
- ``"independent"``: ``IndependentOutputs`` of ``t`` copies of ``kernel``, each with its own
  hyper-parameters (no output informs another).

Every output has noise variance ``alpha`` (fixed, or the start of ``t`` learned variances with
``learn_noise``) and a zero prior mean after ``normalize_y`` (which removes each column's mean
and standard deviation over its observed entries). ``y`` with one column is the single-output
estimator (as in scikit-learn, predictions are then 1-D).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import r2_score
from sklearn.utils import check_array, check_consistent_length

from gpnum import backend as B
from gpnum.models import MULTIOUTPUT_KINDS, build_multioutput_model

__all__ = ["MULTIOUTPUT_KINDS", "is_multi_target", "target_shape", "check_targets", "build_model",
           "column_normalisation", "multi_score", "per_output_cov"]

#: GPRegressor's solvers that a MultiOutputGPR takes (its own names; "auto" picks the path).
_SOLVERS = ("auto", "cholesky")


def target_shape(y) -> tuple:
    """The shape of ``y`` (an array, DataFrame, list, or an object with ``__array__`` only)."""
    shape = getattr(y, "shape", None)
    return tuple(shape) if shape is not None else np.asarray(y).shape


def is_multi_target(y) -> bool:
    """Whether ``y`` has two or more columns (the multi-output estimator)."""
    shape = target_shape(y)
    return len(shape) == 2 and shape[1] >= 2


def check_targets(X, y):
    """``y`` as a float64 (n, t) array: NaN allowed (missing), Inf refused (by scikit-learn's
    ``check_array``), every output observed at least once, one row per row of ``X``."""
    Y = check_array(y, ensure_all_finite="allow-nan", dtype=np.float64, input_name="y")
    check_consistent_length(X, Y)
    empty = np.flatnonzero(np.isnan(Y).all(axis=0))
    if empty.size:
        raise ValueError(f"y: output column(s) {empty.tolist()} have no observed entry (all NaN)")
    return Y


def column_normalisation(Y, normalize_y):
    """Per-output ``(mean (t,), std (t,))`` over the observed entries (a zero standard
    deviation is taken as 1, scikit-learn's rule); zeros and ones without ``normalize_y``."""
    t = Y.shape[1]
    if not normalize_y:
        return np.zeros(t), np.ones(t)
    mean, std = np.nanmean(Y, axis=0), np.nanstd(Y, axis=0)
    return mean, np.where(std > 0.0, std, 1.0)


def _check_kind(multioutput, rank, solver):
    if multioutput not in MULTIOUTPUT_KINDS:
        raise ValueError(f"multioutput: expected one of {', '.join(map(repr, MULTIOUTPUT_KINDS))},"
                         f" got {multioutput!r}")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"rank: expected an integer >= 1, got {rank!r}")
    if solver not in _SOLVERS:
        raise ValueError(f"solver: with several target columns (gpnum.models.MultiOutputGPR) "
                         f"expected 'auto' or 'cholesky', got {solver!r}")


def build_model(kernel, X, Y, *, alpha, multioutput, rank, solver, xp, dtype):
    """The MultiOutputGPR of the rule above (:func:`gpnum.models.build_multioutput_model`):
    ``kernel`` a gpnum kernel on ``xp`` / ``dtype``, ``Y`` (n, t) already normalised."""
    _check_kind(multioutput, rank, solver)
    return build_multioutput_model(B.asarray(X, dtype=dtype, xp=xp),
                                   B.asarray(Y, dtype=dtype, xp=xp), kernel=kernel,
                                   multioutput=multioutput, rank=int(rank),
                                   noise_variance=alpha, solver=solver)


def per_output_cov(joint, m, t):
    """The (m, m, t) covariance of each output at the ``m`` inputs (scikit-learn's layout for
    several targets) from the joint (m t, m t) one, ordered input-major."""
    four = np.reshape(joint, (m, t, m, t))
    return np.einsum("iaja->ija", four)


def multi_score(y_true, y_pred, sample_weight=None):
    """Mean over the outputs of each output's R^2 on its observed (not NaN) entries: equal to
    ``r2_score(y_true, y_pred)`` (``multioutput="uniform_average"``) when nothing is missing."""
    Y = check_array(y_true, ensure_all_finite="allow-nan", dtype=np.float64, input_name="y")
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    scores = []
    for a in range(Y.shape[1]):
        seen = ~np.isnan(Y[:, a])
        scores.append(r2_score(Y[seen, a], y_pred[seen, a],
                               sample_weight=None if w is None else w[seen]))
    return float(np.mean(scores))
