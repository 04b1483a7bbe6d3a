"""Trimmed token tables: the kept rows, and the map from original ids to them.

A trimmed layer stores only the token rows of the kept ids, in the order of
the ids, and an int32 map of one entry per id of the original vocabulary:
``map[id]`` is the row of ``id``. An id that was not kept maps to ``-1`` when
the layer's unknown rule is ``"error"`` (a call that gives one is an
IndexError, raised before anything is written), or to the row of the
``unknown`` id (which is always kept). The kernel reads ``map[id]`` in the
same pass as the row, and checks every id against the original vocabulary
(and, for ``"error"``, against the map's ``-1`` entries) before it writes
anything, and the map itself is checked once, when the layer is built
(:func:`check_map`: every entry is ``-1`` or a row, the kept ids map to rows
0, 1, 2... in order), so that no id, however hostile, can read outside the
table.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

#: The map's entry for an id that was trimmed away (unknown rule "error").
DROPPED = -1
#: The unknown rule that makes a trimmed-away id an error.
ERROR = "error"
#: Largest original vocabulary a map can hold (its entries are int32 rows).
MAX_VOCAB = 2**31 - 1


class TokenMap(NamedTuple):
    """The id map of a trimmed token table.

    ``map``: int32, shape (vocab,), C-contiguous: the row of each original id,
    :data:`DROPPED` for an id trimmed away when `unknown` is None.
    ``rows``: the rows kept. ``unknown``: the original id whose row trimmed-away
    ids read, or None (they are an error).
    """

    map: np.ndarray
    rows: int
    unknown: int | None

    @property
    def vocab(self) -> int:
        """The original vocabulary size: ids in ``[0, vocab)`` are accepted."""
        return int(self.map.shape[0])

    @property
    def rule(self) -> str | int:
        """The unknown rule as a layer reports it: ``"error"`` or the unknown id."""
        return ERROR if self.unknown is None else self.unknown

    @property
    def nbytes(self) -> int:
        return int(self.map.nbytes)

    def kept_ids(self) -> np.ndarray:
        """The kept original ids, sorted (int64): the id of each row, in row order."""
        if self.unknown is None:
            return np.flatnonzero(self.map >= 0)
        ids = np.flatnonzero(self.map != self.map[self.unknown])
        return np.sort(np.append(ids, self.unknown))


def as_unknown(unknown: Any) -> int | None:
    """The ``unknown`` argument as an id, or None for ``"error"``."""
    if isinstance(unknown, str):
        if unknown == ERROR:
            return None
        raise ValueError(f"unknown must be 'error' or a kept token id, got {unknown!r}")
    if isinstance(unknown, bool) or not isinstance(unknown, (int, np.integer)):
        raise TypeError(f"unknown must be 'error' or a kept token id (an int), got {type(unknown).__name__}")
    return int(unknown)


def as_keep_ids(keep_ids: Any, vocab: int) -> np.ndarray:
    """`keep_ids` (any integer array-like, or a set) as sorted unique int64 ids in ``[0, vocab)``."""
    if isinstance(keep_ids, (set, frozenset)):
        keep_ids = sorted(keep_ids)
    arr = np.asarray(keep_ids)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"keep_ids must be integer token ids, got dtype {arr.dtype}")
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size:
        bad = (arr < 0) | (arr >= vocab)
        if bad.any():
            i = int(np.argmax(bad))
            raise IndexError(f"keep_ids[{i}] = {int(arr[i])} is out of range for a vocabulary of {vocab} ids")
    return np.unique(arr.astype(np.int64))


def build_map(keep: np.ndarray, vocab: int, unknown: int | None) -> TokenMap:
    """The map of a table trimmed to the sorted unique ids `keep` (`unknown` among them)."""
    if vocab > MAX_VOCAB:
        raise ValueError(f"a vocabulary of {vocab} ids is too large to trim (at most {MAX_VOCAB})")
    rows = int(keep.shape[0])
    fill = DROPPED
    if unknown is not None:
        at = int(np.searchsorted(keep, unknown))
        if at == rows or keep[at] != unknown:
            raise ValueError(f"the unknown id {unknown} is not among the kept ids")
        fill = at
    m = np.full(vocab, fill, np.int32)
    m[keep] = np.arange(rows, dtype=np.int32)
    return TokenMap(m, rows, unknown)


def check_map(arr: np.ndarray, rows: int, unknown: int | None, where: str) -> TokenMap:
    """A map read from a file, checked once: a :class:`TokenMap`, or a ValueError naming `where`.

    Every entry must be a row in ``[0, rows)`` or, with no unknown id,
    :data:`DROPPED`; the kept ids must map to rows 0, 1, 2... in order (so
    each row has one id), and the unknown id, if any, must be kept.
    """
    if arr.dtype != np.int32 or arr.ndim != 1:
        raise ValueError(f"{where}: the id map must be a 1-D int32 tensor, got {arr.dtype} of shape {arr.shape}")
    if not arr.flags.c_contiguous or not arr.dtype.isnative:
        arr = np.ascontiguousarray(arr, dtype=np.int32)
    vocab = int(arr.shape[0])
    if unknown is not None and not 0 <= unknown < vocab:
        raise ValueError(f"{where}: the unknown id {unknown} is not an id of the vocabulary of {vocab}")
    if vocab:
        low = DROPPED if unknown is None else 0
        lo, hi = int(arr.min()), int(arr.max())
        if lo < low or hi >= rows:
            bad = int(np.argmax((arr < low) | (arr >= rows)))
            raise ValueError(
                f"{where}: the id map sends id {bad} to row {int(arr[bad])}, outside the {rows} rows kept"
                + ("" if unknown is None else " (an unknown id is set, so no entry may be -1)")
            )
    got = TokenMap(arr, rows, unknown)
    kept = got.kept_ids()
    if kept.shape[0] != rows or not np.array_equal(arr[kept], np.arange(rows, dtype=np.int32)):
        raise ValueError(f"{where}: the id map does not send the kept ids to rows 0..{rows - 1} in order")
    return got
