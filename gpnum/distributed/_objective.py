"""The data term of a model's objective, summed over the row chunks of dask arrays.

A minibatch objective of the model protocol is a sum over points plus a term that sees no data:
``objective_and_grad(X, y, scale=s) = s * sum_i l_i + prior``. Each worker evaluates
``objective - prior`` on the rows it holds (a model rebuilt there from its O(m^2) state), the
driver adds the sums and the prior term once. Gradients are sums too, so the result equals the
in-memory evaluation up to the order of floating-point additions.
"""

from __future__ import annotations

import numpy as np

from gpnum import backend as B
from gpnum.checkpoint import model_from_state, model_state
from gpnum.errors import ShapeError, describe_shape
from gpnum.models import check_model

__all__ = ["chunk_futures", "objective_and_grad", "row_chunks"]

# Seconds a scatter of the model state may take before the evaluation is retried.
_SCATTER_TIMEOUT = 30


def _require_dask():
    """``dask.array``, or an ImportError that says how to install the extra."""
    try:
        import dask.array as da
        import distributed  # noqa: F401 (the scheduler this module talks to)
    except ImportError as exc:  # pragma: no cover - the extra is installed for the tests
        raise ImportError("gpnum.distributed needs Dask: pip install 'gpnum[distributed]' "
                          f"({exc})") from exc
    return da


def _check_model(model):
    check_model(model, ("distributed", "checkpoint"), caller="gpnum.distributed")
    if model.full_batch:
        raise ValueError(f"{type(model).__name__} is a full-batch model: its objective is not a "
                         "sum over points, so it cannot be split over workers")
    if model.prior_term_and_grad is None:
        raise TypeError(f"{type(model).__name__} has no prior_term_and_grad(): the model "
                        "protocol's split of the objective into a data term and a prior term "
                        "(docs/models.md) is what gpnum.distributed sums over workers")


def row_chunks(X, y):
    """``X`` (n, d) and ``y`` (n,) (or (n, L)) as dask arrays with the same row chunks and one
    column chunk, and the rows' offsets ``(num_chunks + 1,)``."""
    da = _require_dask()
    if not isinstance(X, da.Array):
        X = da.asarray(X)
    if not isinstance(y, da.Array):
        y = da.asarray(y)
    if X.ndim != 2 or y.ndim not in (1, 2) or y.shape[0] != X.shape[0]:
        raise ShapeError(f"X (n, d) and y (n,) with the same n expected, got "
                         f"{describe_shape(X.shape)} and {describe_shape(y.shape)}")
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    if y.chunks[0] != X.chunks[0] or (y.ndim == 2 and len(y.chunks[1]) > 1):
        y = y.rechunk((X.chunks[0],) + (() if y.ndim == 1 else (-1,)))
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    return X, y, offsets


def chunk_futures(persisted):
    """The futures of a row-chunked dask array's chunks, in row order. ``persisted``: the
    array after ``client.persist``; keep it referenced while the futures are in use (the
    cluster releases the chunks when the collection is dropped)."""
    from distributed import futures_of

    by_key = {f.key: f for f in futures_of(persisted)}

    def flat(keys):  # nested lists of keys in chunk order; one column chunk: row order
        for k in keys:
            yield from (flat(k) if isinstance(k, list) else (k,))

    return [by_key[k] for k in flat(persisted.__dask_keys__())]


def _chunk_data_term(state, Xc, yc, rows, scale, natural):
    """On a worker: ``objective - prior`` and its gradients on the chunk's ``rows`` (local
    indices, or all rows), as host arrays, and with ``natural`` (the curvature clip flag) the
    chunk's natural-gradient statistics. The worker's own ``GPNUM_BACKEND`` computes."""
    from gpnum.optim import natural_statistics

    config, arrays = state
    model = model_from_state(config, arrays, where="gpnum.distributed")
    if rows is not None:
        Xc, yc = Xc[rows], yc[rows]
    if natural is None:
        value, grads = model.objective_and_grad(Xc, yc, scale=scale)
        stats = None
    else:
        value, grads, data = model.objective_and_grad(Xc, yc, scale=scale, return_data=True)
        stats = {k: B.to_numpy(v) for k, v in natural_statistics(data, natural).items()}
    p_value, p_grads = model.prior_term_and_grad()
    out = {k: B.to_numpy(g - p_grads[k]) if k in p_grads else B.to_numpy(g)
           for k, g in grads.items()}
    return float(value - p_value), out, stats


def objective_and_grad(model, X, y, client, *, rows=None, scale=None, retries=3,
                       return_data=False, clip_curvature=True):
    """The model's objective and gradients with the data term computed where the rows are.

    A full-batch :class:`gpnum.GPR` with ``solver="cg"`` is evaluated differently: ``X`` and
    ``y`` must be its own training data, row-chunked; each product of its batched CG with the
    kernel matrix (and the gradient's kernel vjp) is computed chunk by chunk on the workers
    (:class:`gpnum.distributed.DaskKernelMatrix`), the rest on the driver, with the model's
    seeded probes: the result equals ``model.objective_and_grad()`` in memory up to the order
    of floating-point sums.

    Parameters
    ----------
    model : a minibatch model of the model protocol with ``prior_term_and_grad`` (gpnum.SVGP)
    X : dask array (n, d), chunked by rows (or anything ``dask.array.asarray`` takes)
    y : dask array (n,) or (n, L)
    client : distributed.Client
    rows : array of int (b,), optional
        The minibatch: global row indices (default all rows). Each worker gathers its own.
    scale : float, optional
        Multiplies the data term (default ``model.num_data / b``, as
        ``model.objective_and_grad`` on the same rows in memory).
    return_data : bool
        Also return the natural-gradient statistics of the batch (summed over the workers'
        chunks: :func:`gpnum.optim.natural_statistics` with ``clip_curvature``), in the form
        :meth:`gpnum.optim.NaturalGradient.step` takes as ``data``; dense natural gradients
        (q in the Cholesky form) only.
    clip_curvature : bool
    retries : int
        Attempts after the first when the cluster loses a worker during the evaluation (a
        closed connection while scattering, tasks cancelled with their inputs). Dask itself
        recomputes lost chunks and re-runs tasks of a dead worker; this covers what it does
        not, the scatter of the model state. The evaluation is pure, so a retry gives the same
        result.

    Returns
    -------
    value : 0-d array
        Equal to ``model.objective_and_grad(X[rows], y[rows])[0]`` up to the order of the sums.
    grads : dict
        Keyed like ``model.parameters()``, in the model's namespace and device.
    data : dict
        Only with ``return_data=True``: ``natural_statistics`` and ``cache["q_mean"]``.

    Raises
    ------
    RuntimeError
        If every attempt failed (the cause is chained): resume from the last checkpoint.

    Notes
    -----
    The model travels as its checkpoint state (:func:`gpnum.checkpoint.model_state`: settings
    and parameter arrays, O(m^2)), scattered once per call to one worker; the others fetch it
    from there when their first chunk needs it, so every worker receives one copy however
    many chunks it holds. Each worker rebuilds the model
    (its ``K_ZZ`` factorisation included) for its chunks: the O(m^3) work is repeated per chunk,
    not divided, and chunks should hold many more rows than ``m``.
    """
    check_model(model, ("distributed",), caller="gpnum.distributed.objective_and_grad")
    if model.full_batch:
        # The exact GP by conjugate gradients: the kernel products, not a sum over points, are
        # what the workers share (gpnum/distributed/_exact.py).
        if rows is not None or scale is not None or return_data:
            raise ValueError(f"{type(model).__name__} is a full-batch model: rows=, scale= and "
                             "return_data= are for minibatch models")
        from gpnum.distributed._exact import exact_objective_and_grad

        return exact_objective_and_grad(model, X, y, client)
    _check_model(model)
    X, y, offsets = row_chunks(X, y)
    n = int(offsets[-1])
    if rows is None:
        groups = [None] * (len(offsets) - 1)
        b = n
    else:
        rows = np.asarray(rows)
        if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"rows: expected a non-empty 1-d integer array, got "
                             f"{rows.dtype} of shape {rows.shape}")
        if rows.min() < 0 or rows.max() >= n:
            raise ValueError(f"rows: indices must lie in [0, {n}), got [{rows.min()}, "
                             f"{rows.max()}]")
        chunk_of = np.searchsorted(offsets, rows, side="right") - 1
        groups = [rows[chunk_of == i] - offsets[i] for i in range(len(offsets) - 1)]
        b = rows.size
    if scale is None:
        scale = model.num_data / b
    natural = bool(clip_curvature) if return_data else None
    if return_data and model.variational_form != "cholesky":
        raise ValueError("return_data: the distributed natural-gradient statistics are for q in "
                         "the Cholesky form (ngd_method='dense')")
    from distributed import CancelledError
    from distributed.comm import CommClosedError

    for attempt in range(int(retries) + 1):
        try:
            parts = _evaluate(model, X, y, client, groups, scale, natural)
            break
        except (CommClosedError, CancelledError, OSError) as exc:
            if attempt == int(retries):
                raise RuntimeError(f"gpnum.distributed: the evaluation failed {attempt + 1} "
                                   f"times, the last with {type(exc).__name__}: {exc}. The "
                                   "cluster keeps losing workers; resume from the last "
                                   "checkpoint once it is healthy") from exc
            client.wait_for_workers(1, timeout=60)
    return _assemble(model, parts, natural is not None)


def _evaluate(model, X, y, client, groups, scale, natural):
    """The workers' (data value, data gradients) for each chunk with rows in the batch."""
    # One future for the whole state, under a fresh key: content-hashed keys would repeat
    # between steps (the settings do not change) and race with the previous step's release.
    # Scattered to one worker, from which the others fetch it peer to peer: a broadcast waits
    # on every worker the scheduler lists, a just-killed one included (measured: it hung).
    state = client.scatter([model_state(model, caller="gpnum.distributed")], hash=False,
                           timeout=_SCATTER_TIMEOUT)[0]
    # Persisting an array already persisted on this client is a no-op; X and y stay referenced
    # here until the results are gathered.
    X, y = client.persist(X), client.persist(y)
    Xf, yf = chunk_futures(X), chunk_futures(y)
    futures = []
    for i, local in enumerate(groups):
        if local is not None and local.size == 0:
            continue
        futures.append(client.submit(_chunk_data_term, state, Xf[i], yf[i], local, scale,
                                     natural, pure=False))
    return client.gather(futures)


def _assemble(model, parts, with_data):
    """Sum the workers' parts and add the prior term, in the model's namespace."""
    xp = model.xp

    def arr(a):
        return B.asarray(a, dtype=model.dtype, xp=xp, device=model.device)

    value, grads = model.prior_term_and_grad()
    params = model.parameters()
    total = {k: np.zeros(tuple(v.shape), dtype=np.float64) for k, v in params.items()}
    data_value, stats = 0.0, None
    for v, g, st in parts:
        data_value += v
        for k, a in g.items():
            total[k] = total[k] + a
        if st is not None:
            stats = dict(st) if stats is None else {
                "AGA": stats["AGA"] + st["AGA"], "Ag_mu": stats["Ag_mu"] + st["Ag_mu"],
                "g_var_max": np.maximum(stats["g_var_max"], st["g_var_max"])}
    out = {}
    for k in params:
        out[k] = arr(total[k]) + grads[k] if k in grads else arr(total[k])
    value = value + arr(data_value)
    if not with_data:
        return value, out
    data = {"natural_statistics": {k: arr(v) for k, v in stats.items()},
            "cache": {"q_mean": model.q_cholesky()[0]}}
    return value, out, data
