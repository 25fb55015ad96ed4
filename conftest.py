"""Run the ```python blocks of README.md and docs/*.md as tests (issue 30), through Sybil.

Each page is one Sybil document: its blocks run top to bottom in one namespace, as a reader
would paste them, in a fresh temporary directory (so files a page writes land there and a page
cannot lean on another page's files or on the checkout's own ``results/``).

A block that trains for minutes carries the HTML comment ``<!-- docs: slow -->`` on the line
just above its fence. By default that block and every later block of the same page (they may use
its results) are skipped; ``python -m pytest --docs-slow`` runs them, which is what
``.ci/docs-slow`` does for the pages that carry the mark. Sybil's own ``<!-- skip: next -->``
directives work too, for a block that should never run (none does today).

Shell blocks (```bash) are not executed: the README's install-and-run lines run verbatim in
.ci/run's own steps, and the rest train for minutes to half an hour. Instead every ``gpnum ...``
command line in them is parsed by the command line's own parser (``gpnum.cli.build_parser``),
so a renamed or removed option, or a value the option refuses, fails the suite.

Only README.md and the top level of docs/ are collected; new pages there are picked up
automatically.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest
from sybil import Region, Sybil
from sybil.example import NotEvaluated
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer

ROOT = Path(__file__).resolve().parent
DOCS = ROOT / "docs"
_options = {"slow": False}


def pytest_addoption(parser):
    parser.addoption(
        "--docs-slow", action="store_true", default=False,
        help="also run the documentation blocks marked <!-- docs: slow --> (and the rest of their page)")


class _SkipRestOfPage:
    """Pushed onto a document when a slow block is skipped: every later block of the page is
    skipped too, since it may use names the slow block defines."""

    def __init__(self, line):
        self.line = line

    def __call__(self, example):
        if example.region.evaluator is check_command_lines:
            raise NotEvaluated()   # command lines are only parsed: they need no earlier block
        pytest.skip(f"follows the slow block at line {self.line} (run with --docs-slow)")


class SlowParser:
    """Sybil parser for the ``<!-- docs: slow -->`` mark (gpnum's convention, not Sybil's)."""

    def __init__(self):
        self.lexer = DirectiveInHTMLCommentLexer(directive="docs", arguments="slow")

    def __call__(self, document):
        for lexed in self.lexer(document):
            yield Region(lexed.start, lexed.end, "slow", self.evaluate)

    @staticmethod
    def evaluate(example):
        if _options["slow"]:
            return None
        # Skip this mark's block and everything after it on the page.
        example.document.push_evaluator(_SkipRestOfPage(example.line + 1))
        pytest.skip(f"slow documentation block at line {example.line + 1} (run with --docs-slow)")


def _gpnum_command_lines(source):
    """The argument lists of the ``gpnum`` (or ``python -m gpnum``) commands in a shell block."""
    text = source.replace("\\\n", " ")   # join continued lines
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        command = []
        for word in words + [";"]:
            if word not in ("&&", "||", ";", "|"):
                command.append(word)
                continue
            while command and "=" in command[0] and not command[0].startswith("-"):
                command = command[1:]   # VAR=value prefixes
            if command[:1] == ["gpnum"]:
                yield command[1:]
            elif command[:3] in (["python", "-m", "gpnum"], ["python3", "-m", "gpnum"]):
                yield command[3:]
            command = []


def check_command_lines(example):
    """Evaluator for ```bash blocks: each ``gpnum`` command line must parse."""
    from gpnum.cli import build_parser

    for argv in _gpnum_command_lines(str(example.parsed)):
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):   # --help exits 0
                return f"gpnum {shlex.join(argv)}\n{out.getvalue().strip()}"
    return None


def _page_setup(namespace):
    namespace["__docs_cwd__"] = os.getcwd()
    namespace["__docs_tmp__"] = tempfile.mkdtemp(prefix="gpnum-docs-")
    os.chdir(namespace["__docs_tmp__"])
    # A page's examples are a script: code under `if __name__ == "__main__":` runs.
    namespace["__name__"] = "__main__"


def _page_teardown(namespace):
    os.chdir(namespace.pop("__docs_cwd__"))
    shutil.rmtree(namespace.pop("__docs_tmp__"), ignore_errors=True)
    try:  # figures a page opened must not pile up across pages
        import matplotlib.pyplot as plt

        plt.close("all")
    except ImportError:
        pass


_sybil = Sybil(
    parsers=[SlowParser(), SkipParser(), PythonCodeBlockParser(),
             CodeBlockParser(language="bash", evaluator=check_command_lines)],
    patterns=["*.md"],
    setup=_page_setup,
    teardown=_page_teardown,
    name="docs",
)
_collect_markdown = _sybil.pytest()


def pytest_configure(config):
    _options["slow"] = config.getoption("--docs-slow")


def pytest_collect_file(file_path, parent):
    path = Path(file_path).resolve()
    if path == ROOT / "README.md" or (path.suffix == ".md" and path.parent == DOCS):
        return _collect_markdown(file_path, parent)
    return None
