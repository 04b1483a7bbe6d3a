"""A smaller tokenizer for a trimmed layer that refuses the tokens it does not keep.

A Unigram tokenizer (XLM-R's, e5's, CamemBERT's) holds every piece of the
model's vocabulary in memory: 250,002 pieces take about 280 MiB of a
worker's resident memory once parsed, more than a trimmed layer's tables.
When a trimmed layer refuses every token it does not keep (``--unknown
error``), most of those pieces can only ever produce a refusal, and the
artifact can keep a tokenizer that knows only what can matter.

Unigram segments a text with the pieces that occur in it. Let C be the
characters of the kept pieces. The reduced tokenizer keeps

- every piece made only of characters of C: a text made of those
  characters sees the same pieces, so the same segmentation and ids;
- the one-character piece of every other character of the vocabulary: a
  text with such a character still gets an id the layer does not keep, so
  it is refused as before (the refusal may name that character's piece
  instead of a longer one);
- the special tokens.

Every other entry becomes one shared placeholder piece made of such a
character (a text it matches is refused anyway), scored lowest (the unknown token's score is derived from the lowest),
so that no id moves. This is exact for the rule "error" only, and
:func:`reduce_tokenizer` checks it on the texts it is given before the
artifact keeps it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .tokens import load_tokenizer


class NotReducible(ValueError):
    """The tokenizer cannot be reduced exactly (the artifact keeps it whole); the message says why."""


def _reduced_json(data: dict[str, Any], kept: np.ndarray) -> tuple[dict[str, Any], dict[str, int]]:
    model = data.get("model") or {}
    if model.get("type") != "Unigram":
        raise NotReducible(f"a {model.get('type', 'unknown')} tokenizer (only Unigram ones are reduced)")
    if model.get("byte_fallback"):
        raise NotReducible("a Unigram tokenizer with byte fallback")
    vocab = model["vocab"]
    # Special tokens are matched whole, before the model segments: their characters do not count.
    special = {int(t["id"]) for t in data.get("added_tokens") or []}
    ids = [i for i in kept[kept < len(vocab)].tolist() if i not in special]
    chars = {c for i in ids for c in vocab[i][0]}
    every = {c for i, (piece, _) in enumerate(vocab) if i not in special for c in piece}
    singles = {piece for piece, _ in vocab if len(piece) == 1}
    missing = every - singles
    if missing:
        raise NotReducible(f"{len(missing)} characters of the vocabulary have no one-character piece")
    others = every - chars
    keep = {i for i, (piece, _) in enumerate(vocab) if piece in others or i in special or set(piece) <= chars}
    # Made of a character no kept piece has: a text it matches is refused whatever its ids.
    placeholder = min(others) * 3 if others else ""
    lowest = min(score for _, score in vocab)
    pieces = [vocab[i] if i in keep else [placeholder, lowest] for i in range(len(vocab))]
    reduced = {**data, "model": {**model, "vocab": pieces}}
    stats = {"pieces": len(vocab), "kept_pieces": len(keep), "characters": len(chars), "other_characters": len(others)}
    return reduced, stats


def _compare(full: Any, reduced: Any, kept: np.ndarray, texts: Sequence[str]) -> str | None:
    """The first text on which the reduced tokenizer would answer otherwise (None: none)."""
    for start in range(0, len(texts), 1024):
        batch = list(texts[start : start + 1024])
        for text, a, b in zip(batch, full.encode_batch(batch), reduced.encode_batch(batch), strict=True):
            covered = all(kept[i] for i in a.ids if i < kept.size)
            if covered and a.ids != b.ids:
                return text
            if not covered and all(kept[i] for i in b.ids if i < kept.size):
                return text
    return None


def reduce_tokenizer(
    tokenizer_json: str | os.PathLike[str], kept_ids: Iterable[int], texts: Sequence[str], *, do_lower_case: bool
) -> dict[str, int]:
    """Replace ``tokenizer_json`` with its reduction for the layer keeping ``kept_ids``: the counts.

    Parameters
    ----------
    tokenizer_json : path
        The artifact's ``tokenizer.json``, rewritten in place when the reduction holds.
    kept_ids : iterable of int
        The ids the trimmed layer keeps (it refuses every other).
    texts : sequence of str
        Texts to check the reduction on (the trimming corpus, the build checks'
        texts): each must get the same ids from both tokenizers, or be refused
        by both.
    do_lower_case : bool
        As the service tokenizes (sentence-transformers' setting).

    Returns
    -------
    dict
        ``pieces``, ``kept_pieces`` (in the reduced tokenizer), ``characters``
        (of the kept pieces), ``other_characters``, ``bytes_before``, ``bytes_after``.

    Raises
    ------
    NotReducible
        The tokenizer is not Unigram, has byte fallback, lacks a one-character
        piece for some character, or answers a text otherwise; the file is
        left as it was.

    Examples
    --------
    >>> reduce_tokenizer("out/tokenizer/tokenizer.json", layer.kept_ids, texts, do_lower_case=False)  # doctest: +SKIP
    {'pieces': 250002, 'kept_pieces': 61170, ...}
    """
    path = Path(tokenizer_json)
    before = path.stat().st_size
    data = json.loads(path.read_text(encoding="utf-8"))
    ids = np.fromiter(kept_ids, dtype=np.int64)
    reduced, stats = _reduced_json(data, ids)
    size = len(data["model"]["vocab"])
    kept = np.zeros(max(size, int(ids.max(initial=0)) + 1), dtype=bool)
    kept[ids] = True
    candidate = path.with_name(path.name + ".reduced")
    candidate.write_text(json.dumps(reduced, ensure_ascii=False), encoding="utf-8")
    try:
        full = load_tokenizer(path, do_lower_case=do_lower_case)
        small = load_tokenizer(candidate, do_lower_case=do_lower_case)
        differs = _compare(full, small, kept, texts)
        if differs is not None:
            raise NotReducible(f"the reduced tokenizer answers otherwise on {differs[:80]!r}")
        candidate.replace(path)
    finally:
        candidate.unlink(missing_ok=True)
    return {**stats, "bytes_before": before, "bytes_after": path.stat().st_size}
