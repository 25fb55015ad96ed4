"""Command-line entry point: ``python -m gpnum`` / ``gpnum`` (see :mod:`gpnum.cli`).

``gpnum demo`` runs a small real demonstration on the default backend: a GP-regression solve ``(K + noise I) alpha = y`` by jittered Cholesky with a Matern-5/2 kernel
matrix, reporting the residual against the matrix itself.
"""

from __future__ import annotations

import sys
import time


def demo(n: int = 2000, seed: int = 0) -> int:
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
    print(f"gpnum {gpnum.__version__}: backend={B.backend_name()} dtype={dtype}")
    print(f"(K + 0.01 I) alpha = y by jittered Cholesky, n={n}: jitter added={jitter:.1e}, "
          f"relative residual={res:.2e}, time={dt * 1e3:.1f} ms")
    return 0


def main(argv=None) -> int:
    from gpnum.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
