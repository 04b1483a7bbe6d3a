"""The package's one writer of safetensors files (and of any file it replaces).

Used by ``save_pretrained`` and ``bertembed convert`` (through
:mod:`bertembed._checkpoints.save`), by ``bertembed split-onnx``
(:mod:`bertembed._onnx.layer`) and by the tests' checkpoint helpers.

Every file is written atomically: into a temporary file in the same
directory, flushed and fsynced, then renamed over the target with
:func:`os.replace`. A crash or an error leaves the target as it was (the
temporary file is removed). On POSIX a reader that has the old file open or
mapped keeps reading the old file. Windows refuses to replace a mapped
file: a target that this process maps is refused before anything is
written, and a refused rename (another process maps it) is reported the
same way, :class:`.mapped.MappedFileError` (see :mod:`.mapped`).

Tensors are laid out by decreasing item size (float64 first, int8 last) and
the header is padded with spaces to a multiple of 8 bytes, so that every
tensor starts at a multiple of its item size: the file can be mapped as
arrays.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from .._core import dtypes
from . import mapped
from .readers.base import ITEMSIZE

#: ``progress(done_bytes, total_bytes, label)``.
Progress = Callable[[int, int, str], None]

#: Bytes written per ``write`` call (and per progress report).
CHUNK = 16 << 20


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[IO[bytes]]:
    """A binary file that replaces `path` when the block ends without an error.

    The data goes to a temporary file beside `path`, which is flushed,
    fsynced and renamed over `path` (the directory is fsynced too, where the
    platform allows it); on an error the temporary file is removed and `path`
    is left as it was.

    Raises
    ------
    MappedFileError
        `path` is mapped and the platform refuses to replace it (checked
        before the block runs on Windows; or the rename was refused).
    """
    mapped.check_replaceable(path)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        mapped.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (POSIX; a no-op where directories cannot be opened)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """`text` (UTF-8) as the file `path`, replaced atomically."""
    with replacing(path) as fh:
        fh.write(text.encode("utf-8"))


def code_of(dtype: np.dtype) -> str:
    """The safetensors code of arrays of a table or result dtype (float32: ``"F32"``...)."""
    stored = dtypes.of_array(dtype)
    if stored is None:
        raise ValueError(f"no safetensors code for tables of dtype {dtype}")
    return stored.safetensors


def _little_endian(arr: np.ndarray) -> np.ndarray:
    """`arr` C-contiguous with its bytes in little-endian order (a copy only when it must)."""
    arr = np.ascontiguousarray(arr)
    little = arr.dtype.byteorder == "<" or (arr.dtype.isnative and sys.byteorder == "little")
    if arr.dtype.itemsize > 1 and not little:
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Sequence[tuple[str, str, np.ndarray]],
    metadata: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write `tensors`, ``(name, safetensors dtype code, array)``, as the file `path`.

    The arrays' bytes are stored little-endian, as they are: the code names
    what they hold (``"BF16"`` for uint16 bits, say) and must have their
    item size. `metadata` becomes the header's ``"__metadata__"`` (none when
    None). Data is written in 16 MiB pieces straight from the arrays (a
    mapped table is read, never copied whole); `progress` is told after
    each. Returns the path.

    Raises
    ------
    ValueError
        A name given twice or reserved (``"__metadata__"``), an unknown code,
        or a code whose item size is not the array's.
    """
    target = Path(os.fspath(path))
    names: set[str] = set()
    for name, code, arr in tensors:
        if name == "__metadata__" or name in names:
            why = "reserved" if name == "__metadata__" else "given twice"
            raise ValueError(f"{target}: tensor name {name!r} is {why}")
        names.add(name)
        if ITEMSIZE.get(code) != arr.dtype.itemsize:
            raise ValueError(f"{target}: tensor {name!r} of dtype {arr.dtype} cannot be stored as {code!r}")
    ordered = sorted(tensors, key=lambda item: -ITEMSIZE[item[1]])  # stable: the given order within a size
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    at = 0
    for name, code, arr in ordered:
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [at, at + arr.nbytes]}
        at += arr.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    total, done = at, 0
    label = f"writing {target.name}"
    with replacing(target) as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for _, _, arr in ordered:
            flat = _little_endian(arr).reshape(-1).view(np.uint8)
            for start in range(0, flat.size, CHUNK):
                fh.write(flat[start : start + CHUNK].data)
                done += min(CHUNK, flat.size - start)
                if progress is not None:
                    progress(done, total, label)
    if progress is not None and total == 0:
        progress(0, 0, label)
    return target
