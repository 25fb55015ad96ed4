"""Shared by the step-floor scripts: one SVGP fit step and a best-of timer."""

import time


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
