"""What a CIQ forward call returns: :class:`CIQResult`, and :class:`SearchStart`, where its
eigenpair search ended (see :mod:`gpnum.linalg._ciq`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpnum.errors import describe_shape
from gpnum.linalg._ciq_solves import _solves_of

__all__ = ["CIQResult", "SearchStart"]


@dataclass(frozen=True, repr=False)
class SearchStart:
    """Where an eigenpair search for CIQ's deflation ended: a start for the next search on a
    nearby operator (``deflate_start`` of :func:`inv_sqrt_matmul`).

    Attributes
    ----------
    vectors : array (m, p)
        The Ritz vectors of every round of the search, accepted or not, by decreasing Ritz
        value.
    rounds : int
        The number of rounds the search ran.
    """

    vectors: object
    rounds: int

    def __repr__(self):
        return (f"SearchStart(vectors shape {describe_shape(self.vectors.shape)}, "
                f"rounds={self.rounds})")


@dataclass(frozen=True)
class CIQResult:
    """Output of :func:`inv_sqrt_matmul` / :func:`sqrt_matmul`.

    Attributes
    ----------
    x : array (m, k)
        ``K^{-1/2} B`` or ``K^{1/2} B``.
    shifts, weights : array (q,)
        Quadrature shifts ``s_q`` and weights ``w_q`` (working dtype, device of ``B``).
    solves : array (q, m, k)
        The per-shift solutions ``(K + s_q I)^{-1} B`` (kept for the backward pass).
    inv_sqrt_x : array (m, k)
        ``K^{-1/2} B`` (equal to ``x`` for the inverse square root).
    num_iter : int
        msMINRES iterations (= products with ``K``); :func:`sqrt_matmul` uses one more product.
    info : int
        0 converged; > 0 msMINRES stopped at ``maxiter`` short of ``rtol``; < 0 breakdown.
    eigen_bounds : tuple of float
        The ``(lmin, lmax)`` used to place the quadrature nodes.
    kind : str
        ``"inv_sqrt"`` or ``"sqrt"``.
    deflation : tuple or None
        ``(theta (r,), W (m, r))``: the Ritz pairs split off the solves (None: no deflation).
        The backward passes reuse them.
    deflation_products : int
        Columns multiplied by ``K`` to find them (``(power_iters + 2) * block``; 0 without
        deflation), to set against ``num_iter * k``.
    complement : LinearOperator or None
        The operator the deflated solves ran on (``K`` restricted to the complement of ``W``;
        for a ``K`` held as a matrix, an (m, m) deflated matrix); the backward passes reuse it.
    search_start : SearchStart or None
        Where the eigenpair search ended (None when no search ran): pass it as
        ``deflate_start`` to a call on a nearby operator.
    """

    x: object
    shifts: object
    weights: object
    _solves: object = field(repr=False)  # the solves, or a _DeferredSolves that forms them
    inv_sqrt_x: object
    num_iter: int
    info: int
    eigen_bounds: tuple
    kind: str
    deflation: object = None
    deflation_products: int = 0
    complement: object = field(default=None, repr=False)
    search_start: object = field(default=None, repr=False)

    @property
    def solves(self):
        """The per-shift solutions ``(K + s_q I)^{-1} B`` (q, m, k); a forward call without a
        workspace forms them from the Lanczos basis on first access (a backward pass)."""
        return _solves_of(self._solves)

    @property
    def num_deflated(self) -> int:
        """Number of eigenpairs split off the shifted solves."""
        return 0 if self.deflation is None else int(self.deflation[0].shape[0])

    @property
    def status(self) -> str:
        if self.info == 0:
            return f"converged in {self.num_iter} iterations"
        if self.info > 0:
            return f"stopped after {self.num_iter} iterations without reaching rtol"
        return f"breakdown (info={self.info})"

    def __repr__(self) -> str:
        lo, hi = self.eigen_bounds
        return (f"CIQResult(kind={self.kind!r}, x.shape={tuple(self.x.shape)}, "
                f"q={self.shifts.shape[0]}, eigen_bounds=({lo:.3g}, {hi:.3g}), "
                f"num_deflated={self.num_deflated}, {self.status})")
