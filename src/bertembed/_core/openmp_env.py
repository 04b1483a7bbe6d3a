"""The OpenMP wait policy: idle workers sleep after a call instead of spinning.

OpenMP runtimes keep a finished call's worker threads spinning for a while
so that the next parallel region starts a little sooner. In a service that
time is stolen from the encoder that runs next in the same process, and from
the other workers on the machine. So by default bertembed asks for the
passive policy (``BERTEMBED_WAIT_POLICY=active`` keeps the runtime's own):

- GNU libgomp (Linux wheels) reads ``OMP_WAIT_POLICY`` / ``GOMP_SPINCOUNT``
  once, when the library is loaded, which is when the kernel is imported. We
  set ``OMP_WAIT_POLICY=passive`` around that import unless you set either
  variable, and restore the environment right after, so that runtimes loaded
  later (another libgomp, ONNX Runtime, torch) are not affected. If libgomp
  was already loaded by another module, it keeps the policy it started with.
- LLVM libomp (macOS) spins for ``KMP_BLOCKTIME`` (200 ms by default); unless
  you set ``KMP_BLOCKTIME`` we call ``kmp_set_blocktime(0)`` after import,
  which holds for the importing thread's pool.
- MSVC's vcomp (Windows) has no such control that we use; it is left alone.

Examples
--------
>>> from bertembed._core import openmp_env
>>> openmp_env.state()["policy"] in ("passive", "active")
True
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from . import knobs

_state: dict[str, str] = {"policy": "passive", "how": "not applied yet"}


def _loaded(name: str) -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return any(name in line for line in maps)
    except OSError:
        return False


@contextlib.contextmanager
def kernel_import() -> Iterator[None]:
    """Around the import of the kernel: every BERTEMBED_* knob checked (a bad value
    warns), the wait policy in the environment, then the environment restored."""
    knobs.check_all()
    policy = knobs.WAIT_POLICY.read()
    _state["policy"] = policy
    saved = os.environ.get("OMP_WAIT_POLICY")
    set_here = False
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        _state["how"] = "OMP_WAIT_POLICY/GOMP_SPINCOUNT set by the user"
    elif policy == "active":
        _state["how"] = "BERTEMBED_WAIT_POLICY=active: the runtime's own policy"
    elif _loaded("libgomp"):
        _state["how"] = "libgomp was loaded before bertembed: its own policy"
    else:
        os.environ["OMP_WAIT_POLICY"] = "passive"
        set_here = True
        _state["how"] = "OMP_WAIT_POLICY=passive while the kernel loaded (libgomp)"
    try:
        yield
    finally:
        if set_here:
            if saved is None:
                os.environ.pop("OMP_WAIT_POLICY", None)
            else:
                os.environ["OMP_WAIT_POLICY"] = saved


def after_import(runtime: str, kernel_file: str) -> None:
    """libomp: ``kmp_set_blocktime(0)`` unless KMP_BLOCKTIME is set; say what holds for the others."""
    if runtime == "libomp":
        if _state["policy"] != "passive" or "KMP_BLOCKTIME" in os.environ:
            _state["how"] = "libomp: KMP_BLOCKTIME or its default"
            return
        try:
            import ctypes

            ctypes.CDLL(kernel_file).kmp_set_blocktime(0)
            _state["how"] = "libomp: kmp_set_blocktime(0) for the importing thread"
        except (OSError, AttributeError):
            _state["how"] = "libomp: kmp_set_blocktime not found, its default"
    elif runtime not in ("libgomp",):
        _state["how"] = f"{runtime}: the runtime's own policy"


def state() -> dict[str, str]:
    """``{"policy": "passive" | "active", "how": what was done}``."""
    return dict(_state)
