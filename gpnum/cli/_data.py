"""The command lines' data: the backend, the data set of ``--dataset`` / ``--csv`` and the
training rows after ``--max-train``, ``--outliers`` and the tempering hold-out."""

from __future__ import annotations

import os

from gpnum.cli._options import CLIError

__all__ = ["load_data", "select_backend", "temper_split"]


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


def temper_split(args, ds, X, y):
    """Training data and the tempering validation set: the split's own validation part, or
    (when it has none) a seeded 10% of the training points, then held out from training."""
    if not getattr(args, "temper", False):
        return X, y, None, None
    if ds.X_val.shape[0] > 0:
        return X, y, ds.X_val, ds.y_val
    from gpnum import datasets

    return datasets.holdout(X, y, 0.1, seed=args.seed + 1)
