"""Test metrics of a multi-output model on held-out entries, per output and over all."""

from __future__ import annotations

__all__ = ["evaluate_outputs"]


def evaluate_outputs(model, X, Y):
    """RMSE and mean negative log predictive density of each output on its observed entries.

    Parameters
    ----------
    model : a multi-output model with ``predict_y(X)`` returning (m, t) means and
        ``log_predictive_density(X, Y)`` returning (m, t) per-entry log densities
        (:class:`gpnum.models.MultiOutputGPR`, :class:`gpnum.models.OILMM`).
    X : array (m, d)
    Y : array (m, t)
        Test targets, NaN where an entry is not a test entry.

    Returns
    -------
    dict
        ``rmse`` and ``nll`` over all test entries; ``per_output``: lists ``rmse``, ``nll``
        (None for an output without test entries) and ``num_test`` (test entries of each).
    """
    xp = model.xp
    mean, _ = model.predict_y(X)
    if tuple(mean.shape) != tuple(Y.shape):
        raise ValueError(f"Y: expected shape {tuple(mean.shape)} (one column per output), got "
                         f"{tuple(Y.shape)}")
    seen = ~xp.isnan(Y)
    zero = xp.zeros_like(mean)
    sq = xp.where(seen, (mean - xp.where(seen, Y, zero)) ** 2, zero)
    lpd = model.log_predictive_density(X, xp.where(seen, Y, mean))  # finite everywhere
    nlp = xp.where(seen, -lpd, zero)
    counts = xp.sum(xp.astype(seen, mean.dtype), axis=0)
    total = float(xp.sum(counts))
    if total == 0.0:
        raise ValueError("Y: no test entry (every entry is NaN)")
    per_sq, per_nlp = xp.sum(sq, axis=0), xp.sum(nlp, axis=0)
    rmse, nll, num = [], [], []
    for a in range(mean.shape[1]):
        c = float(counts[a])
        num.append(int(c))
        rmse.append(None if c == 0.0 else (float(per_sq[a]) / c) ** 0.5)
        nll.append(None if c == 0.0 else float(per_nlp[a]) / c)
    return {"rmse": (float(xp.sum(per_sq)) / total) ** 0.5, "nll": float(xp.sum(per_nlp)) / total,
            "per_output": {"rmse": rmse, "nll": nll, "num_test": num}}
