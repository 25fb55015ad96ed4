"""Saving and loading a model with its training state, in a plain ``.npz`` file.

Persistence sits above the models and sees them only through the model protocol: the model's
class name, ``config()`` (settings), ``data()`` (constructor arrays that are not parameters),
``parameters()``, and its kernel and likelihood (class, settings, parameters). When the model
was trained with :func:`gpnum.fit`, the file also holds the optimisers' state, the step and
epoch counters, the minibatch RNG state and the fixed parameters, so that training resumes
exactly. Arrays are stored as NumPy arrays, settings as one JSON string; ``FORMAT_VERSION`` is
checked on load.

A checkpoint is data, never code: loading builds only classes from an allow-list of gpnum's own
models, kernels and likelihoods, looked up by name; a file naming anything else is refused
before anything is imported or built. Loading creates new objects and touches nothing existing,
so a corrupt or mismatched file raises before anything is half-loaded.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from gpnum import backend as B
from gpnum.errors import ShapeError
from gpnum.models import (
    check_model,
    kernel_from_spec,
    kernel_spec,
    likelihood_from_spec,
    likelihood_spec,
)

__all__ = ["save", "load", "model_state", "model_from_state", "FORMAT_VERSION"]

FORMAT_VERSION = 2


def _allowed_models():
    """Model classes a checkpoint may name: those exported by :mod:`gpnum.models`.

    Checkpoints name a model by its class name only, so files written when the models lived in
    ``gpnum.variational`` load unchanged."""
    from gpnum import models

    out = {}
    for name in models.__all__:
        obj = getattr(models, name)
        if isinstance(obj, type) and issubclass(obj, models.ModelDefaults) \
                and obj is not models.ModelDefaults:
            out[name] = obj
    return out


def model_state(model, *, caller="model_state"):
    """A model as JSON-able settings and host arrays (what :func:`save` writes, without the
    training state): the form in which :mod:`gpnum.distributed` sends a model to workers.

    Returns
    -------
    config : dict
        Class name, dtype, ``model.config()``, kernel and likelihood descriptions.
    arrays : dict of numpy arrays
        ``param/<name>`` for every parameter and ``data/<name>`` for ``model.data()``.
    """
    check_model(model, ("checkpoint",), caller=caller)
    xp = model.xp
    cls = type(model)
    if _allowed_models().get(cls.__name__) is not cls:
        raise TypeError(f"{caller}: {cls.__module__}.{cls.__name__} is not one of gpnum's models "
                        "(checkpoints rebuild only those)")
    config = {
        "format_version": FORMAT_VERSION,
        "model": cls.__name__,
        "dtype": "float32" if model.dtype == xp.float32 else "float64",
        "settings": model.config(),
        "kernel": kernel_spec(model.kernel),
        "likelihood": likelihood_spec(model.likelihood),
    }
    arrays = {f"param/{k}": B.to_numpy(v) for k, v in model.parameters().items()}
    arrays.update({f"data/{k}": B.to_numpy(v) for k, v in model.data().items()})
    return config, arrays


def model_from_state(config, arrays, *, xp=None, device=None, where="model state"):
    """Rebuild a model from :func:`model_state`'s output (only gpnum's own classes)."""
    xp = B.namespace() if xp is None else xp
    dtype = getattr(xp, config["dtype"])
    params = {k[6:]: v for k, v in arrays.items() if k.startswith("param/")}
    data = {k[5:]: B.asarray(v, dtype=dtype if v.dtype.kind == "f" else None, xp=xp,
                             device=device)
            for k, v in arrays.items() if k.startswith("data/")}
    cls = _allowed_models().get(config["model"])
    if cls is None:
        raise ValueError(f"{where} names the model {config['model']!r}, which is "
                         f"not one of gpnum's ({', '.join(sorted(_allowed_models()))}); "
                         "refusing to build it")
    kern_p = {k[7:]: v for k, v in params.items() if k.startswith("kernel.")}
    lik_p = {k[11:]: v for k, v in params.items() if k.startswith("likelihood.")}
    kernel = kernel_from_spec(config["kernel"], kern_p, xp=xp, dtype=dtype, device=device,
                              where=where)
    likelihood = likelihood_from_spec(config["likelihood"], lik_p, xp=xp, dtype=dtype,
                                      device=device, where=where)
    own = {k: B.asarray(v, dtype=dtype, xp=xp, device=device)
           for k, v in params.items() if "." not in k}
    model = cls.from_config(kernel, likelihood, own, config["settings"], data)
    expected = {k for k in model.parameters() if "." not in k}
    if set(own) != expected:
        raise ValueError(f"{where}: parameters {sorted(own)} do not match the model's "
                         f"{sorted(expected)}")
    model.set_parameters(own)
    return model


def save(model, path) -> None:
    """Write ``model`` (and ``model.training_state`` if present) to ``path`` (``.npz``).

    Reload with :func:`load`. The file is written to a temporary name first and renamed, so an
    interrupted save never leaves a half-written checkpoint behind.

    Parameters
    ----------
    model : a model of the model protocol (gpnum.SVGP, gpnum.GPR, gpnum.SGPR, ...)
    path : str or path-like
    """
    config, arrays = model_state(model, caller="save")
    state = model.training_state
    if state is not None:
        adam = state.adam.state_dict()
        config["training"] = {
            "epoch": state.epoch, "step": state.step, "rng_state": state.rng_state,
            "seed": state.seed, "fixed": list(state.fixed),
            "schedule": state.schedule,
            "adam": {k: v for k, v in adam.items() if not isinstance(v, np.ndarray)},
            "ngd": None if state.ngd is None else {
                "gamma": state.ngd.gamma if not callable(state.ngd.gamma) else None,
                "method": state.ngd.method, "max_rejections": state.ngd.max_rejections,
                "rtol": state.ngd.rtol, "clip_curvature": state.ngd.clip_curvature,
                **state.ngd.state_dict()},
        }
        arrays.update({f"adam/{k}": v for k, v in adam.items() if isinstance(v, np.ndarray)})
        cache = None if state.ngd is None else state.ngd.natural_cache(model)
        if cache is not None:
            # The natural parameters the next step starts from: recomputing them from q_sqrt
            # would round differently, and a resumed run must equal an uninterrupted one.
            arrays["ngd/theta1"], arrays["ngd/P"] = B.to_numpy(cache[0]), B.to_numpy(cache[1])
    path = os.fspath(path)
    tmp = path + ".tmp.npz"
    np.savez(tmp, config=np.array(json.dumps(config)), **arrays)
    os.replace(tmp, path)  # never leave a half-written checkpoint behind


def _from_version_1(config):
    """Version 1 (gpnum 0.1.0's first checkpoints) held only SVGPs, with settings at the top."""
    keys = ("num_data", "whitening", "jitter", "ciq_options", "krylov_options", "num_latent",
            "variational_form")
    new = {k: v for k, v in config.items() if k not in keys}
    new["model"] = "SVGP"
    new["settings"] = {k: config[k] for k in keys if k in config}
    if new.get("training") is not None:
        new["training"] = {"fixed": [], **new["training"]}
    return new


def load(path, *, xp=None, device=None):
    """Read a model saved by :func:`save` / ``SVGP.save``.

    Parameters
    ----------
    path : str or path-like
    xp, device : optional
        Target namespace and device (default: the default backend, ``GPNUM_BACKEND``).

    Returns
    -------
    model : the saved model's class (gpnum.SVGP, gpnum.GPR, gpnum.SGPR, ...)
        With ``model.training_state`` restored when the file has one (resume with
        ``gpnum.fit(model, X, y, ..., resume=True)``).

    Raises
    ------
    ValueError
        If the file is not a gpnum checkpoint, is corrupt, has another format version, names a
        class that is not one of gpnum's models, kernels or likelihoods, or its arrays do not
        match its configuration.
    """
    from gpnum.optim import Adam, NaturalGradient, TrainingState

    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            files = {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        # NumPy's own advice for pickled data (load it unsafely) is wrong here: a gpnum
        # checkpoint never holds pickles, so such a file is not one.
        why = ("it holds pickled objects, which gpnum checkpoints never do"
               if "pickle" in str(exc) else f"{type(exc).__name__}: {exc}")
        raise ValueError(f"{path}: not a readable gpnum checkpoint ({why}; truncated or "
                         f"corrupt files cannot be resumed: save again)") from None
    if "config" not in files:
        raise ValueError(f"{path}: not a gpnum checkpoint (no 'config' entry)")
    try:
        config = json.loads(str(files["config"]))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: corrupt checkpoint configuration ({exc})") from exc
    version = config.get("format_version")
    if version == 1:
        config = _from_version_1(config)
        version = FORMAT_VERSION
    if version != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format version {version!r} is not supported "
                         f"(this gpnum reads version {FORMAT_VERSION})")
    xp = B.namespace() if xp is None else xp
    dtype = getattr(xp, config["dtype"])
    try:
        model = model_from_state(config, files, xp=xp, device=device,
                                 where=f"{path}: checkpoint")
        training = config.get("training")
        if training is not None:
            adam_state = dict(training["adam"])
            adam_state.update({k[5:]: v for k, v in files.items() if k.startswith("adam/")})
            adam = Adam()
            adam.load_state_dict(adam_state, like=model.unconstrained())
            ngd = None
            if training["ngd"] is not None:
                g = training["ngd"]
                ngd = NaturalGradient(g["gamma"] if g["gamma"] is not None else 0.1, g["method"],
                                      max_rejections=g["max_rejections"], rtol=g["rtol"],
                                      clip_curvature=g.get("clip_curvature", False))
                ngd.load_state_dict(g)
                if "ngd/theta1" in files and "ngd/P" in files:
                    ngd.set_natural_cache(
                        model, B.asarray(files["ngd/theta1"], dtype=dtype, xp=xp, device=device),
                        B.asarray(files["ngd/P"], dtype=dtype, xp=xp, device=device))
            model.training_state = TrainingState(
                epoch=training["epoch"], step=training["step"], rng_state=training["rng_state"],
                adam=adam, ngd=ngd, seed=training["seed"], fixed=tuple(training["fixed"]),
                schedule=training.get("schedule"))
    except (KeyError, TypeError, ShapeError) as exc:
        raise ValueError(f"{path}: checkpoint does not match its configuration "
                         f"({type(exc).__name__}: {exc})") from None
    return model
