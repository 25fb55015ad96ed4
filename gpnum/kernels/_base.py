"""The kernel interface shared by every covariance function, and its input checks."""

from __future__ import annotations

from gpnum.backend import asarray, device_of, get_namespace, is_array, namespace, to_numpy
from gpnum.errors import ShapeError, check_finite, check_points_shape, describe_shape
from gpnum.params import (
    Parameterised,
    chain_to_unconstrained,
    from_unconstrained,
    to_unconstrained,
)

__all__ = ["Kernel"]


class Kernel(Parameterised):
    """Base class of covariance functions ``k(x, x')`` on rows of ``(n, d)`` arrays.

    Parameters are held in natural (positive) form, see :class:`gpnum.params.Parameterised`;
    the unconstrained form used by the optimisers is the softplus inverse, and
    :meth:`grad_to_unconstrained` applies its chain rule.

    Public methods validate their inputs (2-D, finite, the kernel's namespace, dtype and device,
    matching columns) and then call the private ``_gram``, ``_diag``, ``_gram_vjp`` and
    ``_diag_vjp`` that subclasses implement, where ``X2 is None`` means "the same set as X1".
    """

    #: The input columns the kernel sees (a tuple of ints), or None for all of them.
    active_dims = None
    #: Whether ``k(X)`` differs from ``k(X, X)`` (White: noise on a set and itself only).
    _same_set_term = False

    @property
    def depends_on_same_set(self) -> bool:
        """True when ``k(X)`` (one set) differs from ``k(X, X)`` (two sets that are equal):
        the kernel or a part of it is a :class:`gpnum.kernels.White`. Blockwise evaluators
        (:class:`gpnum.linalg.KernelMatrix`) then evaluate diagonal blocks as ``k(X_b)``."""
        return self._same_set_term or any(k.depends_on_same_set for _, k in self._children())

    # ----------------------------------------------------------------- construction helpers
    def _setup_namespace(self, xp, dtype, device, *values):
        """Namespace, dtype and device from the arguments, else from array-valued parameters."""
        arrays = [v for v in values if is_array(v)]
        if xp is None and arrays:
            xp = get_namespace(*arrays)
            if device is None:
                device = device_of(arrays[0])
            if dtype is None and xp.isdtype(arrays[0].dtype, "real floating"):
                dtype = arrays[0].dtype
        if isinstance(dtype, str):
            dtype = getattr(namespace() if xp is None else xp, dtype)
        self._init_namespace(xp, dtype, device)

    def _set_active_dims(self, active_dims):
        """Store the input columns this kernel sees (None: all of them) as a tuple of ints."""
        if active_dims is None:
            object.__setattr__(self, "active_dims", None)
            return
        if isinstance(active_dims, (str, bytes)) or not hasattr(active_dims, "__iter__"):
            raise TypeError(f"active_dims: expected a list of column indices or None, got "
                            f"{type(active_dims).__name__}")
        dims = []
        for j in active_dims:
            if isinstance(j, bool) or not isinstance(j, int) and not hasattr(j, "__index__"):
                raise TypeError(f"active_dims: expected integer column indices, got {j!r}")
            dims.append(int(j.__index__()))
        if not dims:
            raise ValueError("active_dims: expected at least one column index, got []")
        if min(dims) < 0 or len(set(dims)) != len(dims):
            raise ValueError(f"active_dims: expected distinct non-negative column indices, got "
                             f"{dims}")
        object.__setattr__(self, "active_dims", tuple(dims))

    def _require_ndim(self, name, ndims):
        arr = getattr(self, name)
        if arr.ndim not in ndims:
            want = " or ".join("()" if k == 0 else "(d,)" if k == 1 else f"{k}-D" for k in ndims)
            raise ShapeError(f"{name}: expected shape {want}, got {describe_shape(arr.shape)}")

    # ------------------------------------------------------------------------ validation
    def _reference(self):
        """One parameter array: carries the kernel's namespace and device."""
        return next(iter(self.parameters().values()))

    def _check_dim(self, d: int, name: str) -> None:
        """Subclasses with per-dimension parameters check the number of input columns here."""

    def _check_width(self, d: int, name: str) -> None:
        """Check ``d`` input columns against ``active_dims``, then the columns the kernel sees."""
        dims = getattr(self, "active_dims", None)
        if dims is None:
            self._check_dim(d, name)
            return
        if max(dims) >= d:
            raise ShapeError(f"{name}: active_dims {list(dims)} needs at least {max(dims) + 1} "
                             f"columns, got {d}")
        self._check_dim(len(dims), name)

    def _check_input(self, X, name):
        if not is_array(X):
            raise TypeError(f"{name}: expected a 2-D array of shape (n, d), got "
                            f"{type(X).__name__}")
        ref = self._reference()
        get_namespace(X, ref)  # raises a clear TypeError when libraries are mixed
        check_points_shape(X, name)
        if X.dtype != self.dtype:
            raise TypeError(f"{name}: expected dtype {self.dtype} (the kernel's), got {X.dtype}; "
                            "construct the kernel with dtype=X.dtype or convert X")
        if device_of(X) != device_of(ref):
            raise ValueError(f"{name}: expected an array on the kernel's device "
                             f"{device_of(ref)}, got one on {device_of(X)}")
        check_finite(self.xp, X, name)
        self._check_width(X.shape[1], name)
        return X

    def _check_inputs(self, X1, X2):
        X1 = self._check_input(X1, "X1")
        if X2 is not None:
            X2 = self._check_input(X2, "X2")
            if X2.shape[1] != X1.shape[1]:
                raise ShapeError(f"X2: expected shape ({X2.shape[0]}, {X1.shape[1]}) to match "
                                 f"the {X1.shape[1]} columns of X1, got "
                                 f"{describe_shape(X2.shape)}")
        return X1, X2

    def _check_cotangent(self, G, shape, name):
        if not is_array(G):
            raise TypeError(f"{name}: expected an array of shape {describe_shape(shape)}, got "
                            f"{type(G).__name__}")
        get_namespace(G, self._reference())
        if tuple(G.shape) != tuple(shape):
            raise ShapeError(f"{name}: expected shape {describe_shape(shape)}, got "
                             f"{describe_shape(G.shape)}")
        if G.dtype != self.dtype:
            raise TypeError(f"{name}: expected dtype {self.dtype} (the kernel's), got {G.dtype}")
        check_finite(self.xp, G, name)
        return G

    # -------------------------------------------------------------------------- public API
    def __call__(self, X1, X2=None):
        """Gram matrix ``K[i, j] = k(X1[i], X2[j])``, shape (n1, n2); ``X2=None`` means X1."""
        return self.gram(X1, X2)

    def gram(self, X1, X2=None):
        """Gram matrix ``K[i, j] = k(X1[i], X2[j])``.

        Parameters
        ----------
        X1 : array (n1, d)
        X2 : array (n2, d), optional
            Defaults to ``X1``; the result is then exactly symmetric.

        Returns
        -------
        K : array (n1, n2)
        """
        X1, X2 = self._check_inputs(X1, X2)
        return self._sel_gram(X1, X2)

    def diag(self, X):
        """Diagonal ``k(X[i], X[i])`` of the gram matrix of ``X`` (n, d), shape (n,)."""
        X = self._check_input(X, "X")
        return self._sel_diag(X)

    def gram_vjp(self, G, X1, X2=None):
        """Gradient of ``sum(G * k(X1, X2))`` w.r.t. the parameters and the inputs.

        Parameters
        ----------
        G : array (n1, n2)
            Cotangent of the gram matrix.
        X1 : array (n1, d)
        X2 : array (n2, d), optional
            Defaults to ``X1``.

        Returns
        -------
        dict
            ``{"params": {name: array shaped like the parameter}, "X1": (n1, d), "X2": (n2, d)}``.
            When ``X2`` is None, ``"X2"`` is None and ``"X1"`` holds the row and the column
            contributions (the gradient w.r.t. the one set of points).
        """
        X1, X2 = self._check_inputs(X1, X2)
        n2 = X1.shape[0] if X2 is None else X2.shape[0]
        G = self._check_cotangent(G, (X1.shape[0], n2), "G")
        params, g1, g2 = self._sel_gram_vjp(G, X1, X2)
        return {"params": self._as_arrays(params), "X1": g1, "X2": g2}

    def gram_and_vjp(self, X1, X2=None):
        """The gram matrix and a function for its backward pass, sharing their work.

        Returns ``(K, vjp)`` with ``K = gram(X1, X2)`` and ``vjp(G) == gram_vjp(G, X1, X2)``.
        Kernels that can (the stationary ones) keep what the gradient needs from the forward
        computation -- for RBF and Matern, the distances and ``dh/d(r^2)``: two (n1, n2) arrays
        held by ``vjp`` -- instead of recomputing it. Nothing is cached on the kernel: drop
        ``vjp`` to free them. ``vjp`` is valid for the parameter values at the time of the call
        and may read ``K``: do not modify ``K`` in place before calling it.

        ``vjp.low_rank(U, V)``, with ``U`` (n1, p) and ``V`` (n2, p), returns ``vjp(U @ V.T)``
        without forming the (n1, n2) cotangent where the kernel can (the stationary kernels
        go through it in blocks of rows; others form it): for the low-rank cotangents of
        conjugate-gradient training (gpnum.models.GPR with ``solver="cg"``).

        ``vjp.params(G)`` returns ``vjp(G)["params"]`` only: kernels that can skip the input
        gradients' work (the stationary ones) do, for training loops that never read them.
        """
        X1, X2 = self._check_inputs(X1, X2)
        n1, n2 = X1.shape[0], (X1.shape[0] if X2 is None else X2.shape[0])
        K, inner = self._sel_gram_and_vjp(X1, X2)

        def vjp(G):
            G = self._check_cotangent(G, (n1, n2), "G")
            params, g1, g2 = inner(G)
            return {"params": self._as_arrays(params), "X1": g1, "X2": g2}

        def low_rank(U, V):
            U = self._check_cotangent_factor(U, n1, "U")
            V = self._check_cotangent_factor(V, n2, "V")
            if U.shape[1] != V.shape[1]:
                raise ShapeError(f"U, V: expected the same number of columns, got "
                                 f"{describe_shape(U.shape)} and {describe_shape(V.shape)}")
            blocked = getattr(inner, "low_rank", None)
            params, g1, g2 = blocked(U, V) if blocked is not None else inner(U @ V.T)
            return {"params": self._as_arrays(params), "X1": g1, "X2": g2}

        def params(G):
            G = self._check_cotangent(G, (n1, n2), "G")
            only = getattr(inner, "params_only", None)
            return self._as_arrays(only(G) if only is not None else inner(G)[0])

        vjp.low_rank = low_rank
        vjp.params = params
        return K, vjp

    def _check_cotangent_factor(self, F, rows, name):
        """A factor (rows, p) of a low-rank cotangent: array, namespace, dtype, finite."""
        if not is_array(F) or F.ndim != 2 or F.shape[0] != rows:
            got = describe_shape(F.shape) if is_array(F) else type(F).__name__
            raise ShapeError(f"{name}: expected an array of shape ({rows}, p), got {got}")
        return self._check_cotangent(F, tuple(F.shape), name)

    def _gram_and_vjp(self, X1, X2):
        return self._gram(X1, X2), lambda G: self._gram_vjp(G, X1, X2)

    def diag_vjp(self, g, X):
        """Gradient of ``sum(g * k.diag(X))``: ``{"params": {...}, "X": (n, d)}``."""
        X = self._check_input(X, "X")
        g = self._check_cotangent(g, (X.shape[0],), "g")
        params, gX = self._sel_diag_vjp(g, X)
        return {"params": self._as_arrays(params), "X": gX}

    # ------------------------------------------------------------------- active dimensions
    # The _sel_* methods take inputs of full width, give the private methods the columns in
    # active_dims, and scatter input gradients back to full width (zero in the other columns).
    # Parents (Sum, Product, Periodic, ChangePoints) call their children's _sel_* methods.
    def _select(self, X):
        dims = getattr(self, "active_dims", None)
        if X is None or dims is None:
            return X
        xp = get_namespace(X)
        if dims == tuple(range(dims[0], dims[0] + len(dims))):
            return X[:, dims[0]:dims[0] + len(dims)]
        return xp.take(X, xp.asarray(dims, device=device_of(X)), axis=1)

    def _scatter(self, gX, width):
        """Gradient w.r.t. the selected columns -> w.r.t. all ``width`` columns."""
        dims = getattr(self, "active_dims", None)
        if gX is None or dims is None:
            return gX
        xp = get_namespace(gX)
        zero = xp.zeros((gX.shape[0],), dtype=gX.dtype, device=device_of(gX))
        where = {j: i for i, j in enumerate(dims)}
        return xp.stack([gX[:, where[j]] if j in where else zero for j in range(width)], axis=1)

    def _sel_gram(self, X1, X2):
        return self._gram(self._select(X1), self._select(X2))

    def _sel_diag(self, X):
        return self._diag(self._select(X))

    def _sel_gram_vjp(self, G, X1, X2):
        params, g1, g2 = self._gram_vjp(G, self._select(X1), self._select(X2))
        return params, self._scatter(g1, X1.shape[1]), self._scatter(g2, X1.shape[1])

    def _sel_diag_vjp(self, g, X):
        params, gX = self._diag_vjp(g, self._select(X))
        return params, self._scatter(gX, X.shape[1])

    def _sel_gram_and_vjp(self, X1, X2):
        K, inner = self._gram_and_vjp(self._select(X1), self._select(X2))
        if getattr(self, "active_dims", None) is None:
            return K, inner
        width = X1.shape[1]

        def scattered(G):
            params, g1, g2 = inner(G)
            return params, self._scatter(g1, width), self._scatter(g2, width)

        blocked = getattr(inner, "low_rank", None)
        if blocked is not None:
            def scattered_low_rank(U, V):
                params, g1, g2 = blocked(U, V)
                return params, self._scatter(g1, width), self._scatter(g2, width)

            scattered.low_rank = scattered_low_rank
        only = getattr(inner, "params_only", None)
        if only is not None:
            scattered.params_only = only  # parameters need no scattering
        return K, scattered

    # ------------------------------------------------------------------- to be implemented
    def _gram(self, X1, X2):
        raise NotImplementedError

    def _diag(self, X):
        raise NotImplementedError

    def _gram_vjp(self, G, X1, X2):
        raise NotImplementedError

    def _diag_vjp(self, g, X):
        raise NotImplementedError

    # ------------------------------------------------------------------------- parameters
    def _prepare(self, values: dict) -> list:
        """Validate and convert ``{name: value}``; returns ``[(owner, name, array)]``."""
        unknown = set(values) - set(self._param_names)
        if unknown:
            raise KeyError(f"unknown parameter(s) {sorted(unknown)}; this kernel has "
                           f"{list(self._param_names)}")
        return [(self, n, self._convert_param(n, v)) for n, v in values.items()]

    def _as_arrays(self, values: dict) -> dict:
        """Values as arrays of the kernel's namespace, dtype and device.

        NumPy turns 0-d results into NumPy scalars, which are not arrays; this keeps every
        returned parameter or gradient a genuine (possibly 0-d) array.
        """
        device = device_of(self._reference())
        return {n: asarray(v, dtype=self.dtype, xp=self.xp, device=device)
                for n, v in values.items()}

    def _natural(self, values: dict) -> dict:
        """Unconstrained values -> natural ones (softplus of the positive parameters)."""
        return from_unconstrained(self._as_arrays(values), self._positive)

    def unconstrained(self) -> dict:
        """Parameters in unconstrained form: the softplus inverse of the positive ones."""
        return self._as_arrays(to_unconstrained(self.parameters(), self._positive))

    def set_unconstrained(self, values: dict) -> None:
        """Assign parameters from their unconstrained form (inverse of :meth:`unconstrained`)."""
        self.set_parameters(self._natural(values))

    def grad_to_unconstrained(self, grads: dict) -> dict:
        """Chain rule: natural-form gradients -> gradients w.r.t. the unconstrained values."""
        unknown = set(grads) - set(self._param_names)
        if unknown:
            raise KeyError(f"unknown parameter(s) {sorted(unknown)}; this kernel has "
                           f"{list(self._param_names)}")
        grads = self._as_arrays(grads)
        return self._as_arrays(chain_to_unconstrained(grads, self.parameters(), self._positive))

    def _leaves(self) -> list:
        return [self]

    def _children(self) -> list:
        """``[(prefix, kernel)]`` of the kernels this one is built from (none for a leaf)."""
        return []

    # ------------------------------------------------------------------------ composition
    def __add__(self, other):
        from gpnum.kernels._composite import Sum

        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum(self, other)

    def __mul__(self, other):
        from gpnum.kernels._composite import Product

        if not isinstance(other, Kernel):
            return NotImplemented
        return Product(self, other)

    def __repr__(self):
        def fmt(v):
            a = to_numpy(v)
            return repr(a.tolist()) if a.ndim else repr(float(a))

        extra = self._repr_extra()
        if getattr(self, "active_dims", None) is not None:
            extra = extra + [f"active_dims={list(self.active_dims)}"]
        parts = extra + [f"{n}={fmt(v)}" for n, v in self.parameters().items()]
        return f"{type(self).__name__}({', '.join(parts)})"

    def _repr_extra(self) -> list:
        return []
