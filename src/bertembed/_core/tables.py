"""Tables as the kernel reads them: storage kinds, coercion, quantisation.

A table is kept in the dtype it comes in when the kernel reads that dtype
natively (float32, float64, float16, bfloat16); the kernel widens each
element in registers. ``int8`` token tables carry a float32 scale and offset
per row (``value = q * scale + offset``).
bfloat16 arrives as ``ml_dtypes.bfloat16`` arrays, or (from checkpoints and
conversions) as the raw uint16 bits, tagged here as bfloat16: loading or
converting to bfloat16 never imports ml_dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import _kernel, dtypes, validate
from .dtypes import BF16, F32, F64, I8
from .trim import TokenMap


class Table(NamedTuple):
    """One embedding table: the array the kernel reads, its kind, and for int8
    the (rows, 2) float32 scale and offset of each row."""

    data: np.ndarray
    kind: int
    scale: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.data.shape[0])

    @property
    def hidden(self) -> int:
        return int(self.data.shape[1])

    @property
    def dtype(self) -> dtypes.DType:
        """The registry's entry for how the table is stored."""
        return dtypes.BY_KIND[self.kind]

    @property
    def dtype_name(self) -> str:
        return dtypes.BY_KIND[self.kind].name

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) + (0 if self.scale is None else int(self.scale.nbytes))


def as_table(name: str, value: Any) -> Table:
    """A 2-D table the kernel reads as it is: native order, C-contiguous.

    float32, float64, float16 and bfloat16 (``ml_dtypes.bfloat16``) arrays
    are kept in their dtype; lists and other non-arrays become float64. Any
    other dtype (integers, bool, complex, longdouble, object) is a TypeError:
    converting it silently would hide a mistake.
    """
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a 2-D float array: {exc}") from None
    kind = dtypes.kind_of(arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("="))
    if kind is None:
        raise TypeError(
            f"{name} must be a {dtypes.listed(dtypes.AS_STORED)} array, got dtype "
            f"{arr.dtype} (convert it with .astype(np.float32))"
        )
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, hidden), got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has hidden size 0, shape {arr.shape}")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return Table(arr, kind)


def bits_as_bfloat16(bits: np.ndarray, name: str | None = None) -> Table:
    """Raw bfloat16 bits (uint16), e.g. mapped from a checkpoint, tagged as
    bfloat16; ml_dtypes is never imported for them (the kernel reads the
    bits). With a `name`, checked as :func:`as_table` checks a table."""
    if name is None:
        return Table(bits, BF16)
    checked = as_table(name, bits.view(np.float16))  # the same item size: shape and layout checks
    return Table(checked.data.view(np.uint16), BF16)


def to_float32(table: Table) -> np.ndarray:
    """The table's values as a float32 array (a copy unless already float32)."""
    if table.kind == F32:
        return table.data
    if table.kind == BF16:
        return (table.data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if table.kind == I8:
        assert table.scale is not None
        return table.data.astype(np.float32) * table.scale[:, :1] + table.scale[:, 1:]
    return table.data.astype(np.float32)


#: Rows converted per kernel call: progress is reported between calls.
_BLOCK_BYTES = 32 << 20

#: ``progress(done_rows, total_rows, label)``.
Progress = Callable[[int, int, str], None]


def convert(table: Table, name: str, target: str, *, num_threads: int = 0, progress: Progress | None = None) -> Table:
    """`table` stored as `target` (one of :data:`TABLE_DTYPES`), converted by the kernel.

    The source is read row by row, in parallel and without the GIL, from
    wherever it lives (a memory-mapped checkpoint is streamed, never copied);
    only the result is allocated. Every element is rounded to nearest, ties
    to even, exactly as NumPy's ``astype`` (float16) and ml_dtypes (bfloat16,
    through float32 for a float64 source) round it.

    ``"int8"`` quantises each row with its own scale and offset, ``value ~ q
    * scale + offset``: the row's range [lo, hi] is cut into 255 steps,
    ``scale = float32((hi - lo) / 255)``, ``q = round((x - lo) / scale) -
    128`` in [-128, 127] (nearest, ties to even), and the offset is the mean
    of ``x - q * scale`` over the row (it removes the row's mean error), all
    in float64; the scales and offsets are stored as float32. An element is
    off by at most about half a step of its row. (A symmetric scale, ``max
    |x| / 127``, wastes part of the range on rows whose values are not
    centred on 0: on all-MiniLM-L6-v2 its LayerNorm output is off by up to
    0.038, this by 0.026.) A constant row is exact (scale 0, offset its
    value). A row holding NaN or inf, or one whose range no float32 scale
    spans, is a ValueError naming the table and the row.

    `num_threads` <= 0: the layer's automatic rule (all the threads a call may
    use now). `progress(done_rows, rows, label)` is called as rows are done.
    """
    stored = dtypes.BY_NAME.get(target)
    if stored is None:
        raise ValueError(f"{name}: table_dtype must be one of {', '.join(dtypes.TABLE_DTYPES)}, got {target!r}")
    if target == table.dtype_name:
        return table
    rows, hidden = table.data.shape
    out = Table(
        np.empty((rows, hidden), stored.storage),
        stored.kind,
        np.empty((rows, 2), np.float32) if stored.quantised else None,
    )
    label = f"converting {name} to {target}"
    block = max(1, _BLOCK_BYTES // max(1, table.data.strides[0] if rows else 1))
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        row, outcome = _kernel.convert_rows(table, out, start, stop, num_threads)
        if outcome:
            _quantise_error(table, name, row, outcome)
        if progress is not None:
            progress(stop, rows, label)
    return out  # bfloat16: the raw bits, tagged (no ml_dtypes import)


def _quantise_error(table: Table, name: str, row: int, outcome: int) -> None:
    if outcome == 1:
        raise ValueError(f"cannot quantise a table holding NaN or inf to int8: {name} row {row} holds one")
    part = Table(table.data[row : row + 1], table.kind, None if table.scale is None else table.scale[row : row + 1])
    values = part.data if part.kind == F64 else to_float32(part)
    raise ValueError(
        f"cannot quantise {name} to int8: row {row} spans {float(values.min())!r} to {float(values.max())!r}, "
        "too wide a range for a float32 scale"
    )


class Tables(NamedTuple):
    """Validated tables and LayerNorm parameters, ready for the kernel.

    `token_map`: a trimmed token table's id map (checked; see
    :mod:`bertembed._core.trim`): token ids are then original ids, and ``tok``
    holds the kept rows only.
    """

    tok: Table
    pos: Table | None
    seg: Table | None
    task: Table | None
    ln: validate.LayerNormParams | None
    eps: float
    token_map: TokenMap | None = None

    @property
    def vocab(self) -> int:
        """Token ids accepted, ``[0, vocab)``: the token table's rows, or a trimmed table's original vocabulary."""
        return self.tok.rows if self.token_map is None else self.token_map.vocab

    @property
    def hidden(self) -> int:
        return self.tok.hidden

    @property
    def wide(self) -> bool:
        """Whether a table is float64 (the rows are then computed in float64)."""
        return any(t is not None and t.dtype.wide for t in (self.tok, self.pos, self.seg, self.task))

    @property
    def nbytes(self) -> int:
        """Bytes of the tables (int8 scales and a trimmed table's id map included)."""
        maps = 0 if self.token_map is None else self.token_map.nbytes
        return maps + sum(t.nbytes for t in (self.tok, self.pos, self.seg, self.task) if t is not None)


def prepare_tables(
    token_embeddings: Any,
    position_embeddings: Any,
    segment_embeddings: Any,
    ln_weight: Any,
    ln_bias: Any,
    ln_eps: Any,
    task_embeddings: Any = None,
    table_dtype: str | None = None,
) -> Tables:
    """Check the tables and LayerNorm parameters once; normalise them.

    Tables may be arrays or :class:`Table` (already normalised, e.g. mapped
    from a checkpoint). `table_dtype` converts the token table (``int8``:
    quantised, the others kept) or every table (a float dtype).
    """
    tok = _table("token_embeddings", token_embeddings)
    pos = None if position_embeddings is None else _table("position_embeddings", position_embeddings)
    seg = None if segment_embeddings is None else _table("segment_embeddings", segment_embeddings)
    task = None if task_embeddings is None else _table("task_embeddings", task_embeddings)
    hidden = tok.hidden
    for name, table in (("position_embeddings", pos), ("segment_embeddings", seg), ("task_embeddings", task)):
        if table is not None and table.hidden != hidden:
            raise ValueError(
                f"hidden sizes differ: token_embeddings has shape {tok.data.shape}, {name} has shape {table.data.shape}"
            )
    ln = validate.as_ln_params(ln_weight, ln_bias, hidden)
    eps = validate.as_eps(ln_eps)
    tables = Tables(tok, pos, seg, task, ln, eps)
    return tables if table_dtype is None else convert_tables(tables, table_dtype)


def converted_by(tables: Tables, table_dtype: str) -> list[Table]:
    """The tables :func:`convert_tables` converts to `table_dtype`, in its order:
    the token table only for a quantised dtype (int8), else every table; a
    table already stored as `table_dtype` is kept, not converted.

    Examples
    --------
    >>> import numpy as np
    >>> from bertembed._core.tables import converted_by, prepare_tables
    >>> t = prepare_tables(np.ones((10, 4), np.float32), np.ones((8, 4), np.float32), None,
    ...                    None, None, 1e-12, None, None)
    >>> [x.rows for x in converted_by(t, "int8")], [x.rows for x in converted_by(t, "float16")]
    ([10], [10, 8])
    """
    every = [tables.tok] if dtypes.BY_NAME[table_dtype].quantised else [tables.tok, tables.pos, tables.seg, tables.task]
    return [t for t in every if t is not None and t.dtype_name != table_dtype]


def convert_tables(
    tables: Tables, table_dtype: str, *, num_threads: int = 0, progress: Progress | None = None
) -> Tables:
    """`tables` stored as `table_dtype`: ``int8`` quantises the token table
    only (the others are kept), a float dtype converts every table (see
    :func:`converted_by`). See :func:`bertembed._core.tables.convert`."""

    def conv(t: Table | None, name: str) -> Table | None:
        return None if t is None else convert(t, name, table_dtype, num_threads=num_threads, progress=progress)

    t = tables
    tok = convert(t.tok, "token_embeddings", table_dtype, num_threads=num_threads, progress=progress)
    if dtypes.BY_NAME[table_dtype].quantised:
        return t._replace(tok=tok)
    return t._replace(
        tok=tok,
        pos=conv(t.pos, "position_embeddings"),
        seg=conv(t.seg, "segment_embeddings"),
        task=conv(t.task, "task_embeddings"),
    )


def _table(name: str, value: Any) -> Table:
    return value if isinstance(value, Table) else as_table(name, value)


def take_rows(table: Table, rows: np.ndarray) -> Table:
    """The rows `rows` of `table`, in that order, in its stored dtype (int8: with their scales)."""
    data = np.take(table.data, rows, axis=0)
    scale = None if table.scale is None else np.take(table.scale, rows, axis=0)
    return Table(data, table.kind, scale)
