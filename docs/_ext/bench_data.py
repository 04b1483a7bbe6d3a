"""The benchmark harness's JSON (``bertembed bench --json``), read and checked for the docs.

``load`` turns the file into :class:`BenchRun` or raises :class:`BenchDataError`
naming the file and what is wrong with it: the documentation build must stop
on a missing or malformed file, never draw a figure from half of one.

Two layouts are read, both a JSON list with one object per case:

- the harness with scenarios: each case carries ``"scenario"``
  (``"isolated"`` or ``"shared-process"``) and its goals as
  ``{key: {"text", "op", "bound", "ratio", "met"}}``;
- the first harness (every contender interleaved in one process): no
  ``"scenario"`` (read as ``"shared-process"``, which is what it measured)
  and goals as ``{peer: {"min_ratio", "ratio", "met"}}``.

Only the standard library is imported here (the tests read it without Sphinx).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Scenario names in the JSON, and how the docs label them.
SCENARIOS = {
    "isolated": "isolated processes (each contender alone in its own process)",
    "shared-process": "shared process (contenders interleaved in one process, next to runtimes that spin)",
}

#: The contender whose time every ratio divides by.
SUBJECT = "bertembed"

#: How the docs name a contender whose name in the JSON is not self-explanatory
#: (the harness's ``bertembed-fixed``: bertembed at a thread count fixed by the
#: harness, the faster of 1 and T). Every other name is shown as it is.
LABELS = {"bertembed-fixed": "bertembed 1|T"}


def label(name: str) -> str:
    """The name the docs show for a contender of the JSON.

    Examples
    --------
    >>> label("bertembed-fixed"), label("torch")
    ('bertembed 1|T', 'torch')
    """
    return LABELS.get(name, name)


class BenchDataError(ValueError):
    """The benchmark JSON is missing or does not have the harness's layout."""


@dataclass(frozen=True)
class Goal:
    """One performance goal as the run evaluated it."""

    text: str
    op: str
    bound: float
    ratio: float | None
    met: bool | None
    key: str = ""


@dataclass(frozen=True)
class Case:
    """One case of the run: its shape, each contender's median time and the goals evaluated on it."""

    name: str
    scenario: str
    dtype: str
    layer_norm: bool
    batch: int
    seq: int
    out: bool
    table_dtype: str | None
    threads: int
    times: dict[str, float]
    contender_threads: dict[str, int | None]
    skipped: dict[str, str]
    repeats: int
    goals: list[Goal] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        """Whether bertembed itself was timed (a case it cannot run is listed, not compared)."""
        return SUBJECT in self.times

    def ratio(self, contender: str) -> float:
        """``time(contender) / time(bertembed)``: above 1, bertembed is faster."""
        return self.times[contender] / self.times[SUBJECT]


@dataclass(frozen=True)
class BenchRun:
    """Every case of one JSON file, with the machine it ran on."""

    path: Path
    cases: list[Case]
    machine: dict[str, Any]

    @property
    def repeats(self) -> str:
        """The repeats per contender, e.g. ``"15"`` (``"5, 15"`` when cases differ)."""
        return ", ".join(str(r) for r in sorted({c.repeats for c in self.cases}))

    @property
    def scenarios(self) -> list[str]:
        """The scenarios present, in the order of :data:`SCENARIOS`."""
        present = {c.scenario for c in self.cases}
        return [s for s in SCENARIOS if s in present]

    def sweep(self, scenario: str) -> list[Case]:
        """The float32 + LayerNorm cases at S=128 (float32 tables, new result), sorted by batch size."""
        rows = [
            c for c in self.cases
            if c.scenario == scenario and c.measured and c.dtype == "float32" and c.layer_norm and c.seq == 128
            and not c.out and c.table_dtype in (None, "float32")
        ]
        return sorted(rows, key=lambda c: c.batch)

    def describe_machine(self) -> str:
        """One line: platform, CPU, usable CPUs and library versions."""
        m = self.machine
        cpus = m.get("usable_cpus", m.get("cpu_count"))
        parts = [str(m.get("platform", "unknown platform")), str(m.get("cpu_model") or "unknown CPU"),
                 f"{cpus} usable CPUs"]
        versions = [f"{name} {m[name]}" for name in ("bertembed", "numpy", "torch", "onnxruntime") if m.get(name)]
        return ", ".join(parts) + "; " + ", ".join(versions)


def _fail(path: Path, where: str, message: str) -> BenchDataError:
    return BenchDataError(f"{path}: {where}: {message} (write the file with `bertembed bench --json FILE`)")


def _field(path: Path, where: str, row: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in row:
        raise _fail(path, where, f"no {key!r}")
    value = row[key]
    if isinstance(value, bool) and kind is not bool:
        raise _fail(path, where, f"{key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise _fail(path, where, f"{key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _seconds(path: Path, where: str, value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok:
        raise _fail(path, where, f"median_s must be a positive number of seconds, got {value!r}")
    return float(value)


def _goals(path: Path, where: str, raw: Any) -> list[Goal]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise _fail(path, where, f"'goals' must be an object, got {type(raw).__name__}")
    goals = []
    for key, g in raw.items():
        here = f"{where}, goal {key!r}"
        if not isinstance(g, Mapping):
            raise _fail(path, here, "must be an object")
        if "bound" in g:  # the harness with scenarios
            text, op, bound = str(g.get("text", key)), str(g.get("op", ">=")), g["bound"]
        elif "min_ratio" in g:  # the first harness: peer / bertembed >= min_ratio
            text, op, bound = f"{key} / {SUBJECT}", ">=", g["min_ratio"]
        else:
            raise _fail(path, here, "has neither 'bound' nor 'min_ratio'")
        if op not in (">=", "<="):
            raise _fail(path, here, f"'op' must be '>=' or '<=', got {op!r}")
        ratio = g.get("ratio")
        if ratio is not None and not isinstance(ratio, (int, float)):
            raise _fail(path, here, f"'ratio' must be a number or null, got {ratio!r}")
        met = g.get("met")
        if met is not None and not isinstance(met, bool):
            raise _fail(path, here, f"'met' must be true, false or null, got {met!r}")
        goals.append(Goal(text, op, float(bound), None if ratio is None else float(ratio), met, str(key)))
    return goals


def _case(path: Path, index: int, row: Any) -> Case:
    where = f"case {index}"
    if not isinstance(row, Mapping):
        raise _fail(path, where, f"must be an object, got {type(row).__name__}")
    name = _field(path, where, row, "name", str)
    where = f"case {index} ({name})"
    scenario = row.get("scenario", "shared-process")
    if scenario not in SCENARIOS:
        raise _fail(path, where, f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    timings = _field(path, where, row, "timings", Mapping)
    times, threads = {}, {}
    for contender, stats in timings.items():
        if not isinstance(stats, Mapping):
            raise _fail(path, where, f"timings[{contender!r}] must be an object")
        times[str(contender)] = _seconds(path, f"{where}, {contender}", stats.get("median_s"))
        t = stats.get("threads")
        threads[str(contender)] = t if isinstance(t, int) and not isinstance(t, bool) else None
    skipped_raw = row.get("skipped") or {}
    if not isinstance(skipped_raw, Mapping):
        raise _fail(path, where, "'skipped' must be an object")
    skipped = {str(k): str(v.get("status", "skipped")) if isinstance(v, Mapping) else str(v)
               for k, v in skipped_raw.items()}
    if SUBJECT in times and threads.get(SUBJECT) is None:
        threads[SUBJECT] = row.get("bertembed_threads") if isinstance(row.get("bertembed_threads"), int) else None
    table_dtype = row.get("table_dtype")
    return Case(
        name=name,
        scenario=scenario,
        dtype=_field(path, where, row, "dtype", str),
        layer_norm=_field(path, where, row, "layer_norm", bool),
        batch=_field(path, where, row, "batch", int),
        seq=_field(path, where, row, "seq", int),
        out=bool(row.get("out", False)),
        table_dtype=table_dtype if isinstance(table_dtype, str) else None,
        threads=_field(path, where, row, "threads", int),
        times=times,
        contender_threads=threads,
        skipped=skipped,
        repeats=_field(path, where, row, "repeats", int),
        goals=_goals(path, where, row.get("goals")),
    )


def load(path: str | Path) -> BenchRun:
    """Read and check ``path``, a file written by ``bertembed bench --json``.

    Raises
    ------
    BenchDataError
        The file is missing, is not JSON, or lacks what the docs draw (each
        case's name, scenario, shape and positive median times; bertembed
        timed in at least one case).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BenchDataError(
            f"{path}: no such file; the performance page is drawn from it "
            "(write it with `bertembed bench --json FILE`)"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchDataError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, list) or not data:
        raise BenchDataError(f"{path}: expected a non-empty JSON list of cases, got {type(data).__name__}")
    cases = [_case(path, i, row) for i, row in enumerate(data)]
    machine = data[0].get("machine")
    if not isinstance(machine, Mapping):
        raise _fail(path, "case 0", "no 'machine' object")
    seen = {(c.scenario, c.name) for c in cases}
    if len(seen) != len(cases):
        raise BenchDataError(f"{path}: a case appears twice in the same scenario")
    if not any(c.measured for c in cases):
        raise BenchDataError(f"{path}: {SUBJECT} was not timed in any case: nothing to compare with")
    return BenchRun(path, cases, dict(machine))
