"""Smoke test of the asv suite (issue 30): every module under asv_benchmarks/benchmarks/ imports,
and every benchmark runs once, as asv would call it, at its smallest parameters: the smallest
value of each numeric parameter, each value of the others (dtypes, methods, variants) once, on
the numpy backend, with every repeated measurement inside a ``track_`` benchmark done once
(``GPNUM_ASV_MAX_REPEATS=1``, which asv never sets). asv itself is not needed: this follows its conventions (``params`` /
``param_names``, ``setup`` / ``teardown`` with the parameters, ``NotImplementedError`` from
``setup`` skips a combination, benchmark names starting ``time_``, ``peakmem_``, ``mem_``,
``track_``). A ``track_`` benchmark must return a finite number. Nothing here measures time.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
import os
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "asv_benchmarks" / "benchmarks"
PACKAGE = "gpnum_asv_benchmarks"   # not "benchmarks": that name is too common to claim
PREFIXES = ("time_", "timeraw_", "peakmem_", "mem_", "track_")
MODULES = sorted(p.stem for p in BENCH_DIR.glob("*.py") if p.stem != "__init__")


def _import(name):
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, BENCH_DIR / "__init__.py", submodule_search_locations=[str(BENCH_DIR)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{PACKAGE}.{name}")


def _param_lists(cls):
    params = getattr(cls, "params", [])
    if not params:
        return [], []
    if not all(isinstance(p, (list, tuple)) for p in params):
        params = [params]   # asv: a flat list is the values of a single parameter
    names = list(getattr(cls, "param_names", [f"param{i}" for i in range(len(params))]))
    return [list(p) for p in params], names


def _combinations(params, names):
    """The smallest value of each numeric parameter and numpy for ``backend``; of the other
    parameters (dtypes, methods, variants) the first value, and then each further value once,
    with the rest at their first: every value is run, not every product of values."""
    choices = []
    for values, name in zip(params, names, strict=False):
        if name == "backend":
            values = ["numpy"] if "numpy" in values else values[:1]
        elif all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
            values = [min(values)]
        choices.append(values)
    base = [values[0] for values in choices]
    combos = [tuple(base)]
    for i, values in enumerate(choices):
        for value in values[1:]:
            combos.append(tuple(base[:i] + [value] + base[i + 1:]))
    return combos


# Cases whose single run still takes 5 s to 2 minutes on a loaded 2-core machine (a CIQ solve at
# m = 500, 8-step epochs, solves to convergence, a Dask cluster's start): out of the default run,
# which they would double; GPNUM_BENCH_SMOKE_ALL=1 runs them too.
SLOW = ("bench_svgp-FitStep-", "bench_svgp-ElboAndGrad-time_elbo_and_grad-numpy-float64-500-ciq",
        "bench_svgp-ElboAndGrad-track_step_over_cholesky-numpy-float64-500-ciq",
        "bench_svgp-TrainingStep-time_training_step-numpy-float64-500-ciq+",
        "bench_ciq-Whitening-", "bench_linalg-AgainstSciPy-", "bench_distributed-",
        "-track_converged_iteration_over_gemm-", "-track_iterations_to_rtol-")
RUN_SLOW = os.environ.get("GPNUM_BENCH_SMOKE_ALL") == "1"


def _cases():
    for module_name in MODULES:
        try:
            module = _import(module_name)
        except Exception:   # reported by test_module_imports
            continue
        for cls_name, cls in sorted(vars(module).items()):
            if (not isinstance(cls, type) or cls.__module__ != module.__name__
                    or cls_name.startswith("_")):   # asv skips private names too
                continue
            methods = sorted(m for m in dir(cls) if m.startswith(PREFIXES))
            if not methods:
                continue
            params, names = _param_lists(cls)
            for combo in _combinations(params, names):
                for method in methods:
                    label = "-".join([module_name, cls_name, method, *map(str, combo)])
                    slow = not RUN_SLOW and any(key in label for key in SLOW)
                    marks = [pytest.mark.skip(reason="slow: GPNUM_BENCH_SMOKE_ALL=1 runs it")] if slow else []
                    yield pytest.param(module_name, cls_name, method, combo, id=label, marks=marks)
        for fn_name, fn in sorted(vars(module).items()):
            if fn_name.startswith(PREFIXES) and callable(fn) and not isinstance(fn, type):
                yield pytest.param(module_name, None, fn_name, (), id=f"{module_name}-{fn_name}")


def test_there_are_benchmarks():
    assert "bench_svgp" in MODULES and "bench_gvi" in MODULES, MODULES


@pytest.mark.parametrize("module_name", MODULES)
def test_module_imports(module_name):
    _import(module_name)


@pytest.mark.parametrize("module_name, cls_name, method, combo", list(_cases()))
def test_benchmark_runs_once(module_name, cls_name, method, combo, monkeypatch):
    # One measurement per track_ helper instead of a best of several (see _common.repeats).
    monkeypatch.setenv("GPNUM_ASV_MAX_REPEATS", "1")
    module = _import(module_name)
    if cls_name is None:
        fn = getattr(module, method)
        result = fn()
    else:
        bench = getattr(module, cls_name)()
        try:
            if hasattr(bench, "setup"):
                bench.setup(*combo)
        except NotImplementedError:
            pytest.skip("setup raised NotImplementedError (asv skips this combination)")
        try:
            result = getattr(bench, method)(*combo)
        finally:
            if hasattr(bench, "teardown"):
                bench.teardown(*combo)
    if method.startswith("track_"):
        assert isinstance(result, numbers.Real) and math.isfinite(result), result
    if method.startswith("timeraw_"):
        assert isinstance(result, str) and compile(result, method, "exec")
