"""The layer order of docs/architecture.md: each layer imports only the layers above it.

The walk reads every module's source (function-level imports included, since a lazy import is
still a dependency) and maps ``gpnum.<package>`` to its layer. Two corrections to the design
table, which its own column "must not know about" implies: ``params`` uses ``backend`` (it
converts values to arrays), so it sits just below it; ``datasets`` and ``inducing`` know nothing
of models, and ``hmm`` and the CLI use them, so they sit above the models. The command lines
are one package, ``gpnum/cli/`` (its argparse types included), at the bottom. ``special``
(``gpnum/special.py``, shared by likelihoods, models and hmm) knows only ``backend``; so do
``priors`` (``gpnum/priors.py``, hyper-parameter densities that the optimisers add to an
objective).

Two more rules of the layout are checked here: no module imports another package's private
module or name (``from gpnum.x._y import`` outside ``gpnum/x``), and no library module is
over 700 lines.
"""

import ast
import pathlib
import subprocess
import sys

import gpnum

ORDER = [("errors",), ("backend",), ("params",), ("priors",), ("special",), ("datasets",), ("linalg",), ("ciq",),
         ("divergences",), ("kernels",), ("inducing",), ("likelihoods",), ("models", "variational"),
         ("hmm",), ("optim",), ("checkpoint",), ("distributed",), ("sklearn",), ("cli", "__main__")]
LAYER = {name: i for i, names in enumerate(ORDER) for name in names}
ROOT = pathlib.Path(gpnum.__file__).parent


def _layer(module):
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 and parts[0] == "gpnum" else None


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gpnum":
                yield from ("gpnum." + a.name for a in node.names)
            elif node.module.startswith("gpnum."):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("gpnum."))


def test_every_gpnum_package_has_a_layer():
    packages = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
                if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert packages - {"__init__"} <= set(LAYER), packages - set(LAYER)


def test_no_module_imports_a_layer_below_its_own():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(("gpnum",) + path.relative_to(ROOT).with_suffix("").parts)
        if module == "gpnum.__init__":
            continue  # the package re-exports every layer
        me = _layer(module)
        for target in _imports(path):
            there = _layer(target)
            if there is not None and there > me:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_script_entry_point_is_the_cli():
    text = (ROOT.parent / "pyproject.toml").read_text() if (ROOT.parent / "pyproject.toml").exists() else None
    if text is not None:
        assert 'gpnum = "gpnum.cli:main"' in text
    r = subprocess.run([sys.executable, "-c", "import gpnum.cli, sys; sys.exit(gpnum.cli.main(['--version']))"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == gpnum.__version__


def test_the_command_line_builds_nothing_itself():
    # Commands parse, call library functions and report: a model, kernel, likelihood or
    # inducing-point set is built by a library function (gpnum.models.build_model,
    # gpnum.optim.gvi_by_selection, GVI.from_svgp, ...), never by a constructor call in cli/.
    import gpnum.kernels
    import gpnum.likelihoods
    import gpnum.models

    builders = set(gpnum.models.__all__) - {"build_model", "default_kernel", "default_likelihood",
                                            "inducing_jitter", "check_build_options",
                                            "build_multioutput_model", "MULTIOUTPUT_KINDS"}
    builders |= set(gpnum.kernels.__all__) | set(gpnum.likelihoods.__all__)
    builders |= {"kmeans", "greedy_variance", "select_inducing"}
    calls = []
    for path in sorted((ROOT / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                # --kernel's argparse type checks an expression's names and syntax by
                # building it on one column; the kernel it builds is dropped.
                if name in builders and not (path.name == "_argtypes.py"
                                             and name == "from_expression"):
                    calls.append(f"{path.name}:{node.lineno} calls {name}")
    assert not calls, "\n".join(calls)


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_imports_across_packages(source, own):
    """``gpnum.<pkg>._x`` (a private module or name, imported module-wise or from-wise) in
    ``source`` where ``<pkg>`` is not ``own``, the importing file's package (or top-level
    module)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module.split(".") + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".") for a in node.names]
        else:
            continue
        for parts in targets:
            if (len(parts) > 2 and parts[0] == "gpnum" and parts[1] != own
                    and any(_is_private(p) for p in parts[1:])):
                yield f"line {node.lineno}: {'.'.join(parts)}"


def test_no_module_imports_another_packages_private_module():
    # Private modules and names are their package's business: what another package needs is
    # re-exported through the owning package's __init__ (or gpnum.special).
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        own = path.relative_to(ROOT).parts[0].removesuffix(".py")
        wrong += [f"gpnum/{rel} {hit}"
                  for hit in _private_imports_across_packages(path.read_text(), own)]
    assert not wrong, "\n".join(wrong)


def test_the_private_import_check_sees_one():
    # the check above can fail: three private imports and two allowed ones, seen from models
    source = ("from gpnum.linalg._operators import Dense\nimport gpnum.hmm._chain\n"
              "from gpnum.linalg import _ciq\nfrom gpnum.linalg import Dense\n"
              "from gpnum.models._svgp import SVGP\n")
    hits = list(_private_imports_across_packages(source, "models"))
    assert hits == ["line 1: gpnum.linalg._operators.Dense", "line 2: gpnum.hmm._chain",
                    "line 3: gpnum.linalg._ciq"], hits


MAX_MODULE_LINES = 700


def test_no_library_module_exceeds_700_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"gpnum/{rel}: {lines} lines")
    assert not long, "split along concerns into private modules:\n" + "\n".join(long)
