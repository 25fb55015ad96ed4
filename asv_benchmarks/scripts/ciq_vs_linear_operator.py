"""gpnum CIQ vs linear_operator's contour_integral_quad, same matrix, same settings.

    python ciq_vs_linear_operator.py [--threads 2] [--sizes 1000,2000] [--lengthscales 0.3]
                                     [--rhs random,kzx] [--calls 3]

Matern-5/2 on m uniform points in the unit square, jitter 1e-4 (shorter lengthscales give
flatter, harder spectra), k = 256 right-hand sides, Q = 15, tolerance 1e-3, at most 200
iterations, float64. Right-hand sides: ``random`` (standard normal) or ``kzx`` (the whitening
case of SVGP: ``K_ZX`` for 256 further uniform points X, with the m points as Z).

Each (side, m, lengthscale, rhs) runs in a fresh process and times its first call (as a user
meets it: fresh memory, no workspace from an earlier call) and then ``--calls - 1`` further
calls; printed per case: the first-call time of each side, their ratio, the later calls'
median, the error of each against a dense eigh, and gpnum's iterations, deflated pairs and
products with K in units of one (m, m) x (m, 256) product (msMINRES iterations plus the
eigenpair search and the 30 Lanczos vectors of the bounds). Peers stay in a scratch venv
(torch, linear_operator):

    OPENBLAS_NUM_THREADS=2 PYTHONPATH=. /work/scratch-linop/bin/python \\
        asv_benchmarks/scripts/ciq_vs_linear_operator.py --sizes 1000,2000 --rhs random,kzx
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np


def matern(a, b, lengthscale):
    d = np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)) / lengthscale
    return (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)


def problem(m, lengthscale, rhs):
    rng = np.random.default_rng(0)
    z = rng.uniform(size=(m, 2))
    K0 = matern(z, z, lengthscale)
    if rhs == "random":
        B = np.random.default_rng(1).standard_normal((m, 256))
    else:
        B = matern(z, np.random.default_rng(1).uniform(size=(256, 2)), lengthscale)
    K = K0 + 1e-4 * np.eye(m)
    w, V = np.linalg.eigh(K)
    return K0, K, B, (V / np.sqrt(w)) @ (V.T @ B), w[-1] / w[0]


def one(side, m, lengthscale, rhs, calls, threads):
    """Run one side in this (fresh) process; print one JSON line."""
    warnings.simplefilter("ignore")
    K0, K, B, ref, cond = problem(m, lengthscale, rhs)
    times, out = [], {}
    if side == "gpnum":
        from gpnum.ciq import inv_sqrt_matmul
        from gpnum.linalg import AddedDiag, Dense, Diagonal

        op = AddedDiag(Dense(K0, symmetric=True), Diagonal(np.asarray(1e-4), m))
        for _ in range(calls):
            tic = time.perf_counter()
            r = inv_sqrt_matmul(op, B, num_quad=15, rtol=1e-3, maxiter=200)
            times.append(time.perf_counter() - tic)
        x = r.x
        out = {"iters": r.num_iter, "deflated": r.num_deflated,
               "units": r.num_iter + (r.deflation_products + 30) / B.shape[1]}
    else:
        import torch
        from linear_operator import settings
        from linear_operator.operators import DenseLinearOperator
        from linear_operator.utils.contour_integral_quad import contour_integral_quad

        torch.set_num_threads(threads)
        Kt, Bt = torch.tensor(K), torch.tensor(B)
        for _ in range(calls):
            tic = time.perf_counter()
            with torch.no_grad(), settings.minres_tolerance(1e-3), \
                    settings.max_cg_iterations(200):
                solves, weights, _, _ = contour_integral_quad(
                    DenseLinearOperator(Kt), Bt, inverse=True, num_contour_quadrature=15)
                x = (solves * weights).sum(0).numpy()
            times.append(time.perf_counter() - tic)
    out.update(times=times, err=float(np.linalg.norm(x - ref) / np.linalg.norm(ref)),
               cond=float(cond))
    print(json.dumps(out), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="1000,2000")
    parser.add_argument("--lengthscales", default="0.3")
    parser.add_argument("--rhs", default="random,kzx")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--one", nargs=4, metavar=("SIDE", "M", "LENGTHSCALE", "RHS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        side, m, ls, rhs = args.one
        return one(side, int(m), float(ls), rhs, args.calls, args.threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    for m in (int(a) for a in args.sizes.split(",")):
        for ls in (float(a) for a in args.lengthscales.split(",")):
            for rhs in args.rhs.split(","):
                res = {}
                for side in ("gpnum", "peer"):
                    cmd = [sys.executable, __file__, "--one", side, str(m), str(ls), rhs,
                           "--calls", str(args.calls), "--threads", str(args.threads)]
                    res[side] = json.loads(subprocess.run(
                        cmd, env=env, check=True, capture_output=True, text=True).stdout
                        .strip().splitlines()[-1])
                g, p = res["gpnum"], res["peer"]
                later = lambda r: np.median(r["times"][1:]) if len(r["times"]) > 1 else np.nan
                print(f"m={m} ls={ls} rhs={rhs} (cond {g['cond']:.1e}): first call gpnum "
                      f"{g['times'][0]:.3f} s, linear_operator {p['times'][0]:.3f} s, speed-up "
                      f"{p['times'][0] / g['times'][0]:.1f}x | later calls gpnum "
                      f"{later(g):.3f} s, linear_operator {later(p):.3f} s | rel.err gpnum "
                      f"{g['err']:.1e}, linear_operator {p['err']:.1e} | gpnum iters "
                      f"{g['iters']}, deflated {g['deflated']}, products {g['units']:.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
