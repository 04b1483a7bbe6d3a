"""A model's own ``tokenizer.json``, loaded once for choosing rows: the tokenizer and its file's contents."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._checkpoints.specials import TOKENIZER_NAME, read_tokenizer_json, tokenizer_special_ids


@dataclass(frozen=True)
class ModelTokenizer:
    """A ``tokenizers.Tokenizer`` (padding and truncation off) and what its file says.

    Attributes
    ----------
    path : Path
        The ``tokenizer.json`` file.
    tokenizer : tokenizers.Tokenizer
    spec : dict
        The file's parsed JSON (model type, vocabulary, added tokens...).
    vocab_size : int
        Ids the tokenizer can give (added tokens included).
    special_ids : tuple of int
        Its special tokens (see :func:`bertembed._checkpoints.specials.tokenizer_special_ids`).
    unk_id : int or None
        The id of its unknown token, if it has one.
    """

    path: Path
    tokenizer: Any
    spec: dict[str, Any]
    vocab_size: int
    special_ids: tuple[int, ...]
    unk_id: int | None


def _unk_id(tokenizer: Any, spec: dict[str, Any]) -> int | None:
    model = spec["model"]
    unk = model.get("unk_token")
    if isinstance(unk, str):
        found = tokenizer.token_to_id(unk)
        return None if found is None else int(found)
    unk_id = model.get("unk_id")  # Unigram
    return unk_id if isinstance(unk_id, int) and not isinstance(unk_id, bool) else None


def tokenizer_file(path: str | os.PathLike[str]) -> Path:
    """`path` itself, or the ``tokenizer.json`` in it when it is a directory."""
    p = Path(os.fspath(path)).expanduser()
    return p / TOKENIZER_NAME if p.is_dir() else p


def load(tokenizer: Any) -> ModelTokenizer:
    """`tokenizer` as a :class:`ModelTokenizer`: a ``tokenizer.json`` path, a directory holding one,
    or one already loaded.

    Raises
    ------
    ImportError
        The ``tokenizers`` package is not installed.
    FileNotFoundError
        No such file.
    ValueError
        The file is not a tokenizer the ``tokenizers`` package reads.
    """
    if isinstance(tokenizer, ModelTokenizer):
        return tokenizer
    if not isinstance(tokenizer, (str, os.PathLike)):
        raise TypeError(f"tokenizer must be the path of a tokenizer.json, got {type(tokenizer).__name__}")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError(
            "choosing rows by corpus or by script reads the model's tokenizer.json with the 'tokenizers' "
            "package: pip install 'bertembed[trim]'"
        ) from None
    path = tokenizer_file(tokenizer)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such tokenizer file (the model's {TOKENIZER_NAME})")
    spec = read_tokenizer_json(path)
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises a bare Exception
        raise ValueError(f"{path}: cannot read the tokenizer: {exc}") from None
    tok.no_truncation()
    tok.no_padding()
    ids = tok.get_vocab(with_added_tokens=True).values()
    vocab = max(ids, default=-1) + 1
    return ModelTokenizer(path, tok, spec, vocab, tokenizer_special_ids(spec, vocab), _unk_id(tok, spec))
