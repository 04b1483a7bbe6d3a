"""``bertembed bench``: the comparison harness as a command, with a table, JSON and a plot.

The timing itself is :func:`bertembed._bench.runner.run`; this module selects
the cases, drives the progress bar, prints :func:`bertembed._bench.report.format_run`,
writes the JSON (:func:`bertembed._bench.schema.dumps`) and draws the results
with the harness's one plotter (:func:`bertembed._bench.plot.draw`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._bench import cases as bench_cases
from .._bench import plot, report, runner, schema
from .._core import knobs
from .._version import __version__
from .common import CLIError, ProgressBar, check_out_dir, positive_int, write_text

#: The title of ``--plot``'s figure.
PLOT_TITLE = f"bertembed {__version__}: time per call (lower is better)"


def select_cases(cases: Sequence[Any], pattern: str | None) -> list[Any]:
    """The cases whose name or label contains ``pattern``, or one of its comma-separated parts (case-insensitive)."""
    chosen = list(cases)
    if pattern:
        needles = [p.strip().lower() for p in pattern.split(",") if p.strip()]
        chosen = [c for c in chosen if any(n in _case_text(c).lower() for n in needles)]
        if not chosen:
            names = ", ".join(_case_text(c) for c in cases)
            raise CLIError(f"--cases {pattern!r} matches none of the cases: {names}")
    return chosen


def select_isas(cases: Sequence[Any], isas: str | None) -> list[Any]:
    """The cases for the row kernels ``isas`` (comma-separated): a case of one
    of them is kept, one of another dropped, and one for no kernel in
    particular is measured with each (named ``...-avx2``)."""
    chosen = list(cases)
    if isas:
        names = [x.strip() for x in isas.split(",") if x.strip()]
        unknown = [x for x in names if x not in bench_cases.TABLE_ISAS]
        if unknown:
            raise CLIError(f"--isa {isas!r}: unknown {', '.join(unknown)}; known: {', '.join(bench_cases.TABLE_ISAS)}")
        chosen = []
        for c in cases:
            if c.isa is None:
                chosen.extend(replace(c, name=f"{c.name}-{isa}", isa=isa) for isa in names)
            elif c.isa in names:
                chosen.append(c)
    return chosen


def _case_text(case: Any) -> str:
    for attr in ("label", "name"):
        value = getattr(case, attr, None)
        if isinstance(value, str):
            return value
    return str(case)


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the comparison harness; print a table, optionally save JSON and a plot."""
    if args.plot is not None:
        try:
            plot.require_matplotlib()
        except ImportError:
            raise CLIError(f"--plot needs matplotlib: {plot.NEEDS_MATPLOTLIB}") from None
        check_out_dir(args.plot, "--plot")
    if args.json is not None:
        check_out_dir(args.json, "--json")
    cases = select_cases(select_isas(bench_cases.family(args.family), args.isa), args.cases)
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 15)
    scenario = "shared-process" if args.shared_process else "isolated"
    kwargs: dict[str, Any] = {
        "repeats": repeats,
        "threads": args.threads,
        "scenario": scenario,
        "rounds": 1 if args.quick else runner.ROUNDS,
    }
    if args.peers is not None:
        kwargs["peers"] = [p.strip() for p in args.peers.split(",") if p.strip()]
    elif args.family == "tables":
        kwargs["peers"] = []  # bertembed against itself, table dtype against table dtype
    with ProgressBar(len(cases), "bench", unit="steps", enabled=not args.quiet) as bar:
        results = runner.run(cases, progress=bar, **kwargs)
    print(report.format_run(results, judged=not args.quick))
    if args.json is not None:
        write_text(args.json, schema.dumps(results))
        print(f"wrote {args.json}")
    if args.plot is not None:
        plot.draw(results, args.plot, title=PLOT_TITLE)
        print(f"wrote {args.plot}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``bench`` on the subcommand parsers ``sub``."""
    bench = sub.add_parser(
        "bench",
        help="compare bertembed with NumPy, torch and ONNX Runtime",
        description="Time bertembed and each installed peer on random BERT-base-shaped "
        "tables (fixed seed) and print the medians, the ratios and the project's performance goals "
        "(see the performance page of the docs). "
        "By default each contender is timed alone in its own fresh process, torch and ONNX "
        "Runtime at the faster of 1 and T threads, bertembed at its automatic choice and at 1 and T.",
    )
    bench.add_argument(
        "--repeats", type=positive_int, metavar="N", help="timed samples per contender and case (default 15)"
    )
    bench.add_argument(
        "--threads",
        type=positive_int,
        metavar="T",
        help="T: the most threads any contender may use (default: all cores)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="3 repeats, one round: a smoke test (ratios printed, goals not judged)"
    )
    bench.add_argument(
        "--cases",
        metavar="SUBSTR",
        help="run only the cases whose name contains SUBSTR (or one of a comma-separated list)",
    )
    bench.add_argument(
        "--isa",
        metavar="LIST",
        help=f"comma-separated row kernels ({knobs.ISA.name}: {knobs.ISA.describe()}) to measure with, each "
        "in its own processes (default: the family's; 'tables' has one case per kernel this machine runs)",
    )
    bench.add_argument(
        "--family",
        choices=bench_cases.FAMILIES,
        default="default",
        help="the cases to run: 'default' (bertembed against its peers) or 'tables' (float32, "
        "bfloat16 and int8 token tables of BERT-base and of a 250k x 768 vocabulary, random ids, "
        "bertembed only unless --peers; up to 2 GiB per process)",
    )
    bench.add_argument(
        "--peers",
        metavar="LIST",
        help="comma-separated peers to compare with (default: every installed one)",
    )
    bench.add_argument(
        "--shared-process",
        action="store_true",
        help="time every contender interleaved in this one process instead (the scenario "
        "'next to a runtime that spins')",
    )
    bench.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    bench.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also draw time per call against batch size (needs matplotlib)",
    )
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=cmd_bench)
