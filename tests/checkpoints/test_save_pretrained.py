"""``BertEmbeddings.save_pretrained`` and loading a saved layer back.

Every layer shape the constructor can build (position rules, no LayerNorm,
LayerNorm without bias, a task table, zero-masked rows, float64) and every
table dtype: the layer mapped back from the saved directory has the same
settings, its tables are views of the file (no copy) and it computes exactly
the same results. The file is an ordinary safetensors file
(``safetensors.numpy`` reads it when installed) whose tensors are the tables
as stored. Families read from Hugging Face checkpoints round-trip too
(``heavy``: needs transformers).
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from helpers.extras import needs
from helpers.sanitizer import not_under_asan
from helpers.weights import assert_mapped

from bertembed import BertEmbeddings, PositionRule
from bertembed._checkpoints.save import TENSOR_NAMES

H = 12
TABLE_DTYPES = [None, "int8", "bfloat16", "float16", "float32", "float64"]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _layers():
    """name -> constructor keyword arguments (tables drawn at random)."""
    rng = _rng()

    def t(rows, dtype=np.float32):
        return rng.standard_normal((rows, H)).astype(dtype)

    w, b = rng.standard_normal(H), rng.standard_normal(H)
    return {
        "bert": dict(
            token_embeddings=t(50), position_embeddings=t(16), segment_embeddings=t(2), ln_weight=w, ln_bias=b
        ),
        "roberta-positions": dict(
            token_embeddings=t(50),
            position_embeddings=t(20),
            segment_embeddings=t(1),
            ln_weight=w,
            ln_bias=b,
            ln_eps=1e-5,
            position_rule="padding",
            padding_idx=1,
        ),
        "offset-positions": dict(
            token_embeddings=t(50),
            position_embeddings=t(20),
            position_rule=PositionRule("absolute", offset=2),
            ln_weight=w,
            ln_bias=b,
        ),
        "no-layernorm": dict(token_embeddings=t(50), position_embeddings=t(16), segment_embeddings=t(2)),
        "layernorm-no-bias": dict(token_embeddings=t(50), position_embeddings=None, ln_weight=w, ln_eps=1e-6),
        "task-table": dict(
            token_embeddings=t(50),
            position_embeddings=t(16),
            segment_embeddings=t(4),
            task_embeddings=t(3),
            ln_weight=w,
            ln_bias=b,
        ),
        "zero-masked": dict(
            token_embeddings=t(50),
            position_embeddings=None,
            segment_embeddings=t(2),
            ln_weight=w,
            ln_bias=b,
            zero_masked_rows=True,
        ),
        "float64": dict(
            token_embeddings=t(50, np.float64),
            position_embeddings=t(16, np.float64),
            ln_weight=w,
            ln_bias=b,
            dtype=np.float64,
        ),
        "float16-result": dict(token_embeddings=t(50), position_embeddings=t(16), dtype=np.float16),
    }


LAYERS = _layers()


def _calls(layer):
    """The results of a few calls that use every table the layer has."""
    rng = _rng(1)
    ids = rng.integers(0, layer.vocab_size, (3, 9))
    ids[0, 6:] = 1  # padding, for the padding rule
    kw = {}
    if layer.type_vocab_size:
        kw["segment_ids"] = rng.integers(0, layer.type_vocab_size, ids.shape)
    if layer._tables.task is not None:
        kw["task_type_ids"] = rng.integers(0, layer._tables.task.rows, ids.shape)
    mask = np.ones(ids.shape, np.int64)
    mask[1, 5:] = 0
    return [layer(ids, **kw), layer(ids, attention_mask=mask, **kw), layer(ids[0])]


def _same_layer(a, b):
    assert (a.vocab_size, a.max_positions, a.type_vocab_size, a.hidden_size) == (
        b.vocab_size,
        b.max_positions,
        b.type_vocab_size,
        b.hidden_size,
    )
    assert (a.dtype, a.table_dtype, a.has_layer_norm, a.position_rule, a.zero_masked_rows, a.model_type) == (
        b.dtype,
        b.table_dtype,
        b.has_layer_norm,
        b.position_rule,
        b.zero_masked_rows,
        b.model_type,
    )
    assert a._tables.eps == b._tables.eps
    for x, y in zip(_calls(a), _calls(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("table_dtype", TABLE_DTYPES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_round_trip_of_constructed_layers(name, table_dtype, tmp_path):
    layer = BertEmbeddings(**LAYERS[name], table_dtype=table_dtype)
    layer.save_pretrained(tmp_path / "saved")
    again = BertEmbeddings.from_pretrained(tmp_path / "saved")
    _same_layer(layer, again)
    weights = tmp_path / "saved" / "model.safetensors"
    for table in (again._tables.tok, again._tables.pos, again._tables.seg, again._tables.task):
        if table is not None and table.data.size:
            assert_mapped(table.data, weights)
            if table.scale is not None:
                assert_mapped(table.scale, weights)


@pytest.mark.parametrize("table_dtype", ["int8", "bfloat16", "float16", "float64"])
def test_the_file_holds_the_tables_as_stored(table_dtype, tmp_path):
    st = needs("safetensors.numpy", "hf")
    layer = BertEmbeddings(**LAYERS["task-table"], table_dtype=table_dtype)
    layer.save_pretrained(tmp_path)
    if table_dtype == "bfloat16":
        needs("ml_dtypes", "bfloat16")
    tensors = st.load_file(str(tmp_path / "model.safetensors"))
    t = layer._tables
    expected = {
        "token_embeddings": t.tok.data,
        "position_embeddings": t.pos.data,
        "segment_embeddings": t.seg.data,
        "task_embeddings": t.task.data,
        "ln_weight": t.ln[0],
        "ln_bias": t.ln[1],
    }
    if table_dtype == "int8":
        expected["token_scale_offset"] = t.tok.scale
    assert set(tensors) == set(expected) <= set(TENSOR_NAMES)
    for name, value in expected.items():
        assert tensors[name].dtype.itemsize == value.dtype.itemsize, name
        assert tensors[name].tobytes() == np.ascontiguousarray(value).tobytes(), name
    assert (
        tensors["token_embeddings"].dtype
        == {"int8": np.int8, "float16": np.float16, "float64": np.float64, "bfloat16": "bfloat16"}[table_dtype]
    )


def test_config_json_says_what_the_layer_is(tmp_path):
    layer = BertEmbeddings(**LAYERS["roberta-positions"], table_dtype="int8")
    layer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bertembed"
    assert config["format_version"] == 1
    assert (config["position_rule"], config["padding_idx"], config["position_offset"]) == ("padding", 1, 0)
    assert (config["layer_norm"], config["layer_norm_bias"], config["layer_norm_eps"]) == (True, True, 1e-5)
    assert (config["vocab_size"], config["max_position_embeddings"], config["type_vocab_size"]) == (50, 20, 1)
    assert (config["table_dtype"], config["dtype"], config["source_model_type"]) == ("int8", "float32", None)


def test_load_options_apply_to_a_saved_layer(tmp_path):
    layer = BertEmbeddings(**LAYERS["bert"])
    layer.save_pretrained(tmp_path)
    again = BertEmbeddings.from_pretrained(tmp_path, dtype=np.float64, table_dtype="int8")
    assert again.dtype == np.float64 and again.table_dtype == "int8"
    ref = BertEmbeddings(**LAYERS["bert"], table_dtype="int8", dtype=np.float64)
    ids = _rng().integers(0, 50, (2, 7))
    np.testing.assert_array_equal(again(ids), ref(ids))
    # The weights file alone, with its config beside it, is the same layer.
    np.testing.assert_array_equal(BertEmbeddings.from_pretrained(tmp_path / "model.safetensors")(ids), layer(ids))


def test_a_mapped_saved_layer_pickles_as_its_path(tmp_path):
    layer = BertEmbeddings(**LAYERS["roberta-positions"], table_dtype="bfloat16")
    layer.save_pretrained(tmp_path)
    again = BertEmbeddings.from_pretrained(tmp_path)
    blob = pickle.dumps(again)
    assert len(blob) < 1000
    _same_layer(pickle.loads(blob), layer)


def test_tensors_are_aligned_for_mapping(tmp_path):
    from bertembed._checkpoints.readers import SafetensorsFile

    BertEmbeddings(**LAYERS["task-table"], table_dtype="int8").save_pretrained(tmp_path)
    st = SafetensorsFile(tmp_path / "model.safetensors")
    assert st.data_start % 8 == 0
    for dtype, _, begin, _ in st.entries.values():
        assert begin % {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I8": 1}[dtype] == 0


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"format_version": 99}, ValueError, r"format 99 by a newer bertembed"),
        ({"format_version": "1"}, ValueError, r"'format_version' must be a positive int"),
        ({"position_rule": "sideways"}, ValueError, r"position rule must be one of"),
        ({"position_rule": "none"}, ValueError, r"the position rule 'none'.*is for a layer without"),
        (
            {"vocab_size": 51},
            ValueError,
            r"'token_embeddings' has shape \(50, 12\), but .*config\.json says \(51, 12\)",
        ),
        ({"layer_norm_eps": -1.0}, ValueError, r"ln_eps must be a finite positive number"),
        ({"dtype": "int8"}, ValueError, r"'dtype' is 'int8'"),
        ({"hidden_size": None}, ValueError, r"'hidden_size' is None, of the wrong type"),
    ],
)
def test_a_damaged_config_is_refused(changes, error, match, tmp_path):
    BertEmbeddings(**LAYERS["bert"], table_dtype="int8").save_pretrained(tmp_path)
    _edit_config(tmp_path, **changes)
    with pytest.raises(error, match=match):
        BertEmbeddings.from_pretrained(tmp_path)


def test_a_missing_tensor_is_named(tmp_path):
    from helpers.weights import write_safetensors

    BertEmbeddings(**LAYERS["bert"], table_dtype="int8").save_pretrained(tmp_path)
    q = np.zeros((50, H), np.int8)
    write_safetensors(tmp_path / "model.safetensors", {"token_embeddings": ("I8", q)})
    with pytest.raises(KeyError, match=r"no tensor 'token_scale_offset'"):
        BertEmbeddings.from_pretrained(tmp_path)


def test_saving_into_a_file_path_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        BertEmbeddings(**LAYERS["bert"]).save_pretrained(tmp_path / "f")


# ------------------------------------------------------------------ families (transformers)


@pytest.mark.heavy
@pytest.mark.parametrize("table_dtype", [None, "int8", "bfloat16"])
@pytest.mark.parametrize(
    "variant", ["bert", "xlm-roberta", "ernie", "deberta-v2-v3style", "modernbert", "distilbert", "mpnet-pad3"]
)
def test_round_trip_of_loaded_families(variant, table_dtype, tmp_path):
    needs("torch", "peers")
    needs("transformers", "peers")
    from helpers.hf_families import VARIANTS, make_checkpoint

    model_type, overrides = VARIANTS[variant]
    make_checkpoint(model_type, tmp_path / "hf", **overrides)
    layer = BertEmbeddings.from_pretrained(tmp_path / "hf", table_dtype=table_dtype)
    layer.save_pretrained(tmp_path / "saved")
    again = BertEmbeddings.from_pretrained(tmp_path / "saved")
    assert again.model_type == model_type
    _same_layer(layer, again)


# ------------------------------------------------------------------ private memory


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/status").exists(), reason="needs Linux /proc")
@not_under_asan
@pytest.mark.parametrize("table_dtype", ["int8", "bfloat16"])
def test_a_saved_layer_is_mapped_not_copied(table_dtype, tmp_path):
    """A BERT-base-sized saved layer, loaded and called once in a fresh process:
    its private memory grows by at most 16 MiB; the control (converted to
    float32 at load time) by at least the float32 token table."""
    from test_checkpoint_memory import P, V, private_growth

    rng = _rng()
    layer = BertEmbeddings(
        rng.standard_normal((V, 768), dtype=np.float32) * 0.05,
        rng.standard_normal((P, 768), dtype=np.float32) * 0.05,
        rng.standard_normal((2, 768), dtype=np.float32) * 0.05,
        ln_weight=np.ones(768),
        ln_bias=np.zeros(768),
        table_dtype=table_dtype,
    )
    layer.save_pretrained(tmp_path / "saved")
    del layer
    grown, dtype = private_growth(tmp_path / "saved")
    print(f"\nsaved {table_dtype} layer, mapped and called: private memory +{grown / 2**20:.2f} MiB")
    assert dtype == table_dtype
    assert grown <= 16 << 20
    control, dtype = private_growth(tmp_path / "saved", "float32")
    assert dtype == "float32"
    # The float32 token table is a private copy (89 MiB); memory the process
    # frees meanwhile (a few hundred KiB seen) may offset a little of it.
    assert control >= 0.95 * V * 768 * 4
