"""The script rule: keep every token a text written in given Unicode scripts can produce.

A token is kept when every character of it belongs to one of the chosen
scripts, to Common (digits, punctuation, symbols, spaces, emoji) or to
Inherited (combining marks), or is a character the tokenizer's normaliser
turns one of the chosen scripts' (or Inherited) characters into (its
lowercase, its decomposition, a ligature's letters). Script is the Unicode
``Script`` property, read with the ``regex`` package (the ``trim`` extra).

Why this covers every text written in those scripts: a tokenizer's tokens
are pieces of the text after its normaliser and pre-tokeniser (or the
unknown token, always kept), so a text made of such characters gives only
such tokens. What a token's characters are depends on the tokenizer:

- WordPiece and BPE markers (``continuing_subword_prefix`` such as ``##``,
  ``end_of_word_suffix``) are not text and are set aside; SentencePiece's
  word marker ``▁`` is (Common);
- byte-level BPE (RoBERTa, GPT-2 style) tokens stand for bytes: a token is
  kept when its bytes can be a piece of the UTF-8 of such a text (a token may
  hold part of a character);
- byte-fallback tokens (``<0x41>``) are single bytes, kept likewise;
- special tokens are always kept; other added tokens are checked as text.

One exception keeps trimming useful: a Common character that the normaliser
turns into letters of another script (NFKC makes ``ⓐ`` an ``a``, ``℃`` a
``°C``, ``㎏`` ``kg``) is outside the guarantee; otherwise every Latin token
would be kept whatever the scripts chosen. :attr:`ScriptChoice.outside`
counts them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .tokenizer import ModelTokenizer

#: Scripts every choice includes.
ALWAYS = ("Common", "Inherited")

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@dataclass(frozen=True)
class ScriptChoice:
    """The tokens the script rule keeps, and what it guarantees.

    Attributes
    ----------
    ids : numpy.ndarray
        The kept ids, sorted (int64); special tokens included.
    chars : frozenset of str
        The characters a kept token may hold (as it appears after normalising).
    covered : frozenset of str
        The characters of the guarantee: every text made of them gives only kept ids.
    outside : int
        Common characters left out of the guarantee (see the module notes).
    """

    ids: np.ndarray
    chars: frozenset[str]
    covered: frozenset[str]
    outside: int


def _regex() -> Any:
    try:
        import regex
    except ImportError:
        raise ImportError(
            "choosing rows by Unicode script reads script properties with the 'regex' package: "
            "pip install 'bertembed[trim]'"
        ) from None
    return regex


@lru_cache(maxsize=1)
def _every_char() -> str:
    """Every Unicode scalar value (surrogates excluded), as one string."""
    return "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))


@lru_cache(maxsize=64)
def chars_of_script(name: str) -> frozenset[str]:
    """The characters whose Unicode ``Script`` is `name` (``Latin``, ``Cyrillic``, ``Han``...).

    Raises ValueError for a name the ``regex`` package does not know.
    """
    regex = _regex()
    if not re.fullmatch(r"[A-Za-z_ ]+", name):
        raise ValueError(f"unknown Unicode script {name!r} (give names such as Latin, Cyrillic, Greek, Han)")
    try:
        pattern = regex.compile(rf"\p{{Script={name}}}+")
    except regex.error:
        raise ValueError(f"unknown Unicode script {name!r} (give names such as Latin, Cyrillic, Greek, Han)") from None
    return frozenset("".join(pattern.findall(_every_char())))


def _normalizer(tok: ModelTokenizer) -> Any:
    return tok.tokenizer.normalizer


def _closure(tok: ModelTokenizer, chars: Iterable[str]) -> set[str]:
    """The characters the tokenizer's normaliser turns each of `chars` into."""
    norm = _normalizer(tok)
    out: set[str] = set()
    if norm is None:
        return out
    for c in chars:
        out.update(norm.normalize_str(c))
    return out


def _parts(spec: Any, key: str, inner: str) -> Iterator[dict[str, Any]]:
    """The pre-tokenisers (or decoders) of the file, a ``Sequence``'s members included."""
    item = spec.get(key) if isinstance(spec, dict) else None
    stack = [item]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if x.get("type") == "Sequence":
                stack.extend(x.get(inner) or ())
            else:
                yield x


def _pieces(tok: ModelTokenizer) -> list[dict[str, Any]]:
    spec = tok.spec
    return [*_parts(spec, "pre_tokenizer", "pretokenizers"), *_parts(spec, "decoder", "decoders")]


def _byte_level(tok: ModelTokenizer) -> bool:
    return any(p.get("type") == "ByteLevel" for p in _pieces(tok))


def _markers(tok: ModelTokenizer) -> set[str]:
    """Characters a pre-tokeniser writes into the text (SentencePiece's word marker)."""
    found = set()
    for p in _pieces(tok):
        if p.get("type") == "Metaspace" and isinstance(p.get("replacement"), str):
            found.update(p["replacement"])
    return found


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's character for each byte, inverted: ``{char: byte}``.

    Printable Latin-1 bytes stand for themselves; the others (controls, space,
    0x7F-0xA0, 0xAD) take the characters from U+0100 on, in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


class _ByteRule:
    """Whether a byte string can be a piece of the UTF-8 of a text made of `chars`."""

    def __init__(self, chars: Iterable[str]) -> None:
        encoded = {c.encode("utf-8") for c in chars}
        self.chars = set(chars)
        self.tails = {e[i:] for e in encoded for i in range(1, len(e))}
        self.heads = {e[:i] for e in encoded for i in range(1, len(e))}
        self.inner = {e[i:j] for e in encoded for i in range(1, len(e)) for j in range(i + 1, len(e) + 1)}

    def __call__(self, b: bytes) -> bool:
        i, n = 0, len(b)
        while i < n and 0x80 <= b[i] < 0xC0:
            i += 1
        if i == n:
            return n == 0 or b in self.inner
        if i and b[:i] not in self.tails:
            return False
        while i < n:
            lead = b[i]
            width = 1 if lead < 0x80 else 2 if 0xC0 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4
            if lead >= 0xF8 or 0x80 <= lead < 0xC0:
                return False
            if i + width > n:
                return b[i:] in self.heads
            try:
                c = b[i : i + width].decode("utf-8")
            except UnicodeDecodeError:
                return False
            if c not in self.chars:
                return False
            i += width
        return True


def _surfaces(tok: ModelTokenizer) -> Iterator[tuple[int, str | bytes | None]]:
    """``(id, what the token stands for)``: text, bytes, or None for a special token (always kept)."""
    spec = tok.spec
    model = spec["model"]
    special = set(tok.special_ids)
    added = {
        int(a["id"]): str(a.get("content", ""))
        for a in spec.get("added_tokens") or ()
        if isinstance(a, dict) and isinstance(a.get("id"), int)
    }
    prefix = model.get("continuing_subword_prefix") or ""
    suffix = model.get("end_of_word_suffix") or ""
    fallback = bool(model.get("byte_fallback"))
    alphabet = byte_alphabet() if _byte_level(tok) else None
    for token, i in tok.tokenizer.get_vocab(with_added_tokens=True).items():
        if i in special:
            yield i, None
            continue
        if i in added:
            yield i, added[i]
            continue
        if fallback:
            m = _BYTE_TOKEN.fullmatch(token)
            if m:
                yield i, bytes([int(m.group(1), 16)])
                continue
        if prefix and token.startswith(prefix) and len(token) > len(prefix):
            token = token[len(prefix) :]
        if suffix and token.endswith(suffix) and len(token) > len(suffix):
            token = token[: -len(suffix)]
        if alphabet is not None and all(c in alphabet for c in token):
            yield i, bytes(alphabet[c] for c in token)
        else:
            yield i, token


def choose(tok: ModelTokenizer, scripts: Sequence[str]) -> ScriptChoice:
    """The ids of `tok` that the script rule keeps for `scripts` (see the module notes)."""
    names = [s.strip() for s in scripts if s.strip()]
    if not names:
        raise ValueError("no script given (give names such as Latin, Cyrillic, Greek, Han)")
    chosen: set[str] = set()
    for name in names:
        chosen |= chars_of_script(name)
    inherited = chars_of_script("Inherited")
    common = chars_of_script("Common")
    base = chosen | inherited | common
    made = _closure(tok, chosen | inherited)
    allowed = base | made | _markers(tok)
    outside = {c for c in common if not set(_closure(tok, c)) <= allowed}
    rule = _ByteRule(allowed)
    kept = []
    for i, surface in _surfaces(tok):
        if surface is None:
            kept.append(i)
        elif isinstance(surface, bytes):
            if rule(surface):
                kept.append(i)
        elif set(surface) <= allowed:
            kept.append(i)
    ids = np.unique(np.asarray(kept, np.int64))
    return ScriptChoice(ids, frozenset(allowed), frozenset(base - outside), len(outside))
