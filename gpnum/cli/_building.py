"""The model the options describe: the options' own rules, then :func:`gpnum.models.
check_build_options` (the rules of :func:`gpnum.models.build_model`, with its errors worded as
flags here), then the library calls that build it (``build_model``, or for a GVI objective
:func:`gpnum.optim.gvi_by_selection` / :meth:`gpnum.GVI.from_svgp`)."""

from __future__ import annotations

import warnings

from gpnum.cli._options import CLIError

__all__ = ["make_model", "solver_options"]

#: The command line's flag for each option of build_model.
_FLAGS = {"num_probes": "--cg-probes", "precond_rank": "--cg-precond-rank"}


def _jitter(args, xp, dtype):
    from gpnum.models import inducing_jitter

    return args.jitter if args.jitter is not None else inducing_jitter(xp, dtype)


def make_model(args, ds, X, num_inducing, whitening, xp, dtype, y=None, kind=None):
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
    if kind in ("gpr", "sgpr") and whitening != "cholesky":
        raise CLIError(f"--model {kind} has no whitening: drop --whitening {whitening}")
    separate = bool(getattr(args, "separate_inducing", False))
    if separate and getattr(args, "objective", "svgp") != "svgp":
        raise CLIError("--separate-inducing is an option of --model svgp (with the svgp "
                       "objective)")
    solver, cg_options = _check_build(args, kind, lik_name, separate, num_inducing, X.shape[0])
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


def _check_build(args, kind, lik_name=None, separate=False, num_inducing=None, n=None):
    """:func:`gpnum.models.check_build_options` on the options, its errors worded as flags;
    then the command line's own rule for the CG flags. Returns ``(solver, cg_options)``."""
    from gpnum.models import BuildOptionError, check_build_options

    solver = getattr(args, "solver", None)
    cg = {name: value for name, value in (
        ("num_probes", getattr(args, "cg_probes", None)),
        ("precond_rank", getattr(args, "cg_precond_rank", None))) if value is not None}
    try:
        check_build_options(kind, likelihood=lik_name, separate_inducing=separate,
                            solver=solver, cg_options=cg or None, num_inducing=num_inducing,
                            num_data=n)
    except BuildOptionError as err:
        if err.option == "likelihood":
            raise CLIError(f"--model {kind} is a Gaussian-likelihood model; {lik_name!r} "
                           "needs --model svgp") from None
        if err.option == "separate_inducing":
            raise CLIError("--separate-inducing is an option of --model svgp (with the svgp "
                           "objective)") from None
        if err.option in ("solver", "cg_options"):
            given = f"--solver {solver}" if solver is not None else _FLAGS[next(iter(cg))]
            raise CLIError(f"{given}: only --model gpr has a solver choice (got --model "
                           f"{kind})") from None
        if err.option == "num_inducing":
            raise CLIError(f"--num-inducing {num_inducing} exceeds the {n} training "
                           "points") from None
        raise CLIError(str(err)) from None
    if cg and solver in (None, "cholesky"):
        raise CLIError(f"{_FLAGS[next(iter(cg))]}: sets the conjugate-gradient solver; add "
                       "--solver cg (or auto)")
    if getattr(args, "grid_size", None) is not None and solver != "ski":
        raise CLIError("--grid-size: sets the interpolation grid of --solver ski; add "
                       "--solver ski")
    return solver, (cg or None)


def solver_options(args, kind):
    """``(solver, cg_options)`` for build_model from --solver, --cg-probes and
    --cg-precond-rank (None, None when none is given); refused for models other than gpr."""
    return _check_build(args, kind)


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
    """A GVI model: the regulariser by Algorithm 2 of Wu (2023) or from an SVGP trained first."""
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
