"""What every likelihood shares: input validation, the cached Gauss-Hermite rule, and the
differentiated quadrature for single-latent observation models (docs/likelihoods.md)."""

from __future__ import annotations

from gpnum.backend import asarray, device_of, get_namespace, is_array, to_numpy
from gpnum.errors import ShapeError, check_finite, describe_shape
from gpnum.likelihoods._quadrature import _host_rule, gauss_hermite
from gpnum.params import Parameterised
from gpnum.special import logsumexp

__all__ = ["Likelihood"]


class Likelihood(Parameterised):
    """Base class of the observation models ``p(y | f)``.

    Subclasses that use Gauss-Hermite quadrature on one latent implement
    ``_log_density_and_grads(y, f, params, want_grad)``; the base class turns it into
    variational expectations, their gradients and predictive densities. Models with a closed
    form or several latents override the one hidden hook
    ``_variational_expectations(xp, y, mu, var, want_grad)`` (as GPflow's likelihoods do) and
    keep the public :meth:`variational_expectations` and
    :meth:`variational_expectations_and_grad`, which validate the inputs and call it.

    Every public method validates its inputs: shapes and dtypes on the host for free; values
    (finite ``mu``, ``var > 0``, valid targets) with one reduction and one device
    synchronisation, which ``check=False`` skips (e.g. inside a training loop that has already
    called :meth:`check_targets` on the batch).
    """

    #: number of latent functions per data point
    num_latent = 1
    #: node evaluations per block of points (n q, or n q C for RobustMax); raise it on a GPU
    block_elements = 2**15

    def _init_likelihood(self, num_gauss_hermite, xp, dtype, device):
        self._init_namespace(xp, dtype, device)
        self._rules = {}
        if num_gauss_hermite is not None:
            self.num_gauss_hermite = num_gauss_hermite

    # -- Gauss-Hermite rule --------------------------------------------------------------------

    @property
    def num_gauss_hermite(self) -> int:
        """Number of Gauss-Hermite nodes ``q`` used for the expectations."""
        return self._num_gauss_hermite

    @num_gauss_hermite.setter
    def num_gauss_hermite(self, value):
        _host_rule(value)  # validates
        self._num_gauss_hermite = int(value)
        self._rules = {}

    def _rule(self, like):
        """Cached (nodes, weights, log-weights), each (q,), in ``like``'s namespace/dtype/device."""
        xp = get_namespace(like)
        key = (xp.__name__, str(like.dtype), str(device_of(like)))
        rule = self._rules.get(key)
        if rule is None:
            rule = gauss_hermite(self._num_gauss_hermite, like=like)
            self._rules[key] = rule
        return rule

    def _params_like(self, like) -> dict:
        """The parameters cast to ``like``'s dtype and device (same namespace required).

        Scalar parameters come back with shape (1,): arithmetic on NumPy 0-d arrays returns
        NumPy scalars, which are not arrays of any namespace.
        """
        out = {}
        for name, value in self.parameters().items():
            if get_namespace(value) is not get_namespace(like):
                raise TypeError(
                    f"{type(self).__name__}: parameters live in {get_namespace(value).__name__} "
                    f"but the inputs are {get_namespace(like).__name__} arrays; create the "
                    f"likelihood with xp=<the inputs' namespace>")
            value = asarray(value, like=like)
            out[name] = get_namespace(value).reshape(value, (1,)) if value.ndim == 0 else value
        return out

    # -- validation ----------------------------------------------------------------------------

    def _targets_ok(self, xp, y):
        """0-d boolean array: are all targets valid? (no synchronisation)"""
        return xp.all(xp.isfinite(y)) if xp.isdtype(y.dtype, "real floating") else \
            xp.asarray(True, device=device_of(y))

    def _targets_message(self, xp, y):
        """Error message for invalid targets (error path only: a few host transfers)."""
        if xp.isdtype(y.dtype, "real floating") and not bool(xp.all(xp.isfinite(y))):
            n_nan = int(xp.sum(xp.astype(xp.isnan(y), xp.int32)))
            n_inf = int(xp.sum(xp.astype(xp.isinf(y), xp.int32)))
            return (f"y: expected finite values, got {n_nan} NaN and {n_inf} infinite value(s) "
                    f"in an array of shape {describe_shape(y.shape)}")
        return f"y: invalid targets for {type(self).__name__}"

    def _check_y_array(self, y, n=None):
        if not is_array(y):
            raise TypeError(f"y: expected an array, got {type(y).__name__}")
        xp = get_namespace(y)
        if not (xp.isdtype(y.dtype, "real floating") or xp.isdtype(y.dtype, "integral")
                or xp.isdtype(y.dtype, "bool")):
            raise TypeError(f"y: expected a real, integer or boolean dtype, got {y.dtype}")
        if y.ndim != 1 or (n is not None and y.shape[0] != n):
            want = "(n,)" if n is None else f"({n},)"
            raise ShapeError(f"y: expected shape {want}, got {describe_shape(y.shape)}")
        return xp

    def check_targets(self, y) -> None:
        """Raise a clear error unless ``y`` (n,) holds valid targets for this likelihood.

        Raises
        ------
        TypeError
            ``y`` is not an array or has a non-numeric dtype.
        ShapeError
            ``y`` is not one-dimensional.
        ValueError
            NaN/Inf targets, or labels outside the support (subclasses).
        """
        xp = self._check_y_array(y)
        if not bool(self._targets_ok(xp, y)):
            raise ValueError(self._targets_message(xp, y))

    def _check_latents(self, mu, var):
        """Shape/dtype checks of ``mu`` and ``var`` (free); returns (xp, n)."""
        for name, a in (("mu", mu), ("var", var)):
            if not is_array(a):
                raise TypeError(f"{name}: expected an array, got {type(a).__name__}")
        xp = get_namespace(mu, var)
        if not xp.isdtype(mu.dtype, "real floating"):
            raise TypeError(f"mu: expected a real floating dtype, got {mu.dtype}")
        if var.dtype != mu.dtype:
            raise TypeError(f"var: expected dtype {mu.dtype} (that of mu), got {var.dtype}")
        want_ndim = 1 if self.num_latent == 1 else 2
        if mu.ndim != want_ndim or (want_ndim == 2 and mu.shape[1] != self.num_latent):
            want = "(n,)" if want_ndim == 1 else f"(n, {self.num_latent})"
            raise ShapeError(f"mu: expected shape {want}, got {describe_shape(mu.shape)}")
        if tuple(var.shape) != tuple(mu.shape):
            raise ShapeError(f"var: expected shape {describe_shape(mu.shape)} (that of mu), got "
                             f"{describe_shape(var.shape)}")
        return xp, mu.shape[0]

    def _validate(self, y, mu, var, check):
        """Validate inputs; returns (xp, y converted to mu's dtype or None)."""
        xp, n = self._check_latents(mu, var)
        if y is not None:
            self._check_y_array(y, n)
            get_namespace(y, mu)  # raises on mixed libraries
        if check:
            ok = xp.all(xp.isfinite(mu)) & xp.all(xp.isfinite(var)) & xp.all(var > 0.0)
            if y is not None:
                ok = ok & self._targets_ok(xp, y)
            if not bool(ok):  # the one synchronisation; diagnose only on failure
                self._diagnose(xp, y, mu, var)
        if y is None:
            return xp, None
        return xp, (y if y.dtype == mu.dtype else xp.astype(y, mu.dtype))

    def _diagnose(self, xp, y, mu, var):
        check_finite(xp, mu, "mu")
        check_finite(xp, var, "var")
        if not bool(xp.all(var > 0.0)):
            nbad = int(xp.sum(xp.astype(var <= 0.0, xp.int32)))
            vmin = float(to_numpy(xp.min(var)))
            raise ValueError(f"var: expected values > 0, got {nbad} value(s) <= 0 (smallest "
                             f"{vmin:.3g}); clip the predictive variance before calling")
        if y is not None:
            self.check_targets(y)

    # -- single-latent Gauss-Hermite machinery -------------------------------------------------

    def _log_density_and_grads(self, y, f, params, want_grad):
        """``log p(y | f)`` at nodes ``f`` (n, q) for targets ``y`` (n, 1).

        Returns ``(logp, dlogp_df, {param: dlogp_dparam})`` with arrays broadcastable to
        (n, q); the last two are ``None`` when ``want_grad`` is false.
        """
        raise NotImplementedError

    def _nodes(self, mu, var):
        xp = get_namespace(mu)
        t, w, logw = self._rule(mu)
        sd = xp.sqrt(2.0 * var)
        return mu[:, None] + sd[:, None] * t, t, w, logw, sd

    def log_density(self, y, f):
        """``log p(y | f)`` elementwise for targets ``y`` (n,) and latent values ``f`` (n,).

        Values are not validated beyond shapes; see :meth:`check_targets`.
        """
        self._check_latents(f, f)
        self._check_y_array(y, f.shape[0])
        xp = get_namespace(y, f)
        yf = y if y.dtype == f.dtype else xp.astype(y, f.dtype)
        logp = self._log_density_and_grads(yf[:, None], f[:, None], self._params_like(f),
                                           False)[0]
        return logp[:, 0]

    def _map_blocks(self, fn, arrays, per_point):
        """``fn`` on row blocks of ``arrays``, outputs (a tuple of arrays) concatenated.

        Blocks hold at most ``block_elements`` node evaluations, so the temporaries of the
        quadrature stay in cache (and memory stays bounded) however large ``n`` is.
        """
        n = arrays[0].shape[0]
        size = max(1, self.block_elements // per_point)
        if n <= size:
            return fn(*arrays)
        outs = [fn(*(a[start:min(start + size, n), ...] for a in arrays))
                for start in range(0, n, size)]
        xp = get_namespace(*arrays)
        return tuple(xp.concat([o[k] for o in outs], axis=0) for k in range(len(outs[0])))

    def variational_expectations(self, y, mu, var, *, check=True):
        """Per-point ``E_{N(f; mu, var)}[log p(y | f)]``.

        By Gauss-Hermite quadrature unless the likelihood has a closed form (see its class
        notes and :meth:`_variational_expectations`).

        Parameters
        ----------
        y : array (n,)
            Targets.
        mu, var : arrays (n,), or (n, num_latent) for several latents
            Mean and variance (> 0) of the Gaussian marginal of ``f`` at each point.
        check : bool, default True
            Validate values (one device synchronisation).

        Returns
        -------
        array (n,)
        """
        xp, yf = self._validate(y, mu, var, check)
        return self._variational_expectations(xp, yf, mu, var, False)

    def variational_expectations_and_grad(self, y, mu, var, *, check=True):
        """Variational expectations and their gradients.

        Takes the arguments of :meth:`variational_expectations`. The gradients are those of
        the computed values themselves (the differentiated quadrature rule, or the closed
        form), so values and gradients agree to round-off.

        Returns
        -------
        ve : array (n,)
        grads : dict
            ``"mu"`` and ``"var"``, shaped like ``mu``: per-point partial derivatives of
            ``ve``; ``"params"``: ``{name: gradient of sum(ve) w.r.t. that natural
            parameter}``, each shaped like the parameter.
        """
        xp, yf = self._validate(y, mu, var, check)
        return self._variational_expectations(xp, yf, mu, var, True)

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """The hook behind both public variational-expectation methods.

        Receives validated inputs (``y`` already in ``mu``'s dtype) and returns ``ve`` (n,),
        or with ``want_grad`` the pair ``(ve, grads)`` described in
        :meth:`variational_expectations_and_grad`. This default is the differentiated
        Gauss-Hermite rule: with ``x_i = mu + sqrt(2 var) t_i`` and
        ``ve = sum_i w_i log p(y | x_i)``, ``d ve / d mu = sum_i w_i g'(x_i)`` and
        ``d ve / d var = sum_i w_i g'(x_i) t_i / sqrt(2 var)`` (docs/likelihoods.md,
        "Gauss-Hermite quadrature, differentiated exactly"), so values and gradients agree to
        round-off for any ``q``. Likelihoods with a closed form override it.
        """
        params = self._params_like(mu)
        if not want_grad:
            def value_block(yb, mb, vb):
                f, t, w, logw, sd = self._nodes(mb, vb)
                return (self._log_density_and_grads(yb[:, None], f, params, False)[0] @ w,)

            return self._map_blocks(value_block, (y, mu, var), self.num_gauss_hermite)[0]

        names = tuple(self._param_names)

        def block(yb, mb, vb):
            f, t, w, logw, sd = self._nodes(mb, vb)
            logp, dfdx, dparams = self._log_density_and_grads(yb[:, None], f, params, True)
            # per-block parameter sums, shape (1,), concatenated over blocks and summed below
            sums = tuple(xp.reshape(xp.sum(xp.broadcast_to(dparams[k], f.shape) @ w), (1,))
                         for k in names)
            return (logp @ w, dfdx @ w, ((dfdx * t) @ w) / sd) + sums

        out = self._map_blocks(block, (y, mu, var), self.num_gauss_hermite)
        g_params = {k: xp.reshape(xp.sum(s), tuple(getattr(self, k).shape))
                    for k, s in zip(names, out[3:], strict=False)}
        return out[0], {"mu": out[1], "var": out[2], "params": g_params}

    def predictive_log_density(self, y, mu, var, *, check=True):
        """Per-point ``log E_{N(f; mu, var)}[p(y | f)]`` (the test log predictive density).

        Gauss-Hermite in log space: ``logsumexp_i(log w_i + log p(y | x_i))``.

        Returns
        -------
        array (n,)
        """
        xp, yf = self._validate(y, mu, var, check)
        params = self._params_like(mu)

        def block(yb, mb, vb):
            f, t, w, logw, sd = self._nodes(mb, vb)
            logp = self._log_density_and_grads(yb[:, None], f, params, False)[0]
            return (logsumexp(logp + logw, axis=1),)

        return self._map_blocks(block, (yf, mu, var), self.num_gauss_hermite)[0]

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Mean and variance of ``y`` under ``f ~ N(mu, var)`` (each subclass gives its own)."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict_mean_and_var")

    def __repr__(self):
        parts = [f"{k}={to_numpy(v).tolist()!r}" for k, v in self.parameters().items()]
        if hasattr(self, "_num_gauss_hermite"):
            parts.append(f"num_gauss_hermite={self._num_gauss_hermite}")
        return f"{type(self).__name__}({', '.join(parts)})"
