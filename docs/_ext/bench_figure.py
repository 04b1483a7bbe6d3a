"""Sphinx extension: the performance figures and tables, drawn from the harness's JSON at build time.

The committed file (``bench_json`` in ``conf.py``, default ``_data/bench.json``,
written by ``bertembed bench --json``) is read and checked when the build
starts, by the harness's own reader, :mod:`bertembed._bench.schema` of the
installed bertembed (the documentation build installs the package); a
missing or malformed file stops the build with the reason, which names the
case and the field. Three directives use it:

``.. bench-figure::``
    Time per call and each peer's ratio against batch size (float32 +
    LayerNorm, S=128), one row of panels per scenario in the file, drawn by
    the harness's one plotter (:func:`bertembed._bench.plot.draw`, the one
    ``bertembed bench --plot`` uses) into the build directory (never into
    the sources). The
    caption states the scenario, the repeats and the machine, from the file.
``.. bench-table::``
    One row per case: each contender's median time per call and its ratio to
    bertembed. Option ``:scenario:`` (default: the first in the file).
``.. bench-goals::``
    The goals the run evaluated: ratio, bound, met or missed.

A role puts one goal's verdict in running text, so that prose never states
a verdict the data can contradict:

``:bench-goal:`KEY```
    ``met (measured 1.49, goal >= 1.2)``, ``missed (...)`` or ``not measured``,
    for the goal KEY (e.g. ``bf16-1.2x``) of the file's first scenario.

Contenders are shown by :func:`bertembed._bench.schema.label` (``bertembed-fixed``
is shown as ``bertembed 1|T``); the performance page defines every name.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.errors import SphinxError
from sphinx.util.docutils import SphinxDirective

from bertembed._bench import plot, schema
from bertembed._bench.report import COLUMNS, fmt_time
from bertembed._bench.schema import SUBJECT, BenchDataError, BenchRun, CaseResult, label, load

#: Contenders in the order of the figure's legend and the table's columns (the harness's table order).
ORDER = tuple(COLUMNS)

#: How the docs label each scenario of the harness (a heading, then the detail in brackets).
SCENARIOS = {
    "isolated": "isolated processes (each contender alone in its own process)",
    "shared-process": "shared process (contenders interleaved in one process, next to runtimes that spin)",
}
if set(SCENARIOS) != set(schema.SCENARIOS):  # a scenario added to the harness needs its words here
    raise ImportError(
        f"docs/_ext/bench_figure.py labels {sorted(SCENARIOS)}, the harness has {sorted(schema.SCENARIOS)}"
    )


class BenchJSONError(SphinxError):
    """The build stops: the benchmark JSON is missing or malformed."""

    category = "Benchmark data error (docs/_ext/bench_figure.py)"


def _json_path(app: Sphinx) -> Path:
    return Path(app.confdir) / app.config.bench_json


def _load(app: Sphinx) -> BenchRun:
    try:
        return load(_json_path(app))
    except BenchDataError as exc:
        raise BenchJSONError(str(exc)) from None


def _draw_once(app: Sphinx, run: BenchRun) -> Path:
    """The figure's path, drawn unless a figure of the same JSON content exists."""
    path = _figure_path(app, run)
    if not path.exists():
        try:
            draw(run, path)
        except BenchDataError as exc:
            raise BenchJSONError(str(exc)) from None
    return path


def _figure_path(app: Sphinx, run: BenchRun) -> Path:
    digest = hashlib.sha256(run.path.read_bytes()).hexdigest()[:12]
    return Path(app.doctreedir) / "_bench" / f"bench-{digest}.png"


def _contenders(cases: list[CaseResult]) -> list[str]:
    names = {n for c in cases for n in c.times}
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def draw(run: BenchRun, path: Path) -> None:
    """Draw the batch sweep of every scenario in `run` into `path` (PNG), with the harness's plotter."""
    if not any(len({c.batch for c in run.sweep(s)}) > 1 for s in run.scenarios):
        raise BenchDataError(
            f"{run.path}: no float32 + LayerNorm cases at S=128 over several batch sizes to draw "
            "(run `bertembed bench` with its default cases)"
        )
    plot.draw(run, path)


def _prepare(app: Sphinx) -> None:
    """Check the JSON and draw the figure before any page is read (fails the build if either fails)."""
    _draw_once(app, _load(app))


def _caption(run: BenchRun) -> str:
    labels = "; ".join(SCENARIOS[s] for s in run.scenarios)
    return (
        f"Scenario: {labels}. Medians of {run.repeats} repeats, BERT-base-shaped tables "
        f"(V = 30522, P = 512, H = 768). Machine: {run.describe_machine()}. "
        f"Drawn at build time from {Path(run.path).name}."
    )


def _table(header: list[str], rows: list[list[str]]) -> nodes.table:
    table = nodes.table(classes=["bench-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body
    for target, cells in ((head, [header]), (body, rows)):
        for cells_row in cells:
            row = nodes.row()
            for cell in cells_row:
                entry = nodes.entry()
                entry += nodes.paragraph(text=cell)
                row += entry
            target += row
    return table


class _BenchDirective(SphinxDirective):
    option_spec: ClassVar[dict[str, Any]] = {"scenario": directives.unchanged}

    def run_data(self) -> BenchRun:
        run = _load(self.env.app)
        self.env.note_dependency(str(run.path))
        return run

    def scenario(self, run: BenchRun) -> str:
        scenario = self.options.get("scenario", run.scenarios[0])
        if scenario not in run.scenarios:
            raise self.error(f"scenario {scenario!r} is not in {run.path} (it has: {', '.join(run.scenarios)})")
        return scenario


class BenchFigure(_BenchDirective):
    """``.. bench-figure::``: the batch-sweep figure with a caption from the JSON."""

    def run(self) -> list[nodes.Node]:
        run = self.run_data()
        png = _draw_once(self.env.app, run)  # drawn by _prepare already, unless cleaned since
        doc_dir = Path(self.env.doc2path(self.env.docname)).parent
        figure = nodes.figure(classes=["bench-figure"])
        figure += nodes.image(uri=Path(os.path.relpath(png, doc_dir)).as_posix(), alt="benchmark figure")
        figure += nodes.caption(text=_caption(run))
        return [figure]


class BenchTable(_BenchDirective):
    """``.. bench-table::``: median time per call and ratio to bertembed, per case and contender."""

    def run(self) -> list[nodes.Node]:
        run = self.run_data()
        scenario = self.scenario(run)
        cases = [c for c in run.cases if c.scenario == scenario]
        names = _contenders(cases)
        peers = [n for n in names if n != SUBJECT]
        rows = []
        for c in cases:
            if not c.measured:
                status = c.skipped[SUBJECT].status if SUBJECT in c.skipped else "not measured"
                rows.append([c.name, status, *("-" for _ in peers)])
                continue
            auto = c.threads_of(SUBJECT)
            row = [c.name, f"{fmt_time(c.times[SUBJECT])}" + (f" @{auto}" if auto else "")]
            for p in peers:
                if p in c.times:
                    t = c.threads_of(p)
                    row.append(f"{fmt_time(c.times[p])}" + (f" @{t}" if t else "") + f" ({c.ratio(p):.2f}x)")
                else:
                    row.append(c.skipped[p].status if p in c.skipped else "-")
            rows.append(row)
        caption = nodes.paragraph(
            text=f"{SCENARIOS[scenario]}; medians of {run.repeats} repeats; cell = median per call, "
            f"@threads, (contender / bertembed: above 1, bertembed is faster). {run.describe_machine()}."
        )
        return [_table(["case", SUBJECT, *map(label, peers)], rows), caption]


class BenchGoals(_BenchDirective):
    """``.. bench-goals::``: each goal the run evaluated, with its ratio and verdict."""

    def run(self) -> list[nodes.Node]:
        run = self.run_data()
        scenario = self.scenario(run)
        rows = []
        for c in run.cases:
            if c.scenario != scenario:
                continue
            for g in c.goals.values():
                ratio = "n/a" if g.ratio is None else f"{g.ratio:.2f}"
                verdict = "n/a" if g.met is None else ("met" if g.met else "missed")
                rows.append([g.text, f"{g.op} {g.bound:g}", ratio, verdict])
        if not rows:
            raise self.error(f"{run.path} has no goals for the scenario {scenario!r}")
        note = nodes.paragraph(text=f"{SCENARIOS[scenario]}; {run.describe_machine()}.")
        return [_table(["goal", "bound", "measured", "verdict"], rows), note]


def verdict(run: BenchRun, key: str) -> str:
    """One goal's verdict in words, from the first scenario of `run`; KeyError if the run lacks it."""
    scenario = run.scenarios[0]
    for c in run.cases:
        for g in c.goals.values():
            if c.scenario == scenario and g.key == key:
                if g.ratio is None or g.met is None:
                    return "not measured in this run"
                return f"{'met' if g.met else 'missed'} (measured {g.ratio:.2f}, goal {g.op} {g.bound:g})"
    raise KeyError(key)


def goal_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: dict[str, Any] | None = None,
    content: list[str] | None = None,
) -> tuple[list, list]:
    """``:bench-goal:`KEY```: the verdict of goal KEY in the run, as text."""
    env = inliner.document.settings.env
    run = _load(env.app)
    env.note_dependency(str(run.path))
    try:
        return [nodes.Text(verdict(run, text.strip()))], []
    except KeyError:
        keys = sorted({k for c in run.cases for k in c.goals})
        message = inliner.reporter.error(
            f"no goal {text.strip()!r} in {run.path} (it has: {', '.join(keys)})", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("bench_json", "_data/bench.json", "env", types=(str,))
    app.connect("builder-inited", _prepare)
    app.add_directive("bench-figure", BenchFigure)
    app.add_directive("bench-table", BenchTable)
    app.add_directive("bench-goals", BenchGoals)
    app.add_role("bench-goal", goal_role)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
