"""Kernels from expressions such as ``"rbf + rbf*periodic + rq + white"`` (for command lines).

Grammar (whitespace ignored, names case-insensitive)::

    expression := term ("+" term)*
    term       := factor ("*" factor)*
    factor     := NAME | "(" expression ")"

``*`` binds tighter than ``+``; a chain ``a + b + c`` becomes one three-part :class:`Sum` (and
likewise for products), so parameters are named ``"0.lengthscale"``, ``"1.0.variance"``...
"""

from __future__ import annotations

import math
import re

from gpnum.errors import check_int

__all__ = ["KERNEL_NAMES", "from_expression"]


def _ones(n, ard):
    return [1.0] * n if ard else 1.0


#: Kernel names whose lengthscale measures distances in the inputs' own units: the ones that
#: :func:`from_expression` spreads over the inputs' scales when it is given data.
_STATIONARY = frozenset({"rbf", "matern12", "exponential", "matern32", "matern52", "rq"})


class _Starts:
    """Starting values of one expression's parameters: every parameter at 1 without data, or
    values read off the data (:func:`from_expression`, "Starting values")."""

    def __init__(self, d, ard, num_stationary, num_terms, X=None, y=None):
        self.d, self.ard = d, ard
        self.variance = 1.0
        self.white = 1.0
        self.linear = _ones(d, ard)
        self._lengthscales = [_ones(d, ard)] * num_stationary
        self._longest = None
        self._y_given = y is not None
        if y is not None:
            y_var = max(_host_var(y), 1e-12)
            self.variance = y_var / num_terms
            self.white = 0.1 * self.variance
        if X is not None:
            longest, shortest, mean_sq = _input_scales(X, d)
            self._longest = longest
            if y is not None:
                # a linear term alone would explain the targets' variance: sum_j v_j E[x_j^2]
                self.linear = ([self.variance / (d * m) for m in mean_sq] if ard
                               else self.variance / sum(mean_sq))
            self._lengthscales = [_spread(longest, shortest, j, num_stationary, ard)
                                  for j in range(num_stationary)]
        self._next = 0

    def lengthscale(self):
        value = self._lengthscales[self._next]
        self._next += 1
        return value

    def term_variances(self, first_lengthscales):
        """Variances of the top-level terms, given the index of each term's first stationary
        lengthscale (None for a term without one), and the white term's start.

        With data, the terms that have a lengthscale share their part of ``var(y)`` (``var(y)
        / T`` each) in proportion to those lengthscales relative to the inputs' ranges: a
        long-range term starts with the most variance, a short-range one with little, as in
        most signals whose spectrum falls with frequency. Equal shares would start every
        short-range term as large as the trend, and a gradient method then turns it into a
        second trend (on the CO2 study: LML -120.86 against -115.05)."""
        n = len(first_lengthscales)
        if self._longest is None or not self._y_given:
            return [self.variance] * n
        ratios = [None if i is None else self._ratio(self._lengthscales[i])
                  for i in first_lengthscales]
        scaled = [r for r in ratios if r is not None]
        if len(scaled) < 2:
            return [self.variance] * n
        share, total = self.variance * len(scaled), math.fsum(scaled)
        out = [self.variance if r is None else share * r / total for r in ratios]
        self.white = 0.1 * min(out)
        return out

    def _ratio(self, lengthscale):
        """A start lengthscale over the inputs' range: the geometric mean over columns for
        one per column, the value over the mean range for a shared one."""
        if isinstance(lengthscale, list):
            logs = [math.log(v / hi) for v, hi in zip(lengthscale, self._longest, strict=True)]
            return math.exp(math.fsum(logs) / len(logs))
        return lengthscale / (math.fsum(self._longest) / len(self._longest))


def _host_var(y):
    from gpnum.backend import to_numpy

    y = to_numpy(y).astype("float64").reshape(-1)
    return float(y.var()) if y.size > 1 else 1.0


def _input_scales(X, d):
    """Per input column: its range, the median gap between neighbouring distinct values and its
    mean square, on the host (a start is computed once)."""
    import numpy as np

    from gpnum.backend import to_numpy

    X = to_numpy(X).astype(np.float64)
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"X: expected an (n, {d}) array for input_dim={d}, got shape "
                         f"{tuple(X.shape)}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X: contains NaN or infinite values")
    longest, shortest, mean_sq = [], [], []
    for j in range(d):
        u = np.unique(X[:, j])
        span = float(u[-1] - u[0]) if u.size > 1 else 1.0
        gap = float(np.median(np.diff(u))) if u.size > 2 else span
        longest.append(span if span > 0 else 1.0)
        shortest.append(min(max(gap, 1e-12), longest[-1]))
        mean_sq.append(max(float(np.mean(X[:, j] ** 2)), 1e-12))
    return longest, shortest, mean_sq


def _spread(longest, shortest, j, count, ard):
    """The ``j``-th of ``count`` lengthscales spaced geometrically from the inputs' range down
    to a few gaps between neighbouring points (one term alone gets a fifth of the range):
    additive terms of one kind that start equal get equal gradients and never part."""
    out = []
    for hi, lo in zip(longest, shortest, strict=True):
        lo = min(4.0 * lo, hi)
        if count == 1:
            out.append(0.2 * hi)
        else:
            out.append(hi * (lo / hi) ** (j / (count - 1)))
    return out if ard else sum(out) / len(out)


def _factories():
    from gpnum.kernels._arccos import ArcCosine
    from gpnum.kernels._linear import Constant, Linear, White
    from gpnum.kernels._periodic import Cosine, Periodic
    from gpnum.kernels._polynomial import Polynomial
    from gpnum.kernels._rq import RationalQuadratic
    from gpnum.kernels._sho import SHO
    from gpnum.kernels._stationary import RBF, Matern12, Matern32, Matern52

    def stationary(cls):
        return lambda s, ns, v: cls(lengthscale=s.lengthscale(), variance=v, **ns)

    return {
        "rbf": stationary(RBF),
        "matern12": stationary(Matern12),
        "exponential": stationary(Matern12),
        "matern32": stationary(Matern32),
        "matern52": stationary(Matern52),
        "rq": lambda s, ns, v: RationalQuadratic(lengthscale=s.lengthscale(), variance=v, **ns),
        "periodic": lambda s, ns, v: Periodic(RBF(lengthscale=_ones(s.d, s.ard), variance=v,
                                                  **ns), period=_ones(s.d, s.ard)),
        "cosine": lambda s, ns, v: Cosine(lengthscale=_ones(s.d, s.ard), variance=v, **ns),
        "linear": lambda s, ns, v: Linear(variance=s.linear, **ns),
        "constant": lambda s, ns, v: Constant(variance=v, **ns),
        "white": lambda s, ns, v: White(variance=s.white, **ns),
        "polynomial": lambda s, ns, v: Polynomial(variance=v, **ns),
        "arccos": lambda s, ns, v: ArcCosine(**ns),
        "sho": lambda s, ns, v: SHO(variance=v, **ns),
    }


#: The kernel names :func:`from_expression` knows.
KERNEL_NAMES = ("rbf", "matern12", "exponential", "matern32", "matern52", "rq", "periodic",
                "cosine", "linear", "constant", "white", "polynomial", "arccos", "sho")

_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[+*()])|(?P<bad>\S))")


def _tokens(text):
    out = []
    pos = 0
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:  # only whitespace left
            break
        kind = m.lastgroup
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


def from_expression(expression, *, input_dim, ard=False, X=None, y=None, xp=None, dtype=None,
                    device=None):
    """Build a kernel from a string of kernel names joined by ``+``, ``*`` and parentheses.

    Parameters
    ----------
    expression : str
        For example ``"rbf + rbf*periodic + rq + white"`` or ``"(linear + constant) * rbf"``.
        Names (case-insensitive): ``rbf``, ``matern12`` (= ``exponential``), ``matern32``,
        ``matern52``, ``rq`` (rational quadratic), ``periodic`` (RBF base), ``cosine``,
        ``linear``, ``constant``, ``white``, ``polynomial`` (degree 2), ``arccos``, ``sho``
        (:class:`gpnum.kernels.SHO`, one column only).
    input_dim : int
        Number of input columns ``d``.
    ard : bool
        One lengthscale (periodic: and period; linear: variance) per input column (shape
        (d,)) instead of a shared scalar.
    X : array (n, input_dim), optional
        Training inputs: lengthscales start from their scales (below).
    y : array (n,), optional
        Training targets: variances start from their variance (below).
    xp, dtype, device : optional
        Namespace, floating dtype and device of the parameters (as for every kernel).

    Returns
    -------
    Kernel
        Without data every parameter starts at 1 (``rq``'s alpha too).

    Notes
    -----
    Starting values from data (a start only: every value is learned). With ``y``, each of the
    ``T`` additive terms of the top-level sum starts with variance ``var(y) / T`` (in a product
    the first factor carries it, the others start at 1), ``white`` with a tenth of that, and
    ``linear`` with the variance that alone explains ``var(y) / T`` (given ``X``). With ``X``
    and ``y`` and two or more terms that have a lengthscale, those terms share their part of
    ``var(y)`` in proportion to their starting lengthscales over the inputs' range (the first
    stationary lengthscale of each term; a geometric mean over columns for ``ard``), and
    ``white`` starts at a tenth of the smallest term's variance. With ``X``,
    the ``J`` lengthscales of the stationary kernels (``rbf``, ``matern*``, ``rq``) are spaced
    geometrically, in the order they are written, from each column's range down to four
    times the median gap between its neighbouring values; one alone starts at a fifth of the
    range. Terms of one kind that start equal receive equal gradients and stay equal, so
    ``"rbf + rbf*periodic + rq + rbf + white"`` should list its long-range terms first, as
    one writes them anyway. ``periodic``'s period and smoothness and ``cosine``'s period start
    at 1: the data do not say them (set them yourself, e.g. a year in the data's time unit).

    Raises
    ------
    ValueError
        One line naming an unknown kernel name, or the position of a syntax error; ``X`` of
        the wrong shape or not finite.

    Examples
    --------
    >>> from gpnum.kernels import from_expression
    >>> k = from_expression("rbf + rbf*periodic + white", input_dim=1, xp="numpy")
    >>> sorted(k.parameters())[:3]
    ['0.lengthscale', '0.variance', '1.0.lengthscale']
    """
    from gpnum.kernels._composite import Product, Sum

    if not isinstance(expression, str):
        raise TypeError(f"expression: expected a string such as 'rbf + white', got "
                        f"{type(expression).__name__}")
    d = check_int(input_dim, "input_dim", minimum=1, expected="a positive integer")
    if isinstance(xp, str):
        from gpnum.backend import namespace_by_name

        xp = namespace_by_name(xp)
    ns = {"xp": xp, "dtype": dtype, "device": device}
    factories = _factories()
    tree = _parse(expression, factories)
    leaves = list(_leaf_names(tree))
    terms = tree[1] if tree[0] == "+" else [tree]
    starts = _Starts(d, ard, sum(name in _STATIONARY for name in leaves),
                     len([t for t in terms if t != ("leaf", "white")]) or 1, X=X, y=y)

    def build(node, variance):
        kind, value = node
        if kind == "leaf":
            return factories[value](starts, ns, variance)
        if kind == "*":  # the first factor carries the term's variance
            return Product(*[build(f, variance if i == 0 else 1.0) for i, f in enumerate(value)])
        return Sum(*[build(t, variance) for t in value])

    # each top-level term's first stationary lengthscale, in the order they are handed out
    firsts, count = [], 0
    for term in terms:
        kinds = [name in _STATIONARY for name in _leaf_names(term)]
        firsts.append(count + kinds.index(True) if any(kinds) else None)
        count += sum(kinds)
    variances = starts.term_variances(firsts)
    if tree[0] == "+":
        return Sum(*[build(t, v) for t, v in zip(terms, variances, strict=True)])
    return build(tree, variances[0])


def _leaf_names(node):
    kind, value = node
    if kind == "leaf":
        yield value
    else:
        for child in value:
            yield from _leaf_names(child)


def _parse(expression, factories):
    """The expression as a tree of ``("leaf", name)``, ``("+", parts)`` and ``("*", parts)``."""
    toks = _tokens(expression)
    pos = [0]

    def fail(msg):
        raise ValueError(f"kernel expression {expression!r}: {msg}")

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def where(tok):
        if tok is None:
            return "the end"
        if tok[0] == "bad":
            fail(f"unexpected character {tok[1]!r} at position {tok[2]}")
        return f"{tok[1]!r} at position {tok[2]}"

    def parse_chain(op, parse_part):
        parts = [parse_part()]
        while peek() is not None and peek()[1] == op:
            pos[0] += 1
            parts.append(parse_part())
        return parts[0] if len(parts) == 1 else (op, parts)

    def parse_expression():
        return parse_chain("+", parse_term)

    def parse_term():
        return parse_chain("*", parse_factor)

    def parse_factor():
        tok = peek()
        if tok is not None and tok[0] == "name":
            pos[0] += 1
            key = tok[1].lower()
            if key not in factories:
                fail(f"unknown kernel name {tok[1]!r} at position {tok[2]}; known names: "
                     f"{', '.join(KERNEL_NAMES)}")
            return ("leaf", key)
        if tok is not None and tok[1] == "(":
            pos[0] += 1
            inner = parse_expression()
            close = peek()
            if close is None or close[1] != ")":
                fail(f"expected ')' to close the '(' at position {tok[2]}, got {where(close)}")
            pos[0] += 1
            return inner
        fail(f"expected a kernel name or '(', got {where(tok)}")

    if not toks:
        fail("expected a kernel name, got an empty expression")
    tree = parse_expression()
    if peek() is not None:
        fail(f"expected '+', '*' or the end, got {where(peek())}")
    return tree
