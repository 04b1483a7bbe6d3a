"""The words of the kernel's id checks: what :meth:`Plan.embed` found, as the error a caller sees.

The kernel checks a call's ids once, before it writes anything, and reports
a failed check as a code (``_kernel.BAD_*``, declared in ``csrc/be_check.h``),
the flat index of the first bad id and a value. :func:`error` turns that into
the exception, naming the argument as the caller named it and printing the
caller's own value (a uint64 ``2**64 - 1`` as itself, not as the int64 the
kernel read).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _kernel, positions
from .tables import Tables
from .validate import where


class Given(NamedTuple):
    """A call's id arrays as the caller gave them (integer arrays, any dtype), and its names for the first two."""

    token_ids: np.ndarray
    segment_ids: np.ndarray | None
    position_ids: np.ndarray | None
    task_type_ids: np.ndarray | None
    token_name: str = "token_ids"
    segment_name: str = "segment_ids"


def error(plan: _kernel.Plan, call: _kernel.Call) -> Exception:
    """The exception for `call`, whose check in `plan` failed."""
    t: Tables = plan.tables
    given = call.inputs if isinstance(call.inputs, Given) else Given(call.token_ids, call.segment_ids, None, None)
    code, i = call.error, call.index
    if code == _kernel.BAD_ABSOLUTE:
        assert t.pos is not None
        return positions.absolute_error(plan.rule, int(call.value), t.pos.rows)
    if code == _kernel.BAD_TOKEN:
        return _out_of_range(given.token_name, given.token_ids, i, t.vocab, "token_embeddings")
    if code == _kernel.BAD_DROPPED:
        assert t.token_map is not None
        return IndexError(
            f"{given.token_name}[{where(given.token_ids, i)}] = {_value(given.token_ids, i)} is not among the "
            f"{t.token_map.rows} token rows kept by this trimmed layer (vocabulary {t.token_map.vocab})"
        )
    if code == _kernel.BAD_POSITION:
        assert t.pos is not None and given.position_ids is not None
        return _out_of_range("position_ids", given.position_ids, i, t.pos.rows, "position_embeddings")
    if code == _kernel.BAD_PADDING:
        assert t.pos is not None
        ids = np.asarray(call.token_ids).reshape(-1, np.shape(call.token_ids)[-1])
        return positions.padding_error(ids, plan.rule, t.pos.rows)
    if code == _kernel.BAD_SEGMENT:
        assert t.seg is not None
        return _type_error(given.segment_name, given.segment_ids, i, t.seg.rows, "segment_embeddings")
    if code == _kernel.BAD_TASK:
        assert t.task is not None
        return _type_error("task_type_ids", given.task_type_ids, i, t.task.rows, "task_embeddings")
    return RuntimeError(f"bertembed: the kernel reported an unknown check {code}")  # (a kernel of another version)


def _type_error(name: str, ids: np.ndarray | None, i: int, rows: int, table: str) -> IndexError:
    """A segment or task type id out of range; `ids` None: the default row 0 (of a table of 0 rows)."""
    if ids is None:
        return IndexError(f"{name} (default 0) is out of range for {table} with {rows} rows")
    return _out_of_range(name, ids, i, rows, table)


def _out_of_range(name: str, ids: Any, i: int, rows: int, table: str) -> IndexError:
    return IndexError(f"{name}[{where(ids, i)}] = {_value(ids, i)} is out of range for {table} with {rows} rows")


def _value(ids: Any, flat_index: int) -> int:
    return int(np.asarray(ids)[np.unravel_index(flat_index, np.shape(ids))])
