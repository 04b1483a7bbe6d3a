"""``bertembed._bench.schema``: the one reader of the harness's results, and what it refuses."""

from __future__ import annotations

import copy
import json
import re

import pytest
from helpers.extras import needs

from bertembed._bench import report, runner, schema
from bertembed._bench.cases import Goal
from bertembed._bench.data import Case, Variant
from bertembed._bench.schema import BenchDataError

CASE = Case("f32-ln-B2-S128", "float32", True, 2, 128)
GOAL = Goal("numpy-2x", "numpy / bertembed", CASE.name, ("numpy",), ("bertembed",), 2.0)


def record(case: Case = CASE, numpy_s: float = 3e-4) -> dict:
    """A record as the runner writes it: bertembed (automatic and at 1 thread), numpy, and torch unavailable."""
    variants = [(Variant(n, t), None) for n, t in (("bertembed", None), ("bertembed", 1), ("numpy", 1), ("torch", 1))]
    measured = {
        "bertembed": {"status": "ok", "median_s": 1e-4, "min_s": 9e-5, "calls_per_sample": 10, "auto_threads": 1},
        "bertembed@1": {"status": "ok", "median_s": 1.1e-4, "min_s": 1e-4, "calls_per_sample": 10},
        "numpy@1": {"status": "ok", "median_s": numpy_s, "min_s": numpy_s * 0.9, "calls_per_sample": 3},
        "torch@1": {"status": "unavailable", "reason": "No module named 'torch'"},
    }
    row = runner._result(
        case, variants, measured, threads=2, repeats=5, scenario="isolated", machine={"platform": "Linux"}
    )
    runner.evaluate_goals([row], [GOAL])
    return json.loads(json.dumps(row))  # as read back from a file


def test_a_record_of_the_runner_reads_back_typed():
    raw = record()
    run = schema.parse([raw])
    (c,) = run.cases
    assert c.schema_version == schema.SCHEMA_VERSION == raw["schema_version"]
    assert (c.name, c.scenario, c.batch, c.seq, c.V, c.H, c.threads, c.repeats) == (
        CASE.name,
        "isolated",
        2,
        128,
        CASE.V,
        CASE.H,
        2,
        5,
    )
    assert set(c.timings) == {"bertembed", "bertembed-fixed", "numpy"}
    assert c.ratio("numpy") == pytest.approx(raw["ratios"]["numpy"]) == pytest.approx(3.0)
    assert c.ratio_min("numpy") == pytest.approx(raw["ratios_min"]["numpy"])
    assert c.skipped["torch"].status == "unavailable" and "torch" in c.skipped["torch"].reason
    assert c.threads_of("bertembed") == 1 and c.variants_of("bertembed") == ["bertembed"]
    goal = c.goals["numpy-2x"]
    assert (goal.ratio, goal.met, goal.numerator, goal.denominator) == (
        pytest.approx(3.0),
        True,
        "numpy@1",
        "bertembed",
    )
    assert run.repeats == "5" and run.scenarios == ["isolated"]


def test_dumps_and_load_round_trip(tmp_path):
    rows = [record(), record(Case("f32-ln-B4-S128", "float32", True, 4, 128))]
    path = tmp_path / "bench.json"
    path.write_text(schema.dumps(rows))
    run = schema.load(path)
    assert run.path == path and [c.batch for c in run.sweep("isolated")] == [2, 4]
    assert json.loads(path.read_text()) == rows
    both = tmp_path / "run.json"  # benchmarks/run.py: results and peak memory
    both.write_text(schema.dumps(rows, peak_memory=[{"case": CASE.name, "ratio": 1.0}]))
    run = schema.load(both)
    assert len(run.cases) == 2 and run.peak_memory == [{"case": CASE.name, "ratio": 1.0}]


def _set(path: str, value):
    def change(row):
        *parents, last = path.split(".")
        target = row
        for key in parents:
            target = target[key]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("batch", KeyError), "no 'batch'"),
        (_set("batch", True), "'batch' must be an int, got True"),
        (_set("layer_norm", 1), "'layer_norm' must be true or false, got 1"),
        (_set("timings.bertembed.median_s", -1.0), "'timings.bertembed.median_s' must be a positive number of seconds"),
        (_set("timings.numpy.median_s", "fast"), "'timings.numpy.median_s' must be a positive number of seconds"),
        (_set("timings.numpy", 3e-4), "'timings.numpy' must be an object, got 0.0003"),
        (_set("timings.numpy.variant", "numpy@8"), "'timings.numpy.variant' is 'numpy@8', which is not among"),
        (_set("timings.numpy.min_s", KeyError), "no 'timings.numpy.min_s'"),
        (_set("variants", KeyError), "no 'variants'"),
        (_set("variants.numpy@1.contender", None), "'variants.numpy@1.contender' must be a string, got None"),
        (_set("scenario", "somewhere"), "'scenario' 'somewhere' is unknown"),
        (_set("schema_version", 3), "'schema_version' 3 is not one this bertembed reads (1 to 2) (written by a newer"),
        (_set("skipped.numpy", {"status": "error"}), "numpy both in 'timings' and in 'skipped'"),
        (_set("skipped.torch.status", KeyError), "no 'skipped.torch.status'"),
        (_set("ratios.torch", 2.0), "'ratios.torch' is the ratio of contenders not in 'timings'"),
        (_set("goals.numpy-2x.met", False), "'goals.numpy-2x.met' is False but the ratio 3 >= 2 says otherwise"),
        (_set("goals.numpy-2x.op", "="), "'goals.numpy-2x.op' must be '>=' or '<=', got '='"),
        (_set("goals.numpy-2x.bound", KeyError), "'goals.numpy-2x' has neither 'bound' nor 'min_ratio'"),
        (_set("machine", "Linux"), "'machine' must be an object, got 'Linux'"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_case_and_the_field(change, message):
    good, bad = record(), record()
    change(bad)
    schema.parse([good, record(Case("other", "float32", True, 1, 128))])  # the unchanged records are fine
    with pytest.raises(BenchDataError, match=re.escape(message)) as info:
        schema.parse([record(Case("other", "float32", True, 1, 128)), bad], "run.json")
    assert str(info.value).startswith(f"run.json: case 1 ({CASE.name}): ")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"results": []}, "expected a non-empty JSON list of cases"),
        ([], "expected a non-empty JSON list of cases"),
        ({"cases": [1]}, "expected a non-empty JSON list of cases (or {'results': [...]}), got dict"),
        ([[1, 2]], "case 0: must be an object, got list"),
        ({"results": ["x"], "peak_memory": 3}, "'peak_memory' must be a list of objects"),
    ],
)
def test_a_malformed_file_layout_is_refused(data, message):
    with pytest.raises(BenchDataError, match=re.escape(message)):
        schema.parse(data)


def test_a_case_twice_in_one_scenario_is_refused():
    with pytest.raises(BenchDataError, match=re.escape(f"case {CASE.name!r} appears twice in the scenario 'isolated'")):
        schema.parse([record(), record()])
    other = record()
    other["scenario"] = "shared-process"
    assert schema.parse([record(), other]).scenarios == ["isolated", "shared-process"]


def test_files_written_before_the_version_was_recorded():
    """Version 1: a scenario, no schema_version, the later fields absent."""
    row = record()
    for key in ("schema_version", "variants", "ratios", "ratios_min", "V", "P", "H", "bertembed_threads"):
        del row[key]
    for t in row["timings"].values():
        del t["variant"], t["min_s"]
    (c,) = schema.parse([row]).cases
    assert c.schema_version == 1 and c.V is None and c.variants == {}
    assert c.ratio("numpy") == pytest.approx(3.0) and c.ratio_min("numpy") is None
    assert "bertembed" in report.format_table([row])  # the tables read it too


def test_the_first_harness_layout():
    """Version 0: no scenario (it timed everything in one process) and goals keyed by peer."""
    row = record()
    for key in ("schema_version", "scenario", "variants"):
        del row[key]
    row["goals"] = {"onnxruntime": {"min_ratio": 1.5, "ratio": 2.9, "met": True}}
    row["skipped"] = {"torch": "unavailable"}
    run = schema.parse([row])
    assert run.scenarios == ["shared-process"]
    goal = run.cases[0].goals["onnxruntime"]
    assert (goal.text, goal.op, goal.bound, goal.ratio, goal.met) == ("onnxruntime / bertembed", ">=", 1.5, 2.9, True)
    assert run.cases[0].skipped["torch"].status == "unavailable"


def test_load_refuses_what_the_docs_cannot_draw(tmp_path):
    path = tmp_path / "bench.json"
    with pytest.raises(BenchDataError, match=r"no such file \(write the file with `bertembed bench --json FILE`\)"):
        schema.load(path)
    path.write_text("{not json")
    with pytest.raises(BenchDataError, match="not valid JSON"):
        schema.load(path)
    unmeasured = record()
    unmeasured["skipped"]["bertembed"] = {"status": "unavailable", "reason": "no bfloat16"}
    unmeasured["skipped"]["bertembed-fixed"] = unmeasured["skipped"]["bertembed"]
    for key in ("bertembed", "bertembed-fixed", "numpy"):
        del unmeasured["timings"][key]
    unmeasured["ratios"] = unmeasured["ratios_min"] = {}
    unmeasured["goals"]["numpy-2x"].update(ratio=None, met=None)
    assert not schema.parse([unmeasured]).cases[0].measured  # listed, not compared
    path.write_text(json.dumps([unmeasured]))
    with pytest.raises(BenchDataError, match=f"{re.escape(str(path))}: bertembed was not timed in any case"):
        schema.load(path)


def test_dumps_refuses_what_it_could_not_read_back():
    bad = record()
    del bad["timings"]["bertembed"]["median_s"]
    with pytest.raises(BenchDataError, match=re.escape("no 'timings.bertembed.median_s'")):
        schema.dumps([bad])


def test_the_readers_read_through_the_schema(tmp_path):
    bad = record()
    bad["timings"]["numpy"]["median_s"] = 0
    for read in (report.format_table, report.format_goals, report.format_table_dtypes, report.format_run):
        with pytest.raises(BenchDataError, match=re.escape("'timings.numpy.median_s' must be a positive number")):
            read([bad])
    needs("matplotlib", "plot")
    from bertembed._bench.plot import draw

    with pytest.raises(BenchDataError, match=re.escape("'timings.numpy.median_s'")):
        draw([bad], tmp_path / "p.png")


def test_report_shows_what_the_schema_reads():
    rows = [record(), record(Case("f32-ln-B4-S128", "float32", True, 4, 128), numpy_s=5e-4)]
    table = report.format_table(rows)
    assert "300 us (3.00x)" in table and "500 us (5.00x)" in table and "unavailable" in table
    assert schema.label("bertembed-fixed") in table
    goals = report.format_goals(copy.deepcopy(rows))
    assert "numpy / bertembed >= 2" in goals and "met (numpy@1 / bertembed)" in goals
