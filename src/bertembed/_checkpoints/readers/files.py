"""Telling checkpoint files apart by their first bytes, and opening one weights file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ..errors import CheckpointError
from .base import TensorSource
from .reading import file_size, open_regular
from .safetensors import FORMAT_MAX_HEADER_BYTES, SafetensorsFile
from .torch_zip import ZIP_MAGIC, TorchZipFile, is_legacy_torch

SAFETENSORS = "safetensors"
TORCH_ZIP = "torch zip"
TORCH_LEGACY = "legacy torch"
INDEX = "index"
UNKNOWN = "unknown"


def looks_like_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of `size` bytes starting with `head` has the structure of safetensors.

    Its first 8 bytes are a little-endian header length that fits in the file
    (and in the format's own limit,
    :data:`~bertembed._checkpoints.readers.safetensors.FORMAT_MAX_HEADER_BYTES`: a
    longer header than the reader reads is still safetensors, refused by its
    reader), and the header starts as a JSON object. Tested before the torch signatures: a
    valid safetensors file may start with ``0x80`` (a header length whose low
    byte is 0x80), with ``PK\\x03\\x04`` (a header length of 0x04034b50) or
    hold ``ustar`` at byte 257, and none of torch's formats has this structure.

    Examples
    --------
    >>> looks_like_safetensors(bytes([0x80, 0, 0, 0, 0, 0, 0, 0]) + b"{", 8 + 0x80)
    True
    >>> looks_like_safetensors(b"PK\\x03\\x04\\x14\\x00\\x00\\x00\\x08", 1000)
    False
    """
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n <= min(FORMAT_MAX_HEADER_BYTES, size - 8) and head[8:9] == b"{"


def sniff(path: str | os.PathLike[str]) -> str:
    """What kind of checkpoint file `path` is, from its content (its name as a tie-break).

    Returns one of ``"safetensors"``, ``"torch zip"`` (``torch.save`` since
    torch 1.6), ``"legacy torch"`` (older ``torch.save``), ``"index"`` (the
    JSON index of a sharded checkpoint) and ``"unknown"``. Safetensors is
    decided by structure (see :func:`looks_like_safetensors`), before the
    torch signatures.

    Raises
    ------
    FileNotFoundError
        `path` does not exist.
    IsADirectoryError
        `path` is a directory.
    CheckpointError
        `path` is not a regular file (a FIFO, a device...) or a loop of links.

    Examples
    --------
    >>> sniff("model.safetensors")  # doctest: +SKIP
    'safetensors'
    """
    p = Path(path)
    with open_regular(p) as fh:
        size = file_size(fh)
        head = fh.read(512)
    if looks_like_safetensors(head, size):
        return SAFETENSORS
    if head[:4] == ZIP_MAGIC:
        return TORCH_ZIP
    if is_legacy_torch(head):
        return TORCH_LEGACY
    if p.suffix == ".safetensors":
        return SAFETENSORS  # a damaged one: its reader says what is wrong
    if p.name.endswith(".json") or head.lstrip()[:1] == b"{":
        return INDEX
    return UNKNOWN


def open_file(path: str | os.PathLike[str]) -> TensorSource:
    """A reader for one weights file: safetensors or a ``torch.save`` zip archive.

    Raises
    ------
    FileNotFoundError
        `path` does not exist.
    ValueError
        Neither format (the legacy torch format and JSON indexes are named),
        or a malformed file.
    """
    p = Path(path)
    kind = sniff(p)
    if kind == SAFETENSORS:
        return SafetensorsFile(p)
    if kind in (TORCH_ZIP, TORCH_LEGACY):
        return TorchZipFile(p)  # which explains the legacy format's refusal
    if kind == INDEX:
        raise CheckpointError(f"{p}: a JSON file, not a file of tensors (an index cannot name another index)")
    raise CheckpointError(
        f"{p}: not a weights file bertembed can read: expected safetensors, a zip archive "
        "written by torch.save, or the *.index.json of a sharded checkpoint"
    )
