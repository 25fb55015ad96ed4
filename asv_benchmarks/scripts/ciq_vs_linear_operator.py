"""gpnum CIQ vs linear_operator's contour_integral_quad, same matrix, same settings, one process."""
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

def matern(m, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(m, 2))
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)) / 0.3
    return (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)

def best(f, reps):
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter(); out = f(); ts.append(time.perf_counter() - t0)
    return min(ts), out

warnings.simplefilter("ignore")
for m in [int(a) for a in (sys.argv[2] if len(sys.argv) > 2 else "1000,2000").split(",")]:
    K0 = matern(m); K = K0 + 1e-4 * np.eye(m)
    B = np.random.default_rng(1).standard_normal((m, 256))
    w, V = np.linalg.eigh(K); ref = (V / np.sqrt(w)) @ (V.T @ B)
    op = AddedDiag(Dense(K0, symmetric=True), Diagonal(np.asarray(1e-4), m))
    tg, rg = best(lambda: inv_sqrt_matmul(op, B, num_quad=15, rtol=1e-3, maxiter=200), 2)
    eg = np.linalg.norm(rg.x - ref) / np.linalg.norm(ref)
    Kt, Bt = torch.tensor(K), torch.tensor(B)
    def peer():
        with torch.no_grad(), settings.minres_tolerance(1e-3), settings.max_cg_iterations(200):
            solves, weights, _, _ = contour_integral_quad(DenseLinearOperator(Kt), Bt, inverse=True,
                                                          num_contour_quadrature=15)
            return (solves * weights).sum(0)
    tp, xp_ = best(peer, 2)
    ep = np.linalg.norm(xp_.numpy() - ref) / np.linalg.norm(ref)
    tgemm, _ = best(lambda: K @ B, 5)
    # products with K in units of one (m, m) x (m, 256) GEMM: iterations plus the eigenpair search
    units = rg.num_iter + rg.deflation_products / B.shape[1]
    print(f"m={m}: gpnum {tg:.3f} s (iters {rg.num_iter}, deflated {rg.num_deflated}, info "
          f"{rg.info}, rel.err {eg:.2e}, floor ratio {tg / (units * tgemm):.2f}) | "
          f"linear_operator {tp:.3f} s "
          f"(rel.err {ep:.2e}) | speed-up {tp / tg:.1f}x | cond {w[-1]/w[0]:.2e}", flush=True)
