"""Texts through the model's tokenizer: the ids a corpus gives, and how well a kept set covers texts.

A corpus file is UTF-8 text, one text per line; blank lines are skipped.
Each text is encoded as a service would encode it: the tokenizer's
normaliser, pre-tokeniser and model, then its post-processor (special tokens
added), with no truncation (every token of a long text counts) and no
padding.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .tokenizer import ModelTokenizer

#: ``progress(done, total, label)``: bytes of the files read so far.
Progress = Callable[[int, int, str], None]

#: Texts encoded per ``encode_batch`` call.
BATCH_TEXTS = 2048


@dataclass(frozen=True)
class Coverage:
    """How much of some texts a kept set of ids covers.

    Attributes
    ----------
    tokens : int
        Tokens the texts give (special tokens included).
    covered_tokens : int
        Those whose id is kept.
    texts : int
        Texts (non-blank lines) read; 0 when only token counts were known.
    covered_texts : int
        Texts whose every token is kept: a trimmed layer embeds them exactly
        as the full layer does.
    """

    tokens: int
    covered_tokens: int
    texts: int = 0
    covered_texts: int = 0

    @property
    def token_share(self) -> float:
        """``covered_tokens / tokens`` (1.0 for no tokens)."""
        return self.covered_tokens / self.tokens if self.tokens else 1.0

    @property
    def text_share(self) -> float:
        """``covered_texts / texts`` (1.0 for no texts)."""
        return self.covered_texts / self.texts if self.texts else 1.0


def _paths(files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    paths = [Path(os.fspath(f)).expanduser() for f in files]
    for p in paths:
        if p.is_dir():
            raise IsADirectoryError(f"{p}: is a directory, expected a text file (one text per line)")
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such text file")
    return paths


def text_batches(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    progress: Progress | None = None,
    label: str = "reading",
) -> Iterator[list[str]]:
    """The non-blank lines of `files`, in batches of up to :data:`BATCH_TEXTS`.

    A line that is not UTF-8 is a ValueError naming the file and the line.
    """
    paths = _paths(files)
    total = sum(p.stat().st_size for p in paths)
    done = 0
    batch: list[str] = []
    for p in paths:
        with open(p, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                done += len(raw)
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{p}: line {number} is not UTF-8 ({exc.reason})") from None
                if text.strip():
                    batch.append(text)
                if len(batch) >= BATCH_TEXTS:
                    yield batch
                    batch = []
                    if progress is not None:
                        progress(done, total, label)
    if batch:
        yield batch
    if progress is not None:
        progress(total, total, label)


def _encode(tok: ModelTokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The ids of `texts` end to end (int64) and the number of tokens of each text."""
    encodings = tok.tokenizer.encode_batch(texts, add_special_tokens=True)
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    ids = np.fromiter((i for e in encodings for i in e.ids), np.int64, int(lengths.sum()))
    return ids, lengths


def count_ids(
    tok: ModelTokenizer,
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    progress: Progress | None = None,
) -> np.ndarray:
    """How often each id occurs when `tok` encodes the texts of `files`: int64, shape (vocab,)."""
    counts = np.zeros(tok.vocab_size, np.int64)
    for texts in text_batches(files, progress, "counting corpus tokens"):
        ids, _ = _encode(tok, texts)
        counts += np.bincount(ids, minlength=tok.vocab_size)[: tok.vocab_size]
    return counts


def coverage(
    tok: ModelTokenizer,
    kept: np.ndarray,
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    progress: Progress | None = None,
) -> Coverage:
    """How much of the texts of `files` the ids `kept` cover (tokens, and texts fully covered)."""
    mask = np.zeros(max(tok.vocab_size, int(kept.max(initial=-1)) + 1), bool)
    mask[kept] = True
    tokens = covered = texts = full = 0
    for batch in text_batches(files, progress, "measuring coverage"):
        ids, lengths = _encode(tok, batch)
        hit = mask[ids]
        tokens += int(ids.size)
        covered += int(hit.sum())
        texts += len(batch)
        missed = np.zeros(len(batch), np.int64)
        np.add.at(missed, np.repeat(np.arange(len(batch)), lengths), ~hit)
        full += int((missed == 0).sum())
    return Coverage(tokens, covered, texts, full)


def of_counts(counts: np.ndarray, kept: np.ndarray) -> Coverage:
    """The token coverage of the corpus whose id counts are `counts` by the ids `kept`."""
    inside = kept[kept < counts.shape[0]]
    return Coverage(int(counts.sum()), int(counts[inside].sum()))
