"""The :class:`Dataset` container, and splitting, standardising and transferring a host table.

Everything up to the final transfer happens in NumPy float64 on the host: the split indices, the
training statistics and the standardised arrays. Each of the six arrays then crosses to the
target namespace once, through :func:`gpnum.backend.asarray`, already in the working dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpnum.backend import asarray, default_dtype, get_namespace, namespace, namespace_by_name
from gpnum.errors import ShapeError, check_int, describe_shape

__all__ = ["Dataset", "TASKS", "LIKELIHOODS", "RANDOM_FRACTIONS", "random_split", "mask_split",
           "build_dataset"]

#: Tasks and the likelihoods that suit each (the first is the default).
TASKS = {"regression": ("gaussian", "studentt", "laplace", "heteroscedastic-gaussian"),
         "classification": ("bernoulli", "bernoulli-logit"),
         # labels 0..K-1 and non-negative integer counts: targets are never standardised
         "multiclass": ("softmax", "robust-max"),
         "counts": ("poisson", "negative-binomial")}
LIKELIHOODS = ("gaussian", "studentt", "bernoulli", "laplace", "heteroscedastic-gaussian",
               "bernoulli-logit", "softmax", "robust-max", "poisson", "negative-binomial")
#: Train / validation / test fractions of ``split="random"`` (the CIQ paper's protocol).
RANDOM_FRACTIONS = (0.75, 0.10, 0.15)


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A data set split into training, validation and test parts, ready for a model.

    Arrays ``X_*`` have shape ``(n_part, d)`` and ``y_*`` shape ``(n_part,)``, in the namespace,
    dtype and device asked of the loader. With a fixed mask split the validation arrays are empty
    (``(0, d)`` and ``(0,)``). Inputs, and regression targets, are standardised with the
    *training* statistics: ``X_train`` has column means 0 and (population, ``ddof=0``) standard
    deviations 1, except that a column constant over the training rows keeps ``x_std = 1``.
    Classification targets stay in {0, 1} (``y_mean = 0``, ``y_std = 1``).

    Attributes
    ----------
    name : str
        The data set's name (the file name without ``.csv[.gz]`` for :func:`load_csv`).
    task : {"regression", "classification"}
    likelihood : {"gaussian", "studentt", "bernoulli"}
        The suggested observation model.
    X_train, y_train, X_val, y_val, X_test, y_test : arrays
        The standardised splits.
    x_mean, x_std : numpy.ndarray, shape (d,), float64
        Training statistics of the inputs: ``X = (X_raw - x_mean) / x_std``.
    y_mean, y_std : float
        Training statistics of the target: ``y = (y_raw - y_mean) / y_std``.
    train_index, val_index, test_index : numpy.ndarray of int64
        Row numbers (0-based, header excluded) of each part in the source file.
    feature_names : tuple of str
        Names of the ``d`` input columns.
    target_name : str
        Name of the target column.
    split : "random" or int
        The split that produced the parts.
    seed : int or None
        Seed of the random split (``None`` for a fixed mask).

    Notes
    -----
    To report predictions in the original units: means map through :meth:`unstandardize_y`,
    standard deviations scale by ``y_std``, variances by ``y_std**2``, and log densities of
    ``y`` shift by ``-log(y_std)`` (so a test NLL in original units is the standardised NLL plus
    ``log(y_std)``).
    """

    name: str
    task: str
    likelihood: str
    X_train: object
    y_train: object
    X_val: object
    y_val: object
    X_test: object
    y_test: object
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float
    train_index: np.ndarray
    val_index: np.ndarray
    test_index: np.ndarray
    feature_names: tuple
    target_name: str
    split: object
    seed: object

    @property
    def n_features(self) -> int:
        """Number of input columns ``d``."""
        return int(self.x_mean.shape[0])

    @property
    def n_train(self) -> int:
        return int(self.train_index.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.val_index.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.test_index.shape[0])

    def standardize_x(self, X):
        """Map raw inputs ``X`` of shape ``(n, d)`` (any backend) to standardised inputs."""
        xp = get_namespace(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ShapeError(f"X: expected shape (n, {self.n_features}), got "
                             f"{describe_shape(X.shape)}")
        # Copies: torch warns when wrapping the read-only constants.
        mean = asarray(np.array(self.x_mean), dtype=X.dtype, like=X)
        std = asarray(np.array(self.x_std), dtype=X.dtype, like=X)
        return (X - xp.reshape(mean, (1, -1))) / xp.reshape(std, (1, -1))

    def unstandardize_y(self, y):
        """Map standardised targets or predictive means ``y`` (any backend) to original units."""
        return y * float(self.y_std) + float(self.y_mean)

    def __repr__(self) -> str:
        kind = f"seed={self.seed}" if self.split == "random" else f"mask {self.split}"
        return (f"Dataset({self.name!r}, {self.task}/{self.likelihood}, d={self.n_features}, "
                f"train={self.n_train}, val={self.n_val}, test={self.n_test}, split: {kind}, "
                f"{type(self.X_train).__module__.split('.')[0]} {self.X_train.dtype})")


def _check_seed(seed) -> int:
    return check_int(seed, "seed", expected="a non-negative integer")


def random_split(n: int, seed):
    """Random train / validation / test indices in the proportions 75 / 10 / 15.

    ``n_train = floor(0.75 n)``, ``n_val = floor(0.10 n)``, the test part takes the rest (for
    precip's 101,270 rows: 75,952 / 10,127 / 15,191, the training size N reported by Pleiss et al.
    2020). The permutation comes from NumPy's PCG64 seeded with ``seed``, so it is the same
    on every backend and machine. Each part's indices are sorted.
    """
    seed = _check_seed(seed)
    n_train = int(np.floor(RANDOM_FRACTIONS[0] * n))
    n_val = int(np.floor(RANDOM_FRACTIONS[1] * n))
    if n_train < 1 or n - n_train - n_val < 1:
        raise ValueError(f"data: a random 75/10/15 split needs at least 2 rows, got {n}")
    perm = np.random.Generator(np.random.PCG64(seed)).permutation(n)
    parts = perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]
    return tuple(np.sort(p).astype(np.int64) for p in parts)


def mask_split(mask: np.ndarray, split, *, name: str):
    """Train / (empty) validation / test indices from column ``split`` of a 0/1 test mask.

    Parameters
    ----------
    mask : numpy.ndarray, shape (n, K)
        ``mask[i, j] == 1`` puts row ``i`` in the test part of split ``j``.
    split : int
        Which of the ``K`` columns, ``0 <= split < K``.
    name : str
        The data set, for error messages.
    """
    n_masks = mask.shape[1]
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)) \
            or not 0 <= split < n_masks:
        raise ValueError(f"split: expected 'random' or an integer mask index 0..{n_masks - 1} "
                         f"for {name!r}, got {split!r}")
    column = mask[:, int(split)]
    test = np.flatnonzero(column == 1).astype(np.int64)
    train = np.flatnonzero(column == 0).astype(np.int64)
    if test.size == 0 or train.size == 0:
        raise ValueError(f"test_mask: split {split} (mask column {int(split) + 1}) of {name!r} must "
                         f"mark at least one test row "
                         f"and one training row, got {test.size} test and {train.size} "
                         "training")
    return train, np.zeros(0, dtype=np.int64), test


def check_mask(mask: np.ndarray, n_rows: int, *, source: str) -> np.ndarray:
    """Validate a 0/1 test-mask table against a data table of ``n_rows`` rows."""
    if mask.shape[0] != n_rows:
        raise ValueError(f"{source}: expected {n_rows} rows (one per data row), "
                         f"got {mask.shape[0]}")
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"{source}: expected only 0 and 1, got {mask[r, j]:g} in row {r + 1}, "
                         f"column {j + 1}")
    return mask


def _resolve_backend(xp, dtype, device):
    if xp is None:
        xp = namespace()
    elif isinstance(xp, str):
        xp = namespace_by_name(xp)
    if dtype is None:
        dtype = default_dtype(xp)
    elif isinstance(dtype, str):
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype: expected 'float32' or 'float64', got {dtype!r}")
        dtype = getattr(xp, dtype)
    if dtype not in (xp.float32, xp.float64):
        raise ValueError(f"dtype: expected float32 or float64 of {xp.__name__}, got {dtype!r}")
    return xp, dtype, device


def _column_stats(values: np.ndarray):
    """Mean and population std over rows; std 1 where a column is constant (no division by 0)."""
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    # Test constancy exactly (max == min): a float std of a constant column can be ~1e-17 rather
    # than 0, and dividing by it would blow round-off up to O(1) values.
    constant = values.max(axis=0) == values.min(axis=0)
    std = np.where(constant | (std == 0.0), 1.0, std)
    mean = np.where(constant, values[0], mean)  # so a constant column maps to exact zeros
    return mean, std


def build_dataset(data: np.ndarray, *, target: int, name: str, task: str, likelihood,
                  split, seed, mask, standardize: bool, names, xp, dtype, device) -> Dataset:
    """Split, standardise and transfer a validated float64 host table (see :func:`load_csv`)."""
    if task not in TASKS:
        raise ValueError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")
    if likelihood is None:
        likelihood = TASKS[task][0]
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"likelihood: expected one of {', '.join(LIKELIHOODS)}, "
                         f"got {likelihood!r}")
    if likelihood not in TASKS[task]:
        raise ValueError(f"likelihood: {likelihood!r} does not suit task {task!r}; expected one of "
                         f"{', '.join(TASKS[task])}")
    xp, dtype, device = _resolve_backend(xp, dtype, device)

    n, c = data.shape
    if c < 2:
        raise ValueError(f"{name}: expected at least 2 columns (inputs and a target), got {c}")
    features = [j for j in range(c) if j != target]
    X = data[:, features]
    y = data[:, target]
    if task == "classification":
        labels = np.unique(y)
        if not np.all((labels == 0.0) | (labels == 1.0)):
            shown = ", ".join(f"{v:g}" for v in labels[:6]) + (", ..." if labels.size > 6 else "")
            raise ValueError(f"target column {names[target]!r} of {name!r}: classification expects "
                             f"labels 0 and 1, got values {shown}")
    if task in ("multiclass", "counts"):
        bad = ~(np.isfinite(y) & (y >= 0.0) & (np.floor(y) == y))
        if np.any(bad):
            raise ValueError(f"target column {names[target]!r} of {name!r}: {task} expects "
                             f"non-negative integers, got {int(bad.sum())} other value(s)")

    if split != "random" and not isinstance(split, (int, np.integer)):
        raise ValueError(f"split: expected 'random' or an integer mask index, got {split!r}")
    if split == "random":
        seed = _check_seed(seed)
        train, val, test = random_split(n, seed)
    elif mask is None:
        raise ValueError(f"split: {name!r} has no fixed test masks, so only split='random' is "
                         f"possible, got {split!r}")
    else:
        train, val, test = mask_split(mask, split, name=name)
        seed = None

    if standardize:
        x_mean, x_std = _column_stats(X[train])
        if task == "regression":
            y_mean, y_std = (float(v[0]) for v in _column_stats(y[train, None]))
        else:
            y_mean, y_std = 0.0, 1.0
    else:
        x_mean, x_std, y_mean, y_std = np.zeros(len(features)), np.ones(len(features)), 0.0, 1.0
    x_mean.setflags(write=False)
    x_std.setflags(write=False)

    def transfer(a):
        return asarray(a, dtype=dtype, xp=xp, device=device)

    def part(idx):
        Xp = (X[idx] - x_mean) / x_std
        yp = (y[idx] - y_mean) / y_std
        return transfer(Xp), transfer(yp)

    (X_train, y_train), (X_val, y_val), (X_test, y_test) = part(train), part(val), part(test)
    for idx in (train, val, test):
        idx.setflags(write=False)
    return Dataset(
        name=name, task=task, likelihood=likelihood,
        X_train=X_train, y_train=y_train, X_val=X_val, y_val=y_val, X_test=X_test, y_test=y_test,
        x_mean=x_mean, x_std=x_std, y_mean=np.float64(y_mean), y_std=np.float64(y_std),
        train_index=train, val_index=val, test_index=test,
        feature_names=tuple(names[j] for j in features), target_name=names[target],
        split=split if split == "random" else int(split), seed=seed,
    )
