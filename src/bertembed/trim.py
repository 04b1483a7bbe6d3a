"""Choosing the token rows a trimmed layer keeps, and measuring how well they cover texts.

:meth:`bertembed.BertEmbeddings.trimmed` keeps the rows of given ids; the
functions here find those ids, the way ``bertembed trim`` does:

- by corpus: the ids the model's own ``tokenizer.json`` gives for text files
  (one text per line) at least `min_count` times;
- by explicit ids (an array, or a file read with :func:`read_ids`);
- by Unicode script: every token that a text written in the given scripts
  (plus Common and Inherited characters) can produce, so that every such text
  is covered by construction (see :doc:`/trimming` for the exact rule);

and any union of these, always with the tokenizer's special tokens.
:func:`trim_layer` is the whole step ``bertembed trim`` and ``bertembed
export --trim-*`` take: choose, check the choice against the layer's
vocabulary, resolve the unknown rule, trim. :func:`coverage` says how much
of other texts a kept set covers: the share of tokens, and the share of
texts whose every token is kept (those are embedded exactly as by the full
layer; the others meet the layer's unknown rule).

Corpus and script choices need the ``tokenizers`` package, script choices
also ``regex`` (``pip install 'bertembed[trim]'``); both are imported only
when used.

Examples
--------
>>> import numpy as np
>>> from bertembed import BertEmbeddings, trim
>>> layer = BertEmbeddings(np.eye(6, dtype=np.float32), np.zeros((4, 6), np.float32))
>>> choice = trim.select(ids=[4, 1, 4])
>>> choice.ids.tolist()
[1, 4]
>>> small = layer.trimmed(choice.ids)
>>> small.kept_rows, small([[4, 1]])[0, 0].tolist()
(2, [0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._vocab import corpus as _corpus
from ._vocab import scripts as _scripts
from ._vocab.corpus import Coverage, Progress
from ._vocab.tokenizer import ModelTokenizer, load

if TYPE_CHECKING:
    from ._layer import BertEmbeddings

__all__ = [
    "Coverage",
    "ModelTokenizer",
    "Selection",
    "coverage",
    "load_tokenizer",
    "read_ids",
    "select",
    "trim_layer",
]

Files = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

#: Largest id list file read as text (a list of every id of a 250k vocabulary is ~2 MB).
MAX_IDS_TEXT_BYTES = 256 << 20


@dataclass(frozen=True)
class Selection:
    """The ids :func:`select` chose, and why.

    Attributes
    ----------
    ids : numpy.ndarray
        Every chosen id, sorted, int64: the union of the choices below and the
        tokenizer's special tokens. Pass it to :meth:`bertembed.BertEmbeddings.trimmed`.
    special_ids : tuple of int
        The tokenizer's special tokens (always chosen).
    from_corpus, from_ids, from_scripts : int
        How many ids each choice gave (before the union).
    corpus : Coverage or None
        With a corpus: its tokens, and those whose id is in `ids`.
    outside : int
        With scripts: Common characters left out of the script guarantee.
    """

    ids: np.ndarray
    special_ids: tuple[int, ...] = ()
    from_corpus: int = 0
    from_ids: int = 0
    from_scripts: int = 0
    corpus: Coverage | None = None
    outside: int = 0


def load_tokenizer(path: str | os.PathLike[str]) -> ModelTokenizer:
    """A model's ``tokenizer.json`` (or the directory holding it), loaded once for several calls.

    Raises
    ------
    ImportError
        The ``tokenizers`` package is not installed.
    FileNotFoundError, ValueError
        No such file, or not a tokenizer.
    """
    return load(path)


def read_ids(path: str | os.PathLike[str]) -> np.ndarray:
    """Token ids from a file: a ``.npy`` integer array, or text (ids separated by spaces,
    commas or new lines; ``#`` starts a comment). Returned as given (int64), in file order.

    Raises
    ------
    ValueError
        A token that is not an integer (the message names the file and line),
        a ``.npy`` file that does not hold integers.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = os.path.join(d, "ids.txt")
    ...     _ = open(p, "w").write("# kept\\n101, 102\\n7 8  # two more\\n")
    ...     read_ids(p).tolist()
    [101, 102, 7, 8]
    """
    p = Path(os.fspath(path)).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{p}: is a directory, expected a file of token ids")
    with open(p, "rb") as fh:
        head = fh.read(6)
    if head == b"\x93NUMPY":
        arr = np.load(p, allow_pickle=False)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{p}: token ids must be integers, got dtype {arr.dtype}")
        return arr.reshape(-1).astype(np.int64)
    if p.stat().st_size > MAX_IDS_TEXT_BYTES:
        raise ValueError(f"{p}: larger than {MAX_IDS_TEXT_BYTES >> 20} MiB; save large id lists as .npy")
    out: list[int] = []
    for number, line in enumerate(p.read_bytes().decode("utf-8", "replace").splitlines(), 1):
        for token in line.split("#", 1)[0].replace(",", " ").split():
            try:
                out.append(int(token))
            except ValueError:
                raise ValueError(f"{p}: line {number}: {token!r} is not a token id (an integer)") from None
    return np.asarray(out, np.int64)


def select(
    tokenizer: Any = None,
    *,
    corpus: Files = (),
    min_count: int = 1,
    ids: Any = None,
    scripts: Sequence[str] | str = (),
    progress: Progress | None = None,
) -> Selection:
    """Choose the ids to keep: by corpus, by explicit ids, by Unicode script, or any union.

    Parameters
    ----------
    tokenizer : str or os.PathLike or ModelTokenizer, optional
        The model's ``tokenizer.json`` (or its directory). Needed for `corpus`
        and `scripts`; with it, its special tokens are always chosen.
    corpus : path or sequence of paths, optional
        UTF-8 text files, one text per line (blank lines skipped), encoded as
        a service encodes them (special tokens added, no truncation).
    min_count : int, default 1
        A corpus id is chosen when it occurs at least this often.
    ids : array_like of int, optional
        Ids chosen as they are.
    scripts : str or sequence of str, optional
        Unicode script names (``"Latin"``, ``"Cyrillic"``, ``"Greek"``,
        ``"Han"``..., or one string ``"Latin,Cyrillic"``): every token made of
        characters of these scripts, Common and Inherited is chosen, so every
        text written in them is covered.
    progress : callable, optional
        ``progress(done_bytes, total_bytes, label)`` while the corpus is read.

    Returns
    -------
    Selection

    Raises
    ------
    ValueError
        Nothing to choose from, a `min_count` below 1, an unknown script, a
        negative id; a corpus or script choice without a tokenizer.
    ImportError
        ``tokenizers`` (corpus, scripts) or ``regex`` (scripts) is missing.

    Examples
    --------
    >>> from bertembed import trim
    >>> trim.select(ids=[3, 1]).ids.tolist()
    [1, 3]
    >>> choice = trim.select("path/to/model", corpus=["en.txt"], scripts="Latin")  # doctest: +SKIP
    >>> choice.corpus.token_share  # doctest: +SKIP
    1.0
    """
    if isinstance(scripts, str):
        scripts = scripts.split(",")
    scripts = [s.strip() for s in scripts if s.strip()]
    corpus_files = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
    if not corpus_files and ids is None and not scripts:
        raise ValueError("nothing to choose from: give a corpus, ids or scripts")
    if type(min_count) is not int or min_count < 1:
        raise ValueError(f"min_count must be a positive int, got {min_count!r}")
    tok = None
    if tokenizer is not None:
        tok = load(tokenizer)
    elif corpus_files or scripts:
        raise ValueError("choosing by corpus or by script needs the model's tokenizer (tokenizer=...)")
    parts: list[np.ndarray] = []
    special = () if tok is None else tok.special_ids
    parts.append(np.asarray(special, np.int64))
    from_ids = from_corpus = from_scripts = outside = 0
    counts = None
    if ids is not None:
        listed = np.asarray(ids)
        if listed.size and listed.dtype.kind not in "iu":
            raise TypeError(f"ids must be integer token ids, got dtype {listed.dtype}")
        listed = np.unique(listed.astype(np.int64).reshape(-1))
        if listed.size and listed[0] < 0:
            raise ValueError(f"ids holds a negative id: {int(listed[0])}")
        parts.append(listed)
        from_ids = int(listed.size)
    if corpus_files:
        assert tok is not None
        counts = _corpus.count_ids(tok, corpus_files, progress)
        seen = np.flatnonzero(counts >= min_count)
        parts.append(seen)
        from_corpus = int(seen.size)
    if scripts:
        assert tok is not None
        choice = _scripts.choose(tok, scripts)
        parts.append(choice.ids)
        from_scripts, outside = int(choice.ids.size), choice.outside
    chosen = np.unique(np.concatenate(parts))
    cover = None if counts is None else _corpus.of_counts(counts, chosen)
    return Selection(chosen, tuple(special), from_corpus, from_ids, from_scripts, cover, outside)


def coverage(tokenizer: Any, keep_ids: Any, texts: Files, *, progress: Progress | None = None) -> Coverage:
    """How much of the texts of `texts` the ids `keep_ids` cover.

    Parameters
    ----------
    tokenizer : str or os.PathLike or ModelTokenizer
        The model's ``tokenizer.json`` (or its directory).
    keep_ids : array_like of int
        The kept ids (e.g. :attr:`bertembed.BertEmbeddings.kept_ids` of a trimmed layer).
    texts : path or sequence of paths
        UTF-8 text files, one text per line (blank lines skipped).
    progress : callable, optional
        ``progress(done_bytes, total_bytes, label)``.

    Returns
    -------
    Coverage
        ``token_share``: tokens whose id is kept; ``text_share``: texts whose
        every token is kept (a trimmed layer gives them exactly what the full
        layer gives; the others meet its unknown rule).

    Examples
    --------
    >>> from bertembed import trim
    >>> c = trim.coverage("path/to/model", layer.kept_ids, ["held-out.txt"])  # doctest: +SKIP
    >>> c.token_share, c.text_share  # doctest: +SKIP
    (0.998, 0.97)
    """
    kept = np.asarray(keep_ids)
    if kept.size and kept.dtype.kind not in "iu":
        raise TypeError(f"keep_ids must be integer token ids, got dtype {kept.dtype}")
    kept = kept.astype(np.int64).reshape(-1)
    if kept.size and int(kept.min()) < 0:
        raise ValueError(f"keep_ids holds a negative id: {int(kept.min())}")
    return _corpus.coverage(load(tokenizer), kept, texts, progress)


def trim_layer(
    layer: BertEmbeddings,
    tokenizer: Any = None,
    *,
    corpus: Files = (),
    min_count: int = 1,
    ids: Any = None,
    scripts: Sequence[str] | str = (),
    unknown: str | int = "error",
    progress: Progress | None = None,
) -> tuple[BertEmbeddings, Selection]:
    """`layer` keeping the rows :func:`select` chooses: the step ``bertembed trim`` and the export take.

    Parameters
    ----------
    layer : BertEmbeddings
        The layer to trim (untrimmed or trimmed).
    tokenizer, corpus, min_count, scripts, progress
        As for :func:`select`.
    ids : path or array_like of int, optional
        Ids kept as they are: an array, or a file :func:`read_ids` reads
        (its name then starts the messages about them). Each must be an id
        of `layer`'s vocabulary.
    unknown : {"error", "unk"} or int, default "error"
        What a trimmed-away id gets (:meth:`bertembed.BertEmbeddings.trimmed`):
        an error, the row of the tokenizer's unknown token (``"unk"``), or
        the row of the given id.

    Returns
    -------
    tuple of (BertEmbeddings, Selection)
        The trimmed layer and the choice it keeps.

    Raises
    ------
    ValueError
        A listed id outside the vocabulary, a tokenizer that gives ids beyond
        it (not the model's own), ``unknown="unk"`` without a tokenizer or
        with one that has no unknown token; and what :func:`select` raises.

    Examples
    --------
    >>> import numpy as np
    >>> from bertembed import BertEmbeddings, trim
    >>> layer = BertEmbeddings(np.eye(6, dtype=np.float32), None, None)
    >>> small, choice = trim.trim_layer(layer, ids=[5, 2], unknown=2)
    >>> small.kept_ids.tolist(), small.unknown
    ([2, 5], 2)
    """
    name = "ids"
    if isinstance(ids, (str, os.PathLike)):
        name, ids = os.fspath(ids), read_ids(ids)
    if ids is not None:
        listed = np.asarray(ids).reshape(-1)
        if listed.size and listed.dtype.kind in "iu":
            bad = (listed < 0) | (listed >= layer.vocab_size)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(
                    f"{name}: token id {int(listed[i])} (entry {i}) is out of range for the model's vocabulary "
                    f"of {layer.vocab_size} ids"
                )
    tok = None if tokenizer is None else load(tokenizer)
    choice = select(tok, corpus=corpus, min_count=min_count, ids=ids, scripts=scripts, progress=progress)
    beyond = choice.ids[choice.ids >= layer.vocab_size]
    if beyond.size:
        assert tok is not None  # listed ids were checked above
        raise ValueError(
            f"{tok.path}: the tokenizer gives id {int(beyond[0])}, beyond the model's vocabulary of "
            f"{layer.vocab_size} ids: is it the model's own tokenizer?"
        )
    return layer.trimmed(choice.ids, unknown=_unknown_rule(unknown, tok)), choice


def _unknown_rule(unknown: str | int, tok: ModelTokenizer | None) -> str | int:
    """`unknown` as :meth:`bertembed.BertEmbeddings.trimmed` takes it: ``"unk"`` made the tokenizer's id."""
    if unknown != "unk":
        return unknown
    if tok is None:
        raise ValueError("unknown 'unk' takes the unknown token of the model's tokenizer: give the tokenizer")
    if tok.unk_id is None:
        raise ValueError(f"{tok.path} has no unknown token; give its id instead of 'unk'")
    return int(tok.unk_id)
