"""Which row kernel bertembed should pick here, told without asking bertembed.

The CPU's instruction sets come from NumPy's own run-time detection (CPUID and
the OS's XCR0, on every platform), and on macOS also from the
``hw.optional.avx512*`` sysctls (macOS turns the AVX-512 state on only when a
thread first uses it, so XCR0 alone says no). What a build must hold depends
on the platform only: every x86-64 build has the AVX2 body, GCC and clang
builds also the AVX-512 one (MSVC and the MSVC-shaped CI build do not), every
aarch64 build the NEON one.
"""

from __future__ import annotations

import platform
import subprocess
import sys

from bertembed._core.knobs import ISAS_ARM as ARM
from bertembed._core.knobs import ISAS_X86 as X86

# X86, ARM: every row kernel, per architecture, narrowest first (BERTEMBED_ISA names a cap).


def order() -> tuple[str, ...]:
    """The row kernels of this machine's architecture, narrowest first."""
    return ARM if platform.machine().lower() in ("aarch64", "arm64") else X86


def _numpy_features() -> dict[str, bool]:
    try:
        from numpy._core._multiarray_umath import __cpu_features__  # NumPy 2
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__  # type: ignore[no-redef]
    return dict(__cpu_features__)


def _sysctl_flag(name: str) -> bool:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return False
    return out.strip() == "1"


def cpu_isas() -> list[str]:
    """The row kernels this CPU and its OS run, narrowest first."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ["baseline", "neon"]
    if machine not in ("x86_64", "amd64"):
        return ["baseline"]
    f = _numpy_features()
    found = ["baseline"]
    if f.get("AVX2") and f.get("FMA3") and f.get("F16C"):
        found.append("avx2")
        avx512 = bool(f.get("AVX512F") and f.get("AVX512DQ") and f.get("AVX512VL"))
        if sys.platform == "darwin" and not avx512:
            avx512 = all(_sysctl_flag(f"hw.optional.avx512{x}") for x in ("f", "dq", "vl"))
        if avx512:
            found.append("avx512")
    return found


def required_built(compiler: str) -> list[str]:
    """The row kernels a build by `compiler` must hold on this machine."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ["baseline", "neon"] if not compiler.startswith("msvc") else ["baseline"]
    if machine in ("x86_64", "amd64"):
        msvc = compiler.startswith("msvc") or "msvc-shaped" in compiler
        return ["baseline", "avx2"] if msvc else list(X86)
    return ["baseline"]


def best_isa(built: tuple[str, ...] | list[str], cap: str | None = None) -> str:
    """The widest row kernel that is built, that the CPU runs, and that is at most `cap`."""
    names = order()
    top = names.index(cap) if cap in names else len(names) - 1
    runs = set(cpu_isas()) & set(built)
    return max((n for n in runs if names.index(n) <= top), key=names.index)
