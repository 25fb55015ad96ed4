"""Gauss-Hermite rule for expectations under a univariate Gaussian.

``E_{N(f; mu, v)}[g(f)] ~= sum_i w_i g(mu + sqrt(2 v) t_i)`` with ``t_i`` the roots of the
physicists' Hermite polynomial ``H_q`` and ``w_i`` its weights divided by ``sqrt(pi)`` (so that
they sum to one). Exact for polynomials ``g`` of degree ``<= 2 q - 1``. Nodes and weights are
computed once on the host in float64 (``numpy.polynomial.hermite.hermgauss``) and moved to the
working namespace, dtype and device; the likelihoods cache them per (namespace, dtype, device).
"""

from __future__ import annotations

import math

import numpy as np

from gpnum.backend import asarray

__all__ = ["gauss_hermite"]


#: NumPy's Golub-Welsch weights underflow to NaN beyond ~360 nodes; 300 keeps a margin
MAX_NODES = 300


def _host_rule(num_points: int):
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)) \
            or not 1 <= num_points <= MAX_NODES:
        raise ValueError(f"num_gauss_hermite: expected an integer in [1, {MAX_NODES}], got "
                         f"{num_points!r}")
    t, w = np.polynomial.hermite.hermgauss(int(num_points))
    # log-weights straight from the host values: in float32 the smallest weights of a large
    # rule underflow to zero, but their logarithms (used by predictive densities) do not
    return t, w / math.sqrt(math.pi), np.log(w) - 0.5 * math.log(math.pi)


def gauss_hermite(num_points: int, like=None, *, xp=None, dtype=None, device=None):
    """Nodes, normalised weights and log-weights of the ``num_points``-point Gauss-Hermite rule.

    Parameters
    ----------
    num_points : int
        Number of nodes ``q``, ``1 <= q <= 300``.
    like : array, optional
        An array whose namespace, dtype and device the results take.
    xp, dtype, device : optional
        Target namespace, dtype and device when ``like`` is not given.

    Returns
    -------
    nodes : array (q,)
        Roots ``t_i`` of ``H_q``, ascending.
    weights : array (q,)
        ``w_i / sqrt(pi)``, summing to one: ``E[g(f)] ~= sum_i weights_i g(mu + sqrt(2 v) t_i)``.
    log_weights : array (q,)
        ``log(weights)`` computed in float64 before the cast (finite even where a float32
        weight underflows).
    """
    t, w, logw = _host_rule(num_points)
    kw = dict(dtype=dtype, like=like, xp=xp, device=device)
    return asarray(t, **kw), asarray(w, **kw), asarray(logw, **kw)
