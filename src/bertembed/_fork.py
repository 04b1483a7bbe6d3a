"""Fork safety, for each OpenMP runtime.

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

import os

from . import _kernel
from ._openmp import openmp_runtime

_state = {"serial_only": False, "pause_failed": False, "installed": False}


def releases_before_fork() -> bool:
    """Whether the fork handler releases the OpenMP pool before ``fork()``."""
    return openmp_runtime() not in ("libomp", "none")


def _before_fork() -> None:
    _state["pause_failed"] = releases_before_fork() and _kernel.release_threads() != 0


def _after_in_child() -> None:
    if _state["pause_failed"]:
        _state["serial_only"] = True
        _kernel.set_serial_only(True)


def serial_only() -> bool:
    """True in a forked child whose OpenMP pool could not be released."""
    return _state["serial_only"]


def install() -> None:
    """Register the fork handlers (once; the module that runs kernels calls it)."""
    if not _state["installed"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_in_child)
    _state["installed"] = True
