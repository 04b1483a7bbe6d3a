"""The model's tokenizer as the artifact and the server use it (the ``tokenizers`` package)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer, normalizers

if TYPE_CHECKING:
    from .model_config import SentenceConfig

#: The tokenizer's files an artifact keeps (those the model has); the server reads tokenizer.json.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def place_tokenizer(transformer_dir: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy the tokenizer's files (:data:`TOKENIZER_FILES`, those present) from the model into ``target``."""
    source, target = Path(transformer_dir), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)


def load_tokenizer(path: str | os.PathLike[str], *, do_lower_case: bool) -> Tokenizer:
    """The model's ``tokenizer.json``, without truncation or padding (the pipeline does both).

    With ``do_lower_case`` a Lowercase normaliser is put in front of the
    file's own, unless it already has one (sentence-transformers' rule).

    Examples
    --------
    >>> tok = load_tokenizer("out/transformer/tokenizer.json", do_lower_case=False)  # doctest: +SKIP
    >>> tok.encode("Hello world", add_special_tokens=False).ids  # doctest: +SKIP
    [7592, 2088]
    """
    tokenizer = Tokenizer.from_file(str(path))
    if do_lower_case:
        current: Any = tokenizer.normalizer
        parts: list[Any] = list(current) if isinstance(current, normalizers.Sequence) else [current]  # type: ignore[call-overload]
        if not any(isinstance(n, normalizers.Lowercase) for n in parts):
            tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase(), *(n for n in parts if n is not None)])
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def batch_tokenizer(
    path: str | os.PathLike[str], *, max_seq_length: int, do_lower_case: bool, pad_id: int, pad_token: str
) -> Tokenizer:
    """:func:`load_tokenizer` that truncates (from the right) and pads a batch itself: the build checks' reference."""
    tokenizer = load_tokenizer(path, do_lower_case=do_lower_case)
    tokenizer.enable_truncation(max_length=max_seq_length, strategy="longest_first", direction="right")
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token, direction="right")
    return tokenizer


def export_tokenizer(config: SentenceConfig, pad_id: int, pad_token: str) -> Tokenizer:
    """:func:`batch_tokenizer` of a sentence-transformers model's transformer (``config``, read by
    :func:`~.model_config.read_sentence_config`): what both exports check and calibrate with."""
    return batch_tokenizer(
        Path(config.transformer_dir) / "tokenizer.json",
        max_seq_length=config.max_seq_length,
        do_lower_case=config.do_lower_case,
        pad_id=pad_id,
        pad_token=pad_token,
    )


def special_tokens(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The special token ids the tokenizer puts before and after a text (``[CLS]`` and ``[SEP]`` for BERT)."""
    encoding = tokenizer.encode("a", add_special_tokens=True)
    ids, special = encoding.ids, encoding.special_tokens_mask
    first = next((k for k, flag in enumerate(special) if not flag), len(ids))
    last = max((k for k, flag in enumerate(special) if not flag), default=len(ids) - 1)
    prefix, suffix = ids[:first], ids[last + 1 :]
    if len(prefix) + len(suffix) != tokenizer.num_special_tokens_to_add(False):
        raise ValueError("the tokenizer's special tokens are not all before and after the text")
    return list(prefix), list(suffix)


def pad_token_of(tokenizer_path: str | os.PathLike[str], model_config: dict) -> tuple[int, str]:
    """The padding id and token: the tokenizer file's, else the model config's pad_token_id."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    if tokenizer.padding is not None:
        return int(tokenizer.padding["pad_id"]), str(tokenizer.padding["pad_token"])
    pad_id = int(model_config.get("pad_token_id") or 0)
    return pad_id, tokenizer.id_to_token(pad_id) or "[PAD]"


#: A text of at most this many characters per token of room is tokenized whole: it costs no more
#: than a text that fills the model. Longer ones are cut first (:func:`bounded_text`).
CHARS_PER_TOKEN = 16
#: How far the piece may grow (x its first size) to reach a word boundary before a word is cut.
MAX_GROWTH = 64


def bounded_text(tokenizer: Tokenizer, text: str, room: int, direction: str = "right") -> tuple[str, bool]:
    """The part of `text` that yields the same first (or last) `room` tokens, and whether it was cut.

    The pre-tokenizers of WordPiece, SentencePiece and byte-level BPE models
    split at whitespace, and nothing crosses it: the words before a run of
    whitespace give the same tokens alone as inside the whole text.
    So when a prefix that ends at a whitespace boundary already gives more
    than `room` tokens, truncating it to `room` gives exactly what
    truncating the whole text does, and a 4 MB text costs what a
    max-length one costs. The piece starts at `CHARS_PER_TOKEN` x `room`
    characters and grows fourfold until it gives more than `room` tokens
    (words that give no token, such as control characters, need more
    characters), or is the whole text. With ``direction="left"`` the same
    holds for suffixes, which keep the whitespace before their first word (a
    byte-level BPE tokenizer marks a word after a space). A text with no
    whitespace for `MAX_GROWTH` times the first piece's length (one "word"
    of over 16 KiB per token of room) is cut inside that word: only then may
    the tokens differ from the whole text's.

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer
        Without truncation or padding.
    text : str
    room : int
        The tokens the model takes besides its special tokens.
    direction : {"right", "left"}
        Which end truncation cuts: the piece is a prefix (right) or a suffix (left).

    Returns
    -------
    str
        The text, or its piece.
    bool
        Whether it was cut (then it gives more than `room` tokens).

    Examples
    --------
    >>> tok = Tokenizer.from_file("tokenizer.json")  # doctest: +SKIP
    >>> piece, cut = bounded_text(tok, "word " * 800_000, 254)  # doctest: +SKIP
    >>> len(piece), cut  # doctest: +SKIP
    (4064, True)
    """
    size = max(1, room) * CHARS_PER_TOKEN
    cap = size * MAX_GROWTH
    while size < len(text):
        window = text[:size] if direction == "right" else text[len(text) - size :]
        edge = _run_start(window, _last_space(window)) if direction == "right" else _first_space(window)
        if edge <= 0 and size < cap:  # no word boundary yet: a longer window
            size *= 4
            continue
        if edge <= 0:  # one word of more than `cap` characters: cut inside it
            piece = window
        else:
            piece = window[:edge] if direction == "right" else window[edge:]
        if len(tokenizer.encode(piece, add_special_tokens=False).ids) > room:
            return piece, True
        size *= 4
    return text, False


def _last_space(piece: str) -> int:
    """Index of the last whitespace character of `piece` (any Unicode space), or -1."""
    for k in range(len(piece) - 1, -1, -1):
        if piece[k].isspace():
            return k
    return -1


def _run_start(piece: str, k: int) -> int:
    """Where the run of whitespace that holds ``piece[k]`` starts (-1 stays -1).

    A prefix ends before a whole run: a byte-level BPE tokenizer keeps a run
    of spaces as one word, whose tokens depend on its length (20 spaces gave
    16 + 4, their first 15 gave 8 + 7).
    """
    while k > 0 and piece[k - 1].isspace():
        k -= 1
    return k


def _first_space(piece: str) -> int:
    """Index of the first whitespace character of `piece` (any Unicode space), or -1."""
    for k, char in enumerate(piece):
        if char.isspace():
            return k
    return -1
