"""A model's special tokens (pad, cls, sep, unk, mask, bos, eos), from its config and its tokenizer.

A trimmed layer always keeps these rows (see :meth:`bertembed.BertEmbeddings.trimmed`):
a tokenizer adds them to every text, whatever its language. Two sources,
read with the standard library only:

- ``config.json``: the ``*_token_id`` keys of :data:`CONFIG_KEYS` (an int, or a
  list of ints as some configs give ``eos_token_id``);
- ``tokenizer.json`` (a Hugging Face fast tokenizer): every added token marked
  ``"special": true``, the model's unknown token, and the tokens its
  post-processor inserts (``TemplateProcessing``, ``BertProcessing``,
  ``RobertaProcessing``).

Ids that are not ints, or not in ``[0, vocab)``, are left out: they name no
row of the table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: ``config.json`` keys that name a special token.
CONFIG_KEYS = (
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "cls_token_id",
    "sep_token_id",
    "unk_token_id",
    "mask_token_id",
)

#: The file name of a Hugging Face fast tokenizer.
TOKENIZER_NAME = "tokenizer.json"


def _ints(value: Any) -> Iterable[int]:
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool):
            yield v


def _in_range(ids: Iterable[int], vocab: int | None) -> tuple[int, ...]:
    return tuple(sorted({i for i in ids if i >= 0 and (vocab is None or i < vocab)}))


def config_special_ids(config: Mapping[str, Any], vocab: int | None = None) -> tuple[int, ...]:
    """The special token ids a model's ``config.json`` names, sorted.

    Examples
    --------
    >>> config_special_ids({"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": [2, 3], "unk_token_id": None})
    (0, 1, 2, 3)
    """
    return _in_range((i for key in CONFIG_KEYS for i in _ints(config.get(key))), vocab)


def tokenizer_special_ids(tokenizer: Mapping[str, Any], vocab: int | None = None) -> tuple[int, ...]:
    """The special token ids of a parsed ``tokenizer.json``, sorted.

    Examples
    --------
    >>> tok = {"added_tokens": [{"id": 0, "content": "[PAD]", "special": True},
    ...                         {"id": 7, "content": "hello", "special": False}],
    ...        "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 1, "hello": 7}},
    ...        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]}}
    >>> tokenizer_special_ids(tok)
    (0, 1, 2, 3)
    """
    found: list[int] = []
    for added in tokenizer.get("added_tokens") or ():
        if isinstance(added, Mapping) and added.get("special") is True:
            found.extend(_ints(added.get("id")))
    model = tokenizer.get("model")
    if isinstance(model, Mapping):
        found.extend(_unk_ids(model))
    found.extend(_post_processor_ids(tokenizer.get("post_processor")))
    return _in_range(found, vocab)


def _unk_ids(model: Mapping[str, Any]) -> Iterable[int]:
    """The id of the model's unknown token (WordPiece, BPE: ``unk_token``; Unigram: ``unk_id``)."""
    yield from _ints(model.get("unk_id"))
    unk, vocab = model.get("unk_token"), model.get("vocab")
    if isinstance(unk, str) and isinstance(vocab, Mapping):
        yield from _ints(vocab.get(unk))


def _post_processor_ids(processor: Any) -> Iterable[int]:
    if not isinstance(processor, Mapping):
        return
    kind = processor.get("type")
    if kind == "Sequence":
        for inner in processor.get("processors") or ():
            yield from _post_processor_ids(inner)
    elif kind == "TemplateProcessing":
        specials = processor.get("special_tokens")
        if isinstance(specials, Mapping):
            for token in specials.values():
                if isinstance(token, Mapping):
                    yield from _ints(token.get("ids"))
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for key in ("cls", "sep"):
            pair = processor.get(key)
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                yield from _ints(pair[1])


def read_tokenizer_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A ``tokenizer.json`` parsed; a ValueError naming the file when it is not a JSON object."""
    p = Path(os.fspath(path))
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not a tokenizer.json (not UTF-8 text: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not a tokenizer.json (invalid JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ValueError(f"{p}: not a tokenizer.json (no 'model' object)")
    return data
