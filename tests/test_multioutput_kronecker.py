"""The Kronecker path of MultiOutputGPR on a numerically low-rank kernel matrix, where the
gradient's (n, n) product keeps only the eigenvectors whose weight rises above rounding."""

import numpy as np
from gradcheck import check_grad
from test_multioutput import T, lml_np, make_model, rbf_np


def test_kronecker_gradient_with_numerically_null_directions():
    rng = np.random.default_rng(7)
    n = 80
    X = rng.uniform(-1.0, 1.0, (n, 2))
    Y = np.stack([np.sin(X[:, 0]), X[:, 1], X[:, 0] * X[:, 1]], axis=1)
    Y = Y + 0.1 * rng.standard_normal(Y.shape)
    p = {"mean": rng.normal(size=T), "likelihood.variance": np.array([0.05, 0.1, 0.2]),
         "kernel.kernel.lengthscale": np.array([2.5, 3.0]), "kernel.kernel.variance": 1.3,
         "kernel.coregion.W": rng.normal(size=(T, 2)),
         "kernel.coregion.kappa": rng.uniform(0.3, 1.0, T)}
    lK = np.linalg.eigvalsh(rbf_np(X, X, p["kernel.kernel.lengthscale"], 1.3))
    assert np.sum(lK < 1e-15 * lK.max()) > n // 3      # most directions numerically null
    model = make_model("icm", p, X, Y, np, np.float64, "cpu")
    assert model.uses_kronecker
    value, grads = model.log_marginal_likelihood_and_grad()
    ref = lml_np("icm", p, X, Y)
    assert abs(float(value) - ref) <= 1e-9 * abs(ref)
    for name, v in p.items():
        v = np.array(v, dtype=np.float64)
        check_grad(lambda x, name=name: lml_np("icm", {**p, name: x}, X, Y), v,
                   np.asarray(grads[name]), name=name)
