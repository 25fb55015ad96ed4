"""The lazy kernel matrix ``k(X, Z)``: products in blocks, never the whole matrix."""

from __future__ import annotations

import math

from gpnum.backend import device_of, get_namespace, is_array, run_in_threads
from gpnum.errors import ShapeError, describe_shape
from gpnum.linalg._operators import LinearOperator

__all__ = ["KernelMatrix", "block_rows_for_budget"]


def block_rows_for_budget(n_cols: int, budget_bytes: float, itemsize: int = 8,
                          copies: int = 6) -> int:
    """Rows of a kernel block ``k(X_b, Z)`` so that ``copies`` arrays of ``(rows, n_cols)``
    fit in ``budget_bytes``: the block itself and the temporaries of the kernel's backward
    pass (distances, slopes, cotangent; about five for the stationary kernels).

    At least 1, however small the budget.
    """
    if not budget_bytes > 0:
        raise ValueError(f"budget_bytes: expected a positive number, got {budget_bytes!r}")
    rows = int(budget_bytes // (max(int(n_cols), 1) * int(itemsize) * int(copies)))
    return max(1, rows)


class KernelMatrix(LinearOperator):
    """The matrix ``k(X, Z)`` of a kernel callable, evaluated block by block on demand.

    Each product ``K @ R`` evaluates ``k(X_b, Z)`` for one block of ``block_size`` rows of ``X``
    at a time and multiplies it by ``R``, so memory stays ``O((n + k) * block_size)`` instead
    of ``O(n^2)``, at the price of re-evaluating the kernel in every product.

    The symmetric ``k(X, X)`` (``Z=None``) works in square tiles ``K_IJ = k(X_I, X_J)`` of
    about ``block_size * n / workers`` elements instead: each tile with ``I < J`` is evaluated
    once per product and serves both of its products, ``K_IJ R_J`` for the rows ``I`` and
    ``K_IJ^T R_I`` for the rows ``J`` (as in the partitioned products of Wang et al. 2019, with
    the symmetry used), so a product evaluates each pair of points once, about half the kernel
    entries of the row blocks; :meth:`param_vjp` likewise takes each tile's cotangent
    ``G_IJ + G_JI^T`` at once. ``workers`` threads share the tiles.

    Parameters
    ----------
    kernel_fn : callable
        ``kernel_fn(X1, X2) -> (n1, n2)`` array. Optional attributes used when present:
        ``kernel_fn.diag(X) -> (n,)`` for :meth:`diagonal`, and
        ``kernel_fn.gram_vjp(G, X1, X2) -> {"params": {name: array}, "X1": (n1, d),
        "X2": (n2, d)}``, the gradient of ``sum(G * k(X1, X2))``, for :meth:`param_vjp`.
    X : array (n, d)
        Row inputs.
    Z : array (m, d), optional
        Column inputs; ``None`` for the square, symmetric ``k(X, X)``.
    block_size : int
        Rows of the kernel evaluated at once (:func:`block_rows_for_budget` picks it from a
        memory budget); for ``Z=None`` the tiles hold as many elements, shared among the
        workers (a tile side of ``sqrt(block_size * n / workers)`` rows).
    vjp_block_size : int, optional
        Rows per block in :meth:`param_vjp` (default ``block_size``; for ``Z=None`` tiles of
        as many elements, as above). Row-block products run fastest with blocks that stay in
        cache (a few MiB), the row-block backward pass, with its per-dimension GEMMs, with
        larger ones; the symmetric tiles are fastest at cache size for both (docs/exact-gp.md).
    compute_dtype : dtype, optional
        Dtype of the products (default ``X``'s). With float32 inputs and ``float64`` here,
        each block is formed in float32 and cast before it is multiplied, so that a Krylov
        solver can run in float64 on a float32 kernel; :meth:`param_vjp` casts the cotangent
        blocks back to the kernel's dtype.
    workers : int
        Threads that share the tiles of the symmetric products and :meth:`param_vjp` (default
        1). NumPy releases the GIL in its elementwise passes and BLAS calls, so on NumPy each
        thread keeps a core busy (:func:`gpnum.backend.default_workers` gives every usable
        core there); each thread sums into its own output, added up in a fixed order, so the
        result does not depend on the threads' timing. Torch has its own thread pool: leave 1.

    Notes
    -----
    ``param_vjp(U, V)`` keys: ``{"kernel": {name: grad}, "X": (n, d), "Z": (m, d)}``; for
    ``Z=None`` only ``"kernel"`` and ``"X"``, which then holds both the row and the column
    contributions. ``G = U V^T`` is built one row block at a time.
    """

    fresh_products = True

    def __init__(self, kernel_fn, X, Z=None, *, block_size: int = 1024, compute_dtype=None,
                 vjp_block_size=None, workers: int = 1):
        if not callable(kernel_fn):
            raise TypeError(f"kernel_fn: expected a callable k(X1, X2), got "
                            f"{type(kernel_fn).__name__}")
        if not is_array(X):
            raise TypeError(f"X: expected an array of shape (n, d), got {type(X).__name__}")
        xp = get_namespace(X, Z)
        if X.ndim != 2:
            raise ShapeError(f"X: expected shape (n, d), got {describe_shape(X.shape)}")
        if not xp.isdtype(X.dtype, "real floating"):
            raise TypeError(f"X: expected a real floating dtype, got {X.dtype}")
        if Z is not None:
            if not is_array(Z) or Z.ndim != 2 or Z.shape[1] != X.shape[1]:
                got = describe_shape(Z.shape) if is_array(Z) else type(Z).__name__
                raise ShapeError(f"Z: expected shape (m, {X.shape[1]}), got {got}")
            if Z.dtype != X.dtype:
                raise TypeError(f"Z: expected dtype {X.dtype} (X's), got {Z.dtype}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size: expected an integer >= 1, got {block_size!r}")
        if vjp_block_size is None:
            vjp_block_size = block_size
        if isinstance(vjp_block_size, bool) or not isinstance(vjp_block_size, int) \
                or vjp_block_size < 1:
            raise ValueError(f"vjp_block_size: expected an integer >= 1, got {vjp_block_size!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
        n_cols = X.shape[0] if Z is None else Z.shape[0]
        if compute_dtype is None:
            compute_dtype = X.dtype
        if not xp.isdtype(compute_dtype, "real floating"):
            raise TypeError(f"compute_dtype: expected a real floating dtype, got {compute_dtype}")
        super().__init__((X.shape[0], n_cols), compute_dtype, device_of(X), xp)
        self.kernel_fn = kernel_fn
        self.X = X
        self.Z = Z
        self.block_size = block_size
        self.vjp_block_size = vjp_block_size
        self.workers = workers
        self.symmetric = Z is None
        # diagonal blocks of k(X, X) evaluated as k(X_b, None): see kernel_fn above
        self._split_diagonal = Z is None and bool(getattr(kernel_fn, "depends_on_same_set",
                                                          False))
        # diagonal tiles as k(X_I, None) wherever kernel_fn takes None (gpnum kernels: their
        # gram of one set is exactly symmetric and computes each pair once)
        self._same_set_call = self._split_diagonal or callable(getattr(kernel_fn, "gram", None))

    @property
    def _cols(self):
        return self.X if self.Z is None else self.Z

    def _blocks(self, n, size=None):
        size = self.block_size if size is None else size
        return [(s, min(n, s + size)) for s in range(0, n, size)]

    def _gram(self, X1, X2):
        K = self.kernel_fn(X1, X2)
        n2 = X1.shape[0] if X2 is None else X2.shape[0]
        if not is_array(K) or tuple(K.shape) != (X1.shape[0], n2):
            got = describe_shape(K.shape) if is_array(K) else type(K).__name__
            raise ShapeError(f"kernel_fn: expected a gram matrix of shape "
                             f"({X1.shape[0]}, {n2}), got {got}")
        if K.dtype != self.dtype:
            K = self.xp.astype(K, self.dtype)
        return K

    def _col_ranges(self, s, e):
        """Column ranges of row block ``[s, e)``: ``[(c0, c1, same_set)]``."""
        n = self.shape[1]
        if not self._split_diagonal:
            return [(0, n, False)]
        return [r for r in ((0, s, False), (s, e, True), (e, n, False)) if r[1] > r[0]]

    def _pieces(self, s, e):
        """``[(c0, c1, k(X_b, cols c0:c1))]`` for row block ``[s, e)``."""
        Xb = self.X[s:e, :]
        return [(c0, c1, self._gram(Xb, None) if same else
                 self._gram(Xb, self._cols[c0:c1, :]))
                for c0, c1, same in self._col_ranges(s, e)]

    def _tiles(self, size):
        """Row ranges of the square tiles and the tile pairs ``(I, J)``, ``I <= J``, that worker
        ``w`` takes (``pairs[w::workers]``: tiles of one size, so an even share)."""
        n = self.shape[0]
        side = min(n, max(1, math.isqrt(size * n // self.workers)))
        blocks = [(s, min(n, s + side)) for s in range(0, n, side)]
        pairs = [(i, j) for i in range(len(blocks)) for j in range(i, len(blocks))]
        return blocks, pairs, min(self.workers, len(pairs))

    def _diagonal_tile(self, s, e):
        Xb = self.X[s:e, :]
        return self._gram(Xb, None if self._same_set_call else Xb)

    def _symmetric_matmat(self, R):
        xp = self.xp
        blocks, pairs, workers = self._tiles(self.block_size)
        X = self.X

        def work(w):
            acc = [None] * len(blocks)
            for i, j in pairs[w::workers]:
                s, e = blocks[i]
                if i == j:
                    acc[i] = _add(acc[i], self._diagonal_tile(s, e) @ R[s:e, :])
                    continue
                c0, c1 = blocks[j]
                K = self._gram(X[s:e, :], X[c0:c1, :])
                acc[i] = _add(acc[i], K @ R[c0:c1, :])
                acc[j] = _add(acc[j], xp.matrix_transpose(K) @ R[s:e, :])
            return acc

        accs = run_in_threads(work, workers)
        parts = []
        for b in range(len(blocks)):
            total = None
            for acc in accs:
                total = _add(total, acc[b])
            parts.append(total)  # block b's diagonal tile lies with some worker
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)

    def _matmat(self, R):
        xp = self.xp
        if self.symmetric:
            return self._symmetric_matmat(R)
        parts = []
        for s, e in self._blocks(self.shape[0]):
            out = None
            for c0, c1, K in self._pieces(s, e):
                term = K @ R if (c0, c1) == (0, self.shape[1]) else K @ R[c0:c1, :]
                out = term if out is None else out + term
            parts.append(out)
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)

    def _rmatmat(self, R):
        if self.symmetric:
            return self._matmat(R)
        out = None
        Zc = self._cols
        for s, e in self._blocks(self.shape[0]):
            term = self._gram(self.X[s:e, :], Zc).T @ R[s:e, :]
            out = term if out is None else out + term
        return out

    def _diagonal(self):
        xp = self.xp
        diag_fn = getattr(self.kernel_fn, "diag", None)
        if callable(diag_fn):
            d = diag_fn(self.X)
            if not is_array(d) or tuple(d.shape) != (self.shape[0],):
                got = describe_shape(d.shape) if is_array(d) else type(d).__name__
                raise ShapeError(f"kernel_fn.diag: expected shape ({self.shape[0]},), got {got}")
            return d if d.dtype == self.dtype else xp.astype(d, self.dtype)
        parts = [xp.linalg.diagonal(self._gram(self.X[s:e, :], self.X[s:e, :]))
                 for s, e in self._blocks(self.shape[0])]
        return xp.concat(parts)

    def to_dense(self):
        xp = self.xp
        parts = []
        for s, e in self._blocks(self.shape[0]):
            pieces = [K for _, _, K in self._pieces(s, e)]
            parts.append(pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=1))
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)

    def columns(self, indices):
        xp = self.xp
        idx = self._check_indices(indices)
        Xsel = xp.take(self._cols, idx, axis=0)
        C = self._gram(self.X, Xsel)
        if self._split_diagonal:
            # entries (idx_j, j) lie on the diagonal of k(X, X): add what k(X_j) has there and
            # the cross evaluation k(X, X_j) lacks (the white-noise variance)
            missing = xp.take(self._diagonal(), idx) - xp.linalg.diagonal(self._gram(Xsel, Xsel))
            rows = xp.arange(self.shape[0], device=self.device)
            hit = xp.astype(rows[:, None] == idx[None, :], C.dtype)
            C = C + hit * missing[None, :]
        return C

    def _param_vjp(self, U, V):
        gram_vjp = getattr(self.kernel_fn, "gram_vjp", None)
        if not callable(gram_vjp):
            raise TypeError("kernel_fn: KernelMatrix.param_vjp needs kernel_fn.gram_vjp(G, X1, "
                            "X2) (the gradient of sum(G * k(X1, X2))), got a "
                            f"{type(self.kernel_fn).__name__} without it")
        if self.symmetric:
            return self._symmetric_param_vjp(gram_vjp, U, V)
        xp = self.xp
        Zc = self._cols
        params, row_grads, col_grad = None, [], None
        for s, e in self._blocks(self.shape[0], self.vjp_block_size):
            row, cols = None, []
            for c0, c1, same in self._col_ranges(s, e):
                G = U[s:e, :] @ V[c0:c1, :].T
                if G.dtype != self.X.dtype:
                    G = xp.astype(G, self.X.dtype)
                g = gram_vjp(G, self.X[s:e, :], None if same else Zc[c0:c1, :])
                if params is None:
                    params = dict(g["params"])
                else:
                    params = {name: params[name] + value for name, value in g["params"].items()}
                row = g["X1"] if row is None else row + g["X1"]
                # same set: "X1" holds both roles and the column part is already in it
                cols.append(xp.zeros_like(g["X1"]) if same else g["X2"])
            row_grads.append(row)
            col = cols[0] if len(cols) == 1 else xp.concat(cols, axis=0)
            col_grad = col if col_grad is None else col_grad + col
        row_grad = row_grads[0] if len(row_grads) == 1 else xp.concat(row_grads, axis=0)
        if self.Z is None:
            return {"kernel": params, "X": row_grad + col_grad}
        return {"kernel": params, "X": row_grad, "Z": col_grad}

    def _symmetric_param_vjp(self, gram_vjp, U, V):
        """:meth:`param_vjp` of ``k(X, X)`` by tiles: tile ``(I, J)``, ``I < J``, carries the
        cotangent of both its pairs, ``G_IJ + G_JI^T = [U_I, V_I] [V_J, U_J]^T`` (one GEMM of
        rank 2k), the diagonal tile ``U_I V_I^T``."""
        xp = self.xp
        X = self.X
        blocks, pairs, workers = self._tiles(self.vjp_block_size)
        UV = xp.concat([U, V], axis=1)
        VU = xp.concat([V, U], axis=1)

        def cast(G):
            return G if G.dtype == X.dtype else xp.astype(G, X.dtype)

        def work(w):
            params, grads = None, [None] * len(blocks)
            for i, j in pairs[w::workers]:
                s, e = blocks[i]
                if i == j:
                    G = cast(U[s:e, :] @ xp.matrix_transpose(V[s:e, :]))
                    g = gram_vjp(G, X[s:e, :], None if self._same_set_call else X[s:e, :])
                    # X2 None: "X1" holds both roles; else the two roles of one set
                    gi = g["X1"] if g.get("X2") is None else g["X1"] + g["X2"]
                    grads[i] = _add(grads[i], gi)
                else:
                    c0, c1 = blocks[j]
                    G = cast(UV[s:e, :] @ xp.matrix_transpose(VU[c0:c1, :]))
                    g = gram_vjp(G, X[s:e, :], X[c0:c1, :])
                    grads[i] = _add(grads[i], g["X1"])
                    grads[j] = _add(grads[j], g["X2"])
                params = _add_params(params, g["params"])
            return params, grads

        results = run_in_threads(work, workers)
        params = None
        for p, _ in results:
            if p is not None:
                params = _add_params(params, p)
        parts = []
        for b in range(len(blocks)):
            total = None
            for _, grads in results:
                total = _add(total, grads[b])
            parts.append(total)
        return {"kernel": params, "X": parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)}


def _add(total, term):
    return term if total is None else (total if term is None else total + term)


def _add_params(total, params):
    if total is None:
        return dict(params)
    return {name: total[name] + value for name, value in params.items()}
