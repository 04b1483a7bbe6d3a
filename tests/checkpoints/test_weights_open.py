"""bertembed._checkpoints.readers.open_weights / find_weights: the right reader for a file or a model directory."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers.weights import encode, state_dict, storage, tensor, write_safetensors, write_torch_zip

from bertembed._checkpoints.readers import (
    WEIGHTS_NAMES,
    SafetensorsFile,
    ShardedWeights,
    TorchZipFile,
    find_weights,
    open_weights,
)
from bertembed._checkpoints.readers.files import sniff

A = np.arange(6, dtype="<f4").reshape(2, 3)


def _safetensors(path):
    return write_safetensors(path, {"a": ("F32", A)})


def _torch(path):
    return write_torch_zip(path, encode(state_dict({"a": tensor(storage("0", 6), (2, 3))})), {"0": A.tobytes()})


def _index(path, shard="s.safetensors"):
    _safetensors(path.parent / shard)
    path.write_text(json.dumps({"weight_map": {"a": shard}}))
    return path


MAKERS = {
    "model.safetensors": _safetensors,
    "model.safetensors.index.json": _index,
    "pytorch_model.bin": _torch,
    "pytorch_model.bin.index.json": _index,
}
READERS = {
    "model.safetensors": SafetensorsFile,
    "model.safetensors.index.json": ShardedWeights,
    "pytorch_model.bin": TorchZipFile,
    "pytorch_model.bin.index.json": ShardedWeights,
}


@pytest.mark.parametrize("first", range(len(WEIGHTS_NAMES)))
def test_find_weights_order(tmp_path, first):
    assert WEIGHTS_NAMES == tuple(MAKERS)
    for name in WEIGHTS_NAMES[first:]:
        MAKERS[name](tmp_path / name)
    src = find_weights(tmp_path)
    assert type(src) is READERS[WEIGHTS_NAMES[first]]
    assert src.path == tmp_path / WEIGHTS_NAMES[first]
    np.testing.assert_array_equal(src.array("a"), A)


def test_find_weights_errors(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    match = (
        r"no weights file \(looked for model\.safetensors, model\.safetensors\.index\.json, "
        r"pytorch_model\.bin, pytorch_model\.bin\.index\.json\)"
    )
    with pytest.raises(FileNotFoundError, match=match):
        find_weights(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"nope: no such directory"):
        find_weights(tmp_path / "nope")
    with pytest.raises(NotADirectoryError, match=r"config\.json: not a directory"):
        find_weights(tmp_path / "config.json")


@pytest.mark.parametrize(
    ("maker", "name", "reader"),
    [
        (_safetensors, "weights.safetensors", SafetensorsFile),
        (_safetensors, "weights.bin", SafetensorsFile),  # content decides, not the name
        (_torch, "weights.pt", TorchZipFile),
        (_torch, "weights.pth", TorchZipFile),
        (_torch, "model.safetensors", TorchZipFile),
        (_index, "weights.index.json", ShardedWeights),
        (_index, "index.txt", ShardedWeights),
    ],
)
def test_open_weights_by_content(tmp_path, maker, name, reader):
    src = open_weights(maker(tmp_path / name))
    assert type(src) is reader
    np.testing.assert_array_equal(src.array("a"), A)


def test_open_weights_str_and_home_paths(tmp_path, monkeypatch):
    path = _safetensors(tmp_path / "w.safetensors")
    assert open_weights(str(path)).path == path
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    assert open_weights("~/w.safetensors").path == path


@pytest.mark.parametrize(
    ("content", "name", "error", "match"),
    [
        (b"", "w.bin", ValueError, r"w\.bin: not a weights file bertembed can read"),
        (b"hello", "w.pt", ValueError, r"w\.pt: not a weights file bertembed can read"),
        (b"", "w.safetensors", ValueError, r"w\.safetensors: truncated: 0 bytes"),
        (b"\x80\x02}q\x00.", "w.bin", ValueError, r"w\.bin: the legacy torch\.save format"),
        (b"[1, 2]", "w.json", ValueError, r"w\.json: expected a JSON object, got a list"),
    ],
)
def test_open_weights_errors(tmp_path, content, name, error, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(error, match=match):
        open_weights(path)


def test_open_weights_missing_or_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.bin: no such file"):
        open_weights(tmp_path / "nope.bin")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        open_weights(tmp_path)


def test_sniff(tmp_path):
    assert sniff(_safetensors(tmp_path / "a")) == "safetensors"
    assert sniff(_torch(tmp_path / "b")) == "torch zip"
    assert sniff(_index(tmp_path / "c")) == "index"
    legacy = tmp_path / "d"
    legacy.write_bytes(b"\x80\x02.")
    assert sniff(legacy) == "legacy torch"
    shutil.copy(legacy, tmp_path / "e.safetensors")
    assert sniff(tmp_path / "e.safetensors") == "legacy torch"  # content first
