"""``BertEmbeddings.from_pretrained`` on every family's checkpoint against transformers.

The specs themselves are checked against transformers in test_families.py
(through a NumPy twin); here the real thing runs: a small random model of each
family (and each variant that changes its module) saved by transformers, loaded
by bertembed, and called on right- and left-padded batches with the config's
pad id, with and without token types. Max abs difference from
``model.embeddings(...)``: <= 1e-5 for float32 results, <= 1e-12 for float64
results of a float64 model. Also: float16 and bfloat16 checkpoints against the
float32 computation of the same weights, sharded and ``pytorch_model.bin``
checkpoints, and refusals through ``from_pretrained``. ``pytest -s`` prints the
differences.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.extras import needs

from bertembed import BertEmbeddings

torch = needs("torch", "peers")
transformers = needs("transformers", "peers")
needs("safetensors.numpy", "hf")

from helpers.hf_families import (  # noqa: E402
    ATOL,
    VARIANTS,
    atol_for,
    batches,
    load_config,
    make_checkpoint,
    reference,
    report_measured,
)

pytestmark = pytest.mark.heavy

MEASURED: dict[str, float] = {}


_report = report_measured(MEASURED, "max abs difference, bertembed vs transformers' embedding module")


def _compare(layer, model, config, *, atol, key, rng=None):
    worst = 0.0
    rng = np.random.default_rng(1) if rng is None else rng
    for ids, types, mask in batches(config):
        tasks = [None]
        if config.get("use_task_id"):
            tasks.append(rng.integers(0, config["task_type_vocab_size"], ids.shape))
        for task_ids in tasks:
            theirs = reference(model, ids, types, mask, task_type_ids=task_ids).astype(np.float64)
            kw = {} if task_ids is None else {"task_type_ids": task_ids}
            ours = layer(ids, types, attention_mask=mask, **kw)
            assert ours.shape == theirs.shape
            diff = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
            worst = max(worst, diff)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol, err_msg=key)
    MEASURED[key] = max(MEASURED.get(key, 0.0), worst)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_layer_equals_transformers(variant, dtype, tmp_path):
    model_type, overrides = VARIANTS[variant]
    model = make_checkpoint(model_type, tmp_path, torch_dtype=dtype, **overrides)
    config = load_config(tmp_path)
    layer = BertEmbeddings.from_pretrained(tmp_path)
    assert layer.model_type == model_type
    want = np.float32 if dtype == torch.float32 else np.float64
    assert layer.dtype == want and layer.table_dtype == np.dtype(want).name
    _compare(layer, model, config, atol=atol_for(variant, dtype), key=f"{variant} {np.dtype(want).name}")
    if dtype == torch.float32:  # float64 results from the same float32 tables
        wide = BertEmbeddings.from_pretrained(tmp_path, dtype=np.float64)
        _compare(wide, model, config, atol=ATOL[torch.float32], key=f"{variant} float32->float64")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("variant", ["bert", "xlm-roberta", "mpnet", "deberta-v2-v3style", "modernbert", "ernie"])
def test_half_precision_checkpoints(variant, dtype, tmp_path):
    """Tables read as stored (no widening copy), computed in float32: equal to the
    float32 computation of the same (rounded) weights."""
    model_type, overrides = VARIANTS[variant]
    model = make_checkpoint(model_type, tmp_path, torch_dtype=dtype, **overrides)
    layer = BertEmbeddings.from_pretrained(tmp_path)
    name = str(dtype).removeprefix("torch.")
    assert layer.table_dtype == name and layer.dtype == np.float32
    assert layer._tables.tok.data.nbytes == layer.vocab_size * layer.hidden_size * 2  # not widened
    _compare(layer, model.float(), load_config(tmp_path), atol=1e-5, key=f"{variant} {name} checkpoint")


def test_sharded_and_pytorch_bin_checkpoints_give_the_same_layer(tmp_path):
    model = make_checkpoint("xlm-roberta", tmp_path / "st", **VARIANTS["xlm-roberta"][1])
    config_text = (tmp_path / "st" / "config.json").read_text()
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    (tmp_path / "bin").mkdir()
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "bin" / "config.json").write_text(config_text)
    config = json.loads(config_text)
    want = BertEmbeddings.from_pretrained(tmp_path / "st")
    for kind in ("sharded", "bin"):
        layer = BertEmbeddings.from_pretrained(tmp_path / kind)
        assert layer.position_rule == want.position_rule
        for ids, types, _ in batches(config):
            np.testing.assert_array_equal(layer(ids, types), want(ids, types))
        _compare(layer, model, config, atol=1e-5, key=f"xlm-roberta {kind}")


def test_task_head_checkpoint(tmp_path):
    model = make_checkpoint(
        "roberta", tmp_path, model_class=transformers.AutoModelForMaskedLM, **VARIANTS["roberta"][1]
    )
    layer = BertEmbeddings.from_pretrained(tmp_path)
    _compare(layer, model, load_config(tmp_path), atol=1e-5, key="roberta (ForMaskedLM)")


def test_int8_token_table_of_a_family(tmp_path):
    model = make_checkpoint("xlm-roberta", tmp_path, **VARIANTS["xlm-roberta"][1])
    layer = BertEmbeddings.from_pretrained(tmp_path, table_dtype="int8")
    assert layer.table_dtype == "int8" and layer.position_rule.kind == "padding"
    ids, types, mask = batches(load_config(tmp_path))[0]
    theirs = reference(model, ids, types, mask)
    # int8 rounding of N(0, 1) weights: a few hundredths after LayerNorm
    assert np.max(np.abs(layer(ids, types) - theirs)) < 0.1


@pytest.mark.parametrize(
    ("model_type", "overrides", "message"),
    [
        ("bert", {"position_embedding_type": "relative_key"}, r"model_type 'bert': position_embedding_type"),
        ("deberta-v2", {"embedding_size": 16}, r"model_type 'deberta-v2': .*embed_proj"),
        ("big_bird", {"rescale_embeddings": True}, r"model_type 'big_bird': rescale_embeddings"),
    ],
)
def test_refusals_through_from_pretrained(tmp_path, model_type, overrides, message):
    config = {**load_or_make(tmp_path, model_type), **overrides}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        BertEmbeddings.from_pretrained(tmp_path)


def load_or_make(directory, model_type):
    make_checkpoint(model_type, directory, **VARIANTS.get(model_type, (model_type, {}))[1])
    return load_config(directory)


def test_unknown_model_type_is_refused(tmp_path):
    load_or_make(tmp_path, "bert")
    config = load_config(tmp_path)
    config["model_type"] = "gpt2"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json: model_type 'gpt2' is not supported \(supported: albert, "):
        BertEmbeddings.from_pretrained(tmp_path)


def test_bare_file_of_another_family_needs_its_config(tmp_path):
    make_checkpoint("roberta", tmp_path / "m", model_class=transformers.AutoModelForMaskedLM, **VARIANTS["roberta"][1])
    bare = tmp_path / "weights.safetensors"
    (tmp_path / "m" / "model.safetensors").rename(bare)
    with pytest.raises(ValueError, match=r"the embedding tensors are under 'roberta\.' and there is no config\.json"):
        BertEmbeddings.from_pretrained(bare)
    layer = BertEmbeddings.from_pretrained(bare, config=tmp_path / "m" / "config.json")
    assert layer.model_type == "roberta" and layer.position_rule.kind == "padding"
