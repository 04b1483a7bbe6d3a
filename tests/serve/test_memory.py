"""bertembed.serve.server.memory: heap given back after loading; an encoder whose weights workers share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.sanitizer import not_under_asan

from bertembed.serve.server import memory

LINUX = sys.platform.startswith("linux")


def _anonymous() -> int:
    from bertembed.serve.server import procinfo

    return procinfo.memory(os.getpid())["Anonymous"]


def test_give_back_memory_returns_a_count_and_is_safe_to_repeat():
    assert memory.give_back_memory() >= 0
    assert memory.give_back_memory() >= 0


@pytest.mark.skipif(not LINUX, reason="glibc's malloc_trim and /proc are Linux's")
@not_under_asan  # AddressSanitizer's allocator replaces glibc's heap: malloc_trim has nothing to give back
def test_give_back_memory_returns_freed_heap_pages():
    if memory._malloc_trim() is None:
        pytest.skip("no malloc_trim in this C library (not glibc)")
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    memory.give_back_memory()
    # 64 MiB in blocks below the mmap threshold: they come from the heap, and free() keeps them there
    # (the last block stays allocated so that the heap's top cannot shrink by itself).
    blocks = [libc.malloc(64 * 1024) for _ in range(1024)]
    for block in blocks:
        ctypes.memset(block, 1, 64 * 1024)
    keeper = libc.malloc(64 * 1024)
    touched = _anonymous()
    for block in blocks:
        libc.free(block)
    try:
        kept = _anonymous()
        given = memory.give_back_memory()
        after = _anonymous()
    finally:
        libc.free(keeper)
    assert kept - after > 32 << 20, (touched, kept, after)
    assert given > 32 << 20


def test_cache_dir_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert memory.default_cache_dir() == tmp_path / "bertembed" / "encoders"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert memory.default_cache_dir() == Path.home() / ".cache" / "bertembed" / "encoders"


def _tiny_encoder(path: Path, hidden: int = 16) -> None:
    """embeddings (B, S, H) + attention_mask (B, S) -> (B, H): a MatMul (prepacked by ONNX Runtime) and a mean."""
    onnx = pytest.importorskip("onnx", reason='needs onnx: pip install "bertembed[serve]"')
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["embeddings", "w"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m", "axis"], ["m3"]),
        helper.make_node("Mul", ["h", "m3"], ["hm"]),
        helper.make_node("ReduceSum", ["hm", "one"], ["sentence_embedding"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        [
            weight,
            numpy_helper.from_array(np.array([2], np.int64), "axis"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))


def test_shared_encoder_is_written_once_and_gives_the_same_results(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason='needs onnxruntime: pip install "bertembed[serve]"')
    source = tmp_path / "encoder.onnx"
    _tiny_encoder(source, hidden=64)
    cache = tmp_path / "cache"
    path = memory.shared_encoder(source, cache)
    assert path.name == memory.SHARED_FILE and path.parent.parent == cache
    assert (path.parent / memory.SHARED_DATA).is_file()
    assert not [p for p in cache.iterdir() if p.name.startswith(".building-")]
    stamp = path.stat().st_mtime_ns
    assert memory.shared_encoder(source, cache) == path  # cached: not written again
    assert path.stat().st_mtime_ns == stamp

    feeds = {
        "embeddings": np.random.default_rng(1).standard_normal((3, 5, 64)).astype(np.float32),
        "attention_mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], np.int64),
    }
    options = ort.SessionOptions()
    options.log_severity_level = 3
    expected = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, expected)


def test_a_new_shared_encoder_replaces_the_older_one_of_the_same_source(tmp_path):
    pytest.importorskip("onnxruntime", reason='needs onnxruntime: pip install "bertembed[serve]"')
    source, other = tmp_path / "encoder.onnx", tmp_path / "other.onnx"
    _tiny_encoder(source)
    _tiny_encoder(other)
    cache = tmp_path / "cache"
    first = memory.shared_encoder(source, cache)
    kept = memory.shared_encoder(other, cache)
    os.utime(source, ns=(1, 1))  # the artifact exported again: a new key
    second = memory.shared_encoder(source, cache)
    assert second != first and second.is_file() and kept.is_file()
    assert not first.parent.exists()
    assert sorted(p.name for p in cache.iterdir()) == sorted([second.parent.name, kept.parent.name])


def test_shared_encoder_key_changes_with_the_source_and_the_level(tmp_path):
    pytest.importorskip("onnxruntime", reason='needs onnxruntime: pip install "bertembed[serve]"')
    source = tmp_path / "encoder.onnx"
    _tiny_encoder(source)
    key = memory.shared_encoder_key(source, "all")
    assert key == memory.shared_encoder_key(source, "all")
    assert key != memory.shared_encoder_key(source, "basic")
    os.utime(source, ns=(1, 1))
    assert key != memory.shared_encoder_key(source, "all")


def test_shared_encoder_refuses_an_unknown_level_and_reports_a_failed_child(tmp_path):
    pytest.importorskip("onnxruntime", reason='needs onnxruntime: pip install "bertembed[serve]"')
    source = tmp_path / "encoder.onnx"
    with pytest.raises(ValueError, match="graph_optimization"):
        memory.shared_encoder(source, tmp_path, graph_optimization="most")
    source.write_bytes(b"not a model")
    with pytest.raises(RuntimeError, match="writing the shared encoder failed"):
        memory.shared_encoder(source, tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").iterdir()]  # nothing half-written is left


def test_docstring_examples():
    import doctest

    result = doctest.testmod(memory, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps", encoding="utf-8") as fh:
        return {line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6}


@pytest.mark.skipif(not LINUX, reason="/proc/PID/maps is Linux's")
def test_served_workers_map_one_shared_encoder_and_answer_as_without_it(server, out_dir, encoder_cache, tmp_path):
    from service_helpers import serve

    source = str((out_dir / "encoder.onnx").resolve())
    entries = [p for p in encoder_cache.iterdir() if (p / memory.SOURCE_FILE).is_file()]
    entries = [p for p in entries if (p / memory.SOURCE_FILE).read_text(encoding="utf-8") == source]
    assert len(entries) == 1, entries  # one entry for this artifact, whatever the other tests served
    data = str((entries[0] / memory.SHARED_DATA).resolve())
    workers = server.workers()
    assert len(workers) == 2
    for pid in workers:
        assert data in _mapped_files(pid), pid  # the weights come from the one file, not the heap
    log = server.log()
    assert f"encoder: {entries[0] / memory.SHARED_FILE}" in log
    assert "objects frozen before the fork" in log
    texts = ["The shared encoder answers as the artifact's own.", "Zwei kurze Sätze.", "x"]
    shared = server.embed(texts)
    running = serve(out_dir, "own-encoder.log", workers=1, SERVICE_SHARED_ENCODER="0")
    own = next(running)
    try:
        assert "encoder:" not in own.log()
        np.testing.assert_array_equal(own.embed(texts), shared)
    finally:
        running.close()


def test_a_cache_that_cannot_be_written_leaves_the_artifacts_encoder(out_dir, tmp_path):
    from service_helpers import serve

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    running = serve(out_dir, "blocked-cache.log", workers=1, SERVICE_ENCODER_CACHE=str(blocked / "cache"))
    server = next(running)
    try:
        assert "the workers load their own copies of the encoder" in server.log()
        assert server.embed(["still served"]).shape == (1, 384)
    finally:
        running.close()
