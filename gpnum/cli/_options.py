"""The options that ``gpnum fit`` and ``gpnum compare`` share, and the parser's error style."""

from __future__ import annotations

import argparse

from gpnum.cli import _argtypes as argtypes
from gpnum.datasets import available as available_datasets
from gpnum.optim import DEFAULT_RECIPE as RECIPE

__all__ = ["CLIError", "Parser", "add_training_args", "resolve_optimizer", "LIKELIHOODS",
           "KERNELS", "OBJECTIVES", "COMPARE_MODELS", "FULL_BATCH_MODELS"]

LIKELIHOODS = ("auto", "gaussian", "studentt", "laplace", "heteroscedastic-gaussian",
               "bernoulli", "bernoulli-logit", "softmax", "robust-max", "ordinal", "poisson",
               "negative-binomial", "exponential", "gamma", "beta")
KERNELS = ("matern52", "matern32", "matern12", "exponential", "rbf", "rq", "periodic",
           "cosine", "linear", "constant", "white", "polynomial", "arccos")
OBJECTIVES = ("svgp", "gwi", "pgvi-wasserstein", "pgvi-bhattacharyya", "pgvi-hellinger",
              "pgvi-kl", "pgvi-renyi")
COMPARE_MODELS = ("svgp", "svgp-studentt", "svtp")
FULL_BATCH_MODELS = ("gpr", "sgpr")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump, no traceback)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def add_training_args(p, *, compare=False):
    """The data, model, GVI, training and run options of ``fit`` (or, with ``compare``, of
    ``compare``, which takes lists where ``fit`` takes one value)."""
    data = p.add_argument_group("data")
    data.add_argument("--dataset", default="precip" if compare else "elevators",
                      help="bundled data set: "
                           + ", ".join(info.name for info in available_datasets())
                           + " (default: %(default)s); see 'gpnum datasets'")
    data.add_argument("--csv", default=None, metavar="PATH",
                      help="train on any CSV instead (last column is the target; header "
                           "inferred; gzip allowed)")
    data.add_argument("--split", type=argtypes.split, default="random",
                      help="'random' (75/10/15 train/val/test from --seed) or a fixed mask index "
                           "0..9 (elevators, bike, energy, or a --test-mask file's column) "
                           "(default: %(default)s; 0 with --test-mask)")
    data.add_argument("--test-mask", default=None, metavar="PATH",
                      help="with --csv: a CSV of 0/1, one row per data row and one column per "
                           "fixed split (1 marks a test row); --split picks the column")
    data.add_argument("--max-train", type=argtypes.positive_int, default=None, metavar="N",
                      help="use at most N training points (a random subset), for quick runs")
    if not compare:
        data.add_argument("--targets", type=argtypes.positive_int, default=1, metavar="K",
                          help="with --csv: the last K columns are outputs (empty cells, nan "
                               "or NA: missing); K >= 2 fits one exact multi-output GP "
                               "(MultiOutputGPR, --multioutput) and holds out 15%% of the "
                               "observed entries, seeded by --seed (default: 1)")
    model = p.add_argument_group("model")
    model.add_argument("--likelihood", choices=LIKELIHOODS, default="auto", metavar="NAME",
                       help="observation model: 'auto' (the data set's own; 'gpnum datasets' "
                            f"lists them) or one of {', '.join(LIKELIHOODS[1:])} "
                            "(default: auto)")
    model.add_argument("--kernel", type=argtypes.kernel_expression, default="matern52",
                       metavar="EXPR",
                       help="covariance function: a name or an expression of names with +, * "
                            "and parentheses, e.g. 'rbf + rbf*periodic + rq + white'; names: "
                            f"{', '.join(KERNELS)}; ARD, every parameter starting at 1 "
                            "(default: %(default)s)")
    _add_svtp_args(model, data, compare)
    if not compare:
        model.add_argument("--multioutput", choices=("icm", "independent"), default="icm",
                           help="--targets K >= 2: 'icm' (one latent kernel, --kernel, shared by "
                                "the outputs through B = W W^T + diag(kappa), W of --rank "
                                "columns) or 'independent' (one --kernel per output) "
                                "(default: %(default)s)")
        model.add_argument("--rank", type=argtypes.positive_int, default=1, metavar="R",
                           help="--multioutput icm: columns of W (default: %(default)s)")
        model.add_argument("--whitening", choices=("cholesky", "ciq"), default="cholesky",
                           help="how K_ZZ^(-1/2) K_ZX is formed (default: %(default)s)")
        model.add_argument("--num-inducing", type=argtypes.positive_int, default=500, metavar="M",
                           help="inducing points, placed by k-means (default: %(default)s)")
        model.add_argument("--separate-inducing", action="store_true",
                           help="--model svgp with several latent functions (softmax, "
                                "heteroscedastic-gaussian): M inducing points per latent "
                                "function, learned separately (all start at the same k-means "
                                "points) instead of one shared set")
        model.add_argument("--solver", choices=("cholesky", "cg", "state_space", "grid", "ski",
                                                "auto"),
                           default=None,
                           help="--model gpr only: 'cholesky' (exact, O(n^3)), 'cg' (BBMM "
                                "conjugate gradients: stochastic, seeded log-determinant, O(n) "
                                "memory), 'state_space' (one input column and a kernel of "
                                "matern12/32/52, cosine, sho, constant, sums and products: "
                                "exact, O(n); docs/timeseries.md), 'grid' (inputs on a possibly "
                                "incomplete Cartesian grid, e.g. precip), 'ski' (structured "
                                "kernel interpolation, d <= 3; docs/structure.md) or 'auto' (by "
                                "size and structure); see docs/exact-gp.md (default: cholesky)")
        model.add_argument("--grid-size", type=argtypes.positive_int, default=None, metavar="G",
                           help="--solver ski: interpolation grid points per input column "
                                "(default: about n grid points in all)")
        model.add_argument("--cg-probes", type=argtypes.positive_int, default=None,
                           metavar="T",
                           help="--solver cg/auto: probe vectors of the stochastic "
                                "log-determinant and trace (default: 10)")
        model.add_argument("--cg-precond-rank", type=argtypes.nonnegative_int, default=None,
                           metavar="K",
                           help="--solver cg/auto: rank of the pivoted-Cholesky "
                                "preconditioner, 0 for none (default: 100)")
    else:
        model.add_argument("--num-inducing", type=argtypes.int_list, default=[250, 500, 1000],
                           metavar="M1,M2,...",
                           help="inducing-point counts to compare (default: 250,500,1000)")
    _add_gvi_args(p, compare)
    train = p.add_argument_group("training")
    train.add_argument("--optimizer", choices=("ngd", "adam", "lbfgs"), default=None,
                       help="'ngd': natural gradients for q alternating with Adam for the rest; "
                            "'adam': Adam on everything; 'lbfgs': L-BFGS-B on all the data, "
                            "for --model gpr and sgpr (default: ngd; lbfgs for gpr and sgpr)")
    train.add_argument("--maxiter", type=argtypes.positive_int, default=1000,
                       help="L-BFGS-B iterations at most (--optimizer lbfgs) "
                            "(default: %(default)s)")
    train.add_argument("--ngd-method", choices=("dense", "krylov"), default="dense",
                       help="natural-gradient algebra: 'dense' (one O(m^3) Cholesky per step) or "
                            "'krylov' (PCG solves only, O(J m^2 b); pays off only for very "
                            "large m) (default: %(default)s)")
    # The default recipe is gpnum.fit's (gpnum.optim.DEFAULT_RECIPE): one for both doors.
    if compare:
        train.add_argument("--epochs", type=argtypes.positive_int, default=2,
                           help="passes over the training data (default: %(default)s)")
    else:
        train.add_argument("--epochs", type=argtypes.positive_int, default=None,
                           help=f"passes over the training data (default: "
                                f"{RECIPE['epochs']}, or as many as {RECIPE['min_steps']} "
                                "minibatch steps take, whichever is more)")
    train.add_argument("--batch-size", type=argtypes.positive_int, default=RECIPE["batch_size"],
                       help="minibatch size (default: %(default)s)")
    train.add_argument("--lr", type=argtypes.positive_float, default=RECIPE["lr"],
                       help="Adam learning rate (default: %(default)s)")
    train.add_argument("--gamma", type=argtypes.positive_float, default=RECIPE["gamma"],
                       help="natural-gradient step size in (0, 1] (default: %(default)s)")
    train.add_argument("--lr-schedule", choices=("plateau", "constant"),
                       default=RECIPE["schedule"],
                       help="'plateau': cut the Adam rate and the natural-gradient step by "
                            f"{RECIPE['plateau_factor']} (at most "
                            f"{RECIPE['plateau_max_decays']} times) when the training objective "
                            f"has not improved for {RECIPE['plateau_patience_steps']} steps "
                            "(and 2 epochs); 'constant': never (default: %(default)s)")
    train.add_argument("--lr-decay", type=argtypes.int_list, default=None, metavar="E1,E2,...",
                       help="decay the Adam learning rate 10x at these epochs instead of "
                            "--lr-schedule (the CIQ study, Pleiss et al. 2020, uses 1,5,10,15 "
                            "on 300k-point sets)")
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
    """The Student-t process model, its KL, and training outliers."""
    if compare:
        model.add_argument("--models", type=argtypes.choice_list(COMPARE_MODELS), default=None,
                           metavar="M1,M2,...",
                           help="compare models instead of whitenings: any of "
                                f"{','.join(COMPARE_MODELS)} (Cholesky whitening, each "
                                "--num-inducing)")
    else:
        model.add_argument("--model", choices=("svgp", "svtp", "gpr", "sgpr"), default=None,
                           help="'svgp' (sparse variational GP, --likelihood), 'svtp' "
                                "(sparse variational Student-t process, Xu, Zeng & Paisley "
                                "2024), 'gpr' (the "
                                "exact GP: O(n^3), use --max-train beyond a few thousand points) "
                                "or 'sgpr' (Titsias' collapsed bound, O(n m^2)); gpr and sgpr "
                                "are Gaussian-likelihood models trained on all the data at once "
                                "(default: svgp; gpr, the only choice, with --targets K >= 2)")
    model.add_argument("--kl", choices=("mc", "upper-bound"), default="mc",
                       help="SVTP's KL: Monte Carlo or its Jensen upper bound "
                            "(default: %(default)s)")
    data.add_argument("--outliers", type=argtypes.fraction, default=0.0, metavar="FRACTION",
                      help="shift this fraction of the training targets (only) by 3 standard "
                           "deviations, random sign (default: 0)")


def _add_gvi_args(p, compare):
    from gpnum.models import VARIATIONAL_KERNELS, VARIATIONAL_MEANS

    g = p.add_argument_group("generalised variational inference (gpnum.GVI)")
    if compare:
        g.add_argument("--objectives", default=None, metavar="O1,O2,...",
                       help="compare training objectives instead of whitenings: any of "
                            f"{', '.join(OBJECTIVES)} (e.g. svgp,gwi,pgvi-bhattacharyya); "
                            "writes one table and one figure")
    else:
        g.add_argument("--objective", choices=OBJECTIVES, default="svgp",
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


def resolve_optimizer(args):
    """Fill in ``--optimizer``'s default for the model, and refuse pairs that cannot train."""
    full_batch = getattr(args, "model", "svgp") in FULL_BATCH_MODELS
    if args.optimizer is None:
        args.optimizer = "lbfgs" if full_batch else "ngd"
    elif full_batch and args.optimizer == "ngd":
        raise CLIError(f"--optimizer ngd: --model {args.model} has no variational distribution "
                       "to take natural gradients of; use lbfgs (its default) or adam")
    elif not full_batch and args.optimizer == "lbfgs":
        raise CLIError(f"--optimizer lbfgs trains the full-batch models (--model gpr or sgpr); "
                       f"--model {getattr(args, 'model', 'svgp')} trains on minibatches: use "
                       "ngd or adam")
