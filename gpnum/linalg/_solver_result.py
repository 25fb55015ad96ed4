"""The fields and reports shared by the results of the iterative solvers (:func:`pcg`,
:func:`msminres`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpnum.backend import get_namespace
from gpnum.errors import describe_shape

__all__ = ["IterativeResult"]


@dataclass(frozen=True, repr=False)
class IterativeResult:
    """Base of :class:`SolveResult` and :class:`MultiShiftResult`: the solution, the stopping
    state and the residuals (subclasses document the shapes and add their own fields)."""

    x: object
    info: int
    num_iter: int
    residual_norm: object
    b_norm: object
    converged: object

    @property
    def relative_residual(self):
        """``residual_norm / ||b||`` per column, or per (shift, column) pair (``residual_norm``
        where ``b = 0``)."""
        xp = get_namespace(self.residual_norm)
        return self.residual_norm / xp.where(self.b_norm > 0.0, self.b_norm, 1.0)

    @property
    def status(self) -> str:
        return self.message

    def __repr__(self):
        return (f"{type(self).__name__}(info={self.info}, num_iter={self.num_iter}, "
                f"x shape {describe_shape(self.x.shape)}: {self.message})")
