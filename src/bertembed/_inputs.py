"""A call's inputs as Hugging Face tokenizers give them, sorted into the layer's arguments.

Three shapes of input come from a tokenizer: keyword arguments with
transformers' names (``layer(**tokenizer(texts))``), the tokenizer's output
mapping itself (``layer(tokenizer(texts))``), and a list of
``tokenizers.Encoding`` objects (``layer(tokenizer.encode_batch(texts))``).
:func:`resolve` turns any of them into the layer's own arguments; the
values are checked later, by the same code as every other call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

#: Keys a tokenizer's output may hold that an embedding layer has no use for:
#: ignored when they come in a mapping (``layer(enc)`` or ``layer(**enc)``).
TOKENIZER_EXTRAS = frozenset(
    {
        "special_tokens_mask",
        "offset_mapping",
        "overflow_to_sample_mapping",
        "length",
        "num_truncated_tokens",
        "overflowing_tokens",
    }
)

#: transformers' name -> the layer's name, for the pairs that differ.
ALIASES = {"input_ids": "token_ids", "token_type_ids": "segment_ids"}

_INPUTS = ("token_ids", "segment_ids", "position_ids", "task_type_ids", "attention_mask")
_MAPPING_KEYS = frozenset(_INPUTS) | frozenset(ALIASES) | TOKENIZER_EXTRAS


class Inputs(NamedTuple):
    """A call's id arrays (not yet checked) and the names the caller used for the first two."""

    token_ids: Any
    segment_ids: Any
    position_ids: Any
    task_type_ids: Any
    attention_mask: Any
    token_name: str = "token_ids"
    segment_name: str = "segment_ids"


def resolve(
    token_ids: Any,
    segment_ids: Any,
    position_ids: Any,
    task_type_ids: Any,
    attention_mask: Any,
    input_ids: Any,
    token_type_ids: Any,
    extras: Mapping[str, Any],
) -> Inputs:
    """Sort a call's arguments into :class:`Inputs`.

    `extras` are the keyword arguments the signature does not name: keys in
    :data:`TOKENIZER_EXTRAS` are dropped, any other is a TypeError.
    """
    unknown = sorted(set(extras) - TOKENIZER_EXTRAS)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument {unknown[0]!r}; besides token_ids/input_ids, "
            f"segment_ids/token_type_ids, position_ids, task_type_ids, attention_mask, out "
            f"and num_threads, only these keys of a tokenizer's output are accepted (and "
            f"ignored): {', '.join(sorted(TOKENIZER_EXTRAS))}"
        )
    given = {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "position_ids": position_ids,
        "task_type_ids": task_type_ids,
        "attention_mask": attention_mask,
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
    }
    if isinstance(token_ids, Mapping):
        given["token_ids"] = None
        _merge(given, _from_mapping(token_ids), "the mapping passed as the first argument")
    elif _is_encoding(token_ids) or _is_encoding_list(token_ids):
        given["token_ids"] = None
        _merge(given, _from_encodings(token_ids), "the tokenizers.Encoding objects")
    names = {}
    for alias, own in ALIASES.items():
        if given[own] is not None and given[alias] is not None:
            raise TypeError(f"{own} and {alias} are the same argument; give one of them")
        names[own] = alias if given[alias] is not None else own
        if given[own] is None:
            given[own] = given[alias]
    if given["token_ids"] is None:
        raise TypeError("missing the token ids: give token_ids (or input_ids, as transformers names them)")
    return Inputs(
        given["token_ids"],
        given["segment_ids"],
        given["position_ids"],
        given["task_type_ids"],
        given["attention_mask"],
        names["token_ids"],
        names["segment_ids"],
    )


def _merge(given: dict[str, Any], found: dict[str, Any], source: str) -> None:
    for key, value in found.items():
        if given[key] is not None:
            raise TypeError(f"{key} is given twice: as an argument and in {source}")
        given[key] = value


def _from_mapping(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A tokenizer's output (a BatchEncoding or any mapping) as call arguments."""
    found = {}
    for key in mapping:
        if key not in _MAPPING_KEYS:
            raise TypeError(
                f"the mapping passed as the first argument has the key {key!r}, which is "
                f"neither an input of the layer ({', '.join(_INPUTS)}, or transformers' "
                f"input_ids, token_type_ids) nor a tokenizer output it ignores "
                f"({', '.join(sorted(TOKENIZER_EXTRAS))})"
            )
        if key not in TOKENIZER_EXTRAS:
            found[key] = mapping[key]
    if "token_ids" not in found and "input_ids" not in found:
        raise TypeError("the mapping passed as the first argument has no 'input_ids' (or 'token_ids')")
    return found


def _is_encoding(value: Any) -> bool:
    return hasattr(value, "ids") and hasattr(value, "type_ids") and hasattr(value, "attention_mask")


def _is_encoding_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and _is_encoding(value[0])


def _from_encodings(value: Any) -> dict[str, Any]:
    """ids, type ids and attention mask of one ``tokenizers.Encoding`` (1-D) or a list (2-D)."""
    if _is_encoding(value):
        return {"token_ids": value.ids, "segment_ids": value.type_ids, "attention_mask": value.attention_mask}
    for i, enc in enumerate(value):
        if not _is_encoding(enc):
            raise TypeError(
                f"the first argument mixes tokenizers.Encoding objects with other things: "
                f"item {i} is {type(enc).__name__}"
            )
    return {
        "token_ids": [e.ids for e in value],
        "segment_ids": [e.type_ids for e in value],
        "attention_mask": [e.attention_mask for e in value],
    }
