"""Fork safety.

GNU libgomp keeps a pool of worker threads per calling thread. After
``fork()`` the child has only the forking thread, but libgomp still counts
the parent's workers as its own and waits for them forever at the next
parallel region (gunicorn ``--preload``, multiprocessing "fork", celery
prefork). Before every ``os.fork()`` we release the forking thread's pool
(``omp_pause_resource_all``); the parent rebuilds it on its next call and the
child starts a fresh one. Where the runtime cannot release it, the child
falls back to the serial kernel instead of hanging.
"""

from __future__ import annotations

import os

from . import _kernel

_state = {"serial_only": False, "pause_failed": False, "installed": False}


def _before_fork() -> None:
    _state["pause_failed"] = _kernel.openmp_enabled() and _kernel.release_threads() != 0


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
