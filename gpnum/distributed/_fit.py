"""``gpnum.fit`` on dask arrays: the same loop, each minibatch evaluated by the workers."""

from __future__ import annotations

import numpy as np

from gpnum import backend as B
from gpnum.distributed._objective import _check_model, objective_and_grad, row_chunks
from gpnum.optim import fit as _fit

__all__ = ["fit"]


class _RowsModel:
    """The model, seen by :func:`gpnum.fit` as one whose data are row indices.

    ``fit`` draws its minibatches from an (n, 1) array of row numbers with its own generator,
    exactly as it would draw rows of ``X``; this proxy turns each batch of row numbers into a
    distributed evaluation. Everything else (parameters, Adam, predictions, the training state
    for checkpoints) is the wrapped model's.
    """

    full_batch = False

    def __init__(self, model, X, y, client):
        self._model, self._X, self._y, self._client = model, X, y, client

    def __getattr__(self, name):  # only called for what the proxy does not define
        return getattr(self._model, name)

    def check_data(self, rows, y):
        return rows, y

    def objective_and_grad(self, rows, y, *, validate=True, return_data=False):
        if return_data:
            raise ValueError("gpnum.distributed.fit trains with Adam: natural gradients need "
                             "the per-point statistics on the driver")
        idx = np.asarray(B.to_numpy(rows))[:, 0]
        return objective_and_grad(self._model, self._X, self._y, self._client, rows=idx)


def fit(model, X, y, client, *, optimizer="adam", resume=False, **kwargs):
    """Train ``model`` on dask arrays ``X`` (n, d), ``y`` (n,) with ``client``'s workers.

    The loop is :func:`gpnum.fit`'s (same arguments: ``epochs``, ``batch_size``, ``lr``,
    ``seed``, ``fixed``, ``callbacks``, ``X_val``/``y_val`` in memory, ``resume``, ...): it draws
    the same minibatches from the same seed, and each step's objective and gradients come from
    :func:`gpnum.distributed.objective_and_grad`, so the parameters follow the single-process
    run up to the order of floating-point sums. ``X`` and ``y`` are persisted on the cluster
    once. Only ``optimizer="adam"``: the natural-gradient step needs per-point statistics
    gathered on the driver (not yet distributed).

    Returns
    -------
    History
        As :func:`gpnum.fit`; ``model.training_state`` is set, so :func:`gpnum.save` writes a
        checkpoint that either this function or :func:`gpnum.fit` can resume.
    """
    if optimizer != "adam":
        raise ValueError(f"gpnum.distributed.fit: optimizer='adam' only, got {optimizer!r}")
    _check_model(model)
    import distributed

    X, y, _ = row_chunks(X, y)
    X, y = client.persist(X), client.persist(y)  # once: each step then finds them there
    distributed.wait([X, y])
    n = X.shape[0]
    if n > model.num_data:
        raise ValueError(f"num_data: the model says {model.num_data} points but X has {n}")
    proxy = _RowsModel(model, X, y, client)
    if resume:
        proxy.training_state = model.training_state
    rows = B.asarray(np.arange(n, dtype=np.int64)[:, None], dtype=model.xp.int64, xp=model.xp,
                     device=model.device)
    labels = B.asarray(np.zeros(n), dtype=model.dtype, xp=model.xp, device=model.device)
    try:
        history = _fit(proxy, rows, labels, optimizer="adam", resume=resume, **kwargs)
    finally:
        state = proxy.__dict__.get("training_state")
        if state is not None:
            model.training_state = state
    return history
