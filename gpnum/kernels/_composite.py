"""Sums and products of kernels, with flat prefixed parameter names."""

from __future__ import annotations

import operator

from gpnum.kernels._nested import ParentKernel, check_children

__all__ = ["Sum", "Product"]


class _Composite(ParentKernel):
    """Shared machinery of :class:`Sum` and :class:`Product`.

    Parameters of the ``i``-th part appear as ``"i.<name>"`` (nested composites nest the
    prefixes, ``"0.1.variance"``), so an optimiser sees one flat ``{name: array}`` mapping.
    """

    def __init__(self, *kernels, active_dims=None):
        name = type(self).__name__
        if len(kernels) < 2:
            raise ValueError(f"{name}: expected at least two kernels, got {len(kernels)}")
        check_children(name, kernels)
        self._set_active_dims(active_dims)
        self.kernels = tuple(kernels)
        first = kernels[0]
        self._init_namespace(first.xp, first.dtype, first._device)

    def _children(self):
        return [(str(i), k) for i, k in enumerate(self.kernels)]

    def __repr__(self):
        extra = "" if self.active_dims is None else f", active_dims={list(self.active_dims)}"
        return f"{type(self).__name__}({', '.join(repr(k) for k in self.kernels)}{extra})"

    def _gram(self, X1, X2):
        return _fold(self._combine, (k._sel_gram(X1, X2) for k in self.kernels))

    def _diag(self, X):
        return _fold(self._combine, (k._sel_diag(X) for k in self.kernels))


class Sum(_Composite):
    """``k(x, x') = sum_i k_i(x, x')``; parameters named ``"i.<name>"``.

    Parameters
    ----------
    *kernels : Kernel
        Two or more kernels sharing namespace, dtype and device (and distinct objects).
    active_dims : list of int, optional
        The input columns passed on to the parts (default all); parts may select further.
    """

    _combine = staticmethod(operator.add)

    def _gram_vjp(self, G, X1, X2):
        return _collect([k._sel_gram_vjp(G, X1, X2) for k in self.kernels])

    def _gram_and_vjp(self, X1, X2):
        # the parts' own shared forward/backward passes (no recomputation in the backward)
        pairs = [k._sel_gram_and_vjp(X1, X2) for k in self.kernels]
        K = _fold(operator.add, (Ki for Ki, _ in pairs))

        def inner(G):
            return _collect([vjp(G) for _, vjp in pairs])

        inner.params_only = lambda G: _collect_params([_params_of(vjp, G) for _, vjp in pairs])
        return K, inner

    def _diag_vjp(self, g, X):
        return _collect_diag([k._sel_diag_vjp(g, X) for k in self.kernels])


def _fold(op, values):
    """``op(...op(op(v0, v1), v2)..., v_last)`` over an iterable, left to right.

    The first ``op`` makes a new array and the later ones update it in place (the values
    themselves are never modified: a part's backward pass may read its matrix), so a sum of
    ``T`` (n1, n2) matrices allocates one, not ``T - 1``.
    """
    values = iter(values)
    out = next(values)
    fresh = False
    for v in values:
        if fresh:
            out = _in_place[op](out, v)
        else:
            out = op(out, v)
            fresh = True
    return out


_in_place = {operator.add: operator.iadd, operator.mul: operator.imul}


def _collect(results):
    """Sum the parts' ``(params, g1, g2)`` into the parent's, prefixing parameter names."""
    params, g1, g2 = {}, None, None
    for i, (p, a, b) in enumerate(results):
        params.update(ParentKernel._prefixed(i, p))
        g1 = a if g1 is None else g1 + a
        if b is not None:
            g2 = b if g2 is None else g2 + b
    return params, g1, g2


def _params_of(inner, G):
    """A part's parameter gradients from its backward function, without its input gradients
    where the part can skip them."""
    only = getattr(inner, "params_only", None)
    return only(G) if only is not None else inner(G)[0]


def _collect_params(results):
    """The parts' parameter gradients under the parent's names (``"i.<name>"``)."""
    params = {}
    for i, p in enumerate(results):
        params.update(ParentKernel._prefixed(i, p))
    return params


def _collect_diag(results):
    """Sum the parts' ``(params, gX)`` of a diagonal's VJP, prefixing parameter names."""
    params, gX = {}, None
    for i, (p, a) in enumerate(results):
        params.update(ParentKernel._prefixed(i, p))
        gX = a if gX is None else gX + a
    return params, gX


def _product_except(values, skip):
    out = None
    for j, v in enumerate(values):
        if j != skip:
            out = v if out is None else out * v
    return out


class Product(_Composite):
    """``k(x, x') = prod_i k_i(x, x')`` (elementwise); parameters named ``"i.<name>"``.

    The gradient of part ``i`` uses the cotangent ``G * prod_{j != i} K_j`` (products of the
    other parts, never a division, so a zero entry in one part is harmless).

    Parameters
    ----------
    *kernels : Kernel
        Two or more kernels sharing namespace, dtype and device (and distinct objects).
    active_dims : list of int, optional
        The input columns passed on to the parts (default all); parts may select further.
    """

    _combine = staticmethod(operator.mul)

    def _gram_vjp(self, G, X1, X2):
        grams = [k._sel_gram(X1, X2) for k in self.kernels]
        return _collect([k._sel_gram_vjp(G * _product_except(grams, i), X1, X2)
                         for i, k in enumerate(self.kernels)])

    def _gram_and_vjp(self, X1, X2):
        pairs = [k._sel_gram_and_vjp(X1, X2) for k in self.kernels]
        grams = [Ki for Ki, _ in pairs]
        K = _fold(operator.mul, grams)

        def inner(G):
            return _collect([vjp(G * _product_except(grams, i))
                             for i, (_, vjp) in enumerate(pairs)])

        inner.params_only = lambda G: _collect_params(
            [_params_of(vjp, G * _product_except(grams, i)) for i, (_, vjp) in enumerate(pairs)])
        return K, inner

    def _diag_vjp(self, g, X):
        diags = [k._sel_diag(X) for k in self.kernels]
        return _collect_diag([k._sel_diag_vjp(g * _product_except(diags, i), X)
                              for i, k in enumerate(self.kernels)])
