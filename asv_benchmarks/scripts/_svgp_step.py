"""Shared by the step-floor scripts: one SVGP fit step, the CIQ training step they measure,
and a best-of timer."""

import time

import numpy as np


def svgp_fit_step(model, ngd, adam, X, y):
    """One training step as gpnum.fit takes it: a natural-gradient step on q from the ELBO's
    data term, then an Adam step on everything else (no finiteness checks)."""
    value, grads, data = model.elbo_and_grad(X, y, return_data=True)
    ngd.step(model, data=data)
    hyper = {k: v for k, v in grads.items() if k not in ("q_mu", "q_sqrt")}
    g_u = model.grad_to_unconstrained(hyper)
    u = model.unconstrained()
    model.set_unconstrained(adam.step({k: u[k] for k in g_u}, g_u, maximize=True))


def best(f, reps):
    """The shortest of ``reps`` timings of ``f()``, after one untimed call."""
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def ciq_training_step(argv):
    """The CIQ training step of ``training_step_floor.py`` and ``training_step_phases.py``
    (the step of ``svgp_vs_gpytorch.py train``): batch 256, d = 2, Matern-5/2, Q = 15, natural
    gradients gamma 0.1 + Adam, float64; ``argv``: [m=1000] [method=krylov] [rtol=1e-3].

    Returns ``(model, step, (m, method, rtol), rng)``: ``step()`` takes one step; ``rng``
    is the generator that drew the data, for further draws.
    """
    import gpnum
    from gpnum.kernels import Matern52
    from gpnum.likelihoods import Gaussian

    m = int(argv[0]) if len(argv) > 0 else 1000
    method = argv[1] if len(argv) > 1 else "krylov"
    rtol = float(argv[2]) if len(argv) > 2 else 1e-3
    b, d, N = 256, 2, 100_000
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (b, d))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(b)
    Z = rng.uniform(-1, 1, (m, d))
    model = gpnum.SVGP(Matern52(lengthscale=0.3), Gaussian(variance=0.1), Z, num_data=N,
                       whitening="ciq", jitter=1e-4,
                       ciq_options={"num_quad": 15, "rtol": rtol, "maxiter": 200})
    ngd = gpnum.optim.NaturalGradient(0.1, method)
    ngd.prepare(model)
    adam = gpnum.optim.Adam(lr=0.01)

    def step():
        svgp_fit_step(model, ngd, adam, X, y)

    return model, step, (m, method, rtol), rng
