"""Kernels and likelihoods as plain data, and back: what checkpoints and the scikit-learn
estimators save and rebuild.

A spec is JSON-able: ``{"module", "class", "settings"}`` (settings are the constructor's
arguments other than the parameters, read back from the attributes of the same name), and for
kernels built from kernels (Sum, Product, Periodic, ChangePoints, expressions) ``"children"``
(their specs, in :meth:`gpnum.kernels.ParentKernel.children` order) and, when the children's
parameter prefixes are not ``"0"``, ``"1"``, ..., ``"child_prefixes"``. Parameter values travel
beside the spec, keyed like ``parameters()`` (children's with their prefix: ``"1.base.period"``).
Rebuilding builds only gpnum's own kernel and likelihood classes, looked up by name: a spec
naming anything else is refused before anything is built. This is the format of checkpoint
version 2 (``gpnum.checkpoint``), which these functions read and write unchanged.
"""

from __future__ import annotations

import inspect

from gpnum import backend as B
from gpnum import kernels, likelihoods

__all__ = ["allowed_classes", "kernel_from_spec", "kernel_spec", "likelihood_from_spec",
           "likelihood_spec", "spec_classes"]

_SKIP_INIT = {"self", "xp", "dtype", "device"}
#: What a kernel spec may describe: single-output kernels and the multi-output kernels (their
#: gram is (n t, n t), so they are not Kernel subclasses), and those built from other kernels.
_KERNEL_TYPES = (kernels.Kernel, kernels.MultiOutputKernel)
_PARENT_TYPES = (kernels.ParentKernel, kernels.MultiOutputKernel)


def _json_setting(value):
    """``(True, value)`` for a JSON-able setting (numbers, strings, None, lists of them),
    else ``(False, None)``."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return True, value
    if isinstance(value, (list, tuple)):  # e.g. a kernel's active_dims, an ICM's W
        items = [_json_setting(v) for v in value]
        if all(ok and not isinstance(v, type(None)) for ok, v in items):
            return True, [v for _, v in items]
    return False, None


def _is_kernel_or_kernels(value):
    if isinstance(value, kernels.Kernel):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, kernels.Kernel) for v in value)


def _spec(obj, children):
    cls = type(obj)
    spec = {"module": cls.__module__.split("._")[0], "class": cls.__name__}
    if children:
        spec["children"] = [kernel_spec(k) for _, k in children]
        prefixes = [p for p, _ in children]
        if prefixes != [str(i) for i in range(len(children))]:
            spec["child_prefixes"] = prefixes
    params = set(obj.parameters())
    settings = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in _SKIP_INIT or name in params or p.kind in (p.VAR_POSITIONAL,
                                                              p.VAR_KEYWORD):
            continue
        if not hasattr(obj, name):
            # A setting the object does not keep under its own name cannot be read back, and
            # a copy built without it could differ silently: refuse instead.
            raise TypeError(f"{cls.__name__}: its constructor argument {name!r} is neither a "
                            "parameter nor an attribute, so it cannot be saved")
        value = getattr(obj, name)
        if (children and _is_kernel_or_kernels(value)) or inspect.ismethod(value):
            continue  # the children (saved as such), or a method that shares the name
        if B.is_array(value):
            value = B.to_numpy(value).tolist()
        ok, value = _json_setting(value)
        if not ok:
            raise TypeError(f"{cls.__name__}: its setting {name!r} is not a number, string or "
                            "list of them, so it cannot be saved")
        settings[name] = value
    spec["settings"] = settings
    return spec


def kernel_spec(kernel) -> dict:
    """A gpnum kernel as JSON-able data (class, settings, children); its parameter values
    are ``kernel.parameters()``. Rebuild with :func:`kernel_from_spec`."""
    if not isinstance(kernel, _KERNEL_TYPES):
        raise TypeError(f"kernel: expected a gpnum kernel, got {type(kernel).__name__}")
    children = kernel.children() if isinstance(kernel, _PARENT_TYPES) else []
    return _spec(kernel, children)


def likelihood_spec(likelihood) -> dict:
    """A gpnum likelihood as JSON-able data (class, settings); its parameter values are
    ``likelihood.parameters()``. Rebuild with :func:`likelihood_from_spec`."""
    if not isinstance(likelihood, likelihoods.Likelihood):
        raise TypeError(f"likelihood: expected a gpnum likelihood, got "
                        f"{type(likelihood).__name__}")
    return _spec(likelihood, [])


def spec_classes(obj) -> dict:
    """``{(module, class name): class}`` of a kernel and every kernel it is built from: what
    :func:`kernel_from_spec` needs to rebuild user-defined kernel classes in memory (the
    scikit-learn estimators' ``clone``); checkpoints never pass it."""
    cls = type(obj)
    out = {(cls.__module__.split("._")[0], cls.__name__): cls}
    if isinstance(obj, _PARENT_TYPES):
        for _, k in obj.children():
            out.update(spec_classes(k))
    return out


def allowed_classes() -> dict:
    """``{(module, class name): class}`` of what a spec may name: gpnum's own concrete
    kernels and likelihoods, nothing else (a spec is data: it never makes gpnum import a module
    or call a class of its choosing)."""
    allowed = {}
    abstract = (*_KERNEL_TYPES, kernels.ParentKernel, likelihoods.Likelihood)
    for module, base in ((kernels, _KERNEL_TYPES), (likelihoods, likelihoods.Likelihood)):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, base) and obj not in abstract:
                allowed[(module.__name__, name)] = obj
    return allowed


def _from_spec(spec, params, xp, dtype, device, where, classes):
    key = (spec.get("module"), spec.get("class"))
    cls = allowed_classes().get(key) or (classes or {}).get(key)
    if cls is None:
        raise ValueError(f"{where} names {key[0]}.{key[1]}, which is not one of gpnum's "
                         "kernels or likelihoods; refusing to build it")
    accepted = set(inspect.signature(cls.__init__).parameters)
    settings = dict(spec.get("settings", {}))
    arrays = {k: B.asarray(v, dtype=dtype, xp=xp, device=device) for k, v in params.items()}
    # Own parameters go to the constructor, which fixes their shapes (an ARD lengthscale (d,),
    # ArcCosine's per-layer variances); set_parameters keeps the shapes it finds.
    own = {k: v for k, v in arrays.items() if "." not in k and k in accepted}
    if "children" in spec:
        if not issubclass(cls, _PARENT_TYPES):
            raise ValueError(f"{where}: {cls.__name__} is not built from kernels")
        prefixes = spec.get("child_prefixes") or [str(i) for i in range(len(spec["children"]))]
        kids = []
        if len(prefixes) != len(spec["children"]):
            raise ValueError(f"{where}: {len(spec['children'])} child kernels but "
                             f"{len(prefixes)} prefixes")
        for prefix, child in zip(prefixes, spec["children"], strict=True):
            head = f"{prefix}."
            sub = {k[len(head):]: v for k, v in params.items() if k.startswith(head)}
            kids.append(_from_spec(child, sub, xp, dtype, device, where, classes))
        obj = cls.from_children(kids, **settings, **own)
        obj.set_parameters(arrays)
        return obj
    obj = cls(**settings, **own, xp=xp, dtype=dtype, device=device)
    rest = {k: v for k, v in arrays.items() if k not in own}
    if rest:
        obj.set_parameters(rest)
    return obj


def kernel_from_spec(spec, params=None, *, xp=None, dtype=None, device=None,
                     where="kernel spec", classes=None):
    """The kernel of :func:`kernel_spec`'s ``spec`` with parameter values ``params``
    (``{name: array}`` keyed like ``parameters()``; missing ones keep the constructor's
    defaults) on namespace ``xp`` (default ``GPNUM_BACKEND``), ``dtype`` and ``device``.

    ``classes``: ``{(module, class name): class}`` of further classes the spec may name
    (:func:`spec_classes` of a kernel: its own subclasses), beside gpnum's own.
    """
    xp = B.namespace() if xp is None else xp
    dtype = xp.float64 if dtype is None else dtype
    obj = _from_spec(spec, dict(params or {}), xp, dtype, device, where, classes)
    if not isinstance(obj, _KERNEL_TYPES):
        raise ValueError(f"{where}: {spec.get('class')!r} is not a kernel")
    return obj


def likelihood_from_spec(spec, params=None, *, xp=None, dtype=None, device=None,
                         where="likelihood spec", classes=None):
    """The likelihood of :func:`likelihood_spec`'s ``spec`` with parameter values ``params``,
    on namespace ``xp``, ``dtype`` and ``device`` (as :func:`kernel_from_spec`)."""
    xp = B.namespace() if xp is None else xp
    dtype = xp.float64 if dtype is None else dtype
    obj = _from_spec(spec, dict(params or {}), xp, dtype, device, where, classes)
    if not isinstance(obj, likelihoods.Likelihood):
        raise ValueError(f"{where}: {spec.get('class')!r} is not a likelihood")
    return obj
