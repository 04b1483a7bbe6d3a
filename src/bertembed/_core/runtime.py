"""The kernel's runtime in this process: OpenMP, threads, fork safety, ``show_config``.

Which OpenMP runtime the compiled kernel runs with is found at run time:
the header a build compiled against does not settle it (a build against GNU
libgomp can run with LLVM's libomp installed under libgomp's name, conda's
``llvm-openmp``), so the answer comes from the symbols of the library the
kernel actually loaded.

Fork safety, for each OpenMP runtime.

GNU libgomp keeps a pool of worker threads per calling thread. After
``fork()`` the child has only the forking thread, but libgomp still counts
the parent's workers as its own and waits for them forever at the next
parallel region (gunicorn ``--preload``, multiprocessing "fork", celery
prefork). With libgomp, before every ``os.fork()`` we release the forking
thread's pool (``omp_pause_resource_all``); the parent rebuilds it on its
next call and the child starts a fresh one.

LLVM's libomp (and Intel's, the same code) registers fork handlers of its own
that start the runtime afresh in the child, and must not be paused before a
fork: its hard pause shuts the runtime down in a way its child handler does
not expect (a child forked after a parallel region aborts, a fork from a
thread other than the main one crashes the parent). With libomp we do
nothing.

With any other runtime we release the pool when the runtime can; where it
cannot, the child falls back to the serial kernel instead of hanging.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np

from .._version import __version__
from . import _kernel, cpus, dtypes, knobs, openmp_env, pool


def _exports(lib: ctypes.CDLL, name: str) -> bool:
    try:
        lib[name]
    except AttributeError:
        return False
    return True


@functools.cache
def openmp_runtime() -> str:
    """``"libgomp"`` (GNU), ``"libomp"`` (LLVM or Intel), ``"none"`` (serial build)
    or ``"unknown"`` (another runtime, or one that cannot be told; e.g. MSVC's).

    Looked up in the kernel's own symbol scope (the extension and the
    libraries it links), where its ``omp_*`` calls resolve. LLVM's runtime
    also exports libgomp's entry points, so its own ``__kmpc_`` ones are
    asked first.
    """
    if not _kernel.openmp_enabled():
        return "none"
    try:
        lib = ctypes.CDLL(_kernel.__file__)
    except OSError:
        return "unknown"
    if _exports(lib, "__kmpc_fork_call"):
        return "libomp"
    if _exports(lib, "GOMP_parallel"):
        return "libgomp"
    return "unknown"


_state = {"serial_only": False, "pause_failed": False, "installed": False}


def releases_before_fork() -> bool:
    """Whether the fork handler releases the OpenMP pool before ``fork()``."""
    return openmp_runtime() not in ("libomp", "none")


# The thread budget: the ceiling (from the affinity mask and the CPU quota,
# read at import and again in every forked child) and the process-wide count
# set by set_num_threads (0: automatic).
_threads: dict[str, object] = {"setting": 0, "budget": None}


def _budget() -> cpus.CpuBudget:
    budget = _threads["budget"]
    assert isinstance(budget, cpus.CpuBudget)
    return budget


def _apply_thread_limits() -> None:
    """Read the CPU budget and hand the ceiling and the setting to the kernel."""
    budget = cpus.cpu_budget()
    _threads["budget"] = budget
    setting = _threads["setting"]
    assert isinstance(setting, int)
    _kernel.set_thread_limits(budget.ceiling, setting)


def set_num_threads(n: int | None) -> None:
    """Set this process's thread count for every call that gives none.

    The rule for a call's threads, first match wins: the call's own
    ``num_threads``; the layer's (``BertEmbeddings(..., num_threads=)``,
    ``from_pretrained(..., num_threads=)``); this process-wide setting; the
    automatic choice. Every explicit count is clipped to the ceiling: the
    CPUs the process may use (its affinity mask, capped by its container's
    CPU quota rounded up) and OpenMP's maximum for the calling thread
    (``OMP_NUM_THREADS``, threadpoolctl), so 64 threads on 2 cores run as 2.

    The setting holds in the whole process from the moment it is made
    (import time does not matter) and is inherited by forked children:
    call it in a gunicorn ``post_fork`` hook or an app factory to give
    each worker its budget.

    Parameters
    ----------
    n : int or None
        A positive thread count; None or 0 goes back to the automatic choice.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.set_num_threads(1)
    >>> bertembed.get_num_threads()
    1
    >>> bertembed.set_num_threads(None)
    >>> bertembed.get_num_threads() is None
    True
    """
    from . import validate

    value = 0 if n is None or (type(n) is int and n == 0) else validate.as_num_threads(n)
    _threads["setting"] = int(value or 0)
    _apply_thread_limits()


def get_num_threads() -> int | None:
    """The process-wide thread count of :func:`set_num_threads`, None when automatic.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.get_num_threads() is None
    True
    """
    setting = _threads["setting"]
    return setting if isinstance(setting, int) and setting > 0 else None


def thread_ceiling() -> tuple[int, str]:
    """The ceiling every call's threads are clipped to, and where it comes from."""
    budget = _budget()
    omp = int(_kernel.max_threads_unclipped())
    if omp < budget.ceiling:
        return omp, "OpenMP maximum (OMP_NUM_THREADS or threadpoolctl)"
    return budget.ceiling, budget.source


def _before_fork() -> None:
    _state["pause_failed"] = releases_before_fork() and _kernel.release_threads() != 0


def _after_in_child() -> None:
    _apply_thread_limits()
    if _state["pause_failed"]:
        _state["serial_only"] = True
        _kernel.set_serial_only(True)


def serial_only() -> bool:
    """True in a forked child whose OpenMP pool could not be released."""
    return _state["serial_only"]


def install_fork_handlers() -> None:
    """Register the fork handlers (once; the module that runs kernels calls it)."""
    if _threads["budget"] is None:
        _apply_thread_limits()
        openmp_env.after_import(openmp_runtime(), _kernel.__file__)
    if not _state["installed"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_in_child)
    _state["installed"] = True


def openmp_enabled() -> bool:
    """Whether the compiled kernel uses OpenMP.

    Examples
    --------
    >>> import bertembed
    >>> isinstance(bertembed.openmp_enabled(), bool)
    True
    """
    return bool(_kernel.openmp_enabled())


def max_threads() -> int:
    """The most OpenMP threads a call from this thread may use.

    ``omp_get_max_threads()`` of the calling thread (it honours
    OMP_NUM_THREADS and threadpoolctl limits) clipped to the CPUs the process
    may use: its affinity mask, capped by its container's CPU quota (cgroup
    v1 or v2, rounded up); 1 when built without OpenMP.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.max_threads() >= 1
    True
    """
    return int(_kernel.max_threads())


def config() -> dict[str, object]:
    """The build and runtime facts that ``show_config`` prints, as a dict."""
    import platform  # (only here: it costs milliseconds at import)

    info = _kernel.build_info()
    return {
        "bertembed": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "compiler": info["compiler"],
        "openmp": bool(_kernel.openmp_enabled()),
        "openmp_version": info["openmp_version"],
        "openmp_runtime": openmp_runtime(),
        "row_kernel_isa": "{} ({})".format(info["isa"], _isa_reason(str(info["isa"]))),
        "row_kernels_built": " ".join(isas) if isinstance(isas := info["isas"], tuple) else str(isas),
        "wait_policy": "{policy} ({how})".format(**openmp_env.state()),
        "result_cache": f"{pool.pool.cap >> 20} MiB, holding {pool.pool.free_bytes / 2**20:.1f} MiB",
        "max_threads": int(_kernel.max_threads()),
        "thread_ceiling": "{} ({})".format(*thread_ceiling()),
        "num_threads": get_num_threads() or "automatic",
        "usable_cpus": f"{_budget().usable} (affinity mask)" if hasattr(os, "sched_getaffinity") else _budget().usable,
        "cpu_quota": "none" if _budget().quota is None else _quota_text(_budget().quota),
        "cpu_count": os.cpu_count(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "table_dtypes": "; ".join(
            [
                f"{', '.join(d.name for d in dtypes.AS_STORED)} (read as stored)",
                *(f"{d.name} token tables" for d in dtypes.REGISTRY if d.quantised),
            ]
        ),
        "result_dtypes": ", ".join(d.name for d in dtypes.RESULTS),
        "id_dtypes": "any integer (int32/int64 natively)",
    }


def _isa_reason(isa: str) -> str:
    cap = knobs.ISA.read()
    if cap:
        return f"the widest this CPU runs within BERTEMBED_ISA={cap}"
    return "the widest this CPU and build run"


def _quota_text(quota: cpus.Quota | None) -> str:
    assert quota is not None
    return f"{quota.cpus:g} CPUs ({quota.quota}/{quota.period} us, {quota.source})"


def show_config() -> None:
    """Print version, OpenMP status, threads and compiler of this build.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.show_config()  # doctest: +ELLIPSIS
    bertembed: ...
    """
    for key, value in config().items():
        print(f"{key}: {value}")
