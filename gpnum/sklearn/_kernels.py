"""gpnum kernels inside scikit-learn: nested parameters (``kernel__<name>``) and copies.

gpnum kernels have no ``get_params`` of their own, so the nesting is done here, through the
kernel specs of :mod:`gpnum.models` (``kernel_spec`` / ``kernel_from_spec``, the format
checkpoints use): a kernel's learnable parameters and its constructor settings (``degree``,
``active_dims``, ...) appear as ``kernel__<name>``; those of the kernels it is built from
under their prefix: ``kernel__<i>__<name>`` for the parts of a ``Sum`` / ``Product`` /
``ChangePoints``, ``kernel__base__<name>`` for a ``Periodic``'s base. Setting one builds a new
kernel object with that value (the object passed in is left unchanged).

gpnum kernels hold their array namespace (a module), which neither ``pickle`` nor
``copy.deepcopy`` (``clone``, ``GridSearchCV``) can copy; importing :mod:`gpnum.sklearn`
registers a ``copyreg`` reducer for gpnum's kernel classes that rebuilds a kernel from its spec
and NumPy parameter values (same namespace, dtype and device).
"""

from __future__ import annotations

import numpy as np

from gpnum import backend as B
from gpnum.kernels import Kernel
from gpnum.models import kernel_from_spec, kernel_spec, spec_classes

__all__ = ["HostKernel", "register_kernel_reducers"]


class HostKernel:
    """A kernel as its spec, NumPy parameter values and the classes it names."""

    def __init__(self, spec, params, classes):
        self.spec, self.params, self.classes = spec, params, classes

    @classmethod
    def of(cls, kernel):
        params = {k: np.array(B.to_numpy(v), dtype=np.float64)
                  for k, v in kernel.parameters().items()}
        return cls(kernel_spec(kernel), params, spec_classes(kernel))

    def build(self, xp, dtype, device):
        """The kernel on namespace ``xp``, ``dtype``, ``device``."""
        return kernel_from_spec(self.spec, self.params, xp=xp, dtype=dtype, device=device,
                                classes=self.classes, where="gpnum.sklearn")

    # ------------------------------------------------------- nested parameter names
    def flat_values(self):
        """``{"<prefix>__<name>": value}``: floats for 0-d parameters, NumPy arrays else, and
        the settings."""
        return _flat(self.spec, self.params)

    def with_value(self, key, value, full_key):
        """A copy with the parameter or setting at ``key`` (``"0__variance"``) replaced."""
        spec, params = _with(self.spec, self.params, key, value, full_key)
        return HostKernel(spec, params, self.classes)


def _prefixes(spec):
    children = spec.get("children", [])
    return spec.get("child_prefixes") or [str(i) for i in range(len(children))]


def _child_params(params, prefix):
    head = f"{prefix}."
    return {k[len(head):]: v for k, v in params.items() if k.startswith(head)}


def _flat(spec, params):
    out = {n: (float(v) if v.ndim == 0 else v.copy()) for n, v in params.items() if "." not in n}
    out.update(spec["settings"])
    for prefix, child in zip(_prefixes(spec), spec.get("children", []), strict=True):
        out.update({f"{prefix}__{k}": v
                    for k, v in _flat(child, _child_params(params, prefix)).items()})
    return out


def _with(spec, params, key, value, full_key):
    head, sep, rest = key.partition("__")
    prefixes = _prefixes(spec)
    if sep and head in prefixes:
        i = prefixes.index(head)
        child, sub = _with(spec["children"][i], _child_params(params, head), rest, value,
                           full_key)
        children = list(spec["children"])
        children[i] = child
        params = {k: v for k, v in params.items() if not k.startswith(f"{head}.")}
        params.update({f"{head}.{k}": v for k, v in sub.items()})
        return dict(spec, children=children), params
    own = {n for n in params if "." not in n}
    if not sep and key in own:
        return spec, dict(params, **{key: np.asarray(value, dtype=np.float64)})
    if not sep and key in spec["settings"]:
        return dict(spec, settings=dict(spec["settings"], **{key: value})), params
    names = sorted(own | set(spec["settings"]))
    if prefixes:
        names.append(f"<{'|'.join(prefixes)}>__<name> for the kernels it is built from")
    raise ValueError(f"Invalid parameter {full_key!r}: {spec['class']} has {names}")


def kernel_home(kernel):
    """Namespace, dtype and device of a kernel's parameters."""
    params = list(kernel.parameters().values())
    return kernel.xp, kernel.dtype, (B.device_of(params[0]) if params else None)


def namespace_name(xp):
    """The ``GPNUM_BACKEND`` name of namespace ``xp``."""
    last = xp.__name__.split(".")[-1]
    return last if last in B.BACKENDS else xp.__name__


def dtype_name(xp, dtype):
    return "float32" if dtype == xp.float32 else "float64"


class _PickledKernel:
    """A gpnum kernel as picklable data: spec, NumPy values, namespace by name, dtype name,
    device."""

    def __init__(self, kernel):
        xp, dtype, device = kernel_home(kernel)
        host = HostKernel.of(kernel)
        # the classes travel by reference (pickle's rule for classes): a user-defined kernel
        # inside a gpnum Sum rebuilds as it was
        self.spec, self.params, self.classes = host.spec, host.params, host.classes
        self.backend = namespace_name(xp)
        self.dtype = dtype_name(xp, dtype)
        self.device = device

    def restore(self):
        xp = B.namespace_by_name(self.backend)
        return kernel_from_spec(self.spec, self.params, xp=xp, dtype=getattr(xp, self.dtype),
                                device=self.device, where="pickled kernel",
                                classes=self.classes)


def _restore_kernel(pickled):
    return pickled.restore()


def _reduce_kernel(kernel):
    return _restore_kernel, (_PickledKernel(kernel),)


def register_kernel_reducers():
    """Make gpnum's kernels picklable and deep-copyable (what ``clone`` and ``GridSearchCV``
    do to parameter values): their namespace is a module, which neither can copy, so a
    ``copyreg`` reducer rebuilds each kernel from its spec instead. Only gpnum's own kernel
    classes are registered, and never over an existing registration."""
    import copyreg

    stack = list(Kernel.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("gpnum.") and cls not in copyreg.dispatch_table:
            copyreg.pickle(cls, _reduce_kernel)
