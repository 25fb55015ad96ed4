"""What a code path may plan with: the cores it may split work over and the memory it may fill.

:func:`run_in_threads` splits work over threads of one process: NumPy's elementwise passes and
BLAS calls release the GIL, so two threads that each evaluate their own kernel blocks keep two
cores busy where NumPy alone keeps one (its elementwise passes are single-threaded whatever
the BLAS setting). :func:`available_memory` reads what the machine (or GPU) has free, so that
a path can choose between forming a matrix once and recomputing it in blocks by the memory
there is, not by a fixed budget.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import array_api_compat

from gpnum.backend import _blas

__all__ = ["available_memory", "default_workers", "run_in_threads", "run_row_split",
           "usable_cores"]

_ROW_POOL = None            # (pid, executor): the persistent threads of run_row_split
_ROW_POOL_LOCK = threading.Lock()
_IN_ROW_POOL = threading.local()  # .active: this thread is one of the row pool's


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_workers(xp) -> int:
    """Threads a blocked kernel product splits its blocks over by default: every usable core
    on NumPy (whose elementwise passes use one core each), 1 elsewhere (torch runs its own
    intra-op thread pool, CuPy a GPU; array_api_strict is for checking, not speed)."""
    return usable_cores() if array_api_compat.is_numpy_namespace(xp) else 1


def run_in_threads(fn, workers: int) -> list:
    """``[fn(0), ..., fn(workers - 1)]``, each call in its own thread (``workers`` > 1).

    Each thread does its BLAS work in the caller's pool (:func:`gpnum.backend.blas_pool`),
    so that the split does not wake a second library's pool. The results come back in the
    order of the worker index whatever the threads' timing, so a sum over them is
    reproducible. An exception in a worker is raised here.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
    if workers == 1:
        return [fn(0)]
    pool = getattr(_blas._POOL, "name", "scipy")

    def task(w):
        _blas._POOL.name = pool  # thread-local: this worker thread only
        return fn(w)

    with ThreadPoolExecutor(max_workers=workers) as executor:
        futures = [executor.submit(task, w) for w in range(workers)]
        return [f.result() for f in futures]


def _row_pool():
    global _ROW_POOL
    with _ROW_POOL_LOCK:
        # a forked child inherits the pool object but not its threads: it starts its own
        if _ROW_POOL is None or _ROW_POOL[0] != os.getpid():
            def mark():
                _IN_ROW_POOL.active = True
            # one thread per core beside the caller's; idle threads wait on a queue (no spin)
            _ROW_POOL = (os.getpid(),
                         ThreadPoolExecutor(max_workers=max(1, usable_cores() - 1),
                                            thread_name_prefix="gpnum-rows", initializer=mark))
        return _ROW_POOL[1]


def run_row_split(fn, workers: int) -> list:
    """``[fn(0), ..., fn(workers - 1)]``: ``fn(0)`` in the calling thread, the others in a
    pool of threads kept for the process (a short pass cannot pay for starting threads).

    Called from one of the pool's own threads, or with ``workers`` 1, the calls run one after
    another in the calling thread (a nested split would wait on itself). The results come
    back in the order of the worker index; an exception in a worker is raised here.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
    if workers == 1 or getattr(_IN_ROW_POOL, "active", False):
        return [fn(w) for w in range(workers)]
    pool = getattr(_blas._POOL, "name", "scipy")

    def task(w):
        _blas._POOL.name = pool  # thread-local: this worker thread only
        return fn(w)

    futures = [_row_pool().submit(task, w) for w in range(1, workers)]
    try:
        first = fn(0)
    except BaseException:
        for f in futures:  # no worker may still write into the caller's arrays
            f.exception()
        raise
    return [first] + [f.result() for f in futures]


def _meminfo_available(path="/proc/meminfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _host_available():
    found = _meminfo_available()
    if found is not None:
        return found
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def available_memory(xp=None, device=None):
    """Bytes of memory free for new arrays of namespace ``xp`` on ``device``.

    On a GPU (CuPy, or torch on a CUDA device) the device's free memory; otherwise the host's
    ``MemAvailable`` (``/proc/meminfo``: free memory plus what the kernel can reclaim from its
    caches without swapping), else ``SC_AVPHYS_PAGES * SC_PAGE_SIZE`` (free pages only).

    Returns
    -------
    int or None
        ``None`` when the system does not say.
    """
    if xp is not None and array_api_compat.is_cupy_namespace(xp):
        import cupy

        with cupy.cuda.Device(getattr(device, "id", None)):
            return int(cupy.cuda.runtime.memGetInfo()[0])
    if (xp is not None and array_api_compat.is_torch_namespace(xp)
            and getattr(device, "type", "cpu") == "cuda"):
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    return _host_available()
