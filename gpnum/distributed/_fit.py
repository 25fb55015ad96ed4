"""``gpnum.fit`` on dask arrays: the same loop, each minibatch evaluated by the workers."""

from __future__ import annotations

import numpy as np

from gpnum import backend as B
from gpnum.distributed._exact import exact_objective_and_grad
from gpnum.distributed._objective import _check_model, objective_and_grad, row_chunks
from gpnum.models import check_model
from gpnum.optim import fit as _fit

__all__ = ["fit"]


class _Proxy:
    """The wrapped model with distributed data: attributes the proxy does not define are the
    model's, and :func:`gpnum.fit`'s data checks pass the stand-in data through."""

    def __init__(self, model, X, y, client):
        self._model, self._X, self._y, self._client = model, X, y, client

    def __getattr__(self, name):  # only called for what the proxy does not define
        return getattr(self._model, name)

    def check_data(self, X, y):
        return X, y


class _RowsModel(_Proxy):
    """The model, seen by :func:`gpnum.fit` as one whose data are row indices.

    ``fit`` draws its minibatches from an (n, 1) array of row numbers with its own generator,
    exactly as it would draw rows of ``X``; this proxy turns each batch of row numbers into a
    distributed evaluation. Everything else (parameters, Adam, predictions, the training state
    for checkpoints) is the wrapped model's.
    """

    full_batch = False

    def objective_and_grad(self, rows, y, *, validate=True, return_data=False):
        idx = np.asarray(B.to_numpy(rows))[:, 0]
        clip = True
        if return_data:  # natural gradients: the step's statistics, summed over the workers
            clip = self.__dict__["training_state"].ngd.clip_curvature
        return objective_and_grad(self._model, self._X, self._y, self._client, rows=idx,
                                  return_data=return_data, clip_curvature=clip)


class _ExactModel(_Proxy):
    """A GPR with ``solver="cg"``, seen by :func:`gpnum.fit` as a full-batch model whose every
    evaluation runs its kernel products on the workers (:class:`DaskKernelMatrix`)."""

    full_batch = True

    def objective_and_grad(self, X=None, y=None, *, validate=True):
        return exact_objective_and_grad(self._model, self._X, self._y, self._client)


def fit(model, X, y, client, *, optimizer=None, resume=False, **kwargs):
    """Train ``model`` on dask arrays ``X`` (n, d), ``y`` (n,) with ``client``'s workers.

    The loop is :func:`gpnum.fit`'s (same arguments: ``epochs``, ``batch_size``, ``lr``,
    ``seed``, ``fixed``, ``callbacks``, ``X_val``/``y_val`` in memory, ``resume``, ...): it draws
    the same minibatches from the same seed, and each step's objective and gradients come from
    :func:`gpnum.distributed.objective_and_grad`, so the parameters follow the single-process
    run up to the order of floating-point sums. ``X`` and ``y`` are persisted on the cluster
    once. ``optimizer="ngd"`` (default, as :func:`gpnum.fit`) gathers each batch's
    natural-gradient statistics from the workers (O(m^2) each, summed on the driver, which
    takes the step); only ``ngd_method="dense"``. Or ``optimizer="adam"``.

    A :class:`gpnum.GPR` with ``solver="cg"`` trains as :func:`gpnum.fit` trains it (L-BFGS-B
    by default, or Adam, on all the data), each evaluation with its kernel products on the
    workers (:func:`objective_and_grad`); ``X``, ``y`` are its own training data, row-chunked.

    Returns
    -------
    History
        As :func:`gpnum.fit`; ``model.training_state`` is set, so :func:`gpnum.save` writes a
        checkpoint that either this function or :func:`gpnum.fit` can resume.
    """
    check_model(model, ("fit", "distributed"), caller="gpnum.distributed.fit")
    if model.full_batch:
        return _fit_exact(model, X, y, client, optimizer, resume, kwargs)
    optimizer = "ngd" if optimizer is None else optimizer
    if optimizer not in ("ngd", "adam"):
        raise ValueError(f"gpnum.distributed.fit: optimizer 'ngd' or 'adam', got {optimizer!r}")
    if optimizer == "ngd" and kwargs.get("ngd_method", "dense") != "dense":
        raise ValueError("gpnum.distributed.fit: ngd_method='dense' only (the Krylov method "
                         "solves against q's precision on every point's statistics)")
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
        history = _fit(proxy, rows, labels, optimizer=optimizer, resume=resume, **kwargs)
    finally:
        state = proxy.__dict__.get("training_state")
        if state is not None:
            model.training_state = state
    return history


def _fit_exact(model, X, y, client, optimizer, resume, kwargs):
    """:func:`fit` for a full-batch GPR(solver="cg"): :func:`gpnum.fit`'s full-batch loop on a
    proxy whose objective is evaluated with the kernel products on the workers."""
    import distributed

    if model.cg_objective_and_grad is None:
        _check_model(model)  # the full-batch refusal, with its message
    X, y, _ = row_chunks(X, y)
    X, y = client.persist(X), client.persist(y)  # once: each evaluation then finds them there
    distributed.wait([X, y])
    proxy = _ExactModel(model, X, y, client)
    if resume:
        proxy.training_state = model.training_state
    # Validate the dask arrays against the model's data once, before any step.
    exact_objective_and_grad(model, X, y, client)
    try:
        history = _fit(proxy, None, None, optimizer=optimizer, resume=resume, **kwargs)
    finally:
        state = proxy.__dict__.get("training_state")
        if state is not None:
            model.training_state = state
    return history
