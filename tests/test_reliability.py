"""Issue 31: no crash on ordinary data. Scale-aware jitter, near-duplicate inducing points,
distances with an extreme ARD lengthscale, refused L-BFGS trial points, scalars as Python
numbers, and the campaign script's quick subset."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

import gpnum
from gpnum import backend as B
from gpnum.inducing import greedy_variance, kmeans
from gpnum.kernels import Matern32, Matern52
from gpnum.likelihoods import Gaussian
from gpnum.params import softplus, softplus_inverse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def matern52_dense(X, Z, lengthscale, variance):
    """Matern-5/2 by exact per-dimension differences in float64 (the reference)."""
    D = (np.asarray(X, np.float64)[:, None, :] - np.asarray(Z, np.float64)[None, :, :])
    r = np.sqrt(np.sum((D / np.asarray(lengthscale, np.float64)) ** 2, axis=2))
    s5 = np.sqrt(5.0) * r
    return variance * (1.0 + s5 + s5 * s5 / 3.0) * np.exp(-s5)


# ---------------------------------------------------------------- distances, extreme lengthscale
def test_kernel_with_a_tiny_ard_lengthscale_on_a_binary_column_stays_psd(xp, dtype, to_xp):
    # The energy data set's "height" column takes two values; Algorithm 2 drove its lengthscale
    # to ~1e-5. The GEMM expansion of squared distances then lost every other column to
    # cancellation and k(Z, Z) had eigenvalues of -4e-5 (issue 31's GVI failure).
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((60, 8))
    Z[:, 4] = np.where(rng.random(60) < 0.5, -1.0, 1.0)
    ell = np.array([2.0, 1.5, 1.6, 2.1, 1e-5, 3.0, 3.5, 1.0])
    k = Matern52(lengthscale=to_xp(ell), variance=2.5)
    K = B.to_numpy(k(to_xp(Z))).astype(np.float64)
    ref = matern52_dense(Z, Z, ell, 2.5)
    atol = 1e-5 if dtype == xp.float32 else 1e-12
    np.testing.assert_allclose(K, ref, atol=atol)
    assert np.linalg.eigvalsh(K).min() > -100 * atol
    # and the cross-covariance path (B given)
    K2 = B.to_numpy(k(to_xp(Z[:20]), to_xp(Z[20:]))).astype(np.float64)
    np.testing.assert_allclose(K2, ref[:20, 20:], atol=atol)


# ------------------------------------------------------------------------------ jitter
def test_svgp_trains_with_a_large_kernel_variance_and_near_duplicate_inducing_points():
    # variance 1e8 and inducing points 1e-9 apart: an absolute jitter ladder (1e-11 .. 1e-9)
    # cannot factorise K_ZZ; one relative to its diagonal does. Checked against the ELBO of
    # the same model with the duplicate removed, which the jitter must barely change.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(80)
    Z = np.concatenate([X[:10], X[:1] + 1e-9])
    k = Matern52(lengthscale=np.ones(2), variance=1e8)
    m = gpnum.SVGP(k, Gaussian(variance=0.1), Z, num_data=80, jitter=0.0)
    value, _ = m.objective_and_grad(X, y)
    m_ref = gpnum.SVGP(Matern52(lengthscale=np.ones(2), variance=1e8), Gaussian(variance=0.1),
                       Z[:10], num_data=80, jitter=0.0)
    # q = prior in both (q_mu = 0, q_sqrt = I): the ELBOs agree up to the KL's constant 0
    ref, _ = m_ref.objective_and_grad(X, y)
    assert np.isfinite(float(value))
    assert abs(float(value) - float(ref)) < 1e-3 * abs(float(ref))


def test_factorisation_failure_names_model_kernel_and_fix():
    m = gpnum.SVGP(Matern52(lengthscale=np.ones(2), variance=1.0), Gaussian(variance=0.1),
                   np.eye(3, 2), num_data=10, jitter=0.0)

    def broken(X1, X2=None):  # an "indefinite kernel matrix", as round-off can produce
        K = np.ones((X1.shape[0], X1.shape[0] if X2 is None else X2.shape[0]))
        if X2 is None:
            K = K - 2.0 * np.eye(X1.shape[0])
        return K

    m.kernel._gram = broken
    with pytest.raises(gpnum.NotPSDError,
                       match=r"^SVGP: K_ZZ \+ jitter I \(m = 3, jitter = 0\) with kernel "
                             r"Matern52\(lengthscale=\[1\.0, 1\.0\], variance=1\.0\) could not be "
                             r"factorised .*fix: raise the model's jitter"):
        m.predict_f(np.zeros((4, 2)))


# ---------------------------------------------------------------------- inducing points
def test_greedy_variance_never_picks_near_duplicates(xp, dtype, to_xp):
    rng = np.random.default_rng(2)
    base = rng.standard_normal((15, 3))
    X = np.concatenate([base, base + 1e-9 * rng.standard_normal((15, 3))])
    k = Matern52(lengthscale=to_xp(np.ones(3)), variance=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        Z, idx = greedy_variance(to_xp(X), 25, k)
    Zn = B.to_numpy(Z).astype(np.float64)
    assert Zn.shape[0] == 15  # the 15 distinguishable points, then a stop
    d2 = np.sum((Zn[:, None] - Zn[None]) ** 2, axis=2) + np.eye(15)
    assert d2.min() > 1e-6
    np.linalg.cholesky(matern52_dense(Zn, Zn, np.ones(3), 1.0))  # no jitter needed


def test_kmeans_counts_near_duplicates_as_one_row(xp, dtype, to_xp):
    rng = np.random.default_rng(3)
    base = np.array([[0.0, 0.0], [3.0, 1.0], [-2.0, 4.0]])
    X = np.repeat(base, 10, axis=0) + 1e-10 * rng.standard_normal((30, 2))
    with pytest.raises(ValueError, match="only 3 distinct rows"):
        kmeans(to_xp(X), 4, seed=0)
    Z = B.to_numpy(kmeans(to_xp(X), 3, seed=0)).astype(np.float64)
    d2 = np.sum((Z[:, None] - Z[None]) ** 2, axis=2) + 100.0 * np.eye(3)
    assert d2.min() > 1.0


def test_kmeans_separates_centres_that_lloyd_merged():
    from gpnum.inducing import _separate_centres

    X = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0], [9.0, 0.0]])
    C = np.array([[0.5, 0.0], [0.5, 0.0], [5.0, 5.0]])  # two centres coincide
    seeds = X[[0, 1, 2]]
    out = _separate_centres(np, C, seeds, X)
    np.testing.assert_array_equal(out, [[0.5, 0.0], [1.0, 0.0], [5.0, 5.0]])


# ------------------------------------------------------------------ L-BFGS trial points
def test_softplus_never_underflows_to_zero(xp, dtype, to_xp):
    u = to_xp(np.array([-1e4, -800.0, -50.0, 0.0, 30.0]))
    v = B.to_numpy(softplus(u)).astype(np.float64)
    assert np.all(v > 0.0)
    np.testing.assert_allclose(v[2:], np.logaddexp(0.0, [-50.0, 0.0, 30.0]), rtol=1e-6)
    assert np.all(np.isfinite(B.to_numpy(softplus_inverse(softplus(u)))))


def test_lbfgs_scores_a_refused_trial_point_as_infinitely_bad():
    # A model that refuses some parameter values (as set_parameters refuses a variance of 0):
    # L-BFGS-B must back off from them and converge, never raise.
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 2))
    y = X[:, 0] + 0.1 * rng.standard_normal(40)
    m = gpnum.GPR(Matern52(lengthscale=np.ones(2)), Gaussian(variance=1.0), X, y)
    orig = m.set_unconstrained
    refused = []

    def picky(values):
        u = values.get("likelihood.variance")
        if u is not None and float(np.asarray(u)) > 0.6:  # refuses variances above ~1.04
            refused.append(1)
            raise ValueError("variance: expected values > 0, got 0.0")
        orig(values)

    m.set_unconstrained = picky
    m.set_parameters({"likelihood.variance": 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpnum.fit(m, optimizer="lbfgs", maxiter=50)
    ref = gpnum.GPR(Matern52(lengthscale=np.ones(2)), Gaussian(variance=0.5), X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpnum.fit(ref, optimizer="lbfgs", maxiter=50)
    # the optimum lies inside the accepted region: both reach the same marginal likelihood
    v = float(m.objective_and_grad(X, y)[0])
    v_ref = float(ref.objective_and_grad(X, y)[0])
    assert abs(v - v_ref) < 1e-4 * abs(v_ref)


@pytest.mark.parametrize("kind", ["gpr", "sgpr"])
def test_lbfgs_ard_26_dimensions_does_not_stop_on_a_refused_point(kind):
    # The case, small: 26 ARD lengthscales, L-BFGS-B (fit's default for GPR and SGPR).
    rng = np.random.default_rng(5)
    X = rng.standard_normal((150, 26))
    X[:, 5] = np.round(X[:, 5])          # a few discrete and constant columns
    X[:, 7] = 1.0
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.standard_normal(150)

    def make():
        kern, lik = Matern32(lengthscale=np.ones(26)), Gaussian(variance=0.1)
        if kind == "gpr":
            return gpnum.GPR(kern, lik, X, y)
        return gpnum.SGPR(kern, lik, X, y, X[::6].copy())

    m = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hist = gpnum.fit(m, maxiter=80)
    # no stop on a refused point or a failed line search; reaching the iteration limit is fine
    # (with the backward pass exact in dominant columns the GPR fit keeps rising to it: 163 at
    # 80 iterations; before, a false "relative reduction" stop at -172 after 10 with |g| = 19)
    assert hist.stopped is None or "TOTAL NO. OF ITERATIONS" in hist.stopped, hist.stopped
    p = m.parameters()
    assert np.all(np.asarray(p["kernel.lengthscale"]) > 0.0)
    assert float(p["likelihood.variance"]) > 0.0
    # it trained: the log marginal likelihood (SGPR: its bound) rose well above the start's
    start = float(make().objective_and_grad(X, y)[0])
    end = float(m.objective_and_grad(X, y)[0])
    assert np.isfinite(end) and end > start + 10.0


def test_gpr_progress_calls_its_objective_lml():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((30, 1))
    y = X[:, 0]
    m = gpnum.GPR(Matern52(lengthscale=1.0), Gaussian(variance=0.1), X, y)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpnum.fit(m, optimizer="adam", epochs=2, progress=True)
    text = out.getvalue() + err.getvalue()
    assert "lml" in text and "elbo" not in text.lower()


# --------------------------------------------------------------------------- scalars
def test_student_t_fisher_takes_a_python_number(xp, dtype, to_xp):
    from gpnum.models import student_t_fisher, student_t_fisher_solve

    sigma = to_xp(np.array([0.5, 1.5, 2.0]))
    F = B.to_numpy(student_t_fisher(5.0, sigma))
    F_ref = B.to_numpy(student_t_fisher(to_xp(np.asarray(5.0)), sigma))
    np.testing.assert_array_equal(F, F_ref)
    # F_mm = nu k / ((nu - 2)(k + 2)) / sigma^2 with k = nu + M: the closed form
    nu, M = 5.0, 3
    k = nu + M
    np.testing.assert_allclose(np.diag(F)[:3], nu * k / ((nu - 2) * (k + 2)) / np.array(
        [0.25, 2.25, 4.0]), rtol=1e-5)
    v = to_xp(np.arange(7.0))
    x = B.to_numpy(student_t_fisher_solve(5, sigma, v)).astype(np.float64)
    np.testing.assert_allclose(F.astype(np.float64) @ x, np.arange(7.0), rtol=1e-3, atol=1e-4)
    with pytest.raises(TypeError, match="df: expected a number or a 0-d array, got str"):
        student_t_fisher("5", sigma)


# ------------------------------------------------------------------------------ campaign
def test_campaign_quick_subset_has_no_traceback(tmp_path):
    out = tmp_path / "campaign.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "asv_benchmarks", "scripts",
                                                        "campaign.py"), "--quick", "--out",
                           str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "traceback 0" in proc.stdout


def test_public_functions_taking_scalars_accept_python_numbers():
    # The audit of issue 31: each call with Python numbers against a closed form.
    from gpnum import divergences as Dv
    from gpnum.linalg import Diagonal

    mq, vq, mp, vp = 0.3, 0.5, -0.2, 2.0
    kl = np.log(np.sqrt(vp / vq)) + (vq + (mq - mp) ** 2) / (2 * vp) - 0.5
    np.testing.assert_allclose(float(Dv.kl_normal(mq, vq, mp, vp)), kl, rtol=1e-12)
    w2 = (mq - mp) ** 2 + (np.sqrt(vp) - np.sqrt(vq)) ** 2
    np.testing.assert_allclose(float(Dv.wasserstein_normal(mq, vq, mp, vp)), w2, rtol=1e-12)
    # numbers mixed with arrays take the arrays' shape
    v = np.asarray(Dv.kl_normal(np.array([mq, mq]), vq, mp, np.array([vp, vp]),
                                reduction="none"))
    np.testing.assert_allclose(v, [kl, kl], rtol=1e-12)
    # a scalar cotangent: d KL / d mq = (mq - mp) / vp, times 3
    g = Dv.kl_normal_vjp(3.0, np.array([mq]), np.array([vq]), np.array([mp]), np.array([vp]))
    np.testing.assert_allclose(np.asarray(g["mq"]), [3.0 * (mq - mp) / vp], rtol=1e-12)
    # the Renyi order as a 0-d array
    r1 = float(Dv.renyi_normal(np.array([mq]), np.array([vq]), np.array([mp]), np.array([vp]),
                               alpha=np.asarray(0.5)))
    r2 = float(Dv.renyi_normal(np.array([mq]), np.array([vq]), np.array([mp]), np.array([vp]),
                               alpha=0.5))
    assert r1 == r2
    # a constant diagonal from a Python number
    np.testing.assert_allclose(np.asarray(Diagonal(2.5, 3) @ np.ones((3, 1))), 2.5 * np.ones((3, 1)))
    m = gpnum.GVI(Matern52(lengthscale=1.0), Gaussian(), np.zeros((2, 1)), num_data=10,
                  divergence="projected-renyi", alpha=np.asarray(0.25))
    assert m.alpha == 0.25


# ------------------------------------------------------------------- damaged files, one line
def _small_checkpoint(path):
    m = gpnum.SVGP(Matern52(lengthscale=1.0), Gaussian(), np.arange(3.0)[:, None], num_data=10)
    gpnum.checkpoint.save(m, path)
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("damage", ["half", "tail", "empty", "crc", "pickle"])
def test_damaged_checkpoints_give_one_line_errors(tmp_path, damage):
    good = _small_checkpoint(tmp_path / "good.npz")
    blob = {"half": good[: len(good) // 2], "tail": good[:-10], "empty": b"",
            "crc": good[: len(good) // 3] + b"\0" * 8 + good[len(good) // 3 + 8:],
            "pickle": None}[damage]
    path = tmp_path / "bad.npz"
    if damage == "pickle":
        np.savez(path, config=np.array([{"a": 1}], dtype=object))
    else:
        path.write_bytes(blob)
    with pytest.raises(ValueError) as info:
        gpnum.checkpoint.load(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: not a readable gpnum checkpoint (")
    assert "allow_pickle" not in msg


@pytest.mark.parametrize("content, expected", [
    ("a,b,y\n1,2,3\n4,x,6\n7,8,9\n", "line 3, column 2 ('b'): expected a number, got 'x'"),
    ("", "expected a table of numbers, got an empty file"),
    ("a,b,y\n", "expected at least one row of data after the header, got none"),
])
def test_cli_bad_csv_is_one_line_error(tmp_path, capsys, content, expected):
    from gpnum.cli import main

    path = tmp_path / "data.csv"
    path.write_text(content)
    status = main(["fit", "--csv", str(path), "--epochs", "1", "--no-progress",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == [f"gpnum: error: {path}: {expected}"]


def test_cli_truncated_checkpoint_is_one_line_error(tmp_path, capsys):
    from gpnum.cli import main

    good = _small_checkpoint(tmp_path / "good.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(good[: len(good) // 2])
    status = main(["fit", "--dataset", "energy", "--resume", str(bad), "--epochs", "1",
                   "--no-progress", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith(f"gpnum: error: {bad}: not a readable gpnum checkpoint")
