"""Tables as the kernel reads them: storage kinds, coercion, quantisation.

A table is kept in the dtype it comes in when the kernel reads that dtype
natively (float32, float64, float16, bfloat16); the kernel widens each
element in registers. ``int8`` token tables carry a float32 scale and offset
per row (``value = q * scale + offset``).
bfloat16 arrives as ``ml_dtypes.bfloat16`` arrays, or (from checkpoints, when
ml_dtypes is not installed) as the raw uint16 bits, tagged here as bfloat16.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

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


def _float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) as uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    quiet = (bits >> 16) | 0x40
    return np.where(nan, quiet, rounded).astype(np.uint16)


def quantize_int8(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 quantisation: ``values[i] ~ q[i] * scale[i] + offset[i]``.

    Each row's range [min, max] is cut into 255 steps: ``scale = (max - min)
    / 255``, ``offset = min + 128 * scale``, ``q = round((x - min) / scale) -
    128`` in [-128, 127] (nearest, ties to even). An element is off by at
    most half a step of its row. (A symmetric scale, ``max |x| / 127``, wastes
    part of the range on rows whose values are not centred on 0: on
    all-MiniLM-L6-v2 its LayerNorm output is off by up to 0.038, this by
    0.026.) A constant row is exact (scale 0). Computed in float64; the
    scales and offsets are float32.

    Returns
    -------
    q : numpy.ndarray of int8, the shape of `values`
    scale : numpy.ndarray of float32, shape (rows, 2)
        Each row's scale and offset.
    """
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ValueError("cannot quantise a table holding NaN or inf to int8")
    lo = v.min(axis=1, keepdims=True)
    step = (v.max(axis=1, keepdims=True) - lo) / 255.0
    scale = step.astype(np.float32).astype(np.float64)  # the kernel's scale, exactly
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.rint((v - lo) / safe) - 128, -128, 127)
    q = np.where(scale > 0, q, 0).astype(np.int8)
    # The offset makes q * scale + offset hit the row's values as closely as
    # the float32 scale allows (its mean error is removed).
    offset = np.where(scale > 0, (v - q * scale).mean(axis=1, keepdims=True), lo)
    return q, np.concatenate([scale, offset], axis=1).astype(np.float32)


def convert(table: Table, name: str, target: str) -> Table:
    """`table` stored as `target` (one of :data:`TABLE_DTYPES`)."""
    if target == table.dtype_name:
        return table
    values = to_float32(table) if table.kind != F64 else table.data
    if target == "int8":
        q, scale = quantize_int8(values)
        return Table(q, I8, scale)
    if target == "float32":
        return Table(np.ascontiguousarray(values, dtype=np.float32), F32)
    if target == "float64":
        return Table(np.ascontiguousarray(values, dtype=np.float64), F64)
    if target == "float16":
        return Table(np.ascontiguousarray(values, dtype=np.float16), F16)
    if target == "bfloat16":
        bits = _float32_to_bfloat16_bits(np.asarray(values, dtype=np.float32))
        try:
            return Table(bits.view(bfloat16_dtype()), BF16)
        except TypeError:
            return Table(bits, BF16)
    raise ValueError(f"{name}: table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {target!r}")


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
