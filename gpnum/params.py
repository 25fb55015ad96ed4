"""Parameters in natural form, their unconstrained transforms, and the chain rule between them.

Kernels, likelihoods and models store every parameter in its *natural* form (a lengthscale is
the positive lengthscale itself) and report gradients w.r.t. that natural form. Optimisers work
on *unconstrained* values. Positive parameters use the softplus transform

    value = softplus(u) = log(1 + exp(u)),        u = value + log(-expm1(-value)),

(floored at the dtype's smallest normal number, so that it never underflows to 0), whose
derivative ``d value / d u = sigmoid(u) = -expm1(-value)`` needs only the natural value, so
:meth:`Parameterised.grad_to_unconstrained` turns natural gradients into unconstrained ones
without keeping ``u`` around. Softplus (not log) keeps steps linear for large values, which suits
Adam; its inverse is computed in a form that stays finite from 1e-30 to 1e30.
"""

from __future__ import annotations

from gpnum.backend import asarray, default_dtype, get_namespace, is_array, namespace
from gpnum.errors import ShapeError, describe_shape

__all__ = ["softplus", "softplus_inverse", "softplus_grad", "to_unconstrained",
           "from_unconstrained", "chain_to_unconstrained", "Parameterised"]


def softplus(u):
    """``log(1 + exp(u))``, elementwise and overflow-free, floored at the smallest normal number.

    For ``u`` below about -745 (float64; -103 in float32) ``log(1 + exp(u))`` underflows to 0,
    which is not a positive value: an optimiser's trial point there (L-BFGS-B's line search
    tries far points) would be refused by the positivity check. The floor, the dtype's smallest
    normal number, keeps the transform's image positive (GPflow's positive bijector has a
    lower bound for the same reason) and changes nothing where softplus does not underflow.
    """
    xp = get_namespace(u)
    tiny = float(xp.finfo(u.dtype).smallest_normal)
    return xp.clip(xp.logaddexp(xp.zeros_like(u), u), min=tiny)


def softplus_inverse(value):
    """Inverse of :func:`softplus` for ``value > 0``: ``value + log(-expm1(-value))``."""
    xp = get_namespace(value)
    return value + xp.log(-xp.expm1(-value))


def softplus_grad(value):
    """``d softplus(u) / d u`` written in terms of ``value = softplus(u)``: ``1 - exp(-value)``."""
    xp = get_namespace(value)
    return -xp.expm1(-value)


# The transform of a whole parameter dictionary, written once for every parameterised object
# (Parameterised, kernels, composite models, SVTP). ``positive`` names the parameters that are
# constrained (``value > lower``); ``lower`` maps a name to its bound when it is not 0 (a
# Student-t's degrees of freedom stay above 2). Other parameters pass through unchanged.


def to_unconstrained(values: dict, positive, lower: dict | None = None) -> dict:
    """Natural values -> unconstrained ones.

    Parameters
    ----------
    values : dict
        ``{name: array}`` in natural form.
    positive : collection of str
        Names of the constrained parameters: ``u = softplus_inverse(value - lower)``.
    lower : dict, optional
        ``{name: float}`` lower bounds of constrained parameters whose bound is not 0.

    Returns
    -------
    dict
        ``{name: array}`` keyed like ``values``.
    """
    return {n: _to_u(v, lower.get(n, 0.0) if lower else 0.0) if n in positive else v
            for n, v in values.items()}


def from_unconstrained(values: dict, positive, lower: dict | None = None) -> dict:
    """Unconstrained values -> natural ones (inverse of :func:`to_unconstrained`):
    ``value = lower + softplus(u)`` for the names in ``positive``, others unchanged."""
    return {n: _from_u(v, lower.get(n, 0.0) if lower else 0.0) if n in positive else v
            for n, v in values.items()}


def chain_to_unconstrained(grads: dict, natural: dict, positive,
                           lower: dict | None = None) -> dict:
    """Chain rule: gradients w.r.t. natural values -> w.r.t. unconstrained ones.

    ``grads`` and ``natural`` map names to arrays; ``natural`` holds (at least) the current
    natural values of the constrained names in ``grads``. A constrained gradient is multiplied
    by ``softplus_grad(value - lower)``; the others pass unchanged.
    """
    return {n: g * _grad_u(natural[n], lower.get(n, 0.0) if lower else 0.0)
            if n in positive else g for n, g in grads.items()}


def _to_u(value, lower: float):
    return softplus_inverse(value - lower if lower else value)


def _from_u(u, lower: float):
    return lower + softplus(u) if lower else softplus(u)


def _grad_u(value, lower: float):
    return softplus_grad(value - lower if lower else value)


class Parameterised:
    """Mixin for objects holding named parameters in natural form.

    Subclasses list their parameters in ``_param_names`` and the positive ones among them in
    ``_positive``; each is stored as an attribute holding an array. Assigning an array of any
    library (or a Python number) converts it to the object's namespace, device and dtype, and
    positive parameters are checked to be finite and > 0.
    """

    _param_names: tuple = ()
    _positive: tuple = ()

    def _init_namespace(self, xp=None, dtype=None, device=None):
        self._xp = namespace() if xp is None else xp
        self._dtype = default_dtype(self._xp) if dtype is None else dtype
        self._device = device

    @property
    def xp(self):
        """The array namespace of this object's parameters."""
        return self._xp

    @property
    def dtype(self):
        """The floating dtype of this object's parameters."""
        return self._dtype

    def __setattr__(self, name, value):
        if name in type(self)._param_names:
            value = self._convert_param(name, value)
        object.__setattr__(self, name, value)

    def _convert_param(self, name, value):
        if not hasattr(self, "_xp"):
            self._init_namespace(get_namespace(value) if is_array(value) else None)
        old = self.__dict__.get(name)
        arr = asarray(value, dtype=self._dtype, xp=self._xp, device=self._device)
        if old is not None and tuple(arr.shape) != tuple(old.shape):
            raise ShapeError(f"{name}: expected shape {describe_shape(old.shape)}, got "
                             f"{describe_shape(arr.shape)}")
        xp = self._xp
        if not bool(xp.all(xp.isfinite(arr))):
            raise ValueError(f"{name}: expected finite values, got {self._host_repr(arr)}")
        if name in type(self)._positive and not bool(xp.all(arr > 0.0)):
            raise ValueError(f"{name}: expected values > 0, got {self._host_repr(arr)}")
        return arr

    @staticmethod
    def _host_repr(arr):
        from gpnum.backend import to_numpy

        return repr(to_numpy(arr).tolist())

    def parameters(self) -> dict:
        """Natural-form parameters as ``{name: array}`` (the arrays themselves, not copies)."""
        return {n: getattr(self, n) for n in self._param_names}

    def set_parameters(self, values: dict) -> None:
        """Assign several natural-form parameters; all are validated before any is set."""
        unknown = set(values) - set(self._param_names)
        if unknown:
            raise KeyError(f"unknown parameter(s) {sorted(unknown)}; this object has "
                           f"{list(self._param_names)}")
        converted = {n: self._convert_param(n, v) for n, v in values.items()}
        for n, v in converted.items():
            object.__setattr__(self, n, v)

    def positive_names(self) -> tuple:
        """Names of the parameters constrained to be positive (softplus in the unconstrained
        view; log coordinates for L-BFGS-B, :func:`gpnum.optim.lbfgs`)."""
        return tuple(n for n in self.parameters() if n in type(self)._positive)

    def unconstrained(self) -> dict:
        """Parameters in unconstrained form: softplus-inverse for positive ones, else as is."""
        return to_unconstrained(self.parameters(), self._positive)

    def set_unconstrained(self, values: dict) -> None:
        """Assign parameters from their unconstrained form (inverse of :meth:`unconstrained`)."""
        self.set_parameters(from_unconstrained(values, self._positive))

    def grad_to_unconstrained(self, grads: dict) -> dict:
        """Chain rule: gradients w.r.t. natural parameters -> w.r.t. unconstrained ones."""
        natural = {n: getattr(self, n) for n in grads if n in self._positive}
        return chain_to_unconstrained(grads, natural, self._positive)
