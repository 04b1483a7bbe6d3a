"""BertEmbeddings.from_pretrained on synthetic safetensors checkpoints.

Checkpoints are written here with ``safetensors.numpy.save_file`` (bfloat16
ones with the package's writer, corrupt ones by hand); only numpy,
safetensors and pytest are needed.
"""

from __future__ import annotations

import copy
import json
import mmap
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.extras import needs
from helpers.reference import reference, tolerance
from helpers.weights import bfloat16_bits, write_safetensors

from bertembed import BertEmbeddings

st_numpy = needs("safetensors.numpy", "hf")

V, P, T, H = 50, 16, 2, 8
IDS = np.array([[1, 7, 49, 3, 0], [5, 5, 2, 48, 9]])
SEG = np.array([[0, 0, 0, 1, 1], [0, 1, 1, 1, 1]])
STANDARD = {
    "tok": "embeddings.word_embeddings.weight",
    "pos": "embeddings.position_embeddings.weight",
    "seg": "embeddings.token_type_embeddings.weight",
    "w": "embeddings.LayerNorm.weight",
    "b": "embeddings.LayerNorm.bias",
}


def make_tables(dtype=np.float32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "tok": rng.standard_normal((V, H)).astype(dtype),
        "pos": rng.standard_normal((P, H)).astype(dtype),
        "seg": rng.standard_normal((T, H)).astype(dtype),
        "w": (1.0 + 0.1 * rng.standard_normal(H)).astype(dtype),
        "b": (0.1 * rng.standard_normal(H)).astype(dtype),
    }


def tensors_for(tables, prefix="", old_ln=False, extra=True) -> dict[str, np.ndarray]:
    names = dict(STANDARD)
    if old_ln:
        names["w"] = "embeddings.LayerNorm.gamma"
        names["b"] = "embeddings.LayerNorm.beta"
    out = {prefix + names[k]: v for k, v in tables.items()}
    if extra:  # what real checkpoints also hold
        out[prefix + "embeddings.position_ids"] = np.arange(P, dtype=np.int64).reshape(1, P)
        out[prefix + "encoder.layer.0.output.dense.weight"] = np.ones((H, 3), np.float32)
    return out


def write_dir(directory: Path, tensors, config=None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    st_numpy.save_file(tensors, str(directory / "model.safetensors"))
    if config is not False:
        cfg = {"model_type": "bert", "hidden_size": H} if config is None else config
        (directory / "config.json").write_text(json.dumps(cfg))
    return directory


def expected(tables, segment_ids=SEG, eps=1e-12, dtype=np.float32, position_ids=None):
    return reference(
        IDS,
        segment_ids,
        tables["tok"],
        tables["pos"],
        tables.get("seg"),
        position_ids=position_ids,
        ln_weight=tables["w"],
        ln_bias=tables["b"],
        ln_eps=eps,
        dtype=dtype,
    )


# ---------------------------------------------------------------- key names


@pytest.mark.parametrize("prefix", ["", "bert.", "model.", "encoder.bert."])
@pytest.mark.parametrize("old_ln", [False, True], ids=["weight-bias", "gamma-beta"])
def test_key_variants(tmp_path, prefix, old_ln):
    tables = make_tables()
    path = write_dir(tmp_path / "ckpt", tensors_for(tables, prefix, old_ln))
    layer = BertEmbeddings.from_pretrained(path)
    assert (layer.vocab_size, layer.max_positions, layer.type_vocab_size, layer.hidden_size) == (
        V,
        P,
        T,
        H,
    )
    assert layer.has_layer_norm
    assert layer.dtype == np.float32
    np.testing.assert_allclose(layer(IDS, SEG), expected(tables), **tolerance(np.float32))


def test_file_path_and_str_path(tmp_path):
    tables = make_tables()
    d = write_dir(tmp_path / "ckpt", tensors_for(tables, "bert."))
    by_dir = BertEmbeddings.from_pretrained(str(d))
    by_file = BertEmbeddings.from_pretrained(d / "model.safetensors")
    np.testing.assert_array_equal(by_dir(IDS, SEG), by_file(IDS, SEG))


def test_prefix_without_prefix_wins_over_others(tmp_path):
    # A file holding a bare BertModel and another model's tables: the bare one is used.
    a, b = make_tables(seed=1), make_tables(seed=2)
    tensors = {**tensors_for(a, "", extra=False), **tensors_for(b, "teacher.", extra=False)}
    layer = BertEmbeddings.from_pretrained(write_dir(tmp_path / "c", tensors))
    np.testing.assert_allclose(layer(IDS, SEG), expected(a), **tolerance(np.float32))


def test_ambiguous_prefixes_are_an_error(tmp_path):
    a, b = make_tables(seed=1), make_tables(seed=2)
    tensors = {**tensors_for(a, "student.", extra=False), **tensors_for(b, "teacher.", extra=False)}
    path = write_dir(tmp_path / "c", tensors)
    match = r"model\.safetensors: embedding tensors under several prefixes \('student\.', 'teacher\.'\)"
    with pytest.raises(ValueError, match=match):
        BertEmbeddings.from_pretrained(path)


def test_matches_safetensors_own_reader(tmp_path):
    tensors = tensors_for(make_tables(np.float64), "bert.")
    path = write_dir(tmp_path / "c", tensors)
    theirs = st_numpy.load_file(str(path / "model.safetensors"))
    layer = BertEmbeddings.from_pretrained(path)
    np.testing.assert_array_equal(layer._tables.tok.data, theirs["bert." + STANDARD["tok"]])
    np.testing.assert_array_equal(layer._tables.pos.data, theirs["bert." + STANDARD["pos"]])
    np.testing.assert_array_equal(layer._tables.seg.data, theirs["bert." + STANDARD["seg"]])
    np.testing.assert_array_equal(layer._tables.ln[0], theirs["bert." + STANDARD["w"]])
    np.testing.assert_array_equal(layer._tables.ln[1], theirs["bert." + STANDARD["b"]])


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    ("stored", "result_dtype"),
    [(np.float32, np.float32), (np.float64, np.float64), (np.float16, np.float32)],
)
def test_table_dtypes(tmp_path, stored, result_dtype):
    tables = make_tables(stored)
    layer = BertEmbeddings.from_pretrained(write_dir(tmp_path / "c", tensors_for(tables)))
    assert layer._tables.tok.data.dtype == stored  # mapped as stored, never widened
    assert layer.table_dtype == np.dtype(stored).name
    assert layer.dtype == result_dtype  # float64 for float64 tables, float32 otherwise
    result = layer(IDS, SEG)
    assert result.dtype == result_dtype
    # float16 values are widened exactly, so the reference on them applies.
    np.testing.assert_allclose(result, expected(tables, dtype=result_dtype), **tolerance(result_dtype))


def test_bfloat16_is_mapped_as_it_is(tmp_path):
    tables = make_tables(np.float32)
    bits = {k: bfloat16_bits(v) for k, v in tables.items()}
    exact = {k: (b.astype(np.uint32) << 16).view(np.float32) for k, b in bits.items()}
    path = write_safetensors(
        tmp_path / "bf16.safetensors", {name: ("BF16", bits[key]) for key, name in STANDARD.items()}
    )
    layer = BertEmbeddings.from_pretrained(path)
    assert layer.dtype == np.float32 and layer.table_dtype == "bfloat16"
    np.testing.assert_array_equal(layer._tables.tok.data.view(np.uint16), bits["tok"])
    data = layer._tables.tok.data  # the file's map (its bits, or an ml_dtypes view of them)
    assert isinstance(data, np.memmap) or isinstance(data.base, np.memmap)
    np.testing.assert_allclose(layer(IDS, SEG), expected(exact), **tolerance(np.float32))


def test_float64_result_from_float32_file(tmp_path):
    tables = make_tables(np.float32)
    path = write_dir(tmp_path / "c", tensors_for(tables))
    layer = BertEmbeddings.from_pretrained(path, dtype=np.float64)
    assert layer.dtype == np.float64
    assert layer._tables.tok.data.dtype == np.float32  # the mapped table is not converted
    assert isinstance(layer._tables.tok.data, np.memmap)
    result = layer(IDS, SEG)
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, expected(tables, dtype=np.float64), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- optional parts, config


def test_without_token_type_table(tmp_path):
    tables = make_tables()
    del tables["seg"]
    # BertModel always has a token-type table: its absence is an error, never a silent zero ...
    bert = write_dir(tmp_path / "c", tensors_for(tables, "bert."))
    with pytest.raises(KeyError, match=r"no tensor 'bert\.embeddings\.token_type_embeddings\.weight' \(a bert "):
        BertEmbeddings.from_pretrained(bert)
    # ... a family without one (DistilBERT) and a bare file without one have no segment term.
    distil = write_dir(tmp_path / "d", tensors_for(tables, "distilbert."), {"model_type": "distilbert", "dim": H})
    assert BertEmbeddings.from_pretrained(distil).type_vocab_size == 0
    layer = BertEmbeddings.from_pretrained(
        write_dir(tmp_path / "e", tensors_for(tables, "bert."), False) / "model.safetensors"
    )
    assert layer.type_vocab_size == 0
    np.testing.assert_allclose(layer(IDS), expected(tables, None), **tolerance(np.float32))
    with pytest.raises(ValueError, match="segment_ids was given but there is no segment_embeddings"):
        layer(IDS, SEG)


def test_layer_norm_eps_from_config(tmp_path):
    tables = make_tables(np.float64)
    cfg = {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 0.5}
    path = write_dir(tmp_path / "c", tensors_for(tables), cfg)
    result = BertEmbeddings.from_pretrained(path)(IDS, SEG)
    np.testing.assert_allclose(result, expected(tables, eps=0.5, dtype=np.float64), rtol=1e-12)
    assert not np.allclose(result, expected(tables, eps=1e-12, dtype=np.float64), rtol=1e-6)


def test_default_eps_and_the_config_beside_a_file(tmp_path):
    tables = make_tables(np.float64)
    no_eps = write_dir(tmp_path / "a", tensors_for(tables), {"model_type": "bert", "hidden_size": H})
    with_eps = write_dir(
        tmp_path / "b", tensors_for(tables), {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 0.5}
    )
    bare = write_dir(tmp_path / "c", tensors_for(tables), False)
    default = expected(tables, eps=1e-12, dtype=np.float64)
    for path in (no_eps, no_eps / "model.safetensors", bare / "model.safetensors"):
        np.testing.assert_allclose(BertEmbeddings.from_pretrained(path)(IDS, SEG), default, rtol=1e-12)
    # a file path reads the config.json beside it
    want = expected(tables, eps=0.5, dtype=np.float64)
    np.testing.assert_allclose(
        BertEmbeddings.from_pretrained(with_eps / "model.safetensors")(IDS, SEG), want, rtol=1e-12
    )
    # config= overrides it, as a dict or as a path
    for config in ({"model_type": "bert", "hidden_size": H, "layer_norm_eps": 0.5}, with_eps / "config.json"):
        layer = BertEmbeddings.from_pretrained(bare / "model.safetensors", config=config)
        np.testing.assert_allclose(layer(IDS, SEG), want, rtol=1e-12)


def test_file_without_config(tmp_path):
    tables = make_tables()
    path = tmp_path / "weights.safetensors"
    st_numpy.save_file(tensors_for(tables), str(path))
    np.testing.assert_allclose(
        BertEmbeddings.from_pretrained(path)(IDS, SEG), expected(tables), **tolerance(np.float32)
    )


# ---------------------------------------------------------------- errors


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope: no such file or directory"):
        BertEmbeddings.from_pretrained(tmp_path / "nope")


def test_directory_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(
        FileNotFoundError,
        match=r": no weights file \(looked for model\.safetensors, "
        r"model\.safetensors\.index\.json, pytorch_model\.bin, "
        r"pytorch_model\.bin\.index\.json\)",
    ):
        BertEmbeddings.from_pretrained(tmp_path)


def test_directory_without_config(tmp_path):
    path = write_dir(tmp_path / "c", tensors_for(make_tables()), config=False)
    with pytest.raises(FileNotFoundError, match=r"config\.json: no such file"):
        BertEmbeddings.from_pretrained(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", r"config\.json: not valid JSON"),
        ("[1, 2]", r"config\.json: expected a JSON object, got a list"),
        ('{"hidden_size": 8}', r"config\.json: no model_type, so the embedding module is unknown"),
        ('{"model_type": "gpt2"}', r"config\.json: model_type 'gpt2' is not supported \(supported: albert, bert"),
        ('{"model_type": "bert", "layer_norm_eps": -1}', r"config\.json: model_type 'bert': layer_norm_eps"),
        ('{"model_type": "bert", "layer_norm_eps": "1e-12"}', r"config\.json: model_type 'bert': layer_norm_eps"),
        (
            '{"model_type": "bert", "position_embedding_type": "relative_key"}',
            r"config\.json: model_type 'bert': position_embedding_type",
        ),
    ],
)
def test_bad_config(tmp_path, text, match):
    path = write_dir(tmp_path / "c", tensors_for(make_tables()), config=False)
    (path / "config.json").write_text(text)
    with pytest.raises(ValueError, match=match):
        BertEmbeddings.from_pretrained(path)


@pytest.mark.parametrize("key", ["tok", "pos", "w", "b"])
def test_missing_tensor(tmp_path, key):
    tables = make_tables()
    del tables[key]
    path = write_dir(tmp_path / "c", tensors_for(tables, "bert."))
    with pytest.raises(KeyError, match=r"model\.safetensors: no tensor 'bert\." + STANDARD[key]):
        BertEmbeddings.from_pretrained(path)


def test_missing_layer_norm_names_both_spellings(tmp_path):
    tables = make_tables()
    del tables["w"]
    path = write_dir(tmp_path / "c", tensors_for(tables))
    with pytest.raises(KeyError, match=r"'embeddings\.LayerNorm\.weight' or 'embeddings\.LayerNorm\.gamma'"):
        BertEmbeddings.from_pretrained(path)


def test_integer_table(tmp_path):
    tables = make_tables()
    tables["pos"] = np.zeros((P, H), np.int32)
    path = write_dir(tmp_path / "c", tensors_for(tables))
    with pytest.raises(
        TypeError,
        match=r"model\.safetensors: tensor 'embeddings\.position_embeddings\.weight' has dtype I32",
    ):
        BertEmbeddings.from_pretrained(path)


def test_inconsistent_tables(tmp_path):
    tables = make_tables()
    tables["pos"] = np.zeros((P, H + 1), np.float32)
    path = write_dir(tmp_path / "c", tensors_for(tables))
    with pytest.raises(ValueError, match=r"model\.safetensors: hidden sizes differ"):
        BertEmbeddings.from_pretrained(path)
    tables = make_tables()
    tables["w"] = np.ones(H + 2, np.float32)
    path = write_dir(tmp_path / "d", tensors_for(tables))
    with pytest.raises(ValueError, match=r"model\.safetensors: ln_weight must have shape \(8,\)"):
        BertEmbeddings.from_pretrained(path)


def test_bad_dtype_argument(tmp_path):
    path = write_dir(tmp_path / "c", tensors_for(make_tables()))
    with pytest.raises(TypeError, match="dtype must be float32, float64, float16 or bfloat16, got int32"):
        BertEmbeddings.from_pretrained(path, dtype=np.int32)


def test_corrupt_file_is_an_error_naming_it(tmp_path):
    # The reader's own checks are tested in test_weights_safetensors.py.
    path = write_dir(tmp_path / "c", tensors_for(make_tables()))
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-5])
    with pytest.raises(ValueError, match=r"model\.safetensors: truncated: the header describes"):
        BertEmbeddings.from_pretrained(path)


def test_not_a_bert_checkpoint(tmp_path):
    path = tmp_path / "x.safetensors"
    st_numpy.save_file({"decoder.weight": np.ones((2, 2), np.float32)}, str(path))
    with pytest.raises(KeyError, match=r"x\.safetensors: no tensor 'embeddings\.word_embeddings\.weight'"):
        BertEmbeddings.from_pretrained(path)


# ---------------------------------------------------------------- zero copy


@pytest.mark.parametrize("stored", [np.float32, np.float64])
def test_tables_are_read_only_maps_of_the_file(tmp_path, stored):
    tables = make_tables(stored)
    path = write_dir(tmp_path / "c", tensors_for(tables, "bert."))
    weights = path / "model.safetensors"
    layer = BertEmbeddings.from_pretrained(path)
    for arr in (layer._tables.tok.data, layer._tables.pos.data, layer._tables.seg.data):
        assert isinstance(arr, np.memmap)
        assert os.path.samefile(arr.filename, weights)
        assert not arr.flags.writeable
        assert isinstance(arr._mmap, mmap.mmap)
        with pytest.raises(ValueError, match="read-only"):
            arr[0, 0] = 1.0

    # The table is the file: rewrite token row 7 on disk, and the layer sees it.
    before = layer(IDS, SEG)
    header_len = struct.unpack("<Q", weights.read_bytes()[:8])[0]
    entry = json.loads(weights.read_bytes()[8 : 8 + header_len])["bert." + STANDARD["tok"]]
    row = np.full(H, 3.0, dtype=stored)
    with open(weights, "r+b") as fh:
        fh.seek(8 + header_len + entry["data_offsets"][0] + 7 * row.nbytes)
        fh.write(row.tobytes())
    np.testing.assert_array_equal(layer._tables.tok.data[7], row)
    tables["tok"][7] = row
    after = layer(IDS, SEG)
    np.testing.assert_allclose(after, expected(tables, dtype=stored), **tolerance(stored))
    assert not np.allclose(after[0, 1], before[0, 1])  # IDS[0, 1] == 7
    np.testing.assert_array_equal(after[1], before[1])  # no 7 in the second row


def test_float16_tables_are_maps_too(tmp_path):
    path = write_dir(tmp_path / "c", tensors_for(make_tables(np.float16)))
    tok = BertEmbeddings.from_pretrained(path)._tables.tok.data
    assert tok.dtype == np.float16
    assert isinstance(tok, np.memmap) and not tok.flags.writeable


# ---------------------------------------------------------------- pickling


@pytest.mark.parametrize("dtype", [None, np.float64])
def test_pickle_loaded_layer_is_small(tmp_path, monkeypatch, dtype):
    tables = make_tables()
    write_dir(tmp_path / "ckpt", tensors_for(tables), {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 1e-6})
    monkeypatch.chdir(tmp_path)
    layer = BertEmbeddings.from_pretrained("ckpt", dtype=dtype)  # a relative path
    blob = pickle.dumps(layer)
    assert len(blob) < 1000 < tables["tok"].nbytes
    monkeypatch.chdir("/")  # unpickling does not depend on the working directory
    again = pickle.loads(blob)
    assert type(again) is BertEmbeddings
    assert again.dtype == layer.dtype == (np.float32 if dtype is None else np.float64)
    assert isinstance(again._tables.tok.data, np.memmap)
    assert again._tables.eps == 1e-6
    np.testing.assert_array_equal(again(IDS, SEG), layer(IDS, SEG))
    np.testing.assert_array_equal(copy.deepcopy(layer)(IDS, SEG), layer(IDS, SEG))
    assert len(pickle.dumps(again)) == len(blob)


def test_pickle_layer_from_arrays_holds_its_tables():
    tables = make_tables(np.float64)
    with_ln = BertEmbeddings(
        tables["tok"],
        tables["pos"],
        tables["seg"],
        ln_weight=tables["w"],
        ln_bias=tables["b"],
        ln_eps=1e-3,
        dtype=np.float32,
    )
    plain = BertEmbeddings(tables["tok"], tables["pos"])
    for layer in (with_ln, plain):
        blob = pickle.dumps(layer)
        assert len(blob) > tables["tok"].nbytes
        again = pickle.loads(blob)
        assert again._source is None
        assert repr(again) == repr(layer)
        np.testing.assert_array_equal(again(IDS), layer(IDS))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(with_ln))(IDS, SEG), with_ln(IDS, SEG))


def test_pickle_of_a_subclass_keeps_the_class(tmp_path):
    class Mine(BertEmbeddings):
        pass

    globals()["Mine"] = Mine  # picklable by reference
    Mine.__qualname__ = "Mine"
    try:
        path = write_dir(tmp_path / "c", tensors_for(make_tables()))
        assert type(pickle.loads(pickle.dumps(Mine.from_pretrained(path)))) is Mine
    finally:
        del globals()["Mine"]


def test_unpickle_after_the_checkpoint_changed_or_vanished(tmp_path):
    path = write_dir(tmp_path / "c", tensors_for(make_tables()))
    blob = pickle.dumps(BertEmbeddings.from_pretrained(path))
    smaller = make_tables()
    smaller["tok"] = smaller["tok"][:10]
    write_dir(path, tensors_for(smaller))
    with pytest.raises(ValueError, match=r"the checkpoint changed since the layer was pickled: .*was \(50,"):
        pickle.loads(blob)
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r": no weights file \(looked for model\.safetensors"):
        pickle.loads(blob)


# ---------------------------------------------------------------- position table against the config


def _five_row_positions(tmp_path, config):
    tables = make_tables()
    tables["pos"] = tables["pos"][:5]
    return write_dir(tmp_path / "ckpt", tensors_for(tables, extra=False), {"hidden_size": H, **config}), tables


def test_a_padding_id_that_leaves_one_position_is_refused_naming_the_config(tmp_path):
    """RoBERTa's padding rule numbers tokens from pad_token_id + 1: with 5 rows and pad 3, one token fits."""
    path, _ = _five_row_positions(tmp_path, {"model_type": "roberta", "pad_token_id": 3, "max_position_embeddings": 5})
    with pytest.raises(
        ValueError,
        match=r"config\.json: model_type 'roberta': pad_token_id 3 leaves 1 position of the position table "
        r"'embeddings\.position_embeddings\.weight' \(5 rows; max_position_embeddings 5\) for tokens: .*from "
        r"pad_token_id \+ 1 = 4, so no sequence can hold more than 1 token, fewer than the 3 .*"
        r"\(pad_token_id at most 1 for this table\)",
    ) as info:
        BertEmbeddings.from_pretrained(path)
    assert type(info.value).__name__ == "CheckpointError"


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"model_type": "roberta", "pad_token_id": 2}, r"pad_token_id 2 leaves 2 positions .* more than 2 tokens"),
        (
            {"model_type": "esm", "pad_token_id": 4, "emb_layer_norm_before": False},
            r"pad_token_id 4 leaves 0 positions",
        ),
        ({"model_type": "nystromformer"}, None),  # rows 2..4: three positions, enough
    ],
)
def test_positions_left_by_the_padding_id_or_the_offset(tmp_path, config, match):
    path, tables = _five_row_positions(tmp_path, config)
    if match is None:
        layer = BertEmbeddings.from_pretrained(path)
        ids = np.array([[1, 7, 9]])
        want = reference(
            ids,
            None,
            tables["tok"],
            tables["pos"],
            tables["seg"],
            position_ids=np.array([[2, 3, 4]]),
            ln_weight=tables["w"],
            ln_bias=tables["b"],
            ln_eps=1e-5,
        )
        np.testing.assert_allclose(layer(ids), want, **tolerance(np.float32))
        return
    with pytest.raises(ValueError, match=r"config\.json: model_type .*" + match):
        BertEmbeddings.from_pretrained(path)


def test_an_offset_that_leaves_too_few_positions_is_refused(tmp_path):
    tables = make_tables()
    tables["pos"] = tables["pos"][:4]
    path = write_dir(tmp_path / "ckpt", tensors_for(tables, extra=False), {"model_type": "yoso", "hidden_size": H})
    with pytest.raises(
        ValueError,
        match=r"config\.json: model_type 'yoso': positions start at row 2 of the position table "
        r"'embeddings\.position_embeddings\.weight' \(4 rows\), which leaves 2 for tokens, fewer than the 3",
    ):
        BertEmbeddings.from_pretrained(path)


def test_mpnet_fixed_padding_id_is_named_as_fixed(tmp_path):
    tables = make_tables()
    tables["pos"] = tables["pos"][:4]
    del tables["seg"]
    names = {k: v for k, v in tensors_for(tables, extra=False).items()}
    path = write_dir(tmp_path / "ckpt", names, {"model_type": "mpnet", "hidden_size": H, "pad_token_id": 0})
    with pytest.raises(ValueError, match=r"the padding id \(1, fixed for mpnet\) leaves 2 positions"):
        BertEmbeddings.from_pretrained(path)


def test_a_table_long_enough_for_the_padding_rule_loads(tmp_path):
    """Three positions left (pad 1, 5 rows): the shortest sequence fits, a longer one is the call's error."""
    path, tables = _five_row_positions(tmp_path, {"model_type": "roberta", "pad_token_id": 1, "layer_norm_eps": 1e-5})
    layer = BertEmbeddings.from_pretrained(path)
    ids = np.array([[0, 7, 2, 1]])  # <s> x </s> <pad>
    want = reference(
        ids,
        None,
        tables["tok"],
        tables["pos"],
        tables["seg"],
        position_ids=np.array([[2, 3, 4, 1]]),
        ln_weight=tables["w"],
        ln_bias=tables["b"],
        ln_eps=1e-5,
    )
    np.testing.assert_allclose(layer(ids), want, **tolerance(np.float32))
    with pytest.raises(ValueError, match=r"position_embeddings has 5 rows \(at most 3 tokens per sequence\)"):
        layer(np.array([[0, 7, 8, 2]]))


def test_a_tensor_the_config_asks_for_names_the_config_too(tmp_path):
    """ERNIE with use_task_id reads a task-type table: missing, the error names the weights and the config."""
    path = write_dir(
        tmp_path / "ckpt",
        tensors_for(make_tables(), extra=False),
        {"model_type": "ernie", "hidden_size": H, "use_task_id": True},
    )
    with pytest.raises(
        KeyError,
        match=r"model\.safetensors: no tensor 'embeddings\.task_type_embeddings\.weight' \(a ernie checkpoint "
        r"configured by .*ckpt/config\.json has it\)",
    ):
        BertEmbeddings.from_pretrained(path)
