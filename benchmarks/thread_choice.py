"""What does the automatic thread choice do, call by call?

Runs bertembed's harness on one case and logs every call of the contender
with automatic threads (the harness's ``CallLog``): the thread count it took
and its duration. Then
prints, for the last timed samples, the mean time per call, the share of
calls on several threads and the first calls of the sample, and the learnt
estimates (``bertembed._core._kernel.auto_threads_state()``).

``--shared-process`` (the default here): the harness's second scenario,
every contender interleaved in this process, next to runtimes whose idle
workers spin. ``--alone``: bertembed's three variants (automatic, 1 and T
threads) and ``np.take`` interleaved in this process, no runtime with
threads of its own.

Usage::

    python benchmarks/thread_choice.py [--case f32-ln-B1-S128] [--alone] [--repeats N | --quick]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bertembed._bench import measure, subject, timing
from bertembed._cli import main as cli_main
from bertembed._core import _kernel

#: The log of the contender with automatic threads (each call's note: the threads it took).
LOG: list[timing.CallLog] = []


def _logged_call(case: Any, inputs: Any, threads: int | None) -> Any:
    """The harness's bertembed contender; the automatic one logs each call."""
    call = subject.bertembed_call(case, inputs, threads)
    if threads is not None:
        return call
    log = timing.CallLog(call, note=lambda: int(_kernel.last_auto_threads()))
    LOG.append(log)
    return log


def _report(last: int) -> None:
    calls = [c for log in LOG for c in log.records]
    taken = np.array([c.note for c in calls])
    took = np.array([c.seconds for c in calls]) * 1e6
    starts = np.array([c.start for c in calls])
    multi = float(np.mean(taken > 1)) if len(taken) else 0.0
    print(f"\nautomatic calls: {len(calls)}, on several threads: {multi:.1%}")
    # Samples are separated by the harness's pause (> 1 ms between two calls).
    samples = np.split(np.arange(len(calls)), np.flatnonzero(np.diff(starts) > 1e-3) + 1)
    for idx in [s for s in samples if len(s) >= 5][-last:]:
        first = " ".join(f"{t}:{d:.0f}" for t, d in zip(taken[idx][:10], took[idx][:10], strict=True))
        print(
            f"  sample of {len(idx):4d} calls: mean {took[idx].mean():7.1f} us, "
            f"several threads {np.mean(taken[idx] > 1):4.0%}; first calls (threads:us) {first}"
        )
    print("learnt estimates {size class: (ns/65536 values 1 thread, all threads, samples, samples, calls, favoured)}:")
    print(" ", _kernel.auto_threads_state())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="f32-ln-B1-S128", help="a harness case name (or part of one)")
    parser.add_argument("--alone", action="store_true", help="no torch or ONNX Runtime next to it")
    parser.add_argument("--repeats", type=int, default=15, help="timed samples per contender")
    parser.add_argument("--samples", type=int, default=12, help="how many of the last samples to print")
    parser.add_argument("--quick", action="store_true", help="3 repeats: a smoke test")
    args = parser.parse_args(argv)
    measure.bertembed_call = _logged_call  # the harness builds its contenders through this name
    repeats = 3 if args.quick else args.repeats
    bench = ["bench", "--cases", args.case, "--shared-process", "-q", "--repeats", str(repeats)]
    if args.alone:
        bench += ["--peers", "take"]
    try:
        cli_main(bench)
    except SystemExit:
        pass
    _report(args.samples)


if __name__ == "__main__":
    main()
