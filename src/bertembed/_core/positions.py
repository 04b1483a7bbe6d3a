"""Position rules: which row of the position table each token reads.

``absolute`` (BERT and most encoders): token ``s`` of every sequence reads
row ``offset + s``. ``padding`` (RoBERTa, XLM-R, CamemBERT, data2vec-text,
MPNet): pads (``token id == padding_idx``) read row ``padding_idx``, every
other token row ``padding_idx + 1 + (non-pad tokens before it in its
sequence)``, which gives the same positions to the same tokens whether the
batch is padded on the right or on the left. ``none``: the model has no
position table (DeBERTa-v2 without ``position_biased_input``, ModernBERT).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import _kernel

#: The kernel's number of each rule (declared in ``csrc/be_kinds.h``, read through ``_kernel.pxd``).
CODES = {"absolute": _kernel.RULE_ABSOLUTE, "padding": _kernel.RULE_PADDING, "none": _kernel.RULE_NONE}
KINDS = tuple(CODES)


@dataclass(frozen=True)
class PositionRule:
    """How a layer numbers positions when the call gives no ``position_ids``.

    Parameters
    ----------
    kind : {"absolute", "padding", "none"}
        See the module notes.
    offset : int, default 0
        ``absolute`` only: the row read by the first token.
    padding_idx : int, optional
        ``padding`` only: the padding token's id, also the pads' row.

    Examples
    --------
    >>> from bertembed import PositionRule
    >>> PositionRule("padding", padding_idx=1)
    PositionRule(kind='padding', offset=0, padding_idx=1)
    """

    kind: str = "absolute"
    offset: int = 0
    padding_idx: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"position rule must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if type(self.offset) is not int or self.offset < 0:
            raise ValueError(f"position offset must be a non-negative int, got {self.offset!r}")
        if self.kind == "padding":
            if type(self.padding_idx) is not int or self.padding_idx < 0:
                raise ValueError(
                    f"the 'padding' position rule needs a non-negative int padding_idx, got {self.padding_idx!r}"
                )
            if self.offset:
                raise ValueError("the 'padding' position rule takes no offset")
        elif self.padding_idx is not None:
            raise ValueError(f"padding_idx only applies to the 'padding' position rule, not {self.kind!r}")

    @property
    def code(self) -> int:
        """The kernel's number of the rule."""
        return CODES[self.kind]


ABSOLUTE = PositionRule()
NONE = PositionRule("none")


@functools.lru_cache(maxsize=64)
def arange(n: int, dtype: np.dtype, offset: int = 0) -> np.ndarray:
    """Read-only ``[[offset, offset + 1, ..., offset + n - 1]]`` (cached)."""
    arr = np.arange(offset, offset + n, dtype=dtype).reshape(1, n)
    arr.flags.writeable = False
    return arr


def needs_int64(rule: PositionRule, seq: int) -> bool:
    """Whether the rule's positions for sequences of `seq` may not fit int32."""
    return rule.kind == "padding" and (rule.padding_idx or 0) + seq > np.iinfo(np.int32).max


def check_absolute(rule: PositionRule, seq: int, rows: int) -> None:
    """ValueError when the ``absolute`` rule's positions for sequences of `seq`
    run past a position table of `rows` rows."""
    if seq + rule.offset > rows:
        raise absolute_error(rule, seq, rows)


def absolute_error(rule: PositionRule, seq: int, rows: int) -> ValueError:
    """The error of sequences of `seq` whose ``absolute`` positions run past a position table of `rows` rows."""
    if rule.offset:
        return ValueError(
            f"sequence length {seq} with positions from {rule.offset} needs "
            f"{seq + rule.offset} rows; position_embeddings has {rows}"
        )
    return ValueError(f"sequence length {seq} is larger than position_embeddings' {rows} rows")


def padding_positions(ids: np.ndarray, rule: PositionRule, rows: int) -> np.ndarray:
    """The ``padding`` rule's positions for C-contiguous (B, S) int32/int64 ids.

    The positions have the ids' dtype: the caller uses int64 ids whenever
    ``padding_idx + S`` could exceed int32 (see :func:`needs_int64`).

    Raises ValueError when a sequence has more non-pad tokens than the
    position table (of `rows` rows) numbers.
    """
    padding_idx = rule.padding_idx
    if padding_idx is None:  # (only the padding rule has one, and it always has)
        raise ValueError(f"the {rule.kind!r} position rule does not number positions from a padding id")
    out = np.empty(ids.shape, ids.dtype)
    top = _kernel.padding_positions(ids, padding_idx, out)
    if padding_idx >= rows or top >= rows:
        raise padding_error(ids, rule, rows)
    return out


def padding_error(ids: np.ndarray, rule: PositionRule, rows: int) -> ValueError:
    """The error of (B, S) `ids` whose ``padding`` positions run past a position table of `rows` rows."""
    padding_idx = int(rule.padding_idx or 0)
    if padding_idx >= rows:
        return ValueError(f"padding_idx {padding_idx} is not a row of position_embeddings with {rows} rows")
    counts = (ids != padding_idx).sum(axis=1)
    b = int(np.argmax(counts))
    return ValueError(
        f"token_ids[{b}] has {int(counts[b])} tokens that are not padding ({padding_idx}): "
        f"their positions run to {padding_idx + int(counts[b])}, but position_embeddings "
        f"has {rows} rows (at most {rows - 1 - padding_idx} tokens per sequence)"
    )
