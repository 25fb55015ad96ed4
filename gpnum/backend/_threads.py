"""BLAS thread counts in gpnum's hot paths: one busy pool at a time, sized by one setting.

NumPy and SciPy wheels each bundle an OpenBLAS with its own thread pool, and OpenBLAS workers
spin for a while after each call before they sleep. Work that alternates between the two pools,
or that shares the cores with other processes, then runs more busy threads than there are cores,
and every call waits for a worker that the scheduler has put aside: the slowdown grows with the
load, not with the work (docs/backends.md, "BLAS threads"). Within a :func:`blas_pool
<gpnum.backend.blas_pool>` block gpnum therefore sets, with threadpoolctl, the pool that the block
names to :func:`blas_threads` threads and the other pool to one, and restores both on leaving
the outermost block. Thread counts change how work is shared, not the arithmetic.

A block opened with ``split_rows=True`` spends the same threads differently: its BLAS pools
run one thread each, and gpnum's own memory-bound passes over tall blocks (the block CG
updates, the products of :class:`gpnum.backend.SparseRows`) split their rows over
:func:`blas_threads` threads of the process (:func:`row_workers`). NumPy's elementwise passes
and SciPy's sparse products are single-threaded, and a BLAS pool left at two threads would
spin beside the split and take the cores it needs.
"""

from __future__ import annotations

import os
import threading

__all__ = ["blas_threads", "row_workers", "set_blas_threads"]

_ENV = "GPNUM_BLAS_THREADS"
_UNSET = object()
_setting = _UNSET  # set_blas_threads' value; _UNSET: read the environment variable
_lock = threading.Lock()
_depth = 0  # open blocks, process-wide (BLAS thread counts are process-wide)
_saved = None  # [(controller, num_threads)] to restore when the outermost block ends
_controllers = None  # {"numpy": [...], "scipy": [...], "shared": [...]}
_rows = threading.local()  # .workers: row_workers() on this thread; .stack: saved values


def _parse(value, source):
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "default", "none"):
            return None
        if text == "all":
            return os.cpu_count() or 1
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{source}: expected a positive integer, 'all' or 'default', got "
                             f"{value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{source}: expected a positive integer, 'all' or 'default', got "
                         f"{value!r}")
    return value


def blas_threads():
    """The number of BLAS threads of the pool a gpnum hot path works in.

    Returns
    -------
    int or None
        :func:`set_blas_threads`' value if it was called, else the environment variable
        ``GPNUM_BLAS_THREADS`` (a positive integer, ``all`` for every core, ``default``), else
        1. ``None`` (``default``): gpnum leaves both pools as the libraries (or
        ``OPENBLAS_NUM_THREADS``) set them.
    """
    if _setting is not _UNSET:
        return _setting
    return _parse(os.environ.get(_ENV, "1"), _ENV)


def set_blas_threads(threads):
    """Set the BLAS threads of gpnum's hot paths (see :func:`blas_threads`).

    Parameters
    ----------
    threads : int, "all", "default" or None
        A positive number of threads; ``"all"`` for ``os.cpu_count()``; ``"default"`` or
        ``None`` to leave the libraries' own settings untouched.

    Returns
    -------
    int or None
        The previous setting.
    """
    global _setting
    previous = blas_threads()
    _setting = _parse(threads, "threads")
    return previous


def _find_controllers():
    """The BLAS libraries loaded in this process, by whose pool they are."""
    global _controllers
    if _controllers is None:
        import scipy.linalg  # noqa: F401  (loads SciPy's BLAS, so that it is found)
        from threadpoolctl import ThreadpoolController

        found = {"numpy": [], "scipy": [], "shared": []}
        for lib in ThreadpoolController().lib_controllers:
            if lib.user_api != "blas":
                continue
            path = lib.filepath.replace("\\", "/")
            pool = ("scipy" if "/scipy.libs/" in path or "/scipy/" in path
                    else "numpy" if "/numpy.libs/" in path or "/numpy/" in path else "shared")
            found[pool].append(lib)
        _controllers = found
    return _controllers


def row_workers() -> int:
    """The threads over which gpnum's memory-bound passes split their rows on this thread:
    :func:`blas_threads` within an outermost ``blas_pool(..., split_rows=True)`` block
    opened on it, else 1."""
    return getattr(_rows, "workers", 1)


def enter(pool, split_rows=False):
    """Open a block whose work runs in ``pool`` ("numpy" or "scipy"), with ``split_rows`` as
    in the module notes; :func:`leave` closes it. Only the outermost block of the process
    sets thread counts (nested blocks keep the outer one's BLAS and row threads)."""
    global _depth, _saved
    with _lock:
        outermost = _depth == 0
        # a bad GPNUM_BLAS_THREADS raises here, before the count changes
        threads = blas_threads() if outermost else None
        _depth += 1
        stack = getattr(_rows, "stack", None)
        if stack is None:
            stack = _rows.stack = []
        stack.append(row_workers())
        if outermost and split_rows:
            _rows.workers = threads or 1
            threads = None if threads is None else 1
        if not outermost or threads is None:
            return
        controllers = _find_controllers()
        _saved = []
        for name, libs in controllers.items():
            want = threads if name in (pool, "shared") else 1
            for lib in libs:
                _saved.append((lib, lib.num_threads))
                lib.set_num_threads(want)


def leave():
    """Close the block opened by :func:`enter`; the outermost restores the thread counts."""
    global _depth, _saved
    with _lock:
        _depth -= 1
        _rows.workers = _rows.stack.pop()
        if _depth > 0 or _saved is None:
            return
        for lib, threads in _saved:
            lib.set_num_threads(threads)
        _saved = None
