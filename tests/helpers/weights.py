"""Checkpoint files for the ``bertembed._checkpoints.readers`` tests.

NumPy and the standard library only, so the format and security tests run
without torch or safetensors: safetensors files through the package's own
writer (``bertembed._checkpoints.safetensors_writer``; tests that need a
malformed or unaligned file write its bytes themselves), a
``torch.save``-style zip writer (members stored and aligned like torch's, or
not), and a pickle encoder that emits exactly the opcodes a test describes
(torch's own pickles use the same protocol-2 opcodes).
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bertembed._checkpoints import safetensors_writer

# ---------------------------------------------------------------- safetensors


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> Path:
    """A safetensors file of ``name: (dtype code, array)``; the arrays' bytes are stored as they are."""
    return safetensors_writer.write_safetensors(path, [(name, code, arr) for name, (code, arr) in tensors.items()])


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 `values` cut to bfloat16 (their top 16 bits, truncated), as little-endian uint16."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2")


# ---------------------------------------------------------------- pickles


class G(NamedTuple):
    """A GLOBAL opcode: ``module.name``."""

    module: str
    name: str


class Call(NamedTuple):
    """``func(*args)`` by REDUCE."""

    func: Any
    args: tuple


class PersId(NamedTuple):
    """A persistent id (BINPERSID)."""

    pid: Any


class Items(NamedTuple):
    """`obj`, then its items set by SETITEMS."""

    obj: Any
    items: list


class Build(NamedTuple):
    """`obj`, then BUILD with `state`."""

    obj: Any
    state: Any


class Raw(NamedTuple):
    """Opcodes as they are."""

    data: bytes


def encode(obj: Any, *, proto: bool = True) -> bytes:
    """A protocol-2 pickle of `obj` (see the classes above), ending with STOP."""
    return (b"\x80\x02" if proto else b"") + _enc(obj) + b"."


def _enc(obj: Any) -> bytes:
    if isinstance(obj, Raw):
        return obj.data
    if isinstance(obj, G):
        return b"c" + obj.module.encode() + b"\n" + obj.name.encode() + b"\n"
    if isinstance(obj, Call):
        return _enc(obj.func) + _enc(tuple(obj.args)) + b"R"
    if isinstance(obj, PersId):
        return _enc(obj.pid) + b"Q"
    if isinstance(obj, Items):
        return _enc(obj.obj) + b"(" + b"".join(_enc(k) + _enc(v) for k, v in obj.items) + b"u"
    if isinstance(obj, Build):
        return _enc(obj.obj) + _enc(obj.state) + b"b"
    if obj is None:
        return b"N"
    if obj is True or obj is False:
        return b"\x88" if obj else b"\x89"
    if isinstance(obj, int):
        if -(2**31) <= obj < 2**31:
            return b"J" + struct.pack("<i", obj)
        raw = obj.to_bytes(obj.bit_length() // 8 + 1, "little", signed=True)
        return b"\x8a" + bytes([len(raw)]) + raw
    if isinstance(obj, str):
        raw = obj.encode()
        return b"X" + struct.pack("<I", len(raw)) + raw
    if isinstance(obj, tuple):
        return b"(" + b"".join(map(_enc, obj)) + b"t" if obj else b")"
    if isinstance(obj, list):
        return b"](" + b"".join(map(_enc, obj)) + b"e"
    if isinstance(obj, dict):
        return b"}(" + b"".join(_enc(k) + _enc(v) for k, v in obj.items()) + b"u"
    raise TypeError(type(obj))


ORDERED_DICT = G("collections", "OrderedDict")
REBUILD = G("torch._utils", "_rebuild_tensor_v2")


def storage(key: str, numel: int, kind: str = "FloatStorage") -> PersId:
    """A storage reference as torch.save writes it."""
    return PersId(("storage", G("torch", kind), key, "cpu", numel))


def tensor(store: PersId, size: tuple, stride: tuple | None = None, offset: int = 0) -> Call:
    """``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())``."""
    if stride is None:
        stride = tuple(int(np.prod(size[i + 1 :])) for i in range(len(size)))
    return Call(REBUILD, (store, offset, tuple(size), tuple(stride), False, Call(ORDERED_DICT, ())))


def state_dict(items: dict) -> Items:
    """An OrderedDict of `items`, as torch.save pickles one."""
    return Items(Call(ORDERED_DICT, ()), list(items.items()))


# ---------------------------------------------------------------- torch zip archives


def write_torch_zip(
    path: Path,
    pickle_bytes: bytes,
    storages: dict[str, bytes],
    *,
    byteorder: bytes | None = b"little",
    archive: str = "archive",
    align: int = 64,
    compress: bool = False,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A zip archive laid out as torch.save writes one (storages aligned to `align` bytes)."""
    members = {f"{archive}/data.pkl": pickle_bytes}
    if byteorder is not None:
        members[f"{archive}/byteorder"] = byteorder
    members.update({f"{archive}/data/{key}": data for key, data in storages.items()})
    members[f"{archive}/version"] = b"3\n"
    members.update(extra or {})
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            start = zf.fp.tell() + 30 + len(name.encode())
            pad = (-(start + 4)) % align if align > 1 else 0
            if align > 1:
                info.extra = struct.pack("<HH", 0x6466, pad) + b"\0" * pad
            zf.writestr(info, data)
    return path


def storage_offsets(path: Path) -> dict[str, int]:
    """Member name -> file offset of its data (from the local headers)."""
    out = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        for info in zf.infolist():
            fh.seek(info.header_offset + 26)
            n, m = struct.unpack("<HH", fh.read(4))
            out[info.filename] = info.header_offset + 30 + n + m
    return out


# ---------------------------------------------------------------- assertions


def assert_mapped(arr: np.ndarray, path: Path) -> None:
    """`arr` is read-only and its data lies in a memory map of `path`: no private copy."""
    assert not arr.flags.writeable
    base: Any = arr
    while base is not None:
        if (
            isinstance(base, np.memmap)
            and base.filename is not None
            and os.path.samefile(base.filename, path)
            and isinstance(base._mmap, mmap.mmap)
        ):
            assert np.shares_memory(arr, base)
            return
        base = getattr(base, "base", None)
    raise AssertionError(f"the array is not a view of a memory map of {path}")


def tiny_bert(torch_dtype: Any, cls_name: str = "BertModel") -> Any:
    """A two-layer transformers BERT (120 tokens, H=32, 24 positions) in `torch_dtype`, in eval
    mode: what the reader tests save with torch and read back; skips without transformers."""
    from helpers.extras import needs

    transformers = needs("transformers", "peers")
    cfg = transformers.BertConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=24,
        type_vocab_size=2,
    )
    return getattr(transformers, cls_name)(cfg).to(torch_dtype).eval()
