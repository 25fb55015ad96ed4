"""Operators built from other operators or from factors: :class:`AddedDiag` (``K + D``),
:class:`LowRank` (``F F^T [+ D]``), :class:`Sum`, :class:`Scaled` and :class:`Transposed`.

Each forwards its products, diagonal and :meth:`~gpnum.linalg.LinearOperator.param_vjp` to its
parts (the gradient convention of docs/linalg.md); the protocol itself and the leaf operators
are in :mod:`gpnum.linalg._operators`, which re-exports these.
"""

from __future__ import annotations

from gpnum.backend import asarray, device_of, is_array, scaled_add
from gpnum.errors import ShapeError, describe_shape
from gpnum.linalg._operators import Diagonal, LinearOperator, _as_2d_array, aslinearoperator

__all__ = ["AddedDiag", "LowRank", "Sum", "Scaled", "Transposed"]


def _as_diagonal(diag, like_op: LinearOperator, name="diag"):
    """A :class:`Diagonal` of the operator's size from a Diagonal, an array or a number."""
    n = like_op.shape[0]
    if isinstance(diag, Diagonal):
        if diag.shape[0] != n:
            raise ShapeError(f"{name}: expected a diagonal of size {n}, got {diag.shape[0]}")
        return diag
    if isinstance(diag, (int, float)) and not isinstance(diag, bool):
        diag = asarray(float(diag), dtype=like_op.dtype, xp=like_op.xp, device=like_op.device)
    if not is_array(diag):
        raise TypeError(f"{name}: expected a Diagonal, an array of shape ({n},) or () or a number, "
                        f"got {type(diag).__name__}")
    if diag.ndim == 1 and diag.shape[0] != n:
        raise ShapeError(f"{name}: expected shape ({n},) or (), got {describe_shape(diag.shape)}")
    return Diagonal(diag, n=n)


def _check_compatible(ops, what):
    first = ops[0]
    for op in ops[1:]:
        if op.shape != first.shape:
            raise ShapeError(f"{what}: expected operators of shape {describe_shape(first.shape)}, "
                             f"got {describe_shape(op.shape)}")
        if op.xp is not first.xp:
            raise TypeError(f"{what}: operators from different namespaces "
                            f"({first.xp.__name__}, {op.xp.__name__}) cannot be combined")
        if op.dtype != first.dtype:
            raise TypeError(f"{what}: expected operators of dtype {first.dtype}, got {op.dtype}")


class AddedDiag(LinearOperator):
    """``K + D``: a square operator plus a diagonal (jitter, observation noise).

    Parameters
    ----------
    operator : LinearOperator or array (n, n)
    diag : Diagonal, array (n,) or (), or a number
        The added diagonal; a 0-d array or number is a constant ``c I`` whose gradient is a
        single number.

    Notes
    -----
    ``param_vjp`` keys: ``{"operator": operator.param_vjp(U, V), "diag": ...}`` with ``"diag"``
    as for :class:`Diagonal`.
    """

    fresh_products = True

    def __init__(self, operator, diag):
        operator = aslinearoperator(operator)
        operator._require_square("AddedDiag operator")
        diag = _as_diagonal(diag, operator)
        _check_compatible([operator, diag], "AddedDiag")
        super().__init__(operator.shape, operator.dtype, operator.device, operator.xp)
        self.operator = operator
        self.diag = diag
        self.symmetric = operator.symmetric

    def _matmat(self, X):
        return self._plus_diag(self.operator._matmat(X), X)

    def _rmatmat(self, X):
        return self._plus_diag(self.operator._rmatmat(X), X)

    def _matmat_dots(self, X):
        if self.operator.fresh_products:
            return scaled_add(self.operator._matmat(X), X, self.diag.diag, dots=True)
        return super()._matmat_dots(X)

    def _plus_diag(self, KX, X):
        # a fresh product takes D X in place, without a temporary block
        if self.operator.fresh_products:
            return scaled_add(KX, X, self.diag.diag)
        return KX + self.diag._matmat(X)


    def _diagonal(self):
        return self.operator._diagonal() + self.diag._diagonal()

    def to_dense(self):
        return self.operator.to_dense() + self.diag.to_dense()

    def columns(self, indices):
        return self.operator.columns(indices) + self.diag.columns(indices)

    def _spectrum_floor(self) -> float:
        return self.operator._spectrum_floor() + self.diag._spectrum_floor()

    def _param_vjp(self, U, V):
        return {"operator": self.operator._param_vjp(U, V),
                "diag": self.diag._param_vjp(U, V)["diag"]}


class LowRank(LinearOperator):
    """``F F^T`` (optionally ``+ D``) for a tall factor ``F`` of shape (n, r).

    Parameters
    ----------
    factor : array (n, r)
    diag : Diagonal, array (n,) or (), number, optional

    Notes
    -----
    ``param_vjp`` keys: ``{"factor": U (V^T F) + V (U^T F)}`` of shape (n, r), plus ``"diag"``
    (as for :class:`Diagonal`) when a diagonal is present.
    """

    fresh_products = True

    symmetric = True

    def __init__(self, factor, diag=None):
        xp = _as_2d_array(factor, "factor")
        if factor.ndim != 2:
            raise ShapeError(f"factor: expected shape (n, r), got {describe_shape(factor.shape)}")
        n = factor.shape[0]
        super().__init__((n, n), factor.dtype, device_of(factor), xp)
        self.factor = factor
        self.diag = None if diag is None else _as_diagonal(diag, self)
        if self.diag is not None:
            _check_compatible([self, self.diag], "LowRank")

    def _matmat(self, X):
        F = self.factor
        out = F @ (F.T @ X)
        return out if self.diag is None else out + self.diag._matmat(X)


    def _diagonal(self):
        d = self.xp.sum(self.factor * self.factor, axis=1)
        return d if self.diag is None else d + self.diag._diagonal()

    def to_dense(self):
        K = self.factor @ self.factor.T
        return K if self.diag is None else K + self.diag.to_dense()

    def columns(self, indices):
        idx = self._check_indices(indices)
        out = self.factor @ self.xp.take(self.factor, idx, axis=0).T
        return out if self.diag is None else out + self.diag.columns(idx)

    def _spectrum_floor(self) -> float:
        return 0.0 if self.diag is None else self.diag._spectrum_floor()

    def _param_vjp(self, U, V):
        F = self.factor
        out = {"factor": U @ (V.T @ F) + V @ (U.T @ F)}
        if self.diag is not None:
            out["diag"] = self.diag._param_vjp(U, V)["diag"]
        return out


class Sum(LinearOperator):
    """``K_1 + K_2 + ...`` of operators of one shape.

    Notes
    -----
    ``param_vjp`` keys: ``{"operators": [K_1.param_vjp(U, V), K_2.param_vjp(U, V), ...]}``.
    """

    fresh_products = True

    def __init__(self, *operators):
        if len(operators) < 1:
            raise ValueError("operators: expected at least one operator, got none")
        ops = [aslinearoperator(op) for op in operators]
        _check_compatible(ops, "Sum")
        first = ops[0]
        super().__init__(first.shape, first.dtype, first.device, first.xp)
        self.operators = tuple(ops)
        self.symmetric = all(op.symmetric for op in ops)
        self.fresh_products = len(ops) > 1 or ops[0].fresh_products

    def _summed(self, part):
        """``part(op_0) + part(op_1) + ...`` over the summed operators, left to right."""
        out = part(self.operators[0])
        for op in self.operators[1:]:
            out = out + part(op)
        return out

    def _matmat(self, X):
        return self._summed(lambda op: op._matmat(X))

    def _rmatmat(self, X):
        return self._summed(lambda op: op._rmatmat(X))

    def _diagonal(self):
        return self._summed(lambda op: op._diagonal())

    def to_dense(self):
        return self._summed(lambda op: op.to_dense())

    def columns(self, indices):
        return self._summed(lambda op: op.columns(indices))

    def _spectrum_floor(self) -> float:
        return sum(op._spectrum_floor() for op in self.operators)

    def _param_vjp(self, U, V):
        return {"operators": [op._param_vjp(U, V) for op in self.operators]}


class Scaled(LinearOperator):
    """``c K`` for a scalar ``c`` (a Python number or a 0-d array, e.g. an output scale).

    Notes
    -----
    ``param_vjp`` keys: ``{"scale": sum_i u_i^T K v_i (0-d), "operator": K.param_vjp(c U, V)}``.
    """

    fresh_products = True

    def __init__(self, operator, scale):
        operator = aslinearoperator(operator)
        super().__init__(operator.shape, operator.dtype, operator.device, operator.xp)
        if is_array(scale):
            if scale.ndim != 0:
                raise ShapeError(f"scale: expected a 0-d array or a number, got shape "
                                 f"{describe_shape(scale.shape)}")
            scale = asarray(scale, dtype=self.dtype, xp=self.xp, device=self.device)
        elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
            scale = float(scale)
        else:
            raise TypeError(f"scale: expected a number or a 0-d array, got {type(scale).__name__}")
        self.operator = operator
        self.scale = scale
        self.symmetric = operator.symmetric

    def _matmat(self, X):
        return self.operator._matmat(X) * self.scale

    def _rmatmat(self, X):
        return self.operator._rmatmat(X) * self.scale


    def _diagonal(self):
        return self.operator._diagonal() * self.scale

    def to_dense(self):
        return self.operator.to_dense() * self.scale

    def columns(self, indices):
        return self.operator.columns(indices) * self.scale

    def _spectrum_floor(self) -> float:
        c = float(self.scale)
        return c * self.operator._spectrum_floor() if c >= 0.0 else float("-inf")

    def _param_vjp(self, U, V):
        xp = self.xp
        return {"scale": xp.sum(U * self.operator._matmat(V)),
                "operator": self.operator._param_vjp(U * self.scale, V)}


class Transposed(LinearOperator):
    """The transpose ``K^T`` of a non-symmetric operator, keeping ``K``'s parameters.

    Notes
    -----
    ``param_vjp(U, V)`` is ``K.param_vjp(V, U)``: the same keys as ``K``, gradients w.r.t.
    ``K``'s own parameters.
    """

    fresh_products = True

    def __init__(self, operator):
        operator = aslinearoperator(operator)
        super().__init__((operator.shape[1], operator.shape[0]), operator.dtype, operator.device,
                         operator.xp)
        self.operator = operator
        self.symmetric = operator.symmetric
        self.fresh_products = operator.fresh_products

    @property
    def T(self):
        return self.operator

    def _matmat(self, X):
        return self.operator._rmatmat(X)

    def _rmatmat(self, X):
        return self.operator._matmat(X)

    def _diagonal(self):
        return self.operator._diagonal()

    def to_dense(self):
        return self.operator.to_dense().T

    def _spectrum_floor(self) -> float:
        return self.operator._spectrum_floor()

    def _param_vjp(self, U, V):
        return self.operator._param_vjp(V, U)
