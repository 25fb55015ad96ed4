"""The layer order of docs/architecture.md: each layer imports only the layers above it.

The walk reads every module's source (function-level imports included, since a lazy import is
still a dependency) and maps ``gpnum.<package>`` to its layer. Two corrections to the design
table, which its own column "must not know about" implies: ``params`` uses ``backend`` (it
converts values to arrays), so it sits just below it; ``datasets`` and ``inducing`` know nothing
of models, and ``hmm`` and the CLI use them, so they sit above the models. The command lines
are one package, ``gpnum/cli/`` (its argparse types included), at the bottom.
"""

import ast
import pathlib
import subprocess
import sys

import gpnum

ORDER = [("errors",), ("backend",), ("params",), ("datasets",), ("linalg",), ("ciq",),
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
                                            "inducing_jitter"}
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
