"""The harness's results as JSON: the version, the validation and typed access.

The one reader (and writer) of what :func:`bertembed._bench.runner.run`
returns and ``bertembed bench --json`` writes. :mod:`~bertembed._bench.report`
(the tables), :mod:`~bertembed._bench.plot` (``bertembed bench --plot`` and
the documentation's figure) and the documentation's extension
(``docs/_ext/bench_figure.py``, which imports this module from the installed
bertembed) read results only through
:func:`parse` or :func:`load`, which check every record and return a
:class:`BenchRun` of :class:`CaseResult`; :func:`dumps` writes them.

The file is a JSON list with one record per case (``bertembed bench
--json``), or an object ``{"results": [...], "peak_memory": [...]}``
(``benchmarks/run.py --json``). A record holds the case
(``name``, ``dtype``, ``layer_norm``, ``batch``, ``seq``, ``out``,
``table_dtype``, ``V``, ``P``, ``H``, and ``isa``, the row kernel it ran,
absent or null for the process's own), how it was measured (``scenario``,
``threads``: T, ``repeats``), ``variants`` (every contender at every thread
count: ``contender``, ``threads``, ``status`` and its timing or ``reason``),
``timings`` (per contender, its fastest variant: ``median_s``, ``min_s``,
``calls_per_sample``, ``threads``, ``variant``), ``ratios`` and
``ratios_min`` (contender / bertembed), ``skipped`` (``status``,
``reason``), ``goals`` (``text``, ``op``, ``bound``, ``ratio``, ``met``, and
``numerator`` and ``denominator`` or a ``reason``) and ``machine``.

Versions (a record's ``schema_version``):

2
    Every record carries ``"schema_version": 2`` and all of the fields above.
1
    No ``schema_version`` but a ``scenario``: the same layout, written before
    the version was recorded (``variants``, ``ratios``, ``V``, ``P``, ``H``
    may be absent).
0
    Neither: the first harness, which timed every contender in one process
    (read as ``"shared-process"``), with goals as ``{peer: {"min_ratio",
    "ratio", "met"}}``.

A record of a later version than :data:`SCHEMA_VERSION` is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .data import BERTEMBED, BERTEMBED_T, SCENARIOS

#: The version :func:`bertembed._bench.runner.run` writes (each record's ``schema_version``).
SCHEMA_VERSION = 2

#: The contender whose time every ratio divides by.
SUBJECT = BERTEMBED

#: How tables, figures and the docs name a contender whose name in the JSON is
#: not self-explanatory; every other name is shown as it is.
LABELS = {BERTEMBED_T: "bertembed 1|T"}

#: Where a file comes from, told at the end of every error about one.
_HINT = "write the file with `bertembed bench --json FILE`"


def label(name: str) -> str:
    """The name tables and figures show for a contender of the JSON.

    Examples
    --------
    >>> label("bertembed-fixed"), label("torch")
    ('bertembed 1|T', 'torch')
    """
    return LABELS.get(name, name)


class BenchDataError(ValueError):
    """Benchmark results that are missing or do not have the harness's layout."""


@dataclass(frozen=True)
class Timing:
    """One contender's figure in a case: its fastest variant."""

    median_s: float
    min_s: float | None
    threads: int | None
    variant: str | None
    calls_per_sample: int | None


@dataclass(frozen=True)
class Skipped:
    """A contender with no timed variant: ``unavailable``, ``mismatch`` or ``error``, and why."""

    status: str
    reason: str


@dataclass(frozen=True)
class VariantResult:
    """One contender at one thread count (``threads`` None: bertembed's automatic choice)."""

    label: str
    contender: str
    threads: int | None
    status: str
    median_s: float | None
    reason: str


@dataclass(frozen=True)
class GoalResult:
    """One performance goal as the run evaluated it (``ratio`` and ``met`` None: not measured)."""

    key: str
    text: str
    op: str
    bound: float
    ratio: float | None
    met: bool | None
    numerator: str | None = None
    denominator: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class CaseResult:
    """One case of a run: its shape, each contender's figure, the goals evaluated on it."""

    name: str
    scenario: str
    dtype: str
    layer_norm: bool
    batch: int
    seq: int
    out: bool
    table_dtype: str | None
    V: int | None
    P: int | None
    H: int | None
    threads: int
    repeats: int
    timings: dict[str, Timing]
    skipped: dict[str, Skipped]
    variants: dict[str, VariantResult]
    goals: dict[str, GoalResult]
    machine: dict[str, Any]
    bertembed_threads: int | None
    schema_version: int
    #: The row kernel (``BERTEMBED_ISA``) the case was measured with; None: the process's own.
    isa: str | None = None

    @property
    def measured(self) -> bool:
        """Whether bertembed itself was timed (a case it cannot run is listed, not compared)."""
        return SUBJECT in self.timings

    @property
    def times(self) -> dict[str, float]:
        """``{contender: median seconds per call}``."""
        return {name: t.median_s for name, t in self.timings.items()}

    def ratio(self, contender: str) -> float:
        """``time(contender) / time(bertembed)`` (medians): above 1, bertembed is faster."""
        return self.timings[contender].median_s / self.timings[SUBJECT].median_s

    def ratio_min(self, contender: str) -> float | None:
        """The same ratio of the fastest samples (None where a file lacks them)."""
        mine, theirs = self.timings[SUBJECT].min_s, self.timings[contender].min_s
        return None if mine is None or theirs is None else theirs / mine

    def threads_of(self, contender: str) -> int | None:
        """The threads of the contender's figure (bertembed: what its automatic choice took)."""
        if contender == SUBJECT and self.timings[SUBJECT].threads is None:
            return self.bertembed_threads
        return self.timings[contender].threads

    def variants_of(self, contender: str) -> list[str]:
        """The labels of the contender's variants (``torch@1``, ``torch@2``)."""
        return [v.label for v in self.variants.values() if v.contender == contender]


@dataclass(frozen=True)
class BenchRun:
    """Every case of one run (a file, or what :func:`~bertembed._bench.runner.run` returned)."""

    cases: list[CaseResult]
    source: str
    path: Path | None = None
    peak_memory: list[dict[str, Any]] | None = None

    @property
    def machine(self) -> dict[str, Any]:
        """The machine of the first case (a run measures on one)."""
        return self.cases[0].machine if self.cases else {}

    @property
    def repeats(self) -> str:
        """The repeats per contender, e.g. ``"15"`` (``"5, 15"`` when cases differ)."""
        return ", ".join(str(r) for r in sorted({c.repeats for c in self.cases}))

    @property
    def scenarios(self) -> list[str]:
        """The scenarios present, in the order of :data:`~bertembed._bench.data.SCENARIOS`."""
        present = {c.scenario for c in self.cases}
        return [s for s in SCENARIOS if s in present]

    def sweep(self, scenario: str) -> list[CaseResult]:
        """The float32 + LayerNorm cases at S=128 (float32 tables, new result), sorted by batch size."""
        rows = [
            c
            for c in self.cases
            if c.scenario == scenario
            and c.measured
            and c.dtype == "float32"
            and c.layer_norm
            and c.seq == 128
            and not c.out
            and c.table_dtype in (None, "float32")
        ]
        return sorted(rows, key=lambda c: c.batch)

    def describe_machine(self) -> str:
        """One line: platform, CPU, usable CPUs and library versions."""
        m = self.machine
        cpus = m.get("usable_cpus", m.get("cpu_count"))
        parts = [
            str(m.get("platform", "unknown platform")),
            str(m.get("cpu_model") or "unknown CPU"),
            f"{cpus} usable CPUs",
        ]
        versions = [f"{name} {m[name]}" for name in ("bertembed", "numpy", "torch", "onnxruntime") if m.get(name)]
        return ", ".join(parts) + "; " + ", ".join(versions)


# --------------------------------------------------------------------------- checking


_KINDS = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("an int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "number": ("a number", lambda v: _is_number(v)),
    "seconds": ("a positive number of seconds", lambda v: _is_number(v) and math.isfinite(v) and v > 0),
    "object": ("an object", lambda v: isinstance(v, Mapping)),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _error(source: str, hint: bool, message: str) -> BenchDataError:
    return BenchDataError(f"{source}: {message}" + (f" ({_HINT})" if hint else ""))


class _Fields:
    """The fields of one object of a record; every error names the source, the case and
    the field's dotted path (``timings.torch.median_s``)."""

    def __init__(self, fail: Any, value: Mapping[str, Any], path: str = "") -> None:
        self.fail, self.value, self.path = fail, value, path

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.value

    def check(self, name: str, value: Any, kind: str) -> Any:
        """``value`` if it is of ``kind`` (a key of :data:`_KINDS`, ``?`` appended: or null)."""
        if kind.endswith("?"):
            if value is None:
                return None
            kind = kind[:-1]
        what, ok = _KINDS[kind]
        if not ok(value):
            shown = type(value).__name__ if isinstance(value, (Mapping, list)) else repr(value)
            raise self.fail(f"{name!r} must be {what}, got {shown}")
        return value

    def get(self, key: str, kind: str, *, required: bool = True, default: Any = None) -> Any:
        """Field ``key``: checked against ``kind``; ``default`` when absent and not ``required``."""
        if key not in self.value:
            if required:
                raise self.fail(f"no {self.name(key)!r}")
            return default
        return self.check(self.name(key), self.value[key], kind)

    def objects(self, key: str, *, required: bool) -> dict[str, _Fields]:
        """Field ``key``, an object of objects (``timings``, ``variants``, ``goals``)."""
        raw = self.get(key, "object", required=required, default={})
        out = {}
        for name, value in raw.items():
            path = f"{self.name(key)}.{name}"
            out[str(name)] = _Fields(self.fail, self.check(path, value, "object"), path)
        return out


def _goal(key: str, g: _Fields) -> GoalResult:
    if g.has("bound"):  # versions 1 and 2
        text, op, bound = g.get("text", "str"), g.get("op", "str"), g.get("bound", "number")
    elif g.has("min_ratio"):  # version 0: peer / bertembed >= min_ratio
        text, op, bound = f"{key} / {SUBJECT}", ">=", g.get("min_ratio", "number")
    else:
        raise g.fail(f"{g.path!r} has neither 'bound' nor 'min_ratio'")
    if op not in (">=", "<="):
        raise g.fail(f"{g.name('op')!r} must be '>=' or '<=', got {op!r}")
    ratio = g.get("ratio", "number?", required=False)
    met = g.get("met", "bool?", required=False)
    if ratio is not None and met is not None and met != (ratio >= bound if op == ">=" else ratio <= bound):
        raise g.fail(f"{g.name('met')!r} is {met} but the ratio {ratio:g} {op} {bound:g} says otherwise")
    return GoalResult(
        key,
        text,
        op,
        float(bound),
        None if ratio is None else float(ratio),
        met,
        g.get("numerator", "str?", required=False),
        g.get("denominator", "str?", required=False),
        g.get("reason", "str?", required=False),
    )


def _case(source: str, hint: bool, index: int, row: Any) -> CaseResult:
    where = [f"case {index}"]

    def fail(message: str) -> BenchDataError:
        return _error(source, hint, f"{where[0]}: {message}")

    if not isinstance(row, Mapping):
        raise fail(f"must be an object, got {type(row).__name__}")
    r = _Fields(fail, row)
    name = r.get("name", "str")
    where[0] = f"case {index} ({name})"
    version = r.get("schema_version", "int", required=False)
    if version is None:
        version = 1 if r.has("scenario") else 0
    elif not 1 <= version <= SCHEMA_VERSION:
        newer = " (written by a newer bertembed)" if version > SCHEMA_VERSION else ""
        raise fail(f"'schema_version' {version} is not one this bertembed reads (1 to {SCHEMA_VERSION}){newer}")
    full = version >= 2  # every field present
    scenario = r.get("scenario", "str") if version >= 1 else "shared-process"
    if scenario not in SCENARIOS:
        raise fail(f"'scenario' {scenario!r} is unknown (known: {', '.join(SCENARIOS)})")

    variants = {}
    for lab, v in r.objects("variants", required=full).items():
        status = v.get("status", "str")
        variants[lab] = VariantResult(
            lab,
            v.get("contender", "str"),
            v.get("threads", "int?", required=full),
            status,
            v.get("median_s", "seconds") if status == "ok" else None,
            v.get("reason", "str", required=False, default=""),
        )
    timings = {}
    for contender, t in r.objects("timings", required=True).items():
        variant = t.get("variant", "str", required=full)
        if variants and variant is not None and variant not in variants:
            raise fail(f"{t.name('variant')!r} is {variant!r}, which is not among the 'variants'")
        timings[contender] = Timing(
            float(t.get("median_s", "seconds")),
            t.get("min_s", "seconds", required=full),
            t.get("threads", "int?", required=full),
            variant,
            t.get("calls_per_sample", "int", required=full),
        )
    skipped = {}
    for contender, value in r.get("skipped", "object", required=full, default={}).items():
        if isinstance(value, str) and version == 0:
            skipped[str(contender)] = Skipped(value, "")
            continue
        path = f"skipped.{contender}"
        s = _Fields(fail, r.check(path, value, "object"), path)
        skipped[str(contender)] = Skipped(s.get("status", "str"), s.get("reason", "str", required=False, default=""))
    both = sorted(set(timings) & set(skipped))
    if both:
        raise fail(f"{', '.join(both)} both in 'timings' and in 'skipped'")
    for key in ("ratios", "ratios_min"):
        for contender, value in r.get(key, "object", required=full, default={}).items():
            r.check(f"{key}.{contender}", value, "number")
            if contender not in timings or SUBJECT not in timings:
                raise fail(f"'{key}.{contender}' is the ratio of contenders not in 'timings'")
    goals = {key: _goal(key, g) for key, g in r.objects("goals", required=full).items()}
    return CaseResult(
        name=name,
        scenario=scenario,
        dtype=r.get("dtype", "str"),
        layer_norm=r.get("layer_norm", "bool"),
        batch=r.get("batch", "int"),
        seq=r.get("seq", "int"),
        out=r.get("out", "bool", required=full, default=False),
        table_dtype=r.get("table_dtype", "str?", required=full),
        V=r.get("V", "int", required=full),
        P=r.get("P", "int", required=full),
        H=r.get("H", "int", required=full),
        threads=r.get("threads", "int"),
        repeats=r.get("repeats", "int"),
        timings=timings,
        skipped=skipped,
        variants=variants,
        goals=goals,
        machine=dict(r.get("machine", "object")),
        bertembed_threads=r.get("bertembed_threads", "int?", required=full),
        schema_version=version,
        isa=r.get("isa", "str?", required=False),
    )


def parse(
    data: Any, source: str = "benchmark results", *, require_measured: bool = False, _hint: bool = False
) -> BenchRun:
    """Check benchmark results and return them typed.

    Parameters
    ----------
    data : list or dict
        What :func:`~bertembed._bench.runner.run` returned (a list of
        records), or that list under ``"results"`` with ``"peak_memory"``
        beside it (``benchmarks/run.py``), as read from JSON.
    source : str
        Where the results come from, for error messages.
    require_measured : bool, default False
        Refuse results in which bertembed was timed in no case.

    Returns
    -------
    BenchRun

    Raises
    ------
    BenchDataError
        A record lacks a field or has one of the wrong type or value; the
        message names the source, the case and the field.

    Examples
    --------
    >>> try:
    ...     parse([{"name": "c", "scenario": "isolated", "timings": {"bertembed": {"median_s": 0}}}])
    ... except BenchDataError as exc:
    ...     print(exc)
    benchmark results: case 0 (c): 'timings.bertembed.median_s' must be a positive number of seconds, got 0
    """
    peak = None
    if isinstance(data, Mapping) and "results" in data:
        peak = data.get("peak_memory")
        if peak is not None and not (isinstance(peak, list) and all(isinstance(p, Mapping) for p in peak)):
            raise _error(source, _hint, "'peak_memory' must be a list of objects")
        data = data["results"]
    if not isinstance(data, list) or not data:
        what = type(data).__name__ if not isinstance(data, list) else "an empty list"
        raise _error(source, _hint, f"expected a non-empty JSON list of cases (or {{'results': [...]}}), got {what}")
    cases = [_case(source, _hint, i, row) for i, row in enumerate(data)]
    seen: set[tuple[str, str]] = set()
    for c in cases:
        if (c.scenario, c.name) in seen:
            raise _error(source, _hint, f"case {c.name!r} appears twice in the scenario {c.scenario!r}")
        seen.add((c.scenario, c.name))
    if require_measured and not any(c.measured for c in cases):
        raise _error(source, _hint, f"{SUBJECT} was not timed in any case: nothing to compare with")
    return BenchRun(cases, source, peak_memory=None if peak is None else [dict(p) for p in peak])


def load(path: str | Path) -> BenchRun:
    """Read and check ``path``, a file written by ``bertembed bench --json`` (or ``benchmarks/run.py --json``).

    Raises
    ------
    BenchDataError
        The file is missing, is not JSON, has a malformed record (see
        :func:`parse`), or bertembed was timed in no case.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _error(str(path), True, "no such file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _error(str(path), True, f"not valid JSON: {exc}") from None
    run = parse(data, str(path), require_measured=True, _hint=True)
    return BenchRun(run.cases, run.source, path, run.peak_memory)


def as_run(results: BenchRun | Sequence[Mapping[str, Any]]) -> BenchRun:
    """``results`` checked and typed (a :class:`BenchRun` is returned as it is)."""
    return results if isinstance(results, BenchRun) else parse(list(results))


def dumps(results: Sequence[Mapping[str, Any]], *, peak_memory: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The JSON text of ``results`` (checked first): a list of records, or with
    ``peak_memory`` an object holding both.

    Raises
    ------
    BenchDataError
        The results do not have the layout this module reads.
    """
    records = list(results)
    parse(records)
    data: Any = records if peak_memory is None else {"results": records, "peak_memory": list(peak_memory)}
    return json.dumps(data, indent=2, default=str) + "\n"
