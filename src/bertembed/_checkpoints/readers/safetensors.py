"""A reader of safetensors files, NumPy only.

The format: an 8-byte little-endian header length, a JSON header of
``{name: {"dtype", "shape", "data_offsets"}}`` (plus an optional
``"__metadata__"``), then the raw little-endian tensor data. The header is
validated the way the ``safetensors`` package validates it (offsets inside
the file, no holes, no overlaps, sizes matching shapes), so a truncated or
corrupt file is an error, not garbage. Float tensors are read-only
``numpy.memmap`` views of the file: never copied, they cost no private memory
and processes that map the same file share one copy in the page cache.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import mapped
from ..errors import CheckpointError, short
from .base import ITEMSIZE, TensorInfo, finish, float_dtype, no_tensor
from .reading import MAX_HEADER_BYTES, MAX_HEADER_VALUES, file_size, open_regular, parse_json, too_big

#: Most dimensions a tensor may have (NumPy's own limit is 64).
MAX_DIMS = 32
#: The longest header the safetensors format allows (its package refuses longer ones): a file whose first
#: 8 bytes give a length up to this is taken for safetensors, and refused above
#: :data:`~bertembed._checkpoints.readers.reading.MAX_HEADER_BYTES`, the limit of this reader.
FORMAT_MAX_HEADER_BYTES = 100_000_000
#: Largest size, offset or dimension accepted in a header.
MAX_INT = 2**62


class SafetensorsFile:
    """The parsed header of a safetensors file, and read-only views of its tensors.

    A :class:`~bertembed._checkpoints.readers.base.TensorSource`.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.safetensors`` file.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        The file is truncated or its header is not valid safetensors.

    Examples
    --------
    >>> st = SafetensorsFile("model.safetensors")  # doctest: +SKIP
    >>> st.info("embeddings.word_embeddings.weight")  # doctest: +SKIP
    TensorInfo(dtype='F32', shape=(30522, 768))
    >>> st.array("embeddings.word_embeddings.weight").flags.writeable  # doctest: +SKIP
    False
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with open_regular(self.path, "safetensors file") as fh:
            size = file_size(fh)
            head = fh.read(8)
            if len(head) < 8:
                raise self._error(f"truncated: {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                raise self._error(
                    f"header length {n} does not fit in a file of {size} bytes (truncated, or not a safetensors file)"
                )
            if n > MAX_HEADER_BYTES:
                raise too_big(self.path, "the safetensors header", n, MAX_HEADER_BYTES, "MAX_HEADER_BYTES")
            raw = bytearray(n)  # (parse_json empties it once decoded)
            got = fh.readinto(raw)
        if got < n:
            raise self._error(f"the file shrank while its header was read ({got} of {n} bytes)")
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        header = parse_json(
            raw,
            self.path,
            "the header ",
            _two_level_keys,
            max_bytes=MAX_HEADER_BYTES,
            bytes_name="MAX_HEADER_BYTES",
            max_values=MAX_HEADER_VALUES,
            values_name="MAX_HEADER_VALUES",
            per="; a safetensors header holds 8 per tensor",
        )
        if not isinstance(header, dict):
            raise self._error(f"the header is a JSON {type(header).__name__}, not an object")
        header.pop("__metadata__", None)
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self.entries[name] = self._parse_entry(name, entry)
        self._check_layout()

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, {len(self.entries)} tensors)"

    def _error(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {message}")

    def _malformed(self, name: str, entry: Any) -> CheckpointError:
        return self._error(
            f"malformed header entry for {short(name)}: expected "
            '{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}, '
            f"got {short(entry)}"
        )

    def _parse_entry(self, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
        if not isinstance(entry, Mapping):
            raise self._malformed(name, entry)
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or len(dtype) > 16 or not isinstance(shape, list):
            raise self._malformed(name, entry)
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise self._malformed(name, entry)
        if len(shape) > MAX_DIMS:
            raise self._error(f"tensor {short(name)} has {len(shape)} dimensions, more than {MAX_DIMS}")
        ints = [*shape, *offsets]
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT for v in ints):
            raise self._malformed(name, entry)
        begin, end = offsets
        if begin > end:
            raise self._malformed(name, entry)
        itemsize = ITEMSIZE.get(dtype)
        if itemsize is not None and math.prod(shape) * itemsize != end - begin:
            raise self._error(
                f"tensor {short(name)} of dtype {dtype} and shape {short(tuple(shape))} needs "
                f"{math.prod(shape) * itemsize} bytes, its data_offsets {offsets} span "
                f"{end - begin}"
            )
        return dtype, tuple(shape), begin, end

    def _check_layout(self) -> None:
        spans = sorted((begin, end, name) for name, (_, _, begin, end) in self.entries.items())
        at = 0
        for begin, end, name in spans:
            if begin != at:
                raise self._error(
                    f"tensor {short(name)} starts at data byte {begin}, expected {at} "
                    "(the data has a hole or overlapping tensors)"
                )
            at = end
        if at > self.data_size:
            raise self._error(
                f"truncated: the header describes {at} bytes of tensor data, the file holds {self.data_size}"
            )
        if at < self.data_size:
            raise self._error(f"{self.data_size - at} bytes after the last tensor are not described by the header")

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def keys(self) -> list[str]:
        """Tensor names, in header order."""
        return list(self.entries)

    def files(self) -> list[Path]:
        """``[path]``: the header is read when the object is made."""
        return [self.path]

    def info(self, name: str) -> TensorInfo:
        """The dtype (as the header spells it) and shape of tensor `name`.

        Raises
        ------
        KeyError
            No tensor called `name`.
        """
        try:
            dtype, shape, _, _ = self.entries[name]
        except KeyError:
            raise no_tensor(self.path, name) from None
        return TensorInfo(dtype, shape)

    def array(self, name: str) -> np.ndarray:
        """A float tensor as a read-only array, in its stored precision.

        F32, F64 and F16 are a read-only ``numpy.memmap`` of the file (no
        copy) of dtype float32, float64 and float16; BF16 is a ``numpy.memmap``
        of dtype uint16 holding the raw bfloat16 bits. A copy is made only on
        a big-endian machine, or for a tensor whose offset in the file is not
        a multiple of its item size (never written by safetensors).

        Raises
        ------
        KeyError
            No tensor called `name`.
        TypeError
            The tensor is not F32, F64, F16 or BF16.
        """
        dtype, shape = self.info(name)
        _, _, begin, end = self.entries[name]
        stored = float_dtype(self.path, name, dtype)
        if begin == end:
            return finish(np.empty(shape, stored))
        with open_regular(self.path, "safetensors file") as fh:
            size = file_size(fh)
            if size < self.data_start + end:
                raise self._error(
                    f"the file shrank to {size} bytes since it was opened (tensor {short(name)} "
                    f"ends at byte {self.data_start + end})"
                )
            try:
                arr = np.memmap(fh, dtype=stored, mode="r", offset=self.data_start + begin, shape=shape)
            except (OSError, ValueError) as exc:  # (mmap: e.g. no address space left)
                raise OSError(
                    getattr(exc, "errno", None),
                    f"{self.path}: cannot map tensor {short(name)} ({end - begin} bytes): {exc}",
                ) from None
            mapped.register(arr, self.path, os.fstat(fh.fileno()))
        return finish(arr)


def _two_level_keys(header: Any) -> int:
    """The keys of a header and of its entries (a valid header nests no deeper); -1 if not an object."""
    if type(header) is not dict:
        return -1
    return len(header) + sum(len(v) for v in header.values() if type(v) is dict)
