"""Building a model from data and names: the recipe behind ``gpnum fit``, for Python users too.

``build_model(X, y, model="svgp", kernel="matern52", likelihood="gaussian", ...)`` gives the
model the command line trains: an ARD kernel with unit lengthscales and variance, a likelihood
at the initial values below, and ``m`` inducing points placed by k-means. Everything it does can
be written out by hand with the classes it calls; it exists so that the command line holds no
model-building logic of its own.
"""

from __future__ import annotations

from gpnum import backend as B
from gpnum import inducing, kernels, likelihoods
from gpnum.models._gpr import GPR
from gpnum.models._sgpr import SGPR
from gpnum.models._svgp import SVGP
from gpnum.models._svtp import SVTP

__all__ = ["MODELS", "BuildOptionError", "build_model", "check_build_options", "default_kernel",
           "default_likelihood", "inducing_jitter"]

MODELS = ("svgp", "svtp", "gpr", "sgpr")


def inducing_jitter(xp, dtype):
    """The jitter added to ``K_ZZ``'s diagonal by default: 1e-6 in float64, 1e-4 in float32
    (float32 cannot certify ``K_ZZ + 1e-6 I`` positive definite once its largest eigenvalue is
    in the hundreds, i.e. for m in the hundreds)."""
    return 1e-4 if dtype == xp.float32 else 1e-6


def default_likelihood(name, *, num_classes=None, xp=None, dtype=None, device=None):
    """A likelihood by name at gpnum's initial values.

    ``"gaussian"``: noise variance 0.693 (log 2, GPyTorch's softplus(0)); on elevators (20
    epochs, m = 500) it gave test NLL 0.476 where 0.1 gave 0.508: with a small initial noise q
    first fits the data as if noise-free, and the noise recovers only slowly.
    ``"studentt"``: 5 degrees of freedom, scale 0.3. ``"bernoulli"``: the probit link. Every
    other name of :func:`gpnum.likelihoods.from_name` (``poisson``, ``softmax``, ...) at that
    function's defaults; ``num_classes`` for ``softmax``, ``robust-max`` and ``ordinal``.
    """
    key = likelihoods.canonical_name(name)  # the one name table (gpnum.likelihoods)
    if key == "gaussian":
        return likelihoods.Gaussian(variance=0.693, xp=xp, dtype=dtype, device=device)
    if key == "student-t":
        return likelihoods.StudentT(df=5.0, scale=0.3, xp=xp, dtype=dtype, device=device)
    return likelihoods.from_name(key, num_classes=num_classes, xp=xp, dtype=dtype,
                                 device=device)


def default_kernel(kernel, input_dim, *, X=None, y=None, xp=None, dtype=None, device=None):
    """``kernel`` itself if it is a gpnum kernel, else the kernel its expression names
    (:func:`gpnum.kernels.from_expression`, e.g. ``"matern52"`` or ``"rbf + rbf*periodic +
    white"``) with ``input_dim`` ARD lengthscales: every parameter at 1, or, given the training
    data ``X`` (n, d) and ``y`` (n,), started from their scales (from_expression's notes)."""
    if isinstance(kernel, kernels.Kernel):
        return kernel
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a gpnum kernel or an expression such as 'matern52', "
                        f"got {type(kernel).__name__}")
    xp = B.namespace() if xp is None else xp
    dtype = B.default_dtype(xp) if dtype is None else dtype
    try:
        return kernels.from_expression(kernel, input_dim=int(input_dim), ard=True, X=X, y=y,
                                       xp=xp, dtype=dtype, device=device)
    except ValueError as exc:
        raise ValueError(f"kernel: {exc}") from None


class BuildOptionError(ValueError):
    """An option of :func:`build_model` that the chosen model does not take (or a value it
    cannot have); ``option`` names the argument (``"likelihood"``, ``"separate_inducing"``,
    ``"solver"``, ``"cg_options"``, ``"num_inducing"``) so that a command line can name its own
    flag."""

    def __init__(self, option, message):
        super().__init__(message)
        self.option = option


def check_build_options(model, *, likelihood=None, separate_inducing=False, solver=None,
                        cg_options=None, num_inducing=None, num_data=None):
    """The rules of :func:`build_model` that combine options, checked in this order before
    anything is built: the full-batch models (``"gpr"``, ``"sgpr"``) take a Gaussian
    likelihood only; ``separate_inducing`` is SVGP's; ``solver`` and ``cg_options`` are GPR's;
    the inducing-point models take ``1 <= num_inducing <= num_data``.

    ``likelihood`` is a name (resolved by :func:`gpnum.likelihoods.canonical_name`) or a
    likelihood object; None skips that rule, as does ``num_data=None`` the last one.

    Raises
    ------
    BuildOptionError
    """
    if model not in MODELS:
        raise ValueError(f"model: expected one of {', '.join(MODELS)}, got {model!r}")
    if model in ("gpr", "sgpr") and likelihood is not None:
        gaussian = (likelihoods.canonical_name(likelihood) == "gaussian"
                    if isinstance(likelihood, str) else isinstance(likelihood,
                                                                   likelihoods.Gaussian))
        if not gaussian:
            name = likelihood if isinstance(likelihood, str) else type(likelihood).__name__
            raise BuildOptionError("likelihood", f"model {model!r} is a Gaussian-likelihood "
                                   f"model; got likelihood {name}: use model='svgp' for other "
                                   "likelihoods")
    if separate_inducing and model != "svgp":
        raise BuildOptionError("separate_inducing", f"separate_inducing: only model='svgp' has "
                               "several latent functions with inducing points of their own, "
                               f"got model={model!r}")
    if model != "gpr" and (solver is not None or cg_options is not None):
        given = "solver" if solver is not None else "cg_options"
        raise BuildOptionError(given, f"{given}: only model='gpr' has a solver choice, got "
                               f"model={model!r}")
    if model != "gpr" and num_inducing is not None and num_data is not None \
            and not 1 <= int(num_inducing) <= int(num_data):
        raise BuildOptionError("num_inducing", f"num_inducing: {num_inducing} is not in "
                               f"1..{num_data} (the training points)")


def build_model(X, y=None, *, model="svgp", kernel="matern52", likelihood="gaussian",
                num_inducing=500, whitening="cholesky", jitter=None, ciq_options=None,
                kl="mc", seed=0, num_classes=None, separate_inducing=False, solver=None,
                cg_options=None, grid_size=None):
    """A model for the data ``X`` (and ``y`` for the full-batch models), ready for
    :func:`gpnum.fit`.

    Parameters
    ----------
    X : array (n, d)
        Training inputs; their namespace, device and dtype become the model's.
    y : array (n,), optional
        Training targets; required by ``"gpr"`` and ``"sgpr"``, which hold their data.
    model : {"svgp", "svtp", "gpr", "sgpr"}
        :class:`SVGP`, :class:`SVTP` (Student-t process: no ``likelihood``), :class:`GPR`
        (exact; ``likelihood`` must be Gaussian) or :class:`SGPR` (Titsias' collapsed bound).
    kernel : str or gpnum kernel
        An expression of kernel names (``"matern52"``, ``"rbf + rbf*periodic + white"``; see
        :func:`gpnum.kernels.from_expression`: ARD; for ``"gpr"`` and ``"sgpr"`` started from
        the scales of ``X`` and ``y``, for the minibatch models every parameter at 1) or a
        kernel object, used as given.
    likelihood : str or gpnum likelihood
        A name for :func:`default_likelihood` (``gaussian``, ``poisson``, ``softmax``, ...),
        or a likelihood object. A likelihood with several latent functions (``softmax``,
        ``heteroscedastic-gaussian``) gets as many in the SVGP, sharing the inducing points
        unless ``separate_inducing``.
    num_inducing : int
        ``m`` inducing points, placed by :func:`gpnum.inducing.kmeans` (not for ``"gpr"``).
    whitening : {"cholesky", "ciq"}
        SVGP's whitening.
    jitter : float, optional
        Jitter on the inducing gram matrix (default :func:`inducing_jitter`; GPR and SGPR keep
        their own default).
    ciq_options : dict, optional
        CIQ's settings for ``whitening="ciq"``.
    kl : {"mc", "upper-bound"}
        SVTP's KL.
    seed : int
        Seeds k-means (and SVTP's draws).

        With ``y`` and a log-link count likelihood (Poisson, NegativeBinomial) the SVGP's
        constant mean starts at ``log(mean(y))``.
    num_classes : int, optional
        For a likelihood named ``softmax``, ``robust-max`` or ``ordinal``.
    separate_inducing : bool
        SVGP only: one set of inducing points per latent function, ``inducing_points`` of shape
        (num_latent, m, d), each learned on its own. They all start at the same k-means points
        (a copy per latent), so the model starts where the shared one does and the sets move
        apart in training.
    solver : {"cholesky", "cg", "state_space", "grid", "ski", "auto"}, optional
        GPR's solver (default ``"cholesky"``; :class:`GPR`, docs/exact-gp.md,
        docs/structure.md, docs/timeseries.md). Only for ``model="gpr"``.
    grid_size : int, optional
        GPR's interpolation grid points per input column with ``solver="ski"``.
    cg_options : dict, optional
        GPR's conjugate-gradient settings (:class:`gpnum.models.CGOptions`), for
        ``solver="cg"`` or ``"auto"``.

    Returns
    -------
    SVGP, SVTP, GPR or SGPR
    """
    xp = B.get_namespace(X)
    if X.ndim != 2:
        raise ValueError(f"X: expected shape (n, d), got {tuple(X.shape)}")
    n, d = X.shape
    check_build_options(model, separate_inducing=separate_inducing, solver=solver,
                        cg_options=cg_options)
    dtype, device = X.dtype, B.device_of(X)
    # The full-batch models hold their data, and their kernel starts from its scales (the
    # minibatch models' recipe was tuned from every parameter at 1 on standardised data).
    full = model in ("gpr", "sgpr") and y is not None
    kern = default_kernel(kernel, d, X=X if full else None, y=y if full else None, xp=xp,
                          dtype=dtype, device=device)
    if model in ("gpr", "sgpr"):
        if y is None:
            raise ValueError(f"model {model!r} holds its training data: pass y")
        check_build_options(model, likelihood=likelihood)
        lik = (default_likelihood(likelihood, num_classes=num_classes, xp=xp, dtype=dtype,
                                  device=device)
               if isinstance(likelihood, str) else likelihood)
        if model == "gpr":
            return GPR(kern, lik, X, y, solver="cholesky" if solver is None else solver,
                       cg_options=cg_options, grid_size=grid_size)
    check_build_options(model, num_inducing=num_inducing, num_data=n)
    Z = inducing.kmeans(X, int(num_inducing), seed=seed)
    if model == "sgpr":
        return SGPR(kern, lik, X, y, Z)
    jitter = inducing_jitter(xp, dtype) if jitter is None else jitter
    if model == "svtp":
        return SVTP(kern, Z, num_data=n, kl=kl, seed=seed, jitter=jitter)
    lik = (default_likelihood(likelihood, num_classes=num_classes, xp=xp, dtype=dtype,
                              device=device)
           if isinstance(likelihood, str) else likelihood)
    if separate_inducing:
        Z = xp.stack([Z] * int(lik.num_latent))
    model = SVGP(kern, lik, Z, num_data=n, whitening=whitening, jitter=jitter,
                 ciq_options=ciq_options if whitening == "ciq" else None)
    if y is not None and isinstance(lik, (likelihoods.Poisson, likelihoods.NegativeBinomial)):
        # Log link: start the constant mean at log(mean count), not at a rate of 1; counts in
        # the hundreds otherwise give first natural-gradient steps that leave the PD cone.
        mean_count = xp.mean(xp.astype(y, dtype))
        model.set_parameters({"mean": xp.log(xp.maximum(mean_count, xp.asarray(
            1e-3, dtype=dtype, device=device)))})
    return model
