"""A reader of ``torch.save`` files (``pytorch_model.bin``), without torch and without running pickle code.

Since torch 1.6, ``torch.save`` writes a zip archive: ``<archive>/data.pkl``
(the pickled state dict, whose tensors refer to storages by key),
``<archive>/data/<key>`` (each storage's raw bytes, uncompressed, aligned to
64 bytes), ``<archive>/byteorder`` (``little`` or ``big``; absent in old files,
meaning little) and a few version records. The pickle is read by the
allow-list unpickler of :mod:`.torch_pickle`, which runs none of the file's
code; each tensor is then a read-only view of its storage's bytes in a
memory map of that storage's member: the offset of a member's data comes
from its local file header, and the tensor's storage offset, size and
strides give the view (non-contiguous tensors are strided views; tensors that
share a storage, such as tied weights, share memory). Only the members of the
tensors asked for are mapped: the gigabytes of encoder weights a
``pytorch_model.bin`` holds beside the embedding tables cost no address space.

Refused, with a message: the legacy format of torch < 1.6 (a bare pickle
stream), compressed or encrypted storage members (a tensor could only be
a private decompressed copy; ``torch.save`` never compresses), and anything
the unpickler refuses.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .. import mapped
from ..errors import CheckpointError, bounded, short
from .base import TensorInfo, finish, float_dtype, no_tensor
from .reading import (
    MAX_BYTEORDER_BYTES,
    MAX_PICKLE_BYTES,
    MAX_ZIP_MEMBERS,
    file_size,
    open_regular,
    read_stream_capped,
    too_big,
)
from .torch_pickle import TensorRef, load_state_dict

ZIP_MAGIC = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature ... name length, extra length
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory: ..., entries (total), size, offset, comment

_LEGACY = (
    "the legacy torch.save format (torch < 1.6, or _use_new_zipfile_serialization=False) "
    "is not supported: load it with torch and save it again with torch.save (a zip "
    "archive) or as safetensors"
)


def is_legacy_torch(head: bytes) -> bool:
    """Whether the first bytes of a file are those of torch's pre-1.6 formats.

    A pickle stream (protocol 2 and up start with ``0x80``) or a tar archive.
    """
    return head[:1] == b"\x80" or head[257:262] == b"ustar"


class TorchZipFile:
    """The tensors of a ``torch.save`` zip archive, read without torch.

    A :class:`~bertembed._checkpoints.readers.base.TensorSource`. The state dict is read
    when the object is made (by an allow-list unpickler: nothing from the
    file is run); a storage's member is memory-mapped at the first
    :meth:`array` of a tensor that lives in it (and no other member is).

    Parameters
    ----------
    path : str or os.PathLike
        A file written by ``torch.save(state_dict, path)`` (torch >= 1.6),
        such as ``pytorch_model.bin``.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    UnsafeCheckpointError
        The pickle references a global that a state dict does not need
        (a ValueError; nothing was run).
    ValueError
        Not a torch zip archive (the legacy format is named), a malformed
        archive or pickle, a compressed storage.

    Examples
    --------
    >>> bin = TorchZipFile("pytorch_model.bin")  # doctest: +SKIP
    >>> bin.info("bert.embeddings.word_embeddings.weight")  # doctest: +SKIP
    TensorInfo(dtype='F32', shape=(30522, 768))
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._storages: dict[str, np.ndarray] = {}
        with open_regular(self.path, "torch.save file") as fh:
            size = file_size(fh)
            head = fh.read(512)
            if head[:4] != ZIP_MAGIC:
                if is_legacy_torch(head):
                    raise self._error(_LEGACY)
                raise self._error("not a zip archive, so not a file written by torch.save")
            self._check_member_count(fh, size)
            fh.seek(0)
            self._read_archive(fh, size)

    def __repr__(self) -> str:
        return f"TorchZipFile({str(self.path)!r}, {len(self._tensors)} tensors)"

    def _error(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {message}")

    def _check_member_count(self, fh: BinaryIO, size: int) -> None:
        """Refuse a central directory of more than MAX_ZIP_MEMBERS entries before zipfile lists it."""
        tail_at = max(0, size - _EOCD.size - 65535)
        fh.seek(tail_at)
        tail = fh.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or at + _EOCD.size > len(tail):
            return  # zipfile says what is wrong
        count = _EOCD.unpack_from(tail, at)[4]
        if count == 0xFFFF and at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":
            (zip64_at,) = struct.unpack_from("<Q", tail, at - 12)
            if zip64_at + 56 <= size:
                fh.seek(zip64_at)
                record = fh.read(56)
                if record[:4] == b"PK\x06\x06":
                    (count,) = struct.unpack_from("<Q", record, 32)
        if count > MAX_ZIP_MEMBERS:
            raise self._error(
                f"the zip archive lists {count} members, more than the limit of {MAX_ZIP_MEMBERS} "
                "(bertembed._checkpoints.readers.reading.MAX_ZIP_MEMBERS)"
            )

    def _read_member(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, limit_name: str) -> bytes:
        """A small member's bytes, never inflating more than `limit` bytes of it."""
        name = info.filename
        if info.flag_bits & 0x1:
            raise self._error(f"zip member {short(name)} is encrypted")
        if info.file_size > limit:
            raise too_big(self.path, f"zip member {short(name)}", info.file_size, limit, limit_name)
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise self._error(
                f"zip member {short(name)} is stored uncompressed, yet its directory entry records "
                f"{info.compress_size} bytes stored and {info.file_size} bytes of data"
            )
        try:
            with zf.open(info) as stream:
                data = read_stream_capped(stream, limit)
        except (
            zipfile.BadZipFile,
            OSError,
            ValueError,
            EOFError,
            NotImplementedError,
            RuntimeError,
            zlib.error,
        ) as exc:
            raise self._error(
                f"cannot read zip member {short(name)} ({bounded(exc)}): the archive is damaged, or its recorded "
                f"sizes ({info.compress_size} bytes stored, {info.file_size} bytes) are wrong"
            ) from None
        if data is None:
            raise too_big(self.path, f"zip member {short(name)}", f"more than {limit}", limit, limit_name)
        if len(data) != info.file_size:
            raise self._error(
                f"zip member {short(name)} holds {len(data)} bytes, its directory entry says {info.file_size}"
            )
        return data

    def _read_archive(self, fh: BinaryIO, size: int) -> None:
        try:
            zf = zipfile.ZipFile(fh)
        except (
            zipfile.BadZipFile,
            zipfile.LargeZipFile,
            OSError,
            ValueError,
            EOFError,
            NotImplementedError,
            struct.error,
        ) as exc:
            raise self._error(f"not a valid zip archive ({bounded(exc)})") from None
        with zf:
            infos: dict[str, zipfile.ZipInfo] = {}
            for info in zf.infolist():
                if info.filename in infos:
                    raise self._error(f"the zip archive holds {short(info.filename)} twice")
                infos[info.filename] = info
            pickles = [n for n in infos if re.fullmatch(r"[^/]+/data\.pkl", n)]
            if len(pickles) != 1:
                found = "none" if not pickles else ", ".join(short(p)[1:-1] for p in pickles[:5])
                raise self._error(f"a torch.save archive holds one '<archive>/data.pkl', this zip has {found}")
            prefix = pickles[0][: -len("data.pkl")]
            self._big = self._byteorder(zf, infos.get(prefix + "byteorder"))
            data = self._read_member(zf, infos[pickles[0]], MAX_PICKLE_BYTES, "MAX_PICKLE_BYTES")

            def storage_bytes(key: str) -> int | None:
                info = infos.get(f"{prefix}data/{key}")
                return None if info is None else info.file_size

            self._tensors: dict[str, TensorRef] = load_state_dict(data, str(self.path), storage_bytes)
            # (member name, file offset, bytes) of every storage a tensor uses
            self._spans: dict[str, tuple[str, int, int]] = {}
            for ref in self._tensors.values():
                key = ref.storage.key
                if key not in self._spans:
                    info = infos[f"{prefix}data/{key}"]
                    self._spans[key] = (info.filename, self._data_start(fh, info, size), info.file_size)

    def _byteorder(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo | None) -> bool:
        if info is None:
            return False  # written before torch recorded it: little-endian
        order = self._read_member(zf, info, MAX_BYTEORDER_BYTES, "MAX_BYTEORDER_BYTES")
        if order not in (b"little", b"big"):
            raise self._error(f"{short(info.filename)[1:-1]} is {short(order)}, expected b'little' or b'big'")
        return order == b"big"

    def _data_start(self, fh: BinaryIO, info: zipfile.ZipInfo, size: int) -> int:
        """The file offset of an uncompressed member's bytes (after its local header)."""
        name = info.filename
        if info.flag_bits & 0x1:
            raise self._error(f"zip member {short(name)} is encrypted")
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise self._error(
                f"zip member {short(name)} is compressed (method {info.compress_type}); tensors are "
                "mapped from uncompressed members only, as torch.save writes them (decompressing "
                "would make a private copy of every table): save the state dict again with "
                "torch.save instead of re-zipping the file"
            )
        fh.seek(info.header_offset)
        header = fh.read(_LOCAL_HEADER.size)
        if len(header) < _LOCAL_HEADER.size or header[:4] != ZIP_MAGIC:
            raise self._error(f"zip member {short(name)}: no local file header at byte {info.header_offset}")
        fields = _LOCAL_HEADER.unpack(header)
        method, name_len, extra_len = fields[3], fields[-2], fields[-1]
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        local_name = fh.read(name_len).decode(encoding, errors="replace")
        if local_name != info.orig_filename or method != zipfile.ZIP_STORED:
            raise self._error(
                f"zip member {short(name)}: its local header ({short(local_name)}, method {method}) "
                "does not match the central directory"
            )
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if start + info.file_size > size:
            raise self._error(
                f"truncated: zip member {short(name)} ends at byte {start + info.file_size}, the file has {size}"
            )
        return start

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def keys(self) -> list[str]:
        """Tensor names, in the state dict's order."""
        return list(self._tensors)

    def files(self) -> list[Path]:
        """``[path]``: the archive is read when the object is made."""
        return [self.path]

    def _ref(self, name: str) -> TensorRef:
        try:
            return self._tensors[name]
        except KeyError:
            raise no_tensor(self.path, name) from None

    def info(self, name: str) -> TensorInfo:
        """The dtype (safetensors' spelling: F32, BF16, I64...) and shape of tensor `name`.

        Raises
        ------
        KeyError
            No tensor called `name`.
        """
        ref = self._ref(name)
        return TensorInfo(ref.dtype, ref.shape)

    def _storage(self, key: str, dtype: np.dtype) -> np.ndarray:
        """The storage `key` as a 1-D view of a read-only map of its member (shared by its tensors)."""
        storage = self._storages.get(key)
        if storage is None:
            member, start, nbytes = self._spans[key]
            with open_regular(self.path, "torch.save file") as fh:
                now = file_size(fh)
                if now < start + nbytes:
                    raise self._error(
                        f"the file shrank to {now} bytes since it was opened (zip member {short(member)} "
                        f"ends at byte {start + nbytes})"
                    )
                try:
                    mapped_bytes = np.memmap(fh, dtype=np.uint8, mode="r", offset=start, shape=(nbytes,))
                except (OSError, ValueError) as exc:  # (mmap: e.g. no address space left)
                    raise self._error(
                        f"cannot map zip member {short(member)} ({nbytes} bytes at byte {start}): {bounded(exc)}"
                    ) from None
                mapped.register(mapped_bytes, self.path, os.fstat(fh.fileno()))
            storage = mapped_bytes.view(dtype)
            self._storages[key] = storage
        return storage

    def array(self, name: str) -> np.ndarray:
        """A float tensor as a read-only array, in its stored precision.

        F32, F64 and F16 are float32, float64 and float16; BF16 is uint16 (the
        raw bfloat16 bits). The array is a view of the memory-mapped storage
        (its base chain ends at a ``numpy.memmap`` of the file), strided when
        the tensor is not contiguous (copy it if you need contiguity). It is a
        native copy only when the file's byte order is not the machine's, or
        when a storage is not aligned to its item size in the file.

        Raises
        ------
        KeyError
            No tensor called `name`.
        TypeError
            The tensor is not F32, F64, F16 or BF16.
        """
        ref = self._ref(name)
        dtype = float_dtype(self.path, name, ref.dtype)
        if self._big:
            dtype = dtype.newbyteorder(">")
        if 0 in ref.shape:
            return finish(np.empty(ref.shape, dtype))
        _check_no_overlap(self.path, name, ref)
        storage = self._storage(ref.storage.key, dtype)
        size = dtype.itemsize
        view = np.ndarray(
            ref.shape,
            dtype,
            buffer=storage,
            offset=ref.offset * size,
            strides=tuple(s * size for s in ref.strides),
        )
        return finish(view)


def _check_no_overlap(path: Path, name: str, ref: TensorRef) -> None:
    """Refuse a view whose elements overlap (a stride of 0, as ``expand()`` makes, or smaller).

    Such a tensor addresses fewer bytes than its shape holds, so a copy of it
    (which the embedding tables need) could be far larger than the file. Each
    dimension longer than 1, taken by increasing stride, must step over the
    whole extent of the dimensions before it.
    """
    extent = 1
    for stride, n in sorted((s, n) for s, n in zip(ref.strides, ref.shape, strict=True) if n > 1):
        if stride < extent:
            raise CheckpointError(
                f"{path}: tensor {short(name)} of size {short(ref.shape)} has strides {short(ref.strides)} "
                "whose elements overlap (a stride of 0, as expand() makes, or one smaller than the "
                "dimensions inside it): save the tensor itself (.contiguous() or .clone())"
            )
        extent = stride * (n - 1) + extent
