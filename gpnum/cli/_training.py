"""Training a model the options describe, and its test metrics."""

from __future__ import annotations

import time
import warnings

from gpnum.cli._building import make_model
from gpnum.cli._data import temper_split

__all__ = ["train"]


def train(args, ds, X, y, num_inducing, whitening, xp, dtype, progress, *, model=None,
          callbacks=(), kind=None):
    """Build (or, with ``model``, resume) and train a model; return it with its test metrics."""
    import gpnum
    from gpnum.optim import step_decay

    t0 = time.perf_counter()
    resume = model is not None
    is_gvi = (isinstance(model, gpnum.GVI) if resume
              else getattr(args, "objective", "svgp") != "svgp")
    # Every objective trains on the same points (a held-out tempering set included).
    X, y, X_tv, y_tv = temper_split(args, ds, X, y)
    if resume:
        lik_name = ("studentt-process" if isinstance(model, gpnum.SVTP)
                    else type(model.likelihood).__name__.lower())
    else:
        model, lik_name = make_model(args, ds, X, num_inducing, whitening, xp, dtype, y, kind)
    t_init = time.perf_counter() - t0
    lr = args.gvi_lr if is_gvi else args.lr
    if args.lr_decay:
        sched = step_decay(lr, args.lr_decay)
    else:
        sched = "plateau" if getattr(args, "lr_schedule", "plateau") == "plateau" else None
    has_val = ds.X_val.shape[0] > 0
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        # fit's one summary ConvergenceWarning is reported in the metrics instead.
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
        hist = gpnum.fit(model, X, y, epochs=args.epochs, batch_size=args.batch_size,
                         optimizer="adam" if is_gvi else args.optimizer,
                         lr=lr,
                         gamma=args.gamma,
                         ngd_method=args.ngd_method, lr_schedule=sched,
                         X_val=ds.X_val if has_val else None,
                         y_val=ds.y_val if has_val else None, progress=progress,
                         seed=args.seed, resume=resume, callbacks=callbacks,
                         maxiter=getattr(args, "maxiter", 1000))
    train_time = time.perf_counter() - t1
    extra = {}
    if is_gvi and X_tv is not None:
        t2 = time.perf_counter()
        extra["temper_scale"] = gpnum.backend.to_numpy(model.temper(X_tv, y_tv)).tolist()
        extra["temper_time_s"] = time.perf_counter() - t2
    test = gpnum.optim.evaluate(model, ds.X_test, ds.y_test)
    return model, lik_name, hist, {
        **extra,
        "test": test, "train_time_s": train_time, "init_time_s": t_init,
        "num_steps": hist.num_steps,
        "time_per_step_s": train_time / max(hist.num_steps, 1),
        "stopped_early": hist.stopped, "solver_warnings": hist.solver_warnings,
    }
