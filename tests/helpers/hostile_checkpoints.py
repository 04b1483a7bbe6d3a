"""A corpus of hostile (and of valid but odd-looking) checkpoints, generated here, and its runner.

Nothing is committed but this script: ``build(root)`` writes every case under
`root` (one model directory per case) and returns the list of cases. Each
case is loaded with ``BertEmbeddings.from_pretrained`` in a worker process
(``python -m helpers.hostile_checkpoints run <root>``) under an address-space
limit where Linux sets one, with a per-case time bound (``helpers.time_bound``);
the worker prints one JSON line when a case starts and one when it ends, so
that a crash or a hang is pinned to its case.
``tests/checkpoints/test_hostile_checkpoints.py`` runs the corpus and checks the outcomes:

* a hostile case must end in a clean refusal: a ``ValueError`` (normally a
  ``bertembed.CheckpointError``), ``FileNotFoundError`` or
  ``IsADirectoryError`` whose message names the file at fault, with no
  interpreter advice (``sys.set_int_max_str_digits``) and of bounded length;
* a must-load case (valid files that look like other formats) must load;
* a case of the size-limits category (files at or over a size or count limit
  of the readers, such as a 99 MB safetensors header of 1.65 million tensors)
  is also loaded alone (``measure``), in a process whose CPU time and peak
  memory must stay under :data:`SIZE_CPU_SECONDS` and :data:`SIZE_PEAK_MIB`.

Categories: header arithmetic, JSON depth and size, special files and links,
zip structure and bombs, pickle opcodes, strides and offsets, config values,
the must-load look-alikes and the size limits.

Usage (a module of the ``helpers`` package: ``tests/`` on ``PYTHONPATH``, run with ``-m``)::

    PYTHONPATH=tests python -m helpers.hostile_checkpoints build DIR         # write the corpus, print the case count
    PYTHONPATH=tests python -m helpers.hostile_checkpoints run DIR [N]       # load the cases from number N on
    PYTHONPATH=tests python -m helpers.hostile_checkpoints measure DIR NAME  # one case: CPU seconds, peak memory
"""

from __future__ import annotations

import json
import os
import pickletools
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from helpers.time_bound import time_bound
from helpers.weights import (
    ORDERED_DICT,
    Build,
    Call,
    G,
    PersId,
    Raw,
    encode,
    state_dict,
    storage,
    tensor,
    write_safetensors,
    write_torch_zip,
)

#: The address-space limit of the worker (a process that tries to allocate an
#: attacker-chosen size fails instead of swapping the machine).
ADDRESS_SPACE = 3 * 2**30
#: Seconds a case may take before it counts as a hang (more under AddressSanitizer, which slows Python down).
CASE_SECONDS = 120 if "libasan" in os.environ.get("LD_PRELOAD", "") else 20

V, P, T, H = 16, 12, 2, 8
PREFIX = "embeddings."
TOK, POS, SEG = (
    PREFIX + "word_embeddings.weight",
    PREFIX + "position_embeddings.weight",
    PREFIX + "token_type_embeddings.weight",
)
LNW, LNB = PREFIX + "LayerNorm.weight", PREFIX + "LayerNorm.bias"

CATEGORIES = (
    "header arithmetic",
    "JSON depth and size",
    "special files and links",
    "zip structure and bombs",
    "pickle opcodes",
    "strides and offsets",
    "config values",
    "must load",
    "size limits",
)

#: The cases at (or over) a size or count limit, and the 99 MB header: each is also loaded alone, in a process
#: of its own, whose CPU time (user + system) and peak memory must stay under these bounds
#: (``tests/checkpoints/test_hostile_checkpoints.py``): what a hostile file of any size may cost.
SIZE_CATEGORY = "size limits"
SIZE_CPU_SECONDS = 2.0
SIZE_PEAK_MIB = 256


class Case(NamedTuple):
    category: str
    name: str
    target: str  # what from_pretrained is given (relative to the corpus root)
    expect: str  # "error" or "load"
    names: str  # the file name the message must contain ("" for a must-load case)


def _tables() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        TOK: rng.standard_normal((V, H)).astype(np.float32),
        POS: rng.standard_normal((P, H)).astype(np.float32),
        SEG: rng.standard_normal((T, H)).astype(np.float32),
        LNW: np.ones(H, np.float32),
        LNB: np.zeros(H, np.float32),
    }


CONFIG = {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 1e-12}


def _header_file(path: Path, header: bytes, data: bytes = b"", length: int | None = None) -> Path:
    """A safetensors-shaped file: 8-byte length (default: the header's), header, data."""
    n = len(header) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header + data)
    return path


def _st_header(tables: dict[str, np.ndarray]) -> tuple[dict, bytes]:
    header, chunks, at = {}, [], 0
    for name, arr in tables.items():
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    return header, b"".join(chunks)


# ------------------------------------------------------------------ raw zip writer


class Member(NamedTuple):
    name: str
    payload: bytes  # the bytes stored (compressed if method != 0)
    method: int = 0
    crc: int | None = None
    compress_size: int | None = None
    file_size: int | None = None
    flags: int = 0
    local_name: str | None = None


def raw_zip(
    path: Path,
    members: list[Member],
    *,
    count: int | None = None,
    zip64_count: int | None = None,
    cd_offset_shift: int = 0,
    cut: int = 0,
) -> Path:
    """A zip archive written byte by byte, so that its fields can lie."""
    out, central = bytearray(), bytearray()
    for m in members:
        name = m.name.encode()
        local = (m.local_name or m.name).encode()
        crc = zlib.crc32(m.payload) if m.crc is None else m.crc
        csize = len(m.payload) if m.compress_size is None else m.compress_size
        usize = len(m.payload) if m.file_size is None else m.file_size
        offset = len(out)
        out += (
            struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, m.flags, m.method, 0, 0x21, crc, csize, usize, len(local), 0)
            + local
            + m.payload
        )
        central += (
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                20,
                20,
                m.flags,
                m.method,
                0,
                0x21,
                crc,
                csize,
                usize,
                len(name),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + name
        )
    cd_at = len(out)
    out += central
    n = len(members) if count is None else count
    if zip64_count is not None:
        z64 = len(out)
        out += struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, zip64_count, zip64_count, len(central), cd_at)
        out += struct.pack("<4sLQL", b"PK\x06\x07", 0, z64, 1)
        n = 0xFFFF
    out += struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), len(central), cd_at + cd_offset_shift, 0
    )
    path.write_bytes(bytes(out[: len(out) - cut] if cut else out))
    return path


def sparse_zip(path: Path, members: list[Member], hole: str, hole_size: int) -> Path:
    """A valid stored zip archive of `members`; the one named `hole` holds `hole_size` zero bytes, left
    as a hole in the file (which is as large as the member but takes no disk space for it)."""
    central = bytearray()
    with open(path, "wb") as fh:
        for m in members:
            name = m.name.encode()
            size = hole_size if m.name == hole else len(m.payload)
            crc = _crc_zeros(size) if m.name == hole else zlib.crc32(m.payload)
            offset = fh.tell()
            fh.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0x21, crc, size, size, len(name), 0) + name)
            if m.name == hole:
                fh.seek(size, os.SEEK_CUR)
            else:
                fh.write(m.payload)
            central += struct.pack(
                "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, crc, size, size, len(name), 0, 0, 0, 0, 0, offset
            )
            central += name
        cd_at = fh.tell()
        fh.write(central)
        n = len(members)
        fh.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(central), cd_at, 0))
    return path


def _deflate(data_chunks, total: int) -> bytes:
    """Raw deflate of `total` zero bytes (without holding them in memory)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts, chunk = [], bytes(1 << 20)
    left = total
    while left:
        k = min(left, len(chunk))
        parts.append(comp.compress(chunk[:k]))
        left -= k
    parts.append(comp.flush())
    return b"".join(parts)


def _crc_zeros(total: int) -> int:
    crc, chunk, left = 0, bytes(1 << 20), total
    while left:
        k = min(left, len(chunk))
        crc = zlib.crc32(chunk[:k], crc)
        left -= k
    return crc


# ------------------------------------------------------------------ the corpus


class _Builder:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cases: list[Case] = []
        self.tables = _tables()

    def dir(self, name: str, config: dict | bytes | None = CONFIG) -> Path:
        d = self.root / name
        d.mkdir(parents=True)
        if config is not None:
            (d / "config.json").write_bytes(config if isinstance(config, bytes) else json.dumps(config).encode())
        return d

    def add(self, category: str, name: str, target: Path, names: str, expect: str = "error") -> None:
        assert category in CATEGORIES, category
        self.cases.append(Case(category, name, str(target.relative_to(self.root)), expect, names))

    def valid_st(self, d: Path, name: str = "model.safetensors") -> Path:
        return write_safetensors(d / name, {k: ("F32", v) for k, v in self.tables.items()})

    def torch_zip(self, d: Path, items=None, storages=None, name="pytorch_model.bin", **kw) -> Path:
        if items is None:
            items, storages = self.torch_items()
        return write_torch_zip(d / name, encode(state_dict(items)), storages, **kw)

    def torch_items(self):
        items, storages = {}, {}
        for i, (k, v) in enumerate(self.tables.items()):
            store = storage(str(i), v.size)
            items[k] = tensor(store, v.shape)
            storages[str(i)] = v.tobytes()
        return items, storages

    def pickle_case(self, name: str, pickle_bytes: bytes, storages=None) -> None:
        d = self.dir(name)
        _, real = self.torch_items()
        write_torch_zip(d / "pytorch_model.bin", pickle_bytes, real if storages is None else storages)
        self.add("pickle opcodes", name, d, "pytorch_model.bin")


def build(root: Path) -> list[Case]:
    """Write the corpus under `root` and return its cases."""
    b = _Builder(Path(root))
    _header_arithmetic(b)
    _json_depth_and_size(b)
    _special_files(b)
    _zip_structure(b)
    _pickle_opcodes(b)
    _strides_and_offsets(b)
    _config_values(b)
    _must_load(b)
    _size_limits(b)
    return b.cases


def _header_arithmetic(b: _Builder) -> None:
    cat = "header arithmetic"
    header, data = _st_header(b.tables)
    text = json.dumps(header).encode()

    def case(name, raw_header=text, payload=data, length=None, file_name="model.safetensors"):
        d = b.dir(name)
        _header_file(d / file_name, raw_header, payload, length)
        b.add(cat, name, d, file_name)

    for n in (0, 1, 2**64 - 1, 2**63, 2**32, len(text) + len(data) + 1):
        case(f"st-length-{n}", length=n)
    case("st-length-over-cap", raw_header=b"{" + b" " * 64 + b"}", length=100_000_001)
    case("st-empty-file", raw_header=b"", payload=b"", length=0)
    d = b.dir("st-seven-bytes")
    (d / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0")
    b.add(cat, "st-seven-bytes", d, "model.safetensors")

    def entry_case(name, change):
        h = json.loads(text)
        change(h)
        case(name, json.dumps(h).encode())

    entry_case("st-offsets-past-end", lambda h: h[TOK].update(data_offsets=[0, 10**9]))
    entry_case("st-offsets-reversed", lambda h: h[TOK].update(data_offsets=[512, 0]))
    entry_case("st-offsets-2-64", lambda h: h[TOK].update(data_offsets=[0, 2**64]))
    entry_case("st-offsets-negative", lambda h: h[TOK].update(data_offsets=[-512, 0]))
    entry_case("st-offsets-strings", lambda h: h[TOK].update(data_offsets=["0", "512"]))
    entry_case("st-offsets-three", lambda h: h[TOK].update(data_offsets=[0, 256, 512]))
    entry_case("st-shape-product-overflow", lambda h: h[TOK].update(shape=[2**62, 2**62, 2**62]))
    entry_case("st-shape-40-dims", lambda h: h[TOK].update(shape=[1] * 40))
    entry_case("st-shape-100000-dims", lambda h: h[TOK].update(shape=[1] * 100_000))
    entry_case("st-shape-float", lambda h: h[TOK].update(shape=[16.0, 8]))
    entry_case("st-shape-bool", lambda h: h[TOK].update(shape=[True, 8]))
    entry_case("st-shape-mismatch", lambda h: h[TOK].update(shape=[16, 9]))
    entry_case("st-dtype-long", lambda h: h[TOK].update(dtype="F" * 100_000))
    entry_case("st-dtype-int", lambda h: h[TOK].update(dtype=32))
    entry_case("st-overlap", lambda h: h[POS].update(data_offsets=h[TOK]["data_offsets"]))
    entry_case("st-entry-not-object", lambda h: h.update({TOK: [1, 2, 3]}))
    entry_case("st-entry-huge-list", lambda h: h.update({TOK: list(range(100_000))}))
    case("st-duplicate-key", text[:-1] + b", " + json.dumps({TOK: header[TOK]}).encode()[1:])
    case("st-header-list", b"[1, 2, 3]" + b" " * 5)
    case("st-header-null", b"null    ")
    case("st-not-utf8", b"{\xff\xfe}   ")
    case("st-trailing-bytes", payload=data + b"\0" * 16)
    case("st-truncated-data", payload=data[:-4])
    case("st-int-5000-digits", text.replace(b"[0, ", b"[" + b"1" * 5000 + b", ", 1))


def _json_depth_and_size(b: _Builder) -> None:
    cat = "JSON depth and size"
    deep = b"[" * 1_000_000 + b"]" * 1_000_000
    header, data = _st_header(b.tables)

    d = b.dir("st-header-deep-array")
    _header_file(d / "model.safetensors", b"{" + b'"x":' + deep + b"}", data)
    b.add(cat, "st-header-deep-array", d, "model.safetensors")
    d = b.dir("st-header-deep-metadata")
    h = (
        json.dumps({**header, "__metadata__": {}})
        .encode()
        .replace(b'"__metadata__": {}', b'"__metadata__": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    )
    _header_file(d / "model.safetensors", h, data)
    b.add(cat, "st-header-deep-metadata", d, "model.safetensors")

    d = b.dir("config-deep")
    (d / "config.json").write_bytes(b'{"model_type": "bert", "x": ' + deep + b"}")
    b.valid_st(d)
    b.add(cat, "config-deep", d, "config.json")
    d = b.dir("config-deep-objects")
    (d / "config.json").write_bytes(b'{"model_type": "bert", "x": ' + b'{"a":' * 200_000 + b"1" + b"}" * 200_001)
    b.valid_st(d)
    b.add(cat, "config-deep-objects", d, "config.json")
    d = b.dir("config-deep-70")
    (d / "config.json").write_bytes(b'{"model_type": "bert", "x": ' + b"[" * 70 + b"]" * 70 + b"}")
    b.valid_st(d)
    b.add(cat, "config-deep-70", d, "config.json")

    d = b.dir("index-deep")
    (d / "model.safetensors.index.json").write_bytes(b'{"weight_map": {}, "x": ' + deep + b"}")
    b.add(cat, "index-deep", d, "model.safetensors.index.json")

    for name, file in (("config-17MiB", "config.json"), ("index-65MiB", "model.safetensors.index.json")):
        d = b.dir(name)
        if file != "config.json":
            (d / "config.json").write_text(json.dumps(CONFIG))
        size = 17 * 2**20 if file == "config.json" else 65 * 2**20
        with open(d / file, "wb") as fh:  # JSON whitespace, mostly sparse
            fh.write(b'{"model_type": "bert"')
            fh.truncate(size)
        if file == "config.json":
            b.valid_st(d)
        b.add(cat, name, d, file)

    d = b.dir("config-int-5000-digits", b'{"model_type": "bert", "layer_norm_eps": ' + b"7" * 5000 + b"}")
    b.valid_st(d)
    b.add(cat, "config-int-5000-digits", d, "config.json")
    d = b.dir("index-int-5000-digits")
    (d / "model.safetensors.index.json").write_bytes(
        b'{"metadata": {"total_size": ' + b"9" * 5000 + b'}, "weight_map": {}}'
    )
    b.add(cat, "index-int-5000-digits", d, "model.safetensors.index.json")
    d = b.dir("config-duplicate-key", b'{"model_type": "bert", "model_type": "roberta"}')
    b.valid_st(d)
    b.add(cat, "config-duplicate-key", d, "config.json")
    d = b.dir("config-not-utf8", b'{"model_type": "\xff"}')
    b.valid_st(d)
    b.add(cat, "config-not-utf8", d, "config.json")
    d = b.dir("config-a-list", b"[1, 2]")
    b.valid_st(d)
    b.add(cat, "config-a-list", d, "config.json")
    d = b.dir("index-duplicate-key")
    (d / "model.safetensors.index.json").write_bytes(b'{"weight_map": {"a": "x", "a": "y"}}')
    b.add(cat, "index-duplicate-key", d, "model.safetensors.index.json")


def _special_files(b: _Builder) -> None:
    cat = "special files and links"
    four_gib = 4 * 2**30

    def fifo(path: Path) -> None:
        os.mkfifo(path)

    def sparse(path: Path) -> None:
        with open(path, "wb") as fh:
            fh.truncate(four_gib)

    makers = {
        "fifo": fifo,
        "dev-zero": lambda p: os.symlink("/dev/zero", p),
        "dev-urandom": lambda p: os.symlink("/dev/urandom", p),
        "dev-null": lambda p: os.symlink("/dev/null", p),
        "sparse-4GiB": sparse,
        "loop": lambda p: os.symlink(p.name, p),
        "directory": lambda p: p.mkdir(),
    }
    for kind, make in makers.items():
        d = b.dir(f"config-{kind}", config=None)
        make(d / "config.json")
        b.valid_st(d)
        b.add(cat, f"config-{kind}", d, "config.json")

        d = b.dir(f"weights-{kind}")
        make(d / "model.safetensors")
        b.add(cat, f"weights-{kind}", d, "model.safetensors")

        d = b.dir(f"index-{kind}")
        make(d / "model.safetensors.index.json")
        b.add(cat, f"index-{kind}", d, "model.safetensors.index.json")

        d = b.dir(f"shard-{kind}")
        make(d / "model-00001-of-00001.safetensors")
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {k: "model-00001-of-00001.safetensors" for k in b.tables}})
        )
        b.add(cat, f"shard-{kind}", d, "model-00001-of-00001.safetensors")

    d = b.dir("bin-fifo")
    os.mkfifo(d / "pytorch_model.bin")
    b.add(cat, "bin-fifo", d, "pytorch_model.bin")
    d = b.dir("weights-file-fifo")  # a weights file given directly, its config.json a FIFO
    b.valid_st(d, "weights.safetensors")
    os.remove(d / "config.json")
    os.mkfifo(d / "config.json")
    b.add(cat, "weights-file-fifo", d / "weights.safetensors", "config.json")
    d = b.dir("shard-loop-pair")
    os.symlink("b.safetensors", d / "a.safetensors")
    os.symlink("a.safetensors", d / "b.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: "a.safetensors" for k in b.tables}}))
    b.add(cat, "shard-loop-pair", d, "a.safetensors")
    for name, entry in (
        ("shard-absolute", "/etc/passwd"),
        ("shard-dotdot", "../x.safetensors"),
        ("shard-nul", "a\0b"),
        ("shard-not-str", 7),
        ("shard-index", "model.safetensors.index.json"),
    ):
        d = b.dir(name)
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: entry for k in b.tables}}))
        b.add(cat, name, d, "model.safetensors.index.json")


def _zip_structure(b: _Builder) -> None:
    cat = "zip structure and bombs"
    items, storages = b.torch_items()
    pkl = encode(state_dict(items))

    def members(pkl_member: Member | None = None, order: Member | None = None, extra=()) -> list[Member]:
        out = [pkl_member or Member("archive/data.pkl", pkl), order or Member("archive/byteorder", b"little")]
        out += [Member(f"archive/data/{k}", v) for k, v in storages.items()]
        return out + list(extra)

    def case(name, ms, **kw):
        d = b.dir(name)
        raw_zip(d / "pytorch_model.bin", ms, **kw)
        b.add(cat, name, d, "pytorch_model.bin")

    bomb_size = 512 * 2**20
    bomb = _deflate(None, bomb_size)
    bomb_crc = _crc_zeros(bomb_size)
    case("zip-pkl-bomb", members(Member("archive/data.pkl", bomb, method=8, crc=bomb_crc, file_size=bomb_size)))
    case("zip-pkl-bomb-lying-size", members(Member("archive/data.pkl", bomb, method=8, crc=bomb_crc, file_size=1000)))
    case(
        "zip-byteorder-bomb",
        members(order=Member("archive/byteorder", bomb, method=8, crc=bomb_crc, file_size=bomb_size)),
    )
    case(
        "zip-byteorder-bomb-lying",
        members(order=Member("archive/byteorder", bomb, method=8, crc=bomb_crc, file_size=6)),
    )
    case("zip-pkl-declared-huge", members(Member("archive/data.pkl", pkl, file_size=2**32 - 1)))
    case("zip-byteorder-stored-1MiB", members(order=Member("archive/byteorder", b"little" * 200_000)))
    case("zip-pkl-encrypted", members(Member("archive/data.pkl", pkl, flags=1)))
    case("zip-byteorder-encrypted", members(order=Member("archive/byteorder", b"little", flags=1)))
    case("zip-storage-encrypted", [Member(m.name, m.payload, flags=1 if "/data/" in m.name else 0) for m in members()])
    case("zip-pkl-size-lies-short", members(Member("archive/data.pkl", pkl, file_size=len(pkl) - 10)))
    case("zip-pkl-size-lies-long", members(Member("archive/data.pkl", pkl, file_size=len(pkl) + 10)))
    case("zip-pkl-compress-size-lies", members(Member("archive/data.pkl", pkl, compress_size=len(pkl) * 1000)))
    case("zip-pkl-bad-crc", members(Member("archive/data.pkl", pkl, crc=1)))
    case("zip-pkl-method-99", members(Member("archive/data.pkl", pkl, method=99)))
    case("zip-pkl-method-bzip2-garbage", members(Member("archive/data.pkl", pkl, method=12)))
    case("zip-pkl-deflate-garbage", members(Member("archive/data.pkl", b"\xff" * 100, method=8, file_size=len(pkl))))
    case(
        "zip-storage-deflated",
        [
            Member(
                m.name, zlib.compress(m.payload)[2:-4], method=8, crc=zlib.crc32(m.payload), file_size=len(m.payload)
            )
            if "/data/" in m.name
            else m
            for m in members()
        ],
    )
    case(
        "zip-storage-size-lies",
        [
            m._replace(file_size=len(m.payload) * 2, compress_size=len(m.payload) * 2) if "/data/" in m.name else m
            for m in members()
        ],
    )
    case(
        "zip-local-name-mismatch",
        [m._replace(local_name="archive/data/zz") if m.name.endswith("/data/0") else m for m in members()],
    )
    case("zip-two-pickles", members(extra=[Member("other/data.pkl", pkl)]))
    case("zip-no-pickle", members()[1:])
    case("zip-duplicate-member", members(extra=[Member("archive/data/0", storages["0"])]))
    case("zip64-count-2-40", members(), zip64_count=2**40)
    case("zip-cd-offset-wrong", members(), cd_offset_shift=10**6)
    case("zip-truncated-cd", members(), cut=30)
    case("zip-byteorder-middle", members(order=Member("archive/byteorder", b"middle")))
    case("zip-storage-missing", [m for m in members() if not m.name.endswith("/data/0")])
    d = b.dir("zip-only-magic")
    (d / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    b.add(cat, "zip-only-magic", d, "pytorch_model.bin")


def _pickle_opcodes(b: _Builder) -> None:
    items, _ = b.torch_items()
    good = encode(state_dict(items))[2:-1]  # without PROTO and STOP

    def deep_tuple_key(n: int) -> bytes:
        # {((...(),),): 1} built with TUPLE1: a dict key the C unpickler hashes recursively
        return b"\x80\x02}" + b")" + b"\x85" * n + b"K\x01s."

    b.pickle_case("pkl-deep-tuple-key-1000000", deep_tuple_key(1_000_000))
    b.pickle_case("pkl-deep-tuple-key-5000", deep_tuple_key(5000))
    b.pickle_case("pkl-deep-tuple-mark-100000", b"\x80\x02}" + b"(" * 100_000 + b"t" * 100_000 + b"K\x01s.")
    b.pickle_case("pkl-deep-list-1000000", b"\x80\x02" + b"]" * 1_000_000 + b"a" * 999_999 + b".")
    b.pickle_case(
        "pkl-deep-dict-value",
        b"\x80\x02}" + b"X\x01\x00\x00\x00a" + b"}X\x01\x00\x00\x00a" * 100_000 + b"N" + b"s" * 100_001 + b".",
    )
    b.pickle_case("pkl-deep-memo-self", b"\x80\x02]q\x00h\x00a" + b"h\x00\x85q\x00" * 200_000 + b".")
    b.pickle_case("pkl-global-os-system", encode(Call(G("os", "system"), ("true",))))
    b.pickle_case("pkl-global-eval", encode(Call(G("builtins", "eval"), ("1",))))
    b.pickle_case("pkl-stack-global-nonstr", b"\x80\x04K\x01K\x02\x93.")
    b.pickle_case("pkl-inst", b"(ios\nsystem\nS'true'\n.")
    b.pickle_case("pkl-obj", b"\x80\x02(cos\nsystem\nS'true'\no.")
    b.pickle_case("pkl-ext1", b"\x80\x02\x82\x01.")
    b.pickle_case("pkl-unknown-opcode", b"\x80\x02\xff.")
    b.pickle_case("pkl-truncated", encode(state_dict(items))[:-20])
    b.pickle_case("pkl-no-stop", b"\x80\x02}")
    b.pickle_case("pkl-get-unset", b"\x80\x02h\x05.")
    b.pickle_case("pkl-pop-mark-empty", b"\x80\x021.")
    b.pickle_case("pkl-stack-underflow", b"\x80\x02s.")
    b.pickle_case("pkl-appends-no-mark", b"\x80\x02]e.")
    b.pickle_case("pkl-3M-marks", b"\x80\x02" + b"(" * 3_000_000 + b"N.")
    b.pickle_case("pkl-2M-memo", b"\x80\x02N" + b"\x94" * 2_000_000 + b".")
    # CPython's unpickler sizes its memo table to the index stored: 8 GiB for this one
    b.pickle_case("pkl-memo-index-2-30", b"\x80\x02}r\x00\x00\x00\x40.")
    b.pickle_case("pkl-1M-empty-lists", b"\x80\x02" + b"]" * 1_000_000 + b".")
    big = (2**70000).to_bytes(8752, "little")
    b.pickle_case(
        "pkl-long4-numel",
        encode(
            state_dict(
                {
                    TOK: tensor(
                        PersId(
                            (
                                "storage",
                                G("torch", "FloatStorage"),
                                "0",
                                "cpu",
                                Raw(b"\x8b" + struct.pack("<i", len(big)) + big),
                            )
                        ),
                        (V, H),
                    )
                }
            )
        ),
    )
    b.pickle_case("pkl-long-text-5000-digits", b"\x80\x02}X\x01\x00\x00\x00aL" + b"9" * 5000 + b"L\ns.")
    b.pickle_case("pkl-long4-key", b"\x80\x02}\x8b\x00\x00\x01\x00" + b"\x7f" * 65536 + b"K\x01s.")
    b.pickle_case("pkl-a-list", b"\x80\x02]" + good + b"a.")
    b.pickle_case("pkl-key-not-str", b"\x80\x02}K\x01K\x02s.")
    b.pickle_case("pkl-persid-not-tuple", encode(state_dict({TOK: tensor(Raw(b"K\x01Q"), (V, H))})))
    b.pickle_case(
        "pkl-persid-type-not-storage", encode(state_dict({TOK: tensor(storage("0", V * H, kind="Tensor"), (V, H))}))
    )
    b.pickle_case("pkl-storage-numel-mismatch", encode(state_dict({TOK: tensor(storage("0", V * H + 1), (V, H))})))
    b.pickle_case(
        "pkl-storage-two-types",
        encode(
            state_dict(
                {TOK: tensor(storage("0", V * H), (V, H)), POS: tensor(storage("0", V * H, "HalfStorage"), (V, H))}
            )
        ),
    )
    b.pickle_case("pkl-storage-no-member", encode(state_dict({TOK: tensor(storage("nope", V * H), (V, H))})))
    b.pickle_case(
        "pkl-build-stand-in", encode(state_dict({TOK: Build(G("torch._utils", "_rebuild_tensor_v2"), {"__call__": 1})}))
    )
    b.pickle_case("pkl-reduce-ordereddict-bad", encode(Call(ORDERED_DICT, (1, 2, 3))))


def _strides_and_offsets(b: _Builder) -> None:
    cat = "strides and offsets"
    _, storages = b.torch_items()
    rest = {k: tensor(storage(str(i), v.size), v.shape) for i, (k, v) in enumerate(b.tables.items()) if k != TOK}
    token_key = str(list(b.tables).index(TOK))
    s = storage(token_key, V * H)
    for name, t in (
        ("stride0-4GiB", tensor(s, (2**27, H), (0, 1))),
        ("stride0-past-storage", tensor(s, (2**15, 2**15), (0, 1))),
        ("stride0-both", tensor(s, (2**16, 2**16), (0, 0))),
        ("stride-overlap", tensor(s, (V, H), (1, 1))),
        ("stride-negative", tensor(s, (V, H), (-H, 1), offset=V * H - H)),
        ("stride-past-end", tensor(s, (V, H), (H + 1, 1))),
        ("offset-past-end", tensor(s, (V, H), offset=V * H)),
        ("offset-negative", tensor(s, (V, H), offset=-1)),
        ("offset-2-70", tensor(s, (V, H), offset=2**70)),
        ("size-stride-lengths", tensor(s, (V, H), (H,))),
        ("size-64-dims", tensor(s, (1,) * 64, (1,) * 64)),
        ("size-huge-product", tensor(s, (2**40, 2**40), (0, 0))),
        (
            "size-not-tuple",
            Call(G("torch._utils", "_rebuild_tensor_v2"), (s, 0, [V, H], (H, 1), False, Call(ORDERED_DICT, ()))),
        ),
        ("size-negative", tensor(s, (-V, H), (H, 1))),
    ):
        d = b.dir(name)
        write_torch_zip(d / "pytorch_model.bin", encode(state_dict({TOK: t, **rest})), storages)
        b.add(cat, name, d, "pytorch_model.bin")


def _config_values(b: _Builder) -> None:
    cat = "config values"
    values = [
        ("eps-zero", {"layer_norm_eps": 0}),
        ("eps-negative", {"layer_norm_eps": -1e-5}),
        ("eps-400-digits", {"layer_norm_eps": 10**400}),
        ("eps-string", {"layer_norm_eps": "1e-12"}),
        ("eps-true", {"layer_norm_eps": True}),
        ("eps-list", {"layer_norm_eps": [1e-12]}),
        ("hidden-2-63", {"hidden_size": 2**63}),
        ("hidden-zero", {"hidden_size": 0}),
        ("hidden-string", {"hidden_size": "8"}),
        ("hidden-float", {"hidden_size": 8.0}),
        ("hidden-wrong", {"hidden_size": 16}),
        ("model-type-missing", {"model_type": None}),
        ("model-type-unknown", {"model_type": "gpt2"}),
        ("model-type-list", {"model_type": ["bert"]}),
        ("model-type-long", {"model_type": "b" * 100_000}),
        ("position-type-relative", {"position_embedding_type": "relative_key"}),
        ("type-vocab-2-63", {"model_type": "deberta", "type_vocab_size": 2**63}),
        ("roberta-pad-2-63", {"model_type": "roberta", "pad_token_id": 2**63}),
        ("roberta-pad-10-400", {"model_type": "roberta", "pad_token_id": 10**400}),
        ("roberta-pad-negative", {"model_type": "roberta", "pad_token_id": -1}),
        ("roberta-pad-past-table", {"model_type": "roberta", "pad_token_id": P}),
        ("roberta-pad-float", {"model_type": "roberta", "pad_token_id": 1.5}),
        ("roberta-pad-null", {"model_type": "roberta", "pad_token_id": None}),
    ]
    for name, change in values:
        config = {**CONFIG, **change}
        if config.get("model_type") is None:
            del config["model_type"]
        d = b.dir(f"config-{name}", config)
        b.valid_st(d)
        b.add(cat, f"config-{name}", d, "config.json")
    for name, text in (
        ("eps-nan", b"NaN"),
        ("eps-infinity", b"Infinity"),
        ("eps-1e400", b"1e400"),
        ("eps-minus-infinity", b"-Infinity"),
    ):
        d = b.dir(f"config-{name}", b'{"model_type": "bert", "hidden_size": 8, "layer_norm_eps": ' + text + b"}")
        b.valid_st(d)
        b.add(cat, f"config-{name}", d, "config.json")


def _must_load(b: _Builder) -> None:
    cat = "must load"

    def padded(header: dict, pad_to: int) -> bytes:
        text = json.dumps(header).encode()
        assert len(text) <= pad_to, (len(text), pad_to)
        return text + b" " * (pad_to - len(text))

    header, data = _st_header(b.tables)
    base = len(json.dumps(header).encode())
    low = base + (0x80 - base) % 0x100
    cases = {"st-length-low-byte-0x80": padded(header, low)}
    # "ustar" at byte 257 of the file (byte 249 of the header), inside a metadata string
    opening = b'{"__metadata__": {"x": "'
    filler = "y" * (249 - len(opening)) + "ustar" + "y" * 11
    ustar = json.dumps({"__metadata__": {"x": filler}, **header}).encode()
    assert ustar[249:254] == b"ustar"
    cases["st-ustar-at-257"] = ustar + b" " * (-len(ustar) % 8)
    for name, text in cases.items():
        d = b.dir(name)
        _header_file(d / "model.safetensors", text, data)
        b.add(cat, name, d, "", "load")
        d = b.dir(name + "-as-shard")
        _header_file(d / "model-00001-of-00001.safetensors", text, data)
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {k: "model-00001-of-00001.safetensors" for k in b.tables}})
        )
        b.add(cat, name + "-as-shard", d, "", "load")
    # A header length of 0x04034b50 starts the file like a zip archive; it is over MAX_HEADER_BYTES, so
    # the file must be refused as safetensors (naming it), not read as a zip.
    d = b.dir("st-length-0x04034b50")
    _header_file(d / "model.safetensors", padded(header, 0x04034B50), data)
    b.add("header arithmetic", "st-length-0x04034b50", d, "model.safetensors")
    d = b.dir("torch-zip")
    b.torch_zip(d)
    b.add(cat, "torch-zip", d, "", "load")
    d = b.dir("torch-zip-deflated-pickle")
    items, storages = b.torch_items()
    pkl = encode(state_dict(items))
    raw_zip(
        d / "pytorch_model.bin",
        [
            Member("archive/data.pkl", zlib.compress(pkl)[2:-4], method=8, crc=zlib.crc32(pkl), file_size=len(pkl)),
            Member("archive/byteorder", b"little"),
            *(Member(f"archive/data/{k}", v) for k, v in storages.items()),
        ],
    )
    b.add(cat, "torch-zip-deflated-pickle", d, "", "load")
    # A pytorch_model.bin holding, before the embedding tables, 3.25 GiB of encoder weights the layer
    # never reads (a hole in the file): more than the worker's address space, so only what is read
    # may be mapped.
    d = b.dir("torch-zip-unused-3GiB-member")
    items, storages = b.torch_items()
    huge = 13 * 2**28
    items = {"encoder.layer.0.attention.self.query.weight": tensor(storage("99", huge // 4), (huge // 16, 4)), **items}
    sparse_zip(
        d / "pytorch_model.bin",
        [
            Member("archive/data.pkl", encode(state_dict(items))),
            Member("archive/byteorder", b"little"),
            Member("archive/data/99", b""),
            *(Member(f"archive/data/{k}", v) for k, v in storages.items()),
        ],
        hole="archive/data/99",
        hole_size=huge,
    )
    b.add(cat, "torch-zip-unused-3GiB-member", d, "", "load")
    d = b.dir("hf-cache-links")  # snapshot files linked to blobs, as the Hugging Face cache lays them out
    blobs = d / "blobs"
    blobs.mkdir()
    b.valid_st(blobs, "abc123")
    os.symlink("blobs/abc123", d / "model.safetensors")
    b.add(cat, "hf-cache-links", d, "", "load")


def _repeat(unit, count: int) -> bytes:
    """``unit(0), unit(1), ...`` joined by commas (`unit` formats a number into a fixed-width piece)."""
    return b",".join(unit(i) for i in range(count))


def _fitting(size: int, around: bytes, unit) -> int:
    """How many comma-separated ``unit(i)`` fit in `size` bytes beside `around`."""
    return (size - len(around)) // (len(unit(0)) + 1)


def _size_limits(b: _Builder) -> None:
    """Files at or over each size and count limit of the readers (bertembed._checkpoints.readers.reading)."""
    from bertembed._checkpoints.readers import reading

    cat = SIZE_CATEGORY
    header, data = _st_header(b.tables)
    real = json.dumps(header, separators=(",", ":")).encode()[1:-1]  # the real entries, without braces

    def st_case(name, text, expect="error"):
        d = b.dir(name)
        _header_file(d / "model.safetensors", text, data)
        b.add(cat, name, d, "model.safetensors" if expect == "error" else "", expect)

    def zero_size(pad: int = 0):
        return lambda i: b'"%s%07d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % (b"z" * (1 + pad), i)

    def entries(size: int, unit, count: int | None = None) -> bytes:
        if count is None:
            count = _fitting(size, b"{" + real + b",}", unit)
        return b"{" + real + b"," + _repeat(unit, count) + b"}"

    def metadata(value: bytes) -> bytes:
        return b'{"__metadata__":{"x":' + value + b"}," + real + b"}"

    limit = reading.MAX_HEADER_BYTES
    # 1.65 million zero-size tensors beside the real ones, in a 99 MB header (over MAX_HEADER_BYTES).
    st_case("st-header-100mb-entries", entries(99_000_000, zero_size()))
    # As many as MAX_HEADER_BYTES holds (1.1 million: over MAX_HEADER_VALUES).
    st_case("st-header-at-limit-entries", entries(limit, zero_size()))
    # Over MAX_HEADER_VALUES in the metadata: 1.2 million members, then 1.2 million empty arrays.
    over = reading.MAX_HEADER_VALUES * 6 // 5
    st_case(
        "st-header-metadata-members",
        b'{"__metadata__":{' + _repeat(lambda i: b'"k%07d":"v"' % i, over) + b"}," + real + b"}",
    )
    st_case("st-header-metadata-arrays", metadata(b"[" + b",".join([b"[]"] * over) + b"]"))
    # One string as long as MAX_HEADER_BYTES allows: parsed (it is valid).
    st_case("st-header-at-limit-string", metadata(b'"' + b"y" * (limit - len(metadata(b'""')) - 2) + b'"'), "load")
    # The same with one character beyond U+FFFF, which makes Python store each character in 4 bytes.
    astral = "\U0001f600".encode()
    st_case(
        "st-header-at-limit-4-byte-text", metadata(b'"' + astral + b"y" * (limit - len(metadata(b'""')) - 6) + b'"')
    )
    # The same character written as an escape (the text stays ASCII; the string parsed from it does not).
    escaped = b"\\ud83d\\ude00"
    st_case(
        "st-header-at-limit-escaped-4-byte-text",
        metadata(b'"' + escaped + b"y" * (limit - len(metadata(b'""')) - 14) + b'"'),
    )
    # Just under MAX_HEADER_VALUES (7 per zero-size tensor), names filling MAX_HEADER_BYTES: parsed.
    count = (reading.MAX_HEADER_VALUES - 100) // 7
    pad = (limit - len(real) - 3) // count - len(zero_size()(0)) - 1
    st_case("st-header-at-limit-long-names", entries(limit, zero_size(pad), count), "load")
    # The same with the last name a repeat of the first: parsed twice (the second time to find the repeat).
    long_name = zero_size(pad)
    repeat = entries(limit, lambda i: long_name(0 if i == count - 1 else i), count)
    st_case("st-header-at-limit-long-names-repeated", repeat)

    shard = "model-00001-of-00001.safetensors"

    def index_case(name, extra: bytes, expect="error"):
        d = b.dir(name)
        b.valid_st(d, shard)
        wm = json.dumps({k: shard for k in b.tables}, separators=(",", ":")).encode()[1:-1]
        (d / "model.safetensors.index.json").write_bytes(b'{"weight_map":{' + wm + b"," + extra + b"}}")
        b.add(cat, name, d, "model.safetensors.index.json" if expect == "error" else "", expect)

    quoted = b'"' + shard.encode() + b'"'
    index_case("index-over-limit-values", _repeat(lambda i: b'"x%07d":' % i + quoted, reading.MAX_INDEX_VALUES))
    count = reading.MAX_INDEX_VALUES - 100
    pad = (reading.MAX_INDEX_BYTES - 1000) // count - len(b'"%07d":' % 0 + quoted) - 1
    index_case("index-at-limit-long-names", _repeat(lambda i: b'"%s%07d":' % (b"x" * pad, i) + quoted, count), "load")

    def config_case(name, extra: bytes, expect="error"):
        d = b.dir(name, b'{"model_type":"bert","hidden_size":8,"layer_norm_eps":1e-12,"x":[' + extra + b"]}")
        b.valid_st(d)
        b.add(cat, name, d, "config.json" if expect == "error" else "", expect)

    config_case("config-over-limit-values", b",".join([b"{}"] * (reading.MAX_CONFIG_VALUES // 2 + 1)))
    text = b'"' + b"s" * 30 + b'"'
    config_case(
        "config-at-limit-strings", b",".join([text] * ((reading.MAX_CONFIG_BYTES - 200) // (len(text) + 1))), "load"
    )

    items, storages = b.torch_items()
    real_pickle = encode(state_dict(items), proto=False)  # (ends with STOP)
    real_ops = sum(1 for _ in pickletools.genops(b"\x80\x02" + real_pickle))

    def pickle_case(name, pkl, expect="error"):
        d = b.dir(name)
        write_torch_zip(d / "pytorch_model.bin", pkl, storages)
        b.add(cat, name, d, "pytorch_model.bin" if expect == "error" else "", expect)

    limit = reading.MAX_PICKLE_BYTES
    # NONE, POP as long as MAX_PICKLE_BYTES allows (over MAX_PICKLE_OPCODES), then just under MAX_PICKLE_OPCODES.
    pickle_case("pkl-at-limit-opcodes", b"\x80\x02" + b"N0" * ((limit - len(real_pickle)) // 2 - 2) + real_pickle)
    under = (reading.MAX_PICKLE_OPCODES - real_ops) // 2 - 2
    pickle_case("pkl-under-limit-opcodes", b"\x80\x02" + b"N0" * under + real_pickle, "load")
    # Tensors that each cost 15 opcodes in 36 bytes, through the memo: 466,000 views of one storage.
    head = (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x01"
        + b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuJ"
        + struct.pack("<i", V * H)
        + b"tQq\x020ccollections\nOrderedDict\n)Rq\x030}"
    )

    def view(i: int) -> bytes:
        return b"X\x08\x00\x00\x00t%07d" % i + b"h\x01(h\x02K\x00K\x10K\x08\x86K\x08K\x01\x86\x89h\x03tR"

    count = (limit - len(head) - 1000) // len(view(0))
    batches = (
        b"(" + b"".join(view(i) for i in range(at, min(count, at + 1000))) + b"u" for at in range(0, count, 1000)
    )
    pickle_case("pkl-at-limit-tensors", head + b"".join(batches) + b".")
    # One string as long as MAX_PICKLE_BYTES allows, with a character beyond U+FFFF (4 bytes per character).
    text = astral + b"y" * (limit - len(real_pickle) - 100)
    pickle_case(
        "pkl-at-limit-4-byte-text", b"\x80\x02X" + struct.pack("<I", len(text)) + text + b"0" + real_pickle, "load"
    )

    def zip_case(name, unused: int, expect="error"):
        d = b.dir(name)
        members = [Member("archive/data.pkl", encode(state_dict(items))), Member("archive/byteorder", b"little")]
        members += [Member(f"archive/data/{k}", v) for k, v in storages.items()]
        members += [Member(f"archive/data/u{i}", b"") for i in range(unused - len(members))]
        raw_zip(d / "pytorch_model.bin", members)
        b.add(cat, name, d, "pytorch_model.bin" if expect == "error" else "", expect)

    zip_case("zip-over-limit-members", reading.MAX_ZIP_MEMBERS + 1)
    zip_case("zip-at-limit-members", reading.MAX_ZIP_MEMBERS, "load")


# ------------------------------------------------------------------ the worker


def _limit_address_space() -> bool:
    """RLIMIT_AS where Linux enforces it; whether it was set.

    Not under AddressSanitizer (its shadow memory reserves terabytes of
    address space; its allocator then refuses an oversized allocation
    instead), not on macOS (its setrlimit refuses RLIMIT_AS, which it would
    not enforce anyway) and not where there is no ``resource`` (Windows): there
    the corpus runs without the limit.
    """
    if not sys.platform.startswith("linux") or "libasan" in os.environ.get("LD_PRELOAD", ""):
        return False
    try:
        import resource
    except ImportError:
        return False
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    return True


def _too_slow() -> TimeoutError:
    return TimeoutError(f"case took more than {CASE_SECONDS} s")


def _load(root: Path, case: Case, clock: str = "wall") -> dict:
    """Load `case` with ``from_pretrained`` and embed a few tokens; the outcome as a JSON-able record."""
    import bertembed

    try:
        with time_bound(CASE_SECONDS, _too_slow, clock=clock):
            layer = bertembed.BertEmbeddings.from_pretrained(root / case.target)
            layer(np.array([[0, 1, 2]]))
        return {"outcome": "loaded"}
    except BaseException as exc:
        try:
            message = str(exc)
        except BaseException as inner:
            message = f"(str() of the error raised {type(inner).__name__})"
        return {
            "outcome": "error",
            "type": type(exc).__name__,
            "mro": [c.__name__ for c in type(exc).__mro__],
            "message": message[:5000],
            "length": len(message),
        }


def run(root: Path, first: int) -> None:
    """Load the cases of `root` (listed in its cases.json) from number `first` on, one JSON line each."""
    cases = [Case(*c) for c in json.loads((root / "cases.json").read_text())]
    for i in range(first, len(cases)):
        case = cases[i]
        print(json.dumps({"i": i, "start": case.name}), flush=True)
        result = _load(root, case)
        print(json.dumps({"i": i, "end": case.name, **result}), flush=True)


def _reset_peak_memory() -> bool:
    """Start the peak resident memory (VmHWM) over from the current size (Linux); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_memory_mib() -> float | None:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def measure(root: Path, name: str) -> None:
    """Load the case `name` alone; print its outcome, CPU seconds and peak memory (MiB; null off Linux).

    The peak counts from the start of the load, interpreter and modules included (their
    ~30 MiB); the CPU time is this process's user + system time, which waiting on a busy
    machine does not inflate.
    """
    import bertembed  # noqa: F401  (imported before the measure starts)

    cases = {c[1]: Case(*c) for c in json.loads((root / "cases.json").read_text())}
    reset = _reset_peak_memory()
    start = time.process_time()
    result = _load(root, cases[name], clock="cpu")
    cpu = time.process_time() - start
    print(json.dumps({**result, "cpu_s": cpu, "peak_mib": _peak_memory_mib() if reset else None}), flush=True)


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[1] == "build":
        root = Path(argv[2])
        cases = build(root)
        (root / "cases.json").write_text(json.dumps([list(c) for c in cases]))
        print(len(cases))
    elif len(argv) >= 3 and argv[1] == "run":
        _limit_address_space()
        run(Path(argv[2]), int(argv[3]) if len(argv) > 3 else 0)
    elif len(argv) >= 4 and argv[1] == "measure":
        measure(Path(argv[2]), argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
