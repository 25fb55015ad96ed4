"""Kernels from expressions such as ``"rbf + rbf*periodic + rq + white"`` (for command lines).

Grammar (whitespace ignored, names case-insensitive)::

    expression := term ("+" term)*
    term       := factor ("*" factor)*
    factor     := NAME | "(" expression ")"

``*`` binds tighter than ``+``; a chain ``a + b + c`` becomes one three-part :class:`Sum` (and
likewise for products), so parameters are named ``"0.lengthscale"``, ``"1.0.variance"``...
"""

from __future__ import annotations

import re

from gpnum.errors import check_int

__all__ = ["KERNEL_NAMES", "from_expression"]


def _ones(n, ard):
    return [1.0] * n if ard else 1.0


def _factories():
    from gpnum.kernels._arccos import ArcCosine
    from gpnum.kernels._linear import Constant, Linear, White
    from gpnum.kernels._periodic import Cosine, Periodic
    from gpnum.kernels._polynomial import Polynomial
    from gpnum.kernels._rq import RationalQuadratic
    from gpnum.kernels._sho import SHO
    from gpnum.kernels._stationary import RBF, Matern12, Matern32, Matern52

    def stationary(cls):
        return lambda d, ard, ns: cls(lengthscale=_ones(d, ard), **ns)

    return {
        "rbf": stationary(RBF),
        "matern12": stationary(Matern12),
        "exponential": stationary(Matern12),
        "matern32": stationary(Matern32),
        "matern52": stationary(Matern52),
        "rq": stationary(RationalQuadratic),
        "periodic": lambda d, ard, ns: Periodic(RBF(lengthscale=_ones(d, ard), **ns),
                                                period=_ones(d, ard)),
        "cosine": stationary(Cosine),
        "linear": lambda d, ard, ns: Linear(variance=_ones(d, ard), **ns),
        "constant": lambda d, ard, ns: Constant(**ns),
        "white": lambda d, ard, ns: White(**ns),
        "polynomial": lambda d, ard, ns: Polynomial(**ns),
        "arccos": lambda d, ard, ns: ArcCosine(**ns),
        "sho": lambda d, ard, ns: SHO(**ns),
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


def from_expression(expression, *, input_dim, ard=False, xp=None, dtype=None, device=None):
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
    xp, dtype, device : optional
        Namespace, floating dtype and device of the parameters (as for every kernel).

    Returns
    -------
    Kernel
        Every parameter starts at 1 (``rq``'s alpha too).

    Raises
    ------
    ValueError
        One line naming an unknown kernel name, or the position of a syntax error.

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

    def parse_expression():
        parts = [parse_term()]
        while peek() is not None and peek()[1] == "+":
            pos[0] += 1
            parts.append(parse_term())
        return parts[0] if len(parts) == 1 else Sum(*parts)

    def parse_term():
        parts = [parse_factor()]
        while peek() is not None and peek()[1] == "*":
            pos[0] += 1
            parts.append(parse_factor())
        return parts[0] if len(parts) == 1 else Product(*parts)

    def parse_factor():
        tok = peek()
        if tok is not None and tok[0] == "name":
            pos[0] += 1
            key = tok[1].lower()
            if key not in factories:
                fail(f"unknown kernel name {tok[1]!r} at position {tok[2]}; known names: "
                     f"{', '.join(KERNEL_NAMES)}")
            return factories[key](d, ard, ns)
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
    kernel = parse_expression()
    if peek() is not None:
        fail(f"expected '+', '*' or the end, got {where(peek())}")
    return kernel
