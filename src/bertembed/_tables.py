"""Tables as the kernel reads them: storage kinds, coercion, quantisation.

A table is kept in the dtype it comes in when the kernel reads that dtype
natively (float32, float64, float16, bfloat16); the kernel widens each
element in registers. ``int8`` token tables carry a float32 scale and offset
per row (``value = q * scale + offset``).
bfloat16 arrives as ``ml_dtypes.bfloat16`` arrays, or (from checkpoints, when
ml_dtypes is not installed) as the raw uint16 bits, tagged here as bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import _kernel

#: Storage kinds, as numbered by the kernel (``_rows.h``).
F32, F64, F16, BF16, I8 = 0, 1, 2, 3, 4

KIND_NAMES = {F32: "float32", F64: "float64", F16: "float16", BF16: "bfloat16", I8: "int8"}
_BY_DTYPE = {np.dtype(np.float32): F32, np.dtype(np.float64): F64, np.dtype(np.float16): F16}

#: Names accepted for ``table_dtype`` (conversion when a layer is built).
TABLE_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8")


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
    def dtype_name(self) -> str:
        return KIND_NAMES[self.kind]

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) + (0 if self.scale is None else int(self.scale.nbytes))


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether `dtype` is ml_dtypes' bfloat16 in native byte order (checked
    without importing it). A byte-swapped bfloat16 is not: the kernel would
    read or write its bytes the wrong way round."""
    return dtype.name == "bfloat16" and dtype.itemsize == 2 and dtype.isnative


def bfloat16_dtype() -> np.dtype:
    """``ml_dtypes.bfloat16`` as a NumPy dtype; TypeError when ml_dtypes is missing."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            "bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)"
        ) from None
    return np.dtype(ml_dtypes.bfloat16)


def kind_of(dtype: np.dtype) -> int | None:
    """The kernel's kind for a table or result dtype, or None if it has none."""
    kind = _BY_DTYPE.get(dtype)
    if kind is None and is_bfloat16(dtype):
        return BF16
    return kind


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
    kind = kind_of(arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("="))
    if kind is None:
        raise TypeError(
            f"{name} must be a float32, float64, float16 or bfloat16 array, got dtype "
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


def bits_as_bfloat16(bits: np.ndarray) -> Table:
    """A table of raw bfloat16 bits (uint16), e.g. mapped from a checkpoint."""
    return Table(bits, BF16)


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


#: Kinds by ``table_dtype`` name.
KIND_OF_NAME = {name: kind for kind, name in KIND_NAMES.items()}

#: Rows converted per kernel call: progress is reported between calls.
_BLOCK_BYTES = 32 << 20

#: ``progress(done_rows, total_rows, label)``.
Progress = Callable[[int, int, str], None]


def convert(
    table: Table, name: str, target: str, *, num_threads: int = 0, progress: Progress | None = None
) -> Table:
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
    if target not in KIND_OF_NAME:
        raise ValueError(f"{name}: table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {target!r}")
    if target == table.dtype_name:
        return table
    kind = KIND_OF_NAME[target]
    rows, hidden = table.data.shape
    storage = {F32: np.float32, F64: np.float64, F16: np.float16, BF16: np.uint16, I8: np.int8}[kind]
    out = np.empty((rows, hidden), storage)
    scale = np.empty((rows, 2), np.float32) if kind == I8 else None
    label = f"converting {name} to {target}"
    block = max(1, _BLOCK_BYTES // max(1, table.data.strides[0] if rows else 1))
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        row, outcome = _kernel.convert_rows(table.data, table.kind, table.scale, out, kind, scale, start, stop,
                                            num_threads)
        if outcome:
            _quantise_error(table, name, row, outcome)
        if progress is not None:
            progress(stop, rows, label)
    if kind == BF16:
        try:
            return Table(out.view(bfloat16_dtype()), BF16)
        except TypeError:  # no ml_dtypes: the bits, tagged
            return Table(out, BF16)
    return Table(out, kind, scale)


def _quantise_error(table: Table, name: str, row: int, outcome: int) -> None:
    if outcome == 1:
        raise ValueError(
            f"cannot quantise a table holding NaN or inf to int8: {name} row {row} holds one"
        )
    part = Table(table.data[row:row + 1], table.kind, None if table.scale is None else table.scale[row:row + 1])
    values = part.data if part.kind == F64 else to_float32(part)
    raise ValueError(
        f"cannot quantise {name} to int8: row {row} spans {float(values.min())!r} to {float(values.max())!r}, "
        "too wide a range for a float32 scale"
    )


def as_table_dtype(value: Any) -> str | None:
    """``table_dtype`` as one of :data:`TABLE_DTYPES`, or None (keep)."""
    if value is None:
        return None
    if isinstance(value, str):
        name = value
    else:
        try:
            dt = np.dtype(value)
        except TypeError:
            raise TypeError(f"table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {value!r}") from None
        name = "bfloat16" if is_bfloat16(dt) else dt.name
    if name not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {value!r}")
    return name
