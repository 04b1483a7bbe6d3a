"""bertembed.serve.artifact.reduced: a trimmed layer's tokenizer reduced to the pieces that can matter.

The reduction must give every text the ids the whole tokenizer gives when the
layer keeps them all, and an id the layer does not keep whenever the whole
tokenizer does (the rule "error" then refuses both). Checked on a small
Unigram tokenizer built here (every case, and hypothesis's texts) and on
XLM-R's real 250,002-piece tokenizer (multilingual-e5-small's, when
``BERTEMBED_E5_TOKENIZER_DIR`` names it: ``.ci/fetch-e5-tokenizer.sh``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers", reason='needs tokenizers: pip install "bertembed[serve]"')
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bertembed.serve.artifact.reduced import NotReducible, reduce_tokenizer  # noqa: E402
from bertembed.serve.artifact.tokens import load_tokenizer  # noqa: E402

SPECIALS = ["<unk>", "<s>", "</s>"]
#: Pieces of the small tokenizer: words of two alphabets, and one piece per character.
WORDS = ["▁the", "▁cat", "▁sat", "▁cats", "at", "he", "▁mat", "▁дом", "▁кот", "ом", "от", "▁да"]


def _small(path: Path, *, byte_fallback: bool = False, singles: bool = True) -> Path:
    """A Unigram tokenizer.json (Metaspace pre-tokenizer) over WORDS and their characters."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    chars = sorted({c for w in WORDS for c in w})
    pieces = [*SPECIALS, *WORDS, *(chars if singles else [])]
    vocab = [
        (p, 0.0 if p in SPECIALS else -1.0 - len(WORDS) + k / 10 - 3 * (len(p) == 1)) for k, p in enumerate(pieces)
    ]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=byte_fallback))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(path))
    return path


def _ids(path: Path, texts: list[str]) -> list[list[int]]:
    tok = load_tokenizer(path, do_lower_case=False)
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def _kept_latin(path: Path) -> np.ndarray:
    vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    latin = [i for i, (p, _) in enumerate(vocab) if all(c == "▁" or c.isascii() for c in p)]
    return np.array(sorted(set(latin) | {0, 1, 2}), np.int64)


def _agree(full: list[list[int]], reduced: list[list[int]], kept: np.ndarray) -> None:
    mask = np.zeros(10**6, dtype=bool)
    mask[kept] = True
    for a, b in zip(full, reduced, strict=True):
        if all(mask[i] for i in a):
            assert a == b
        else:
            assert not all(mask[i] for i in b), (a, b)


def test_covered_texts_get_the_same_ids_and_uncovered_ones_are_refused_by_both(tmp_path: Path) -> None:
    path = _small(tmp_path / "tokenizer.json")
    whole = tmp_path / "whole.json"
    shutil.copy(path, whole)
    kept = _kept_latin(path)
    texts = ["the cat sat", "the cats sat on the mat", "кот", "the дом", "thé cat", "", "at he"]
    counts = reduce_tokenizer(path, kept.tolist(), texts, do_lower_case=False)
    assert counts["pieces"] == len(json.loads(whole.read_text(encoding="utf-8"))["model"]["vocab"])
    assert counts["kept_pieces"] < counts["pieces"]
    assert counts["bytes_after"] == path.stat().st_size < counts["bytes_before"]
    full, reduced = _ids(whole, texts), _ids(path, texts)
    _agree(full, reduced, kept)
    assert full[0] == reduced[0] and full[1] == reduced[1]  # covered: same ids
    vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    assert "▁дом" not in {p for p, _ in vocab}  # a piece that can only be refused is gone


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet="thecasmдомкт ▁é", max_size=40))  # noqa: RUF001 (Cyrillic on purpose)
def test_any_text_of_the_alphabet_agrees(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    work = tmp_path_factory.mktemp("any")
    path = _small(work / "tokenizer.json")
    whole = work / "whole.json"
    shutil.copy(path, whole)
    kept = _kept_latin(path)
    reduce_tokenizer(path, kept.tolist(), [], do_lower_case=False)
    _agree(_ids(whole, [text]), _ids(path, [text]), kept)


def test_a_tokenizer_that_cannot_be_reduced_is_left_as_it_was(tmp_path: Path) -> None:
    fallback = _small(tmp_path / "fallback.json", byte_fallback=True)
    before = fallback.read_bytes()
    with pytest.raises(NotReducible, match="byte fallback"):
        reduce_tokenizer(fallback, [0, 1, 2, 3], [], do_lower_case=False)
    assert fallback.read_bytes() == before
    no_singles = _small(tmp_path / "no-singles.json", singles=False)
    with pytest.raises(NotReducible, match="characters of the vocabulary have no one-character piece"):
        reduce_tokenizer(no_singles, [0, 1, 2, 3], [], do_lower_case=False)
    from tokenizers import Tokenizer, models

    wordpiece = tmp_path / "wordpiece.json"
    Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(wordpiece))
    with pytest.raises(NotReducible, match="a WordPiece tokenizer"):
        reduce_tokenizer(wordpiece, [0, 1], [], do_lower_case=False)
    assert not list(tmp_path.glob("*.reduced"))


def _e5() -> Path:
    where = os.environ.get("BERTEMBED_E5_TOKENIZER_DIR")
    if not where or not (Path(where) / "tokenizer.json").is_file():
        pytest.skip("no XLM-R tokenizer: export BERTEMBED_E5_TOKENIZER_DIR=$(bash .ci/fetch-e5-tokenizer.sh)")
    return Path(where) / "tokenizer.json"


MIXED = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings of short queries, served over HTTP.",
    "Größere Straßen führen über die Brücke.",
    "Le garçon a mangé une crème brûlée à Noël.",
    "Москва — столица России.",
    "東京は日本の首都です。",
    "Ελληνικά γράμματα και αριθμοί 12345.",
    "emoji 🚀 and symbols ∑ ≠ ∞",
    "mixed English and Deutsch: schön",
    "",
]


def test_xlm_r_s_tokenizer_reduced_for_an_english_trim(tmp_path: Path) -> None:
    source = _e5()
    path = tmp_path / "tokenizer.json"
    shutil.copy(source, path)
    english = [t for t in MIXED if t.isascii()]
    full_tok = load_tokenizer(source, do_lower_case=False)
    kept = np.unique(np.concatenate([np.array(e.ids) for e in full_tok.encode_batch(english)]))
    counts = reduce_tokenizer(path, kept.tolist(), MIXED, do_lower_case=False)
    assert counts["pieces"] == 250_002
    assert counts["kept_pieces"] < counts["pieces"] // 2
    assert counts["bytes_after"] < counts["bytes_before"] // 2
    full = [e.ids for e in full_tok.encode_batch(MIXED)]
    reduced = [e.ids for e in load_tokenizer(path, do_lower_case=False).encode_batch(MIXED)]
    _agree(full, reduced, kept)
    assert [f == r for f, r in zip(full, reduced, strict=True)][:2] == [True, True]


def test_a_trimmed_xlm_r_export_reduces_its_tokenizer_and_answers_as_the_whole_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bertembed export --trim-corpus ... --unknown error``: the default reduced tokenizer against
    ``--tokenizer full``, in the service's pipeline: the same vectors, bit for bit, for every covered
    text; the same inputs refused; the rule "unk" refused with the reason."""
    pytest.importorskip("torch", reason='needs torch: pip install "bertembed[export]"')
    pytest.importorskip("sentence_transformers", reason='needs sentence-transformers: pip install "bertembed[peers]"')
    import family_models

    from bertembed._cli import main
    from bertembed.serve.server.pipeline import SentenceEmbedder, TrimmedToken

    model = family_models.build("xlm-roberta", tmp_path / "model")
    lines = family_models.sentences()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines[::2]) + "\n", encoding="utf-8")
    outs = {}
    for choice in ("reduced", "full"):
        out = tmp_path / choice
        argv = ["export", str(model), str(out), "--trim-corpus", str(corpus), "--tokenizer", choice]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert ("tokenizer reduced to" in printed) == (choice == "reduced"), printed
        outs[choice] = out
    service = json.loads((outs["reduced"] / "service.json").read_text(encoding="utf-8"))
    assert service["tokenizer"]["reduced"] is True
    assert service["tokenizer"]["kept_pieces"] < service["tokenizer"]["pieces"]
    assert "tokenizer" not in json.loads((outs["full"] / "service.json").read_text(encoding="utf-8"))

    reduced, full = SentenceEmbedder(outs["reduced"]), SentenceEmbedder(outs["full"])
    reduced.start()
    full.start()
    assert reduced.layer_info()["unknown_rules"] == ["error"]
    assert reduced.layer_info()["tokenizer"] == "reduced" and full.layer_info()["tokenizer"] == "full"
    covered, refused = [], []
    for text in [*lines, "Ünïcödé façade, 東京 and 🚀", "x", ""]:
        try:
            full.encode_texts([text])
        except TrimmedToken:
            refused.append(text)
            with pytest.raises(TrimmedToken):
                reduced.encode_texts([text])
        else:
            covered.append(text)
    assert covered and refused
    np.testing.assert_array_equal(reduced.encode_texts(covered), full.encode_texts(covered))
    with pytest.raises(TrimmedToken) as both:
        reduced.encode_texts([covered[0], refused[0], covered[-1], refused[-1]])
    assert [u.index for u in both.value.inputs] == [1, 3]
    ids = reduced.tokenize([covered[0]])
    with pytest.raises(ValueError, match=r"tokenizer is reduced .* --tokenizer full keeps every piece"):
        reduced.resolve_unknown(ids, "unk")
