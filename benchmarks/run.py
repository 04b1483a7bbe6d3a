"""Compare bertembed with NumPy, torch and ONNX Runtime; print medians, ratios and the goals.

Usage::

    python benchmarks/run.py [--repeats N | --quick] [--threads T] [--shared-process]
                             [--json FILE] [--cases SUBSTRING] [--peers a,b] [--no-memory]

By default every contender of every case is timed alone in its own fresh
process (torch and ONNX Runtime at the faster of 1 and T threads, bertembed
at its automatic choice and at T); ``--shared-process`` times them
interleaved in one process instead ("next to a runtime that spins"). The
same harness as ``bertembed bench``, plus the peak memory of one call; the
JSON is ``{"results": [...], "peak_memory": [...]}``, the results in the
layout of ``bertembed._bench.schema`` (what ``bertembed bench --json``
writes). See ``bertembed._bench.runner`` and ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shared import memory as bench_memory

from bertembed._bench import cases as bench_cases
from bertembed._bench import peers, report, runner, schema
from bertembed._cli.bench import select_cases
from bertembed._cli.common import CLIError


def _progress(done: int, total: int, label: str) -> None:
    print(f"\r[{done:>4}/{total}] {label:<48}", end="", file=sys.stderr, flush=True)
    if done == total and label == "done":
        print(file=sys.stderr)


def _memory_table(reports: list[dict[str, Any]]) -> str:
    lines = [f"peak extra memory of one call / result size (goal <= {bench_cases.PEAK_MEMORY_GOAL}x)"]
    for r in reports:
        if "unavailable" in r:
            lines.append(f"  {r['case']:<24} unavailable: {r['unavailable']}")
            continue
        rss = r.get("rss_ratio")
        rss_text = f"{rss:.3f}x" if rss is not None else str(r.get("rss_error", "-"))
        lines.append(
            f"  {r['case']:<24} result {r['result_bytes'] / 2**20:8.2f} MiB  "
            f"tracemalloc {r['ratio']:.3f}x  rss {rss_text}  "
            f"{'met' if r['met'] else 'MISSED'}"
        )
    return "\n".join(lines)


def _peak_memory(case: bench_cases.Case, threads: int | None) -> dict[str, Any]:
    try:
        return bench_memory.peak_memory(case, threads=threads)
    except (ImportError, TypeError) as exc:  # e.g. bfloat16 tables this bertembed refuses
        return {"case": case.name, "unavailable": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed samples per contender (15)")
    parser.add_argument("--quick", action="store_true", help="3 repeats: a smoke test (goals not judged)")
    parser.add_argument("--threads", type=int, default=None, help="T, the most threads any contender may use")
    parser.add_argument(
        "--shared-process",
        action="store_true",
        help="all contenders interleaved in one process instead of one process each",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--cases", metavar="SUBSTRING", help="only cases whose name contains it")
    parser.add_argument("--peers", help=f"comma-separated subset of {','.join(peers.PEERS)}")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory check")
    args = parser.parse_args(argv)

    try:
        cases = select_cases(bench_cases.DEFAULT_CASES, args.cases)
    except CLIError as exc:
        parser.error(str(exc))
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 15)
    results = runner.run(
        cases,
        repeats=repeats,
        threads=args.threads,
        peers=args.peers.split(",") if args.peers else None,
        progress=_progress,
        scenario="shared-process" if args.shared_process else "isolated",
        rounds=1 if args.quick else runner.ROUNDS,
    )
    print(report.format_run(results, judged=not args.quick))

    memory_reports = []
    if not args.no_memory:
        # One of each kind: fresh result, out= buffer, float32 + LayerNorm.
        seen = set()
        for case in cases:
            kind = (case.dtype, case.layer_norm, case.out)
            if kind not in seen:
                seen.add(kind)
                memory_reports.append(_peak_memory(case, args.threads))
        print()
        print(_memory_table(memory_reports))

    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(schema.dumps(results, peak_memory=memory_reports))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
