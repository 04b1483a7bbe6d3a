"""One call of the kernel: check the ids (and ``out``) against validated tables, then compute.

:func:`bind` binds tables, a position rule and a result dtype to the kernel
(a :class:`~bertembed._core._kernel.Plan`: a layer makes one when it is built,
``bert_embeddings`` one per call); :func:`embed_ids` checks and converts one
call's inputs into a :class:`Call` and hands it to the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import _kernel, dtypes, positions, runtime, trim, validate
from .pool import MIN_BYTES as POOL_MIN_BYTES
from .pool import pool as _pool
from .positions import PositionRule
from .tables import Table, Tables

runtime.install_fork_handlers()

#: LayerNorm results at least this big are written with non-temporal stores:
#: they would not fit in cache anyway, and streaming them saves the read of
#: every destination line (measured 10-15% faster for float32 B=32 S=512).
#: Plain sums are not streamed: there the extra copy through a row buffer
#: costs more than it saves (measured 12% slower for float64 B=32 S=512).
#: Read when a plan is bound.
STREAM_MIN_BYTES = 16 << 20


class Output(NamedTuple):
    """How a plan makes and writes results (read once, when it is bound)."""

    dtype: np.dtype  #: the result dtype
    kind: int  #: its storage kind
    wide: bool  #: rows computed in float64 (a float64 table or result)
    empty: Callable[[tuple[int, ...], np.dtype], np.ndarray]  #: allocates results of pool_min_bytes or more
    pool_min_bytes: int
    stream_min_bytes: int  #: LayerNorm results this big or bigger are streamed


class Call(NamedTuple):
    """One checked call's arrays, as :meth:`Plan.embed <bertembed._core._kernel.Plan.embed>` reads them.

    Every id array is C-contiguous, of the token ids' dtype (int32 or int64)
    and in range; None means the plan's default (positions by its rule, row 0
    of the segment and task tables, no mask).
    """

    token_ids: np.ndarray  #: (B, S)
    position_ids: np.ndarray | None  #: (1 or B, S)
    segment_ids: np.ndarray | None  #: (B, S)
    task_type_ids: np.ndarray | None  #: (B, S)
    keep: np.ndarray | None  #: (B, S) uint8: rows with 0 are zeros
    out: np.ndarray  #: (B, S, H), the plan's dtype


def bind(tables: Tables, rule: PositionRule, dtype: np.dtype) -> _kernel.Plan:
    """`tables`, `rule` and the result `dtype` (validated) bound to the kernel."""
    result = dtypes.of_array(dtype)
    if result is None or not result.result:
        raise TypeError(f"dtype must be {dtypes.listed(dtypes.RESULTS)}, got {dtype}")
    output = Output(dtype, result.kind, tables.wide or result.wide, _pool.empty, POOL_MIN_BYTES, STREAM_MIN_BYTES)
    return _kernel.Plan(tables, rule, output)


def _type_ids(
    name: str,
    value: Any,
    table: Table | None,
    table_name: str,
    shape: tuple[int, ...],
    tok_name: str,
) -> np.ndarray | None:
    """Segment or task ids: None, or an integer array of the token ids' shape."""
    if value is None:
        return None
    if table is None:
        raise ValueError(f"{name} was given but there is no {table_name} table")
    ids = validate.as_ids(name, value)
    if ids.shape != shape:
        raise ValueError(f"{name} has shape {ids.shape}, {tok_name} has shape {shape}")
    return ids


def embed_ids(
    t: Tables,
    token_ids: Any,
    segment_ids: Any,
    position_ids: Any,
    out: Any,
    dtype: np.dtype,
    num_threads: Any,
    originals: tuple[Any, ...] = (),
    *,
    rule: PositionRule = positions.ABSOLUTE,
    task_type_ids: Any = None,
    attention_mask: Any = None,
    zero_masked: bool = False,
    names: tuple[str, str] = ("token_ids", "segment_ids"),
    plan: _kernel.Plan | None = None,
) -> np.ndarray:
    """Check the ids (and ``out``) against validated tables, then run the kernel.

    `rule` numbers positions when `position_ids` is None. `attention_mask`
    is checked whenever given; with `zero_masked` its 0 positions give rows
    of zeros (DeBERTa's embedding module does this). `names`: what the caller
    called the token and segment ids (transformers' ``input_ids`` and
    ``token_type_ids``), for the error messages. `plan`: `t`, `rule` and
    `dtype` already bound (a layer's, see :func:`bind`); None binds them for
    this call.
    """
    tok_name, seg_name = names
    nthreads = validate.as_num_threads(num_threads)
    tok_ids = validate.as_ids(tok_name, token_ids)
    if tok_ids.ndim not in (1, 2):
        raise ValueError(f"{tok_name} must be 1-D (S,) or 2-D (B, S), got shape {tok_ids.shape}")
    batch, seq = (1, tok_ids.shape[0]) if tok_ids.ndim == 1 else tok_ids.shape
    hidden = t.hidden

    seg_ids = _type_ids(seg_name, segment_ids, t.seg, "segment_embeddings", tok_ids.shape, tok_name)
    task_ids = _type_ids("task_type_ids", task_type_ids, t.task, "task_embeddings", tok_ids.shape, tok_name)

    pos_ids = None
    if position_ids is not None:
        if t.pos is None:
            raise ValueError("position_ids was given but there is no position_embeddings table")
        pos_ids = validate.as_ids("position_ids", position_ids)
        allowed = {(seq,), (1, seq), (batch, seq)}
        if pos_ids.shape not in allowed:
            raise ValueError(
                f"position_ids has shape {pos_ids.shape}, expected (S,), (1, S) or (B, S) "
                f"with {tok_name} of shape {tok_ids.shape}"
            )
    elif t.pos is not None and rule.kind == "absolute":
        positions.check_absolute(rule, seq, t.pos.rows)
    keep = None
    if attention_mask is not None:
        keep = validate.as_mask(attention_mask, tok_ids.shape, tok_name)
        keep = keep.reshape(batch, seq) if zero_masked else None

    shape = (*tok_ids.shape, hidden)
    if out is not None:
        validate.check_out(
            out,
            shape,
            dtype,
            [
                token_ids,
                segment_ids,
                position_ids,
                task_type_ids,
                attention_mask,
                *originals,
                *(x.data for x in (t.tok, t.pos, t.seg, t.task) if x is not None),
                None if t.token_map is None else t.token_map.map,
            ],
        )
    if batch * seq == 0:
        return out if out is not None else np.empty(shape, dtype)

    kdt = validate.id_dtype(tok_ids, seg_ids, pos_ids, task_ids)
    if positions.needs_int64(rule, seq):
        kdt = np.dtype(np.int64)
    tk = validate.ids_for_kernel(tok_name, tok_ids, t.vocab, "token_embeddings", kdt).reshape(batch, seq)
    if t.token_map is not None and t.token_map.unknown is None:  # a trimmed table: its trimmed-away ids
        trim.check_kept(tok_name, tok_ids, tk, t.token_map)
    pk = None
    if t.pos is not None:
        if pos_ids is not None:
            pk = validate.ids_for_kernel("position_ids", pos_ids, t.pos.rows, "position_embeddings", kdt)
            pk = pk.reshape(-1, seq)
        elif rule.kind == "padding":
            pk = positions.padding_positions(tk, rule, t.pos.rows)
        # else the kernel reads rows offset + s (the absolute rule)
    sk = _kernel_type_ids(seg_name, seg_ids, t.seg, "segment_embeddings", kdt, (batch, seq))
    qk = _kernel_type_ids("task_type_ids", task_ids, t.task, "task_embeddings", kdt, (batch, seq))

    result = out if out is not None else _pool.empty(shape, dtype)
    if plan is None:
        plan = bind(t, rule, dtype)
    plan.embed(Call(tk, pk, sk, qk, keep, result), 0 if nthreads is None else nthreads)
    return result


def _kernel_type_ids(
    name: str, ids: np.ndarray | None, table: Table | None, what: str, dtype: np.dtype, shape: tuple[int, int]
) -> np.ndarray | None:
    """Segment or task ids range-checked as (B, S) `dtype`; None for row 0 (checked to exist)."""
    if table is None:
        return None
    if ids is None:
        if table.rows == 0:
            raise IndexError(f"{name} (default 0) is out of range for {what} with 0 rows")
        return None
    return validate.ids_for_kernel(name, ids, table.rows, what, dtype).reshape(shape)
