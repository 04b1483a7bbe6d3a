"""bertembed._checkpoints.readers.safetensors: strict header validation and mapped tensors.

Files are written by ``safetensors.numpy.save_file`` where it can (F32, F64,
F16, integers) and by hand otherwise (BF16, corrupt files); the values are
compared with the safetensors package's own reader, and with
``safetensors.torch`` for BF16 when torch is installed.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from helpers.extras import needs
from helpers.weights import assert_mapped, write_safetensors

from bertembed._checkpoints.readers import SafetensorsFile, TensorInfo, TensorSource

st_numpy = needs("safetensors.numpy", "hf")

V, H = 50, 8
TOK = "embeddings.word_embeddings.weight"


def _tensors(dtype=np.float32):
    rng = np.random.default_rng(0)
    return {
        TOK: rng.standard_normal((V, H)).astype(dtype),
        "embeddings.LayerNorm.weight": rng.standard_normal(H).astype(dtype),
        "embeddings.position_ids": np.arange(16, dtype=np.int64).reshape(1, 16),
        "scalar": np.array(2.5, dtype=dtype),
        "empty": np.zeros((0, H), dtype=dtype),
    }


def _saved(tmp_path, dtype=np.float32):
    path = tmp_path / "model.safetensors"
    st_numpy.save_file(_tensors(dtype), str(path))
    return path


# ---------------------------------------------------------------- interface


def test_keys_info_contains_files(tmp_path):
    path = _saved(tmp_path)
    st = SafetensorsFile(path)
    assert isinstance(st, TensorSource)
    assert sorted(st.keys()) == sorted(_tensors())
    assert TOK in st and "nope" not in st and 3 not in st
    assert st.info(TOK) == TensorInfo("F32", (V, H))
    assert st.info("embeddings.position_ids") == ("I64", (1, 16))
    assert st.info("scalar") == ("F32", ())
    assert st.files() == [path]
    assert st.path == path


@pytest.mark.parametrize(("dtype", "name"), [(np.float32, "F32"), (np.float64, "F64"), (np.float16, "F16")])
def test_arrays_equal_safetensors_own_reader(tmp_path, dtype, name):
    path = _saved(tmp_path, dtype)
    theirs = st_numpy.load_file(str(path))
    st = SafetensorsFile(path)
    for key in (TOK, "embeddings.LayerNorm.weight", "scalar", "empty"):
        arr = st.array(key)
        assert st.info(key).dtype == name
        assert arr.dtype == np.dtype(dtype)  # stored precision, never widened
        assert arr.dtype.isnative
        np.testing.assert_array_equal(arr, theirs[key])
        assert arr.shape == theirs[key].shape
        assert not arr.flags.writeable


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_arrays_are_maps_of_the_file(tmp_path, dtype):
    path = _saved(tmp_path, dtype)
    st = SafetensorsFile(path)
    arr = st.array(TOK)
    assert isinstance(arr, np.memmap)
    assert_mapped(arr, path)
    with pytest.raises(ValueError, match="read-only"):
        arr[0, 0] = 1
    # The array is the file: rewrite row 7 on disk and the array shows it.
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    begin = json.loads(path.read_bytes()[8 : 8 + n])[TOK]["data_offsets"][0]
    row = np.full(H, 3.0, dtype=dtype)
    with open(path, "r+b") as fh:
        fh.seek(8 + n + begin + 7 * row.nbytes)
        fh.write(row.tobytes())
    np.testing.assert_array_equal(arr[7], row)


def test_bfloat16_is_raw_bits_mapped(tmp_path):
    values = np.random.default_rng(1).standard_normal((V, H)).astype(np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    path = write_safetensors(tmp_path / "bf16.safetensors", {TOK: ("BF16", bits)})
    st = SafetensorsFile(path)
    arr = st.array(TOK)
    assert st.info(TOK) == ("BF16", (V, H))
    assert arr.dtype == np.uint16
    np.testing.assert_array_equal(arr, bits)
    assert_mapped(arr, path)


def test_bfloat16_equals_safetensors_torch(tmp_path):
    torch = needs("torch", "peers")
    st_torch = needs("safetensors.torch", "peers")
    t = torch.randn(V, H).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    st_torch.save_file({TOK: t}, str(path))
    theirs = st_torch.load_file(str(path))[TOK].view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(SafetensorsFile(path).array(TOK), theirs)


def test_unaligned_tensor_is_an_aligned_copy(tmp_path):
    # One byte before a float32 tensor: valid safetensors, never written by
    # the package (its writer aligns), so written by hand; the tensor cannot
    # be an aligned view, so it is copied.
    values = np.arange(6, dtype="<f4").reshape(2, 3)
    header = {
        "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "b": {"dtype": "F32", "shape": [2, 3], "data_offsets": [1, 1 + values.nbytes]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\x07" + values.tobytes())
    arr = SafetensorsFile(path).array("b")
    assert arr.flags.aligned and not arr.flags.writeable
    np.testing.assert_array_equal(arr, values)


# ---------------------------------------------------------------- errors


def test_missing_tensor_and_non_float_dtype(tmp_path):
    path = _saved(tmp_path)
    st = SafetensorsFile(path)
    with pytest.raises(KeyError, match=r"model\.safetensors: no tensor 'nope'"):
        st.array("nope")
    with pytest.raises(KeyError, match=r"model\.safetensors: no tensor 'nope'"):
        st.info("nope")
    with pytest.raises(TypeError, match=r"model\.safetensors: tensor 'embeddings\.position_ids' has dtype I64"):
        st.array("embeddings.position_ids")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.safetensors: no such file"):
        SafetensorsFile(tmp_path / "nope.safetensors")


def test_truncated_file(tmp_path):
    weights = _saved(tmp_path)
    data = weights.read_bytes()
    weights.write_bytes(data[:-5])
    with pytest.raises(ValueError, match=r"model\.safetensors: truncated: the header describes"):
        SafetensorsFile(weights)
    weights.write_bytes(data[:5])
    with pytest.raises(ValueError, match=r"model\.safetensors: truncated: 5 bytes, too short"):
        SafetensorsFile(weights)
    weights.write_bytes(data[:100])
    with pytest.raises(ValueError, match=r"model\.safetensors: header length \d+ does not fit"):
        SafetensorsFile(weights)
    weights.write_bytes(b"")
    with pytest.raises(ValueError, match=r"truncated: 0 bytes"):
        SafetensorsFile(weights)


def test_trailing_bytes(tmp_path):
    weights = _saved(tmp_path)
    with open(weights, "ab") as fh:
        fh.write(b"\0" * 4)
    with pytest.raises(ValueError, match=r"model\.safetensors: 4 bytes after the last tensor"):
        SafetensorsFile(weights)


def _one_tensor_header(**entry):
    base = {"dtype": "F32", "shape": [V, H], "data_offsets": [0, V * H * 4]}
    return {TOK: {**base, **entry}}


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (b"{not json}", "the header is not valid JSON"),
        (b"\xff\xfe{}", "the header is not valid JSON"),
        (b"[1, 2, 3]", "the header is a JSON list, not an object"),
        (_one_tensor_header(shape="8"), "malformed header entry for 'embeddings.word_embeddings"),
        (_one_tensor_header(data_offsets=[0]), "malformed header entry"),
        (_one_tensor_header(data_offsets=[10, 0]), "malformed header entry"),
        (_one_tensor_header(shape=[V, -H]), "malformed header entry"),
        (_one_tensor_header(shape=[V, True]), "malformed header entry"),
        ({TOK: [1, 2]}, "malformed header entry"),
        (_one_tensor_header(shape=[V, H + 1]), r"needs 1800 bytes, its data_offsets \[0, 1600\] span 1600"),
        (_one_tensor_header(data_offsets=[8, V * H * 4 + 8]), "starts at data byte 8, expected 0"),
    ],
)
def test_malformed_header(tmp_path, header, match):
    data = b"\0" * (V * H * 4)
    path = tmp_path / "bad.safetensors"
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    with pytest.raises(ValueError, match=r"bad\.safetensors: .*" + match):
        SafetensorsFile(path)


def test_overlapping_tensors(tmp_path):
    entry = {"dtype": "F32", "shape": [V, H], "data_offsets": [0, V * H * 4]}
    raw = json.dumps({TOK: entry, "other": entry}).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (V * H * 4))
    with pytest.raises(ValueError, match=r"tensor '(other|embeddings\.\S+)' starts at data byte 0"):
        SafetensorsFile(path)


def test_metadata_is_not_a_tensor(tmp_path):
    path = tmp_path / "m.safetensors"
    st_numpy.save_file({TOK: np.ones((2, 2), np.float32)}, str(path), metadata={"format": "pt"})
    assert SafetensorsFile(path).keys() == [TOK]
