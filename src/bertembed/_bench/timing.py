"""Timing: callables timed round-robin (or alone), medians per call; one-off calls; call logs.

The only module of the harness that reads a clock. It imports nothing but
the standard library (no NumPy, no other module of the harness), so that
``run_in_tree`` (``benchmarks/shared/trees.py``) can load this very file into a
process whose ``bertembed`` is another source tree, and time both trees the
same way.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Fn = Callable[[], Any]


def now() -> float:
    """The harness's clock, in seconds (monotonic, the finest resolution there is).

    For the timings the helpers here cannot wrap: each request a load
    generator sends from its own coroutines, say.
    """
    return time.perf_counter()


#: Shortest timed sample: fast calls are looped until a sample lasts this long.
MIN_SAMPLE_S = 0.01
#: Pause between two samples when several contenders share a process, so that
#: one runtime's spinning worker threads (OpenMP, ONNX Runtime) go idle
#: before the next contender starts.
GAP_S = 0.002
#: Each callable is called for this many sample lengths before it is timed
#: (0.2 s by default: a steady state of caches, pools and thread choices).
WARMUP_SAMPLES = 20
#: Calibration (how many calls make a sample) stops timing single calls after this long.
CALIBRATION_S = 0.05


@dataclass
class Contender:
    """One timed callable and what must happen before each of its timed samples.

    ``prepare`` runs, untimed, before the warm-up and before every sample:
    for a runtime whose thread count is process-wide (torch), it sets the
    count this contender is measured at, so two variants of one peer can be
    interleaved in one process.
    """

    call: Fn
    prepare: Callable[[], None] | None = None


def as_contender(built: Fn | Contender) -> Contender:
    """A builder's result as a :class:`Contender` (a bare callable has nothing to prepare)."""
    return built if isinstance(built, Contender) else Contender(built)


def _one_call(fn: Fn) -> float:
    """The time of one call: the fastest of up to three (fewer when they are slow)."""
    best, spent = math.inf, 0.0
    for _ in range(3):
        start = time.perf_counter()
        fn()
        one = time.perf_counter() - start
        best, spent = min(best, one), spent + one
        if spent > CALIBRATION_S:
            break
    return best


def time_interleaved(
    funcs: Mapping[str, Fn | Contender],
    repeats: int,
    *,
    min_sample_s: float | None = None,
    gap_s: float | None = None,
    on_repeat: Callable[[int], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Time callables round-robin: each repeat runs every one once, order rotated.

    With a single callable this is plain repeated timing (the isolated
    scenario: one contender per process).

    Parameters
    ----------
    funcs : mapping of str to callable or Contender
        No-argument callables, each warmed up (calls for :data:`WARMUP_SAMPLES`
        times the sample length, at least one, so that caches, thread pools and bertembed's automatic
        thread choice are in their steady state; then up to three timed calls
        that set how many calls make a sample) before timing. A
        :class:`Contender`'s ``prepare`` runs, untimed, before its warm-up
        and before each of its samples.
    repeats : int
        Samples per callable.
    min_sample_s : float, optional
        A callable faster than this is looped within a sample (default
        :data:`MIN_SAMPLE_S`); times are per call.
    gap_s : float, optional
        Sleep after each sample (default :data:`GAP_S`; 0 for none).
    on_repeat : callable, optional
        Called with the number of repeats done after each one.

    Returns
    -------
    dict
        ``{name: {"median_s", "min_s", "calls_per_sample", "samples_s"}}``,
        seconds per call (``samples_s``: every sample).

    Examples
    --------
    >>> stats = time_interleaved({"sum": lambda: sum(range(100))}, 3, min_sample_s=0.0)
    >>> sorted(stats["sum"]), stats["sum"]["min_s"] <= stats["sum"]["median_s"]
    (['calls_per_sample', 'median_s', 'min_s', 'samples_s'], True)
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    target = MIN_SAMPLE_S if min_sample_s is None else min_sample_s
    gap = GAP_S if gap_s is None else gap_s
    contenders = {name: as_contender(fn) for name, fn in funcs.items()}
    loops = {}
    for name, c in contenders.items():
        if c.prepare is not None:
            c.prepare()
        warm_until = time.perf_counter() + WARMUP_SAMPLES * target
        c.call()
        while time.perf_counter() < warm_until:
            c.call()
        loops[name] = max(1, min(100_000, math.ceil(target / max(_one_call(c.call), 1e-9))))
    names = list(contenders)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            c, n = contenders[name], loops[name]
            if c.prepare is not None:
                c.prepare()
            fn = c.call
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
            if gap:
                time.sleep(gap)
        if on_repeat is not None:
            on_repeat(r + 1)
    return {n: {**summarize(s), "calls_per_sample": loops[n]} for n, s in samples.items()}


def summarize(samples_s: list[float]) -> dict[str, Any]:
    """``{"median_s", "min_s", "samples_s"}`` of seconds-per-call samples (pooled from
    several processes, or one process's).

    Examples
    --------
    >>> summarize([3.0, 1.0, 2.0])
    {'median_s': 2.0, 'min_s': 1.0, 'samples_s': [3.0, 1.0, 2.0]}
    """
    if not samples_s:
        raise ValueError("no samples to summarize")
    return {"median_s": statistics.median(samples_s), "min_s": min(samples_s), "samples_s": list(samples_s)}


@dataclass
class Once:
    """One call timed: its result, wall time and the process's CPU time (every thread)."""

    result: Any
    wall_s: float
    user_s: float
    system_s: float

    @property
    def cpu_s(self) -> float:
        """User + system CPU seconds."""
        return self.user_s + self.system_s


def time_once(fn: Fn) -> Once:
    """Call ``fn`` once, untouched by warm-up or repetition, and time it.

    For work that is done once and whose first time is the figure (converting
    a table, exporting a model): wall time, and the CPU time of the whole
    process (all threads: ``getrusage``, or :func:`os.times` where there is
    none), which a busy machine disturbs less.

    Examples
    --------
    >>> once = time_once(lambda: sum(range(1000)))
    >>> once.result, once.wall_s >= 0.0, once.cpu_s >= 0.0
    (499500, True, True)
    """
    cpu0 = _cpu_times()
    start = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - start
    cpu1 = _cpu_times()
    return Once(result, wall, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])


def _cpu_times() -> tuple[float, float]:
    """(user, system) CPU seconds of this process, every thread (microseconds where there is getrusage)."""
    if sys.platform != "win32":
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime, usage.ru_stime
    times = os.times()
    return times.user, times.system


@dataclass
class CallLog:
    """A callable that calls ``fn`` and records each call: start, duration and ``note()``.

    For looking inside a timing rather than making one: wrap a contender in a
    log, let :func:`time_interleaved` (or the runner) time it, and read
    ``records`` afterwards. ``note`` runs after each call (untimed), e.g. to
    record the thread count a call took.

    Examples
    --------
    >>> log = CallLog(lambda: 7, note=lambda: "x")
    >>> log(), log()
    (7, 7)
    >>> len(log.records), log.records[0].note
    (2, 'x')
    """

    fn: Fn
    note: Fn | None = None
    records: list[LoggedCall] = field(default_factory=list)

    def __call__(self) -> Any:
        start = time.perf_counter()
        result = self.fn()
        seconds = time.perf_counter() - start
        self.records.append(LoggedCall(start, seconds, None if self.note is None else self.note()))
        return result


@dataclass(frozen=True)
class LoggedCall:
    """One call of a :class:`CallLog`: when it started (``perf_counter``), how long it took, its note."""

    start: float
    seconds: float
    note: Any
