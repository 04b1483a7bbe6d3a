"""Where does a parallel region start to pay off?

Times the harness's bertembed contender with ``num_threads=1`` against
``num_threads=T`` (default: ``bertembed.max_threads()``), interleaved by the
harness's ``time_interleaved``, for growing results of B * S * H elements,
float32 and float64, with and without LayerNorm, and prints the speed-up
(1-thread median / T-thread median) and the crossover: the smallest size
from which T threads are never slower. Compare it with twice
``bertembed._core._kernel.ELEMENTS_PER_THREAD``, below which the automatic
thread choice uses one thread. One process: bertembed against itself.

Usage::

    python benchmarks/threshold.py [--repeats N | --quick] [--threads T] [--hidden H]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bertembed import max_threads
from bertembed._bench import data, subject, timing
from bertembed._core import _kernel

#: Result rows (B * S); S is at most 256 so that any row count fits BERT's 512 positions.
ROWS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096]
#: Target length of one sample. Short samples make the minimum meaningful on
#: a busy machine: some of them run without being preempted.
SAMPLE_S = 0.001
CONFIGS = [("float32", False), ("float32", True), ("float64", False), ("float64", True)]


def _shape(rows: int) -> tuple[int, int]:
    return (1, rows) if rows <= 256 else (rows // 256, 256)


def _label(dtype: str, ln: bool, rows: int, threads: int) -> str:
    return f"{dtype}{'+ln' if ln else ''}-{rows}@{threads}"


def measure(
    repeats: int, threads: int, hidden: int, rows_list: list[int] = ROWS
) -> dict[tuple[str, bool], list[dict[str, Any]]]:
    """Speed-ups of ``threads`` threads over one, per configuration and size.

    Every (configuration, size, thread count) is one contender of a single
    :func:`~bertembed._bench.timing.time_interleaved` run: each repeat times
    all of them once, the order rotated, with the harness's pause between
    samples, so that a busy spell on the machine hits every pair alike.

    Parameters
    ----------
    repeats : int
        Samples per thread count, configuration and size.
    threads : int
        The parallel thread count.
    hidden : int
        H of the tables.
    rows_list : list of int, default :data:`ROWS`
        The result rows (B * S) to measure.

    Returns
    -------
    dict
        ``{(dtype, layer_norm): [{"elements", "rows", "t1", "tn", "speedup",
        "speedup_min"}, ...]}`` by growing size, with median seconds per call.
    """
    cache: dict[Any, Any] = {}
    calls = {}
    for dtype, ln in CONFIGS:
        for rows in rows_list:
            batch, seq = _shape(rows)
            case = data.Case("threshold", dtype, ln, batch, seq, H=hidden)
            inputs = data.make_inputs(case, 0, cache)
            for nt in (1, threads):
                calls[_label(dtype, ln, rows, nt)] = subject.bertembed_call(case, inputs, nt)

    def progress(done: int) -> None:
        print(f"\r[{done:>3}/{repeats}]", end="", file=sys.stderr, flush=True)

    stats = timing.time_interleaved(calls, repeats, min_sample_s=SAMPLE_S, on_repeat=progress)
    print(file=sys.stderr)
    found: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for dtype, ln in CONFIGS:
        found[(dtype, ln)] = []
        for rows in rows_list:
            one, many = stats[_label(dtype, ln, rows, 1)], stats[_label(dtype, ln, rows, threads)]
            found[(dtype, ln)].append(
                {
                    "elements": rows * hidden,
                    "rows": rows,
                    "t1": one["median_s"],
                    "tn": many["median_s"],
                    "speedup": one["median_s"] / many["median_s"],
                    "speedup_min": one["min_s"] / many["min_s"],
                }
            )
    return found


def crossover(points: list[dict[str, Any]], key: str = "speedup") -> int | None:
    """The smallest element count from which ``key`` stays >= 1, or None.

    Parameters
    ----------
    points : list of dict
        One configuration's measurements, by growing size.
    key : str, default "speedup"

    Returns
    -------
    int or None
        None when T threads are slower even at the largest size.
    """
    best = None
    for p in reversed(points):
        if p[key] < 1.0:
            break
        best = p["elements"]
    return best


def main(argv: list[str] | None = None) -> int:
    """Measure and print the crossover.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status.
    """
    parser = argparse.ArgumentParser(description="1 thread vs T threads, by work size")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--quick", action="store_true", help="3 repeats of every 4th size: a smoke test")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=768)
    args = parser.parse_args(argv)
    threads = args.threads or max_threads()
    if threads < 2:
        print("only one thread available: nothing to measure")
        return 0
    repeats, rows_list = (3, ROWS[::4]) if args.quick else (args.repeats, ROWS)
    found = measure(repeats, threads, args.hidden, rows_list)

    names = [f"{d.replace('float', 'f')}{'+ln' if ln else ''}" for d, ln in CONFIGS]
    print(
        f"speed-up of {threads} threads over 1 (median ratio; min-based in brackets), "
        f"H={args.hidden}, {repeats} interleaved repeats{' (--quick: a smoke test)' if args.quick else ''}"
    )
    print(f"{'elements':>9} {'rows':>5}  " + "  ".join(f"{n:>16}" for n in names))
    for i, rows in enumerate(rows_list):
        cells = []
        for cfg in CONFIGS:
            p = found[cfg][i]
            cells.append(f"{p['speedup']:6.2f}x ({p['speedup_min']:5.2f}x)")
        print(f"{rows * args.hidden:>9} {rows:>5}  " + "  ".join(f"{c:>16}" for c in cells))
    print()
    crossings = []
    for name, cfg in zip(names, CONFIGS, strict=True):
        med, low = crossover(found[cfg]), crossover(found[cfg], "speedup_min")
        crossings.append(med)
        print(
            f"crossover {name:>7}: median {med if med is not None else 'never'}, "
            f"min-based {low if low is not None else 'never'} elements"
        )
    print(f"the automatic choice uses one thread below {2 * _kernel.ELEMENTS_PER_THREAD} elements")
    if all(c is not None for c in crossings):
        worst = max(c for c in crossings if c is not None)
        print(
            f"never slower with threads from {worst} elements; the next power of two is {1 << (worst - 1).bit_length()}"
        )
    else:
        print("threads were slower at every size for some configuration (a loaded machine?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
