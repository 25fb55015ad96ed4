"""Per-point ("projected") divergences between univariate Gaussians, elementwise over arrays.

For the projected regularisers of J. Wu (2023, "Generalised variational inference for
Gaussian processes", MSc thesis, UCL, section 6): ``Q_n = N(mq_n, vq_n)`` and
``P_n = N(mp_n, vp_n)`` are the marginals of a variational GP and a prior GP at input ``x_n``,
and the regulariser is ``sum_n D(Q_n, P_n)``. Every function takes means and *variances* of one
shape (n,), returns the per-point values or their sum or mean (``reduction``), and comes with
``*_and_grad`` (value and per-element partial derivatives) and ``*_vjp`` (cotangent times
partials) companions (docs/gradients.md).

The forms are chosen to stay finite and accurate in float32 for variances from 1e-8 to 1e8:
variances enter through the ratio ``x = (vq - vp) / vp`` (so that ``vq = vp`` gives exactly 0),
``log(vq / vp)`` through ``log1p`` near 1, ``log cosh`` without overflow, and gradients without
``1/v - 1/v`` cancellations.
"""

from __future__ import annotations

import math

from gpnum.backend import default_dtype, device_of, get_namespace, is_array, namespace, to_numpy
from gpnum.divergences._checks import check_alpha, check_same_shape, namespace_of
from gpnum.divergences._checks import validate as _validate
from gpnum.errors import ShapeError, describe_shape

__all__ = [
    "kl_normal", "kl_normal_and_grad", "kl_normal_vjp",
    "wasserstein_normal", "wasserstein_normal_and_grad", "wasserstein_normal_vjp",
    "bhattacharyya_normal", "bhattacharyya_normal_and_grad", "bhattacharyya_normal_vjp",
    "hellinger_normal", "hellinger_normal_and_grad", "hellinger_normal_vjp",
    "renyi_normal", "renyi_normal_and_grad", "renyi_normal_vjp",
    "squared_difference_normal", "squared_difference_normal_and_grad",
    "squared_difference_normal_vjp",
]

_REDUCTIONS = ("sum", "mean", "none")
_LOG2 = math.log(2.0)


# ---------------------------------------------------------------------------------------------
# shared plumbing


def _numbers_as_arrays(*args):
    """Python numbers among the arguments as arrays of the shape, namespace, dtype and device
    of the first array argument (0-d arrays of the default namespace when all are numbers)."""
    ref = next((a for a in args if is_array(a)), None)
    if ref is None:
        xp = namespace()
        shape, dtype, device = (), default_dtype(xp), None
    else:
        xp = get_namespace(ref)
        shape, dtype, device = tuple(ref.shape), ref.dtype, device_of(ref)
    return [xp.full(shape, float(a), dtype=dtype, device=device)
            if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in args]


def _args(mq, vq, mp, vp, validate):
    xp, _ = namespace_of({"mq": mq, "vq": vq, "mp": mp, "vp": vp})
    for name, a in (("vq", vq), ("mp", mp), ("vp", vp)):
        check_same_shape(a, name, mq, "mq")
    if validate:
        _validate(xp, finite=[("mq", mq), ("mp", mp)], positive=[("vq", vq), ("vp", vp)])
    return xp


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction: expected one of 'sum', 'mean', 'none', got {reduction!r}")


def _evaluate(core, mq, vq, mp, vp, reduction, validate, want_grad, **kw):
    _check_reduction(reduction)
    mq, vq, mp, vp = _numbers_as_arrays(mq, vq, mp, vp)
    xp = _args(mq, vq, mp, vp, validate)
    values, partials = core(xp, mq, vq, mp, vp, want_grad, validate, **kw)
    if reduction == "none":
        return (values, partials) if want_grad else values
    if reduction == "sum":
        total = xp.asarray(xp.sum(values))
        return (total, partials) if want_grad else total
    n = math.prod(values.shape)
    mean = xp.asarray(xp.sum(values) / float(n))
    if not want_grad:
        return mean
    return mean, {k: p / float(n) for k, p in partials.items()}


def _vjp(core, cotangent, mq, vq, mp, vp, validate, **kw):
    mq, vq, mp, vp = _numbers_as_arrays(mq, vq, mp, vp)
    cotangent = _numbers_as_arrays(mq, cotangent)[1]
    xp = _args(mq, vq, mp, vp, validate)
    if tuple(cotangent.shape) != tuple(mq.shape):
        raise ShapeError(f"cotangent: expected shape {describe_shape(mq.shape)} like mq, got "
                         f"{describe_shape(cotangent.shape)}")
    _, partials = core(xp, mq, vq, mp, vp, True, validate, **kw)
    return {k: cotangent * p for k, p in partials.items()}


def _log_ratio(xp, vq, vp, x):
    """``log(vq / vp)`` given ``x = (vq - vp) / vp``: ``log1p(x)`` near 1, a difference of logs
    elsewhere (``vq / vp`` itself can leave the float32 range)."""
    near = xp.abs(x) < 0.5
    return xp.where(near, xp.log1p(xp.clip(x, -0.5, 0.5)), xp.log(vq) - xp.log(vp))


def _log_cosh(xp, y):
    """``log cosh(y)``: ``log1p(2 sinh^2(y/2))`` for small ``|y|`` (no cancellation), and
    ``|y| - log 2 + log1p(exp(-2|y|))`` for large ``|y|`` (no overflow)."""
    a = xp.abs(y)
    small = xp.sinh(0.5 * xp.clip(a, 0.0, 1.0))
    return xp.where(a <= 1.0, xp.log1p(2.0 * small * small),
                    a - _LOG2 + xp.log1p(xp.exp(-2.0 * xp.maximum(a, 1.0))))


# ---------------------------------------------------------------------------------------------
# cores: (xp, mq, vq, mp, vp, want_grad, validate) -> (values, partials or None)


def _kl_core(xp, mq, vq, mp, vp, want_grad, validate):
    d = mq - mp
    x = (vq - vp) / vp
    dd = d * d / vp
    values = 0.5 * (x - _log_ratio(xp, vq, vp, x) + dd)
    if not want_grad:
        return values, None
    e = d / vp
    return values, {"mq": e, "vq": 0.5 * x / vq, "mp": -e, "vp": -0.5 * (x + dd) / vp}


def _wasserstein_core(xp, mq, vq, mp, vp, want_grad, validate):
    d = mq - mp
    sq, sp = xp.sqrt(vq), xp.sqrt(vp)
    t = (vq - vp) / (sq + sp)  # sq - sp without cancellation
    values = d * d + t * t
    if not want_grad:
        return values, None
    return values, {"mq": 2.0 * d, "vq": t / sq, "mp": -2.0 * d, "vp": -t / sp}


def _bhattacharyya_core(xp, mq, vq, mp, vp, want_grad, validate):
    d = mq - mp
    s = vq + vp
    h = d / (2.0 * s)
    x = (vq - vp) / vp
    # (vq + vp) / (2 sqrt(vq vp)) = cosh(log(vq / vp) / 2)
    values = 0.5 * d * h + 0.5 * _log_cosh(xp, 0.5 * _log_ratio(xp, vq, vp, x))
    if not want_grad:
        return values, None
    w = (vq - vp) / s
    return values, {"mq": h, "vq": 0.25 * w / vq - h * h, "mp": -h, "vp": -0.25 * w / vp - h * h}


def _hellinger_core(xp, mq, vq, mp, vp, want_grad, validate):
    db, partials = _bhattacharyya_core(xp, mq, vq, mp, vp, want_grad, validate)
    values = -xp.expm1(-db)
    if not want_grad:
        return values, None
    bc = xp.exp(-db)
    return values, {k: bc * p for k, p in partials.items()}


def _renyi_core(xp, mq, vq, mp, vp, want_grad, validate, alpha):
    beta = 1.0 - alpha
    d = mq - mp
    x = (vq - vp) / vp
    va = alpha * vp + beta * vq     # variance of the "geometric mixture"; > 0 where finite
    if validate and alpha > 1.0 and not bool(xp.all(va > 0.0)):
        bad = to_numpy(va <= 0.0)
        r = to_numpy(vq / vp)[bad]
        raise ValueError(
            f"alpha: D_alpha(Q || P) is infinite for alpha = {alpha!r} at {int(bad.sum())} "
            f"point(s): alpha vp + (1 - alpha) vq <= 0 there; choose alpha < "
            f"{float((r / (r - 1.0)).min()):.6g}")
    g = va / vp
    log_r = _log_ratio(xp, vq, vp, x)
    if beta == 0.0:
        t1 = 0.5 * (x - log_r)
    else:
        t1 = (xp.log1p(beta * x) - beta * log_r) / (2.0 * beta)
    e = d / va
    values = t1 + 0.5 * alpha * d * e
    if not want_grad:
        return values, None
    ee = e * e
    return values, {"mq": alpha * e, "vq": 0.5 * alpha * x / (g * vq) - 0.5 * alpha * beta * ee,
                    "mp": -alpha * e, "vp": -0.5 * alpha * x / (g * vp) - 0.5 * alpha * alpha * ee}


def _squared_difference_core(xp, mq, vq, mp, vp, want_grad, validate):
    d = mq - mp
    w = vq - vp
    values = d * d + w * w
    if not want_grad:
        return values, None
    return values, {"mq": 2.0 * d, "vq": 2.0 * w, "mp": -2.0 * d, "vp": -2.0 * w}


# ---------------------------------------------------------------------------------------------
# public functions

_COMMON = """
    Parameters
    ----------
    mq, vq : array (n,)
        Means and variances (> 0) of the Q marginals.
    mp, vp : array (n,)
        Means and variances (> 0) of the P marginals; all four arrays of one shape and dtype.{extra}
    reduction : {{"sum", "mean", "none"}}
        Return the sum over points (default; the projected regulariser), the mean, or the (n,)
        array of per-point values.
    validate : bool
        Check that means are finite and variances finite and > 0 (one host synchronisation).

    Returns
    -------
    value : array () or (n,)

    Raises
    ------
    ShapeError
        Arrays of different shapes.
    ValueError
        NaN/Inf, variances <= 0, or an unknown ``reduction``.{raises}
"""


def _doc(summary, extra="", raises=""):
    return summary + "\n" + _COMMON.format(extra=extra, raises=raises)


def _and_grad_doc(name):
    return (f"``{name}`` and its per-point partial derivatives: ``(value, grads)``.\n\n"
            f"    ``grads`` maps ``mq``, ``vq``, ``mp``, ``vp`` to arrays (n,) of the partials of each\n"
            f"    point's value (divided by n for ``reduction='mean'``): the gradient of the summed or\n"
            f"    averaged value, and the diagonal Jacobian of the per-point one. Arguments as\n"
            f"    :func:`{name}`.\n")


def _vjp_doc(name):
    return (f"Vector-Jacobian product of ``{name}(..., reduction='none')``.\n\n"
            f"    Returns the gradients of ``sum(cotangent * {name}(mq, vq, mp, vp, reduction='none'))``\n"
            f"    as a dict keyed ``mq``, ``vq``, ``mp``, ``vp``; ``cotangent`` has the shape of ``mq``.\n")


def kl_normal(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_kl_core, mq, vq, mp, vp, reduction, validate, False)


def kl_normal_and_grad(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_kl_core, mq, vq, mp, vp, reduction, validate, True)


def kl_normal_vjp(cotangent, mq, vq, mp, vp, *, validate=True):
    return _vjp(_kl_core, cotangent, mq, vq, mp, vp, validate)


def wasserstein_normal(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_wasserstein_core, mq, vq, mp, vp, reduction, validate, False)


def wasserstein_normal_and_grad(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_wasserstein_core, mq, vq, mp, vp, reduction, validate, True)


def wasserstein_normal_vjp(cotangent, mq, vq, mp, vp, *, validate=True):
    return _vjp(_wasserstein_core, cotangent, mq, vq, mp, vp, validate)


def bhattacharyya_normal(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_bhattacharyya_core, mq, vq, mp, vp, reduction, validate, False)


def bhattacharyya_normal_and_grad(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_bhattacharyya_core, mq, vq, mp, vp, reduction, validate, True)


def bhattacharyya_normal_vjp(cotangent, mq, vq, mp, vp, *, validate=True):
    return _vjp(_bhattacharyya_core, cotangent, mq, vq, mp, vp, validate)


def hellinger_normal(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_hellinger_core, mq, vq, mp, vp, reduction, validate, False)


def hellinger_normal_and_grad(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_hellinger_core, mq, vq, mp, vp, reduction, validate, True)


def hellinger_normal_vjp(cotangent, mq, vq, mp, vp, *, validate=True):
    return _vjp(_hellinger_core, cotangent, mq, vq, mp, vp, validate)


def renyi_normal(mq, vq, mp, vp, *, alpha, reduction="sum", validate=True):
    return _evaluate(_renyi_core, mq, vq, mp, vp, reduction, validate, False,
                     alpha=check_alpha(alpha))


def renyi_normal_and_grad(mq, vq, mp, vp, *, alpha, reduction="sum", validate=True):
    return _evaluate(_renyi_core, mq, vq, mp, vp, reduction, validate, True,
                     alpha=check_alpha(alpha))


def renyi_normal_vjp(cotangent, mq, vq, mp, vp, *, alpha, validate=True):
    return _vjp(_renyi_core, cotangent, mq, vq, mp, vp, validate, alpha=check_alpha(alpha))


def squared_difference_normal(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_squared_difference_core, mq, vq, mp, vp, reduction, validate, False)


def squared_difference_normal_and_grad(mq, vq, mp, vp, *, reduction="sum", validate=True):
    return _evaluate(_squared_difference_core, mq, vq, mp, vp, reduction, validate, True)


def squared_difference_normal_vjp(cotangent, mq, vq, mp, vp, *, validate=True):
    return _vjp(_squared_difference_core, cotangent, mq, vq, mp, vp, validate)


kl_normal.__doc__ = _doc(
    """KL(Q_n || P_n) per point, between ``Q_n = N(mq_n, vq_n)`` and ``P_n = N(mp_n, vp_n)``.

    ``KL = log(sp/sq) + (vq + (mq - mp)^2) / (2 vp) - 1/2`` with ``sq = sqrt(vq)``,
    ``sp = sqrt(vp)`` (the textbook form, docs/divergences.md; Wu (2023) writes
    ``log(s_q^2/s_p^2)``, the directions mixed up), computed
    as ``1/2 [x - log1p(x) + (mq - mp)^2 / vp]`` with ``x = (vq - vp) / vp``.""")
wasserstein_normal.__doc__ = _doc(
    """Squared 2-Wasserstein distance per point: ``(mq - mp)^2 + (sqrt(vq) - sqrt(vp))^2``.

    Symmetric; ``sqrt(vq) - sqrt(vp)`` is computed as ``(vq - vp) / (sqrt(vq) + sqrt(vp))``.
    Equals :func:`wasserstein_mvn` for 1 x 1 covariances.""")
bhattacharyya_normal.__doc__ = _doc(
    """Bhattacharyya distance per point, ``-log int sqrt(q p)``.

    ``(mq - mp)^2 / (4 (vq + vp)) + 1/2 log((vq + vp) / (2 sqrt(vq vp)))``, symmetric; the log
    term is computed as ``1/2 log cosh(log(vq / vp) / 2)``.""")
hellinger_normal.__doc__ = _doc(
    """Squared Hellinger distance per point, ``1 - int sqrt(q p)``, in [0, 1].

    ``1 - sqrt(2 sq sp / (vq + vp)) exp(-(mq - mp)^2 / (4 (vq + vp)))`` (with ``exp(-...)``: the
    seed has a sign slip), computed as ``-expm1(-D_B)`` from :func:`bhattacharyya_normal`.""")
renyi_normal.__doc__ = _doc(
    """Renyi divergence of order ``alpha`` per point, ``D_alpha(Q_n || P_n)``.

    ``log(sp/sq) + log(vp / va) / (2 (alpha - 1)) + alpha (mq - mp)^2 / (2 va)`` with
    ``va = alpha vp + (1 - alpha) vq`` (finite iff ``va > 0``), computed as
    ``[log1p(beta x) - beta log(vq/vp)] / (2 beta) + alpha (mq - mp)^2 / (2 va)``,
    ``beta = 1 - alpha``, ``x = (vq - vp) / vp``: accurate uniformly in ``alpha`` and equal to
    :func:`kl_normal` at ``alpha = 1``.""",
    extra="""
    alpha : float, keyword-only
        Order, a Python number > 0.""",
    raises="""
        Also ``alpha <= 0``, and ``alpha > 1`` where some ``va <= 0`` (infinite divergence).""")
squared_difference_normal.__doc__ = _doc(
    """Squared difference of means and of variances per point: ``(mq - mp)^2 + (vq - vp)^2``.

    The "naive divergence" of Wu (2023, section 6); symmetric, zero only for equal moments.""")

for _name in ("kl_normal", "wasserstein_normal", "bhattacharyya_normal", "hellinger_normal",
              "renyi_normal", "squared_difference_normal"):
    globals()[_name + "_and_grad"].__doc__ = _and_grad_doc(_name)
    globals()[_name + "_vjp"].__doc__ = _vjp_doc(_name)
del _name
