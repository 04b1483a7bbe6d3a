"""An int8 encoder on a CPU whose uint8 x int8 products saturate: its weights are stored as uint8."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason='the server needs onnxruntime: pip install "bertembed[serve]"')
from helpers.paths import ROOT, env_with_bertembed, env_with_helpers
from onnx import TensorProto, helper, numpy_helper

from bertembed._core import _kernel
from bertembed.serve.server import int8_host
from bertembed.serve.server.pipeline import SentenceEmbedder

AVX2_HOST = ROOT / "benchmarks" / "avx2_host.sh"


def _saturation(prefix: list[str]) -> dict[str, object]:
    env = env_with_helpers(env_with_bertembed())
    cmd = [*prefix, sys.executable, "-m", "helpers.int8_saturation"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_unsigned_weights_give_the_exact_products_here() -> None:
    got = _saturation([])
    assert got["uint8_exact"] is True and got["changed"] == 1
    assert got["saturates"] is _kernel.int8_products_saturate()
    if not got["saturates"]:
        assert got["int8_exact"] is True


def _cpuid_faulting() -> bool:
    try:
        return "cpuid_fault" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.skipif(not _cpuid_faulting(), reason="needs Linux x86-64 with CPUID faulting (benchmarks/avx2_host.sh)")
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (benchmarks/avx2_host.sh)")
def test_on_an_avx2_host_int8_weights_saturate_and_uint8_ones_do_not() -> None:
    """Under avx2_host.sh (CPUID answers as an AVX2 CPU) ONNX Runtime's int8-weight product is
    wrong and the uint8 one exact, and the kernel says the products saturate."""
    got = _saturation(["bash", str(AVX2_HOST)])
    assert got == {"saturates": True, "int8_exact": False, "uint8_exact": True, "changed": 1}


def test_shared_and_symmetric_weights() -> None:
    """A weight two nodes share is shifted once; a node without a zero point gets one of 128."""
    w = numpy_helper.from_array(np.array([[-1, 2], [3, -4]], np.int8), "w")
    zp = numpy_helper.from_array(np.array([1, -2], np.int8), "zp")
    nodes = [
        helper.make_node("MatMulInteger", ["a", "w", "", "zp"], ["y1"]),
        helper.make_node("MatMulInteger", ["b", "w", "", "zp"], ["y2"]),
        helper.make_node("MatMulInteger", ["c", "v"], ["y3"]),
    ]
    v = numpy_helper.from_array(np.array([[5, -6]], np.int8), "v")
    model = helper.make_model(helper.make_graph(nodes, "g", [], [], initializer=[w, zp, v]))
    assert int8_host.unsigned_weights(model) == 2
    values = {i.name: numpy_helper.to_array(i).tolist() for i in model.graph.initializer}
    assert values["w"] == [[127, 130], [131, 124]] and values["zp"] == [129, 126]
    assert values["v"] == [[133, 122]] and values["v_zero_point_uint8"] == 128
    assert list(model.graph.node[2].input) == ["c", "v", "", "v_zero_point_uint8"]
    assert all(i.data_type == TensorProto.UINT8 for i in model.graph.initializer)


@pytest.mark.parametrize(
    ("dtype", "saturates", "unsigned"), [("int8", True, True), ("int8", False, False), ("float32", True, False)]
)
def test_the_pipeline_makes_int8_weights_unsigned_only_where_products_saturate(
    monkeypatch: pytest.MonkeyPatch, dtype: str, saturates: bool, unsigned: bool
) -> None:
    monkeypatch.setattr(_kernel, "int8_products_saturate", lambda: saturates)
    embedder = SentenceEmbedder.__new__(SentenceEmbedder)
    embedder.config = {"encoder": {"dtype": dtype}}
    assert embedder.unsigned_int8 is unsigned
    if unsigned:
        with pytest.raises(RuntimeError, match="made unsigned for this CPU in each worker"):
            embedder.share_encoder("/nonexistent")
