"""Choosing the rows to keep (:mod:`bertembed.trim`): corpus, ids, scripts, unions, coverage.

The script rule's guarantee is tested the way it is stated: random texts made
of the covered characters (every chosen script, Common and Inherited, combining
marks after letters included), encoded by tokenizers of each kind real models
use, give only kept ids; a control shows that the check fails for texts of a
script that was not chosen.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from helpers.extras import needs

tokenizers = needs("tokenizers", "trim")
needs("regex", "trim")

from helpers import trim_tokenizers  # noqa: E402

from bertembed import trim  # noqa: E402
from bertembed._checkpoints.specials import config_special_ids, tokenizer_special_ids  # noqa: E402
from bertembed._vocab import scripts  # noqa: E402

KINDS = [k for k in trim_tokenizers.KINDS if k != "wordpiece" or trim_tokenizers.minilm_dir() is not None]


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokenizers")
    return {kind: trim_tokenizers.build(kind, d) for kind in KINDS}


@pytest.fixture(scope="module")
def loaded(tokenizer_files):
    return {kind: trim.load_tokenizer(path) for kind, path in tokenizer_files.items()}


def _texts(rng, chars, own, marks, n, length=40):
    """Texts of random covered characters, and texts of the chosen scripts' letters with
    combining marks and spaces between (what NFKC composes)."""
    chars, own, marks = sorted(chars), sorted(own), sorted(marks)
    out = ["".join(chars[j] for j in rng.integers(0, len(chars), rng.integers(1, length))) for _ in range(n)]
    for _ in range(n):
        pieces = []
        for _ in range(rng.integers(1, length)):
            r = rng.random()
            if r < 0.6:
                pieces.append(own[rng.integers(len(own))])
            else:
                pieces.append(marks[rng.integers(len(marks))] if r < 0.8 else " ")
        out.append("".join(pieces))
    return out


def _missed(tok, kept_ids, texts):
    kept = np.zeros(tok.vocab_size, bool)
    kept[kept_ids] = True
    found = []
    for text, enc in zip(texts, tok.tokenizer.encode_batch(texts), strict=True):
        miss = [t for i, t in zip(enc.ids, enc.tokens, strict=True) if not kept[i]]
        if miss:
            found.append((text, miss))
    return found


@pytest.mark.parametrize("names", [["Latin"], ["Cyrillic"], ["Greek", "Latin"], ["Han"], ["Arabic"]], ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_every_text_of_the_chosen_scripts_is_covered(loaded, kind, names):
    tok = loaded[kind]
    choice = scripts.choose(tok, names)
    own = set().union(*(scripts.chars_of_script(n) for n in names)) & choice.covered
    marks = scripts.chars_of_script("Inherited") & choice.covered
    texts = _texts(np.random.default_rng(len(kind)), choice.covered, own, marks, 600)
    assert _missed(tok, choice.ids, texts) == []
    assert set(tok.special_ids) <= set(choice.ids.tolist())


@pytest.mark.parametrize("kind", KINDS)
def test_the_coverage_check_can_fail(loaded, kind):
    """The control: Cyrillic texts are not covered by a Latin choice (for a vocabulary with Cyrillic tokens)."""
    tok = loaded[kind]
    latin = scripts.choose(tok, ["Latin"])
    cyrillic = scripts.chars_of_script("Cyrillic")
    texts = _texts(np.random.default_rng(0), cyrillic, cyrillic, set("\u0301"), 200)
    assert _missed(tok, latin.ids, texts)


@pytest.mark.parametrize("kind", KINDS)
def test_a_script_choice_keeps_less_than_everything(loaded, kind):
    tok = loaded[kind]
    cyr = scripts.choose(tok, ["Cyrillic"])
    both = scripts.choose(tok, ["Cyrillic", "Latin"])
    assert 0 < cyr.ids.size < both.ids.size < tok.vocab_size
    assert set(cyr.ids.tolist()) <= set(both.ids.tolist())


def test_hypothesis_texts_are_covered(loaded):
    hypothesis = needs("hypothesis", "test")
    st = hypothesis.strategies
    tok = loaded["unigram"]
    choice = scripts.choose(tok, ["Latin", "Greek"])
    kept = set(choice.ids.tolist())
    alphabet = sorted(choice.covered)

    @hypothesis.settings(max_examples=300, deadline=None)
    @hypothesis.given(st.text(alphabet=st.sampled_from(alphabet), min_size=1, max_size=60))
    def check(text):
        assert set(tok.tokenizer.encode(text).ids) <= kept, text

    check()


def test_nfkc_common_characters_that_become_letters_are_outside_the_guarantee(loaded):
    tok = loaded["unigram"]
    choice = scripts.choose(tok, ["Cyrillic"])
    assert choice.outside > 0
    assert "\u24d0" not in choice.covered  # ⓐ: NFKC makes it a Latin a
    assert "!" in choice.covered and "\u0301" in choice.covered and "\u0436" in choice.covered


def test_byte_level_tokens_are_judged_by_their_bytes():
    rule = scripts._ByteRule(scripts.chars_of_script("Cyrillic") | {" "})
    zhe = "ж".encode()  # d0 b6
    assert rule(zhe) and rule(zhe[:1]) and rule(zhe[1:]) and rule(b" " + zhe * 2 + zhe[:1])
    assert not rule("é".encode()) and not rule(b"a") and not rule(b"\xff") and not rule(b"\xb6\xb6")
    euro = scripts._ByteRule({"€"})  # e2 82 ac: its middle byte alone is a piece of it
    assert euro(b"\x82") and euro(b"\x82\xac") and not euro(b"\xac\x82")
    alphabet = scripts.byte_alphabet()
    assert len(alphabet) == 256 and alphabet["Ġ"] == 0x20 and alphabet["a"] == 0x61


@pytest.mark.parametrize("name", ["Klingon", "Latin]", "", "Latin Extended"])
def test_unknown_script_names(loaded, name):
    with pytest.raises(ValueError, match=r"unknown Unicode script|no script given"):
        scripts.choose(loaded["unigram"], [name])


def test_aliases_of_script_names_are_accepted(loaded):
    want = scripts.choose(loaded["unigram"], ["Latin"]).ids
    for alias in ("latin", "Latn"):
        np.testing.assert_array_equal(scripts.choose(loaded["unigram"], [alias]).ids, want)


# ------------------------------------------------------------------------------ select


@pytest.fixture
def corpus(tmp_path):
    lines = trim_tokenizers.sentences()
    train, held = tmp_path / "train.txt", tmp_path / "held.txt"
    # Held out: every fourth text (English first in the file, other languages after).
    train.write_text("\n".join(t for i, t in enumerate(lines) if i % 4 != 1) + "\n\n   \n", encoding="utf-8")
    held.write_text("\n".join(lines[1::4]) + "\n", encoding="utf-8")
    return train, held, lines


def _counts(tok, texts):
    counts = np.zeros(tok.vocab_size, np.int64)
    for e in tok.tokenizer.encode_batch(texts):
        np.add.at(counts, e.ids, 1)
    return counts


@pytest.mark.parametrize("kind", ["unigram", "byte-bpe"])
def test_corpus_choice_and_min_count(loaded, corpus, kind):
    tok = loaded[kind]
    train, _, lines = corpus
    counts = _counts(tok, [t for i, t in enumerate(lines) if i % 4 != 1])
    for min_count in (1, 3):
        choice = trim.select(tok, corpus=train, min_count=min_count)
        want = np.union1d(np.flatnonzero(counts >= min_count), tok.special_ids)
        np.testing.assert_array_equal(choice.ids, want)
        assert choice.from_corpus == int((counts >= min_count).sum())
        assert choice.corpus.tokens == counts.sum()
        assert choice.corpus.covered_tokens == counts[want].sum()
    assert trim.select(tok, corpus=[train]).corpus.token_share == 1.0


def test_union_of_corpus_ids_and_scripts(loaded, corpus):
    tok = loaded["unigram"]
    train = corpus[0]
    by_corpus = trim.select(tok, corpus=train).ids
    by_script = trim.select(tok, scripts="Greek").ids
    union = trim.select(tok, corpus=[train], ids=[7000, 7001, 7000], scripts=["Greek"])
    np.testing.assert_array_equal(union.ids, np.union1d(np.union1d(by_corpus, by_script), [7000, 7001]))
    assert union.from_ids == 2 and union.from_scripts == by_script.size
    assert union.special_ids == tok.special_ids == (0, 1, 2, 3)  # the added specials


def test_ids_alone_need_no_tokenizer():
    choice = trim.select(ids=np.array([[5, 3], [3, 9]], np.uint8))
    assert choice.ids.tolist() == [3, 5, 9] and choice.special_ids == () and choice.corpus is None


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({}, ValueError, "nothing to choose from"),
        ({"corpus": "x.txt"}, ValueError, "needs the model's tokenizer"),
        ({"scripts": "Latin"}, ValueError, "needs the model's tokenizer"),
        ({"ids": [1], "min_count": 0}, ValueError, "min_count must be a positive int"),
        ({"ids": [1.5]}, TypeError, "ids must be integer token ids"),
        ({"ids": [-3, 4]}, ValueError, "negative id: -3"),
    ],
)
def test_select_refusals(kwargs, error, match):
    with pytest.raises(error, match=match):
        trim.select(**kwargs)


def test_corpus_file_errors(loaded, tmp_path):
    tok = loaded["unigram"]
    with pytest.raises(FileNotFoundError, match="no such text file"):
        trim.select(tok, corpus=tmp_path / "missing.txt")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        trim.select(tok, corpus=tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nnot \xff utf-8\n")
    with pytest.raises(ValueError, match=r"bad.txt: line 2 is not UTF-8"):
        trim.select(tok, corpus=bad)


def test_progress_reports_bytes(loaded, corpus):
    seen = []
    trim.select(loaded["unigram"], corpus=corpus[0], progress=lambda d, t, label: seen.append((d, t, label)))
    size = corpus[0].stat().st_size
    assert seen[-1] == (size, size, "counting corpus tokens")


# ------------------------------------------------------------------------------ coverage


@pytest.mark.parametrize("kind", ["unigram", "bpe-eow"])
def test_held_out_coverage(loaded, corpus, kind):
    tok = loaded[kind]
    train, held, lines = corpus
    kept = trim.select(tok, corpus=train).ids
    got = trim.coverage(tok, kept, [held])
    texts = lines[1::4]
    mask = np.zeros(tok.vocab_size, bool)
    mask[kept] = True
    encodings = tok.tokenizer.encode_batch(texts)
    assert got.texts == len(texts)
    assert got.tokens == sum(len(e.ids) for e in encodings)
    assert got.covered_tokens == sum(int(mask[e.ids].sum()) for e in encodings)
    assert got.covered_texts == sum(bool(mask[e.ids].all()) for e in encodings)
    assert 0 < got.text_share < 1 and 0 < got.token_share < 1
    everything = trim.coverage(tok, np.arange(tok.vocab_size), held)
    assert everything.token_share == everything.text_share == 1.0


def test_coverage_refusals(loaded, tmp_path):
    with pytest.raises(TypeError, match="keep_ids must be integer"):
        trim.coverage(loaded["unigram"], [0.5], tmp_path / "x")
    with pytest.raises(ValueError, match="negative id"):
        trim.coverage(loaded["unigram"], [-1], tmp_path / "x")


# ------------------------------------------------------------------------------ ids files, tokenizer files


def test_read_ids(tmp_path):
    text = tmp_path / "ids.txt"
    text.write_text("# header\n5, 6 ,7\n\n 9 # trailing\n", encoding="utf-8")
    assert trim.read_ids(text).tolist() == [5, 6, 7, 9]
    npy = tmp_path / "ids.npy"
    np.save(npy, np.array([[3, 1], [2, 2]], np.int16))
    assert trim.read_ids(npy).tolist() == [3, 1, 2, 2]
    np.save(npy, np.array([1.5]))
    with pytest.raises(ValueError, match="token ids must be integers, got dtype float64"):
        trim.read_ids(npy)
    text.write_text("5\n6 seven\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"ids.txt: line 2: 'seven' is not a token id"):
        trim.read_ids(text)
    with pytest.raises(IsADirectoryError):
        trim.read_ids(tmp_path)
    with pytest.raises(FileNotFoundError):
        trim.read_ids(tmp_path / "missing.txt")


def test_tokenizer_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such tokenizer file"):
        trim.load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"not a tokenizer\.json"):
        trim.load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "Nonsense"}}), encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read the tokenizer"):
        trim.load_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(TypeError, match="tokenizer must be the path"):
        trim.load_tokenizer(42)


def test_missing_optional_packages_are_named(monkeypatch, tokenizer_files):
    scripts.chars_of_script.cache_clear()
    monkeypatch.setitem(sys.modules, "regex", None)
    with pytest.raises(ImportError, match=r"'regex' package: pip install 'bertembed\[trim\]'"):
        trim.select(tokenizer_files["unigram"], scripts="Latin")
    scripts.chars_of_script.cache_clear()
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"'tokenizers' package: pip install 'bertembed\[trim\]'"):
        trim.load_tokenizer(tokenizer_files["unigram"])


# ------------------------------------------------------------------------------ special tokens


def test_special_ids_of_configs_and_tokenizers(tokenizer_files):
    assert config_special_ids({"pad_token_id": 1, "eos_token_id": [2, 9], "mask_token_id": True}) == (1, 2, 9)
    assert config_special_ids({"pad_token_id": 1, "bos_token_id": 500}, vocab=100) == (1,)
    assert config_special_ids({"pad_token_id": "1", "cls_token_id": -1}) == ()
    spec = json.loads(tokenizer_files["unigram"].read_text(encoding="utf-8"))
    assert tokenizer_special_ids(spec) == (0, 1, 2, 3)  # the four added specials (unk among them)
    roberta = {
        "added_tokens": [{"id": 50264, "content": "<mask>", "special": True}],
        "model": {"type": "BPE", "vocab": {}},
        "post_processor": {
            "type": "Sequence",
            "processors": [{"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}],
        },
    }
    assert tokenizer_special_ids(roberta) == (0, 2, 50264)
    assert tokenizer_special_ids(roberta, vocab=100) == (0, 2)


def test_module_docstring_examples():
    import doctest

    import bertembed._checkpoints.specials
    import bertembed.trim

    for module in (bertembed.trim, bertembed._checkpoints.specials):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 0 and result.failed == 0
