"""Coercion and validation of inputs: everything the kernel must not see.

Each function returns a normalised array (native byte order, C-contiguous,
a dtype the kernel has a specialisation for) or raises TypeError,
ValueError or IndexError with a message naming the argument. The ids' values
are not checked here: the kernel checks them, once (``bad_ids.py`` words
what it finds).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from . import dtypes

_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
#: How to make rows of one length, said by every error about ragged ids.
PAD_HINT = (
    "pad them to one length and pass the attention_mask (transformers: "
    "tokenizer(..., padding=True); tokenizers: tokenizer.enable_padding())"
)


def as_ids(name: str, value: Any) -> np.ndarray:
    """An integer array as given (any integer dtype); others are a TypeError.

    Ragged nested lists are a ValueError that names the row lengths, a Python
    int beyond 64 bits an IndexError (out of range like any id past a table),
    a missing value (``None``, pandas' NA) a ValueError.
    """
    arr = _as_array(name, value)
    kind = arr.dtype.kind
    if kind not in "iu":
        if arr.size == 0 and not isinstance(value, np.ndarray) and kind == "f":
            return arr.astype(np.int64)  # [] and [[]] come out as float64
        raise _not_integer(name, value, arr)
    return arr


def _as_array(name: str, value: Any) -> np.ndarray:
    """`value` as an array (an array as it is); ragged nested lists are a
    ValueError that names `name` and the row lengths."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except ValueError as exc:
        raise _ragged(name, value) or exc from None


def _ragged(name: str, value: Any) -> ValueError | None:
    """The error for nested sequences whose rows differ in length, if they do."""
    if not isinstance(value, (list, tuple)):
        return None
    try:
        lengths = [len(row) for row in value]
    except TypeError:
        return None
    if len(set(lengths)) < 2:
        return None
    shown = ", ".join(map(str, lengths[:8])) + (", ..." if len(lengths) > 8 else "")
    return ValueError(f"{name} is ragged: its rows have lengths {shown}; {PAD_HINT}")


def where(arr: Any, flat_index: int) -> str:
    """The multi-index of `flat_index` in an array of `arr`'s shape, as ``"b, s"``."""
    return ", ".join(str(int(k)) for k in np.unravel_index(flat_index, np.shape(arr)))


def _not_integer(name: str, value: Any, arr: np.ndarray) -> Exception:
    """Why `arr` (from `value`) is not an integer array, as precisely as known."""
    source_kind = getattr(getattr(value, "dtype", None), "kind", "")
    if arr.dtype.kind == "f" and source_kind in ("i", "u") and arr.size:
        # A nullable integer array (pandas Int64) with NA comes out as floats with NaN.
        missing = np.isnan(arr)
        if missing.any():
            i = int(np.argmax(missing.reshape(-1)))
            return ValueError(
                f"{name} holds missing values (NA), the first at [{where(arr, i)}]; "
                f"every id must be an integer: drop or fill them first"
            )
    if arr.dtype.kind == "O":
        flat = arr.reshape(-1)
        for i, item in enumerate(flat):
            if item is None or type(item).__name__ == "NAType":
                return ValueError(f"{name}[{where(arr, i)}] is missing ({item!r}); every id must be an integer")
            if isinstance(item, numbers.Integral) and not isinstance(item, bool):
                if not -(2**63) <= int(item) < 2**64:
                    return IndexError(
                        f"{name}[{where(arr, i)}] = {int(item)} is out of range "
                        f"(ids are table rows; this one does not even fit in 64 bits)"
                    )
                continue
            if isinstance(item, (list, tuple)):
                break  # rows nested deeper in one place than another
            return TypeError(
                f"{name} must be an integer array; {name}[{where(arr, i)}] is {type(item).__name__} {item!r}"
            )
    return TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")


def id_dtype(*arrays: np.ndarray | None) -> np.dtype:
    """int32 when every id array is int32 already, else int64."""
    for a in arrays:
        if a is not None and a.dtype != _I32:
            return _I64
    return _I32


def to_kernel_ids(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Native, C-contiguous, ``dtype`` (int32/int64); values already range-checked."""
    if arr.dtype == dtype and arr.flags.c_contiguous:
        return arr
    return np.ascontiguousarray(arr, dtype=dtype)


def _contiguous_as(arr: np.ndarray, dtype: type) -> np.ndarray:
    if arr.dtype == dtype and arr.flags.c_contiguous:
        return arr
    return np.ascontiguousarray(arr, dtype=dtype)


class LayerNormParams(NamedTuple):
    """LayerNorm weight and bias, (H,) C-contiguous, in float64 (the values the
    layer computes with and saves) and in float32 (the same values rounded,
    for float32 rows); a bias of None: LayerNorm without bias. The kernel
    reads them by name."""

    weight64: np.ndarray
    bias64: np.ndarray | None
    weight32: np.ndarray
    bias32: np.ndarray | None


def as_ln_params(weight: Any, bias: Any, hidden: int) -> LayerNormParams | None:
    """LayerNorm weight and bias as :class:`LayerNormParams` (inputs already
    of a dtype are used as they are), or None for no LayerNorm. A weight
    without a bias is a LayerNorm without bias (ModernBERT); a bias without
    a weight is an error."""
    if weight is None and bias is None:
        return None
    if weight is None:
        raise ValueError("ln_bias was given without ln_weight (a LayerNorm needs its weight)")
    checked: list[np.ndarray | None] = []
    for name, value in (("ln_weight", weight), ("ln_bias", bias)):
        if value is None:
            checked.append(None)
            continue
        arr = np.asarray(value)
        if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
            raise TypeError(f"{name} must be a float array, got dtype {arr.dtype}")
        if arr.shape != (hidden,):
            raise ValueError(f"{name} must have shape ({hidden},), got shape {arr.shape}")
        checked.append(arr)
    w, b = checked
    assert w is not None  # checked above
    return LayerNormParams(
        weight64=_contiguous_as(w, np.float64),
        bias64=None if b is None else _contiguous_as(b, np.float64),
        weight32=_contiguous_as(w, np.float32),
        bias32=None if b is None else _contiguous_as(b, np.float32),
    )


def as_eps(value: Any) -> float:
    """``ln_eps`` as a finite positive float."""
    if type(value) is float and 0.0 < value < math.inf:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"ln_eps must be a real number, got {type(value).__name__}")
    eps = float(value)
    if not (np.isfinite(eps) and eps > 0.0):
        raise ValueError(f"ln_eps must be a finite positive number, got {value!r}")
    return eps


def as_result_dtype(dtype: Any, default: np.dtype) -> np.dtype:
    """The result dtype: one of :data:`dtypes.RESULTS` (bfloat16: ml_dtypes')."""
    if dtype is None:
        return default
    if isinstance(dtype, str) and dtype == dtypes.BFLOAT16.name:
        return dtypes.bfloat16_dtype()
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be {dtypes.listed(dtypes.RESULTS)}, got {dtype!r}") from None
    found = dtypes.of_array(dt)
    if found is None or not found.result:
        raise TypeError(f"dtype must be {dtypes.listed(dtypes.RESULTS)}, got {dt}")
    return dt


def as_num_threads(value: Any) -> int | None:
    """None (automatic) or a positive int."""
    if value is None:
        return None
    if type(value) is int and value > 0:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"num_threads must be a positive int or None, got {value!r}")
    n = int(value)
    if n <= 0:
        raise ValueError(f"num_threads must be a positive int or None, got {n}")
    return n


def as_mask(value: Any, shape: tuple[int, ...], ids_name: str = "token_ids") -> np.ndarray:
    """``attention_mask``: integers or bools of the ids' shape; returned as
    C-contiguous uint8 (1: keep the row, 0: a padding position). Values
    other than 0 and 1 are a ValueError."""
    arr = _as_array("attention_mask", value)
    if arr.dtype.kind not in "biu":
        raise TypeError(f"attention_mask must be an integer or bool array, got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"attention_mask has shape {arr.shape}, {ids_name} has shape {shape}")
    if arr.dtype.kind == "b":
        return np.ascontiguousarray(arr).view(np.uint8)
    keep = arr != 0
    bad = keep & (arr != 1)
    if bad.any():
        i = int(np.argmax(bad.reshape(-1)))
        where = ", ".join(str(int(k)) for k in np.unravel_index(i, arr.shape))
        raise ValueError(
            f"attention_mask must hold only 0 (padding) and 1 (a token); "
            f"attention_mask[{where}] = {int(arr.reshape(-1)[i])}"
        )
    return np.ascontiguousarray(keep).view(np.uint8)


def check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype, inputs: list[Any]) -> None:
    """``out`` must be a writable C-contiguous array of ``shape`` and ``dtype``
    that shares no memory with any input."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}, expected {shape}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {out.dtype}, expected {dtype}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    for arr in inputs:
        if isinstance(arr, np.ndarray) and np.may_share_memory(out, arr):
            raise ValueError("out overlaps an input array; pass a separate buffer")
