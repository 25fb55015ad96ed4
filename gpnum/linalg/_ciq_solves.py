"""CIQ's shifted solves ``(K + s_q I)^{-1} B`` by one msMINRES call, deflated or not, and their
weighted sum; kept as the Lanczos basis and its coefficients until a backward pass needs them
(see :mod:`gpnum.linalg._ciq`)."""

from __future__ import annotations

from gpnum.backend import get_namespace
from gpnum.linalg._msminres import _combine_basis, msminres

__all__: list[str] = []


class _DeferredSolves:
    """The per-shift solves ``(K + s_q I)^{-1} B`` (q, m, k) kept as the Lanczos basis and its
    coefficients, with their weighted sum formed directly (a (k, J) x (J, m) product per
    column). The (q, m, k) solves are formed only if asked for (a backward pass): a forward
    call then touches no q m k values of fresh memory (61 MB at m = 2000, k = 256, q = 15,
    where first touches cost as much as the solve). The basis is the call's own, a copy of a
    short one out of a shared workspace (which a later call overwrites), or, for a backward
    pass that is done with it before the workspace's next use, the workspace's memory.
    """

    def __init__(self, xp, basis, coeffs, weights):
        self.xp, self.basis, self.coeffs = xp, basis, coeffs
        self._solves = None
        # sum_q w_q y_i[q, :] for every basis vector i: (k, 1, J), then one batched product
        cw = xp.stack([weights @ y for y in coeffs], axis=-1)  # (k, J)
        self.weighted = (cw[:, None, :] @ basis)[:, 0, :].T  # (m, k) (a transposed view)
        # (scale (k,), W (m, r), C (k, r), g (q, r)) of a deflated solve: the solves'
        # components along W are D = C[:, None, :] * g[None, :, :] (k, q, r), with C the
        # right-hand sides' components along W and g = 1 / (theta + s_q), kept in that form
        self.affine = None

    def factors_against(self, back, omega):
        """``(F, G)`` with ``F G^T = sum_q omega_q U_q V_q^T`` (m, m) for ``V`` these solves and
        ``U`` the per-shift solves ``back`` of a backward pass on the same deflation (another
        :class:`_DeferredSolves`, a basis of ``b`` vectors per column), forming neither: ``F``,
        ``G`` are (m, k c [+ r]).

        With ``V_q[:, j] = sf_j V_j yf_qj + W D_jq`` and ``U_q[:, j] = sb_j U_j yb_qj + W E_jq``
        (bases ``V_j`` (m, c), ``U_j`` (m, b) per column ``j``), the sum is
        ``sum_j (U_j M_j + W P_j) V_j^T + (sum_j U_j N_j + W Gamma) W^T`` with the small
        ``M_j = sum_q omega_q sb_j yb_qj (sf_j yf_qj)^T`` (b, c), ``P_j`` (r, c),
        ``N_j = sum_q omega_q sb_j yb_qj D_jq^T`` (b, r) and
        ``Gamma = (C_b^T C_f) o (g^T diag(omega) g)`` (r, r), all from the factors of
        ``D = C_f g`` and ``E = C_b g`` (``affine``). The one large product is
        (m, k b) x (k b, r), where forming ``U`` (q, m, k) costs a (k q, r) x (r, m) product
        for its ``W E`` part and contracting it with ``D`` an (m, k q) x (k q, r) one (and
        forming ``V`` and the (m, k q) x (k q, m) product about ``q / c`` times more).
        """
        xp = self.xp
        k, c, m = self.basis.shape
        b = len(back.coeffs)
        Yf = xp.stack(self.coeffs, axis=0)  # (c, q, k)
        Yb = xp.stack(back.coeffs, axis=0)  # (b, q, k)
        if self.affine is not None:
            Yf, Yb = Yf * self.affine[0], Yb * back.affine[0]
        Yfw = xp.permute_dims(Yf * omega[None, :, None], (2, 0, 1))  # (k, c, q)
        MT = Yfw @ xp.permute_dims(Yb, (2, 1, 0))  # (k, c, b)
        FT = xp.reshape(MT @ back.basis, (k * c, m))
        G = xp.reshape(self.basis, (k * c, m)).T
        if self.affine is None:
            return FT.T, G
        _, W, Cf, g = self.affine
        Cb = back.affine[2]
        r = W.shape[1]
        # P_j^T = sum_q omega_q yf_qj E_jq and N_j, their sums over q as (k, ., q) x (q, r)
        FT = FT + xp.reshape((Yfw @ g) * Cb[:, None, :], (k * c, r)) @ W.T
        N = (xp.permute_dims(Yb * omega[None, :, None], (2, 0, 1)) @ g) * Cf[:, None, :]
        L = W @ ((Cb.T @ Cf) * (g.T @ (omega[:, None] * g)))  # (m, r)
        # the (m, k b) x (k b, r) product over blocks of columns: the basis is a strided
        # slice of the workspace, and reshaping it whole would copy it into fresh memory
        step = max(1, 2**18 // (b * m))
        for k0 in range(0, k, step):
            k1 = min(k, k0 + step)
            L = L + (xp.reshape(back.basis[k0:k1, ...], ((k1 - k0) * b, m)).T
                     @ xp.reshape(N[k0:k1, ...], ((k1 - k0) * b, r)))
        return xp.concat([FT.T, L], axis=1), xp.concat([G, W], axis=1)

    def solves(self):
        if self._solves is None:
            self._solves = _assemble_solves(self.xp, self.basis, self.coeffs, self.affine)
            self.basis = self.coeffs = None  # the solves replace them
        return self._solves


def _solves_of(value):
    """The (q, m, k) solves of a :func:`_shifted_solves` output (formed if deferred)."""
    return value.solves() if isinstance(value, _DeferredSolves) else value


def _shifted_solves(A, B2, shifts, deflation, complement, rtol, maxiter, workspace,
                    weights=None, keep_basis=False):
    """(solves (q, m, k) of ``(K + s_q I) X = B``, msMINRES result), deflated if asked
    (``complement``: the operator of :func:`_find_deflation`). With ``weights``, and no
    ``workspace`` or a basis of at most ``q / 2`` vectors, the solves come as a
    :class:`_DeferredSolves` holding their weighted sum (unless msMINRES folded its basis).
    ``keep_basis`` (with ``weights``): deferred whatever the basis length, on the workspace's
    memory itself, for a caller that is done with it before the workspace's next use."""
    xp = get_namespace(B2)
    q = shifts.shape[0]

    def combine(basis, coeffs, assemble):
        # Deferred without a workspace (the basis is the call's own), or for a short basis
        # (a copy of it is smaller than the solves, and a backward pass then needs no solves:
        # _DeferredSolves.factors_against); otherwise assembled now.
        if keep_basis:
            return _DeferredSolves(xp, basis, coeffs, weights)
        if workspace is None or 2 * len(coeffs) <= q:
            if workspace is not None:  # later solves reuse the workspace's memory
                basis = xp.asarray(basis, copy=True)
            return _DeferredSolves(xp, basis, coeffs, weights)
        return assemble(basis, coeffs)

    if deflation is None:
        def plain(basis, coeffs):
            return _assemble_solves(xp, basis, coeffs)

        res = msminres(A, B2, shifts, rtol=rtol, maxiter=maxiter, workspace=workspace,
                       _combine=None if weights is None else
                       (lambda basis, coeffs: combine(basis, coeffs, plain)))
        return res.x, res
    theta, W = deflation
    Bw = W.T @ B2  # (r, k)
    # The solves' components along W, D = C g, as their factors: D (k, q, r) is formed only
    # block by block where the solves are assembled
    C, g = Bw.T, 1.0 / (theta[None, :] + shifts[:, None])  # (k, r), (q, r)
    # The tolerance stays relative to ||b||, not to the much smaller ||P b||: each column is
    # scaled to unit norm and solved to an absolute rtol. (Relative to ||P b|| the complement
    # solve would chase components that the undeflated solve never resolves either.)
    norms = xp.sqrt(xp.sum(B2 * B2, axis=0))
    scale = xp.where(norms > 0.0, norms, xp.ones_like(norms))
    assembled = []

    def assemble(basis, coeffs):
        assembled.append(True)
        return _assemble_solves(xp, basis, coeffs, (scale, W, C, g))

    res = msminres(complement, (B2 - W @ Bw) / scale, shifts, rtol=0.0, atol=rtol,
                   maxiter=maxiter, workspace=workspace,
                   _combine=assemble if weights is None else
                   (lambda basis, coeffs: combine(basis, coeffs, assemble)))
    if isinstance(res.x, _DeferredSolves):
        deferred = res.x
        deferred.affine = (scale, W, C, g)
        deferred.weighted = deferred.weighted * scale + W @ (C * (weights @ g)[None, :]).T
        return deferred, res
    out = res.x
    if not assembled:  # msMINRES folded its basis (past max_basis_bytes): add W D here
        for i in range(shifts.shape[0]):
            out[i, ...] = out[i, ...] * scale + W @ (C * g[i, :][None, :]).T
    return out, res


def _assemble_solves(xp, basis, coeffs, affine=None):
    """The per-shift solves (q, m, k) from msMINRES's basis (k, c, m) and coefficients (c
    arrays (q, k)), deflated by ``affine = (scale, W, C, g)`` if given
    (:func:`_assemble_deflated`)."""
    if affine is None:
        return _combine_basis(xp, basis, len(coeffs), [y[None, ...] for y in coeffs])[0, ...]
    return _assemble_deflated(xp, basis, coeffs, *affine)


def _assemble_deflated(xp, basis, coeffs, scale, W, C, g):
    """The deflated solves ``scale * (V y_q) + W D_q`` (q, m, k) from msMINRES's basis.

    Parameters
    ----------
    basis : array (k, c, m)
        The Lanczos vectors of the complement solve (stored transposed, as msMINRES keeps them).
    coeffs : list of c arrays (q, k)
        Their coefficients per shift and column.
    scale : array (k,)
        The column norms the complement's right-hand sides were divided by.
    W : array (m, r)
    C, g : arrays (k, r), (q, r)
        The solves' components along ``W``, ``D = C[:, None, :] * g[None, :, :]`` (k, q, r).

    Returns
    -------
    array (q, m, k)
        A strided view of a (k, q, m) array, the layout of msMINRES's own solutions. Formed in
        that layout: the scale folds into the (q, k) coefficients and ``W D`` is added by GEMMs
        over blocks of columns, where adding it shift by shift to the (q, m, k) view takes
        strided elementwise passes (docs/benchmarks.md, "Measurements behind implementation
        choices").
    """
    (k, r), q = C.shape, g.shape[0]
    m = basis.shape[2]
    c = len(coeffs)
    Y = xp.stack([y * scale for y in coeffs], axis=-1)  # (q, k, c)
    # batched BLAS needs contiguous operands: the flat reshape materialises (k, q, c)
    Y = xp.reshape(xp.reshape(xp.permute_dims(Y, (1, 0, 2)), (-1,)), (k, q, c))
    out = Y @ basis[:, :c, :]  # (k, q, m)
    Wt = W.T
    # blocks of ~2 MB temporaries (reused by malloc; a whole (k, q, m) one is fresh memory),
    # D's rows (k, q) in the order of out's
    step = max(1, 2**18 // (q * m))
    for k0 in range(0, k, step):
        k1 = min(k, k0 + step)
        Dk = xp.reshape(C[k0:k1, None, :] * g[None, :, :], ((k1 - k0) * q, r))
        out[k0:k1, ...] += xp.reshape(Dk @ Wt, (k1 - k0, q, m))
    return xp.permute_dims(out, (1, 2, 0))


def _weighted_sum(xp, weights, solves):
    """``sum_q weights[q] solves[q]`` (m, k) for ``solves`` (q, m, k).

    As one (q,) x (k, q, m) product: msMINRES writes its solutions in (k, q, m) memory order,
    where this is a view, while ``tensordot`` would first copy all q m k values into (q, m k)
    order. The result may be a column-major (transposed) view.
    """
    return xp.matmul(weights, xp.permute_dims(solves, (2, 0, 1))).T
