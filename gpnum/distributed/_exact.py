"""The exact GP's conjugate-gradient products on Dask: kernel row blocks computed by the workers.

Wang et al. (2019) partition ``K_XX`` by rows over GPUs: each device forms its rows
``k(X_p, X)`` block by block, multiplies them by the (n, k) right-hand sides and drops them.
Here the partition is the row chunks of a dask array: for every product ``K @ V`` of the
batched CG (``V``: the residual, the probes, the CG directions) each chunk's task computes its
rows of ``K V`` where the chunk lives, and the kernel's vector-Jacobian product
``sum_i u_i^T K v_i`` (the gradient's trace and quadratic terms) is summed over the chunks the
same way. The driver keeps the O(n k) vectors, the preconditioner (its O(n r) kernel columns
are formed locally) and the Lanczos quadrature; the workers never hold an n x n matrix, only
``memory_budget_mib`` of kernel blocks at a time.
"""

from __future__ import annotations

import numpy as np

from gpnum import backend as B
from gpnum.checkpoint import model_from_state, model_state
from gpnum.errors import ShapeError, describe_shape
from gpnum.linalg import KernelMatrix, LinearOperator, block_rows_for_budget

__all__ = ["DaskKernelMatrix", "exact_objective_and_grad"]

_MIB = 1024.0 * 1024.0
_SCATTER_TIMEOUT = 30


def _chunk_operators(state, Xc, start, stop):
    """On a worker: the model rebuilt from its state and the three kernel pieces of the chunk's
    rows ``[start, stop)``: ``k(X_c, X[:start])``, ``k(X_c, X_c)`` (square: a white-noise part
    lands on its diagonal, as in the in-memory kernel matrix) and ``k(X_c, X[stop:])``, each a
    blocked float64 :class:`KernelMatrix`, with their column ranges."""
    config, arrays = state
    model = model_from_state(config, arrays, where="gpnum.distributed")
    xp = model.xp
    X = model.X
    Xc = B.asarray(Xc, dtype=model.dtype, xp=xp, device=model.device)
    if tuple(Xc.shape) != (stop - start, X.shape[1]) or not bool(
            xp.all(Xc == X[start:stop, :])):
        raise ValueError(f"X: the dask array's rows {start}:{stop} differ from the model's "
                         "training inputs; pass the model's own X, chunked by rows")
    n = X.shape[0]
    rows = block_rows_for_budget(n, model.cg_options.memory_budget_mib * _MIB, 8)
    rows = max(1, min(rows, stop - start))
    high = xp.float64
    pieces = [(start, stop, KernelMatrix(model.kernel, Xc, block_size=rows, compute_dtype=high))]
    if start > 0:
        pieces.append((0, start, KernelMatrix(model.kernel, Xc, X[:start, :], block_size=rows,
                                              compute_dtype=high)))
    if stop < n:
        pieces.append((stop, n, KernelMatrix(model.kernel, Xc, X[stop:, :], block_size=rows,
                                             compute_dtype=high)))
    return model, pieces


def _chunk_matmat(state, Xc, start, stop, R):
    """On a worker: rows ``[start, stop)`` of ``K @ R`` (host array (stop - start, k))."""
    model, pieces = _chunk_operators(state, Xc, start, stop)
    R = B.asarray(R, dtype=model.xp.float64, xp=model.xp, device=model.device)
    out = None
    # The kernel's products in NumPy's BLAS pool, with the block products (blas_pool).
    with B.blas_pool("numpy"):
        for c0, c1, op in pieces:
            term = op @ R[c0:c1, :]
            out = term if out is None else out + term
    return B.to_numpy(out)


def _chunk_param_vjp(state, Xc, start, stop, Uc, V):
    """On a worker: the gradient of ``sum_i (u_i)_c^T K[c, :] v_i`` w.r.t. the kernel's
    parameters (host arrays), ``Uc`` the chunk's rows of ``U``."""
    model, pieces = _chunk_operators(state, Xc, start, stop)
    xp = model.xp
    Uc = B.asarray(Uc, dtype=xp.float64, xp=xp, device=model.device)
    V = B.asarray(V, dtype=xp.float64, xp=xp, device=model.device)
    total = None
    with B.blas_pool("numpy"):
        for c0, c1, op in pieces:
            g = op.param_vjp(Uc, V[c0:c1, :])["kernel"]
            total = g if total is None else {k: total[k] + v for k, v in g.items()}
    return {k: B.to_numpy(v) for k, v in total.items()}


class DaskKernelMatrix(LinearOperator):
    """``K_XX`` of a GPR model (float64) with its products and ``param_vjp`` computed on Dask.

    Parameters
    ----------
    model : gpnum.GPR
        Its kernel and training inputs; the workers receive the model's checkpoint state
        (:func:`gpnum.checkpoint.model_state`: settings, parameters and the (n, d) inputs)
        once, scattered when the operator is made. Parameters changed later are not seen:
        make a new operator per evaluation.
    X : dask array (n, d)
        The model's training inputs chunked by rows: one task per chunk and product, run where
        the chunk lives. Each task checks its rows against the model's inputs.
    client : distributed.Client

    Notes
    -----
    ``diagonal()`` and ``columns()`` (the pivoted-Cholesky preconditioner: O(n r) kernel
    values) are computed on the driver. ``param_vjp`` keys: ``{"kernel": {name: grad}}``.
    """

    fresh_products = True
    symmetric = True

    def __init__(self, model, X, client):
        from gpnum.distributed._objective import chunk_futures, row_chunks

        xp = model.xp
        n, d = model.X.shape
        if tuple(X.shape) != (n, d):
            raise ShapeError(f"X: expected the model's training inputs, shape ({n}, {d}), got "
                             f"{describe_shape(X.shape)}")
        super().__init__((n, n), xp.float64, model.device, xp)
        X, _, offsets = row_chunks(X, np.zeros(n))
        self._client = client
        self._X = client.persist(X)  # referenced while the chunk futures are in use
        self._chunks = chunk_futures(self._X)
        self._ranges = [(int(offsets[i]), int(offsets[i + 1])) for i in range(len(offsets) - 1)]
        # One future for the state, under a fresh key (as gpnum.distributed.objective_and_grad).
        self._state = client.scatter([model_state(model, caller="gpnum.distributed")],
                                     hash=False, timeout=_SCATTER_TIMEOUT)[0]
        rows = block_rows_for_budget(n, model.cg_options.memory_budget_mib * _MIB, 8)
        self._local = KernelMatrix(model.kernel, model.X, block_size=max(1, min(rows, n)),
                                   compute_dtype=xp.float64)

    def _arr(self, a):
        return B.asarray(a, dtype=self.dtype, xp=self.xp, device=self.device)

    def _matmat(self, R):
        client = self._client
        R_f = client.scatter([B.to_numpy(R)], hash=False, timeout=_SCATTER_TIMEOUT)[0]
        futures = [client.submit(_chunk_matmat, self._state, f, s, e, R_f, pure=False)
                   for f, (s, e) in zip(self._chunks, self._ranges, strict=True)]
        parts = client.gather(futures)
        return self._arr(np.concatenate(parts, axis=0))

    def _rmatmat(self, R):
        return self._matmat(R)

    def _diagonal(self):
        return self._local.diagonal()

    def columns(self, indices):
        return self._local.columns(indices)

    def _param_vjp(self, U, V):
        client = self._client
        U_h = B.to_numpy(U)
        V_f = client.scatter([B.to_numpy(V)], hash=False, timeout=_SCATTER_TIMEOUT)[0]
        futures = [client.submit(_chunk_param_vjp, self._state, f, s, e, U_h[s:e], V_f,
                                 pure=False)
                   for f, (s, e) in zip(self._chunks, self._ranges, strict=True)]
        total = None
        for g in client.gather(futures):
            total = dict(g) if total is None else {k: total[k] + v for k, v in g.items()}
        # Each parameter's gradient in the kernel's dtype, like KernelMatrix.param_vjp's.
        kdtype = self._local.X.dtype
        return {"kernel": {k: B.asarray(v, dtype=kdtype, xp=self.xp, device=self.device)
                           for k, v in total.items()}}


def exact_objective_and_grad(model, X, y, client):
    """A GPR's CG log marginal likelihood and gradients with the kernel products on Dask
    (:func:`gpnum.distributed.objective_and_grad` for full-batch models)."""
    if model.cg_objective_and_grad is None:
        raise ValueError(f"{type(model).__name__} is a full-batch model without a "
                         "conjugate-gradient path: its objective cannot be split over workers "
                         "(gpnum.GPR(..., solver='cg') can)")
    if not model.uses_cg:
        raise ValueError(f"{type(model).__name__} is a full-batch model solved by Cholesky "
                         f"(solver={model.solver!r}, n = {model.X.shape[0]}): its objective "
                         "cannot be split over workers; the Dask path needs solver='cg'")
    n = model.X.shape[0]
    if tuple(y.shape) != (n,):
        raise ShapeError(f"y: expected the model's training targets, shape ({n},), got "
                         f"{describe_shape(y.shape)}")
    return model.cg_objective_and_grad(DaskKernelMatrix(model, X, client))
