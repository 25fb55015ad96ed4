"""Sums and products of kernels, with flat prefixed parameter names."""

from __future__ import annotations

from gpnum.backend import device_of
from gpnum.kernels._base import Kernel

__all__ = ["Sum", "Product"]


class _Composite(Kernel):
    """Shared machinery of :class:`Sum` and :class:`Product`.

    Parameters of the ``i``-th part appear as ``"i.<name>"`` (nested composites nest the
    prefixes, ``"0.1.variance"``), so an optimiser sees one flat ``{name: array}`` mapping.
    """

    _param_names = ()
    _positive = ()

    def __init__(self, *kernels):
        name = type(self).__name__
        if len(kernels) < 2:
            raise ValueError(f"{name}: expected at least two kernels, got {len(kernels)}")
        for i, k in enumerate(kernels):
            if not isinstance(k, Kernel):
                raise TypeError(f"{name}: argument {i}: expected a gpnum kernel, got "
                                f"{type(k).__name__}")
        first = kernels[0]
        for i, k in enumerate(kernels[1:], start=1):
            if k.xp is not first.xp or k.dtype != first.dtype or \
                    device_of(k._reference()) != device_of(first._reference()):
                raise TypeError(
                    f"{name}: argument {i}: expected the namespace, dtype and device of argument "
                    f"0 ({first.xp.__name__}, {first.dtype}, {device_of(first._reference())}), "
                    f"got ({k.xp.__name__}, {k.dtype}, {device_of(k._reference())})")
        seen = set()
        for leaf in [leaf for k in kernels for leaf in k._leaves()]:
            if id(leaf) in seen:
                raise ValueError(f"{name}: the kernel object {leaf!r} appears twice; pass "
                                 "copy.deepcopy(kernel) for an independent copy")
            seen.add(id(leaf))
        self.kernels = tuple(kernels)
        self._init_namespace(first.xp, first.dtype, first._device)

    def _leaves(self):
        return [leaf for k in self.kernels for leaf in k._leaves()]

    def _reference(self):
        return self.kernels[0]._reference()

    def _check_dim(self, d, name):
        for k in self.kernels:
            k._check_dim(d, name)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(repr(k) for k in self.kernels)})"

    # ------------------------------------------------------------------------- parameters
    def _split(self, values: dict) -> list:
        parts = [dict() for _ in self.kernels]
        unknown = []
        for key, v in values.items():
            head, dot, rest = str(key).partition(".")
            if dot and head.isdigit() and int(head) < len(self.kernels):
                parts[int(head)][rest] = v
            else:
                unknown.append(key)
        if unknown:
            raise KeyError(f"unknown parameter(s) {sorted(map(str, unknown))}; this kernel has "
                           f"{list(self.parameters())}")
        return parts

    @staticmethod
    def _prefixed(i, d: dict) -> dict:
        return {f"{i}.{n}": v for n, v in d.items()}

    def parameters(self) -> dict:
        """All parts' natural-form parameters as ``{"i.name": array}``."""
        out = {}
        for i, k in enumerate(self.kernels):
            out.update(self._prefixed(i, k.parameters()))
        return out

    def _prepare(self, values: dict) -> list:
        parts = self._split(values)
        try:
            return [item for k, p in zip(self.kernels, parts) for item in k._prepare(p)]
        except KeyError as exc:
            raise KeyError(f"unknown parameter(s) in {sorted(map(str, values))}; this kernel "
                           f"has {list(self.parameters())}") from exc

    def set_parameters(self, values: dict) -> None:
        """Assign several ``"i.name"`` parameters; all are validated before any is set."""
        for owner, n, arr in self._prepare(values):
            object.__setattr__(owner, n, arr)

    def _natural(self, values: dict) -> dict:
        out = {}
        for i, (k, p) in enumerate(zip(self.kernels, self._split(values))):
            out.update(self._prefixed(i, k._natural(p)))
        return out

    def unconstrained(self) -> dict:
        """All parts' unconstrained parameters as ``{"i.name": array}``."""
        out = {}
        for i, k in enumerate(self.kernels):
            out.update(self._prefixed(i, k.unconstrained()))
        return out

    def set_unconstrained(self, values: dict) -> None:
        """Assign parameters from their unconstrained ``{"i.name": array}`` form."""
        self.set_parameters(self._natural(values))

    def grad_to_unconstrained(self, grads: dict) -> dict:
        """Chain rule from natural to unconstrained gradients, part by part."""
        out = {}
        for i, (k, p) in enumerate(zip(self.kernels, self._split(grads))):
            out.update(self._prefixed(i, k.grad_to_unconstrained(p)))
        return out


class Sum(_Composite):
    """``k(x, x') = sum_i k_i(x, x')``; parameters named ``"i.<name>"``.

    Parameters
    ----------
    *kernels : Kernel
        Two or more kernels sharing namespace, dtype and device (and distinct objects).
    """

    def _gram(self, X1, X2):
        K = self.kernels[0]._gram(X1, X2)
        for k in self.kernels[1:]:
            K = K + k._gram(X1, X2)
        return K

    def _diag(self, X):
        out = self.kernels[0]._diag(X)
        for k in self.kernels[1:]:
            out = out + k._diag(X)
        return out

    def _gram_vjp(self, G, X1, X2):
        params, g1, g2 = {}, None, None
        for i, k in enumerate(self.kernels):
            p, a, b = k._gram_vjp(G, X1, X2)
            params.update(self._prefixed(i, p))
            g1 = a if g1 is None else g1 + a
            if b is not None:
                g2 = b if g2 is None else g2 + b
        return params, g1, g2

    def _diag_vjp(self, g, X):
        params, gX = {}, None
        for i, k in enumerate(self.kernels):
            p, a = k._diag_vjp(g, X)
            params.update(self._prefixed(i, p))
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
    """

    def _gram(self, X1, X2):
        K = self.kernels[0]._gram(X1, X2)
        for k in self.kernels[1:]:
            K = K * k._gram(X1, X2)
        return K

    def _diag(self, X):
        out = self.kernels[0]._diag(X)
        for k in self.kernels[1:]:
            out = out * k._diag(X)
        return out

    def _gram_vjp(self, G, X1, X2):
        grams = [k._gram(X1, X2) for k in self.kernels]
        params, g1, g2 = {}, None, None
        for i, k in enumerate(self.kernels):
            p, a, b = k._gram_vjp(G * _product_except(grams, i), X1, X2)
            params.update(self._prefixed(i, p))
            g1 = a if g1 is None else g1 + a
            if b is not None:
                g2 = b if g2 is None else g2 + b
        return params, g1, g2

    def _diag_vjp(self, g, X):
        diags = [k._diag(X) for k in self.kernels]
        params, gX = {}, None
        for i, k in enumerate(self.kernels):
            p, a = k._diag_vjp(g * _product_except(diags, i), X)
            params.update(self._prefixed(i, p))
            gX = a if gX is None else gX + a
        return params, gX
