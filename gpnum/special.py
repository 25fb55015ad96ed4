"""Special functions the array API lacks, written with ``xp`` primitives only.

The one home of the special functions shared by the likelihoods, the models (the Student-t
process) and the hidden Markov models; it knows about nothing but :mod:`gpnum.backend`.

The standard has ``erf`` only in some libraries and no ``erfc``, ``erfcx``, ``lgamma`` or
``digamma``, and round-tripping through SciPy on the host would be a hidden device transfer.
Everything here is elementwise, accurate to a few float64 ulps over the whole real line, and
free of overflow in the branches that :func:`xp.where` evaluates but discards.

- :func:`erfcx` (scaled complementary error function) uses Weideman's rational series
  (J. A. C. Weideman, "Computation of the complex error function", SIAM J. Numer. Anal. 31,
  1994): ``erfcx(x) = 1/(sqrt(pi) (L + x)) + 2/(L + x)^2 sum_n a_n Z^n``,
  ``Z = (L - x)/(L + x)``, whose coefficients come from one host FFT in float64 (``N = 40``
  for float64 inputs, ``N = 18`` for float32). Relative error <= 1e-15 (float64) and
  <= 1e-9 + float32 round-off for ``x >= 0`` (checked against SciPy).
- :func:`log_ndtr` (log of the standard normal CDF) is built on it:
  ``log Phi(x) = log(erfcx(-x/sqrt 2)/2) - x^2/2`` for ``x < 0`` (no underflow, down to
  ``x = -1e150``) and ``log1p(-erfc(x/sqrt 2)/2)`` for ``x >= 0``; its derivative
  ``phi(x)/Phi(x) = sqrt(2/pi)/erfcx(-x/sqrt 2)`` for ``x < 0`` needs no exponential at all.
- :func:`lgamma`, :func:`digamma`, :func:`trigamma`, :func:`trigamma_difference` (for
  ``x > 0``): the recurrence shifts the argument up by 10, then the asymptotic (Stirling)
  series is summed. Absolute error below 1e-13 in float64 for ``x >= 0.5`` (tests: against
  SciPy). Used for the Student-t process's degrees of freedom and the HMMs' Dirichlet and
  Wishart expectations.
- :func:`multigammaln`, :func:`multidigamma`: the log multivariate gamma ``log Gamma_D(a)``
  and its derivative, as sums of the above, for the HMMs' Wishart expectations. Their
  variational updates need them only on small parameter arrays ((K,), (K, K), (K, D)), but
  those live on the device of the data, so they are computed there rather than round-tripped
  through SciPy (NumPy arrays, already on the host, go to SciPy's compiled functions).
- :func:`log_gamma_half_ratio` is ``log Gamma(a + 1/2) - log Gamma(a)``, the only place the
  Student-t density needs ``lgamma``; computed directly (not as a difference of two large
  ``lgamma`` values, which cancels catastrophically for large degrees of freedom).
"""

from __future__ import annotations

import math

import numpy as np

from gpnum.backend import get_namespace

__all__ = [
    "bessel_ive_host",
    "erfcx",
    "ndtr",
    "log_ndtr",
    "log_ndtr_and_grad",
    "log_gamma_half_ratio",
    "log_gamma_half_ratio_and_grad",
    "logsumexp",
    "lgamma",
    "digamma",
    "trigamma",
    "trigamma_difference",
    "multigammaln",
    "multidigamma",
]

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_LOG_HALF = math.log(0.5)


def _weideman_coefficients(num_terms: int = 40):
    """Weideman's (1994) coefficients ``a_n`` (highest power first) and his scale ``L``.

    The function ``(L^2 + t^2) exp(-t^2)`` is sampled at ``t = L tan(theta/2)`` on ``4 N``
    equispaced angles; its Fourier coefficients are those of ``erfcx`` in the variable ``Z``.
    Computed once on the host in float64; 40 terms reach full float64 accuracy on ``x >= 0``.
    """
    m = 2 * num_terms
    k = np.arange(-m + 1, m)
    scale = math.sqrt(num_terms / math.sqrt(2.0))
    t = scale * np.tan(k * math.pi / (2 * m))
    f = np.concatenate([[0.0], np.exp(-t * t) * (scale * scale + t * t)])
    a = np.real(np.fft.fft(np.fft.fftshift(f))) / (2 * m)
    return scale, tuple(float(c) for c in a[1:num_terms + 1][::-1])


# 40 terms: <= 1e-15 relative in float64; 18 terms: 1e-9, below float32 round-off, at less
# than half the cost
_ERFCX_RULE_64 = _weideman_coefficients(40)
_ERFCX_RULE_32 = _weideman_coefficients(18)


def _erfcx_nonneg(x):
    """``erfcx`` for ``x >= 0`` (Horner's rule on Python-float coefficients keeps the dtype)."""
    xp = get_namespace(x)
    scale, coeffs = _ERFCX_RULE_64 if x.dtype == xp.float64 else _ERFCX_RULE_32
    denom = scale + x
    z = (scale - x) / denom
    p = xp.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        p = p * z + c
    return 2.0 * p / (denom * denom) + _INV_SQRT_PI / denom


def erfcx(x):
    """Scaled complementary error function ``exp(x^2) erfc(x)``, elementwise.

    Parameters
    ----------
    x : array, any shape, real floating

    Returns
    -------
    array, same shape
        For ``x >= 0`` Weideman's rational series (relative error <= 1e-15 in float64); for
        ``x < 0`` the reflection ``2 exp(x^2) - erfcx(-x)``, which overflows (to ``inf``) for
        ``x < -26.6`` in float64 like SciPy's.
    """
    xp = get_namespace(x)
    ax = xp.abs(x)
    pos = _erfcx_nonneg(ax)
    # clamp the exponent of the discarded branch so that it cannot overflow
    neg = 2.0 * xp.exp(xp.where(x < 0.0, x * x, 0.0)) - pos
    return xp.where(x < 0.0, neg, pos)


def _half_erfc_of_abs(x):
    """``(erfcx(|x|/sqrt 2)``, ``exp(-x^2/2)``): the two factors of ``erfc(|x|/sqrt 2)``."""
    xp = get_namespace(x)
    return _erfcx_nonneg(xp.abs(x) * _SQRT_HALF), xp.exp(-0.5 * (x * x))


def ndtr(x):
    """Standard normal CDF ``Phi(x)``, elementwise, accurate in the lower tail.

    Parameters
    ----------
    x : array, any shape, real floating

    Returns
    -------
    array, same shape
        ``Phi(x)``, with full relative accuracy for ``x < 0`` (until it underflows).
    """
    xp = get_namespace(x)
    e, g = _half_erfc_of_abs(x)
    tail = 0.5 * e * g  # Phi(-|x|)
    return xp.where(x < 0.0, tail, 1.0 - tail)


def log_ndtr_and_grad(x):
    """``log Phi(x)`` and its derivative ``phi(x) / Phi(x)``, elementwise.

    Parameters
    ----------
    x : array, any shape, real floating

    Returns
    -------
    value : array, same shape
        ``log Phi(x)``: relative error < 1e-14 in float64 against ``scipy.special.log_ndtr``
        over ``[-40, 10]`` (and finite down to ``x = -1e150``); in float32 finite for every
        finite ``x`` whose square does not overflow.
    grad : array, same shape
        ``phi(x) / Phi(x)`` (the inverse Mills ratio of ``-x``), ``~ -x`` for ``x -> -inf``.
    """
    xp = get_namespace(x)
    e, g = _half_erfc_of_abs(x)
    value = _log_ndtr_from(xp, x, e, g)
    grad_neg = _SQRT_2_OVER_PI / e
    grad_pos = (_SQRT_2_OVER_PI * 0.5) * g / (1.0 - 0.5 * e * g)
    grad = xp.where(x < 0.0, grad_neg, grad_pos)
    return value, grad


def log_ndtr(x):
    """``log Phi(x)``, the log of the standard normal CDF (see :func:`log_ndtr_and_grad`)."""
    xp = get_namespace(x)
    return _log_ndtr_from(xp, x, *_half_erfc_of_abs(x))


def _log_ndtr_from(xp, x, e, g):
    """``log Phi(x)`` from the factors ``e, g`` of ``erfc(|x|/sqrt 2)`` (:func:`_half_erfc_of_abs`)."""
    neg_branch = _LOG_HALF + xp.log(e) - 0.5 * (x * x)
    # for x >= 0, Phi(x) = 1 - erfc(x/sqrt2)/2 >= 1/2: log1p is exact and never sees a pole
    pos_branch = xp.log1p(-0.5 * e * g)
    return xp.where(x < 0.0, neg_branch, pos_branch)


# Asymptotic series of log Gamma(z + 1/2) - log Gamma(z) - log(z)/2 in powers of 1/z:
# sum over even k of (2^(1-k) - 2) B_k / (k (k - 1)) z^(1-k), B_k the Bernoulli numbers.
_HALF_RATIO_SERIES = (
    (1, -1.0 / 8.0),
    (3, 1.0 / 192.0),
    (5, -1.0 / 640.0),
    (7, 17.0 / 14336.0),
    (9, -31.0 / 18432.0),
    (11, 691.0 / 180224.0),
    (13, -5461.0 / 425984.0),
    (15, 929569.0 / 15728640.0),
)
# upward shift a -> a + 10 before the series: its next term is then < 4e-18 relative
_HALF_RATIO_SHIFT = 10


def log_gamma_half_ratio_and_grad(a):
    """``log Gamma(a + 1/2) - log Gamma(a)`` and its derivative ``psi(a + 1/2) - psi(a)``.

    Parameters
    ----------
    a : array, any shape, real floating, ``a > 0``

    Returns
    -------
    value, grad : arrays, same shape
        Absolute error < 1e-14 in float64 for ``a`` in ``[1e-6, 1e12]`` (against
        ``scipy.special.gammaln`` / ``digamma`` in extended precision). The recurrence
        ``Gamma(a + 1) = a Gamma(a)`` shifts ``a`` up by 10, then the Stirling-type series
        above is summed; no large values are ever subtracted, so the result stays accurate
        for large ``a`` where ``gammaln(a + 1/2) - gammaln(a)`` loses all digits in float32.
    """
    xp = get_namespace(a)
    z = a + float(_HALF_RATIO_SHIFT)
    inv = 1.0 / z
    inv2 = inv * inv
    value = 0.5 * xp.log(z)
    grad = 0.5 * inv
    power = inv  # z^(1-k) for the current k
    for exponent, coeff in _HALF_RATIO_SERIES:
        value = value + coeff * power
        grad = grad - (coeff * exponent) * power * inv
        power = power * inv2
    for j in range(_HALF_RATIO_SHIFT):
        aj = a + float(j)
        value = value - xp.log1p(0.5 / aj)
        grad = grad + 0.5 / (aj * (aj + 0.5))
    return value, grad


def log_gamma_half_ratio(a):
    """``log Gamma(a + 1/2) - log Gamma(a)`` (see :func:`log_gamma_half_ratio_and_grad`)."""
    return log_gamma_half_ratio_and_grad(a)[0]


def logsumexp(a, axis=-1):
    """``log(sum(exp(a), axis))`` without overflow; ``-inf`` entries are allowed."""
    xp = get_namespace(a)
    m = xp.max(a, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    return xp.log(xp.sum(xp.exp(a - m), axis=axis)) + xp.squeeze(m, axis=axis)


# ------------------------------------------------- lgamma, digamma, trigamma (x > 0)
_GAMMA_SHIFT = 10
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def lgamma(x):
    """``log Gamma(x)`` for ``x > 0`` (elementwise, any namespace).

    ``log Gamma(x) = log Gamma(x + 10) - sum_{j<10} log(x + j)`` and Stirling's series at
    ``z = x + 10`` to the ``z^-13`` term (next term < 1e-17 at ``z >= 10``).
    """
    if isinstance(x, np.ndarray):  # one compiled call instead of ~30 array operations
        from scipy.special import gammaln

        return np.asarray(gammaln(x))
    xp = get_namespace(x)
    z = x + float(_GAMMA_SHIFT)
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv * (1.0 / 12.0 + inv2 * (-1.0 / 360.0 + inv2 * (1.0 / 1260.0 + inv2 * (
        -1.0 / 1680.0 + inv2 * (1.0 / 1188.0 + inv2 * (-691.0 / 360360.0 + inv2 / 156.0))))))
    out = (z - 0.5) * xp.log(z) - z + _HALF_LOG_2PI + series
    for j in range(_GAMMA_SHIFT):
        out = out - xp.log(x + float(j))
    return out


def digamma(x):
    """``psi(x) = d log Gamma(x) / dx`` for ``x > 0`` (elementwise, any namespace)."""
    if isinstance(x, np.ndarray):  # one compiled call instead of ~30 array operations
        from scipy.special import digamma as psi

        return np.asarray(psi(x))
    xp = get_namespace(x)
    z = x + float(_GAMMA_SHIFT)
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv2 * (1.0 / 12.0 + inv2 * (-1.0 / 120.0 + inv2 * (1.0 / 252.0 + inv2 * (
        -1.0 / 240.0 + inv2 * (1.0 / 132.0 + inv2 * (-691.0 / 32760.0 + inv2 / 12.0))))))
    out = xp.log(z) - 0.5 * inv - series
    for j in range(_GAMMA_SHIFT):
        out = out - 1.0 / (x + float(j))
    return out


def trigamma(x):
    """``psi'(x)`` for ``x > 0`` (elementwise, any namespace)."""
    z = x + float(_GAMMA_SHIFT)
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv * inv2 * (1.0 / 6.0 + inv2 * (-1.0 / 30.0 + inv2 * (1.0 / 42.0 + inv2 * (
        -1.0 / 30.0 + inv2 * (5.0 / 66.0 + inv2 * (-691.0 / 2730.0 + inv2 * 7.0 / 6.0))))))
    out = inv + 0.5 * inv2 + series
    for j in range(_GAMMA_SHIFT):
        xj = x + float(j)
        out = out + 1.0 / (xj * xj)
    return out


# psi'(z) ~ sum_p c_p / z^p at z >= 10: (p, c_p) of 1/z + 1/(2 z^2) + sum B_2n / z^(2n+1)
_TRIGAMMA_SERIES = ((1, 1.0), (2, 0.5), (3, 1.0 / 6.0), (5, -1.0 / 30.0), (7, 1.0 / 42.0),
                    (9, -1.0 / 30.0), (11, 5.0 / 66.0), (13, -691.0 / 2730.0), (15, 7.0 / 6.0))


def trigamma_difference(a, h):
    """``psi'(a) - psi'(a + h)`` for ``a > 0``, ``h >= 0``, without cancellation.

    Each term of the recurrence and of the asymptotic series is differenced in closed form
    (``1/x^p - 1/y^p = (y - x) sum_i y^i x^(p-1-i) / (x y)^p``), so the result keeps full
    relative precision when ``h << a``, where ``psi'(a) - psi'(a + h)`` computed as a
    difference loses ``log10(a / h)`` digits (the Fisher's ``nu`` entry needs it for large
    ``nu``).
    """
    b = a + h
    out = 0.0 * a
    for j in range(_GAMMA_SHIFT):
        x, y = a + float(j), b + float(j)
        out = out + h * (x + y) / (x * x * y * y)
    ix, iy = 1.0 / (a + float(_GAMMA_SHIFT)), 1.0 / (b + float(_GAMMA_SHIFT))
    for p, c in _TRIGAMMA_SERIES:
        # (y^p - x^p) / (x y)^p = (y - x) sum_i x^-(i+1) y^-(p-i): no overflow in float32.
        term = 0.0 * a
        for i in range(p):
            term = term + ix ** (i + 1) * iy ** (p - i)
        out = out + c * h * term
    return out


def multigammaln(a, dim: int):
    """Log multivariate gamma ``log Gamma_D(a)`` elementwise, for ``a > (D - 1) / 2``."""
    out = (dim * (dim - 1) / 4.0) * math.log(math.pi)
    for d in range(dim):
        out = out + lgamma(a - 0.5 * d)
    return out


def multidigamma(a, dim: int):
    """``sum_{d=0}^{D-1} psi(a - d / 2)`` elementwise (the derivative of ``multigammaln``)."""
    out = digamma(a)
    for d in range(1, dim):
        out = out + digamma(a - 0.5 * d)
    return out


def bessel_ive_host(max_order: int, x: float) -> list:
    """``[ive_0(x), ..., ive_{max_order + 1}(x)]``, ``ive_j(x) = I_j(x) exp(-x)`` (the
    exponentially scaled modified Bessel functions of the first kind) for one host scalar
    ``x >= 0``, as Python floats (SciPy; one more order than asked, for derivatives:
    ``d ive_j / dx = (ive_{j-1} + ive_{j+1}) / 2 - ive_j``, ``ive_{-1} = ive_1``)."""
    from scipy.special import ive

    return [float(v) for v in ive(np.arange(max_order + 2, dtype=np.float64), float(x))]
