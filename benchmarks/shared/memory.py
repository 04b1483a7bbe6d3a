"""Peak memory of one bertembed call, relative to the size of its result.

:func:`peak_memory` measures with tracemalloc in this process and, on Linux,
with the peak resident set size (``VmHWM``) around the call in a fresh
subprocess. The goal it checks is :data:`bertembed._bench.cases.PEAK_MEMORY_GOAL`.
:func:`rss_peak` is that RSS measurement around any call, for the scripts
of ``benchmarks/`` that measure the memory of other work (a conversion).
Only ``benchmarks/`` uses it (``bertembed bench`` does not measure memory).
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from bertembed import max_threads
from bertembed._bench.cases import PEAK_MEMORY_GOAL
from bertembed._bench.data import Case, make_inputs
from bertembed._bench.spawn import run_function
from bertembed._bench.subject import bertembed_call

T = TypeVar("T")


def rss_status() -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of this process in bytes, from ``/proc/self/status`` (Linux), else None.

    VmHWM is the peak of this process image only; ``ru_maxrss`` would not
    do, as Linux carries the parent's peak across fork and exec.
    """
    found = {}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    if len(found) != 2:
        return None
    return found["VmRSS"], found["VmHWM"]


@dataclass(frozen=True)
class RssPeak:
    """The resident set around one call: before it (RSS and peak) and the peak after it."""

    before: int
    peak_before: int
    peak: int

    @property
    def extra_bytes(self) -> int:
        """The rise of the peak over the larger of the RSS and the peak before the call.

        The peak before the call must not exceed the RSS just before it, or
        the call's own peak could hide under an older one (see :attr:`baseline_ok`).
        """
        return self.peak - max(self.before, self.peak_before)

    @property
    def baseline_ok(self) -> bool:
        """Whether the older peak was within 1 MiB of the RSS before the call."""
        return self.peak_before <= self.before + (1 << 20)


def rss_peak(fn: Callable[[], T]) -> tuple[T, RssPeak | None]:
    """Call ``fn`` and return its result and the :class:`RssPeak` around it (None off Linux).

    Meant for a fresh process (:func:`bertembed._bench.spawn.run_function`):
    there, everything resident before the call is the process's baseline.
    """
    before = rss_status()
    result = fn()
    after = rss_status()
    if before is None or after is None:
        return result, None
    return result, RssPeak(before[0], before[1], after[1])


def rss_probe(argv: list[str]) -> dict[str, int] | None:
    """Child side of the RSS measurement (``argv[0]``: the JSON spec): RSS and peaks around one call."""
    args = json.loads(argv[0])
    case = Case(**args["case"])
    cache: dict[Any, Any] = {}
    call = bertembed_call(case, make_inputs(case, args["seed"], cache), args["threads"])
    # Start the OpenMP pool (thread stacks) with a call too small to matter.
    small = replace(case, batch=1, seq=min(case.seq, args["threads"]), out=False)
    bertembed_call(small, make_inputs(small, args["seed"], cache), args["threads"])()
    _, peak = rss_peak(call)
    return None if peak is None else asdict(peak)


def _rss_extra(case: Case, seed: int, threads: int) -> dict[str, Any]:
    spec = json.dumps({"case": asdict(case), "seed": seed, "threads": threads})
    try:
        got = run_function(f"{__file__}:rss_probe", [spec], timeout=600)
    except RuntimeError as exc:
        return {"rss_error": str(exc)}
    if got is None:
        return {"rss_error": "no VmRSS/VmHWM in /proc/self/status"}
    peak = RssPeak(**got)
    return {
        "rss_extra_bytes": peak.extra_bytes,
        "rss_ratio": peak.extra_bytes / case.result_bytes if case.result_bytes else None,
        "rss_baseline_ok": peak.baseline_ok,
    }


def peak_memory(case: Case, *, seed: int = 0, threads: int | None = None, rss: bool = True) -> dict[str, Any]:
    """Peak extra memory of one bertembed call, relative to its result's size.

    Two measurements: tracemalloc in this process (NumPy reports its array
    allocations to it), and, with ``rss`` on Linux, the rise of the peak
    resident set size around the call in a fresh subprocess (which also sees
    memory the kernel allocates with plain ``malloc``).

    Parameters
    ----------
    case : Case
    seed : int, default 0
    threads : int, optional
        Default :func:`bertembed.max_threads`.
    rss : bool, default True
        Also measure in a subprocess (skipped where ``/proc`` is missing).

    Returns
    -------
    dict
        ``case``, ``result_bytes``, ``extra_bytes`` and ``ratio``
        (tracemalloc), ``rss_extra_bytes`` and ``rss_ratio`` (or
        ``rss_error``), ``goal`` (:data:`PEAK_MEMORY_GOAL`) and ``met``. With
        ``case.out`` the result buffer exists before the call, so the ratio
        is close to 0.
    """
    nthreads = max_threads() if threads is None else threads
    call = bertembed_call(case, make_inputs(case, seed), nthreads)
    call()  # warm: lazily built constants are not the call's memory
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
        del result
    finally:
        if not tracing:
            tracemalloc.stop()
    extra = peak - base
    ratio = extra / case.result_bytes if case.result_bytes else 0.0
    report: dict[str, Any] = {
        "case": case.name,
        "threads": nthreads,
        "result_bytes": case.result_bytes,
        "extra_bytes": extra,
        "ratio": ratio,
        "goal": PEAK_MEMORY_GOAL,
    }
    worst = ratio
    if rss and sys.platform.startswith("linux"):
        report.update(_rss_extra(case, seed, nthreads))
        if report.get("rss_ratio") is not None:
            worst = max(worst, report["rss_ratio"])
    report["met"] = bool(worst <= PEAK_MEMORY_GOAL)
    return report
