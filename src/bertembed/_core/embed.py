"""One call of the kernel: normalise its inputs into one typed call, then compute it.

:func:`bind` binds tables, a position rule and a result dtype to the kernel
(a :class:`~bertembed._core._kernel.Plan`: a layer makes one when it is built,
``bert_embeddings`` one per call); :func:`embed_ids` turns one call's inputs
into a :class:`~bertembed._core._kernel.Call` (:func:`normalise`) and hands
it to the plan, which checks the ids and computes; a failed check is worded
by ``bad_ids.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import _kernel, bad_ids, dtypes, positions, runtime, validate
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
    report: Callable[[_kernel.Plan, _kernel.Call], Exception]  #: the exception of a call whose ids failed a check


#: What a call's token and segment ids are called unless the caller says otherwise.
NAMES = ("token_ids", "segment_ids")


def bind(tables: Tables, rule: PositionRule, dtype: np.dtype) -> _kernel.Plan:
    """`tables`, `rule` and the result `dtype` (validated) bound to the kernel."""
    result = dtypes.of_array(dtype)
    if result is None or not result.result:
        raise TypeError(f"dtype must be {dtypes.listed(dtypes.RESULTS)}, got {dtype}")
    wide = tables.wide or result.wide
    output = Output(dtype, result.kind, wide, _pool.empty, POOL_MIN_BYTES, STREAM_MIN_BYTES, bad_ids.error)
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
    names: tuple[str, str] = NAMES,
    plan: _kernel.Plan | None = None,
) -> np.ndarray:
    """Normalise a call's inputs into one :class:`~bertembed._core._kernel.Call`, and compute it.

    Inputs already in the kernel's form are taken as they are
    (:meth:`Plan.given <bertembed._core._kernel.Plan.given>`); others are
    converted by :func:`normalise`. The kernel checks the ids, once, before
    it writes anything (``out`` is untouched when a check fails), and raises
    what :func:`bertembed._core.bad_ids.error` makes of what it found. `rule`
    numbers positions when `position_ids` is None; `attention_mask` is
    checked whenever given, and with `zero_masked` its 0 positions give rows
    of zeros (DeBERTa's embedding module does this). `names`: what the
    caller called the token and segment ids (transformers' ``input_ids`` and
    ``token_type_ids``), for the error messages. `plan`: `t`, `rule` and
    `dtype` already bound (a layer's, see :func:`bind`); None binds them for
    this call.
    """
    nthreads = validate.as_num_threads(num_threads) or 0
    if plan is None:
        plan = bind(t, rule, dtype)
    call = None
    if position_ids is None and task_type_ids is None and out is None and (attention_mask is None or not zero_masked):
        inputs = None if names == NAMES else bad_ids.Given(token_ids, segment_ids, None, None, *names)
        call = plan.given(token_ids, segment_ids, nthreads, inputs)
    if call is None:
        call = normalise(
            t,
            token_ids,
            segment_ids,
            position_ids,
            out,
            dtype,
            nthreads,
            originals,
            rule=rule,
            task_type_ids=task_type_ids,
            attention_mask=attention_mask,
            zero_masked=zero_masked,
            names=names,
        )
    elif attention_mask is not None:  # (checked; it changes nothing here)
        validate.as_mask(attention_mask, token_ids.shape, names[0])
    return plan.embed(call)


def normalise(
    t: Tables,
    token_ids: Any,
    segment_ids: Any,
    position_ids: Any,
    out: Any,
    dtype: np.dtype,
    num_threads: int,
    originals: tuple[Any, ...] = (),
    *,
    rule: PositionRule = positions.ABSOLUTE,
    task_type_ids: Any = None,
    attention_mask: Any = None,
    zero_masked: bool = False,
    names: tuple[str, str] = NAMES,
) -> _kernel.Call:
    """A call's inputs as the kernel takes them: ids as C-contiguous (B, S)
    int32 (when every id array is int32 already) or int64, the mask as uint8,
    `out` checked; TypeError or ValueError for what cannot be (the ids'
    values are the kernel's to check). Arguments as :func:`embed_ids`'s."""
    tok_name, seg_name = names
    tok_ids = validate.as_ids(tok_name, token_ids)
    if tok_ids.ndim not in (1, 2):
        raise ValueError(f"{tok_name} must be 1-D (S,) or 2-D (B, S), got shape {tok_ids.shape}")
    batch, seq = (1, tok_ids.shape[0]) if tok_ids.ndim == 1 else tok_ids.shape

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
    keep = None
    if attention_mask is not None:
        keep = validate.as_mask(attention_mask, tok_ids.shape, tok_name)
        keep = keep.reshape(batch, seq) if zero_masked else None

    if out is not None:
        validate.check_out(
            out,
            (*tok_ids.shape, t.hidden),
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
    kdt = validate.id_dtype(tok_ids, seg_ids, pos_ids, task_ids)
    if positions.needs_int64(rule, seq):
        kdt = np.dtype(np.int64)

    def kernel_ids(ids: np.ndarray | None) -> np.ndarray | None:
        """(B, S) ids, or position ids of (1 or B, S), as `kdt`."""
        if ids is None:
            return None
        return validate.to_kernel_ids(ids, kdt).reshape(ids.shape[0] if ids.ndim == 2 else 1, seq)

    given = bad_ids.Given(tok_ids, seg_ids, pos_ids, task_ids, tok_name, seg_name)
    return _kernel.Call(
        validate.to_kernel_ids(tok_ids, kdt).reshape(batch, seq),
        kernel_ids(pos_ids),
        kernel_ids(seg_ids),
        kernel_ids(task_ids),
        keep,
        out,
        tok_ids.ndim == 1,
        num_threads,
        given,
    )
