"""Ordered categories: a latent value cut into bins by learned edges (ordinal regression)."""

from __future__ import annotations

import math

from gpnum.backend import asarray, device_of, get_namespace, to_numpy
from gpnum.likelihoods._base import Likelihood
from gpnum.likelihoods._targets import labels_bad, labels_ok
from gpnum.special import log_ndtr

__all__ = ["Ordinal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_HALF = math.log(0.5)
#: stands in for an infinite outer edge, in units of the scale: Phi(-40) underflows to 0
_OUTER = 40.0


def _log1mexp(x):
    """``log(1 - exp(x))`` for ``x < 0`` (Maechler 2012's two branches)."""
    xp = get_namespace(x)
    x = xp.minimum(x, -1e-30)
    return xp.where(x > _LOG_HALF, xp.log(-xp.expm1(x)), xp.log1p(-xp.exp(x)))


def _log_prob_between(a, c):
    """``log(Phi(a) - Phi(c))`` for ``a > c``, from whichever tail keeps the digits."""
    xp = get_namespace(a)
    lower = (a + c) <= 0.0
    big = xp.where(lower, log_ndtr(a), log_ndtr(-c))
    small = xp.where(lower, log_ndtr(c), log_ndtr(-a))
    return big + _log1mexp(small - big)


class Ordinal(Likelihood):
    """``p(y = k | f) = Phi((b_k - f)/sigma) - Phi((b_{k-1} - f)/sigma)`` for ordered labels
    ``y`` in ``0..K-1``, with ``b_{-1} = -inf``, ``b_{K-1} = +inf`` and learned inner edges
    ``b_0 < ... < b_{K-2}`` (Chu & Ghahramani 2005, "Gaussian processes for ordinal
    regression"; GPflow's ``Ordinal`` keeps its edges fixed, here they are learned).

    Parameters
    ----------
    num_classes : int
        ``K >= 2`` ordered classes.
    first_edge : float or array (), optional
        ``b_0`` (natural parameter ``"first_edge"``, unconstrained). Default
        ``-(K - 2)/2``, so that the default edges are centred on zero.
    edge_gaps : array (K - 2,), optional
        ``b_k - b_{k-1} > 0`` (natural parameter ``"edge_gaps"``, softplus): the edges stay
        ordered whatever an optimiser does. Default ones.
    scale : float or array (), default 1.0
        ``sigma > 0``, the width of the probit noise on ``f`` (natural parameter ``"scale"``).
    num_gauss_hermite : int, default 20
    bin_edges : array (K - 1,), optional
        Increasing edges, an alternative to ``first_edge`` and ``edge_gaps``.
    xp, dtype, device : optional

    Notes
    -----
    Variational expectations by the differentiated Gauss-Hermite rule; the log of each bin's
    probability is taken from the tail where it is small (:func:`log_ndtr` on both ends, and
    ``log(1 - exp(.))``), so far-off latent values give finite penalties. With
    ``a = (b_y - f)/sigma``, ``c = (b_{y-1} - f)/sigma``, ``p = Phi(a) - Phi(c)``:
    ``d log p/d f = -(phi(a) - phi(c))/(sigma p)``, ``d/d sigma = -(a phi(a) - c phi(c))/(sigma p)``,
    ``d/d b_y = phi(a)/(sigma p)``, ``d/d b_{y-1} = -phi(c)/(sigma p)``.
    Predictions are exact: ``P(y = k) = Phi((b_k - mu)/s) - Phi((b_{k-1} - mu)/s)``,
    ``s = sqrt(sigma^2 + var)``.
    """

    _param_names = ("first_edge", "edge_gaps", "scale")
    _positive = ("edge_gaps", "scale")

    def __init__(self, num_classes, first_edge=None, edge_gaps=None, scale=1.0,
                 num_gauss_hermite=20, *, bin_edges=None, xp=None, dtype=None, device=None):
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"Ordinal: num_classes must be an integer >= 2, got {num_classes!r}")
        self.num_classes = num_classes
        self._init_likelihood(num_gauss_hermite, xp, dtype, device)
        if bin_edges is not None:
            if first_edge is not None or edge_gaps is not None:
                raise ValueError("Ordinal: give bin_edges or first_edge/edge_gaps, not both")
            values = [float(v) for v in to_numpy(asarray(bin_edges, xp=self.xp, dtype=self.dtype)).reshape(-1).tolist()]
            if len(values) != num_classes - 1 or any(b <= a for a, b in zip(values, values[1:], strict=False)):
                raise ValueError(f"Ordinal: bin_edges must be {num_classes - 1} increasing "
                                 f"numbers, got {values}")
            first_edge = values[0]
            edge_gaps = asarray([b - a for a, b in zip(values, values[1:], strict=False)], xp=self.xp,
                                dtype=self.dtype, device=device)
        if first_edge is None:
            first_edge = -0.5 * (num_classes - 2)
        self.first_edge = first_edge
        if edge_gaps is None:
            edge_gaps = self.xp.ones((num_classes - 2,), dtype=self.dtype,
                                     device=device_of(self.first_edge))
        self.edge_gaps = edge_gaps
        if tuple(self.edge_gaps.shape) != (num_classes - 2,):
            raise ValueError(f"Ordinal: edge_gaps must have shape ({num_classes - 2},), got "
                             f"{tuple(self.edge_gaps.shape)}")
        self.scale = scale

    # -- targets -------------------------------------------------------------------------------

    def _targets_ok(self, xp, y):
        return labels_ok(xp, y, self.num_classes)

    def _targets_message(self, xp, y):
        from gpnum.likelihoods._targets import describe_bad

        top = self.num_classes - 1
        bad = labels_bad(xp, y, self.num_classes)
        return describe_bad(self, xp, y, bad, f"integer labels in 0..{top}")

    # -- edges ---------------------------------------------------------------------------------

    def _cumulate(self, like):
        """(K - 1, K - 2) lower-triangular ones: edges = first + T @ gaps."""
        xp = get_namespace(like)
        k = self.num_classes - 1
        i = xp.arange(k, device=device_of(like))[:, None]
        j = xp.arange(k - 1, device=device_of(like))[None, :]
        return xp.astype(j < i, like.dtype)

    def bin_edges(self, like=None):
        """The inner edges ``b_0 < ... < b_{K-2}``, shape (K - 1,)."""
        p = self._params_like(self.first_edge if like is None else like)
        gaps = p["edge_gaps"]
        return p["first_edge"] + self._cumulate(gaps) @ gaps

    def _edge_terms(self, xp, yf, mu_like):
        """Per point: upper and lower edge values (n,), masks of the outer classes, one-hot
        matrices (n, K - 1) selecting the upper and lower edge."""
        edges = self.bin_edges(mu_like)
        k = self.num_classes - 1
        idx = xp.arange(k, device=device_of(mu_like))
        yi = xp.astype(yf, xp.int64)
        up_hot = xp.astype(yi[:, None] == idx[None, :], mu_like.dtype)
        low_hot = xp.astype(yi[:, None] == (idx[None, :] + 1), mu_like.dtype)
        return up_hot @ edges, low_hot @ edges, yi == k, yi == 0, up_hot, low_hot

    def _log_prob(self, yf, f, want_grad):
        """``log p(y | f)`` at ``f`` (n, q), and with ``want_grad`` d/df, d/dsigma (n, q) and
        d/d(upper edge), d/d(lower edge) (n, q)."""
        xp = get_namespace(f)
        sigma = self._params_like(f)["scale"]
        up, low, top, bottom, _, _ = self._edge_terms(xp, yf, f)
        a = xp.where(top[:, None], _OUTER, (up[:, None] - f) / sigma)
        c = xp.where(bottom[:, None], -_OUTER, (low[:, None] - f) / sigma)
        logp = _log_prob_between(a, c)
        if not want_grad:
            return logp, None
        neg_inf = xp.full_like(a, float("-inf"))
        log_pdf_a = xp.where(top[:, None], neg_inf, -0.5 * a * a - _HALF_LOG_2PI)
        log_pdf_c = xp.where(bottom[:, None], neg_inf, -0.5 * c * c - _HALF_LOG_2PI)
        da = xp.exp(log_pdf_a - logp)  # d logp / da
        dc = -xp.exp(log_pdf_c - logp)  # d logp / dc
        a0 = xp.where(top[:, None], xp.zeros_like(a), a)
        c0 = xp.where(bottom[:, None], xp.zeros_like(c), c)
        return logp, (-(da + dc) / sigma, -(a0 * da + c0 * dc) / sigma, da / sigma, dc / sigma)

    # -- public API ----------------------------------------------------------------------------

    def log_density(self, y, f):
        """``log p(y | f)`` (n,) for labels ``y`` (n,) and latent values ``f`` (n,)."""
        self._check_latents(f, f)
        self._check_y_array(y, f.shape[0])
        xp = get_namespace(y, f)
        yf = y if y.dtype == f.dtype else xp.astype(y, f.dtype)
        return self._log_prob(yf, f[:, None], False)[0][:, 0]

    def _variational_expectations(self, xp, y, mu, var, want_grad):
        """Per-point ``E[log p(y | f)]`` (n,) by Gauss-Hermite quadrature; with ``want_grad``,
        gradients ``"mu"``, ``"var"`` (n,) from the differentiated rule and ``"params"`` for
        ``first_edge`` (), ``edge_gaps`` (K - 2,) and ``scale`` () (of the sum over points)."""
        if not want_grad:
            def value_block(yb, mb, vb):
                f, t, w, logw, sd = self._nodes(mb, vb)
                return (self._log_prob(yb, f, False)[0] @ w,)

            return self._map_blocks(value_block, (y, mu, var), self.num_gauss_hermite)[0]

        def block(yb, mb, vb):
            f, t, w, logw, sd = self._nodes(mb, vb)
            logp, (d_f, d_sigma, d_up, d_low) = self._log_prob(yb, f, True)
            _, _, _, _, up_hot, low_hot = self._edge_terms(xp, yb, mb)
            g_edges = (d_up @ w) @ up_hot + (d_low @ w) @ low_hot  # (K - 1,)
            return (logp @ w, d_f @ w, ((d_f * t) @ w) / sd,
                    xp.reshape(xp.sum(d_sigma @ w), (1,)), g_edges[None, :])

        ve, g_mu, g_var, g_sigma, g_edges = self._map_blocks(
            block, (y, mu, var), self.num_gauss_hermite)
        g_edges = xp.sum(g_edges, axis=0)
        gaps = self._params_like(mu)["edge_gaps"]
        params = {"first_edge": xp.reshape(xp.sum(g_edges), tuple(self.first_edge.shape)),
                  "edge_gaps": g_edges @ self._cumulate(gaps),
                  "scale": xp.reshape(xp.sum(g_sigma), tuple(self.scale.shape))}
        return ve, {"mu": g_mu, "var": g_var, "params": params}

    def _class_log_probs(self, mu, var):
        """(n, K) exact log class probabilities under ``f ~ N(mu, var)``."""
        xp = get_namespace(mu)
        sigma = self._params_like(mu)["scale"]
        s = xp.sqrt(sigma * sigma + var)
        z = (self.bin_edges(mu)[None, :] - mu[:, None]) / s[:, None]  # (n, K - 1)
        n = mu.shape[0]
        hi = xp.concat([z, xp.full((n, 1), _OUTER, dtype=mu.dtype, device=device_of(mu))],
                       axis=1)
        lo = xp.concat([xp.full((n, 1), -_OUTER, dtype=mu.dtype, device=device_of(mu)), z],
                       axis=1)
        return _log_prob_between(hi, lo)

    def predictive_log_density(self, y, mu, var, *, check=True):
        """Per-point ``log P(y | mu, var)`` (n,), exact (see the class notes)."""
        xp, yf = self._validate(y, mu, var, check)
        logp = self._class_log_probs(mu, var)
        classes = xp.arange(self.num_classes, device=device_of(mu))
        hot = xp.astype(xp.astype(yf, xp.int64)[:, None] == classes[None, :], mu.dtype)
        return xp.sum(hot * logp, axis=1)

    def predict_mean_and_var(self, mu, var, *, check=True):
        """Class probabilities ``p`` (n, K) and ``p (1 - p)`` (n, K), exact."""
        xp, _ = self._validate(None, mu, var, check)
        p = xp.exp(self._class_log_probs(mu, var))
        return p, p * (1.0 - p)

    def __repr__(self):
        edges = to_numpy(self.bin_edges()).tolist()
        return (f"Ordinal(num_classes={self.num_classes}, bin_edges={edges!r}, "
                f"scale={to_numpy(self.scale).tolist()!r}, "
                f"num_gauss_hermite={self.num_gauss_hermite})")
