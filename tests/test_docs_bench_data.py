"""docs/_ext/bench_data.py: the documentation build reads the harness's JSON, or stops with the reason."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
MODULE = DOCS / "_ext" / "bench_data.py"
pytestmark = pytest.mark.skipif(not MODULE.exists(), reason="docs/ is not beside the tests (installed wheel)")


@pytest.fixture(scope="module")
def bench_data():
    spec = importlib.util.spec_from_file_location("bench_data", MODULE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_data"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_data", None)


def case(name="f32-ln-B1-S128", batch=1, scenario="isolated", timings=None, **extra):
    row = {
        "name": name, "dtype": "float32", "layer_norm": True, "batch": batch, "seq": 128, "out": False,
        "table_dtype": None, "scenario": scenario, "threads": 2, "repeats": 15,
        "timings": timings if timings is not None else {
            "bertembed": {"median_s": 1e-4, "threads": 1},
            "torch": {"median_s": 3e-4, "threads": 1},
        },
        "skipped": {}, "goals": {}, "machine": {"platform": "Linux", "cpu_model": "CPU", "usable_cpus": 2},
    }
    row.update(extra)
    if scenario is None:
        del row["scenario"]
    return row


def write(tmp_path, data):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_the_committed_file_loads(bench_data):
    run = bench_data.load(DOCS / "_data" / "bench.json")
    assert run.scenarios
    assert len({c.batch for c in run.sweep(run.scenarios[0])}) > 1, "the figure needs a batch sweep"


def test_ratios_and_sweep(bench_data, tmp_path):
    data = [case("f32-ln-B2-S128", 2), case(), case("f64-sum-B32-S512", 32, dtype="float64", layer_norm=False)]
    run = bench_data.load(write(tmp_path, data))
    assert [c.batch for c in run.sweep("isolated")] == [1, 2]
    assert run.cases[1].ratio("torch") == pytest.approx(3.0)
    assert run.repeats == "15"


def test_first_harness_layout(bench_data, tmp_path):
    """No scenario (it timed everything in one process) and goals keyed by peer."""
    row = case(scenario=None, goals={"onnxruntime": {"min_ratio": 1.5, "ratio": 2.9, "met": True}})
    run = bench_data.load(write(tmp_path, [row]))
    assert run.scenarios == ["shared-process"]
    (goal,) = run.cases[0].goals
    assert (goal.text, goal.op, goal.bound, goal.ratio, goal.met) == ("onnxruntime / bertembed", ">=", 1.5, 2.9, True)


def test_a_case_bertembed_could_not_run_is_kept_unmeasured(bench_data, tmp_path):
    skipped = case("f32-ln-bf16-B32-S512", 32, timings={},
                   skipped={"bertembed": {"status": "unavailable", "reason": "no bfloat16"}})
    run = bench_data.load(write(tmp_path, [case(), skipped]))
    assert not run.cases[1].measured
    assert run.cases[1].skipped["bertembed"] == "unavailable"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not valid JSON"),
        ({"results": []}, "expected a non-empty JSON list"),
        ([], "expected a non-empty JSON list"),
        ([case(timings={"bertembed": {"median_s": -1.0}})], "median_s must be a positive number"),
        ([case(timings={"bertembed": {"median_s": "fast"}})], "median_s must be a positive number"),
        ([case(scenario="somewhere")], "unknown scenario 'somewhere'"),
        ([{k: v for k, v in case().items() if k != "batch"}], "no 'batch'"),
        ([case(batch=True)], "'batch' must be int"),
        ([case(), case()], "appears twice"),
        ([case(timings={})], "not timed in any case"),
        ([case(goals={"x": {"ratio": 1.0}})], "neither 'bound' nor 'min_ratio'"),
    ],
)
def test_malformed_files_are_refused(bench_data, tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(bench_data.BenchDataError, match=re.escape(message)) as info:
        bench_data.load(path)
    assert str(path) in str(info.value)


def test_missing_file(bench_data, tmp_path):
    with pytest.raises(bench_data.BenchDataError, match=r"no such file.*bertembed bench --json"):
        bench_data.load(tmp_path / "absent.json")


# ------------------------------------------------------- the performance page agrees with the data

PAGE = DOCS / "performance.rst"


def test_every_contender_of_the_run_is_defined_on_the_page(bench_data):
    run = bench_data.load(DOCS / "_data" / "bench.json")
    page = PAGE.read_text()
    names = {n for c in run.cases for n in c.times}
    assert "bertembed-fixed" in names  # the harness's name, shown as a label
    for name in names:
        assert f"\n``{bench_data.label(name)}``\n" in page, f"{bench_data.label(name)!r} is not defined on the page"


def test_the_page_states_no_verdict_of_its_own():
    text = " ".join(PAGE.read_text().split())
    assert not re.search(r"goal (is|was) (not )?(met|missed)|(not met|missed) on this machine", text, re.IGNORECASE)
    assert ":bench-goal:`bf16-1.2x`" in text  # the verdict comes from the data


def test_verdict_follows_the_data(bench_data, tmp_path):
    pytest.importorskip("sphinx")
    sys.path.insert(0, str(MODULE.parent))
    try:
        import bench_figure
    finally:
        sys.path.remove(str(MODULE.parent))
    goal = {"text": "f32 tables / bf16 tables", "op": ">=", "bound": 1.2}
    for ratio, met, want in ((1.49, True, "met (measured 1.49, goal >= 1.2)"),
                             (1.05, False, "missed (measured 1.05, goal >= 1.2)"),
                             (None, None, "not measured in this run")):
        run = bench_data.load(write(tmp_path, [case(goals={"bf16-1.2x": {**goal, "ratio": ratio, "met": met}})]))
        assert bench_figure.verdict(run, "bf16-1.2x") == want
    with pytest.raises(KeyError):
        bench_figure.verdict(run, "no-such-goal")
