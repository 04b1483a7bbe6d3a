"""bertembed._checkpoints.readers.sharded: ``*.index.json`` checkpoints, each shard opened only when needed.

Shards are written by hand (``helpers.weights``) for the layout and error
tests; the ``heavy`` tests compare every tensor of checkpoints sharded by
transformers' ``save_pretrained(max_shard_size=...)`` (and ``pytorch_model.bin``
shards written the way transformers 4 wrote them) with safetensors' and
torch's own readers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.extras import needs
from helpers.weights import (
    assert_mapped,
    encode,
    state_dict,
    storage,
    tensor,
    tiny_bert,
    write_safetensors,
    write_torch_zip,
)

from bertembed._checkpoints.readers import ShardedWeights, TensorSource, UnsafeCheckpointError, open_weights

RNG = np.random.default_rng(3)
TOK = "embeddings.word_embeddings.weight"
POS = "embeddings.position_embeddings.weight"
DENSE = "encoder.layer.0.attention.self.query.weight"
TABLES = {
    TOK: RNG.standard_normal((50, 8)).astype("<f4"),
    POS: RNG.standard_normal((16, 8)).astype("<f4"),
    DENSE: RNG.standard_normal((8, 8)).astype("<f4"),
}
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def _index(directory, weight_map, name="model.safetensors.index.json"):
    path = directory / name
    path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return path


def _sharded(tmp_path):
    write_safetensors(tmp_path / SHARD1, {TOK: ("F32", TABLES[TOK]), POS: ("F32", TABLES[POS])})
    write_safetensors(tmp_path / SHARD2, {DENSE: ("F32", TABLES[DENSE])})
    return _index(tmp_path, {TOK: SHARD1, POS: SHARD1, DENSE: SHARD2})


def test_shards_are_opened_on_first_use(tmp_path):
    index = _sharded(tmp_path)
    src = open_weights(index)
    assert isinstance(src, ShardedWeights) and isinstance(src, TensorSource)
    assert src.path == index
    assert src.keys() == [TOK, POS, DENSE]
    assert TOK in src and "nope" not in src
    assert src.files() == []  # nothing opened yet
    assert src.info(TOK) == ("F32", (50, 8))
    assert src.files() == [tmp_path / SHARD1]
    for name in (TOK, POS):
        arr = src.array(name)
        np.testing.assert_array_equal(arr, TABLES[name])
        assert_mapped(arr, tmp_path / SHARD1)
    assert src.files() == [tmp_path / SHARD1]
    np.testing.assert_array_equal(src.array(DENSE), TABLES[DENSE])
    assert src.files() == [tmp_path / SHARD1, tmp_path / SHARD2]


@pytest.mark.parametrize("damage", ["deleted", "garbage", "truncated", "malicious"])
def test_embeddings_load_when_another_shard_is_damaged(tmp_path, damage):
    index = _sharded(tmp_path)
    shard2 = tmp_path / SHARD2
    if damage == "deleted":
        shard2.unlink()
    elif damage == "garbage":
        shard2.write_bytes(b"\x13" * 100)
    elif damage == "truncated":
        shard2.write_bytes(shard2.read_bytes()[:-7])
    else:  # a torch archive that would run code, under the shard's name
        shard2.unlink()
        evil = encode(state_dict({DENSE: tensor(storage("0", 1), (1,))}))
        evil = evil.replace(b"ccollections\nOrderedDict\n", b"cos\nsystem\n", 1)
        write_torch_zip(shard2, evil, {"0": b"\0" * 4})
    src = open_weights(index)
    for name in (TOK, POS):
        np.testing.assert_array_equal(src.array(name), TABLES[name])
    assert src.files() == [tmp_path / SHARD1]
    where = rf"model\.safetensors\.index\.json: tensor '{DENSE}' is in shard '{SHARD2}'"
    expected = {
        "deleted": (FileNotFoundError, where + r", and .*model-00002-of-00002\.safetensors does not exist"),
        "garbage": (ValueError, where + r", which cannot be read: .*header length \d+ does not fit"),
        "truncated": (ValueError, where + r", which cannot be read: .*truncated: the header describes"),
        "malicious": (UnsafeCheckpointError, where + r", which cannot be read: .*the global 'os\.system'"),
    }[damage]
    with pytest.raises(expected[0], match=expected[1]):
        src.array(DENSE)
    with pytest.raises(expected[0], match=expected[1]):
        src.info(DENSE)
    assert src.files() == [tmp_path / SHARD1]


def test_tensor_missing_from_its_shard(tmp_path):
    _sharded(tmp_path)
    index = _index(tmp_path, {TOK: SHARD1, "ghost": SHARD1})
    src = open_weights(index)
    with pytest.raises(KeyError, match=rf"index\.json: the index puts tensor 'ghost' in '{SHARD1}', which has no such"):
        src.array("ghost")
    with pytest.raises(KeyError, match=r"model\.safetensors\.index\.json: no tensor 'nope'"):
        src.array("nope")


def test_type_error_names_the_shard(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", {"ids": ("I64", np.arange(4, dtype="<i8"))})
    src = open_weights(_index(tmp_path, {"ids": "a.safetensors"}))
    assert src.info("ids") == ("I64", (4,))
    with pytest.raises(TypeError, match=r"a\.safetensors: tensor 'ids' has dtype I64"):
        src.array("ids")


def test_shards_in_a_subdirectory_and_of_torch_format(tmp_path):
    (tmp_path / "shards").mkdir()
    write_safetensors(tmp_path / "shards" / "a.safetensors", {TOK: ("F32", TABLES[TOK])})
    pkl = encode(state_dict({DENSE: tensor(storage("0", 64), (8, 8), (1, 8))}))
    write_torch_zip(tmp_path / "pytorch_model-00002-of-00002.bin", pkl, {"0": TABLES[DENSE].tobytes()})
    index = _index(
        tmp_path,
        {TOK: "shards/a.safetensors", DENSE: "pytorch_model-00002-of-00002.bin"},
        name="pytorch_model.bin.index.json",
    )
    src = open_weights(index)
    np.testing.assert_array_equal(src.array(TOK), TABLES[TOK])
    np.testing.assert_array_equal(src.array(DENSE), TABLES[DENSE].T)
    assert_mapped(src.array(DENSE), tmp_path / "pytorch_model-00002-of-00002.bin")


ESCAPES = r"weight_map\['a'\] is .*: a shard must be a relative path"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[1]", "expected a JSON object, got a list"),
        ("{}", 'no "weight_map" object'),
        ('{"weight_map": [["a", "b"]]}', 'no "weight_map" object'),
        ('{"weight_map": {"a": 1}}', r"weight_map\['a'\] must be a shard file name, got 1"),
        ('{"weight_map": {"a": ""}}', r"weight_map\['a'\] must be a shard file name"),
        ('{"weight_map": {"a": "x\\u0000"}}', r"weight_map\['a'\] must be a shard file name"),
        ('{"weight_map": {"a": "/etc/passwd"}}', r"weight_map\['a'\] is '/etc/passwd': a shard must be a relative"),
        ('{"weight_map": {"a": "../x.safetensors"}}', r"weight_map\['a'\] is '\.\./x\.safetensors': a shard must"),
        ('{"weight_map": {"a": "s/../../x"}}', ESCAPES),
        ('{"weight_map": {"a": "..\\\\x"}}', ESCAPES),
        ('{"weight_map": {"a": "C:\\\\x"}}', ESCAPES),
        ('{"weight_map": {"a": "C:x"}}', ESCAPES),
        ('{"weight_map": {"a": "\\\\\\\\server\\\\share\\\\x"}}', ESCAPES),
        ('{"weight_map": {"a": "s1", "a": "s2"}}', "the key 'a' appears twice"),
    ],
)
def test_malformed_index(tmp_path, text, match):
    path = tmp_path / "model.safetensors.index.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json: " + match):
        ShardedWeights(path)


def test_an_index_cannot_name_an_index(tmp_path):
    inner = _sharded(tmp_path)
    outer = _index(tmp_path, {TOK: inner.name}, name="outer.index.json")
    with pytest.raises(ValueError, match=r"outer\.index\.json: .*a JSON file, not a file of tensors"):
        open_weights(outer).array(TOK)


def test_missing_index(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"x\.index\.json: no such file"):
        ShardedWeights(tmp_path / "x.index.json")


# ---------------------------------------------------------------- checkpoints sharded by transformers


def _as_numpy(torch, t):
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_save_pretrained_sharded_safetensors(tmp_path, dtype):
    torch = needs("torch", "peers")
    st_torch = needs("safetensors.torch", "peers")
    model = tiny_bert(getattr(torch, dtype), "BertForMaskedLM")
    itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    model.save_pretrained(tmp_path, max_shard_size=10_000 * itemsize)
    index = tmp_path / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    shards = sorted(set(weight_map.values()))
    assert len(shards) >= 3
    src = open_weights(index)
    # the embedding tables come from the first shard alone
    embeddings = [name for name in src.keys() if ".embeddings." in name]
    assert len(embeddings) == 5
    for name in embeddings:
        src.array(name)
    assert src.files() == [tmp_path / weight_map[embeddings[0]]]
    # every tensor equals safetensors' own reading, and is a map of its shard
    for shard in shards:
        theirs = st_torch.load_file(str(tmp_path / shard))
        for name, t in theirs.items():
            arr = src.array(name)
            assert src.info(name) == (arr.dtype.name.replace("float", "F").replace("uint16", "BF16"), tuple(t.shape))
            np.testing.assert_array_equal(arr, _as_numpy(torch, t))
            assert_mapped(arr, tmp_path / shard)
    assert sorted(p.name for p in src.files()) == shards


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sharded_pytorch_model_bin_as_transformers_4_wrote_it(tmp_path, dtype):
    # transformers 5 no longer writes .bin; transformers 4's
    # save_pretrained(safe_serialization=False, max_shard_size=...) split the
    # state dict with huggingface_hub and torch.save'd each shard.
    torch = needs("torch", "peers")
    hub = needs("huggingface_hub", "peers")
    model = tiny_bert(getattr(torch, dtype), "BertForMaskedLM")
    sd = model.state_dict()
    split = hub.split_torch_state_dict_into_shards(
        sd, filename_pattern="pytorch_model{suffix}.bin", max_shard_size=20_000
    )
    assert split.is_sharded
    for file, names in split.filename_to_tensors.items():
        torch.save({name: sd[name].contiguous() for name in names}, tmp_path / file)
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"metadata": split.metadata, "weight_map": split.tensor_to_filename}))
    src = open_weights(index)
    for file in split.filename_to_tensors:
        theirs = torch.load(tmp_path / file, weights_only=True)
        for name, t in theirs.items():
            np.testing.assert_array_equal(src.array(name), _as_numpy(torch, t))
            assert_mapped(src.array(name), tmp_path / file)
