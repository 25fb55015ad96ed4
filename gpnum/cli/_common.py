"""What ``gpnum fit`` and ``gpnum compare`` share: turning options into library calls (backend,
data, model, training) and writing reports. Every capability here is a library function; this
module only maps options onto them."""

from __future__ import annotations

import json
import os
import platform
import time
import warnings

from gpnum.cli._options import CLIError

__all__ = ["select_backend", "load_data", "train", "prepare_out", "settings", "environment",
           "metrics_line", "write_rows", "params_summary", "have_matplotlib"]


def select_backend(args):
    if args.backend is not None:
        os.environ["GPNUM_BACKEND"] = args.backend
    if args.dtype is not None:
        os.environ["GPNUM_DTYPE"] = args.dtype
    from gpnum import backend as B

    xp = B.namespace()  # raises BackendError with advice when unusable
    return xp, B.default_dtype(xp)


def load_data(args, xp, dtype):
    """The data set of ``--dataset`` or ``--csv``, and its training rows after ``--max-train``
    and ``--outliers``."""
    from gpnum import datasets

    if args.test_mask is not None and args.csv is None:
        raise CLIError("--test-mask needs --csv (the bundled data sets bring their own masks: "
                       "pick one with --split 0..9)")
    if args.csv is not None:
        if not os.path.exists(args.csv):
            raise CLIError(f"--csv: file not found: {args.csv}")
        split = args.split
        if args.test_mask is not None:
            if not os.path.exists(args.test_mask):
                raise CLIError(f"--test-mask: file not found: {args.test_mask}")
            split = 0 if split == "random" else split
        elif split != "random":
            raise CLIError(f"--split {split}: a fixed split of a CSV needs --test-mask PATH")
        task = next((task for task, names in datasets.TASKS.items()
                     if args.likelihood in names), "regression")
        ds = datasets.load_csv(args.csv, split=split, seed=args.seed, xp=xp, dtype=dtype,
                               task=task, test_mask=args.test_mask)
    else:
        names = [info.name for info in datasets.available()]
        if args.dataset not in names:
            raise CLIError(f"--dataset: {args.dataset!r} is not a bundled data set (choose one of "
                           f"{', '.join(names)}; see 'gpnum datasets'), or train on your own "
                           "file with --csv PATH")
        ds = datasets.load(args.dataset, split=args.split, seed=args.seed, xp=xp, dtype=dtype)
    X, y = ds.X_train, ds.y_train
    if args.max_train is not None:
        X, y = datasets.random_subset(X, y, args.max_train, seed=args.seed)
    if args.outliers > 0.0:
        y = datasets.add_outliers(y, args.outliers, seed=args.seed)
    return ds, X, y


def _jitter(args, xp, dtype):
    from gpnum.models import inducing_jitter

    return args.jitter if args.jitter is not None else inducing_jitter(xp, dtype)


def _make_model(args, ds, X, num_inducing, whitening, xp, dtype, y=None, kind=None):
    """The model the options describe, built by :func:`gpnum.models.build_model` (or, for a GVI
    objective, :func:`gpnum.optim.gvi_by_selection` / :meth:`gpnum.GVI.from_svgp`)."""
    from gpnum.models import build_model

    kind = kind or getattr(args, "model", "svgp")
    lik_name = ds.likelihood if args.likelihood == "auto" else args.likelihood
    if kind == "svgp-studentt":
        kind, lik_name = "svgp", "studentt"
    if kind == "svtp" and lik_name not in ("gaussian", "studentt"):
        raise CLIError(f"--model svtp is a regression model; {lik_name!r} data need --model "
                       "svgp")
    if kind != "svgp" and getattr(args, "objective", "svgp") != "svgp":
        raise CLIError(f"--objective {args.objective} trains a GVI model: drop --model {kind}")
    if kind == "svtp" and (whitening != "cholesky" or args.ngd_method != "dense"):
        raise CLIError("--model svtp has Cholesky whitening and its own natural gradient: "
                       "drop --whitening ciq / --ngd-method krylov")
    if kind in ("gpr", "sgpr"):
        if whitening != "cholesky":
            raise CLIError(f"--model {kind} has no whitening: drop --whitening {whitening}")
        if lik_name != "gaussian":
            raise CLIError(f"--model {kind} is a Gaussian-likelihood model; {lik_name!r} "
                           "needs --model svgp")
    separate = bool(getattr(args, "separate_inducing", False))
    if separate and (kind != "svgp" or getattr(args, "objective", "svgp") != "svgp"):
        raise CLIError("--separate-inducing is an option of --model svgp (with the svgp "
                       "objective)")
    solver, cg_options = solver_options(args, kind)
    if kind != "gpr" and num_inducing > X.shape[0]:
        raise CLIError(f"--num-inducing {num_inducing} exceeds the {X.shape[0]} training points")
    if getattr(args, "objective", "svgp") != "svgp":
        return _make_gvi(args, X, y, lik_name, num_inducing, xp, dtype), lik_name
    ciq = {"num_quad": args.ciq_num_quad, "rtol": args.ciq_rtol, "maxiter": args.ciq_maxiter}
    model = build_model(X, y, model=kind, kernel=args.kernel, likelihood=lik_name,
                        num_inducing=num_inducing, whitening=whitening,
                        jitter=_jitter(args, xp, dtype), ciq_options=ciq, kl=args.kl,
                        seed=args.seed, num_classes=_num_classes(lik_name, ds),
                        separate_inducing=separate, solver=solver, cg_options=cg_options,
                        grid_size=getattr(args, "grid_size", None))
    return model, "studentt-process" if kind == "svtp" else lik_name


def solver_options(args, kind):
    """``(solver, cg_options)`` for build_model from --solver, --cg-probes and
    --cg-precond-rank (None, None when none is given); refused for models other than gpr."""
    solver = getattr(args, "solver", None)
    cg = {name: value for name, value in (
        ("num_probes", getattr(args, "cg_probes", None)),
        ("precond_rank", getattr(args, "cg_precond_rank", None))) if value is not None}
    flags = {"num_probes": "--cg-probes", "precond_rank": "--cg-precond-rank"}
    if kind != "gpr" and (solver is not None or cg):
        given = f"--solver {solver}" if solver is not None else flags[next(iter(cg))]
        raise CLIError(f"{given}: only --model gpr has a solver choice (got --model {kind})")
    if cg and solver in (None, "cholesky"):
        raise CLIError(f"{flags[next(iter(cg))]}: sets the conjugate-gradient solver; add "
                       "--solver cg (or auto)")
    if getattr(args, "grid_size", None) is not None and solver != "ski":
        raise CLIError("--grid-size: sets the interpolation grid of --solver ski; add "
                       "--solver ski")
    return solver, (cg or None)


def _num_classes(lik_name, ds):
    """Classes of a many-class likelihood: labels 0..K-1 over every part of the data set."""
    if lik_name not in ("softmax", "robust-max", "ordinal"):
        return None
    from gpnum import backend as B

    top = max(float(B.to_numpy(a).max()) for a in (ds.y_train, ds.y_val, ds.y_test)
              if a.shape[0] > 0)
    return int(top) + 1


def _gvi_options(args, xp, dtype):
    divergence = ("wasserstein" if args.objective == "gwi"
                  else "projected-" + args.objective[len("pgvi-"):])
    return dict(divergence=divergence, mode=args.regulariser_mode,
                variational_kernel=args.variational_kernel,
                variational_mean=args.variational_mean, alpha=args.renyi_alpha,
                eigen_term=not args.no_eigen_term, jitter=_jitter(args, xp, dtype),
                seed=args.seed)


def _make_gvi(args, X, y, lik_name, m, xp, dtype):
    """A GVI model: the regulariser by Algorithm 2 (seed 001) or from an SVGP trained first."""
    import gpnum
    from gpnum.models import build_model, default_likelihood

    if args.objective == "pgvi-renyi" and args.renyi_alpha == 1.0:
        raise CLIError("--renyi-alpha 1: alpha: the Renyi order must lie in (0, 1) or "
                       "(1, inf) (alpha = 1 is pgvi-kl)")
    if lik_name not in ("gaussian", "bernoulli"):
        raise CLIError(f"--objective {args.objective}: GVI supports the Gaussian and Bernoulli "
                       f"likelihoods here, not {lik_name!r}")
    device = gpnum.backend.device_of(X)
    options = _gvi_options(args, xp, dtype)
    if args.regulariser_fit == "svgp":
        svgp = build_model(X, model="svgp", kernel=args.kernel, likelihood=lik_name,
                           num_inducing=m, jitter=options["jitter"], seed=args.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
            gpnum.fit(svgp, X, y, epochs=args.epochs, batch_size=args.batch_size,
                      optimizer=args.optimizer, lr=args.lr, gamma=args.gamma, progress=False,
                      lr_schedule="plateau" if args.lr_schedule == "plateau" else None,
                      seed=args.seed)
        print("regulariser: kernel and Z of an SVGP trained first", flush=True)
        # Q's likelihood starts afresh: the SVGP's was fitted to the SVGP's q.
        lik = default_likelihood(lik_name, xp=xp, dtype=dtype, device=device)
        return gpnum.GVI.from_svgp(svgp, lik, **options)
    from gpnum.models import default_kernel

    kern = default_kernel(args.kernel, X.shape[1], xp=xp, dtype=dtype, device=device)
    lik = default_likelihood(lik_name, xp=xp, dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
        model, sel = gpnum.optim.gvi_by_selection(X, y, kern, lik, m, method=args.select_method,
                                                  max_rounds=args.select_rounds, **options)
    print(f"Algorithm 2: {sel.num_iter} round(s), "
          f"{'settled' if sel.converged else 'not settled (kept the last set)'}", flush=True)
    return model


def _temper_split(args, ds, X, y):
    """Training data and the tempering validation set: the split's own validation part, or
    (when it has none) a seeded 10% of the training points, then held out from training."""
    if not getattr(args, "temper", False):
        return X, y, None, None
    if ds.X_val.shape[0] > 0:
        return X, y, ds.X_val, ds.y_val
    from gpnum import datasets

    return datasets.holdout(X, y, 0.1, seed=args.seed + 1)


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
    X, y, X_tv, y_tv = _temper_split(args, ds, X, y)
    if resume:
        lik_name = ("studentt-process" if isinstance(model, gpnum.SVTP)
                    else type(model.likelihood).__name__.lower())
    else:
        model, lik_name = _make_model(args, ds, X, num_inducing, whitening, xp, dtype, y, kind)
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


def params_summary(model):
    from gpnum import backend as B

    out = {}
    for k, v in model.parameters().items():
        if k.startswith(("kernel.", "likelihood.")) or k == "mean":
            out[k] = B.to_numpy(v).tolist()
    return out


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def metrics_line(test):
    return "  ".join(f"test {k}={v:.4f}" for k, v in test.items())


def prepare_out(path):
    """Create ``--out`` and check that it takes files, naming the option when it does not."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".gpnum-write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise CLIError(f"--out {path}: cannot write there ({exc.strerror or exc})") from None


def settings(args):
    """The command's options, as given (not the top-level flags such as --version)."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "version", "command")}


def environment():
    import gpnum

    return {"gpnum": gpnum.__version__, "python": platform.python_version(),
            "backend": gpnum.backend.backend_name()}


def write_rows(args, stem, rows, name):
    """``<stem>.md`` (one row per dict, the first one's keys as columns, floats to 4
    significant digits) and ``<stem>.json`` (rows, settings, environment) in ``args.out``;
    returns the two file names."""
    keys = list(rows[0])
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n")
        for r in rows:
            f.write("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k])
                                      for k in keys) + " |\n")
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump({"settings": settings(args), "dataset": name, "rows": rows,
                   "environment": environment()}, f, indent=2)
    return [stem + ".md", stem + ".json"]
