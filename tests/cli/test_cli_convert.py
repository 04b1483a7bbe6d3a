"""``bertembed convert``: load, convert, save; the saved layer maps back to the same results."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
from helpers.windows import refuse_mapped_files
from test_cli import assert_error_line, run, write_checkpoint

from bertembed import BertEmbeddings
from bertembed._checkpoints import mapped


@pytest.fixture
def model(tmp_path):
    directory = tmp_path / "model"
    write_checkpoint(directory, vocab=300, hidden=40)
    return directory


@pytest.mark.parametrize("table_dtype", ["int8", "bfloat16", "float16", "float32"])
def test_convert_saves_what_from_pretrained_would_convert(model, tmp_path, capsys, table_dtype):
    out = tmp_path / "out"
    rc, stdout, stderr = run(capsys, "convert", model, out, "--table-dtype", table_dtype)
    assert rc == 0, stderr
    assert f"token table {table_dtype} (300 x 40)" in stdout
    saved = BertEmbeddings.from_pretrained(out)
    direct = BertEmbeddings.from_pretrained(model, table_dtype=table_dtype)
    assert saved.table_dtype == table_dtype and saved.model_type == "bert"
    ids = np.random.default_rng(0).integers(0, 300, (3, 11))
    segs = np.random.default_rng(1).integers(0, 2, (3, 11))
    np.testing.assert_array_equal(saved(ids, segs), direct(ids, segs))
    # The progress bar (stderr is not a terminal here: a line per tenth).
    if table_dtype != "float32":
        assert f"converting token_embeddings to {table_dtype} [" in stderr
        assert "100%" in stderr
    assert "writing model.safetensors [" in stderr


def test_quiet_and_threads(model, tmp_path, capsys):
    rc, _, stderr = run(
        capsys, "convert", model, tmp_path / "out", "--table-dtype", "int8", "--quiet", "--threads", "1"
    )
    assert rc == 0 and stderr == ""


def test_every_table_is_converted_to_a_float_dtype(model, tmp_path, capsys):
    rc, _, stderr = run(capsys, "convert", model, tmp_path / "out", "--table-dtype", "float16")
    assert rc == 0
    assert "converting token_embeddings to float16" in stderr
    assert "100%  318/318 rows" in stderr  # one bar over the three tables' rows
    layer = BertEmbeddings.from_pretrained(tmp_path / "out")
    assert {t.dtype_name for t in (layer._tables.tok, layer._tables.pos, layer._tables.seg)} == {"float16"}


def test_a_saved_layer_can_be_converted_again(model, tmp_path, capsys):
    assert run(capsys, "convert", model, tmp_path / "a", "--table-dtype", "bfloat16")[0] == 0
    assert run(capsys, "convert", tmp_path / "a", tmp_path / "b", "--table-dtype", "int8")[0] == 0
    again = BertEmbeddings.from_pretrained(tmp_path / "b")
    assert again.table_dtype == "int8" and again.model_type == "bert"
    del again  # (its map of b would keep Windows from replacing b's files)
    gc.collect()
    # Converting into an earlier output replaces it.
    assert run(capsys, "convert", model, tmp_path / "b", "--table-dtype", "float16")[0] == 0
    assert BertEmbeddings.from_pretrained(tmp_path / "b").table_dtype == "float16"


def test_refusals(model, tmp_path, capsys):
    rc, _, err = run(capsys, "convert", model, model, "--table-dtype", "int8")
    assert rc == 1
    assert_error_line(err, "is the model's own directory")
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    rc, _, err = run(capsys, "convert", model, other, "--table-dtype", "int8")
    assert rc == 1
    assert_error_line(err, "holds a config.json that is not a saved bertembed layer")
    rc, _, err = run(capsys, "convert", tmp_path / "missing", tmp_path / "out", "--table-dtype", "int8")
    assert rc == 1
    assert_error_line(err, "missing")
    with pytest.raises(SystemExit):
        run(capsys, "convert", model, tmp_path / "out", "--table-dtype", "int4")


def test_nan_in_the_token_table_is_one_error_line(tmp_path, capsys):
    directory = tmp_path / "model"
    write_checkpoint(directory, vocab=50, hidden=8)
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(directory / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"][17, 3] = np.nan
    save_file(tensors, str(directory / "model.safetensors"))
    rc, _, err = run(capsys, "convert", directory, tmp_path / "out", "--table-dtype", "int8", "-q")
    assert rc == 1
    assert_error_line(err, "token_embeddings row 17")
    assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.parametrize("how", ["platform", "rename refused"])
def test_converting_into_an_out_dir_a_live_layer_maps(model, tmp_path, capsys, monkeypatch, how):
    """Windows' rule (played: the platform's check, or the rename refused): one error line naming the
    file, OUT_DIR and the serving layer untouched; converting again once the layer is gone works."""
    out = tmp_path / "out"
    assert run(capsys, "convert", model, out, "--table-dtype", "bfloat16")[0] == 0
    served = BertEmbeddings.from_pretrained(out)
    ids = np.random.default_rng(0).integers(0, 300, (3, 11))
    before = served(ids)
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    if how == "platform":
        monkeypatch.setattr(mapped, "REPLACE_REFUSED", True)
    else:
        refuse_mapped_files(monkeypatch)
    rc, _, err = run(capsys, "convert", model, out, "--table-dtype", "int8", "--quiet")
    assert rc == 1
    assert_error_line(
        err, f"{out / 'model.safetensors'}: cannot replace this file: a live layer in this process maps it"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    np.testing.assert_array_equal(served(ids), before)
    if how == "platform":  # refused before converting anything
        rc, _, err = run(capsys, "convert", model, out, "--table-dtype", "int8")
        assert rc == 1 and "converting token_embeddings" not in err
    del served
    gc.collect()
    assert run(capsys, "convert", model, out, "--table-dtype", "int8", "--quiet")[0] == 0
    assert BertEmbeddings.from_pretrained(out).table_dtype == "int8"
