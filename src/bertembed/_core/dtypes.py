"""What the package knows about each table and result dtype, declared once.

:data:`REGISTRY` holds one :class:`DType` per dtype a table can be stored in
or a result written in: its name, the kernel's storage kind, the NumPy dtype
that holds its bytes, its safetensors code, its item size, whether the kernel
reads it as stored, whether it can be a result, and whether rows that read or
write it are computed in float64, and the tolerance of a check of its
results. Every module that needs such a fact reads it here: the tables and
input checks (``tables.py``, ``validate.py``), the checkpoint readers and the
saved-layer format (``_checkpoints/``), the ONNX splitter, the command line,
the benchmark harness and ``show_config``. The kind numbers themselves are the kernel's
(declared in C, ``csrc/be_kinds.h``) and only read here.

Adding a dtype touches two places: a row here (and its name in
:data:`REGISTRY`), and the C that loads and stores its rows (the kind in
``csrc/be_kinds.h``, its load and store in ``csrc/be_row_body.h``,
``csrc/be_neon.h`` and ``csrc/be_convert.h``). A dtype whose bytes NumPy has
no dtype for (bfloat16) is stored as raw bits and named by :func:`is_bfloat16`.

bfloat16 arrives as ``ml_dtypes.bfloat16`` arrays or as the raw uint16 bits
(from checkpoints), tagged here as bfloat16; ml_dtypes is never imported to
read or store a bfloat16 table.

Examples
--------
>>> from bertembed._core import dtypes
>>> d = dtypes.BY_NAME["bfloat16"]
>>> d.safetensors, d.itemsize, d.as_stored, d.result
('BF16', 2, True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _kernel


@dataclass(frozen=True)
class DType:
    """One table or result dtype.

    Attributes
    ----------
    name : str
        As ``table_dtype`` and ``dtype`` take it ("float32", "int8"...).
    kind : int
        The kernel's storage kind (``_kernel.KIND_*``).
    storage : numpy.dtype
        The NumPy dtype that holds the bytes (bfloat16: uint16, its raw bits).
    safetensors : str
        The safetensors code ("F32", "BF16", "I8"...).
    torch_storage : str
        torch's legacy storage type of the dtype ("FloatStorage"...), as
        ``torch.save`` archives name it.
    as_stored : bool
        Whether the kernel reads a table of it as stored (int8 is read with a
        scale and offset per row, for token tables only).
    result : bool
        Whether a result can have this dtype.
    wide : bool
        Whether rows that read or write it are computed in float64.
    tolerance : float or None
        How far a result in it may be from the same sum computed in float64,
        relative to ``max(1, |largest value|)``: the ONNX splitter's check of
        the layer it wrote against the graph. None where no check needs one
        (int8 is no result; the splitter reads no bfloat16 graph).
    """

    name: str
    kind: int
    storage: np.dtype
    safetensors: str
    torch_storage: str
    as_stored: bool = True
    result: bool = True
    wide: bool = False
    tolerance: float | None = None

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.storage.itemsize

    @property
    def quantised(self) -> bool:
        """Whether a table of it carries a float32 scale and offset per row (int8)."""
        return not self.as_stored


FLOAT32 = DType("float32", _kernel.KIND_F32, np.dtype(np.float32), "F32", "FloatStorage", tolerance=2e-5)
FLOAT64 = DType("float64", _kernel.KIND_F64, np.dtype(np.float64), "F64", "DoubleStorage", wide=True, tolerance=1e-12)
FLOAT16 = DType("float16", _kernel.KIND_F16, np.dtype(np.float16), "F16", "HalfStorage", tolerance=4e-3)
BFLOAT16 = DType("bfloat16", _kernel.KIND_BF16, np.dtype(np.uint16), "BF16", "BFloat16Storage")
INT8 = DType("int8", _kernel.KIND_I8, np.dtype(np.int8), "I8", "CharStorage", as_stored=False, result=False)

#: Every table and result dtype, in the order messages list them.
REGISTRY = (FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT8)

BY_NAME = {d.name: d for d in REGISTRY}
BY_KIND = {d.kind: d for d in REGISTRY}
BY_SAFETENSORS = {d.safetensors: d for d in REGISTRY}

#: The dtypes a float table can be stored in as it is (checkpoint tensors, arrays).
AS_STORED = tuple(d for d in REGISTRY if d.as_stored)
#: The result dtypes.
RESULTS = tuple(d for d in REGISTRY if d.result)
#: Names accepted for ``table_dtype`` (conversion when a layer is built).
TABLE_DTYPES = tuple(d.name for d in REGISTRY)
#: What ``bertembed convert`` and ``bertembed trim --table-dtype`` store a
#: checkpoint's tables as, narrowest first: every table dtype but float64 (a
#: conversion there is made to save memory).
CONVERSIONS = tuple(d.name for d in (INT8, BFLOAT16, FLOAT16, FLOAT32))

#: Storage kinds, as numbered by the kernel (short names for the shim).
F32, F64, F16, BF16, I8 = FLOAT32.kind, FLOAT64.kind, FLOAT16.kind, BFLOAT16.kind, INT8.kind

#: ``{kind: name}``.
KIND_NAMES = {d.kind: d.name for d in REGISTRY}
#: ``{name: kind}``.
KIND_OF_NAME = {d.name: d.kind for d in REGISTRY}

# NumPy dtypes whose arrays the kernel reads as they are (bfloat16's are ml_dtypes', see is_bfloat16).
_BY_ARRAY_DTYPE = {d.storage: d for d in AS_STORED if d.storage.kind == "f"}


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether `dtype` is ml_dtypes' bfloat16 in native byte order (checked
    without importing it). A byte-swapped bfloat16 is not: the kernel would
    read or write its bytes the wrong way round."""
    return dtype.name == BFLOAT16.name and dtype.itemsize == BFLOAT16.itemsize and dtype.isnative


def bfloat16_dtype() -> np.dtype:
    """``ml_dtypes.bfloat16`` as a NumPy dtype; TypeError when ml_dtypes is missing."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)") from None
    return np.dtype(ml_dtypes.bfloat16)


def array_dtype(name: str) -> np.dtype:
    """The NumPy dtype of arrays of the dtype called `name`, as a layer takes
    them (bfloat16: ``ml_dtypes.bfloat16``, see :func:`bfloat16_dtype`).

    Only for the dtypes read as stored (:data:`AS_STORED`): an int8 table is
    made by quantising, not given as an array.

    Examples
    --------
    >>> from bertembed._core import dtypes
    >>> dtypes.array_dtype("float16")
    dtype('float16')
    """
    entry = BY_NAME[name]
    if not entry.as_stored:
        raise ValueError(f"{name} tables are made by quantising when a layer is built, not given as arrays")
    return bfloat16_dtype() if entry is BFLOAT16 else entry.storage


def of_array(dtype: np.dtype) -> DType | None:
    """The registry's entry for arrays of `dtype` (a table or a result), or None."""
    found = _BY_ARRAY_DTYPE.get(dtype)
    if found is None and is_bfloat16(dtype):
        return BFLOAT16
    return found


def kind_of(dtype: np.dtype) -> int | None:
    """The kernel's kind for a table or result dtype, or None if it has none."""
    found = of_array(dtype)
    return None if found is None else found.kind


def name_of(dtype: np.dtype) -> str:
    """The name of a NumPy dtype as ``dtype=`` takes it ("bfloat16" for ml_dtypes')."""
    return BFLOAT16.name if is_bfloat16(dtype) else dtype.name


def listed(entries: tuple[DType, ...] | list[DType], conjunction: str = "or") -> str:
    """``"float32, float64, float16 or bfloat16"``: names for messages."""
    names = [d.name for d in entries]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


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
        name = name_of(dt)
    if name not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {value!r}")
    return name
