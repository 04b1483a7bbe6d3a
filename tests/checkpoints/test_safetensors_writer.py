"""bertembed._checkpoints.safetensors_writer: the one writer of safetensors files.

Every file it writes is valid safetensors (read back by the package's reader
and by the safetensors package), every tensor starts at a multiple of its
item size, and a file is replaced atomically: written to a temporary file
beside it, fsynced, renamed; an error leaves the old file and no debris.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.extras import needs

from bertembed import BertEmbeddings
from bertembed._checkpoints import safetensors_writer
from bertembed._checkpoints.readers import SafetensorsFile
from bertembed._checkpoints.readers.base import ITEMSIZE


def _mixed(rng) -> list[tuple[str, str, np.ndarray]]:
    """Tensors of every item size, in an order that would misalign them if written as given."""
    return [
        ("a_int8", "I8", rng.integers(-128, 128, (3, 5)).astype(np.int8)),
        ("b_half", "F16", rng.standard_normal((7,)).astype(np.float16)),
        ("c_float", "F32", rng.standard_normal((3, 3)).astype(np.float32)),
        ("d_bits", "BF16", rng.integers(0, 2**16, (5,)).astype(np.uint16)),
        ("e_double", "F64", rng.standard_normal((2, 3))),
        ("f_ids", "I64", np.arange(3, dtype=np.int64)),
        ("g_empty", "F32", np.zeros((0, 4), np.float32)),
    ]


def _header(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return 8 + n, json.loads(raw[8 : 8 + n])


def test_every_tensor_starts_at_a_multiple_of_its_item_size(tmp_path, rng):
    tensors = _mixed(rng)
    path = safetensors_writer.write_safetensors(tmp_path / "w.safetensors", tensors, {"format": "pt"})
    start, header = _header(path)
    assert start % 8 == 0
    assert header.pop("__metadata__") == {"format": "pt"}
    for name, code, _ in tensors:
        begin = header[name]["data_offsets"][0]
        assert header[name]["dtype"] == code
        assert (start + begin) % ITEMSIZE[code] == 0, name
    st = SafetensorsFile(path)  # the package's strict reader: no hole, no overlap, sizes right
    for name, code, arr in tensors:
        if code in ("F32", "F64", "F16", "BF16"):
            np.testing.assert_array_equal(st.array(name), arr)


def test_the_safetensors_package_reads_it_back(tmp_path, rng):
    st_numpy = needs("safetensors.numpy", "hf")
    tensors = [t for t in _mixed(rng) if t[1] != "BF16"]  # (numpy has no bfloat16)
    path = safetensors_writer.write_safetensors(tmp_path / "w.safetensors", tensors)
    back = st_numpy.load_file(str(path))
    assert sorted(back) == sorted(name for name, _, _ in tensors)
    for name, _, arr in tensors:
        np.testing.assert_array_equal(back[name], arr)
        assert back[name].dtype == arr.dtype


def test_big_endian_arrays_are_stored_little_endian(tmp_path):
    values = np.arange(6, dtype=">f4").reshape(2, 3)
    path = safetensors_writer.write_safetensors(tmp_path / "w.safetensors", [("x", "F32", values)])
    np.testing.assert_array_equal(SafetensorsFile(path).array("x"), values)


@pytest.mark.parametrize(
    "tensors, match",
    [
        ([("x", "F32", np.zeros(2, np.float64))], r"tensor 'x' of dtype float64 cannot be stored as 'F32'"),
        ([("x", "Q7", np.zeros(2, np.float32))], r"cannot be stored as 'Q7'"),
        ([("x", "F32", np.zeros(2, np.float32))] * 2, r"tensor name 'x' is given twice"),
        ([("__metadata__", "F32", np.zeros(2, np.float32))], r"tensor name '__metadata__' is reserved"),
    ],
)
def test_tensors_that_cannot_be_written_are_refused_before_anything_is(tmp_path, tensors, match):
    with pytest.raises(ValueError, match=match):
        safetensors_writer.write_safetensors(tmp_path / "w.safetensors", tensors)
    assert list(tmp_path.iterdir()) == []


def test_the_file_is_fsynced_then_renamed_over_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"old")
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(
        os, "replace", lambda a, b: events.append(("replace", Path(a).parent, Path(b))) or real_replace(a, b)
    )
    safetensors_writer.write_safetensors(path, [("x", "F32", np.ones(4, np.float32))])
    replaced = [e for e in events if e != "fsync"]
    assert replaced == [("replace", tmp_path, path)]  # from a temporary file in the same directory
    assert events.index("fsync") < events.index(replaced[0])
    np.testing.assert_array_equal(SafetensorsFile(path).array("x"), np.ones(4, np.float32))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_an_error_while_writing_leaves_the_old_file_and_no_debris(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"old")

    def fail(done, total, label):
        raise KeyboardInterrupt  # say, the user pressed ^C in the middle

    with pytest.raises(KeyboardInterrupt):
        safetensors_writer.write_safetensors(path, [("x", "F32", np.ones(4, np.float32))], progress=fail)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_progress_reports_every_byte(tmp_path):
    seen = []
    arr = np.ones((3, 5), np.float32)
    safetensors_writer.write_safetensors(
        tmp_path / "w.safetensors", [("x", "F32", arr)], progress=lambda *a: seen.append(a)
    )
    assert seen[-1] == (arr.nbytes, arr.nbytes, "writing w.safetensors")
    seen.clear()
    safetensors_writer.write_safetensors(tmp_path / "e.safetensors", [], progress=lambda *a: seen.append(a))
    assert seen == [(0, 0, "writing e.safetensors")]


def test_save_pretrained_writes_through_it(tmp_path, rng, monkeypatch):
    written = []
    real = safetensors_writer.write_safetensors

    def spy(path, tensors, *args, **kwargs):
        written.append((Path(path).name, [(name, code) for name, code, _ in tensors]))
        return real(path, tensors, *args, **kwargs)

    monkeypatch.setattr("bertembed._checkpoints.save.write_safetensors", spy)
    layer = BertEmbeddings(
        rng.standard_normal((20, 8)).astype(np.float32), rng.standard_normal((6, 8)), table_dtype="int8"
    )
    layer.save_pretrained(tmp_path)
    assert written == [
        (
            "model.safetensors",
            [("token_embeddings", "I8"), ("token_scale_offset", "F32"), ("position_embeddings", "F64")],
        )
    ]


def test_the_onnx_splitter_writes_through_it(tmp_path, rng):
    needs("onnx", "onnx")
    from bertembed._onnx import layer

    tensors = {"embeddings.word_embeddings.weight": rng.standard_normal((5, 3)).astype(np.float16)}
    tensors["embeddings.LayerNorm.weight"] = np.ones(3, np.float64)
    layer.write(tmp_path, tensors, {"model_type": "bert"})
    start, header = _header(tmp_path / "model.safetensors")
    assert start % 8 == 0 and header["embeddings.LayerNorm.weight"]["data_offsets"][0] == 0  # float64 first
    assert json.loads((tmp_path / "config.json").read_text()) == {"model_type": "bert"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
