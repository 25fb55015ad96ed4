"""Multi-output covariances: sums of Kronecker products ``sum_q K_q(X, X') kron B_q``.

The intrinsic coregionalisation model (ICM) and the linear model of coregionalisation (LMC)
(Alvarez, Rosasco & Lawrence 2012, "Kernels for vector-valued functions: a review", sections
4.1-4.2): ``t`` outputs at inputs ``X`` have the covariance

    cov(f_a(x), f_b(x')) = sum_q B_q[a, b] k_q(x, x'),

one term for the ICM, ``Q`` for the LMC. Stacked input-major (entry ``i * t + a`` is output
``a`` at input ``i``, the C-order flattening of an ``(n, t)`` array ``Y``), the ``(n t, n t)``
covariance is ``sum_q kron(K_q, B_q)``.

Each multi-output kernel gives its latent kernels ``k_q``, its coregionalisation matrices
``B_q`` and the gradient of any function of them w.r.t. its parameters from cotangents on
``K_q`` and ``B_q`` (:meth:`MultiOutputKernel.grams_and_vjp`): the seam every model uses, the
Kronecker path of :class:`gpnum.models.MultiOutputGPR` as much as the dense one.
"""

from __future__ import annotations

from gpnum.backend import device_of, get_namespace
from gpnum.errors import ShapeError, check_int, describe_shape
from gpnum.kernels._base import Kernel
from gpnum.kernels._coregion import Coregion
from gpnum.kernels._nested import ParentKernel, check_children
from gpnum.params import Parameterised

__all__ = ["ICM", "LMC", "IndependentOutputs", "MultiOutputKernel"]


class MultiOutputKernel(Parameterised):
    """Base class of covariances ``sum_q kron(K_q, B_q)`` over ``t`` outputs.

    Not a :class:`gpnum.kernels.Kernel`: its gram matrix of ``n`` inputs is ``(n t, n t)``.
    Parameters are the children's, prefixed (``"kernel.lengthscale"``, ``"coregion.W"``,
    ``"0.kernel.variance"``), in natural form like every gpnum parameter.

    Subclasses implement :meth:`_children` (``[(prefix, child)]``), :meth:`latent_kernels`,
    :meth:`coregion_matrices` and :meth:`_coregion_vjp` (cotangents on the ``B_q`` ->
    parameter gradients).
    """

    num_outputs: int

    # ------------------------------------------------------------------ structure
    def _children(self) -> list:
        raise NotImplementedError

    def children(self) -> list:
        """``[(prefix, kernel)]``: the kernels this one is built from (as
        :meth:`gpnum.kernels.ParentKernel.children`, which saving and cloning use)."""
        return list(self._children())

    #: A kernel of this class from the kernels of :meth:`children` and the constructor's
    #: other arguments (as :meth:`gpnum.kernels.ParentKernel.from_children`).
    from_children = classmethod(ParentKernel.from_children.__func__)

    #: Own positive parameters and the children's, prefixed (what L-BFGS-B takes in log
    #: coordinates), as :meth:`gpnum.kernels.ParentKernel.positive_names`.
    positive_names = ParentKernel.positive_names

    @property
    def latent_kernels(self) -> list:
        """The ``Q`` kernels ``k_q`` on the inputs."""
        raise NotImplementedError

    def coregion_matrices(self) -> list:
        """The ``Q`` coregionalisation matrices ``B_q``, each ``(t, t)``, symmetric PSD."""
        raise NotImplementedError

    def _coregion_vjp(self, dB: list) -> dict:
        """``{name: gradient}`` of ``sum_q sum(dB_q * B_q)`` w.r.t. the parameters of the
        ``B_q`` (names as in :meth:`parameters`)."""
        raise NotImplementedError

    @property
    def num_latent(self) -> int:
        """``Q``, the number of Kronecker terms."""
        return len(self.latent_kernels)

    def _reference(self):
        return self._children()[0][1]._reference()

    def _leaves(self):
        return [leaf for _, c in self._children() for leaf in c._leaves()]

    # ------------------------------------------------------------------ parameters
    def _split(self, values: dict) -> list:
        """``{name: v}`` -> [child values] by prefix (ParentKernel's split: no own
        parameters here); unknown names raise."""
        return ParentKernel._split(self, values)[1]

    def _join(self, parts: list) -> dict:
        out = {}
        for (prefix, _), d in zip(self._children(), parts, strict=True):
            out.update({f"{prefix}.{n}": v for n, v in d.items()})
        return out

    def parameters(self) -> dict:
        """The children's natural-form parameters as ``{"prefix.name": array}``."""
        return self._join([c.parameters() for _, c in self._children()])

    def _prepare(self, values: dict) -> list:
        out = []
        for (_, c), p in zip(self._children(), self._split(values), strict=True):
            out.extend(c._prepare(p))
        return out

    def set_parameters(self, values: dict) -> None:
        """Assign several parameters by their prefixed names; all are validated first."""
        for owner, n, arr in self._prepare(values):
            object.__setattr__(owner, n, arr)

    def _natural(self, values: dict) -> dict:
        return self._join([c._natural(p) for (_, c), p in
                           zip(self._children(), self._split(values), strict=True)])

    def unconstrained(self) -> dict:
        """The parameters in unconstrained form (softplus inverse of the positive ones)."""
        return self._join([c.unconstrained() for _, c in self._children()])

    def set_unconstrained(self, values: dict) -> None:
        """Assign parameters from their unconstrained form."""
        self.set_parameters(self._natural(values))

    def grad_to_unconstrained(self, grads: dict) -> dict:
        """Chain rule from natural-form to unconstrained gradients."""
        return self._join([c.grad_to_unconstrained(p) for (_, c), p in
                           zip(self._children(), self._split(grads), strict=True)])

    # ------------------------------------------------------------------ evaluation
    def grams_and_vjp(self, X1, X2=None):
        """The latent grams ``K_q = k_q(X1, X2)``, the ``B_q`` and their joint backward pass.

        Parameters
        ----------
        X1 : array (n1, d)
        X2 : array (n2, d), optional
            Defaults to ``X1``.

        Returns
        -------
        grams : list of Q arrays (n1, n2)
        coregion : list of Q arrays (t, t)
        vjp : callable
            ``vjp(dK, dB)`` with lists of cotangents ``dK_q`` (n1, n2) (None: zero) and
            ``dB_q`` (t, t) returns ``{name: gradient}`` of
            ``sum_q sum(dK_q * K_q) + sum(dB_q * B_q)`` w.r.t. every parameter, keyed like
            :meth:`parameters`.
        """
        pairs = [k.gram_and_vjp(X1, X2) for k in self.latent_kernels]
        grams = [K for K, _ in pairs]
        coregion = self.coregion_matrices()

        def vjp(dK, dB):
            if len(dK) != len(pairs) or len(dB) != len(coregion):
                raise ShapeError(f"vjp: expected {len(pairs)} cotangents for K and for B, got "
                                 f"{len(dK)} and {len(dB)}")
            return self.join_vjp([None if G is None else back(G)["params"]
                                  for (_, back), G in zip(pairs, dK, strict=True)], dB)

        return grams, coregion, vjp

    def join_vjp(self, latent_grads, dB):
        """Every parameter's gradient from the latent kernels' own and the ``B_q``'s cotangents.

        Parameters
        ----------
        latent_grads : list of Q dicts or None
            Latent kernel ``q``'s parameter gradients keyed by its own names (None: zero), e.g.
            from a blocked :class:`gpnum.linalg.KernelMatrix`'s ``param_vjp``.
        dB : list of Q arrays (t, t)
            Cotangents of the ``B_q``.

        Returns
        -------
        dict
            ``{name: gradient}`` keyed like :meth:`parameters`.
        """
        out = {name: None for name in self.parameters()}
        for q, grads in enumerate(latent_grads):
            if grads is None:
                continue
            for name, g in grads.items():
                out[self._kernel_prefix(q) + name] = g
        out.update(self._coregion_vjp(dB))
        xp = self.xp
        return {n: (xp.zeros_like(p) if out[n] is None else out[n])
                for n, p in self.parameters().items()}

    def _kernel_prefix(self, q) -> str:
        raise NotImplementedError

    def gram(self, X1, X2=None):
        """The multi-output covariance ``sum_q kron(K_q(X1, X2), B_q)``, (n1 t, n2 t),
        entries ordered input-major (row ``i * t + a``: output ``a`` at ``X1[i]``)."""
        grams, coregion, _ = self.grams_and_vjp(X1, X2)
        return _kron_sum(grams, coregion)

    __call__ = gram

    def gram_vjp(self, G, X1, X2=None):
        """Gradient of ``sum(G * gram(X1, X2))`` w.r.t. the parameters, G (n1 t, n2 t).

        With ``G`` viewed as ``(n1, t, n2, t)``: ``dK_q[i, j] = sum_ab G[i, a, j, b] B_q[a, b]``
        and ``dB_q[a, b] = sum_ij G[i, a, j, b] K_q[i, j]``.
        """
        grams, coregion, vjp = self.grams_and_vjp(X1, X2)
        n1, n2, t = grams[0].shape[0], grams[0].shape[1], self.num_outputs
        if tuple(G.shape) != (n1 * t, n2 * t):
            raise ShapeError(f"G: expected shape ({n1 * t}, {n2 * t}), got "
                             f"{describe_shape(G.shape)}")
        dK, dB = _kron_sum_vjp(G, grams, coregion)
        return vjp(dK, dB)

    def diag(self, X):
        """Prior variances of every output at each input, ``(n, t)``:
        ``sum_q k_q(x_i, x_i) B_q[a, a]``."""
        xp = self.xp
        out = None
        for k, B in zip(self.latent_kernels, self.coregion_matrices(), strict=True):
            term = k.diag(X)[:, None] * xp.linalg.diagonal(B)[None, :]
            out = term if out is None else out + term
        return out

    def __repr__(self):
        inner = ", ".join(f"{p}={c!r}" for p, c in self._children())
        return f"{type(self).__name__}(num_outputs={self.num_outputs}, {inner})"

    @staticmethod
    def kron_sum(grams, coregion):
        """``sum_q kron(K_q, B_q)`` (n1 t, n2 t) from lists of K_q (n1, n2) and B_q (t, t),
        input-major (what :meth:`gram` returns, from grams the caller holds, e.g. in float64)."""
        return _kron_sum(grams, coregion)

    @staticmethod
    def kron_sum_vjp(G, grams, coregion):
        """Cotangents ``(dK, dB)`` on the ``K_q`` and ``B_q`` from a cotangent ``G``
        (n1 t, n2 t) on :meth:`kron_sum` (see :meth:`gram_vjp`)."""
        return _kron_sum_vjp(G, grams, coregion)


def _kron_sum(grams, coregion):
    """``sum_q kron(K_q, B_q)`` for K_q (n1, n2) and B_q (t, t): (n1 t, n2 t)."""
    out = None
    for K, B in zip(grams, coregion, strict=True):
        n1, n2, t = K.shape[0], K.shape[1], B.shape[0]
        xp = get_namespace(K)
        term = xp.reshape(K[:, None, :, None] * B[None, :, None, :], (n1 * t, n2 * t))
        out = term if out is None else out + term
    return out


def _kron_sum_vjp(G, grams, coregion):
    """Cotangents on ``K_q`` and ``B_q`` from a cotangent ``G`` (n1 t, n2 t) on
    ``sum_q kron(K_q, B_q)`` (input-major ordering): returns ``(dK, dB)``, lists of (n1, n2)
    and (t, t) arrays."""
    xp = get_namespace(G)
    n1, n2, t = grams[0].shape[0], grams[0].shape[1], coregion[0].shape[0]
    # (n1, t, n2, t) -> (n1 n2, t t): the contractions become matrix-vector products.
    G4 = xp.permute_dims(xp.reshape(G, (n1, t, n2, t)), (0, 2, 1, 3))
    Gm = xp.reshape(G4, (n1 * n2, t * t))
    dK = [xp.reshape(Gm @ xp.reshape(B, (t * t,)), (n1, n2)) for B in coregion]
    dB = [xp.reshape(xp.reshape(K, (n1 * n2,)) @ Gm, (t, t)) for K in grams]
    return dK, dB


def _task_column(coregion: Coregion):
    """The task indices ``0 .. t-1`` as a (t, 1) column: ``coregion(tasks) = B`` exactly."""
    xp = coregion.xp
    return xp.reshape(xp.arange(coregion.num_outputs, dtype=coregion.dtype,
                                device=device_of(coregion.W)), (-1, 1))


class ICM(MultiOutputKernel):
    """Intrinsic coregionalisation model: ``cov(f_a(x), f_b(x')) = B[a, b] k(x, x')``.

    ``B = W W^T + diag(kappa)`` (positive definite since ``kappa > 0``) is held by a
    :class:`gpnum.kernels.Coregion` (its parameterisation and gradient), so the gram of ``n``
    inputs is ``kron(K_X, B)`` (Bonilla, Chai & Williams 2008, "Multi-task Gaussian process
    prediction"; Alvarez et al. 2012, section 4.2).

    Parameters
    ----------
    kernel : gpnum.kernels.Kernel
        The latent covariance ``k`` on the inputs. Its variance and the scale of ``B`` are
        not separately identifiable: hold one fixed (``fit(..., fixed=["kernel.kernel.variance"])``)
        if a unique optimum matters.
    num_outputs : int
        ``t``.
    rank : int
        Columns of ``W`` (>= 1).
    W : array (t, rank), optional
    kappa : array (t,), optional
        As for :class:`gpnum.kernels.Coregion` (defaults: a fixed matrix with unequal columns;
        ones).

    Notes
    -----
    Parameters: ``kernel.<name>`` (the latent kernel's), ``coregion.W``, ``coregion.kappa``.
    """

    #: How gpnum.checkpoint passes the children back: the latent kernel only (the Coregion
    #: child's parameters are set afterwards by name).
    _children_arg = "base"

    def __init__(self, kernel, num_outputs, rank=1, W=None, kappa=None):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel, got {type(kernel).__name__}")
        t = check_int(num_outputs, "num_outputs", minimum=1, expected="a positive integer")
        self.kernel = kernel
        self.num_outputs = t
        self.coregion = Coregion(t, rank, W=W, kappa=kappa, xp=kernel.xp, dtype=kernel.dtype,
                                 device=device_of(kernel._reference()))
        self.rank = self.coregion.rank
        self._init_namespace(kernel.xp, kernel.dtype, device_of(kernel._reference()))

    def _children(self):
        return [("kernel", self.kernel), ("coregion", self.coregion)]

    @property
    def W(self):
        """``coregion.W`` (t, rank): the constructor's argument, read back for saving."""
        return self.coregion.W

    @property
    def kappa(self):
        """``coregion.kappa`` (t,)."""
        return self.coregion.kappa

    @property
    def latent_kernels(self):
        return [self.kernel]

    def _kernel_prefix(self, q):
        return "kernel."

    def coregion_matrices(self):
        return [self.coregion(_task_column(self.coregion))]

    def _coregion_vjp(self, dB):
        # Coregion's gram of the task indices is B itself, so its backward pass (dW =
        # (dB + dB^T) W, dkappa = diag(dB)) maps the cotangent of B to its parameters.
        g = self.coregion.gram_vjp(dB[0], _task_column(self.coregion))["params"]
        return {f"coregion.{n}": v for n, v in g.items()}


class LMC(MultiOutputKernel):
    """Linear model of coregionalisation: ``sum_q kron(K_q, B_q)``, a sum of ICMs.

    Each term has its own latent kernel and ``B_q = W_q W_q^T + diag(kappa_q)`` (Journel &
    Huijbregts 1978; Alvarez et al. 2012, section 4.1; Goovaerts 1997 for the geostatistical
    use).

    Parameters
    ----------
    kernels : sequence of gpnum.kernels.Kernel or ICM
        The ``Q`` latent kernels (distinct objects of one namespace, dtype and device); an
        :class:`ICM` (of ``num_outputs`` outputs) is taken as the term itself, its ``B`` kept.
    num_outputs : int
        ``t``.
    rank : int or sequence of int
        Columns of each ``W_q`` (one for all terms, or one per term; an ICM keeps its own).

    Notes
    -----
    Parameters: ``q.kernel.<name>``, ``q.coregion.W``, ``q.coregion.kappa`` for ``q = 0..Q-1``.
    The default ``W_q`` of the terms are equal; start them apart (``set_parameters``) when
    the terms should not begin interchangeable.
    """

    _children_arg = "kernels"

    def __init__(self, kernels, num_outputs, rank=1):
        kernels = list(kernels)
        if not kernels:
            raise ValueError("kernels: expected at least one kernel")
        for k in kernels:
            if isinstance(k, ICM) and k.num_outputs != num_outputs:
                raise ValueError(f"kernels: an ICM of {k.num_outputs} outputs in an LMC of "
                                 f"{num_outputs}")
        latent = [k.kernel if isinstance(k, ICM) else k for k in kernels]
        check_children("LMC", latent)
        ranks = [rank] * len(kernels) if isinstance(rank, int) else list(rank)
        if len(ranks) != len(kernels):
            raise ValueError(f"rank: expected an int or {len(kernels)} ints (one per kernel), "
                             f"got {rank!r}")
        self.terms = [k if isinstance(k, ICM) else ICM(k, num_outputs, r)
                      for k, r in zip(kernels, ranks, strict=True)]
        self.num_outputs = self.terms[0].num_outputs
        self.rank = [icm.rank for icm in self.terms]
        first = latent[0]
        self._init_namespace(first.xp, first.dtype, device_of(first._reference()))

    def _children(self):
        return [(str(q), icm) for q, icm in enumerate(self.terms)]

    @property
    def kernels(self):
        """The latent kernels (constructor argument)."""
        return [icm.kernel for icm in self.terms]

    @property
    def latent_kernels(self):
        return self.kernels

    def _kernel_prefix(self, q):
        return f"{q}.kernel."

    def coregion_matrices(self):
        return [icm.coregion_matrices()[0] for icm in self.terms]

    def _coregion_vjp(self, dB):
        out = {}
        for q, (icm, G) in enumerate(zip(self.terms, dB, strict=True)):
            out.update({f"{q}.{n}": v for n, v in icm._coregion_vjp([G]).items()})
        return out


class IndependentOutputs(MultiOutputKernel):
    """Independent outputs, each with its own kernel: ``B_q = e_q e_q^T`` (fixed).

    The trivial multi-output covariance: output ``a`` is a GP with kernel ``kernels[a]`` and
    no output says anything about another. The baseline the coregionalisation models are
    compared with.

    Parameters
    ----------
    kernels : sequence of gpnum.kernels.Kernel
        One per output (distinct objects), ``t = len(kernels)``.

    Notes
    -----
    Parameters: ``a.<name>`` for output ``a``.
    """

    _children_arg = "kernels"

    def __init__(self, kernels):
        kernels = list(kernels)
        if not kernels:
            raise ValueError("kernels: expected at least one kernel")
        check_children("IndependentOutputs", kernels)
        self.kernels = kernels
        self.num_outputs = len(kernels)
        first = kernels[0]
        self._init_namespace(first.xp, first.dtype, device_of(first._reference()))

    def _children(self):
        return [(str(a), k) for a, k in enumerate(self.kernels)]

    @property
    def latent_kernels(self):
        return self.kernels

    def _kernel_prefix(self, q):
        return f"{q}."

    def coregion_matrices(self):
        xp, t = self.xp, self.num_outputs
        eye = xp.eye(t, dtype=self.dtype, device=self._device)
        return [eye[:, a:a + 1] * eye[a:a + 1, :] for a in range(t)]

    def _coregion_vjp(self, dB):
        return {}
