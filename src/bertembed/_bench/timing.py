"""Timing: callables timed round-robin, medians per call."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping

from .data import Fn

#: Shortest timed sample: fast calls are looped until a sample lasts this long.
MIN_SAMPLE_S = 0.01
#: Pause between two samples, so that one runtime's spinning worker threads
#: (OpenMP, ONNX Runtime) go idle before the next contender starts.
GAP_S = 0.002


def time_interleaved(
    funcs: Mapping[str, Fn],
    repeats: int,
    *,
    min_sample_s: float | None = None,
    on_repeat: Callable[[int], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Time callables round-robin: each repeat runs every one once, order rotated.

    Parameters
    ----------
    funcs : mapping of str to callable
        No-argument callables, each warmed up (two calls) before timing.
    repeats : int
        Samples per callable.
    min_sample_s : float, optional
        A callable faster than this is looped within a sample (default
        :data:`MIN_SAMPLE_S`); times are per call.
    on_repeat : callable, optional
        Called with the number of repeats done after each one.

    Returns
    -------
    dict
        ``{name: {"median_s", "min_s", "calls_per_sample"}}``, seconds per call.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    target = MIN_SAMPLE_S if min_sample_s is None else min_sample_s
    loops = {}
    for name, fn in funcs.items():
        fn()
        start = time.perf_counter()
        fn()
        one = time.perf_counter() - start
        loops[name] = max(1, min(100_000, math.ceil(target / max(one, 1e-9))))
    names = list(funcs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, n = funcs[name], loops[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
            if GAP_S:
                time.sleep(GAP_S)
        if on_repeat is not None:
            on_repeat(r + 1)
    return {
        n: {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "calls_per_sample": loops[n],
        }
        for n, s in samples.items()
    }
