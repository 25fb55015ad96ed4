"""Adam on a flat dictionary of arrays of any backend (Kingma & Ba 2015).

The optimiser knows nothing about models: it maps ``{name: array}`` parameters and gradients
of the same keys and shapes to new parameters. gpnum's models report gradients of the ELBO (to
be maximised) w.r.t. their *unconstrained* parameters (``model.unconstrained()`` and
``model.grad_to_unconstrained``), so the usual call is ``adam.step(u, g, maximize=True)``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping

from gpnum.backend import asarray, device_of, get_namespace, is_array, to_numpy
from gpnum.errors import ShapeError, check_positive, describe_shape

__all__ = ["Adam"]

#: Version of the layout written by :meth:`Adam.state_dict`.
_STATE_FORMAT = 1
_MOMENT_PREFIXES = ("exp_avg/", "exp_avg_sq/", "step/")


def _check_beta(value, name):
    try:
        b = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number in [0, 1), got {value!r}") from None
    if not 0.0 <= b < 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    return b


def _check_betas(betas):
    try:
        b1, b2 = betas
    except (TypeError, ValueError):
        raise TypeError(f"betas: expected a pair (beta1, beta2), got {betas!r}") from None
    return _check_beta(b1, "betas[0]"), _check_beta(b2, "betas[1]")


class Adam:
    """Bias-corrected Adam (Kingma & Ba 2015, "Adam: a method for stochastic optimization",
    Algorithm 1) on a flat ``dict`` of arrays.

    For each parameter ``p`` with gradient ``g`` (negated when maximising), at its ``t``-th step:

    ``m <- b1 m + (1 - b1) g``,  ``v <- b2 v + (1 - b2) g^2``,
    ``p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``.

    The moments ``m`` and ``v`` are created lazily at a parameter's first step, with its shape,
    dtype, namespace and device. Each parameter keeps its own step count ``t``, so a parameter
    that joins later (or sits out some steps, as when Adam alternates with natural-gradient
    steps on other parameters) still gets the right bias correction.

    Parameters
    ----------
    lr : float
        Step size, > 0. It can be changed between steps (``adam.lr = schedule(epoch)``).
    betas : (float, float)
        Decay rates of the first and second moment estimates, each in [0, 1).
    eps : float
        Added to the denominator, > 0.

    Attributes
    ----------
    num_steps : int
        Number of calls to :meth:`step` so far.
    """

    def __init__(self, lr=0.01, betas=(0.9, 0.999), eps=1e-8):
        self.lr = lr
        self.betas = _check_betas(betas)
        self.eps = check_positive(eps, "eps")
        self.num_steps = 0
        # name -> (first moment, second moment, step count)
        self._state: dict = {}

    # ----------------------------------------------------------------------------- lr
    @property
    def lr(self) -> float:
        """The step size used by the next :meth:`step`."""
        return self._lr

    @lr.setter
    def lr(self, value):
        self._lr = check_positive(value, "lr")

    def __repr__(self):
        return (f"Adam(lr={self._lr!r}, betas={self.betas!r}, eps={self.eps!r}; "
                f"num_steps={self.num_steps}, {len(self._state)} parameter(s) with state)")

    # ---------------------------------------------------------------------------- step
    def step(self, params: Mapping, grads: Mapping, *, maximize: bool = False) -> dict:
        """One Adam update.

        Parameters
        ----------
        params : dict of str -> array
            Current parameter values (any shapes; any backend). Not modified.
        grads : dict of str -> array
            Gradients with the same keys, shapes, dtypes and namespaces as ``params``.
        maximize : bool
            Ascend instead of descend (for the ELBO).

        Returns
        -------
        dict of str -> array
            The new parameter values, in the order of ``params``.

        Raises
        ------
        KeyError
            If ``grads`` and ``params`` have different keys.
        ShapeError, TypeError
            If a gradient's shape, dtype or library differs from its parameter's, or a parameter
            no longer has the shape its state was created with.
        ValueError
            If a gradient holds NaN or Inf (the message names the parameter). Nothing is
            updated then.
        """
        self._check_pair(params, grads)
        self._check_finite_grads(grads)
        b1, b2 = self.betas
        lr, eps = self._lr, self.eps
        new_params, new_state = {}, {}
        for name, p in params.items():
            xp = get_namespace(p)
            g = -grads[name] if maximize else grads[name]
            if name in self._state:
                m, v, t = self._state[name]
            else:
                m, v, t = xp.zeros_like(p), xp.zeros_like(p), 0
            t += 1
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * (g * g)
            # bias corrections as Python floats: no dtype promotion of float32 parameters
            m_hat = m / (1.0 - b1**t)
            v_hat = v / (1.0 - b2**t)
            new_p = p - lr * m_hat / (xp.sqrt(v_hat) + eps)
            if p.ndim == 0:
                # NumPy turns 0-d arithmetic into scalars; keep arrays, as the caller gave
                m, v, new_p = (xp.asarray(a, dtype=p.dtype, device=device_of(p))
                               for a in (m, v, new_p))
            new_params[name] = new_p
            new_state[name] = (m, v, t)
        self._state.update(new_state)
        self.num_steps += 1
        return new_params

    def _check_pair(self, params, grads):
        for what, d in (("params", params), ("grads", grads)):
            if not isinstance(d, Mapping):
                raise TypeError(f"{what}: expected a dict of name -> array, got "
                                f"{type(d).__name__}")
        if set(params) != set(grads):
            missing = sorted(set(params) - set(grads))
            extra = sorted(set(grads) - set(params))
            raise KeyError(f"grads: expected the keys of params {sorted(params)}, got "
                           f"missing {missing} and unexpected {extra}")
        for name, p in params.items():
            g = grads[name]
            if not is_array(p):
                raise TypeError(f"params[{name!r}]: expected an array, got {type(p).__name__}")
            if not is_array(g):
                raise TypeError(f"grads[{name!r}]: expected an array, got {type(g).__name__}")
            xp = get_namespace(p)
            if not xp.isdtype(p.dtype, "real floating"):
                raise TypeError(f"params[{name!r}]: expected a real floating dtype, got "
                                f"{p.dtype}")
            get_namespace(p, g)  # a clear TypeError when libraries are mixed
            if tuple(g.shape) != tuple(p.shape):
                raise ShapeError(f"grads[{name!r}]: expected shape {describe_shape(p.shape)} "
                                 f"(the parameter's), got {describe_shape(g.shape)}")
            if g.dtype != p.dtype:
                raise TypeError(f"grads[{name!r}]: expected dtype {p.dtype} (the parameter's), "
                                f"got {g.dtype}")
            if name in self._state:
                m_shape = tuple(self._state[name][0].shape)
                if tuple(p.shape) != m_shape:
                    raise ShapeError(f"params[{name!r}]: expected shape "
                                     f"{describe_shape(m_shape)} (its optimiser state), got "
                                     f"{describe_shape(p.shape)}")

    @staticmethod
    def _check_finite_grads(grads):
        # One reduction per parameter but a single host synchronisation per namespace; the
        # per-parameter search for the culprit happens only on failure.
        groups: dict = {}
        for name, g in grads.items():
            xp = get_namespace(g)
            groups.setdefault(id(xp), (xp, []))[1].append(name)
        for xp, names in groups.values():
            flags = xp.stack([xp.all(xp.isfinite(grads[n])) for n in names])
            if bool(xp.all(flags)):
                continue
            for n in names:
                g = grads[n]
                if not bool(xp.all(xp.isfinite(g))):
                    n_nan = int(xp.sum(xp.astype(xp.isnan(g), xp.int32)))
                    what = f"{n_nan} NaN value(s)" if n_nan else "infinite value(s)"
                    raise ValueError(f"grads[{n!r}]: expected finite values, got {what} in an "
                                     f"array of shape {describe_shape(g.shape)}; no parameter "
                                     "was updated")

    # ------------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict:
        """The optimiser state as a flat ``dict`` of NumPy arrays and Python scalars.

        Keys: ``"format"``, ``"lr"``, ``"beta1"``, ``"beta2"``, ``"eps"``, ``"num_steps"``, and
        for each parameter ``name`` with state: ``"exp_avg/name"``, ``"exp_avg_sq/name"``
        (NumPy arrays of the parameter's shape and dtype) and ``"step/name"`` (int). The dict can
        be written with ``numpy.savez`` (prefix the keys to share a file with other state).
        """
        out = {"format": _STATE_FORMAT, "lr": self._lr, "beta1": self.betas[0],
               "beta2": self.betas[1], "eps": self.eps, "num_steps": self.num_steps}
        for name, (m, v, t) in self._state.items():
            out["exp_avg/" + name] = to_numpy(m).copy()
            out["exp_avg_sq/" + name] = to_numpy(v).copy()
            out["step/" + name] = int(t)
        return out

    def load_state_dict(self, state: Mapping, *, like: Mapping) -> None:
        """Restore a :meth:`state_dict` onto the namespace, device and dtype of ``like``.

        Everything is validated before anything is changed, so a failed load leaves the
        optimiser as it was. On NumPy the continuation is bit-identical to an uninterrupted run.

        Parameters
        ----------
        state : mapping
            As returned by :meth:`state_dict`, or read back from ``numpy.load`` (scalars may be
            0-d arrays).
        like : dict of str -> array
            The parameters the state belongs to (e.g. ``model.unconstrained()``): every
            parameter named in ``state`` must be here, with the same shape.

        Raises
        ------
        KeyError
            If a required entry is missing, an entry is not recognised, or the state names a
            parameter absent from ``like``.
        ShapeError
            If a moment's shape differs from its parameter's.
        ValueError
            If the format version or a hyper-parameter is invalid.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state: expected a mapping from state_dict(), got "
                            f"{type(state).__name__}")
        if not isinstance(like, Mapping):
            raise TypeError(f"like: expected a dict of name -> array, got {type(like).__name__}")
        required = ("format", "lr", "beta1", "beta2", "eps", "num_steps")
        missing = [k for k in required if k not in state]
        if missing:
            raise KeyError(f"state: missing entries {missing}; expected the output of "
                           "Adam.state_dict()")
        fmt = self._scalar(state, "format", int)
        if fmt != _STATE_FORMAT:
            raise ValueError(f"state['format']: expected {_STATE_FORMAT}, got {fmt}")
        lr = check_positive(self._scalar(state, "lr", float), "state['lr']")
        betas = (_check_beta(self._scalar(state, "beta1", float), "state['beta1']"),
                 _check_beta(self._scalar(state, "beta2", float), "state['beta2']"))
        eps = check_positive(self._scalar(state, "eps", float), "state['eps']")
        num_steps = self._scalar(state, "num_steps", int)
        if num_steps < 0:
            raise ValueError(f"state['num_steps']: expected an integer >= 0, got {num_steps}")

        names = []
        for key in state:
            if key in required:
                continue
            prefix = next((p for p in _MOMENT_PREFIXES if key.startswith(p)), None)
            if prefix is None:
                raise KeyError(f"state: unexpected entry {key!r}; expected the output of "
                               "Adam.state_dict()")
            if prefix == "step/":
                names.append(key[len(prefix):])
        for key in state:
            prefix = next((p for p in _MOMENT_PREFIXES[:2] if key.startswith(p)), None)
            if prefix is not None and key[len(prefix):] not in names:
                raise KeyError(f"state: {key!r} has no matching 'step/{key[len(prefix):]}'")

        restored = {}
        for name in names:
            if name not in like:
                raise KeyError(f"state: holds optimiser state for parameter {name!r}, which is "
                               f"not in like (keys {sorted(like)})")
            p = like[name]
            if not is_array(p):
                raise TypeError(f"like[{name!r}]: expected an array, got {type(p).__name__}")
            t = self._scalar(state, "step/" + name, int)
            if t < 1:
                raise ValueError(f"state['step/{name}']: expected an integer >= 1, got {t}")
            moments = []
            for prefix in _MOMENT_PREFIXES[:2]:
                key = prefix + name
                if key not in state:
                    raise KeyError(f"state: missing entry {key!r}")
                host = to_numpy(state[key])
                if tuple(host.shape) != tuple(p.shape):
                    raise ShapeError(f"state[{key!r}]: expected shape {describe_shape(p.shape)}"
                                     f" (the parameter's), got {describe_shape(host.shape)}")
                moments.append(asarray(host, like=p))
            restored[name] = (moments[0], moments[1], t)

        self._lr, self.betas, self.eps, self.num_steps = lr, betas, eps, num_steps
        self._state = restored

    @staticmethod
    def _scalar(state, key, kind):
        value = to_numpy(state[key])
        if value.ndim != 0:
            raise ShapeError(f"state[{key!r}]: expected a scalar, got shape "
                             f"{describe_shape(value.shape)}")
        value = value.item()
        if kind is int:
            try:
                return operator.index(value)
            except TypeError:
                raise TypeError(f"state[{key!r}]: expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise TypeError(f"state[{key!r}]: expected a real number, got {value!r}")
        return float(value)
