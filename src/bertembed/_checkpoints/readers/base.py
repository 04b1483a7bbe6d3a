"""What every reader of checkpoint tensors provides, and the helpers they share.

A reader (a :class:`TensorSource`) lists the tensors of a checkpoint, tells
each one's dtype and shape without reading its data, and returns a float
tensor as a read-only NumPy array that is a view of the file's pages whenever
the bytes on disk allow it.

Dtypes are spelled as safetensors spells them (``"F32"``, ``"BF16"``,
``"I64"``...), whatever the file format. Arrays come in the stored precision,
never widened: F16 is ``numpy.float16`` and BF16 is ``numpy.uint16`` holding
the raw bfloat16 bits (the top half of a float32), so a caller that wants
float32 converts, and one that reads bfloat16 natively copies nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..._core import dtypes
from ..errors import short

#: Bytes per element of the dtypes a checkpoint may hold: the table dtypes'
#: (from the registry) and the others a checkpoint may also hold.
ITEMSIZE = {
    **{d.safetensors: d.itemsize for d in dtypes.REGISTRY},
    "BOOL": 1,
    "U8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "I32": 4,
    "U32": 4,
    "I64": 8,
    "U64": 8,
    "C64": 8,
    "C128": 16,
}

#: The dtypes :meth:`TensorSource.array` returns, as little-endian NumPy dtypes
#: (BF16 as its raw 16 bits): the registry's table dtypes read as stored.
FLOAT_DTYPES: dict[str, np.dtype] = {d.safetensors: d.storage.newbyteorder("<") for d in dtypes.AS_STORED}

LITTLE_ENDIAN = sys.byteorder == "little"


class TensorInfo(NamedTuple):
    """The dtype (safetensors' spelling) and shape of a stored tensor."""

    dtype: str
    shape: tuple[int, ...]


@runtime_checkable
class TensorSource(Protocol):
    """The tensors of a checkpoint: what every reader of weights provides.

    Attributes
    ----------
    path : pathlib.Path
        The file (or the index of a sharded checkpoint) that messages name.
    """

    path: Path

    def keys(self) -> list[str]:
        """Tensor names, in the order the file lists them."""
        ...

    def __contains__(self, name: object) -> bool: ...

    def info(self, name: str) -> TensorInfo:
        """The dtype and shape of tensor `name`, without reading its data."""
        ...

    def array(self, name: str) -> np.ndarray:
        """Tensor `name` as a read-only array in native byte order.

        F32 is float32, F64 float64, F16 float16, BF16 uint16 (the raw bits).
        A view of the file's pages (no copy) whenever the bytes allow it.
        A missing name is a KeyError and any other dtype a TypeError, both
        naming the file and the tensor.
        """
        ...

    def files(self) -> list[Path]:
        """The weight files opened so far."""
        ...


def no_tensor(path: Path, name: str) -> KeyError:
    """The KeyError for a tensor `path` does not hold."""
    return KeyError(f"{path}: no tensor {short(name)}")


def float_dtype(path: Path, name: str, dtype: str) -> np.dtype:
    """The little-endian NumPy dtype that stores `dtype`, or a TypeError."""
    stored = FLOAT_DTYPES.get(dtype)
    if stored is None:
        raise TypeError(f"{path}: tensor {short(name)} has dtype {dtype}; expected {float_codes()}")
    return stored


def float_codes(conjunction: str = "or") -> str:
    """``"F32, F64, F16 or BF16"``: the codes of :data:`FLOAT_DTYPES`, for messages."""
    codes = list(FLOAT_DTYPES)
    return f"{', '.join(codes[:-1])} {conjunction} {codes[-1]}"


def finish(arr: np.ndarray) -> np.ndarray:
    """`arr` read-only and in native byte order (a copy only when it must swap or align).

    A view stays a view when its dtype is native and its data aligned; a
    big-endian tensor on a little-endian machine (or the reverse), or a tensor
    at an address that is not a multiple of its item size, becomes a
    contiguous native copy.
    """
    if not (arr.dtype.isnative and arr.flags.aligned):
        arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C")  # always a copy
    arr.flags.writeable = False
    return arr
