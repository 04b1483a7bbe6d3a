"""Which OpenMP runtime the compiled kernel runs with, found at run time.

The header a build compiled against does not settle it: a build against GNU
libgomp can run with LLVM's libomp installed under libgomp's name (conda's
``llvm-openmp``), so the answer comes from the symbols of the library the
kernel actually loaded.
"""

from __future__ import annotations

import ctypes
import functools

from . import _kernel


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
