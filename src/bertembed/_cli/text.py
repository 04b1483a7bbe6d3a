"""Text to token ids and token types with the model's own ``tokenizer.json``.

The ids and token types are exactly what the ``tokenizers`` package gives for
``Tokenizer.from_file(".../tokenizer.json").encode(text, pair)``: the file's
normaliser, pre-tokeniser and model, then its post-processor, which adds the
family's special tokens and token types (BERT and DeBERTa-v2 ``[CLS] a [SEP]
b [SEP]`` with types 0 then 1; RoBERTa, XLM-R, CamemBERT and MPNet ``<s> a
</s></s> b </s>`` with types all 0; ModernBERT ``[CLS] a [SEP] b [SEP]``).
Nothing here knows a family: the file says it all. The file's padding and
truncation settings are switched off, as ``transformers`` does for
``tokenizer(text, pair)`` by default: one text (or pair) gives its own tokens,
no pads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import CLIError

#: The file name of a Hugging Face fast tokenizer, next to config.json.
TOKENIZER_NAME = "tokenizer.json"


@dataclass(frozen=True)
class Encoded:
    """One text (or pair) as the model's tokenizer encodes it."""

    tokens: list[str]
    ids: list[int]
    type_ids: list[int]


def tokenizer_path(model: Path) -> Path:
    """The ``tokenizer.json`` of a checkpoint directory (or next to a checkpoint file)."""
    directory = model if model.is_dir() else model.parent
    return directory / TOKENIZER_NAME


def load_tokenizer(model: Path) -> Any:
    """The model's ``tokenizers.Tokenizer``, with padding and truncation off.

    Raises
    ------
    CLIError
        ``tokenizers`` is not installed, or the file is missing or unreadable.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CLIError(
            "--text needs the optional 'tokenizers' package (pip install tokenizers); or pass token ids with --ids"
        ) from None
    path = tokenizer_path(model)
    if not path.is_file():
        raise CLIError(f"{path}: not found; --text needs the model's {TOKENIZER_NAME} (or use --ids)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises a bare Exception
        raise CLIError(f"{path}: cannot read the tokenizer: {exc}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def encode(tokenizer: Any, text: str, pair: str | None = None) -> Encoded:
    """``text`` (and ``pair``) encoded with the tokenizer's own special tokens and token types.

    Examples
    --------
    >>> from tokenizers import Tokenizer, models, pre_tokenizers, processors
    >>> vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "world": 4}
    >>> tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    >>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok.post_processor = processors.TemplateProcessing(
    ...     single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
    ...     special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    >>> enc = encode(tok, "hello", "world")
    >>> enc.tokens, enc.ids, enc.type_ids
    (['[CLS]', 'hello', '[SEP]', 'world', '[SEP]'], [1, 3, 2, 4, 2], [0, 0, 0, 1, 1])
    """
    enc = tokenizer.encode(text, pair) if pair is not None else tokenizer.encode(text)
    return Encoded(list(enc.tokens), [int(i) for i in enc.ids], [int(t) for t in enc.type_ids])
