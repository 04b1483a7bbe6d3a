"""The results of a run as plain text: the comparison table, the goal rows, the table dtypes.

Every function takes what :func:`bertembed._bench.runner.run` returned (or a
file's :class:`~bertembed._bench.schema.BenchRun`) and reads it through
:mod:`bertembed._bench.schema`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core import dtypes
from .data import BERTEMBED, BERTEMBED_T, SCENARIOS
from .schema import BenchRun, CaseResult, as_run, label

Results = BenchRun | Sequence[Mapping[str, Any]]

#: Column order of the table (contenders not listed here come after, in order of appearance).
COLUMNS = [BERTEMBED, BERTEMBED_T, "numpy", "take", "copyto", "torch", "onnxruntime"]

#: The performance goals (docs: the performance page) that these tables do not measure.
NOT_TIMED = (
    "peak memory of one call <= 1.1x the result is measured by benchmarks/run.py; "
    "the bfloat16-checkpoint private memory and int8-table rows are not measured by the harness"
)


def fmt_time(seconds: float) -> str:
    """A duration with three significant digits and a unit.

    Examples
    --------
    >>> fmt_time(5.71e-05), fmt_time(0.00487)
    ('57.1 us', '4.87 ms')
    """
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _cell(r: CaseResult, name: str) -> str:
    if name in r.timings:
        text = fmt_time(r.timings[name].median_s)
        if name != BERTEMBED and r.measured:
            text += f" ({r.ratio(name):.2f}x)"
        threads = r.threads_of(name)
        if threads is not None and (name == BERTEMBED or len(r.variants_of(name)) > 1):
            text += f" @{threads}"
        return text
    if name in r.skipped:
        return r.skipped[name].status
    return "-"


def scenario_text(results: Results) -> str:
    """The label of the scenario the results were measured in."""
    run = as_run(results) if results else None
    scenario = run.cases[0].scenario if run else ""
    return SCENARIOS.get(scenario, scenario or "unknown scenario")


def format_table(results: Results) -> str:
    """A plain-text table of medians and ratios, one row per case, labelled with its scenario.

    Parameters
    ----------
    results : sequence of dict, or BenchRun
        The output of :func:`bertembed._bench.runner.run`.

    Returns
    -------
    str
        Cells are ``median (ratio x) @threads``; ``ratio`` is the contender's
        median / bertembed's (automatic threads), so above 1 means bertembed
        is faster; ``@n`` is the thread count that was fastest (peers measured
        at 1 and T) or that bertembed's automatic choice took. Skipped
        contenders show their status; ``-`` means the contender does not
        apply to the case.
    """
    if not results:
        return "(no results)"
    run = as_run(results)
    names: list[str] = []
    for r in run.cases:
        for name in [*r.timings, *r.skipped]:
            if name not in names:
                names.append(name)
    order = {n: (COLUMNS.index(n) if n in COLUMNS else len(COLUMNS), i) for i, n in enumerate(names)}
    names.sort(key=order.__getitem__)
    header = ["case", "T", *map(label, names)]
    rows = [[r.name, str(r.threads), *(_cell(r, n) for n in names)] for r in run.cases]
    lines = [f"scenario: {scenario_text(run)}", *_grid(header, rows), ""]
    lines.append(
        f"medians of {run.repeats} samples per contender; cell = median "
        "(contender / bertembed; >1 means bertembed is faster) @threads"
    )
    lines.append(
        f"T: most threads any contender may use; bertembed: its automatic choice (@ the threads "
        f"it took); {label(BERTEMBED_T)}: the faster of bertembed at 1 and at T threads; "
        "torch, onnxruntime: the faster of 1 and T threads; "
        "numpy, take, copyto: one thread"
    )
    m = run.machine
    lines.append(
        f"machine: {m.get('platform')}, {m.get('cpu_model')}, cpu_count={m.get('cpu_count')}; "
        f"numpy {m.get('numpy')}, torch {m.get('torch')}, onnxruntime {m.get('onnxruntime')}"
    )
    skipped = {(p, s.status, s.reason) for r in run.cases for p, s in r.skipped.items()}
    for p, status, reason in sorted(skipped):
        lines.append(f"{p}: {status}: {reason}")
    return "\n".join(lines)


#: The first line of the goal rows of a smoke test (``--quick``).
SMOKE_TEST = "smoke test: figures from a short run; not a verdict on the goals"


def format_goals(results: Results, judged: bool = True) -> str:
    """The performance goals the run measured: ratio, bound and verdict.

    Parameters
    ----------
    results : sequence of dict, or BenchRun
        The output of :func:`bertembed._bench.runner.run`.
    judged : bool, default True
        False for a smoke test (``--quick``: few samples, one round): the
        ratios are printed but every verdict reads "(not judged)", under a
        first line that says so.

    Returns
    -------
    str
        One row per goal of a case that was run; "n/a" with the reason when
        a side of the ratio was not measured (a missing library, bfloat16
        tables this bertembed refuses, a case not selected).

    Examples
    --------
    >>> print(format_goals([], judged=False))
    (no performance goal among the cases run)
    """
    rows = []
    run = as_run(results) if results else None
    for r in run.cases if run else []:
        for g in r.goals.values():
            if g.ratio is None:
                measured, verdict = "-", f"n/a: {g.reason or 'not measured'}"
            else:
                measured = f"{g.ratio:.2f}"
                verdict = ("met" if g.met else "MISSED") if judged else "(not judged)"
                verdict += f" ({g.numerator} / {g.denominator})"
            rows.append([f"{g.text} {g.op} {g.bound:g}", measured, verdict])
    if not rows:
        return "(no performance goal among the cases run)"
    title = f"performance goals, see the performance page of the docs ({scenario_text(run or [])})"
    head = [SMOKE_TEST, title] if not judged else [title]
    return "\n".join([*head, *_grid(["goal", "measured", "verdict"], rows), f"not here: {NOT_TIMED}"])


def _table_bytes(r: CaseResult) -> str:
    """The token table's values in MiB, by its ``table_dtype`` (None: float32, as given)."""
    entry = dtypes.BY_NAME.get(r.table_dtype or dtypes.FLOAT32.name)
    if entry is None or r.V is None or r.H is None:
        return "?"
    return f"{r.V * r.H * entry.itemsize / 2**20:.3g} MiB"


def format_table_dtypes(results: Results) -> str:
    """bertembed with low-precision token tables against float32 tables of the same case.

    Parameters
    ----------
    results : sequence of dict, or BenchRun
        The output of :func:`bertembed._bench.runner.run` (the ``tables``
        family).

    Returns
    -------
    str
        One row per case with a ``table_dtype`` whose float32-table twin
        (same rows, shape, result dtype and row kernel) was run: the token table's size,
        bertembed's median and ``float32-table median / this median`` (above
        1: the narrower table is faster), and the same ratio of the fastest
        samples. Empty when there is no such pair.
    """
    if not results:
        return ""
    run = as_run(results)

    def key(r: CaseResult) -> tuple[Any, ...]:
        return (r.V, r.H, r.batch, r.seq, r.dtype, r.layer_norm, r.out, r.isa)

    plain = {key(r): r for r in run.cases if r.table_dtype is None and r.measured}
    rows = []
    shown = None
    for r in run.cases:
        base = plain.get(key(r))
        if r.table_dtype is None or base is None:
            continue
        if shown is not base:
            shown = base
            t = base.timings[BERTEMBED]
            rows.append([base.name, "float32", _table_bytes(base), fmt_time(t.median_s), "1", "1"])
        if not r.measured:
            status = r.skipped[BERTEMBED].status if BERTEMBED in r.skipped else "not measured"
            rows.append([r.name, r.table_dtype, _table_bytes(r), status, "-", "-"])
            continue
        t, b = r.timings[BERTEMBED], base.timings[BERTEMBED]
        fastest = "-" if t.min_s is None or b.min_s is None else f"{b.min_s / t.min_s:.2f}"
        rows.append(
            [r.name, r.table_dtype, _table_bytes(r), fmt_time(t.median_s), f"{b.median_s / t.median_s:.2f}", fastest]
        )
    if not rows:
        return ""
    header = ["case", "token table", "size", "bertembed", "f32 / this (median)", "(fastest)"]
    return "\n".join(
        [f"token-table dtypes, bertembed at its automatic threads ({scenario_text(run)})", *_grid(header, rows)]
    )


def format_run(results: Results, judged: bool = True) -> str:
    """Everything a front end prints after a run: the table, the goals and, when the run
    has low-precision tables, :func:`format_table_dtypes`, separated by blank lines."""
    run: Results = as_run(results) if results else []
    parts = [format_table(run), format_goals(run, judged=judged), format_table_dtypes(run)]
    return "\n\n".join(p for p in parts if p)
