"""The plain-NumPy twin of table conversion (``bertembed._core.tables.convert``).

This is how bertembed converted tables before the kernel did it, kept as the
reference the kernel must match bit for bit: every table is first widened to
float32 (a float64 table stays float64; an int8 table is dequantised in
float32), then rounded to the target with NumPy's ``astype`` (float32,
float64, float16) or the bfloat16 rounding of ml_dtypes (through float32), or
quantised to int8 by :func:`quantize_int8`.
"""

from __future__ import annotations

import numpy as np


def as_float32(data: np.ndarray, kind: str, scale: np.ndarray | None = None) -> np.ndarray:
    """A table's values as float32 (kind: float32, float16, bfloat16 (uint16 bits) or int8)."""
    if kind == "bfloat16":
        return (np.asarray(data).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if kind == "int8":
        return data.astype(np.float32) * scale[:, :1] + scale[:, 1:]
    return np.asarray(data, np.float32)


def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) as uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    quiet = (bits >> 16) | 0x40
    return np.where(nan, quiet, rounded).astype(np.uint16)


def quantize_int8(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 quantisation in float64: ``values[i] ~ q[i] * scale[i] + offset[i]``.

    ``scale = float32((max - min) / 255)``, ``q = clip(rint((x - min) / scale)
    - 128, -128, 127)``, offset the mean of ``x - q * scale`` (a constant row:
    scale 0, q 0, offset its value). Returns q (int8) and (rows, 2) float32
    scale and offset. NaN/inf, or a range no float32 scale spans, is a
    ValueError.
    """
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ValueError("cannot quantise a table holding NaN or inf to int8")
    lo = v.min(axis=1, keepdims=True)
    step = (v.max(axis=1, keepdims=True) - lo) / 255.0
    with np.errstate(over="ignore"):
        scale = step.astype(np.float32).astype(np.float64)  # the kernel's scale, exactly
    if not np.isfinite(scale).all():
        raise ValueError("too wide a range for a float32 scale")
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.rint((v - lo) / safe) - 128, -128, 127)
    q = np.where(scale > 0, q, 0).astype(np.int8)
    offset = np.where(scale > 0, (v - q * scale).mean(axis=1, keepdims=True), lo)
    return q, np.concatenate([scale, offset], axis=1).astype(np.float32)


def convert(data: np.ndarray, kind: str, target: str, scale: np.ndarray | None = None):
    """(result storage, scale or None) of `data` (stored as `kind`) converted to `target`.

    bfloat16 results are uint16 bits; int8 results come with their (rows, 2)
    float32 scale and offset.
    """
    values = np.asarray(data, np.float64) if kind == "float64" else as_float32(data, kind, scale)
    if target == "int8":
        return quantize_int8(values)
    if target == "bfloat16":
        with np.errstate(over="ignore"):
            return float32_to_bfloat16_bits(np.asarray(values, dtype=np.float32)), None
    with np.errstate(over="ignore"):
        return values.astype(target), None
