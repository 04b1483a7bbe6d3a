"""``bertembed export --encoder-dtype int8``: an int8 encoder, served, against the float32 export.

all-MiniLM-L6-v2 is exported in int8 (the float32 export is the session's ``out_dir``) and served
with 2 workers, which map the shared encoder (:mod:`bertembed.serve.server.memory`) written from
the int8 ``encoder.onnx``. On real texts (``benchmarks/data/sentences.txt``: English and other
languages, short and long) the served int8 vectors reach cosine >= 0.99 to the float32
pipeline's, and agree with the int8 pipeline run in this process. The option's errors: an
unknown dtype, and a quantised encoder below the cosine floor.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import ROOT
from service_helpers import MODEL_NAME, Server, cosines, serve, skip_without_service_packages

skip_without_service_packages()
pytest.importorskip("onnxruntime.quantization", reason='needs onnxruntime: pip install "bertembed[serve]"')
pytestmark = pytest.mark.heavy

SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"


def _texts() -> list[str]:
    if not SENTENCES.is_file():
        pytest.skip(f"{SENTENCES} is not in this checkout")
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def int8_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("service-int8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertembed",
            "export",
            str(model_dir),
            str(out),
            *("--name", MODEL_NAME, "--encoder-dtype", "int8"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    return out, done.stdout


@pytest.fixture(scope="module")
def int8_server(int8_dir: tuple[Path, str]) -> Iterator[Server]:
    yield from serve(int8_dir[0], "server-int8.log")


def _pipeline(artifact: Path, texts: list[str]) -> np.ndarray:
    from bertembed.serve.server.pipeline import SentenceEmbedder

    embedder = SentenceEmbedder(artifact, threads=1)
    embedder.start()
    return np.asarray(embedder.encode_texts(texts), dtype=np.float64)


def test_the_export_says_how_the_int8_encoder_was_checked_and_records_it(int8_dir):
    out, stdout = int8_dir
    assert "checked by cosine instead" in stdout
    assert "(>= 0.99 required)" in stdout
    encoder = json.loads((out / "service.json").read_text(encoding="utf-8"))["encoder"]
    assert encoder["dtype"] == "int8"
    assert encoder["cosine_min_vs_torch"] >= 0.99
    assert encoder["max_abs_diff_vs_torch"] <= 1e-4  # the float32 encoder it was quantised from
    quantization = encoder["quantization"]
    assert quantization["per_channel"] is True
    assert quantization["quantized"] == {"Attention": 5, "MatMul": 10}
    assert quantization["float"] == {"MatMul": 8, "Attention": 1}
    # a quarter of the float32 encoder's weights, the float MatMuls aside
    assert (out / "encoder.onnx").stat().st_size < 0.6 * 4 * 22_700_000


def test_the_float32_export_records_its_dtype(out_dir):
    encoder = json.loads((out_dir / "service.json").read_text(encoding="utf-8"))["encoder"]
    assert encoder["dtype"] == "float32"
    assert "quantization" not in encoder


def test_served_int8_vectors_are_close_to_the_float32_pipeline(int8_server, int8_dir, out_dir):
    texts = _texts()
    want = _pipeline(out_dir, texts)
    got = np.concatenate([int8_server.embed(texts[k : k + 32]) for k in range(0, len(texts), 32)])
    similar = cosines(got, want)
    assert similar.min() >= 0.99, [texts[k] for k in np.argsort(similar)[:3]]
    assert np.median(similar) >= 0.995
    # the activations' scale is per encoder call: a text's vector depends on the texts batched with it
    alone = _pipeline(int8_dir[0], texts)
    assert cosines(got, alone).min() >= 0.99


def test_the_int8_workers_share_one_encoder(int8_server, encoder_cache):
    log = int8_server.log()
    assert f"encoder: {encoder_cache}" in log, log
    assert len(int8_server.workers()) == 2


def test_info_says_the_encoder_is_int8(int8_server, server):
    import httpx

    assert httpx.get(f"{int8_server.url}/info", timeout=30).json()["model_dtype"] == "int8"
    assert httpx.get(f"{server.url}/info", timeout=30).json()["model_dtype"] == "float32"


def test_an_unknown_encoder_dtype_is_refused(model_dir, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bertembed", "export", str(model_dir), str(tmp_path / "out"), "--encoder-dtype", "int4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--encoder-dtype: invalid choice: 'int4'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_functions_refuse_an_unknown_encoder_dtype(model_dir, tmp_path):
    from bertembed.serve.artifact import from_onnx, from_torch

    with pytest.raises(ValueError, match="encoder_dtype must be one of"):
        from_torch.export(model_dir, tmp_path / "a", encoder_dtype="float16")
    with pytest.raises(ValueError, match="encoder_dtype must be one of"):
        from_onnx.build(model_dir, tmp_path / "b", encoder_dtype="bfloat16")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_int8_encoder_below_the_cosine_floor_is_refused():
    from bertembed.serve.artifact.int8 import COSINE_MIN, check_cosine

    want = np.eye(3, 4)
    near = want + 0.01 * np.ones((3, 4))
    assert check_cosine(near, want, "the torch model") >= COSINE_MIN
    far = want.copy()
    far[1] = [0.8, 0.6, 0.0, 0.0]  # cosine 0.6 for the second text
    with pytest.raises(ValueError, match=r"reach only cosine 0\.6000 to the torch model.*--encoder-dtype float32"):
        check_cosine(far, want, "the torch model")


def _unfused_layers(layers: int):
    """A graph shaped like MPNet's fused encoder, whose attention ONNX Runtime does not fuse: per layer
    query, key and value MatMuls, the output projection, then the feed-forward MatMul, a GELU and the
    GELU-fed MatMul, with the residual Adds."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, weights = [], []

    def node(op: str, name: str, *inputs: str, domain: str = "") -> str:
        nodes.append(helper.make_node(op, list(inputs), [f"{name}.y"], name=name, domain=domain))
        return f"{name}.y"

    def matmul(name: str, x: str) -> str:
        weights.append(numpy_helper.from_array(np.eye(4, dtype=np.float32), f"{name}.w"))
        return node("MatMul", name, x, f"{name}.w")

    x = "x"
    for k in range(layers):
        q, key, v = (matmul(f"l{k}.{p}", x) for p in ("q", "k", "v"))
        context = node("Add", f"l{k}.qkv", node("Add", f"l{k}.qk", q, key), v)
        h = node("Add", f"l{k}.res1", x, matmul(f"l{k}.o", context))
        gelu = node("Gelu", f"l{k}.gelu", matmul(f"l{k}.ffn1", h), domain="com.microsoft")
        x = node("Add", f"l{k}.res2", h, matmul(f"l{k}.ffn2", gelu))
    graph = helper.make_graph(
        nodes,
        "layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 4])],
        weights,
    )
    return helper.make_model(graph)


def test_the_last_layer_stays_float_when_the_attention_is_not_fused():
    from bertembed.serve.artifact.int8 import quantisable

    chosen, kept = quantisable(_unfused_layers(3))
    projections = ("q", "k", "v", "o", "ffn1")
    assert [n.name for n in chosen] == [f"l{k}.{p}" for k in (0, 1) for p in projections]
    assert sorted(n.name for n in kept) == sorted([f"l{k}.ffn2" for k in range(3)] + [f"l2.{p}" for p in projections])
    # one layer: it is the last, but nothing would be left to quantise, so only the GELU-fed MatMul stays float
    chosen, kept = quantisable(_unfused_layers(1))
    assert [n.name for n in chosen] == [f"l0.{p}" for p in projections] and [n.name for n in kept] == ["l0.ffn2"]


def test_from_twelve_layers_the_first_layer_stays_float_too():
    from bertembed.serve.artifact.int8 import FIRST_LAYER_FLOAT_FROM, quantisable

    projections = ("q", "k", "v", "o", "ffn1")
    for layers in (FIRST_LAYER_FLOAT_FROM - 1, FIRST_LAYER_FLOAT_FROM, 24):
        chosen, kept = quantisable(_unfused_layers(layers))
        inner = range(1 if layers >= FIRST_LAYER_FLOAT_FROM else 0, layers - 1)
        assert [n.name for n in chosen] == [f"l{k}.{p}" for k in inner for p in projections], layers
        assert len(kept) == 6 * layers - len(chosen), layers
