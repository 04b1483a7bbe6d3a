"""Timing: callables timed round-robin (or alone), medians per call."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping

from .data import Contender, Fn, as_contender

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
) -> dict[str, dict[str, float]]:
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
        :class:`~bertembed._bench.data.Contender`'s ``prepare`` runs, untimed,
        before its warm-up and before each of its samples.
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
    return {
        n: {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "calls_per_sample": loops[n],
            "samples_s": s,
        }
        for n, s in samples.items()
    }
