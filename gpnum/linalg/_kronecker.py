"""The Kronecker product ``A_1 (x) A_2 (x) ... (x) A_d`` of operators, and exact solves and
log-determinants of ``A_1 (x) ... (x) A_d + s I`` through the factors' eigendecompositions
(Saatci 2012, "Scalable inference for structured Gaussian process models", chapter 5)."""

from __future__ import annotations

import math

from gpnum.errors import NotPSDError, ShapeError, describe_shape
from gpnum.linalg._operators import Dense, LinearOperator, aslinearoperator

__all__ = ["Kronecker", "KroneckerShiftedEig"]


def _apply_along(xp, op_fn, T, axis, out_size):
    """Apply ``op_fn`` ((c, r) -> (out_size, r)) to axis ``axis`` of the tensor ``T``."""
    moved = xp.moveaxis(T, axis, 0)
    rest = moved.shape[1:]
    flat = xp.reshape(moved, (moved.shape[0], math.prod(rest)))
    out = xp.reshape(op_fn(flat), (out_size,) + tuple(rest))
    return xp.moveaxis(out, 0, axis)


class Kronecker(LinearOperator):
    """``K = A_1 (x) A_2 (x) ... (x) A_d``, with ``K[(i_1..i_d), (j_1..j_d)] = prod_l A_l[i_l, j_l]``
    (row-major multi-indices, as ``numpy.kron``).

    Products go factor by factor on the right-hand side reshaped to a tensor: with square
    factors of sizes ``n_l`` a product costs ``O(n sum_l n_l)`` for dense factors instead of
    ``O(n^2)`` (Saatci 2012, section 5.2.1).

    Parameters
    ----------
    *factors : LinearOperator or array (r_l, c_l)
        At least one; one namespace and dtype.

    Notes
    -----
    ``param_vjp(U, V)`` keys: ``{"factors": [A_1.param_vjp(U_1, V_1), ...]}``. For factor ``l``,
    ``sum_i u_i^T K v_i = sum_{a,b} A_l[a, b] G_l[a, b]`` with ``G_l = U_l V_l^T``, where ``U_l``
    is ``U`` unfolded along axis ``l`` and ``V_l`` is ``V`` with every other factor applied, unfolded
    likewise (shape ``(r_l, k prod_{m != l} r_m)``).
    """

    fresh_products = True

    def __init__(self, *factors):
        if len(factors) < 1:
            raise ValueError("factors: expected at least one factor, got none")
        ops = [aslinearoperator(f) for f in factors]
        first = ops[0]
        for op in ops[1:]:
            if op.xp is not first.xp:
                raise TypeError(f"Kronecker: factors from different namespaces "
                                f"({first.xp.__name__}, {op.xp.__name__}) cannot be combined")
            if op.dtype != first.dtype:
                raise TypeError(f"Kronecker: expected factors of dtype {first.dtype}, got "
                                f"{op.dtype}")
        self.factors = tuple(ops)
        self.row_sizes = tuple(op.shape[0] for op in ops)
        self.col_sizes = tuple(op.shape[1] for op in ops)
        super().__init__((math.prod(self.row_sizes), math.prod(self.col_sizes)), first.dtype,
                         first.device, first.xp)
        self.symmetric = all(op.symmetric for op in ops)

    def _apply(self, X, transpose, skip=None):
        """``K X`` (or ``K^T X``) as a tensor ``(sizes..., k)``, factor ``skip`` left out."""
        xp = self.xp
        in_sizes = self.row_sizes if transpose else self.col_sizes
        T = xp.reshape(X, tuple(in_sizes) + (X.shape[1],))
        for axis, op in enumerate(self.factors):
            if axis == skip:
                continue
            fn = op._rmatmat if transpose else op._matmat
            size = op.shape[1] if transpose else op.shape[0]
            T = _apply_along(xp, fn, T, axis, size)
        return T

    def _matmat(self, X):
        return self.xp.reshape(self._apply(X, False), (self.shape[0], X.shape[1]))

    def _rmatmat(self, X):
        return self.xp.reshape(self._apply(X, True), (self.shape[1], X.shape[1]))

    def _diagonal(self):
        xp = self.xp
        if any(op.shape[0] != op.shape[1] for op in self.factors):
            return super()._diagonal()
        out = self.factors[0]._diagonal()
        for op in self.factors[1:]:
            out = xp.reshape(out[:, None] * op._diagonal()[None, :], (-1,))
        return out

    def to_dense(self):
        xp = self.xp
        out = self.factors[0].to_dense()
        for op in self.factors[1:]:
            B = op.to_dense()
            out = xp.reshape(out[:, None, :, None] * B[None, :, None, :],
                             (out.shape[0] * B.shape[0], out.shape[1] * B.shape[1]))
        return out

    def entries(self, rows, cols):
        """``K[rows[i], cols[i]]`` for integer arrays of one shape (r,): the product of the
        factors' entries (factors without ``entries`` give theirs from ``to_dense``)."""
        xp = self.xp
        out = None
        r, c = rows, cols
        for op, nr, nc in reversed(list(zip(self.factors, self.row_sizes, self.col_sizes, strict=False))):
            ri, ci = r % nr, c % nc
            r, c = r // nr, c // nc
            if hasattr(op, "entries"):
                e = op.entries(ri, ci)
            else:
                e = xp.take(xp.reshape(op.to_dense(), (-1,)), ri * nc + ci)
            out = e if out is None else out * e
        return out

    def columns(self, indices):
        return self._columns_from_entries(indices)

    def _param_vjp(self, U, V):
        xp = self.xp
        k = U.shape[1]
        Ut = xp.reshape(U, tuple(self.row_sizes) + (k,))
        grads = []
        for axis, op in enumerate(self.factors):
            W = self._apply(V, False, skip=axis)              # other factors applied to V
            Ul = xp.moveaxis(Ut, axis, 0)
            Wl = xp.moveaxis(W, axis, 0)
            Ul = xp.reshape(Ul, (Ul.shape[0], -1))
            Wl = xp.reshape(Wl, (Wl.shape[0], -1))
            grads.append(op._param_vjp(Ul, Wl))
        return {"factors": grads}


class KroneckerShiftedEig:
    """Exact ``(K + s I)^{-1} B``, ``log det(K + s I)`` and its gradient for a Kronecker product
    ``K = A_1 (x) ... (x) A_d`` of symmetric positive semi-definite factors and a shift ``s > 0``.

    With ``A_l = Q_l diag(lambda_l) Q_l^T``, ``K + s I = Q (Lambda + s I) Q^T`` where
    ``Q = Q_1 (x) ... (x) Q_d`` and ``Lambda = lambda_1 (x) ... (x) lambda_d``: solves cost two
    Kronecker products, the log-determinant is ``sum log(Lambda + s)`` (Saatci 2012, section
    5.2.2). Eigendecompositions of the dense factors, ``O(sum_l n_l^3)``.

    Parameters
    ----------
    kron : Kronecker
        Square, symmetric factors (their ``to_dense`` is decomposed).
    shift : float or 0-d array
        ``s``, in the factors' namespace; the smallest ``Lambda + s`` must be positive.

    Attributes
    ----------
    eigenvalues : array (n,)
        ``Lambda + s`` in the Kronecker order.
    """

    def __init__(self, kron, shift):
        if not isinstance(kron, Kronecker):
            raise TypeError(f"kron: expected a Kronecker operator, got {type(kron).__name__}")
        if not kron.symmetric or kron.shape[0] != kron.shape[1]:
            raise ShapeError(f"kron: expected square symmetric factors, got shape "
                             f"{describe_shape(kron.shape)} (symmetric={kron.symmetric})")
        xp = kron.xp
        self.kron = kron
        self.xp = xp
        self.shift = shift
        self.eigvecs, self.factor_eigvals = [], []
        for op in kron.factors:
            lam, Q = xp.linalg.eigh(op.to_dense())
            self.eigvecs.append(Q)
            self.factor_eigvals.append(lam)
        lam = self.factor_eigvals[0]
        for other in self.factor_eigvals[1:]:
            lam = xp.reshape(lam[:, None] * other[None, :], (-1,))
        self.kron_eigvals = lam
        self.eigenvalues = lam + shift
        low = float(xp.min(self.eigenvalues))
        if not low > 0.0:
            raise NotPSDError(f"K + s I: smallest eigenvalue {low:.3g} of the Kronecker product "
                              "plus shift is not positive; raise the shift (noise variance)")
        self._Q = Kronecker(*[Dense(Q) for Q in self.eigvecs])

    def solve(self, B):
        """``(K + s I)^{-1} B`` for ``B`` of shape (n,) or (n, k)."""
        B2 = B[:, None] if B.ndim == 1 else B
        C = self._Q.rmatmat(B2) / self.eigenvalues[:, None]
        out = self._Q @ C
        return out[:, 0] if B.ndim == 1 else out

    def logdet(self):
        """``log det(K + s I)``, a 0-d array."""
        return self.xp.sum(self.xp.log(self.eigenvalues))

    def logdet_grad(self):
        """Gradient of :meth:`logdet` w.r.t. the factors' parameters and the shift.

        Returns
        -------
        dict
            ``{"factors": [A_l.param_vjp(Q_l diag(w_l), Q_l), ...], "shift": sum 1/(Lambda + s)}``:
            with a perturbation ``Q_l E Q_l^T`` of factor ``l``, ``d logdet = sum_p E[p_l, p_l]
            prod_{m != l} lambda_m[p_m] / (Lambda_p + s)``, so the cotangent of ``A_l`` is
            ``Q_l diag(w_l) Q_l^T`` with ``w_l`` that sum over the other indices.
        """
        xp = self.xp
        sizes = tuple(lam.shape[0] for lam in self.factor_eigvals)
        inv = xp.reshape(1.0 / self.eigenvalues, sizes)
        grads = []
        for axis, op in enumerate(self.kron.factors):
            T = inv
            for other, lam in enumerate(self.factor_eigvals):
                if other == axis:
                    continue
                shape = [1] * len(sizes)
                shape[other] = sizes[other]
                T = T * xp.reshape(lam, tuple(shape))
            other_axes = tuple(a for a in range(len(sizes)) if a != axis)
            w = xp.sum(T, axis=other_axes) if other_axes else T
            Q = self.eigvecs[axis]
            grads.append(op._param_vjp(Q * w[None, :], Q))
        return {"factors": grads, "shift": xp.sum(1.0 / self.eigenvalues)}
