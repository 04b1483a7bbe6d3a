"""Telling checkpoint files apart by their first bytes, and opening one weights file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from .base import TensorSource
from .safetensors import MAX_HEADER_BYTES, SafetensorsFile
from .torch_zip import ZIP_MAGIC, TorchZipFile, is_legacy_torch

SAFETENSORS = "safetensors"
TORCH_ZIP = "torch zip"
TORCH_LEGACY = "legacy torch"
INDEX = "index"
UNKNOWN = "unknown"


def sniff(path: str | os.PathLike[str]) -> str:
    """What kind of checkpoint file `path` is, from its content (its name as a tie-break).

    Returns one of ``"safetensors"``, ``"torch zip"`` (``torch.save`` since
    torch 1.6), ``"legacy torch"`` (older ``torch.save``), ``"index"`` (the
    JSON index of a sharded checkpoint) and ``"unknown"``.

    Raises
    ------
    FileNotFoundError
        `path` does not exist.

    Examples
    --------
    >>> sniff("model.safetensors")  # doctest: +SKIP
    'safetensors'
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(512)
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no such file") from None
    if head[:4] == ZIP_MAGIC:
        return TORCH_ZIP
    if is_legacy_torch(head):
        return TORCH_LEGACY
    if len(head) > 8:
        (n,) = struct.unpack("<Q", head[:8])
        if n <= MAX_HEADER_BYTES and 8 + n <= size and head[8:9] == b"{":
            return SAFETENSORS
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
        raise ValueError(f"{p}: a JSON file, not a file of tensors (an index cannot name another index)")
    raise ValueError(
        f"{p}: not a weights file bertembed can read: expected safetensors, a zip archive "
        "written by torch.save, or the *.index.json of a sharded checkpoint"
    )
