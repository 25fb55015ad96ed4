"""gpnum CIQ vs linear_operator's contour_integral_quad, same matrix, same settings, one process.

    python ciq_vs_linear_operator.py [threads=2] [m=1000,2000] [lengthscales=0.3] [rhs=random|kzx] [timing=best|first]

Matern-5/2 on m uniform points in the unit square, jitter 1e-4 (shorter lengthscales give
flatter, harder spectra), k = 256 right-hand sides, Q = 15, tolerance 1e-3, at most 200
iterations, float64. Prints the time of each (best of 5 for gpnum, 3 for the peer), its error against a dense eigh, and
the products with K of each, in units of one (m, m) x (m, 256) product: gpnum's msMINRES
iterations plus its eigenpair search, linear_operator's MINRES iterations plus its Lanczos.
``rhs=kzx``: B = K_ZX, the whitening case (the same kernel between the m points and 256 other
uniform points) instead of a standard-normal B. ``timing=first``: gpnum's time is that of its
first call on each matrix (as a user meets it; before any peer call), not the best of 5.
Peers stay in a scratch venv (torch, linear_operator); run on a quiet machine.
"""
import sys, time, warnings
import numpy as np
import torch
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)
from linear_operator import settings
from linear_operator.operators import DenseLinearOperator
from linear_operator.utils.contour_integral_quad import contour_integral_quad
from gpnum.ciq import inv_sqrt_matmul
from gpnum.linalg import AddedDiag, Dense, Diagonal


class CountingDense(DenseLinearOperator):
    """linear_operator's dense operator, counting the columns of its products."""
    columns = 0

    def _matmul(self, rhs):
        CountingDense.columns += rhs.shape[-1] if rhs.dim() > 1 else 1
        return super()._matmul(rhs)


def matern(m, lengthscale, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(m, 2))
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)) / lengthscale
    return (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)

def best(f, reps):
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter(); out = f(); ts.append(time.perf_counter() - t0)
    return min(ts), out

warnings.simplefilter("ignore")
sizes = [int(a) for a in (sys.argv[2] if len(sys.argv) > 2 else "1000,2000").split(",")]
lengthscales = [float(a) for a in (sys.argv[3] if len(sys.argv) > 3 else "0.3").split(",")]
rhs = sys.argv[4] if len(sys.argv) > 4 else "random"
timing = sys.argv[5] if len(sys.argv) > 5 else "best"


def matern_cross(m, k, lengthscale, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.uniform(size=(m, 2))  # the same points as matern(m, lengthscale, seed)
    x = np.random.default_rng(seed + 100).uniform(size=(k, 2))
    d = np.sqrt(((z[:, None] - x[None]) ** 2).sum(-1)) / lengthscale
    return (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)


print(f"rhs {rhs}, gpnum timed on its {'first call' if timing == 'first' else 'best of 5'}",
      flush=True)
for m in sizes:
    for ls in lengthscales:
        K0 = matern(m, ls); K = K0 + 1e-4 * np.eye(m)
        if rhs == "kzx":
            B = matern_cross(m, 256, ls)
        else:
            B = np.random.default_rng(1).standard_normal((m, 256))
        w, V = np.linalg.eigh(K); ref = (V / np.sqrt(w)) @ (V.T @ B)
        op = AddedDiag(Dense(K0, symmetric=True), Diagonal(np.asarray(1e-4), m))
        tg, rg = best(lambda: inv_sqrt_matmul(op, B, num_quad=15, rtol=1e-3, maxiter=200),
                      1 if timing == "first" else 5)
        eg = np.linalg.norm(rg.x - ref) / np.linalg.norm(ref)
        Kt, Bt = torch.tensor(K), torch.tensor(B)
        def peer():
            CountingDense.columns = 0
            with torch.no_grad(), settings.minres_tolerance(1e-3), settings.max_cg_iterations(200):
                solves, weights, _, _ = contour_integral_quad(CountingDense(Kt), Bt, inverse=True,
                                                              num_contour_quadrature=15)
                return (solves * weights).sum(0)
        tp, xp_ = best(peer, 3)
        ep = np.linalg.norm(xp_.numpy() - ref) / np.linalg.norm(ref)
        tgemm, _ = best(lambda: K @ B, 5)
        # products with K in units of one (m, m) x (m, 256) GEMM (the Lanczos bounds: 30 vectors)
        units = rg.num_iter + (rg.deflation_products + 30) / B.shape[1]
        units_peer = CountingDense.columns / B.shape[1]
        print(f"m={m} ls={ls} (cond {w[-1]/w[0]:.1e}): gpnum {tg:.3f} s (iters {rg.num_iter}, "
              f"deflated {rg.num_deflated}, products {units:.1f}, info {rg.info}, rel.err {eg:.1e}, "
              f"floor ratio {tg / (units * tgemm):.2f}) | linear_operator {tp:.3f} s (products "
              f"{units_peer:.1f}, rel.err {ep:.1e}) | speed-up {tp / tg:.1f}x", flush=True)
