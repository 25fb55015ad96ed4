"""SVGPRegressor() / SVGPClassifier() with their defaults ("auto": m = min(500, n_distinct,
ceil(4 sqrt n)), max(100, n/2) steps below 3,000 rows) against the former defaults (500
inducing points, at least 1,500 steps) and scikit-learn's GP estimators, on bundled data
(issue 48). One line per fit: test score and fit time.

    PYTHONPATH=. python asv_benchmarks/scripts/sklearn_svgp_defaults.py SET [CONFIG ...]

SET: breast_cancer (scikit-learn's, 426 training rows, classification; accuracy), energy
(576 rows, regression; RMSE in standardised units), elevators (first 2,000 training rows),
elec (first 2,000 training rows, classification; accuracy on 2,000 test rows).
CONFIG: auto (default), old, sklearn. scikit-learn's estimators: GaussianProcessClassifier
(ConstantKernel * RBF) and GaussianProcessRegressor (ConstantKernel * RBF(ARD) + WhiteKernel,
normalize_y) with no restart.
"""

import sys
import time
import warnings

import numpy as np

import gpnum
from gpnum.sklearn import SVGPClassifier, SVGPRegressor


def data(name):
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler

        X, y = load_breast_cancer(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)
        sc = StandardScaler().fit(Xtr)
        return sc.transform(Xtr), ytr, sc.transform(Xte), yte, "classification"
    ds = gpnum.datasets.load(name, xp="numpy")
    rows = None if name == "energy" else 2000
    return (ds.X_train[:rows], ds.y_train[:rows], ds.X_test[:2000], ds.y_test[:2000], ds.task)


def estimator(config, task, d):
    if config == "sklearn":
        from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
        from sklearn.gaussian_process import kernels as sk

        if task == "classification":
            return GaussianProcessClassifier(sk.ConstantKernel() * sk.RBF(), random_state=0)
        return GaussianProcessRegressor(sk.ConstantKernel() * sk.RBF(np.ones(d))
                                        + sk.WhiteKernel(0.1), normalize_y=True, random_state=0)
    cls = SVGPClassifier if task == "classification" else SVGPRegressor
    extra = {"num_inducing": 500, "epochs": None} if config == "old" else {}
    return cls(random_state=0, **extra)


def main():
    name, configs = sys.argv[1], sys.argv[2:] or ["auto"]
    Xtr, ytr, Xte, yte, task = data(name)
    warnings.simplefilter("ignore")
    for config in configs:
        est = estimator(config, task, Xtr.shape[1])
        t = time.perf_counter()
        est.fit(Xtr, ytr)
        seconds = time.perf_counter() - t
        if task == "classification":
            score = f"accuracy {np.mean(est.predict(Xte) == yte):.3f}"
        else:
            score = f"RMSE {np.sqrt(np.mean((est.predict(Xte) - yte) ** 2)):.4f}"
        size = (f" m={est.num_inducing_} epochs={est.epochs_}" if hasattr(est, "epochs_")
                else "")
        print(f"{name} n={Xtr.shape[0]} {config}{size}: {score}, fit {seconds:.1f} s",
              flush=True)


if __name__ == "__main__":
    main()
