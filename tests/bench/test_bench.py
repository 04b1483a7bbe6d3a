"""Fast tests of the benchmark harness ``bertembed._bench`` (tiny shapes, few repeats)."""

from __future__ import annotations

import doctest
import importlib
import itertools
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import bertembed
from bertembed._bench import cases, data, report, runner, schema, spawn, subject, timing
from bertembed._bench.cases import Goal
from bertembed._bench.data import Case, Peer

TINY = dict(V=50, P=16, H=8)
SUM64 = Case("tiny-f64-sum", "float64", False, 2, 5, **TINY)
OUT64 = Case("tiny-f64-sum-out", "float64", False, 2, 5, True, **TINY)
LN32 = Case("tiny-f32-ln", "float32", True, 2, 5, **TINY)
BF16 = Case("tiny-f32-ln-bf16", "float32", True, 2, 5, table_dtype="bfloat16", **TINY)


@pytest.fixture(autouse=True)
def _short_samples(monkeypatch):
    monkeypatch.setattr(timing, "MIN_SAMPLE_S", 0.0005)
    monkeypatch.setattr(timing, "GAP_S", 0.0)


def needs(module, extra):
    """``helpers.extras.needs``, imported when called: the isolated scenario's
    children import this module (for the builders below) without tests/ on their path."""
    __tracebackhide__ = True
    from helpers.extras import needs

    return needs(module, extra)


def benchmarks_shared(name):
    """``helpers.paths.benchmarks_shared`` (``benchmarks/shared/<name>.py``), imported when called, as ``needs``."""
    from helpers.paths import benchmarks_shared

    return benchmarks_shared(name)


def _run(todo, peers, scenario="shared-process", threads=1, **kw):
    return runner.run(todo, repeats=2, threads=threads, peers=peers, scenario=scenario, min_sample_s=0.0005, **kw)


# Module-level builders: a peer timed in its own process is found by import.
def liar_build(case, inputs, ctx):
    right = subject.bertembed_call(case, inputs, 1)
    return lambda: right() + 0.5


def twin_build(case, inputs, ctx):
    return subject.bertembed_call(case, inputs, 1)


LIAR = Peer("liar", lambda c: True, liar_build)
TWIN = Peer("twin", lambda c: True, twin_build)


# --------------------------------------------------------------------------- both scenarios


@pytest.mark.parametrize("scenario", ["shared-process", "isolated"])
def test_result_structure_and_ratios_from_medians(scenario):
    ceiling = bertembed.max_threads()
    results = _run([SUM64, OUT64, LN32], ["numpy", "copyto", "take"], scenario=scenario)
    assert [r["name"] for r in results] == [SUM64.name, OUT64.name, LN32.name]
    json.dumps(results)  # JSON-serialisable
    for r in results:
        for key in (
            "dtype",
            "layer_norm",
            "batch",
            "seq",
            "out",
            "V",
            "P",
            "H",
            "threads",
            "scenario",
            "variants",
            "timings",
            "ratios",
            "skipped",
            "goals",
            "machine",
        ):
            assert key in r
        assert r["scenario"] == scenario
        assert r["threads"] == 1
        mine = r["timings"]["bertembed"]["median_s"]
        assert mine > 0
        for peer, ratio in r["ratios"].items():
            t = r["timings"][peer]
            assert t["min_s"] <= t["median_s"]
            assert ratio == pytest.approx(t["median_s"] / mine)
            assert r["ratios_min"][peer] == pytest.approx(t["min_s"] / r["timings"]["bertembed"]["min_s"])
        for key in ("platform", "cpu_count", "numpy", "torch", "onnxruntime"):
            assert key in r["machine"]
    by_name = {r["name"]: r for r in results}
    assert set(by_name[SUM64.name]["timings"]) == {"bertembed", "bertembed-fixed", "numpy"}
    assert set(by_name[OUT64.name]["timings"]) == {"bertembed", "bertembed-fixed", "copyto"}
    assert set(by_name[LN32.name]["timings"]) == {"bertembed", "bertembed-fixed", "numpy", "take"}
    # The run's thread ceiling (1 here) is given back to the calling thread.
    assert bertembed.max_threads() == ceiling


def test_isolated_runs_every_variant_in_its_own_process():
    [r] = _run([LN32], ["numpy", "take"], scenario="isolated", threads=2)
    assert set(r["variants"]) == {"bertembed", "bertembed@1", "bertembed@2", "numpy@1", "take@1"}
    pids = [pid for v in r["variants"].values() for pid in v["pid"]]  # each variant: one process per round
    assert len(set(pids)) == len(pids) and os.getpid() not in pids
    assert r["timings"]["bertembed-fixed"]["threads"] in (1, 2)  # the better of 1 and T
    assert r["bertembed_threads"] in (1, 2)  # what the automatic choice took last
    assert "isolated" in report.format_table([r])


def test_threaded_peers_are_measured_at_1_and_T_and_the_faster_counts():
    def slow_at_one(case, inputs, ctx):
        call = subject.bertembed_call(case, inputs, 1)
        if ctx.threads == 1:
            return lambda: (sum(range(20000)), call())[1]
        return call

    peer = Peer("threads", lambda c: True, slow_at_one, threaded=True)
    [r] = _run([LN32], [peer], threads=2)
    assert set(r["variants"]) >= {"threads@1", "threads@2"}
    variants = r["variants"]
    best = min(("threads@1", "threads@2"), key=lambda lab: variants[lab]["median_s"])
    assert r["timings"]["threads"]["variant"] == best
    assert r["timings"]["threads"]["median_s"] == variants[best]["median_s"]
    assert r["ratios"]["threads"] == pytest.approx(variants[best]["median_s"] / r["timings"]["bertembed"]["median_s"])


def test_plan_variants():
    peers = runner.resolve_peers(["numpy", "torch", "onnxruntime", "copyto"])
    ln = cases.make_case("float32", True, 1, 128)
    assert [v.label for v, _ in runner.plan(ln, peers, 4)] == [
        "bertembed",
        "bertembed@1",
        "bertembed@4",
        "numpy@1",
        "torch@1",
        "torch@4",
        "onnxruntime@1",
        "onnxruntime@4",
    ]
    assert [v.label for v, _ in runner.plan(ln, peers, 1)] == [
        "bertembed",
        "bertembed@1",
        "numpy@1",
        "torch@1",
        "onnxruntime@1",
    ]
    out = cases.make_case("float64", False, 32, 512, out=True)
    assert [v.label for v, _ in runner.plan(out, peers, 2)] == ["bertembed", "bertembed@1", "bertembed@2", "copyto@1"]
    bf16 = cases.make_case("float32", True, 32, 512, table_dtype="bfloat16")
    assert [v.label for v, _ in runner.plan(bf16, peers, 2)] == ["bertembed", "bertembed@1", "bertembed@2"]


def test_progress_reaches_total():
    calls = []
    _run([SUM64, LN32], ["numpy"], progress=lambda d, t, label: calls.append((d, t, label)))
    assert calls[0][0] == 0
    assert calls[-1][:2] == (4, 4)
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(calls))
    calls.clear()
    _run(
        [SUM64, LN32],
        ["numpy"],
        scenario="isolated",
        threads=2,
        progress=lambda d, t, label: calls.append((d, t, label)),
    )
    assert calls[-1][:2] == (8, 8)  # 2 cases x (bertembed, bertembed@1, bertembed@2, numpy@1)
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(calls))


def test_missing_peer_is_skipped_and_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    [r] = _run([LN32], ["numpy", "torch", "onnxruntime"], threads=2)
    assert set(r["timings"]) == {"bertembed", "bertembed-fixed", "numpy"}
    assert r["skipped"]["torch"]["status"] == "unavailable"
    assert r["skipped"]["onnxruntime"]["status"] == "unavailable"
    assert r["variants"]["torch@2"]["status"] == "unavailable"
    assert "unavailable" in report.format_table([r])


@pytest.mark.parametrize("scenario", ["shared-process", "isolated"])
def test_wrong_peer_is_caught_and_not_timed(scenario):
    [r] = _run([SUM64], [LIAR, "numpy"], scenario=scenario)
    assert "liar" not in r["timings"] and "liar" not in r["ratios"]
    assert r["skipped"]["liar"]["status"] == "mismatch"
    assert "numpy" in r["ratios"]
    assert "mismatch" in report.format_table([r])


def test_wrong_shape_is_a_mismatch():
    liar = Peer("liar", lambda c: True, lambda c, d, x: lambda: np.zeros(3))
    [r] = _run([LN32], [liar])
    assert r["skipped"]["liar"]["status"] == "mismatch"


def test_isolated_custom_peer_needs_a_module_level_builder():
    closure = Peer("closure", lambda c: True, lambda c, d, x: lambda: None)
    with pytest.raises(ValueError, match="module-level build function"):
        _run([SUM64], [closure], scenario="isolated")


def test_format_table_names_every_contender_and_the_scenario():
    results = _run([SUM64, OUT64], ["numpy", "copyto", TWIN], threads=2)
    table = report.format_table(results)
    for name in (
        "bertembed",
        "bertembed 1|T",
        "numpy",
        "copyto",
        "twin",
        SUM64.name,
        OUT64.name,
        "shared process",
        "next to a runtime that spins",
    ):
        assert name in table


def test_unknown_peer_and_bad_arguments():
    with pytest.raises(ValueError, match="unknown peer"):
        _run([SUM64], ["nope"])
    with pytest.raises(ValueError, match="repeats"):
        runner.run([SUM64], repeats=0, peers=[])
    with pytest.raises(ValueError, match="threads"):
        runner.run([SUM64], repeats=1, threads=0, peers=[])
    with pytest.raises(ValueError, match="unknown scenario"):
        runner.run([SUM64], repeats=1, peers=[], scenario="elsewhere")


# --------------------------------------------------------------------------- bfloat16 tables


def _refuses_bfloat16() -> bool:
    ml_dtypes = needs("ml_dtypes", "bfloat16")
    table = np.zeros((4, 2), ml_dtypes.bfloat16)
    try:
        bertembed.bert_embeddings([[1]], None, table, table, table, dtype=np.float32)
    except TypeError:
        return True
    return False


@pytest.mark.parametrize("scenario", ["shared-process", "isolated"])
def test_bfloat16_case_is_unavailable_or_timed(scenario):
    refuses = _refuses_bfloat16()
    inputs = data.make_inputs(BF16)
    assert inputs.tok.dtype.name == "bfloat16" and inputs.ln_weight.dtype == np.float32
    np.testing.assert_array_equal(
        inputs.tok.astype(np.float32), data.make_inputs(LN32).tok.astype(inputs.tok.dtype).astype(np.float32)
    )
    [r] = _run([BF16], ["numpy"], scenario=scenario, threads=2)
    if refuses:
        assert r["skipped"]["bertembed"]["status"] == "unavailable"
        assert "refuses bfloat16 tables" in r["skipped"]["bertembed"]["reason"]
        assert r["timings"] == {} and r["ratios"] == {}
        assert "unavailable" in report.format_table([r])
    else:
        assert r["timings"]["bertembed"]["median_s"] > 0, r["skipped"]
    assert "numpy@1" not in r["variants"]  # peers do not apply to low-precision tables


# --------------------------------------------------------------------------- the tables family

I8 = Case("tiny-f32-ln-i8", "float32", True, 2, 5, table_dtype="int8", **TINY)


@pytest.mark.parametrize("scenario", ["shared-process", "isolated"])
def test_int8_case_is_checked_against_its_dequantised_table_and_timed(scenario):
    inputs = data.make_inputs(I8)
    assert inputs.tok.dtype == np.float32  # the layer quantises
    call = subject.bertembed_call(I8, inputs, 1)
    assert call.layer.table_dtype == "int8"
    values = subject.token_values(call)
    assert not np.array_equal(values, inputs.tok)  # quantised ...
    np.testing.assert_allclose(values, inputs.tok, atol=np.ptp(inputs.tok, axis=1).max() / 255)  # ... closely
    [r] = _run([I8, LN32], [], scenario=scenario, threads=2)[:1]
    assert r["timings"]["bertembed"]["median_s"] > 0, r["skipped"]


def test_id_sets_are_cycled_and_the_first_is_checked():
    case = Case("tiny-sets", "float32", True, 2, 5, id_sets=3, **TINY)
    inputs = data.make_inputs(case)
    assert inputs.id_sets.shape == (3, 2, 5) and np.array_equal(inputs.id_sets[0], inputs.ids)
    assert not np.array_equal(inputs.id_sets[1], inputs.ids)
    call = subject.bertembed_call(case, inputs, 1)
    got = [call() for _ in range(4)]
    for k, ids in enumerate([*inputs.id_sets, inputs.id_sets[0]]):
        np.testing.assert_array_equal(got[k], call.layer(ids, inputs.segment_ids))
    [r] = _run([case], [], scenario="isolated", threads=1)
    assert r["timings"]["bertembed"]["median_s"] > 0, r["skipped"]


def test_a_wrong_int8_kernel_is_a_mismatch(monkeypatch):
    real = subject.BertembedCall.__call__
    monkeypatch.setattr(
        subject.BertembedCall, "__call__", lambda self: real(self) + (0.1 if self.layer.table_dtype == "int8" else 0.0)
    )
    [r] = _run([I8], [])
    assert r["skipped"]["bertembed"]["status"] == "mismatch"


def test_tables_family_and_its_goals():
    isas = cases.runnable_isas()
    assert isas[0] == "baseline" and len(isas) >= 1
    names = [c.name for c in cases.family("tables")]
    assert names == [c.name for c in cases.TABLE_CASES if c.isa in isas] and len(names) == 12 * len(isas)
    assert len(cases.TABLE_CASES) == 12 * len(cases.TABLE_ISAS)
    for isa in cases.TABLE_ISAS:
        mine = [c for c in cases.TABLE_CASES if c.isa == isa]
        assert len(mine) == 12 and all(c.name.endswith(f"-{isa}") for c in mine)
        big = [c for c in mine if c.V == cases.BIG_VOCAB]
        assert {(c.batch, c.seq) for c in big} == {(32, 512), (8, 128)}
        assert {c.table_dtype for c in big} == {None, "bfloat16", "int8"}
        assert all("V250k" in c.name for c in big)
    # Fresh ids at every call: never the name of a default case (whose goals would judge it).
    assert not set(names) & {c.name for c in cases.DEFAULT_CASES}
    assert all(c.id_sets * c.batch * c.seq >= cases.TABLE_ROWS_PER_CYCLE for c in cases.TABLE_CASES)
    assert cases.family("default") == cases.DEFAULT_CASES
    with pytest.raises(ValueError, match="unknown case family"):
        cases.family("nope")
    keys = {g.key: g for g in cases.GOALS}
    goal = keys["int8-1.3x-V250k-B8-S128-avx2"]
    assert (goal.case, goal.numerator_case, goal.bound) == (
        "f32-ln-V250k-i8-B8-S128-avx2",
        "f32-ln-V250k-B8-S128-avx2",
        1.3,
    )
    assert keys["bfloat16-1.2x-V250k-B32-S512-baseline"].bound == 1.2
    # One goal per row kernel per table goal; BERT-base tables: never slower than float32.
    for isa in cases.TABLE_ISAS:
        mine = [g for g in cases.GOALS if g.key.endswith(f"-{isa}")]
        assert len(mine) == 8, isa
        assert {g.bound for g in mine if "V30k" in g.key} == {1.0}


def test_a_case_for_another_row_kernel_is_unavailable_not_timed():
    other = "neon" if cases.runnable_isas()[-1] != "neon" else "avx2"
    case = Case("tiny-isa", "float32", True, 2, 5, isa=other, **TINY)
    for scenario in ("isolated", "shared-process"):
        [r] = _run([case], [], scenario=scenario, threads=1)
        assert r["skipped"]["bertembed"]["status"] == "unavailable", r
        assert "row kernel" in r["skipped"]["bertembed"]["reason"]
        assert r["isa"] == case.isa


@pytest.mark.parametrize("isa", ["baseline"])
def test_a_case_runs_with_its_row_kernel(isa):
    case = Case(f"tiny-{isa}", "float32", True, 2, 5, isa=isa, **TINY)
    [r] = _run([case], [], scenario="isolated", threads=1)
    assert r["timings"]["bertembed"]["median_s"] > 0, r["skipped"]
    assert schema.parse([r]).cases[0].isa == isa


def test_table_dtypes_report():
    big = {"V": 250_002, "batch": 8, "isa": "avx2"}
    results = [
        _fake("f32-ln-V250k-B8-S128-avx2", **big, bertembed=3e-3),
        _fake("f32-ln-V250k-bf16-B8-S128-avx2", table_dtype="bfloat16", **big, bertembed=2e-3),
        _fake("f32-ln-V250k-i8-B8-S128-avx2", table_dtype="int8", **big, bertembed=4e-3),
        _fake("f32-ln-B8-S128", batch=8, bertembed=1e-3),
    ]
    runner.evaluate_goals(results)
    assert results[1]["goals"]["bfloat16-1.2x-V250k-B8-S128-avx2"]["ratio"] == pytest.approx(1.5)
    assert results[2]["goals"]["int8-1.3x-V250k-B8-S128-avx2"]["met"] is False
    text = report.format_table_dtypes(results)
    assert "1.50" in text and "0.75" in text and "183 MiB" in text and "f32-ln-B8-S128" not in text
    assert report.format_table_dtypes(results[3:]) == ""


# --------------------------------------------------------------------------- goals


def _fake(name, *, table_dtype=None, V=30522, batch=1, isa=None, **medians):
    """A case's record as the runner writes it, from made-up medians (``take`` unavailable)."""
    case = Case(name, "float32", True, batch, 128, V=V, table_dtype=table_dtype, isa=isa)
    variants = [(data.Variant(n, None if n == "bertembed" else 1), None) for n in [*medians, "take"]]
    measured = {
        v.label: {
            "status": "ok",
            "median_s": medians[v.contender],
            "min_s": medians[v.contender],
            "calls_per_sample": 1,
        }
        for v, _ in variants
        if v.contender in medians
    }
    measured["take@1"] = {"status": "unavailable", "reason": "no take here"}
    return runner._result(
        case, variants, measured, threads=2, repeats=3, scenario="isolated", machine={"platform": "test"}
    )


def test_goals_are_ratios_of_the_named_contenders():
    results = [
        _fake("f32-ln-B1-S128", bertembed=50e-6, onnxruntime=120e-6, torch=80e-6),
        _fake("f32-ln-B32-S512", bertembed=5e-3),
        _fake("f32-ln-bf16-B32-S512", bertembed=4e-3),
        _fake("f64-sum-out-B32-S512", bertembed=1.2e-3, copyto=1e-3),
    ]
    runner.evaluate_goals(results)
    b1 = results[0]["goals"]
    assert b1["best-peer-2x-f32-ln-B1-S128"]["ratio"] == pytest.approx(80 / 50)  # the faster peer
    assert b1["best-peer-2x-f32-ln-B1-S128"]["met"] is False
    assert b1["best-peer-2x-f32-ln-B1-S128"]["numerator"] == "torch@1"  # its fastest variant
    assert b1["take-1.5x"]["ratio"] is None and "take unavailable" in b1["take-1.5x"]["reason"]
    bf16 = results[2]["goals"]["bf16-1.2x"]
    assert bf16["ratio"] == pytest.approx(5 / 4) and bf16["met"] is True
    copy = results[3]["goals"]["copyto-1.3x"]
    assert copy["ratio"] == pytest.approx(1.2) and copy["met"] is True and copy["op"] == "<="
    assert "f32-ln-B32-S512" not in {g.case for g in cases.GOALS if g.key.startswith("bf16")}
    text = report.format_goals(results)
    assert "MISSED" in text and "met" in text and "n/a" in text and report.SMOKE_TEST not in text
    smoke = report.format_goals(results, judged=False)  # --quick: the same ratios, no verdict
    assert smoke.splitlines()[0] == report.SMOKE_TEST
    assert "MISSED" not in smoke and "met (" not in smoke and "n/a" in smoke
    assert smoke.count("(not judged)") == text.count("MISSED") + text.count("met (")
    assert f"{80 / 50:.2f}" in text and f"{80 / 50:.2f}" in smoke  # torch / bertembed on B1, the ratio shown either way


def test_goal_without_its_reference_case():
    results = [_fake("f32-ln-bf16-B32-S512", bertembed=4e-3)]
    runner.evaluate_goals(results)
    goal = results[0]["goals"]["bf16-1.2x"]
    assert goal["met"] is None and "f32-ln-B32-S512 was not run" in goal["reason"]


def test_custom_goal():
    goal = Goal("g", "twin / bertembed", "c", ("twin",), ("bertembed",), 0.5)
    results = [_fake("c", bertembed=2.0, twin=1.0)]
    runner.evaluate_goals(results, [goal])
    assert results[0]["goals"]["g"]["ratio"] == 0.5 and results[0]["goals"]["g"]["met"] is True


def test_default_cases_cover_the_goals():
    names = {c.name for c in cases.DEFAULT_CASES}
    tables = {c.name for c in cases.TABLE_CASES}
    assert {g.case for g in cases.GOALS} | {g.numerator_case for g in cases.GOALS if g.numerator_case} <= names | tables
    assert len(names) == len(cases.DEFAULT_CASES) and len(tables) == len(cases.TABLE_CASES)
    sweep = sorted(c.batch for c in cases.DEFAULT_CASES if c.dtype == "float32" and c.layer_norm and c.seq == 128)
    assert sweep == [1, 2, 4, 8, 16, 32]
    assert "f32-ln-bf16-B32-S512" in names


# --------------------------------------------------------------------------- timing, memory


def test_time_interleaved_rotates_order():
    order = []
    funcs = {n: (lambda n=n: order.append(n)) for n in "abc"}
    timing.time_interleaved(funcs, 3, min_sample_s=0.0)
    timed = order[12:]  # one warm-up and three calibration calls each come first
    assert order[:12] == ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    assert timed == list("abc") + list("bca") + list("cab")


def test_time_interleaved_prepares_each_sample():
    events = []
    contender = timing.Contender(lambda: events.append("call"), lambda: events.append("prepare"))
    timing.time_interleaved({"x": contender}, 2, min_sample_s=0.0, gap_s=0.0)
    assert events == ["prepare", *["call"] * 4, "prepare", "call", "prepare", "call"]


def test_peak_memory_is_about_the_result():
    memory = benchmarks_shared("memory")
    case = Case("mem", "float64", False, 4, 16, V=100, P=16, H=256)
    report_ = memory.peak_memory(case, threads=1, rss=False)
    assert report_["result_bytes"] == 4 * 16 * 256 * 8
    assert 0.99 <= report_["ratio"] <= 1.1
    out = memory.peak_memory(Case("mem-out", "float64", False, 4, 16, True, V=100, P=16, H=256), threads=1, rss=False)
    assert out["ratio"] < 0.1
    json.dumps(report_)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS via /proc")
def test_peak_memory_rss_subprocess():
    memory = benchmarks_shared("memory")
    case = Case("mem", "float32", True, 2, 8, V=100, P=16, H=64)
    report_ = memory.peak_memory(case, threads=1)
    assert "rss_ratio" in report_, report_.get("rss_error")


# --------------------------------------------------------------------------- the heavy peers


@pytest.mark.heavy
@pytest.mark.parametrize("scenario", ["shared-process", "isolated"])
def test_torch_peer_agrees_and_is_timed(scenario):
    needs("torch", "peers")
    [r] = _run([LN32], ["torch"], scenario=scenario, threads=2)
    assert "torch" in r["ratios"], r["skipped"]
    assert r["variants"]["torch@1"]["status"] == r["variants"]["torch@2"]["status"] == "ok"


@pytest.mark.heavy
@pytest.mark.parametrize("scenario", ["shared-process", "isolated"])
def test_onnxruntime_peer_agrees_and_is_timed(scenario):
    needs("onnx", "peers")
    needs("onnxruntime", "peers")
    [r] = _run([LN32], ["onnxruntime"], scenario=scenario, threads=2)
    assert "onnxruntime" in r["ratios"], r["skipped"]
    assert r["variants"]["onnxruntime@1"]["status"] == "ok"


def test_time_once_times_one_call_and_counts_cpu():
    calls = []
    once = timing.time_once(lambda: calls.append(1) or sum(i * i for i in range(200_000)))
    assert calls == [1] and once.result == sum(i * i for i in range(200_000))
    assert once.wall_s > 0 and once.cpu_s > 0 and once.cpu_s == once.user_s + once.system_s


def test_call_log_records_every_call_the_harness_makes():
    notes = iter(range(10_000))
    log = timing.CallLog(lambda: "x", note=lambda: next(notes))
    stats = timing.time_interleaved({"logged": log}, 2, min_sample_s=0.0, gap_s=0.0)
    assert stats["logged"]["calls_per_sample"] == 1
    assert [c.note for c in log.records] == list(range(len(log.records))) and len(log.records) >= 3
    starts = [c.start for c in log.records]
    assert starts == sorted(starts) and all(c.seconds >= 0 for c in log.records)


def test_summarize_pools_samples():
    assert timing.summarize([4.0, 1.0, 3.0, 2.0]) == {"median_s": 2.5, "min_s": 1.0, "samples_s": [4.0, 1.0, 3.0, 2.0]}
    with pytest.raises(ValueError, match="no samples"):
        timing.summarize([])


def test_timing_imports_only_the_standard_library():
    """run_in_tree loads timing.py by its path into a process whose bertembed is another tree's."""
    source = Path(timing.__file__).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= set(sys.stdlib_module_names) | {"__future__"}, imports


# --------------------------------------------------------------------------- child processes


def test_in_rounds_rotates_the_first():
    assert spawn.in_rounds(["a", "b"], 3) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    assert spawn.in_rounds([], 2) == []


def test_run_in_tree_uses_that_tree_and_this_harness_timing(tmp_path):
    trees = benchmarks_shared("trees")
    src = spawn.package_root()
    code = "emit({'timing': timing.__file__, 'median': timing.summarize([float(a) for a in sys.argv[1:]])['median_s']})"
    got = trees.run_in_tree("import sys\n" + code, src, ["1", "5", "3"])
    assert got["median"] == 3.0
    assert got["timing"] == spawn.TIMING_FILE == str(Path(timing.__file__).resolve())
    assert got["bertembed_file"] == str(Path(bertembed.__file__).resolve())
    with pytest.raises(RuntimeError, match="not from the tree"):  # no bertembed there: refused, not another one
        trees.run_in_tree("emit({})", tmp_path)


def test_script_code_calls_the_scripts_own_function(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("def twice(x):\n    return {'twice': 2 * int(x)}\n")
    body = "from bertembed._bench.spawn import emit\nemit(script.twice(sys.argv[1]))"
    assert spawn.run_child(benchmarks_shared("trees").script_code(script, body), ["21"]) == {"twice": 42}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS via /proc")
def test_rss_peak_sees_an_allocation_in_a_fresh_process():
    memory = benchmarks_shared("memory")
    body = (
        "import numpy as np\n"
        "from bertembed._bench.spawn import emit\n"
        "_, peak = script.rss_peak(lambda: np.ones(32 << 20, np.uint8).sum())\n"
        "emit({'extra': peak.extra_bytes, 'ok': peak.baseline_ok})"
    )
    got = spawn.run_child(benchmarks_shared("trees").script_code(memory.__file__, body))
    # About the 32 MiB allocated: an allocator that reuses pages it already
    # held (mimalloc, free-threaded CPython) shows a few pages less.
    assert got["ok"] and 31 << 20 <= got["extra"] < 48 << 20


def test_the_synthetic_checkpoint_loads_as_the_harness_made_it(tmp_path):
    write_checkpoint = benchmarks_shared("checkpoint").write_checkpoint

    directory = write_checkpoint(tmp_path / "ckpt", vocab=300, hidden=16)
    layer = bertembed.BertEmbeddings.from_pretrained(directory)
    assert (layer.vocab_size, layer.hidden_size, layer.max_positions, layer.model_type) == (300, 16, 514, "xlm-roberta")
    want = data.make_inputs(Case("x", "float32", True, 1, 1, V=300, P=514, H=16))
    arrays = subject.layer_arrays(layer)
    np.testing.assert_array_equal(arrays.tok, want.tok)
    np.testing.assert_array_equal(arrays.seg, want.seg[:1])
    np.testing.assert_array_equal(arrays.ln_weight, want.ln_weight)
    assert arrays.ln_eps == 1e-5
    stamp = (directory / "model.safetensors").stat().st_mtime_ns
    assert write_checkpoint(directory, vocab=300, hidden=16) == directory  # reused
    assert (directory / "model.safetensors").stat().st_mtime_ns == stamp


@pytest.mark.parametrize(
    "name", ["data", "cases", "timing", "peers", "report", "runner", "schema", "spawn", "subject", "plot", "child"]
)
def test_docstring_examples(name):
    module = importlib.import_module(f"bertembed._bench.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
