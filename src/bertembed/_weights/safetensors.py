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

import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .base import ITEMSIZE, TensorInfo, finish, float_dtype, no_tensor

#: The same limit as the safetensors package: larger headers are refused.
MAX_HEADER_BYTES = 100_000_000


class SafetensorsFile:
    """The parsed header of a safetensors file, and read-only views of its tensors.

    A :class:`~bertembed._weights.base.TensorSource`.

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
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise self._error(
                        f"truncated: {size} bytes, too short for a safetensors header"
                    )
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER_BYTES or 8 + n > size:
                    raise self._error(
                        f"header length {n} does not fit in a file of {size} bytes "
                        "(truncated, or not a safetensors file)"
                    )
                raw = fh.read(n)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path}: no such file") from None
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._error(f"the header is not valid JSON ({exc})") from None
        if not isinstance(header, dict):
            raise self._error(f"the header is a JSON {type(header).__name__}, not an object")
        header.pop("__metadata__", None)
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self.entries[name] = self._parse_entry(name, entry)
        self._check_layout()

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, {len(self.entries)} tensors)"

    def _error(self, message: str) -> ValueError:
        return ValueError(f"{self.path}: {message}")

    def _parse_entry(self, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
        bad = self._error(
            f"malformed header entry for {name!r}: expected "
            '{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}, '
            f"got {entry!r}"
        )
        if not isinstance(entry, Mapping):
            raise bad
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise bad
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise bad
        ints = [*shape, *offsets]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
            raise bad
        begin, end = offsets
        if begin > end:
            raise bad
        itemsize = ITEMSIZE.get(dtype)
        if itemsize is not None and math.prod(shape) * itemsize != end - begin:
            raise self._error(
                f"tensor {name!r} of dtype {dtype} and shape {tuple(shape)} needs "
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
                    f"tensor {name!r} starts at data byte {begin}, expected {at} "
                    "(the data has a hole or overlapping tensors)"
                )
            at = end
        if at > self.data_size:
            raise self._error(
                f"truncated: the header describes {at} bytes of tensor data, "
                f"the file holds {self.data_size}"
            )
        if at < self.data_size:
            raise self._error(
                f"{self.data_size - at} bytes after the last tensor are not described "
                "by the header"
            )

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
            arr = np.empty(shape, stored)
        else:
            arr = np.memmap(
                self.path, dtype=stored, mode="r", offset=self.data_start + begin, shape=shape
            )
        return finish(arr)
