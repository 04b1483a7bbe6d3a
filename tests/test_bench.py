"""Fast tests of the benchmark harness ``bertembed._bench`` (tiny shapes, few repeats)."""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pytest

from bertembed._bench import cases, data, memory, report, runner, subject, timing

TINY = dict(V=50, P=16, H=8)
SUM64 = data.Case("tiny-f64-sum", "float64", False, 2, 5, **TINY)
OUT64 = data.Case("tiny-f64-sum-out", "float64", False, 2, 5, True, **TINY)
LN32 = data.Case("tiny-f32-ln", "float32", True, 2, 5, **TINY)


@pytest.fixture(autouse=True)
def _short_samples(monkeypatch):
    monkeypatch.setattr(timing, "MIN_SAMPLE_S", 0.0005)
    monkeypatch.setattr(timing, "GAP_S", 0.0)


def _run(todo, peers, **kw):
    return runner.run(todo, repeats=2, threads=1, peers=peers, **kw)


def test_result_structure_and_ratios_from_medians():
    results = _run([SUM64, OUT64, LN32], ["numpy", "copyto"])
    assert [r["name"] for r in results] == [SUM64.name, OUT64.name, LN32.name]
    json.dumps(results)  # JSON-serialisable
    for r in results:
        for key in ("dtype", "layer_norm", "batch", "seq", "out", "V", "P", "H", "threads",
                    "timings", "ratios", "skipped", "machine"):
            assert key in r
        assert r["threads"] == 1
        mine = r["timings"]["bertembed"]["median_s"]
        assert mine > 0
        for peer, ratio in r["ratios"].items():
            t = r["timings"][peer]
            assert t["min_s"] <= t["median_s"]
            assert ratio == pytest.approx(t["median_s"] / mine)
            assert r["ratios_min"][peer] == pytest.approx(
                t["min_s"] / r["timings"]["bertembed"]["min_s"]
            )
        for key in ("platform", "cpu_count", "numpy", "torch", "onnxruntime"):
            assert key in r["machine"]
    by_name = {r["name"]: r for r in results}
    assert set(by_name[SUM64.name]["timings"]) == {"bertembed", "numpy"}
    assert set(by_name[OUT64.name]["timings"]) == {"bertembed", "copyto"}


def test_progress_reaches_total():
    calls = []
    _run([SUM64, LN32], ["numpy"], progress=lambda d, t, label: calls.append((d, t, label)))
    assert calls[0][0] == 0
    assert calls[-1][:2] == (4, 4)
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(calls))


def test_missing_peer_is_skipped_and_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    [r] = _run([LN32], ["numpy", "torch", "onnxruntime"])
    assert set(r["timings"]) == {"bertembed", "numpy"}
    assert r["skipped"]["torch"]["status"] == "unavailable"
    assert r["skipped"]["onnxruntime"]["status"] == "unavailable"
    assert "unavailable" in report.format_table([r])


def test_wrong_peer_is_caught_and_not_timed():
    def build(case, inputs, ctx):
        right = subject.bertembed_call(case, inputs, 1)
        return lambda: right() + 0.5

    liar = data.Peer("liar", lambda c: True, build)
    [r] = _run([SUM64], [liar, "numpy"])
    assert "liar" not in r["timings"] and "liar" not in r["ratios"]
    assert r["skipped"]["liar"]["status"] == "mismatch"
    assert "numpy" in r["ratios"]
    assert "mismatch" in report.format_table([r])


def test_wrong_shape_is_a_mismatch():
    liar = data.Peer("liar", lambda c: True, lambda c, d, x: lambda: np.zeros(3))
    [r] = _run([LN32], [liar])
    assert r["skipped"]["liar"]["status"] == "mismatch"


def test_format_table_names_every_contender():
    def build(case, inputs, ctx):
        return subject.bertembed_call(case, inputs, 1)

    twin = data.Peer("twin", lambda c: True, build)
    results = _run([SUM64, OUT64], ["numpy", "copyto", twin])
    table = report.format_table(results)
    for name in ("bertembed", "numpy", "copyto", "twin", SUM64.name, OUT64.name):
        assert name in table


def test_unknown_peer_and_bad_arguments():
    with pytest.raises(ValueError, match="unknown peer"):
        _run([SUM64], ["nope"])
    with pytest.raises(ValueError):
        runner.run([SUM64], repeats=0, peers=[])
    with pytest.raises(ValueError):
        runner.run([SUM64], repeats=1, threads=0, peers=[])


def test_time_interleaved_rotates_order():
    order = []
    funcs = {n: (lambda n=n: order.append(n)) for n in "abc"}
    timing.time_interleaved(funcs, 3, min_sample_s=0.0)
    timed = order[6:]  # two warm-up calls each come first
    assert timed == list("abc") + list("bca") + list("cab")


def test_default_cases_cover_the_goals():
    names = {c.name for c in cases.DEFAULT_CASES}
    assert set(cases.GOALS) <= names
    assert len(names) == len(cases.DEFAULT_CASES)
    sweep = sorted(c.batch for c in cases.DEFAULT_CASES
                   if c.dtype == "float32" and c.layer_norm and c.seq == 128)
    assert sweep == [1, 2, 4, 8, 16, 32]


def test_goals_are_evaluated():
    case = data.Case("f64-sum-B32-S512", "float64", False, 2, 5, **TINY)  # a goal's name
    [r] = _run([case], ["numpy"])
    goal = r["goals"]["numpy"]
    assert goal["ratio"] == r["ratios"]["numpy"]
    assert goal["met"] == (goal["ratio"] >= goal["min_ratio"])


def test_peak_memory_is_about_the_result():
    case = data.Case("mem", "float64", False, 4, 16, V=100, P=16, H=256)
    report = memory.peak_memory(case, threads=1, rss=False)
    assert report["result_bytes"] == 4 * 16 * 256 * 8
    assert 0.99 <= report["ratio"] <= 1.1
    out = memory.peak_memory(data.Case("mem-out", "float64", False, 4, 16, True,
                                         V=100, P=16, H=256), threads=1, rss=False)
    assert out["ratio"] < 0.1
    json.dumps(report)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS via /proc")
def test_peak_memory_rss_subprocess():
    case = data.Case("mem", "float32", True, 2, 8, V=100, P=16, H=64)
    report = memory.peak_memory(case, threads=1)
    assert "rss_ratio" in report, report.get("rss_error")


@pytest.mark.heavy
def test_torch_peer_agrees_and_is_timed():
    pytest.importorskip("torch")
    [r] = _run([LN32], ["torch"])
    assert "torch" in r["ratios"], r["skipped"]


@pytest.mark.heavy
def test_onnxruntime_peer_agrees_and_is_timed():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    [r] = _run([LN32], ["onnxruntime"])
    assert "onnxruntime" in r["ratios"], r["skipped"]
