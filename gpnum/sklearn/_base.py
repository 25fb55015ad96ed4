"""What the estimators share: nested kernel parameters, pickling, backend and dtype, and
the checks of their settings."""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from gpnum import backend as B
from gpnum.checkpoint import model_from_state, model_state
from gpnum.kernels import Kernel
from gpnum.sklearn._kernels import HostKernel, kernel_home, namespace_name


class PickledModel:
    """A fitted gpnum model as its checkpoint state (settings and NumPy arrays)."""

    def __init__(self, model):
        self.config, self.arrays = model_state(model)
        self.backend = namespace_name(model.xp)

    def restore(self):
        return model_from_state(self.config, self.arrays,
                                xp=B.namespace_by_name(self.backend), where="pickled estimator")


class GPnumEstimator(BaseEstimator):
    """get_params / set_params into gpnum kernels, pickling, the backend and the dtype."""

    def get_params(self, deep=True):
        """Parameters of this estimator; with ``deep=True`` also ``kernel__<name>`` for each
        parameter and constructor setting of a gpnum kernel (``kernel__<i>__<name>`` for the
        parts of a sum or product)."""
        out = super().get_params(deep=deep)
        if deep:
            for name, value in list(out.items()):
                if isinstance(value, Kernel):
                    out.update({f"{name}__{k}": v
                                for k, v in HostKernel.of(value).flat_values().items()})
        return out

    def set_params(self, **params):
        """Set parameters; ``kernel__<name>=v`` replaces ``kernel`` by a new kernel equal to it
        but for that value (in the kernel's own namespace, dtype and device)."""
        plain, nested = {}, {}
        own = self._get_param_names()
        for key, value in params.items():
            head, sep, rest = key.partition("__")
            if sep and head in own:
                nested.setdefault(head, {})[rest] = value
            else:
                plain[key] = value
        kernel_nested = {}
        for head, sub in nested.items():
            target = plain.get(head, getattr(self, head))
            if isinstance(target, Kernel):
                kernel_nested[head] = sub
            else:  # a nested scikit-learn object, if any: its own set_params
                plain.update({f"{head}__{k}": v for k, v in sub.items()})
        super().set_params(**plain)
        for head, sub in kernel_nested.items():
            kernel = getattr(self, head)
            host = HostKernel.of(kernel)
            for key, value in sub.items():
                host = host.with_value(key, value, f"{head}__{key}")
            setattr(self, head, host.build(*kernel_home(kernel)))
        return self

    def __getstate__(self):
        state = super().__getstate__()
        # The fitted model holds its namespace (a module): it travels as its checkpoint state;
        # kernel_ is the model's own kernel and is restored with it.
        if "model_" in state:
            state = dict(state, model_=PickledModel(state["model_"]))
            state.pop("kernel_", None)
        return state

    def __setstate__(self, state):
        state = {k: (v.restore() if isinstance(v, PickledModel) else v)
                 for k, v in state.items()}
        super().__setstate__(state)
        if "model_" in state:  # the fitted kernel is the model's own
            self.kernel_ = self.model_.kernel

    # ------------------------------------------------------------------ helpers
    def _namespace(self):
        """Training namespace and dtype: ``backend`` (default ``GPNUM_BACKEND``), ``dtype``."""
        xp = B.namespace() if self.backend is None else B.namespace_by_name(str(self.backend))
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype: expected 'float64' or 'float32', got {self.dtype!r}")
        return xp, getattr(xp, self.dtype)

    def _to_backend(self, a):
        xp = self.model_.xp
        return B.asarray(a, dtype=self.model_.dtype, xp=xp, device=self.model_.device)

    def _initial_kernel(self, n_features, xp, dtype):
        """The kernel to train: ``kernel`` rebuilt on the training backend (never the object
        passed in, which stays as it was), or the default."""
        if self.kernel is None:
            return self._default_kernel(n_features, xp, dtype)
        if not isinstance(self.kernel, Kernel):
            raise TypeError(f"kernel: expected a gpnum kernel (gpnum.kernels) or None, got "
                            f"{type(self.kernel).__name__}")
        return HostKernel.of(self.kernel).build(xp, dtype, None)

    def _seed(self):
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))


def check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def normalisation(y, normalize_y):
    """``(mean, std)`` that ``normalize_y`` removes from the targets (scikit-learn's rule: a
    zero standard deviation is taken as 1)."""
    if not normalize_y:
        return 0.0, 1.0
    mean, std = float(np.mean(y)), float(np.std(y))
    return mean, (std if std > 0.0 else 1.0)


def check_return(return_std, return_cov):
    if return_std and return_cov:
        raise RuntimeError("At most one of return_std or return_cov can be requested.")
