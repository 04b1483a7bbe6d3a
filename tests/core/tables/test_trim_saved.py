"""A trimmed layer saved and mapped back: the kept rows and the int32 id map, no copy.

Also: trim then convert equals convert then trim, bit for bit; hostile saved
files (a map that points outside the table, shapes that disagree) are refused
when the layer is built; a loaded trimmed layer costs (almost) no private
memory; every model family trims exactly (heavy: checkpoints made by
transformers).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers.extras import needs
from helpers.sanitizer import not_under_asan
from helpers.weights import assert_mapped, write_safetensors

from bertembed import BertEmbeddings
from bertembed._checkpoints import save

V, P, H = 500, 20, 16


def _full(table_dtype=None, rule="padding"):
    rng = np.random.default_rng(0)
    kw = {"position_rule": "padding", "padding_idx": 1} if rule == "padding" else {}
    return BertEmbeddings(
        rng.standard_normal((V, H), dtype=np.float32),
        rng.standard_normal((P, H), dtype=np.float32),
        rng.standard_normal((2, H), dtype=np.float32),
        ln_weight=rng.uniform(0.5, 1.5, H),
        ln_bias=rng.standard_normal(H),
        table_dtype=table_dtype,
        **kw,
    )


KEEP = np.arange(2, V, 3)


def _ids(rng, shape=(3, 10)):
    ids = rng.choice(KEEP, shape)
    ids[0, -2:] = 1
    return ids


@pytest.mark.parametrize("unknown", ["error", 5])
@pytest.mark.parametrize("table_dtype", [None, "float16", "bfloat16", "int8"], ids=lambda d: d or "float32")
def test_saved_trimmed_layer_maps_back_without_a_copy(tmp_path, table_dtype, unknown):
    if table_dtype == "bfloat16":
        needs("ml_dtypes", "bfloat16")
    rng = np.random.default_rng(1)
    small = _full(table_dtype).trimmed(KEEP, unknown=unknown)
    small.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["format_version"] == 2 and config["trimmed"] is True
    assert config["vocab_size"] == V and config["kept_rows"] == small.kept_rows == len(KEEP) + 1  # + the pad
    assert config["unknown"] == unknown and config["special_token_ids"] == [1]
    again = BertEmbeddings.from_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    assert_mapped(again._map.map, weights)
    assert_mapped(again._tables.tok.data, weights)
    if again._tables.tok.scale is not None:
        assert_mapped(again._tables.tok.scale, weights)
    assert again.is_trimmed and again.unknown == unknown and again.kept_rows == small.kept_rows
    assert again.table_dtype == small.table_dtype and again.special_token_ids == (1,)
    np.testing.assert_array_equal(again.kept_ids, small.kept_ids)
    ids = _ids(rng)
    np.testing.assert_array_equal(again(ids), small(ids))
    np.testing.assert_array_equal(again(ids), _full(table_dtype)(ids))
    # pickled as its path, mapped again
    assert len(pickle.dumps(again)) < 2000
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(again))(ids), small(ids))


def test_untrimmed_layers_are_still_written_in_format_1(tmp_path):
    _full().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["format_version"] == 1 and "trimmed" not in config and "kept_rows" not in config
    assert "token_id_map" not in save.SafetensorsFile(tmp_path / "model.safetensors")


@pytest.mark.parametrize("table_dtype", ["int8", "bfloat16", "float16", "float64"])
def test_trim_then_convert_equals_convert_then_trim(tmp_path, table_dtype):
    if table_dtype == "bfloat16":
        needs("ml_dtypes", "bfloat16")
    rng = np.random.default_rng(2)
    _full().trimmed(KEEP).save_pretrained(tmp_path / "trimmed")
    b = _full(table_dtype).trimmed(KEEP)  # convert, then trim
    a = BertEmbeddings.from_pretrained(tmp_path / "trimmed", table_dtype=table_dtype, dtype=b.dtype)  # trim, convert
    assert a.table_dtype == b.table_dtype == table_dtype
    for x, y in zip(a._tables[:4], b._tables[:4], strict=True):
        if x is None:
            assert y is None
            continue
        np.testing.assert_array_equal(x.data.view(np.uint8), y.data.view(np.uint8))
        if x.scale is not None:
            np.testing.assert_array_equal(x.scale, y.scale)
    np.testing.assert_array_equal(a._map.map, b._map.map)
    ids = _ids(rng)
    np.testing.assert_array_equal(a(ids), b(ids))


def test_a_trimmed_layer_loaded_with_another_result_dtype(tmp_path):
    rng = np.random.default_rng(3)
    _full().trimmed(KEEP).save_pretrained(tmp_path / "trimmed")
    _full().save_pretrained(tmp_path / "full")
    wide = BertEmbeddings.from_pretrained(tmp_path / "trimmed", dtype=np.float64)
    ids = _ids(rng)
    assert wide.dtype == np.float64
    np.testing.assert_array_equal(wide(ids), BertEmbeddings.from_pretrained(tmp_path / "full", dtype=np.float64)(ids))


# ------------------------------------------------------------------------------ hostile saved files


def _rewrite(directory: Path, *, config=None, tensors=None):
    """Write the saved layer again with config keys and tensors replaced."""
    src = save.SafetensorsFile(directory / "model.safetensors")
    arrays = {}
    for name in src.keys():
        kind = src.info(name).dtype
        if kind in ("I8", "I32"):
            arrays[name] = (kind, save._quantised(src, name, np.dtype({"I8": "i1", "I32": "<i4"}[kind])).copy())
        else:
            arrays[name] = (kind, np.array(src.array(name)))
    for name, value in (tensors or {}).items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    write_safetensors(directory / "model.safetensors", arrays)
    cfg = json.loads((directory / "config.json").read_text())
    for key, value in (config or {}).items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (directory / "config.json").write_text(json.dumps(cfg))


def _map_with(m: dict[int, int], unknown=None):
    small = _full().trimmed(KEEP, unknown="error" if unknown is None else unknown)
    arr = small._map.map.copy()
    for i, row in m.items():
        arr[i] = row
    return ("I32", arr)


@pytest.mark.parametrize(
    "config, tensors, error, match",
    [
        ({}, {"token_id_map": _map_with({3: 10**6})}, ValueError, "sends id 3 to row 1000000, outside the 167 rows"),
        ({}, {"token_id_map": _map_with({3: -7})}, ValueError, "sends id 3 to row -7"),
        ({}, {"token_id_map": _map_with({2: 5})}, ValueError, "does not send the kept ids to rows"),
        ({"unknown": 2}, {}, ValueError, "no entry may be -1"),
        ({"unknown": "unk"}, {}, ValueError, "'unknown' is 'unk'"),
        ({"unknown": True}, {}, ValueError, "'unknown' is True"),
        ({"unknown": 10**6}, {}, ValueError, "the unknown id 1000000 is not an id of the vocabulary"),
        ({"kept_rows": 166}, {}, ValueError, r"'token_embeddings' has shape \(167, 16\), but .* says \(166, 16\)"),
        ({"vocab_size": 400}, {}, ValueError, r"'token_id_map' has shape \(500,\), but .* says a vocabulary of 400"),
        ({}, {"token_id_map": ("I64", np.zeros(V, np.int64))}, ValueError, "has dtype I64, expected I32"),
        ({}, {"token_id_map": None}, KeyError, "no tensor 'token_id_map'"),
        ({"trimmed": None}, {}, ValueError, "config has 'trimmed'"),
        ({"format_version": 3}, {}, ValueError, "a layer saved in format 3 by a newer bertembed"),
        ({"special_token_ids": "1"}, {}, ValueError, "'special_token_ids' is '1'"),
    ],
)
def test_hostile_saved_trimmed_layers_are_refused(tmp_path, config, tensors, error, match):
    _full().trimmed(KEEP).save_pretrained(tmp_path)
    _rewrite(tmp_path, config=config, tensors=tensors)
    with pytest.raises(error, match=match):
        BertEmbeddings.from_pretrained(tmp_path)


def test_a_valid_rewrite_loads(tmp_path):
    """The control of the refusals above: rewriting with nothing changed loads."""
    _full().trimmed(KEEP).save_pretrained(tmp_path)
    _rewrite(tmp_path)
    assert BertEmbeddings.from_pretrained(tmp_path).kept_rows == len(KEEP) + 1


def test_an_older_bertembed_refuses_a_trimmed_file_by_its_format(tmp_path, monkeypatch):
    _full().trimmed(KEEP).save_pretrained(tmp_path)
    monkeypatch.setattr(save, "FORMAT_VERSION", 1)
    with pytest.raises(ValueError, match="a layer saved in format 2 by a newer bertembed"):
        BertEmbeddings.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------ private memory

CHILD = textwrap.dedent(
    """
    import sys, numpy as np, bertembed

    def anon():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    warm = bertembed.BertEmbeddings.from_pretrained(sys.argv[1])  # kept alive: imports, the first call's allocations
    ids = warm.kept_ids[np.random.default_rng(0).integers(0, warm.kept_rows, (1, 64))]
    warm(ids)
    before = anon()
    layer = bertembed.BertEmbeddings.from_pretrained(sys.argv[1], table_dtype=sys.argv[2] or None)
    out = layer(ids)
    print(anon() - before, layer.table_dtype, out.nbytes)
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
@not_under_asan
def test_a_loaded_trimmed_layer_costs_no_private_copy(tmp_path):
    rng = np.random.default_rng(4)
    vocab, hidden = 200_000, 128
    full = BertEmbeddings(rng.standard_normal((vocab, hidden), dtype=np.float32), np.zeros((64, hidden), np.float32))
    small = full.trimmed(np.arange(0, vocab, 2))
    del full
    small.save_pretrained(tmp_path)
    rows = small._tables.tok.data.nbytes  # 51 MB (and a 0.8 MB map)
    del small

    def grown(table_dtype=""):
        res = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path), table_dtype],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        g, dtype, result = res.stdout.split()
        return int(g), dtype, int(result)

    mapped, dtype, result = grown()
    print(f"\ntrimmed layer, {rows / 2**20:.1f} MiB of rows: private memory +{mapped / 2**20:.2f} MiB")
    assert dtype == "float32"
    assert mapped <= result + (2 << 20)
    control, dtype, _ = grown("float16")  # converted at load: a private copy of the rows
    print(f"converted to float16 at load: +{control / 2**20:.2f} MiB")
    assert dtype == "float16" and control >= 0.9 * rows / 2  # (10% for memory freed meanwhile)


# ------------------------------------------------------------------------------ every family (heavy)


@pytest.mark.heavy
def test_every_family_trims_exactly(tmp_path):
    needs("torch", "peers")
    needs("transformers", "peers")
    needs("safetensors.numpy", "hf")
    from helpers.hf_families import VARIANTS, batches, load_config, make_checkpoint

    for variant, (model_type, overrides) in sorted(VARIANTS.items()):
        directory = tmp_path / variant
        make_checkpoint(model_type, directory, **overrides)
        config = load_config(directory)
        full = BertEmbeddings.from_pretrained(directory)
        used = np.unique(np.concatenate([ids.reshape(-1) for ids, _, _ in batches(config)]))
        small = full.trimmed(used)
        small.save_pretrained(tmp_path / f"{variant}-trimmed")
        again = BertEmbeddings.from_pretrained(tmp_path / f"{variant}-trimmed")
        assert again.model_type == model_type and again.position_rule == full.position_rule, variant
        for ids, types, mask in batches(config):
            want = full(ids, types, attention_mask=mask)
            np.testing.assert_array_equal(small(ids, types, attention_mask=mask), want, err_msg=variant)
            np.testing.assert_array_equal(again(ids, types, attention_mask=mask), want, err_msg=variant)
        specials = {config[k] for k in ("pad_token_id", "bos_token_id", "eos_token_id") if config.get(k) is not None}
        assert specials <= set(again.kept_ids.tolist()), variant
        spare = np.setdiff1d(np.arange(full.vocab_size), again.kept_ids)
        if spare.size:
            with pytest.raises(IndexError, match=f"= {int(spare[0])} is not among"):
                again(np.array([[int(spare[0])]]))
