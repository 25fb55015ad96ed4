"""The command line: ``gpnum fit``, ``gpnum compare``, ``gpnum hmm``, ``gpnum datasets``,
``gpnum demo``.

``gpnum fit`` trains a whitened SVGP (or, with ``--model svtp``, a sparse variational Student-t
process) on a bundled data set (or any CSV) by the seed-000 protocol (natural gradients for q
alternating with Adam for everything else) and reports test metrics, wall time and time per
step, writing a JSON of settings and metrics plus PNG plots.
``gpnum compare`` runs Cholesky against CIQ whitening over a list of inducing-point counts and
writes the seed's two figures (training time vs m; test NLL vs m) and a table; with
``--models`` it compares models instead (SVGP with Gaussian or Student-t likelihood, SVTP).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings

from gpnum import _argtypes as argtypes

__all__ = ["main", "build_parser", "run_fit", "run_compare", "run_demo"]

_LIKELIHOODS = ("auto", "gaussian", "studentt", "bernoulli")
_KERNELS = ("matern52", "matern32", "matern12", "rbf")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump, no traceback)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _int_list(text):
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 250,500,1000, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _split(text):
    if text == "random":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'random' or a mask index 0..9, got {text!r}") \
            from None


def _add_training_args(p, *, compare=False):
    data = p.add_argument_group("data")
    data.add_argument("--dataset", default="precip" if compare else "elevators",
                      help="bundled data set: precip, elevators, bike, energy, elec (default: "
                           "%(default)s); see 'gpnum datasets'")
    data.add_argument("--csv", default=None, metavar="PATH",
                      help="train on any CSV instead (last column is the target; header "
                           "inferred; gzip allowed)")
    data.add_argument("--split", type=_split, default="random",
                      help="'random' (75/10/15 train/val/test from --seed) or a fixed mask index "
                           "0..9 (elevators, bike, energy, or a --test-mask file's column) "
                           "(default: %(default)s; 0 with --test-mask)")
    data.add_argument("--test-mask", default=None, metavar="PATH",
                      help="with --csv: a CSV of 0/1, one row per data row and one column per "
                           "fixed split (1 marks a test row); --split picks the column")
    data.add_argument("--max-train", type=argtypes.positive_int, default=None, metavar="N",
                      help="use at most N training points (a random subset), for quick runs")
    model = p.add_argument_group("model")
    model.add_argument("--likelihood", choices=_LIKELIHOODS, default="auto",
                       help="observation model; 'auto' takes the data set's own (default: auto)")
    model.add_argument("--kernel", choices=_KERNELS, default="matern52",
                       help="ARD covariance function (default: %(default)s)")
    _add_svtp_args(model, data, compare)
    if not compare:
        model.add_argument("--whitening", choices=("cholesky", "ciq"), default="cholesky",
                           help="how K_ZZ^(-1/2) K_ZX is formed (default: %(default)s)")
        model.add_argument("--num-inducing", type=argtypes.positive_int, default=500, metavar="M",
                           help="inducing points, placed by k-means (default: %(default)s)")
    else:
        model.add_argument("--num-inducing", type=_int_list, default=[250, 500, 1000],
                           metavar="M1,M2,...",
                           help="inducing-point counts to compare (default: 250,500,1000)")
    _add_gvi_args(p, compare)
    train = p.add_argument_group("training")
    train.add_argument("--optimizer", choices=("ngd", "adam"), default="ngd",
                       help="'ngd': natural gradients for q alternating with Adam for the rest; "
                            "'adam': Adam on everything (default: %(default)s)")
    train.add_argument("--ngd-method", choices=("dense", "krylov"), default="dense",
                       help="natural-gradient algebra: 'dense' (one O(m^3) Cholesky per step) or "
                            "'krylov' (PCG solves only, O(J m^2 b); pays off only for very "
                            "large m) (default: %(default)s)")
    train.add_argument("--epochs", type=argtypes.positive_int, default=2 if compare else 20,
                       help="passes over the training data (default: %(default)s)")
    train.add_argument("--batch-size", type=argtypes.positive_int, default=256,
                       help="minibatch size (default: %(default)s)")
    # 0.03 rather than gpnum.fit's 0.01: the noise variance starts at log 2 and must fall ~20x
    # on elevators, which Adam at 0.01 does slowly (elevators, m = 500: test NLL 0.95 after 3
    # epochs at 0.01; 0.49 after 5, 0.47 after 8 and 0.454 after 20 epochs (35 s) at 0.03).
    train.add_argument("--lr", type=argtypes.positive_float, default=0.03,
                       help="Adam learning rate (default: %(default)s)")
    train.add_argument("--gamma", type=argtypes.positive_float, default=0.1,
                       help="natural-gradient step size in (0, 1] (default: %(default)s)")
    train.add_argument("--lr-decay", type=_int_list, default=None, metavar="E1,E2,...",
                       help="decay the Adam learning rate 10x at these epochs (the CIQ study, "
                            "Pleiss et al. 2020, uses 1,5,10,15 on 300k-point sets)")
    train.add_argument("--ciq-num-quad", type=argtypes.positive_int, default=15, metavar="Q",
                       help="CIQ quadrature points (default: %(default)s)")
    train.add_argument("--ciq-rtol", type=argtypes.positive_float, default=1e-3,
                       help="msMINRES relative tolerance (default: %(default)s)")
    train.add_argument("--ciq-maxiter", type=argtypes.positive_int, default=200,
                       help="msMINRES iteration limit J (default: %(default)s)")
    train.add_argument("--jitter", type=argtypes.positive_float, default=None,
                       help="jitter added to K_ZZ's diagonal (default: 1e-6 in float64, 1e-4 in "
                            "float32)")
    train.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    run = p.add_argument_group("run")
    run.add_argument("--backend", choices=("numpy", "torch", "cupy", "array_api_strict"),
                     default=None, help="array backend (default: $GPNUM_BACKEND or numpy)")
    run.add_argument("--dtype", choices=("float64", "float32"), default=None,
                     help="floating dtype (default: $GPNUM_DTYPE or float64)")
    run.add_argument("--out", default="results", metavar="DIR",
                     help="folder for the JSON and PNG outputs (default: %(default)s)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    if not compare:
        run.add_argument("--save", default=None, metavar="PATH",
                         help="write a checkpoint (.npz: model, optimiser state, counters) after "
                              "every epoch and at the end")
        run.add_argument("--resume", default=None, metavar="PATH",
                         help="continue the run saved in PATH up to --epochs in all; pass the "
                              "same data options (--dataset/--csv, --split, --seed, --max-train, "
                              "--batch-size): the result equals an uninterrupted run's")


def _add_svtp_args(model, data, compare):
    """The options of issue 21: the Student-t process model, its KL, training outliers."""
    if compare:
        model.add_argument("--models", type=_model_list, default=None, metavar="M1,M2,...",
                           help="compare models instead of whitenings: any of "
                                f"{','.join(_COMPARE_MODELS)} (Cholesky whitening, each "
                                "--num-inducing)")
    else:
        model.add_argument("--model", choices=("svgp", "svtp"), default="svgp",
                           help="'svgp' (sparse variational GP, --likelihood) or 'svtp' "
                                "(sparse variational Student-t process, seed 002) "
                                "(default: %(default)s)")
    model.add_argument("--kl", choices=("mc", "upper-bound"), default="mc",
                       help="SVTP's KL: Monte Carlo or its Jensen upper bound "
                            "(default: %(default)s)")
    data.add_argument("--outliers", type=argtypes.fraction, default=0.0, metavar="FRACTION",
                      help="shift this fraction of the training targets (only) by 3 standard "
                           "deviations, random sign (default: 0)")


_COMPARE_MODELS = ("svgp", "svgp-studentt", "svtp")


def _model_list(text):
    vals = [t.strip() for t in text.split(",") if t.strip()]
    bad = [v for v in vals if v not in _COMPARE_MODELS]
    if not vals or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of "
                                         f"{', '.join(_COMPARE_MODELS)}, got {text!r}")
    return vals


def _add_outliers(y, fraction, seed):
    """``y`` with ``round(fraction * n)`` entries (chosen by ``seed``) shifted by
    ``+-3 std(y)``: gross errors in the training targets, for the robustness comparison."""
    import numpy as np

    from gpnum import backend as B

    count = int(round(fraction * y.shape[0]))
    if count == 0:
        return y
    xp = B.get_namespace(y)
    host = B.to_numpy(y).astype(np.float64)
    rng = np.random.default_rng([seed, 21])  # its own stream: the split and Z stay as they were
    idx = rng.choice(host.shape[0], count, replace=False)
    host[idx] += 3.0 * host.std() * rng.choice([-1.0, 1.0], count)
    return B.asarray(host, dtype=y.dtype, xp=xp, device=B.device_of(y))


def build_parser():
    """The argument parser of the ``gpnum`` command."""
    parser = _Parser(prog="gpnum", description=(
        "Scalable Gaussian processes: train whitened sparse variational GPs with natural "
        "gradients, Cholesky or CIQ whitening, on bundled real data or any CSV."))
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    p_fit = sub.add_parser("fit", help="train an SVGP and report test metrics",
                           description="Train a whitened SVGP and report test RMSE/NLL (accuracy "
                                       "for classification), wall time and time per step; "
                                       "write OUT/metrics.json and PNG plots.")
    _add_training_args(p_fit)
    p_cmp = sub.add_parser("compare", help="Cholesky vs CIQ whitening over several m",
                           description="Train Cholesky- and CIQ-whitened SVGPs for each number "
                                       "of inducing points; write the training-time and test-NLL "
                                       "figures (PNG), a table (Markdown, CSV) and a JSON.")
    _add_training_args(p_cmp, compare=True)
    from gpnum.hmm import _cli as hmm_cli

    hmm_cli.add_parser(sub)
    sub.add_parser("datasets", help="list the bundled data sets")
    p_demo = sub.add_parser("demo", help="a jittered Cholesky solve on the default backend")
    p_demo.add_argument("--n", type=argtypes.positive_int, default=2000,
                        help="matrix size (default 2000)")
    p_demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    return parser


# ----------------------------------------------------------------------------- helpers


def _select_backend(args):
    if args.backend is not None:
        os.environ["GPNUM_BACKEND"] = args.backend
    if args.dtype is not None:
        os.environ["GPNUM_DTYPE"] = args.dtype
    from gpnum import backend as B

    xp = B.namespace()  # raises BackendError with advice when unusable
    return xp, B.default_dtype(xp)


def _load_data(args, xp, dtype):
    import numpy as np

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
        task = "classification" if args.likelihood == "bernoulli" else "regression"
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
    if args.max_train is not None and args.max_train < X.shape[0]:
        idx = np.sort(np.random.default_rng(args.seed).choice(X.shape[0], args.max_train,
                                                              replace=False))
        from gpnum import backend as B

        idx = B.asarray(idx, dtype=xp.int64, xp=xp, device=B.device_of(X))
        X, y = xp.take(X, idx, axis=0), xp.take(y, idx, axis=0)
    if args.outliers > 0.0:
        y = _add_outliers(y, args.outliers, args.seed)
    return ds, X, y


def _make_model(args, ds, X, num_inducing, whitening, xp, dtype, y=None, kind=None):
    import numpy as np

    import gpnum
    from gpnum import backend as B
    from gpnum import kernels, likelihoods

    kind = kind or getattr(args, "model", "svgp")
    lik_name = ds.likelihood if args.likelihood == "auto" else args.likelihood
    if kind == "svgp-studentt":
        lik_name = "studentt"
    if kind == "svtp" and lik_name not in ("gaussian", "studentt"):
        raise CLIError(f"--model svtp is a regression model; {lik_name!r} data need --model "
                       "svgp")
    if kind != "svgp" and getattr(args, "objective", "svgp") != "svgp":
        raise CLIError(f"--objective {args.objective} trains a GVI model: drop --model {kind}")
    if kind == "svtp" and (whitening != "cholesky" or args.ngd_method != "dense"):
        raise CLIError("--model svtp has Cholesky whitening and its own natural gradient: "
                       "drop --whitening ciq / --ngd-method krylov")
    kern_cls = {"matern52": kernels.Matern52, "matern32": kernels.Matern32,
                "matern12": kernels.Matern12, "rbf": kernels.RBF}[args.kernel]
    d = X.shape[1]
    device = B.device_of(X)
    kern = kern_cls(lengthscale=np.ones(d), variance=1.0, xp=xp, dtype=dtype, device=device)
    if lik_name == "gaussian":
        # log 2 (GPyTorch's softplus(0)): on elevators (20 epochs, m=500) it gave test NLL
        # 0.476 where an initial noise of 0.1 gave 0.508 -- q first fits the data as if nearly
        # noise-free and the noise then recovers only slowly.
        lik = likelihoods.Gaussian(variance=0.693, xp=xp, dtype=dtype, device=device)
    elif lik_name == "studentt":
        lik = likelihoods.StudentT(df=5.0, scale=0.3, xp=xp, dtype=dtype, device=device)
    else:
        lik = likelihoods.Bernoulli(link="probit", xp=xp, dtype=dtype, device=device)
    if num_inducing > X.shape[0]:
        raise CLIError(f"--num-inducing {num_inducing} exceeds the {X.shape[0]} training points")
    if getattr(args, "objective", "svgp") != "svgp":
        return _make_gvi(args, X, y, kern, lik, lik_name, num_inducing, xp, dtype), lik_name
    Z = gpnum.inducing.kmeans(X, num_inducing, seed=args.seed)
    if kind == "svtp":
        return gpnum.SVTP(kern, Z, num_data=X.shape[0], kl=args.kl, seed=args.seed,
                          jitter=_jitter(args, xp, dtype)), "studentt-process"
    ciq = {"num_quad": args.ciq_num_quad, "rtol": args.ciq_rtol, "maxiter": args.ciq_maxiter}
    return gpnum.SVGP(kern, lik, Z, num_data=X.shape[0], whitening=whitening,
                      jitter=_jitter(args, xp, dtype),
                      ciq_options=ciq if whitening == "ciq" else None), lik_name


# ----------------------------------------------------------------------------- GVI (issue 20)
_OBJECTIVES = ("svgp", "gwi", "pgvi-wasserstein", "pgvi-bhattacharyya", "pgvi-hellinger",
               "pgvi-kl", "pgvi-renyi")


def _add_gvi_args(p, compare):
    from gpnum.models._gvi_parts import VARIATIONAL_KERNELS, VARIATIONAL_MEANS

    g = p.add_argument_group("generalised variational inference (gpnum.GVI)")
    if compare:
        g.add_argument("--objectives", default=None, metavar="O1,O2,...",
                       help="compare training objectives instead of whitenings: any of "
                            f"{', '.join(_OBJECTIVES)} (e.g. svgp,gwi,pgvi-bhattacharyya); "
                            "writes one table and one figure")
    else:
        g.add_argument("--objective", choices=_OBJECTIVES, default="svgp",
                       help="'svgp' (the ELBO) or a GVI objective: 'gwi' (Wasserstein "
                            "regulariser) or 'pgvi-<D>' (projected D) (default: %(default)s)")
    g.add_argument("--regulariser-mode", choices=("prior", "posterior"), default="prior",
                   help="the regulariser GP: the prior, or the exact posterior given the "
                        "responses at Z (default: %(default)s)")
    g.add_argument("--variational-kernel", choices=VARIATIONAL_KERNELS, default="svgp-cholesky",
                   help="Q's kernel (default: %(default)s)")
    g.add_argument("--variational-mean", choices=VARIATIONAL_MEANS, default="svgp",
                   help="Q's mean (default: %(default)s)")
    g.add_argument("--no-eigen-term", action="store_true",
                   help="gwi: drop the Wasserstein cross term (the O(b) variant)")
    g.add_argument("--renyi-alpha", type=argtypes.positive_float, default=0.5,
                   help="pgvi-renyi: the order alpha, not 1 (default: %(default)s)")
    g.add_argument("--select-rounds", type=argtypes.positive_int, default=5, metavar="R",
                   help="rounds of Algorithm 2 (greedy variance <-> type-II ML) at most "
                        "(default: %(default)s)")
    # Adam moves all of q here (SVGP's q gets natural gradients): at --lr 0.03 q_mu is still
    # far from converged after 20 epochs on elevators (m = 200: test NLL 0.58 vs 0.52 at 0.1).
    g.add_argument("--gvi-lr", type=argtypes.positive_float, default=0.1,
                   help="Adam learning rate of GVI objectives (default: %(default)s)")
    g.add_argument("--regulariser-fit", choices=("algorithm2", "svgp"), default="algorithm2",
                   help="how the regulariser's kernel and Z are fitted: the seed's Algorithm 2, "
                        "or an SVGP trained first with the same options (its kernel and "
                        "inducing points; its predictive mean at Z as the responses there) "
                        "(default: %(default)s)")
    g.add_argument("--select-method", choices=("gpr", "sgpr"), default="gpr",
                   help="Algorithm 2's type-II objective: the exact GP on the selected points "
                        "(the seed's) or the SGPR bound on all points (Burt et al.'s) "
                        "(default: %(default)s)")
    g.add_argument("--temper", action="store_true",
                   help="learn the predictive-variance scale on the validation set (10%% of "
                        "the training set is held out for it when the split has none)")


def _gvi_divergence(objective):
    return "wasserstein" if objective == "gwi" else "projected-" + objective[len("pgvi-"):]


def _make_gvi(args, X, y, kern, lik, lik_name, m, xp, dtype):
    """The seed-001 pipeline: Algorithm 2 picks Z and fits the regulariser's kernel on
    (Z, y_Z) by type-II ML; Q starts at P and is trained by :func:`gpnum.fit` (Adam)."""
    import gpnum
    from gpnum import likelihoods

    if args.objective == "pgvi-renyi" and args.renyi_alpha == 1.0:
        raise CLIError("--renyi-alpha 1: alpha: the Renyi order must lie in (0, 1) or "
                       "(1, inf) (alpha = 1 is pgvi-kl)")
    if lik_name not in ("gaussian", "bernoulli"):
        raise CLIError(f"--objective {args.objective}: GVI supports the Gaussian and Bernoulli "
                       f"likelihoods here, not {lik_name!r}")
    device = gpnum.backend.device_of(X)
    if args.regulariser_fit == "svgp":
        return _gvi_from_svgp(args, X, y, kern, lik, m, xp, dtype)
    # Type-II ML needs real responses: labels {0, 1} as -1 / +1.
    y_reg = y if lik_name == "gaussian" else 2.0 * y - 1.0
    noise = likelihoods.Gaussian(variance=0.1, xp=xp, dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
        sel = gpnum.optim.select_inducing(X, y_reg, kern, noise, m, max_iter=args.select_rounds,
                                          method=args.select_method,
                                          maxiter=200 if args.select_method == "gpr" else 100)
    print(f"Algorithm 2: {sel.num_iter} round(s), "
          f"{'settled' if sel.converged else 'not settled (kept the last set)'}", flush=True)
    extra = {}
    if args.regulariser_mode == "posterior":
        extra = {"inducing_targets": sel.inducing_targets,
                 "regulariser_noise": max(float(noise.variance), 1e-4),
                 "prior_mean": float(sel.mean)}
    return gpnum.GVI(sel.kernel, lik, sel.inducing_points, num_data=X.shape[0],
                     divergence=_gvi_divergence(args.objective), mode=args.regulariser_mode,
                     variational_kernel=args.variational_kernel,
                     variational_mean=args.variational_mean,
                     alpha=args.renyi_alpha, eigen_term=not args.no_eigen_term,
                     jitter=_jitter(args, xp, dtype), seed=args.seed, **extra)


def _gvi_from_svgp(args, X, y, kern, lik, m, xp, dtype):
    """The regulariser from a trained SVGP: its kernel and inducing points (held fixed), and
    in posterior mode its predictive mean at Z as the responses and its noise variance."""
    import gpnum

    Z = gpnum.inducing.kmeans(X, m, seed=args.seed)
    svgp = gpnum.SVGP(kern, lik, Z, num_data=X.shape[0], jitter=_jitter(args, xp, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpnum.ConvergenceWarning)
        gpnum.fit(svgp, X, y, epochs=args.epochs, batch_size=args.batch_size,
                  optimizer=args.optimizer, lr=args.lr, gamma=args.gamma, progress=False,
                  seed=args.seed)
    print("regulariser: kernel and Z of an SVGP trained first", flush=True)
    Z = svgp.inducing_points
    extra = {}
    if args.regulariser_mode == "posterior":
        extra = {"inducing_targets": svgp.predict_f(Z)[0],
                 "regulariser_noise": max(float(getattr(lik, "variance", 1e-2)), 1e-4)}
    # Q's likelihood starts afresh: the SVGP's was fitted to the SVGP's q.
    lik_q = type(lik)(**({"variance": 0.693} if hasattr(lik, "variance") else {}),
                      xp=xp, dtype=dtype, device=gpnum.backend.device_of(X))
    return gpnum.GVI(svgp.kernel, lik_q, Z, num_data=X.shape[0],
                     divergence=_gvi_divergence(args.objective), mode=args.regulariser_mode,
                     variational_kernel=args.variational_kernel,
                     variational_mean=args.variational_mean, alpha=args.renyi_alpha,
                     eigen_term=not args.no_eigen_term, jitter=_jitter(args, xp, dtype),
                     prior_mean=float(svgp.mean), seed=args.seed, **extra)


def _temper_split(args, ds, X, y, xp):
    """Training data and the tempering validation set: the split's own validation part, or
    (when it has none) a seeded 10% of the training points, then held out from training."""
    if not getattr(args, "temper", False):
        return X, y, None, None
    if ds.X_val.shape[0] > 0:
        return X, y, ds.X_val, ds.y_val
    import numpy as np

    from gpnum import backend as B

    n = X.shape[0]
    perm = np.random.default_rng(args.seed + 1).permutation(n)
    k = max(1, n // 10)
    dev = B.device_of(X)
    val = B.asarray(np.sort(perm[:k]), dtype=xp.int64, xp=xp, device=dev)
    tr = B.asarray(np.sort(perm[k:]), dtype=xp.int64, xp=xp, device=dev)
    return (xp.take(X, tr, axis=0), xp.take(y, tr, axis=0), xp.take(X, val, axis=0),
            xp.take(y, val, axis=0))


def _jitter(args, xp, dtype):
    """``--jitter``, or the default for the dtype: float32 cannot certify K_ZZ + 1e-6 I as
    positive definite once its largest eigenvalue is in the hundreds (m in the hundreds)."""
    if args.jitter is not None:
        return args.jitter
    return 1e-4 if dtype == xp.float32 else 1e-6


def _train(args, ds, X, y, num_inducing, whitening, xp, dtype, progress, *, model=None,
           callbacks=(), kind=None):
    """Build (or, with ``model``, resume) and train a model; return it with its test metrics."""
    import gpnum
    from gpnum.optim import step_decay

    t0 = time.perf_counter()
    resume = model is not None
    is_gvi = (isinstance(model, gpnum.GVI) if resume
              else getattr(args, "objective", "svgp") != "svgp")
    # Every objective trains on the same points (a held-out tempering set included).
    X, y, X_tv, y_tv = _temper_split(args, ds, X, y, xp)
    if resume:
        lik_name = ("studentt-process" if isinstance(model, gpnum.SVTP)
                    else type(model.likelihood).__name__.lower())
    else:
        model, lik_name = _make_model(args, ds, X, num_inducing, whitening, xp, dtype, y, kind)
    t_init = time.perf_counter() - t0
    lr = args.gvi_lr if is_gvi else args.lr
    sched = step_decay(lr, args.lr_decay) if args.lr_decay else None
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
                         seed=args.seed, resume=resume, callbacks=callbacks)
    train_time = time.perf_counter() - t1
    extra = {}
    if is_gvi and X_tv is not None:
        t2 = time.perf_counter()
        extra["temper_scale"] = gpnum.backend.to_numpy(model.temper(X_tv, y_tv)).tolist()
        extra["temper_time_s"] = time.perf_counter() - t2
    test = gpnum.optim.evaluate(model, ds.X_test, ds.y_test)
    return model, lik_name, hist, {**extra,
        "test": test, "train_time_s": train_time, "init_time_s": t_init,
        "num_steps": hist.num_steps,
        "time_per_step_s": train_time / max(hist.num_steps, 1),
        "stopped_early": hist.stopped, "solver_warnings": hist.solver_warnings,
    }


def _params_summary(model):
    from gpnum import backend as B

    out = {}
    for k, v in model.parameters().items():
        if k.startswith(("kernel.", "likelihood.")) or k == "mean":
            a = B.to_numpy(v)
            out[k] = a.tolist()
    return out


def elbo_figure(hist, title):
    """The training curve: the whole run on a symmetric-log axis, and its second half zoomed.

    Early minibatch ELBOs are orders of magnitude below the final ones; a linear axis either
    flattens the tail or cuts the start off. The left panel shows every step (nothing clipped);
    the right one the second half of training on a linear axis, so that the tail can be read.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, v = list(hist.step_time), list(hist.step_elbo)
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax.plot(t, v, lw=0.8)
    if v:
        # symlog is linear within +-linthresh: below the smallest |ELBO| it acts like log |ELBO|.
        ax.set_yscale("symlog", linthresh=max(min(abs(x) for x in v), 1e-12))
        lo, hi = min(v), max(v)
        pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
        ax.set_ylim(lo - pad, hi + pad)
        # A range within one decade gets at most one automatic tick: label five, evenly spaced
        # on the axis, in plain numbers.
        import numpy as np
        from matplotlib.ticker import FuncFormatter, NullFormatter

        if lo < 0 < hi or lo == hi:
            ticks = np.linspace(lo, hi, 5)
        else:
            sign = -1.0 if hi < 0 else 1.0
            ticks = sign * np.geomspace(abs(lo), abs(hi), 5)
        ax.set_yticks([float(f"{t:.2g}") for t in ticks])
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if abs(x) >= 100
                                                   else f"{x:.3g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("minibatch ELBO (whole-data scale)")
    ax.set_title("whole run (symmetric-log axis)", fontsize=9)
    half = len(v) // 2
    zoom.plot(t[half:], v[half:], lw=0.8, color="C1")
    zoom.set_xlabel("training time (s)")
    zoom.set_title(f"second half: steps {half + 1}-{len(v)} (linear axis)", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _plot_elbo(path, hist, title):
    import matplotlib.pyplot as plt

    fig = elbo_figure(hist, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_precip_map(path, model, ds):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpnum import backend as B

    Xt = B.to_numpy(ds.X_test)
    raw = Xt * ds.x_std + ds.x_mean  # Year, lon, lat
    mean, _ = model.predict_y(ds.X_test)
    mu = B.to_numpy(mean) * ds.y_std + ds.y_mean
    fig, ax = plt.subplots(figsize=(8, 4))
    sc = ax.scatter(raw[:, 1], raw[:, 2], c=mu, s=3, cmap="viridis")
    fig.colorbar(sc, ax=ax, label="predictive mean of prcp (standardised units of the file)")
    ax.set_xlabel("longitude")
    ax.set_ylabel("latitude")
    ax.set_title("precip: predictive mean at the test locations (all years)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _metrics_line(test):
    return "  ".join(f"test {k}={v:.4f}" for k, v in test.items())


# ----------------------------------------------------------------------------- commands


def _prepare_out(path):
    """Create ``--out`` and check that it takes files, naming the option when it does not."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".gpnum-write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise CLIError(f"--out {path}: cannot write there ({exc.strerror or exc})") from None


def _check_save_path(path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"--save {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"--save {path}: the folder {folder} is not writable")


def _resume_model(args, X, dtype, xp):
    """The model of ``--resume``, checked against the data it is to continue on."""
    import gpnum

    if not os.path.exists(args.resume):
        raise CLIError(f"--resume: file not found: {args.resume}")
    model = gpnum.load(args.resume, xp=xp, device=gpnum.backend.device_of(X))
    state = getattr(model, "training_state", None)
    if state is None:
        raise CLIError(f"--resume {args.resume}: the checkpoint holds no training state (it was "
                       "not written by 'gpnum fit --save' or gpnum.fit)")
    if model.dtype != dtype:
        raise CLIError(f"--resume {args.resume}: the checkpoint is in "
                       f"{'float32' if model.dtype == xp.float32 else 'float64'}; pass the same "
                       "--dtype")
    if model.num_data != X.shape[0] or model.inducing_points.shape[1] != X.shape[1]:
        raise CLIError(f"--resume {args.resume}: the checkpoint was trained on "
                       f"{model.num_data} points with {model.inducing_points.shape[1]} inputs, "
                       f"this data has {X.shape[0]} with {X.shape[1]}; pass the same data options "
                       "(--dataset/--csv, --split, --seed, --max-train)")
    if state.epoch > args.epochs:
        raise CLIError(f"--resume {args.resume}: the checkpoint is at epoch {state.epoch}, past "
                       f"--epochs {args.epochs} (the total to train to)")
    return model


def run_fit(args):
    import gpnum

    xp, dtype = _select_backend(args)
    _prepare_out(args.out)
    if args.save is not None:
        _check_save_path(args.save)
    ds, X, y = _load_data(args, xp, dtype)
    model = _resume_model(args, X, dtype, xp) if args.resume is not None else None
    name = os.path.basename(args.csv) if args.csv else args.dataset
    m = args.num_inducing if model is None else model.num_inducing
    whitening = args.whitening if model is None else getattr(model, "whitening", "cholesky")
    print(f"gpnum {gpnum.__version__} fit: {name} (n_train={X.shape[0]}, d={X.shape[1]}, "
          f"n_test={ds.X_test.shape[0]}), model={_model_name(args, model)}, m={m}, "
          f"whitening={whitening}, objective={args.objective}, "
          f"optimizer={args.optimizer}, backend={gpnum.backend.backend_name()}, "
          f"dtype={'float32' if dtype == xp.float32 else 'float64'}", flush=True)
    if model is not None:
        print(f"resuming {args.resume} at epoch {model.training_state.epoch} of {args.epochs} "
              "(the checkpoint's model, optimiser state and minibatch order)", flush=True)
    callbacks = ()
    if args.save is not None:
        def save_every_epoch(model, history, epoch):
            gpnum.save(model, args.save)
            return False

        callbacks = (save_every_epoch,)
    t0 = time.perf_counter()
    model, lik_name, hist, res = _train(args, ds, X, y, m, whitening, xp, dtype,
                                        not args.no_progress, model=model, callbacks=callbacks)
    wall = time.perf_counter() - t0
    res["wall_time_s"] = wall
    if args.save is not None:
        gpnum.save(model, args.save)  # also after a stop mid-epoch: the last good parameters
    print(f"{_metrics_line(res['test'])}  wall time={wall:.1f} s  "
          f"time/step={1e3 * res['time_per_step_s']:.1f} ms ({res['num_steps']} steps)")
    if hist.stopped:
        print(f"note: training stopped early: {hist.stopped}")
    if hist.solver_warnings:
        print(f"note: {hist.solver_warnings} solver call(s) stopped short of their tolerance "
              f"(raise --ciq-maxiter or the jitter for CIQ whitening)")
    out = {
        "settings": _settings(args),
        "dataset": {"name": name, "n_train": int(X.shape[0]), "n_test": int(ds.X_test.shape[0]),
                    "d": int(X.shape[1]), "likelihood": lik_name},
        "metrics": res,
        "parameters": _params_summary(model),
        "history": {"epoch_elbo": hist.epoch_elbo, "val": hist.val,
                    "first_epoch": hist.first_epoch},
        "environment": _environment(),
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(out, f, indent=2)
    written = ["metrics.json"]
    if _have_matplotlib():
        _plot_elbo(os.path.join(args.out, "elbo.png"), hist,
                   f"{name}: m={m}, {whitening} whitening")
        written.append("elbo.png")
        if name == "precip":
            _plot_precip_map(os.path.join(args.out, "precip_map.png"), model, ds)
            written.append("precip_map.png")
    else:
        print("note: matplotlib is not installed; skipped the PNG plots "
              "(pip install \".[cli]\")")
    paths = [os.path.join(args.out, w) for w in written]
    if args.save is not None:
        paths.append(args.save)
    print(f"wrote {', '.join(paths)}")
    return 0


def _model_name(args, model):
    import gpnum

    if model is not None:
        return "svtp" if isinstance(model, gpnum.SVTP) else "svgp"
    return args.model


def _settings(args):
    """The command's options, as given (not the top-level flags such as --version)."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "version", "command")}


def _environment():
    import gpnum

    return {"gpnum": gpnum.__version__, "python": platform.python_version(),
            "backend": gpnum.backend.backend_name()}


def _write_rows(args, stem, rows, name):
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
        json.dump({"settings": _settings(args), "dataset": name, "rows": rows,
                   "environment": _environment()}, f, indent=2)
    return [stem + ".md", stem + ".json"]


def run_compare(args):
    xp, dtype = _select_backend(args)
    _prepare_out(args.out)
    ds, X, y = _load_data(args, xp, dtype)
    name = os.path.basename(args.csv) if args.csv else args.dataset
    if getattr(args, "objectives", None) is not None and getattr(args, "models", None) is not None:
        raise CLIError("--objectives and --models: compare one or the other")
    if getattr(args, "objectives", None) is not None:
        return _compare_objectives(args, ds, X, y, xp, dtype, name)
    if getattr(args, "models", None) is not None:
        return _compare_models(args, ds, X, y, name, xp, dtype)
    rows = []
    for m in args.num_inducing:
        for whitening in ("cholesky", "ciq"):
            print(f"{name}: m={m} {whitening} ...", flush=True)
            _, _, hist, res = _train(args, ds, X, y, m, whitening, xp, dtype, False)
            row = {"m": m, "whitening": whitening, **{f"test_{k}": v
                                                      for k, v in res["test"].items()},
                   "train_time_s": res["train_time_s"], "time_per_step_s": res["time_per_step_s"],
                   "num_steps": res["num_steps"]}
            rows.append(row)
            print(f"  {_metrics_line(res['test'])}  train time={res['train_time_s']:.1f} s  "
                  f"time/step={1e3 * res['time_per_step_s']:.1f} ms", flush=True)
    keys = list(rows[0])
    with open(os.path.join(args.out, "compare.csv"), "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r[k]) for k in keys) + "\n")
    written = ["compare.csv", *_write_rows(args, "compare", rows, name)]
    if _have_matplotlib():
        _plot_compare(args.out, rows, name)
        written += ["compare_time.png", "compare_nll.png"]
    print(f"wrote {', '.join(os.path.join(args.out, w) for w in written)}")
    return 0


def _objective_list(text):
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in _OBJECTIVES]
    if not names or bad:
        raise CLIError(f"--objectives: expected comma-separated names from "
                       f"{', '.join(_OBJECTIVES)}, got {text!r}")
    return names


def _compare_objectives(args, ds, X, y, xp, dtype, name):
    """``gpnum compare --objectives``: one row per (objective, m), one table, one figure."""
    objectives = _objective_list(args.objectives)
    rows = []
    for m in args.num_inducing:
        for obj in objectives:
            args.objective = obj
            label = obj + (" (no cross term)" if obj == "gwi" and args.no_eigen_term else "")
            if obj != "svgp" and args.regulariser_fit == "svgp":
                label += " [P from SVGP]"
            print(f"{name}: m={m} {label} ...", flush=True)
            model, _, hist, res = _train(args, ds, X, y, m, "cholesky", xp, dtype, False)
            row = {"objective": label, "m": m,
                   **{f"test_{k}": v for k, v in res["test"].items()},
                   "init_time_s": res["init_time_s"], "train_time_s": res["train_time_s"],
                   "wall_time_s": (res["init_time_s"] + res["train_time_s"]
                                   + res.get("temper_time_s", 0.0)),
                   "time_per_step_s": res["time_per_step_s"], "num_steps": res["num_steps"],
                   "tempered": "temper_scale" in res}
            rows.append(row)
            print(f"  {_metrics_line(res['test'])}  train time={res['train_time_s']:.1f} s  "
                  f"time/step={1e3 * res['time_per_step_s']:.1f} ms", flush=True)
    del args.objective
    written = _write_rows(args, "objectives", rows, name)
    if _have_matplotlib():
        _plot_objectives(os.path.join(args.out, "objectives.png"), rows, name)
        written.append("objectives.png")
    print(f"wrote {', '.join(os.path.join(args.out, w) for w in written)}")
    return 0


def _plot_objectives(path, rows, name):
    """Test NLL (and RMSE or accuracy) per objective and m beside training time per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "test_rmse" if "test_rmse" in rows[0] else "test_accuracy"
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    labels = [f"{r['objective']}\nm={r['m']}" for r in rows]
    pos = range(len(rows))
    for ax, key, title in ((axes[0], "test_nll", "test NLL"),
                           (axes[1], metric, metric.replace("_", " ")),
                           (axes[2], "time_per_step_s", "time per step (s)")):
        ax.bar(pos, [r[key] for r in rows], color=[f"C{i % 10}" for i in pos])
        ax.set_xticks(list(pos))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{name}: training objectives")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _compare_models(args, ds, X, y, name, xp, dtype):
    """``gpnum compare --models``: each model at each m, Cholesky whitening, one table."""
    rows = []
    for m in args.num_inducing:
        for kind in args.models:
            print(f"{name}: m={m} {kind} ...", flush=True)
            _, _, hist, res = _train(args, ds, X, y, m, "cholesky", xp, dtype, False, kind=kind)
            rows.append({"m": m, "model": kind, "outliers": args.outliers,
                         **{f"test_{k}": v for k, v in res["test"].items()},
                         "final_elbo": hist.epoch_elbo[-1] if hist.epoch_elbo else None,
                         "train_time_s": res["train_time_s"], "num_steps": res["num_steps"]})
            print(f"  {_metrics_line(res['test'])}  train time={res['train_time_s']:.1f} s",
                  flush=True)
    written = _write_rows(args, "compare_models", rows, name)
    print(f"wrote {', '.join(os.path.join(args.out, w) for w in written)}")
    return 0


def _plot_compare(out, rows, name):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, fname, label in (("train_time_s", "compare_time.png", "training time (s)"),
                              ("test_nll", "compare_nll.png", "test NLL")):
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for whitening, style in (("cholesky", "o-"), ("ciq", "s--")):
            pts = [(r["m"], r[key]) for r in rows if r["whitening"] == whitening]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                    label=f"{whitening} whitening")
        ax.set_xlabel("inducing points m")
        ax.set_ylabel(label)
        ax.set_title(f"{name}: {label} vs m")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=110)
        plt.close(fig)


def run_demo(n: int = 2000, seed: int = 0) -> int:
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


def run_datasets(args):
    from gpnum import datasets

    for info in datasets.available():
        print(info)
    return 0


def main(argv=None) -> int:
    """Entry point of ``gpnum`` / ``python -m gpnum``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        import gpnum

        print(gpnum.__version__)
        return 0
    from gpnum.errors import BackendError, NotPSDError

    try:
        if args.command == "fit":
            return run_fit(args)
        if args.command == "compare":
            return run_compare(args)
        if args.command == "datasets":
            return run_datasets(args)
        if args.command == "hmm":
            from gpnum.hmm import _cli as hmm_cli

            return hmm_cli.run(args)
        if args.command == "demo":
            return run_demo(args.n, args.seed)
    except (CLIError, BackendError, NotPSDError, ValueError, FileNotFoundError) as exc:
        print(f"gpnum: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpnum: interrupted", file=sys.stderr)
        return 130
    parser.print_help()
    return 0
