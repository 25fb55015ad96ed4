"""One L-BFGS-B driver for full-batch models (GPR, SGPR), used by :func:`gpnum.fit`, the
scikit-learn estimators and :func:`gpnum.optim.fit_exact_gp`.

SciPy's L-BFGS-B (Byrd, Lu, Nocedal & Zhu 1995) runs on the host vector of the free
parameters in the coordinates chosen by ``coordinates``: ``"log"`` (default) takes the
logarithm of every positive parameter (``model.positive_names()``), as scikit-learn's
``GaussianProcessRegressor`` does, so that a variance of 2,500 and a lengthscale of 0.1 are
equally well scaled; ``"softplus"`` uses the model's unconstrained view (the softplus inverse
of positive parameters). Other parameters (a constant mean, inducing points) are optimised as
they are. The objective is divided by the number of data points, so that SciPy's absolute
tolerance on the projected gradient (``pgtol``) means the same at every ``n``. Restarts draw
the positive parameters uniformly in the same coordinates within ``restart_bounds`` and keep
the run with the largest objective.

Gradients in log coordinates follow by the chain rule, ``dL/d(log p) = p dL/dp``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from gpnum import backend as B
from gpnum.errors import ConvergenceWarning
from gpnum.models import check_model
from gpnum.params import softplus_inverse
from gpnum.priors import add_log_prior, check_priors

__all__ = ["LBFGSResult", "lbfgs"]

COORDINATES = ("log", "softplus")


#: Stopping tolerances for the per-point objective. SciPy's defaults (ftol 2.2e-9, gtol 1e-5)
#: were set for objectives of order one or more; its relative-reduction test divides by
#: ``max(|f|, 1)``, so on a per-point log marginal likelihood below one in magnitude it stops
#: at a reduction of ``2.2e-9 n`` in the total -- five times looser than scikit-learn's test on
#: the total for the CO2 study (n = 521, LML -115), about 1e-6 short of its optimum. These
#: stop within about 1e-7 of it (docs/benchmarks.md, "The L-BFGS-B driver's tolerances").
FTOL = 1e-10
GTOL = 1e-6

#: Largest projected gradient (per data point, in the optimiser's coordinates) at which a run
#: that SciPy reports converged counts as converged: 100 times SciPy's ``pgtol``.
STATIONARY_GRADIENT = 1e-3


def _projected_gradient(x, jac, box):
    """Max-norm of the gradient with the components blocked by an active bound removed."""
    g = np.array(jac, dtype=np.float64)
    if box is not None:
        lo = np.array([b[0] if b[0] is not None else -np.inf for b in box])
        hi = np.array([b[1] if b[1] is not None else np.inf for b in box])
        g = np.where(((x <= lo) & (g > 0.0)) | ((x >= hi) & (g < 0.0)), 0.0, g)
    return float(np.max(np.abs(g))) if g.size else 0.0


@dataclass
class LBFGSResult:
    """What :func:`lbfgs` did.

    Attributes
    ----------
    objective : float
        The model's objective (not per point) at the parameters left on the model: the best
        over the runs; with ``priors``, the objective plus the log prior density (the log
        posterior up to a constant), which is what was maximised.
    num_iter, num_eval : int
        L-BFGS-B iterations and objective evaluations over all runs.
    stop_reason : str
        SciPy's message for the run kept (``"CONVERGENCE: ..."``, ``"STOP: TOTAL NO. OF
        ITERATIONS REACHED LIMIT"``, ``"ABNORMAL_TERMINATION_IN_LNSRCH"``, ...).
    converged : bool
        Whether SciPy reports success for the run kept and its projected gradient is at most
        :data:`STATIONARY_GRADIENT` per data point (a CG objective can pass SciPy's
        relative-reduction test far from a stationary point).
    best_run : int
        Which run was kept (0: from the model's parameters; ``i``: the ``i``-th restart).
    runs : list of dict
        Per run: ``objective``, ``num_iter``, ``num_eval``, ``stop_reason``, ``converged``,
        ``grad_norm`` (the projected gradient's max-norm per data point at its end).
    trace : list of float
        The objective after each iteration, all runs in order.
    """

    objective: float
    num_iter: int
    num_eval: int
    stop_reason: str
    converged: bool
    best_run: int = 0
    runs: list = field(default_factory=list)
    trace: list = field(default_factory=list)


class _Coordinates:
    """The map between the host vector ``x`` and the model's free parameters."""

    def __init__(self, model, names, coordinates):
        self.model = model
        self.names = names
        self.positive = set(model.positive_names()) & set(names)
        self.log = coordinates == "log"
        params = model.parameters()
        self.shapes = {k: tuple(params[k].shape) for k in names}
        self.sizes = [math.prod(self.shapes[k]) for k in names]

    def _transformed(self, k):
        return k in self.positive

    def current(self):
        """The model's free parameters as the host vector."""
        natural = self.model.parameters()
        unc = None if self.log else self.model.unconstrained()
        parts = []
        for k in self.names:
            if self._transformed(k):
                v = np.asarray(B.to_numpy(natural[k] if self.log else unc[k]), dtype=np.float64)
                parts.append(np.log(v).ravel() if self.log else v.ravel())
            else:
                parts.append(np.asarray(B.to_numpy(natural[k]), dtype=np.float64).ravel())
        return np.concatenate(parts) if parts else np.zeros(0)

    def split(self, x):
        out, i = {}, 0
        for k, size in zip(self.names, self.sizes, strict=True):
            out[k] = x[i:i + size].reshape(self.shapes[k])
            i += size
        return out

    def assign(self, x):
        """Set the model's parameters from ``x`` (raises the model's ValueError if refused)."""
        model = self.model
        parts = self.split(x)

        def arr(v):
            return B.asarray(v, dtype=model.dtype, xp=model.xp, device=model.device)

        if self.log:
            with np.errstate(over="ignore", under="ignore"):
                model.set_parameters({k: arr(np.exp(v) if self._transformed(k) else v)
                                      for k, v in parts.items()})
        else:
            model.set_unconstrained({k: arr(v) for k, v in parts.items()})

    def gradient(self, grads):
        """Gradients w.r.t. the natural parameters -> w.r.t. ``x`` (host vector)."""
        model = self.model
        if not self.log:
            grads = model.grad_to_unconstrained({k: grads[k] for k in self.names})
        natural = model.parameters()
        parts = []
        for k in self.names:
            g = np.asarray(B.to_numpy(grads[k]), dtype=np.float64)
            if self.log and self._transformed(k):
                g = g * np.asarray(B.to_numpy(natural[k]), dtype=np.float64)  # p dL/dp
            parts.append(g.ravel())
        return np.concatenate(parts) if parts else np.zeros(0)

    def draw(self, rng, low, high, start):
        """A restart: the positive parameters uniform in the optimiser's coordinates within
        ``[low, high]`` (natural units), the others at ``start``'s values."""
        parts = self.split(start.copy())
        for k in self.names:
            if self._transformed(k):
                if self.log:
                    lo, hi = math.log(low), math.log(high)
                else:
                    lo, hi = (float(softplus_inverse(np.float64(b))) for b in (low, high))
                parts[k] = rng.uniform(lo, hi, size=self.shapes[k])
        return np.concatenate([np.ravel(parts[k]) for k in self.names])


def lbfgs(model, X=None, y=None, *, fixed=(), coordinates="log", maxiter=1000, n_restarts=0,
          seed=0, bounds=None, restart_bounds=(1e-5, 1e5), callback=None, warn=True,
          ftol=FTOL, gtol=GTOL, priors=None):
    """Maximise a full-batch model's objective by SciPy's L-BFGS-B.

    Parameters
    ----------
    model : a full-batch model of the model protocol (gpnum.GPR, gpnum.SGPR)
    X, y : arrays (n, d), (n,), optional
        Training data; default the model's own (``model.data()``).
    fixed : sequence of str
        Parameter names held as they are.
    coordinates : {"log", "softplus"}
        Coordinates of the positive parameters (module docstring).
    maxiter : int
        L-BFGS-B iterations per run.
    n_restarts : int
        Further runs from positive parameters drawn uniformly in the same coordinates within
        ``restart_bounds`` (natural units); the run with the largest objective is kept.
    seed : int
        Seed of the restarts' draws.
    bounds : (float, float), optional
        A box ``[low, high]`` (natural units) for every free positive parameter, as
        scikit-learn's hyper-parameter bounds; only with ``coordinates="log"``.
    restart_bounds : (float, float)
        Range of the restarts' draws (scikit-learn's default bounds).
    callback : callable, optional
        ``callback(objective)`` after each iteration (the objective, not per point).
    warn : bool
        Warn (:class:`gpnum.errors.ConvergenceWarning`) when the run kept stops short of
        convergence (iteration limit, an abnormal line search).
    ftol, gtol : float
        SciPy's L-BFGS-B stopping tolerances on the per-point objective: the relative
        reduction ``(f_k - f_k+1) / max(|f_k|, |f_k+1|, 1) <= ftol`` and the projected
        gradient's max-norm ``<= gtol`` (defaults :data:`FTOL`, :data:`GTOL`).
    priors : dict, optional
        ``{parameter name: gpnum.priors.Prior}``: maximise the objective plus the summed log
        prior densities of those parameters' natural values (MAP; :mod:`gpnum.priors`).

    Returns
    -------
    LBFGSResult
    """
    from scipy.optimize import minimize

    check_model(model, ("lbfgs",), caller="gpnum.optim.lbfgs")
    if not model.full_batch:
        raise ValueError(f"L-BFGS-B needs a full-batch model (GPR, SGPR); "
                         f"{type(model).__name__} trains on minibatches")
    if coordinates not in COORDINATES:
        raise ValueError(f"coordinates: expected one of {COORDINATES}, got {coordinates!r}")
    if bounds is not None and coordinates != "log":
        raise ValueError("bounds: only with coordinates='log'")
    maxiter, n_restarts = int(maxiter), int(n_restarts)
    if maxiter < 1 or n_restarts < 0:
        raise ValueError(f"maxiter >= 1 and n_restarts >= 0 expected, got {maxiter}, "
                         f"{n_restarts}")
    low, high = (float(b) for b in restart_bounds)
    if not 0.0 < low <= high < math.inf:
        raise ValueError(f"restart_bounds: expected 0 < low <= high, got {restart_bounds!r}")
    if X is None or y is None:
        data = model.data()
        X, y = model.check_data(data["X"] if X is None else X, data["y"] if y is None else y)
    params = model.parameters()
    unknown = [k for k in fixed if k not in params]
    if unknown:
        raise ValueError(f"fixed: {unknown} are not parameters of the model")
    priors = check_priors(priors, model)
    names = [k for k in params if k not in set(fixed)]
    coords = _Coordinates(model, names, coordinates)
    n = max(int(X.shape[0]), 1)
    box = None
    if bounds is not None:
        lo, hi = (math.log(float(b)) for b in bounds)
        box = []
        for k, size in zip(names, coords.sizes, strict=True):
            box += [(lo, hi) if k in coords.positive else (None, None)] * size
    trace = []

    def run(x0):
        state = {"first": True, "value": None}

        def objective(x):
            # The start is evaluated unprotected, so that a genuine error (bad data, a bug)
            # is raised, not hidden as an infinitely bad point.
            first = state["first"]
            state["first"] = False
            try:
                # A trial point can be refused (a parameter that under- or overflows): like
                # a non-PSD one below, it is infinitely bad, never an error.
                coords.assign(x)
            except ValueError:
                if first:
                    raise
                return math.inf, np.zeros_like(x)
            try:
                # A line search's trial point may be extreme: NumPy's floating-point
                # warnings there are not the user's concern, the point is scored. errstate,
                # not warnings.catch_warnings: NumPy's error state is per thread (per context
                # from NumPy 2), the warning filters are process-wide, so fits in parallel
                # threads would race on them.
                with np.errstate(**({} if first else {"all": "ignore"})):
                    value, grads = model.objective_and_grad(X, y, validate=False)
                    value, grads = add_log_prior(priors, model.parameters(), value, grads)
            except ValueError:
                # NotPSDError (a noise variance driven towards 0) or an overflowed kernel
                # matrix (float32, extreme values): infinitely bad, the line search backs off
                if first:
                    raise
                return math.inf, np.zeros_like(x)
            v = float(value)
            g = coords.gradient(grads)
            if not (math.isfinite(v) and np.all(np.isfinite(g))):
                return math.inf, np.zeros_like(x)  # L-BFGS-B's line search backs off
            state["value"] = v
            return -v / n, -g / n

        def record(xk):
            trace.append(state["value"] if state["value"] is not None else float("nan"))
            if callback is not None:
                callback(trace[-1])

        res = minimize(objective, x0, jac=True, method="L-BFGS-B", bounds=box,
                       callback=record, options={"maxiter": maxiter, "ftol": ftol,
                                                 "gtol": gtol})
        return res

    start = coords.current()
    if box is not None:
        start = np.clip(start, [b[0] if b[0] is not None else -np.inf for b in box],
                        [b[1] if b[1] is not None else np.inf for b in box])
    rng = np.random.default_rng(seed)
    runs, best, best_x = [], None, None
    for i in range(n_restarts + 1):
        x0 = start if i == 0 else coords.draw(rng, low, high, start)
        try:
            res = run(x0)
        except ValueError as err:
            if i == 0:
                raise
            # a restart drawn where the model cannot be evaluated: skipped, as scikit-learn's
            runs.append({"objective": -math.inf, "num_iter": 0, "num_eval": 1,
                         "stop_reason": f"start refused: {err}", "converged": False,
                         "grad_norm": math.inf})
            continue
        value = -float(res.fun) * n if math.isfinite(float(res.fun)) else -math.inf
        grad = _projected_gradient(res.x, res.jac, box)
        message, converged = str(res.message), bool(res.success)
        if converged and grad > STATIONARY_GRADIENT:
            # SciPy's relative-reduction test passes on an objective whose gradient is not
            # that of its values (CG's inexact solves): not a stationary point, so say so.
            converged = False
            message += (f", but the projected gradient is {grad:.2g} per data point (above "
                        f"{STATIONARY_GRADIENT:g}): the objective or its gradient is inexact")
        runs.append({"objective": value, "num_iter": int(res.nit), "num_eval": int(res.nfev),
                     "stop_reason": message, "converged": converged, "grad_norm": grad})
        if best is None or value > runs[best]["objective"]:
            best, best_x = i, np.array(res.x)
    try:
        coords.assign(best_x)
    except ValueError:
        coords.assign(start)  # L-BFGS-B's point was scored, so this cannot happen; be safe
    value, _ = model.objective_and_grad(X, y, validate=False)
    value = float(add_log_prior(priors, model.parameters(), value, {})[0])
    kept = runs[best]
    result = LBFGSResult(objective=value, num_iter=sum(r["num_iter"] for r in runs),
                         num_eval=sum(r["num_eval"] for r in runs),
                         stop_reason=kept["stop_reason"], converged=kept["converged"],
                         best_run=best, runs=runs, trace=trace)
    if warn and not result.converged:
        warnings.warn(f"L-BFGS-B stopped without converging after {kept['num_iter']} "
                      f"iterations: {kept['stop_reason']}", ConvergenceWarning, stacklevel=3)
    return result
