"""``gpnum demo``: a jittered Cholesky solve on the default backend (a check that a backend works)."""

from __future__ import annotations

import time

from gpnum.cli import _argtypes as argtypes

__all__ = ["add_parser", "run"]


def add_parser(sub):
    p = sub.add_parser("demo", help="a jittered Cholesky solve on the default backend")
    p.add_argument("--n", type=argtypes.positive_int, default=2000,
                   help="matrix size (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    return p


def run(n: int = 2000, seed: int = 0) -> int:
    """``gpnum demo``: a GP-regression solve ``(K + 0.01 I) alpha = y`` by jittered Cholesky with
    a Matern-5/2 kernel matrix on the default backend, with its residual against the matrix."""
    import gpnum
    from gpnum import backend as B

    xp = B.namespace()
    dtype = B.default_dtype(xp)
    rng = B.default_rng(seed, xp=xp)
    x = rng.uniform((n, 1), dtype=dtype)
    r = xp.abs(x - x.T) / 0.2
    s5 = 5.0**0.5
    K = (1.0 + s5 * r + (5.0 / 3.0) * r * r) * xp.exp(-s5 * r)  # Matern-5/2 gram matrix
    K = K + 1e-2 * xp.eye(n, dtype=dtype)  # observation noise variance 0.01
    y = rng.normal((n, 1), dtype=dtype)
    t0 = time.perf_counter()
    L, jitter = B.cholesky(K, return_jitter=True)
    alpha = B.cho_solve(L, y)
    dt = time.perf_counter() - t0
    res = float(xp.linalg.vector_norm(K @ alpha + jitter * alpha - y) / xp.linalg.vector_norm(y))
    dtype_name = "float32" if dtype == xp.float32 else "float64"
    print(f"gpnum {gpnum.__version__}: backend={B.backend_name()} dtype={dtype_name}")
    print(f"(K + 0.01 I) alpha = y by jittered Cholesky, n={n}: jitter added={jitter:.1e}, "
          f"relative residual={res:.2e}, time={dt * 1e3:.1f} ms")
    return 0
