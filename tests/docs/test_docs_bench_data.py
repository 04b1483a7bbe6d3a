"""The documentation's benchmark data: the committed file, read by the harness's own schema, and the page."""

import importlib.util
import json
import re

import pytest
from helpers.extras import needs
from helpers.paths import ROOT

from bertembed._bench import schema

DOCS = ROOT / "docs"
EXT = DOCS / "_ext"
DATA = DOCS / "_data" / "bench.json"
pytestmark = pytest.mark.skipif(not DATA.exists(), reason="docs/ is not beside the tests (installed wheel)")


@pytest.fixture(scope="module")
def bench_figure():
    """The extension, loaded from its file under the name Sphinx imports it by (conf.py puts docs/_ext on the path)."""
    needs("sphinx", "docs")
    spec = importlib.util.spec_from_file_location("bench_figure", EXT / "bench_figure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(name="f32-ln-B1-S128", batch=1, goals=None):
    """A version-1 record (the layout of the committed file), with bertembed and torch timed."""
    return {
        "name": name,
        "dtype": "float32",
        "layer_norm": True,
        "batch": batch,
        "seq": 128,
        "out": False,
        "table_dtype": None,
        "scenario": "isolated",
        "threads": 2,
        "repeats": 15,
        "timings": {"bertembed": {"median_s": 1e-4, "threads": 1}, "torch": {"median_s": 3e-4, "threads": 1}},
        "skipped": {},
        "goals": goals or {},
        "machine": {"platform": "Linux", "cpu_model": "CPU", "usable_cpus": 2},
    }


def write(tmp_path, data):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def test_the_committed_file_validates():
    run = schema.load(DATA)
    assert run.scenarios
    assert len({c.batch for c in run.sweep(run.scenarios[0])}) > 1, "the figure needs a batch sweep"
    assert any(c.goals for c in run.cases), "the goals table needs goals"


def test_the_extension_reads_the_file_with_the_installed_harness(bench_figure):
    """No reader of its own: the extension's loader is the harness's schema."""
    assert not (EXT / "bench_data.py").exists()
    assert bench_figure.load is schema.load and bench_figure.BenchDataError is schema.BenchDataError
    assert set(bench_figure.SCENARIOS) == set(schema.SCENARIOS)  # every scenario has the docs' words


def test_a_malformed_file_stops_the_build_naming_the_field(bench_figure, tmp_path):
    bad = case()
    bad["timings"]["torch"]["median_s"] = -1.0
    path = write(tmp_path, [bad])

    class App:
        confdir = str(tmp_path)

        class config:
            bench_json = "bench.json"

    with pytest.raises(bench_figure.BenchJSONError, match=re.escape("'timings.torch.median_s' must be a positive")):
        bench_figure._load(App())
    assert path.exists()


# ------------------------------------------------------- the performance page agrees with the data

PAGE = DOCS / "performance.rst"


def test_every_contender_of_the_run_is_defined_on_the_page():
    run = schema.load(DATA)
    page = PAGE.read_text()
    names = {n for c in run.cases for n in c.times}
    assert "bertembed-fixed" in names  # the harness's name, shown as a label
    for name in names:
        assert f"\n``{schema.label(name)}``\n" in page, f"{schema.label(name)!r} is not defined on the page"


def test_the_page_states_no_verdict_of_its_own():
    text = " ".join(PAGE.read_text().split())
    assert not re.search(r"goal (is|was) (not )?(met|missed)|(not met|missed) on this machine", text, re.IGNORECASE)
    assert ":bench-goal:`bf16-1.2x`" in text  # the verdict comes from the data


def test_verdict_follows_the_data(bench_figure, tmp_path):
    goal = {"text": "f32 tables / bf16 tables", "op": ">=", "bound": 1.2}
    for ratio, met, want in (
        (1.49, True, "met (measured 1.49, goal >= 1.2)"),
        (1.05, False, "missed (measured 1.05, goal >= 1.2)"),
        (None, None, "not measured in this run"),
    ):
        run = schema.load(write(tmp_path, [case(goals={"bf16-1.2x": {**goal, "ratio": ratio, "met": met}})]))
        assert bench_figure.verdict(run, "bf16-1.2x") == want
    with pytest.raises(KeyError):
        bench_figure.verdict(run, "no-such-goal")
