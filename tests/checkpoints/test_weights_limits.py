"""Checkpoint reading against odd and hostile files: sniffing by structure, bounded reads, the pickle pre-scan.

``tests/checkpoints/test_hostile_checkpoints.py`` loads a large generated corpus in a
subprocess; these are the fast, in-process checks of each rule.
"""

from __future__ import annotations

import json
import os
import pickle
import struct

import numpy as np
import pytest
from helpers.weights import encode, state_dict, storage, tensor, write_safetensors, write_torch_zip

import bertembed
from bertembed import CheckpointError, UnsafeCheckpointError
from bertembed._checkpoints.errors import short
from bertembed._checkpoints.readers import ShardedWeights, open_weights, reading, sniff, torch_pickle
from bertembed._checkpoints.readers.files import looks_like_safetensors

RNG = np.random.default_rng(3)
TOK = RNG.standard_normal((16, 8)).astype(np.float32)


def _padded_safetensors(path, header_length):
    """A valid safetensors file whose header (padded with spaces) is `header_length` bytes long."""
    header = {"w": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, TOK.nbytes]}}
    text = json.dumps(header).encode()
    assert len(text) <= header_length
    path.write_bytes(struct.pack("<Q", header_length) + text + b" " * (header_length - len(text)) + TOK.tobytes())
    return path


def test_the_error_classes_are_public():
    assert issubclass(CheckpointError, ValueError)
    assert issubclass(UnsafeCheckpointError, CheckpointError)
    assert bertembed.CheckpointError.__module__ == "bertembed"
    assert pickle.loads(pickle.dumps(CheckpointError("x"))).args == ("x",)


@pytest.mark.parametrize("length", [0x80, 0x180, 0x1080])
def test_safetensors_whose_length_starts_like_a_pickle_loads(tmp_path, length):
    path = _padded_safetensors(tmp_path / "m.safetensors", length)
    assert path.read_bytes()[:1] == b"\x80"
    assert sniff(path) == "safetensors"
    np.testing.assert_array_equal(open_weights(path).array("w"), TOK)


def test_safetensors_with_ustar_at_257_loads(tmp_path):
    filler = "y" * (249 - len('{"__metadata__": {"x": "')) + "ustar"
    header = {"__metadata__": {"x": filler}, "w": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, TOK.nbytes]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path = tmp_path / "weights.bin"  # not even the usual suffix
    path.write_bytes(struct.pack("<Q", len(text)) + text + TOK.tobytes())
    assert path.read_bytes()[257:262] == b"ustar"
    np.testing.assert_array_equal(open_weights(path).array("w"), TOK)


def test_structure_not_signature():
    head = struct.pack("<Q", 0x04034B50) + b"{"
    assert head[:4] == b"PK\x03\x04"
    assert looks_like_safetensors(head, 8 + 0x04034B50)
    assert not looks_like_safetensors(head, 8 + 0x04034B50 - 1)  # does not fit
    assert not looks_like_safetensors(struct.pack("<Q", 16) + b"[", 100)


def _symlink(target, link) -> None:
    """os.symlink, or a skip where links cannot be made (Windows without the privilege)."""
    try:
        os.symlink(target, link)
    except (OSError, NotImplementedError) as exc:
        pytest.skip(f"cannot make a symbolic link here: {exc}")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs (Windows)")
def test_fifos_are_refused_not_read(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: a FIFO \(named pipe\), not a regular file"):
        open_weights(fifo)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero (Windows)")
def test_devices_are_refused_not_read(tmp_path):
    _symlink("/dev/zero", tmp_path / "config.json")
    write_safetensors(tmp_path / "w.safetensors", {"embeddings.word_embeddings.weight": ("F32", TOK)})
    with pytest.raises(CheckpointError, match=r"config\.json: a character device"):
        bertembed.BertEmbeddings.from_pretrained(tmp_path / "w.safetensors")


@pytest.mark.parametrize("case", ["directory", "loop"])
def test_windows_errors_get_the_documented_types(tmp_path, monkeypatch, case):
    """Windows reports a directory as PermissionError and a loop of links as WinError 1921."""
    target = tmp_path / "model.safetensors"
    if case == "directory":
        target.mkdir()
        error = PermissionError(13, "Permission denied", str(target))
    else:
        target.write_bytes(b"")
        error = OSError(22, "The name of the file cannot be resolved by the system", str(target))
        error.winerror = 1921  # type: ignore[attr-defined]

    def windows_opener(path, flags):
        raise error

    monkeypatch.setattr(reading, "_opener", windows_opener)
    if case == "directory":
        with pytest.raises(IsADirectoryError, match=r"model\.safetensors: is a directory"):
            reading.open_regular(target)
    else:
        with pytest.raises(CheckpointError, match=r"model\.safetensors: a loop of symbolic links"):
            reading.open_regular(target)


def test_loops_and_directories(tmp_path):
    _symlink("loop.safetensors", tmp_path / "loop.safetensors")
    with pytest.raises(CheckpointError, match=r"loop\.safetensors: a loop of symbolic links"):
        open_weights(tmp_path / "loop.safetensors")
    (tmp_path / "shard.safetensors").mkdir()
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "shard.safetensors"}}))
    with pytest.raises(IsADirectoryError, match=r"index\.json: tensor 'w' is in shard 'shard\.safetensors', .* dir"):
        ShardedWeights(index).array("w")
    index.write_text(json.dumps({"weight_map": {"w": "loop.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"index\.json: tensor 'w' is in shard 'loop\.safetensors'.*loop"):
        ShardedWeights(index).array("w")


def test_size_limits_name_the_limit(tmp_path, monkeypatch):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "x" * 200}}))
    monkeypatch.setattr(reading, "MAX_INDEX_BYTES", 100)
    monkeypatch.setattr("bertembed._checkpoints.readers.sharded.MAX_INDEX_BYTES", 100)
    limit = r"of 100 bytes \(bertembed\._checkpoints\.readers\.reading\.MAX_INDEX_BYTES\)"
    held = r"index\.json: the index file holds \d+ bytes, more than the limit "
    with pytest.raises(CheckpointError, match=held + limit):
        ShardedWeights(index)


def test_json_depth_limit(tmp_path):
    ok = tmp_path / "ok.index.json"
    nested = "[" * (reading.MAX_JSON_DEPTH - 1) + "]" * (reading.MAX_JSON_DEPTH - 1)
    ok.write_text('{"weight_map": {}, "x": ' + nested + "}")
    ShardedWeights(ok)
    deep = tmp_path / "deep.index.json"
    deep.write_text('{"weight_map": {}, "x": ' + "[" + nested + "]" + "}")
    with pytest.raises(CheckpointError, match=r"deep\.index\.json: nests JSON arrays/objects 65 deep"):
        ShardedWeights(deep)
    brackets_in_strings = tmp_path / "s.index.json"
    brackets_in_strings.write_text(json.dumps({"weight_map": {}, "x": "[[[" * 1000, "y": '\\"[[[' * 100}))
    ShardedWeights(brackets_in_strings)


def test_long_integers_and_duplicate_keys_in_json(tmp_path):
    index = tmp_path / "m.index.json"
    index.write_text('{"weight_map": {}, "n": ' + "9" * 5000 + "}")
    with pytest.raises(CheckpointError, match=r"m\.index\.json: holds an integer with too many digits") as info:
        ShardedWeights(index)
    assert "set_int_max_str_digits" not in str(info.value)
    header = (
        b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
        b'"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    )
    path = tmp_path / "d.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(CheckpointError, match=r"d\.safetensors: the header the key 'w' appears twice"):
        open_weights(path)


def test_short_repr_is_bounded():
    deep: tuple = ()
    for _ in range(5000):
        deep = (deep,)
    assert len(short(deep)) < 100
    assert short(10**5000) == "<an int of 16610 bits>"
    assert len(short("x" * 10**6)) < 100


def test_prescan_accepts_state_dicts_and_refuses_deep_nesting():
    items = {f"t{i}": tensor(storage(str(i), 4), (2, 2)) for i in range(50)}
    torch_pickle.prescan(encode(state_dict(items)), "x.bin")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        torch_pickle.prescan(pickle.dumps({"a": [1, (2, {"b": 3})], "c": "d"}, protocol=protocol), "x.bin")
    nested: list = []
    for _ in range(torch_pickle.MAX_PICKLE_DEPTH - 2):
        nested = [nested]
    torch_pickle.prescan(pickle.dumps({"k": nested}, protocol=2), "x.bin")
    key = b"\x80\x02}" + b")" + b"\x85" * 1_000_000 + b"K\x01s."  # a 1,000,000-deep tuple as a dict key
    with pytest.raises(CheckpointError, match=r"x\.bin: the pickle nests objects more than 100 deep"):
        torch_pickle.prescan(key, "x.bin")
    shared = b"\x80\x02]q\x00" + b"h\x00\x85q\x00" * 200 + b"."  # depth grows through the memo
    with pytest.raises(CheckpointError, match="more than 100 deep"):
        torch_pickle.prescan(shared, "x.bin")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x80\x02}", "STOP"),
        (b"\x80\x02h\x05.", "memo entry 5"),
        (b"\x80\x02s.", "too few items"),
        (b"\x80\x02]e.", "without a MARK"),
        (b"\x80\x02\xff.", "not a valid state dict pickle"),
    ],
)
def test_prescan_refuses_malformed_opcodes(data, match):
    with pytest.raises(CheckpointError, match=r"x\.bin: .*" + match):
        torch_pickle.prescan(data, "x.bin")


def test_zip_member_limits(tmp_path):
    s = storage("0", 4)
    pkl = encode(state_dict({"w": tensor(s, (2, 2))}))
    big = write_torch_zip(tmp_path / "b.bin", pkl, {"0": TOK[:1, :4].tobytes()}, byteorder=b"little" * 10)
    with pytest.raises(
        CheckpointError,
        match=r"b\.bin: zip member 'archive/byteorder' holds 60 bytes, more than "
        r"the limit of 16 bytes",
    ):
        open_weights(big)


def test_config_values_are_checked_where_read(tmp_path):
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "embeddings.word_embeddings.weight": ("F32", TOK),
            "embeddings.position_embeddings.weight": ("F32", TOK[:6]),
            "embeddings.token_type_embeddings.weight": ("F32", TOK[:1]),
            "embeddings.LayerNorm.weight": ("F32", np.ones(8, np.float32)),
            "embeddings.LayerNorm.bias": ("F32", np.zeros(8, np.float32)),
        },
    )
    config = tmp_path / "config.json"
    for values, match in (
        ({"layer_norm_eps": 0}, r"layer_norm_eps must be a finite number > 0, got 0"),
        ({"layer_norm_eps": 10**400}, r"layer_norm_eps must be a finite number > 0, got <an int of 1329 bits>"),
        ({"model_type": "roberta", "pad_token_id": 2**63}, r"pad_token_id is 9223372036854775808, more than"),
        (
            {"model_type": "roberta", "pad_token_id": 6},
            r"padding id 6 \(pad_token_id\) is not a row of the "
            r"position table 'embeddings.position_embeddings.weight' "
            r"\(6 rows\)",
        ),
        ({"hidden_size": 2**40}, r"hidden_size is 1099511627776, more than the largest supported"),
    ):
        config.write_text(json.dumps({"model_type": "bert", "hidden_size": 8, **values}))
        with pytest.raises(CheckpointError, match=r"config\.json: .*" + match):
            bertembed.BertEmbeddings.from_pretrained(tmp_path)
    config.write_text(json.dumps({"model_type": "roberta", "hidden_size": 8, "pad_token_id": 1}))
    bertembed.BertEmbeddings.from_pretrained(tmp_path)


def test_a_long_shard_name_gives_a_bounded_message(tmp_path):
    """(Found by the index fuzz target: the OS error quoted the whole path.)"""
    index = tmp_path / "model.safetensors.index.json"
    for name, match in (
        ("9" * 2000 + ".safetensors", r"must be a shard file name, got '9+\.\.\.9+"),
        ("9" * 1000 + ".safetensors", r"which cannot be opened: File name too long"),
    ):
        index.write_text(json.dumps({"weight_map": {"w": name}}))
        with pytest.raises(CheckpointError, match=r"index\.json: .*" + match) as info:
            ShardedWeights(index).array("w")
        assert len(str(info.value)) < 500


# ---------------------------------------------------------------- what parsing may cost


def _json_values(value) -> tuple[int, int, int]:
    """(values + empty arrays and objects, keys, depth) of a parsed JSON value: what json_shape counts."""
    if isinstance(value, dict):
        inner = [_json_values(v) for v in value.values()]
    elif isinstance(value, list):
        inner = [_json_values(v) for v in value]
    else:
        return 1, 0, 0
    values = 1 + sum(v for v, _, _ in inner) + (not inner)
    keys = sum(k for _, k, _ in inner) + (len(value) if isinstance(value, dict) else 0)
    return values, keys, 1 + max((d for _, _, d in inner), default=0)


def _strings(value):
    """Every string of a parsed JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _random_json(rng, depth=0):
    pieces = ['"', "\\", '\\"', "[", "]", "{", "}", ",", ":", "a", "\u00e9", "\u4e2d", "\U0001f600", " "]
    kind = rng.integers(0, 6 if depth < 5 else 3)
    if kind == 0:
        return "".join(rng.choice(pieces, size=rng.integers(0, 6)))
    if kind == 1:
        return int(rng.integers(-5, 10**6))
    if kind == 2:
        return [None, True, 1.5][rng.integers(0, 3)]
    if kind in (3, 4):
        return [_random_json(rng, depth + 1) for _ in range(rng.integers(0, 4))]
    return {_random_json_key(rng, pieces): _random_json(rng, depth + 1) for _ in range(rng.integers(0, 4))}


def _random_json_key(rng, pieces):
    return "".join(rng.choice(pieces, size=rng.integers(0, 5)))


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 20])
def test_json_shape_counts_what_the_parse_builds(monkeypatch, chunk):
    """Depth, values (empty arrays and objects counted twice), keys and decoded size, on the bytes alone."""
    monkeypatch.setattr(reading, "_SCAN_CHUNK", chunk)  # (chunk ends inside strings, escapes and characters)
    rng = np.random.default_rng(chunk)
    for _ in range(150):
        value = _random_json(rng)
        text = json.dumps(value, ensure_ascii=bool(rng.integers(0, 2)), indent=[None, 1][rng.integers(0, 2)])
        shape = reading.json_shape(text.encode())
        values, keys, depth = _json_values(value)
        assert (shape.depth, shape.values, shape.keys) == (depth, values, keys), text
        widest = max(map(ord, text + "".join(_strings(value))), default=0)  # (ensure_ascii writes \u escapes)
        assert (shape.chars, shape.char_bytes) == (len(text), 4 if widest > 0xFFFF else 2 if widest > 0xFF else 1)
        assert shape.scanned == len(text.encode())


def test_json_shape_stops_at_the_limits(monkeypatch):
    monkeypatch.setattr(reading, "_SCAN_CHUNK", 64)
    text = b"[" + b"0," * 10_000 + b"0]"
    shape = reading.json_shape(text, max_values=100)
    assert 100 < shape.values < 200 and shape.scanned < len(text) // 10
    assert reading.json_shape(text).values == 10_002
    deep = reading.json_shape(b"[" * 1000 + b"]" * 1000)
    assert deep.depth > reading.MAX_JSON_DEPTH and deep.scanned < 1000


def test_parse_json_gives_back_the_bytes_it_decoded():
    raw = bytearray(b'{"a": [1, 2]}')
    limits = {"max_bytes": 100, "bytes_name": "B", "max_values": 100, "values_name": "V"}
    assert reading.parse_json(raw, "x.json", **limits) == {"a": [1, 2]}
    assert raw == b""
    assert reading.parse_json(b'{"a": 1}', "x.json", **limits) == {"a": 1}  # (bytes are left as they are)
    with pytest.raises(CheckpointError, match=r"x\.json: the key 'a' appears twice"):
        reading.parse_json(bytearray(b'{"a": {"b": 1, "c": 2}, "a": 3}'), "x.json", **limits)


def _header_file(path, text: bytes, data: bytes = TOK.tobytes()):
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _header(entries: int = 0) -> bytes:
    zero = ",".join(f'"z{i}": {{"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}' for i in range(entries))
    real = f'"w": {{"dtype": "F32", "shape": [16, 8], "data_offsets": [0, {TOK.nbytes}]}}'
    return ("{" + real + ("," + zero if zero else "") + "}").encode()


def test_a_header_over_its_value_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr("bertembed._checkpoints.readers.safetensors.MAX_HEADER_VALUES", 100)
    ok = _header_file(tmp_path / "ok.safetensors", _header(10))  # 9 values, then 7 per zero-size tensor
    assert len(open_weights(ok).keys()) == 11
    many = _header_file(tmp_path / "many.safetensors", _header(14))
    with pytest.raises(
        CheckpointError,
        match=r"many\.safetensors: the header holds 107 JSON values \(strings, numbers, arrays and objects; a "
        r"safetensors header holds 8 per tensor\), more than the limit of 100 "
        r"\(bertembed\._checkpoints\.readers\.reading\.MAX_HEADER_VALUES\): refusing to parse it",
    ):
        open_weights(many)


def test_an_index_or_config_over_its_value_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("bertembed._checkpoints.readers.sharded.MAX_INDEX_VALUES", 50)
    monkeypatch.setattr("bertembed._checkpoints.load.MAX_CONFIG_VALUES", 50)
    write_safetensors(tmp_path / "s.safetensors", {"embeddings.word_embeddings.weight": ("F32", TOK)})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {f"t{i}": "s.safetensors" for i in range(60)}}))
    with pytest.raises(CheckpointError, match=r"index\.json: holds 62 JSON values .*one per tensor\), more than the "):
        ShardedWeights(index)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "bert", "id2label": {str(i): f"L{i}" for i in range(60)}}))
    with pytest.raises(CheckpointError, match=r"config\.json: holds 63 JSON values .* \(bertembed\._checkpoints\.re"):
        bertembed.BertEmbeddings.from_pretrained(tmp_path / "s.safetensors")


def test_text_that_python_stores_wider_than_the_limit_is_refused(tmp_path, monkeypatch):
    """One character beyond U+FFFF makes CPython store every character of a str in 4 bytes."""
    monkeypatch.setattr("bertembed._checkpoints.readers.safetensors.MAX_HEADER_BYTES", 1000)
    real = _header()
    for name, char, width in (
        ("bmp", "\u0101".encode(), 2),
        ("astral", "\U0001f600".encode(), 4),
        ("bmp-escaped", b"\\u0101", 2),
        ("astral-escaped", b"\\ud83d\\ude00", 4),
    ):
        text = real[:-1] + b', "__metadata__": {"x": "' + char + b"y" * 600 + b'"}}'
        path = _header_file(tmp_path / f"{name}.safetensors", text)
        with pytest.raises(
            CheckpointError,
            match=rf"{name}\.safetensors: the header decodes to \d+ characters, which Python would store in "
            rf"{width} bytes each .*more than the limit of 1000 bytes \(bertembed\._checkpoints\.readers\.reading\."
            r"MAX_HEADER_BYTES",
        ):
            open_weights(path)
        _header_file(path, text.replace(char, b"e"))
        assert open_weights(path).keys() == ["w"]


def test_a_safetensors_file_that_starts_like_a_zip_is_refused_as_safetensors(tmp_path):
    """A header length of 0x04034b50 (PK\\x03\\x04) is over MAX_HEADER_BYTES: refused for that, not read as a zip."""
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", 0x04034B50) + b"{")
        fh.truncate(8 + 0x04034B50)  # (a hole: no disk space)
    assert 0x04034B50 > reading.MAX_HEADER_BYTES
    with pytest.raises(
        CheckpointError,
        match=r"model\.safetensors: the safetensors header holds 67324752 bytes, more than the limit of "
        r"50331648 bytes \(bertembed\._checkpoints\.readers\.reading\.MAX_HEADER_BYTES\)",
    ):
        open_weights(path)


def test_a_large_real_shaped_checkpoint_still_loads(tmp_path):
    """50,000 tensors named and shaped as in a large model (their data a hole in the file), beside a BERT's tables."""
    tables = {
        "embeddings.word_embeddings.weight": TOK,
        "embeddings.position_embeddings.weight": TOK[:12],
        "embeddings.token_type_embeddings.weight": TOK[:2],
        "embeddings.LayerNorm.weight": np.ones(8, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(8, np.float32),
    }
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, arr in tables.items():
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [at, at + arr.nbytes]}
        at += arr.nbytes
    for i in range(50_000):
        name = f"model.layers.{i // 800}.mlp.experts.{i % 800 // 4}.{('gate', 'up', 'down', 'bias')[i % 4]}_proj.weight"
        shape = [64] if i % 4 == 3 else [64, 128]
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + size]}
        at += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with open(tmp_path / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(a.tobytes() for a in tables.values()))
        fh.truncate(8 + len(text) + at)
    weights = open_weights(tmp_path / "model.safetensors")
    assert len(weights.keys()) == 50_005
    assert weights.info("model.layers.62.mlp.experts.99.bias_proj.weight") == ("BF16", (64,))
    layer = bertembed.BertEmbeddings.from_pretrained(tmp_path)
    assert layer(np.array([[0, 1, 2]])).shape == (1, 3, 8)


def test_a_large_index_loads_and_checks_each_shard_name_once(tmp_path, monkeypatch):
    write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors", {"embeddings.word_embeddings.weight": ("F32", TOK)}
    )
    weight_map = {"embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors"}
    weight_map.update(
        {f"model.layers.{i // 100}.mlp.{i % 100}.weight": "model-00002-of-00002.safetensors" for i in range(100_000)}
    )
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}, indent=2))
    checked = []
    original = ShardedWeights._shard_name
    monkeypatch.setattr(ShardedWeights, "_shard_name", lambda self, t, f: checked.append(f) or original(self, t, f))
    weights = ShardedWeights(index)
    assert len(weights.keys()) == 100_001
    assert sorted(checked) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    np.testing.assert_array_equal(weights.array("embeddings.word_embeddings.weight"), TOK)


def test_the_pickle_opcode_and_zip_member_limits(tmp_path, monkeypatch):
    items = {f"t{i}": tensor(storage(str(i), 4), (2, 2)) for i in range(10)}
    data = encode(state_dict(items))
    torch_pickle.prescan(data, "x.bin")
    monkeypatch.setattr(torch_pickle, "MAX_PICKLE_OPCODES", 100)
    with pytest.raises(
        CheckpointError,
        match=r"x\.bin: the pickle holds 101 opcodes or more \(stopped at byte \d+; a state dict's holds 32 per "
        r"tensor\), more than the limit of 100 \(bertembed\._checkpoints\.readers\.reading\.MAX_PICKLE_OPCODES\)",
    ):
        torch_pickle.prescan(data, "x.bin")
    monkeypatch.setattr("bertembed._checkpoints.readers.torch_zip.MAX_ZIP_MEMBERS", 12)
    storages = {str(i): TOK[:1, :4].tobytes() for i in range(10)}
    path = write_torch_zip(tmp_path / "m.bin", encode(state_dict({"w": tensor(storage("0", 4), (2, 2))})), storages)
    with pytest.raises(CheckpointError, match=r"m\.bin: the zip archive lists 13 members, more than the limit of 12"):
        open_weights(path)
