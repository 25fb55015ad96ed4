"""Kernels built from other kernels: their parameters as one flat, prefixed mapping.

A parent kernel (Sum, Product, Periodic, ChangePoints) has parameters of its own (``period``,
``locations``...) and children, whose parameters appear as ``"<prefix>.<name>"`` (nested parents
nest the prefixes, ``"0.base.lengthscale"``), so an optimiser sees one flat ``{name: array}``.
"""

from __future__ import annotations

from gpnum.backend import device_of
from gpnum.kernels._base import Kernel
from gpnum.params import chain_to_unconstrained, from_unconstrained, to_unconstrained

__all__ = ["ParentKernel", "check_children"]


def check_children(name, kernels):
    """Check that ``kernels`` are gpnum kernels of one namespace, dtype and device, and that
    no kernel object appears twice (its parameters would be one array under two names)."""
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


class ParentKernel(Kernel):
    """A kernel with child kernels: own parameters plus the children's, prefixed.

    Subclasses set ``_param_names`` / ``_positive`` for their own parameters and implement
    :meth:`_children` (``[(prefix, kernel)]``).
    """

    _param_names = ()
    _positive = ()

    def _children(self) -> list:
        raise NotImplementedError

    def children(self) -> list:
        """``[(prefix, kernel)]``: the kernels this one is built from, each with the prefix of
        its parameters' names (``"0"``, ``"1"``, ... for a sum; ``"base"`` for Periodic)."""
        return list(self._children())

    @classmethod
    def from_children(cls, children, **kwargs):
        """A kernel of this class from the kernels of :meth:`children` (in that order) and
        the constructor's other arguments ``kwargs``."""
        arg = getattr(cls, "_children_arg", None)  # how the constructor takes its children
        if arg is None:
            return cls(*children, **kwargs)
        if arg == "base":
            return cls(children[0], **kwargs)
        return cls(list(children), **kwargs)

    def _leaves(self):
        own = [self] if self._param_names else []
        return own + [leaf for _, k in self._children() for leaf in k._leaves()]

    def _reference(self):
        if self._param_names:
            return getattr(self, self._param_names[0])
        return self._children()[0][1]._reference()

    def _check_dim(self, d, name):
        for _, k in self._children():
            k._check_width(d, name)

    # ------------------------------------------------------------------------- parameters
    def _split(self, values: dict):
        """``{name: v}`` -> (own values, [child values]) by prefix; unknown names raise."""
        children = self._children()
        index = {p: i for i, (p, _) in enumerate(children)}
        own, parts, unknown = {}, [dict() for _ in children], []
        for key, v in values.items():
            head, dot, rest = str(key).partition(".")
            if not dot and key in self._param_names:
                own[key] = v
            elif dot and head in index:
                parts[index[head]][rest] = v
            else:
                unknown.append(key)
        if unknown:
            raise KeyError(f"unknown parameter(s) {sorted(map(str, unknown))}; this kernel has "
                           f"{list(self.parameters())}")
        return own, parts

    def _join(self, own: dict, parts: list) -> dict:
        out = dict(own)
        for (prefix, _), d in zip(self._children(), parts, strict=True):
            out.update({f"{prefix}.{n}": v for n, v in d.items()})
        return out

    def _own_values(self) -> dict:
        """This kernel's own natural-form parameters (not the children's)."""
        return {n: getattr(self, n) for n in self._param_names}

    def parameters(self) -> dict:
        """Own natural-form parameters and the children's as ``{"prefix.name": array}``."""
        return self._join(self._own_values(), [k.parameters() for _, k in self._children()])

    def _prepare(self, values: dict) -> list:
        own, parts = self._split(values)
        out = [(self, n, self._convert_param(n, v)) for n, v in own.items()]
        try:
            for (_, k), p in zip(self._children(), parts, strict=True):
                out.extend(k._prepare(p))
        except KeyError as exc:
            raise KeyError(f"unknown parameter(s) in {sorted(map(str, values))}; this kernel "
                           f"has {list(self.parameters())}") from exc
        return out

    def set_parameters(self, values: dict) -> None:
        """Assign several parameters (own or ``"prefix.name"``); all are validated first."""
        for owner, n, arr in self._prepare(values):
            object.__setattr__(owner, n, arr)

    def _natural(self, values: dict) -> dict:
        own, parts = self._split(values)
        own = self._as_arrays(own)
        own = from_unconstrained(own, self._positive)
        return self._join(own, [k._natural(p)
                                for (_, k), p in zip(self._children(), parts, strict=True)])

    def positive_names(self) -> tuple:
        """Own positive parameters and the children's, prefixed."""
        own = tuple(n for n in self._param_names if n in self._positive)
        return own + tuple(f"{prefix}.{n}" for prefix, k in self._children()
                           for n in k.positive_names())

    def unconstrained(self) -> dict:
        """Own and the children's parameters in unconstrained form."""
        own = self._as_arrays(to_unconstrained(self._own_values(), self._positive))
        return self._join(own, [k.unconstrained() for _, k in self._children()])

    def set_unconstrained(self, values: dict) -> None:
        """Assign parameters from their unconstrained form."""
        self.set_parameters(self._natural(values))

    def grad_to_unconstrained(self, grads: dict) -> dict:
        """Chain rule from natural to unconstrained gradients, own and the children's."""
        own, parts = self._split(grads)
        own = self._as_arrays(own)
        own = self._as_arrays(chain_to_unconstrained(own, self._own_values(), self._positive))
        return self._join(own, [k.grad_to_unconstrained(p)
                                for (_, k), p in zip(self._children(), parts, strict=True)])

    @staticmethod
    def _prefixed(prefix, d: dict) -> dict:
        return {f"{prefix}.{n}": v for n, v in d.items()}
