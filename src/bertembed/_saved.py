"""A layer saved by :meth:`BertEmbeddings.save_pretrained`, and read back.

A saved layer is a directory of two files:

- ``config.json``: ``"model_type": "bertembed"``, ``"format_version": 1``
  and every setting of the layer (position rule, padding index, LayerNorm and
  its eps, result dtype...), plus the shapes, checked against the tensors
  when the layer is read back;
- ``model.safetensors``: the tables exactly as the layer stores them
  (:data:`TENSOR_NAMES`), an ordinary safetensors file that any safetensors
  reader opens. An int8 token table is the ``I8`` tensor ``token_embeddings``
  and the ``F32`` tensor ``token_scale_offset`` of shape (rows, 2): each
  row's scale and offset (``value = q * scale + offset``).

Reading maps the file: every table, int8 ones included, is a read-only view
of the file's pages (no private copy), so processes that map the same saved
layer share one copy in the page cache.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from . import _tables as T
from ._api import Tables, prepare_tables
from ._positions import PositionRule
from ._tables import Table
from ._version import __version__
from ._weights import SafetensorsFile, TensorSource

#: ``config.json``'s ``model_type`` of a saved layer.
MODEL_TYPE = "bertembed"
#: The newest layout this version writes and reads.
FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

#: The tensors of ``model.safetensors`` (present when the layer has them).
TENSOR_NAMES = (
    "token_embeddings", "token_scale_offset", "position_embeddings", "segment_embeddings",
    "task_embeddings", "ln_weight", "ln_bias",
)

#: safetensors' dtype names of the stored kinds.
_DTYPE_OF_KIND = {T.F32: "F32", T.F64: "F64", T.F16: "F16", T.BF16: "BF16", T.I8: "I8"}
_ALIGN = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I8": 1}

#: ``progress(done_bytes, total_bytes, label)``.
Progress = Callable[[int, int, str], None]

#: Bytes written per ``write`` call (and per progress report).
_CHUNK = 16 << 20


class Saved(NamedTuple):
    """A saved layer read back, before it becomes a layer."""

    tables: Tables
    rule: PositionRule
    zero_masked_rows: bool
    model_type: str | None
    dtype: str


def is_saved(config: Mapping[str, Any]) -> bool:
    """Whether `config` is the ``config.json`` of a saved layer."""
    return config.get("model_type") == MODEL_TYPE


def _dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if T.is_bfloat16(dtype) else dtype.name


def _config(
    tables: Tables, dtype: np.dtype, rule: PositionRule, zero_masked: bool, model_type: str | None,
) -> dict[str, Any]:
    t = tables
    return {
        "model_type": MODEL_TYPE,
        "format_version": FORMAT_VERSION,
        "source_model_type": model_type,
        "hidden_size": t.hidden,
        "vocab_size": t.tok.rows,
        "max_position_embeddings": 0 if t.pos is None else t.pos.rows,
        "type_vocab_size": 0 if t.seg is None else t.seg.rows,
        "task_type_vocab_size": 0 if t.task is None else t.task.rows,
        "position_rule": rule.kind,
        "position_offset": rule.offset,
        "padding_idx": rule.padding_idx,
        "layer_norm": t.ln is not None,
        "layer_norm_bias": t.ln is not None and t.ln[1] is not None,
        "layer_norm_eps": t.eps,
        "zero_masked_rows": zero_masked,
        "dtype": _dtype_name(dtype),
        "table_dtype": t.tok.dtype_name,
        "bertembed_version": __version__,
    }


def _tensors(tables: Tables) -> list[tuple[str, str, np.ndarray]]:
    """(name, safetensors dtype, array) of every tensor to write."""
    t = tables
    out = [("token_embeddings", _DTYPE_OF_KIND[t.tok.kind], t.tok.data)]
    if t.tok.scale is not None:
        out.append(("token_scale_offset", "F32", t.tok.scale))
    for name, table in (("position_embeddings", t.pos), ("segment_embeddings", t.seg),
                        ("task_embeddings", t.task)):
        if table is not None:
            out.append((name, _DTYPE_OF_KIND[table.kind], table.data))
    if t.ln is not None:
        # float64: the exact values the layer computes with (its float32 copy
        # is these values rounded, as when the layer was built).
        out.append(("ln_weight", "F64", t.ln[0]))
        if t.ln[1] is not None:
            out.append(("ln_bias", "F64", t.ln[1]))
    return out


def _little_endian(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    if sys.byteorder == "big" and arr.dtype.itemsize > 1:
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def write_safetensors(
    path: Path, tensors: list[tuple[str, str, np.ndarray]], metadata: dict[str, str],
    progress: Progress | None = None,
) -> None:
    """Write `tensors` as a safetensors file at `path`, atomically.

    Tensors are laid out by decreasing alignment (float64 first, int8 last)
    so that every tensor starts at a multiple of its item size (the file can
    be mapped as arrays); the header is padded with spaces to a multiple of 8
    bytes. Data is written in 16 MiB pieces straight from the arrays (a
    mapped table is read, never copied whole).
    """
    ordered = sorted(tensors, key=lambda item: -_ALIGN[item[1]])
    header: dict[str, Any] = {"__metadata__": metadata}
    at = 0
    for name, dtype, arr in ordered:
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + arr.nbytes]}
        at += arr.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    total, done = at, 0
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(struct.pack("<Q", len(text)))
            fh.write(text)
            for _, _, arr in ordered:
                flat = _little_endian(arr).reshape(-1).view(np.uint8)
                for start in range(0, flat.size, _CHUNK):
                    fh.write(memoryview(flat[start:start + _CHUNK]))
                    done += min(_CHUNK, flat.size - start)
                    if progress is not None:
                        progress(done, total, f"writing {path.name}")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if progress is not None and total == 0:
        progress(0, 0, f"writing {path.name}")


def save(
    directory: str | os.PathLike[str], tables: Tables, dtype: np.dtype, rule: PositionRule,
    zero_masked: bool, model_type: str | None, progress: Progress | None = None,
) -> Path:
    """Write a layer's ``config.json`` and ``model.safetensors`` into `directory`.

    The directory is created if needed; files of an earlier save there are
    replaced (each is written under a temporary name, then renamed, so a layer
    mapped from the same directory keeps reading the old file). Returns the
    directory.
    """
    d = Path(os.fspath(directory)).expanduser()
    if d.exists() and not d.is_dir():
        raise NotADirectoryError(f"{d}: not a directory")
    d.mkdir(parents=True, exist_ok=True)
    config = _config(tables, dtype, rule, zero_masked, model_type)
    metadata = {"format": "bertembed", "format_version": str(FORMAT_VERSION),
                "table_dtype": tables.tok.dtype_name}
    write_safetensors(d / WEIGHTS_NAME, _tensors(tables), metadata, progress)
    tmp = d / f".{CONFIG_NAME}.partial-{os.getpid()}"
    try:
        tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, d / CONFIG_NAME)
    finally:
        if tmp.exists():
            tmp.unlink()
    return d


# --- reading -------------------------------------------------------------------------------


def _int8(source: SafetensorsFile, name: str) -> np.ndarray:
    """An I8 tensor as a read-only map of the file."""
    _, shape, begin, end = source.entries[name]
    if begin == end:
        arr = np.empty(shape, np.int8)
    else:
        arr = np.memmap(source.path, dtype=np.int8, mode="r", offset=source.data_start + begin, shape=shape)
    arr.flags.writeable = False
    return arr


def _table(source: SafetensorsFile, name: str) -> Table:
    """A float table as stored (a map of the file), bfloat16 as ml_dtypes' or tagged bits."""
    arr = source.array(name)
    if source.info(name).dtype == "BF16":
        try:
            return T.as_table(name, arr.view(T.bfloat16_dtype()))
        except TypeError:  # no ml_dtypes
            return T.bits_as_bfloat16(arr)
    return T.as_table(name, arr)


def _setting(config: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in config:
        raise ValueError(f"{where}: a saved bertembed layer's config has {key!r}; this one has not")
    value = config[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"{where}: {key!r} is {value!r}, of the wrong type")
    return value


def read(source: TensorSource, config: Mapping[str, Any], where: str, table_dtype: str | None) -> Saved:
    """The layer saved in `source` (its ``model.safetensors``) with `config`.

    Raises
    ------
    ValueError
        A config of a newer format, a missing or ill-typed setting, tensors
        whose shapes or dtypes disagree with the config.
    KeyError
        A tensor the config calls for is missing.
    """
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{where}: 'format_version' must be a positive int, got {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: a layer saved in format {version} by a newer bertembed "
            f"(this version reads format {FORMAT_VERSION} and older); upgrade bertembed"
        )
    if not isinstance(source, SafetensorsFile):
        raise ValueError(f"{source.path}: a saved bertembed layer is a model.safetensors file")

    def tensor(name: str, dtypes: tuple[str, ...]) -> str:
        if name not in source:
            raise KeyError(f"{source.path}: no tensor {name!r} (the saved layer's config calls for it)")
        got = source.info(name).dtype
        if got not in dtypes:
            raise ValueError(f"{source.path}: tensor {name!r} has dtype {got}, expected {' or '.join(dtypes)}")
        return name

    floats = ("F32", "F64", "F16", "BF16")
    hidden = _setting(config, "hidden_size", int, where)
    rows = {key: _setting(config, key, int, where) for key in
            ("vocab_size", "max_position_embeddings", "type_vocab_size", "task_type_vocab_size")}
    kind = _setting(config, "position_rule", str, where)
    offset = _setting(config, "position_offset", int, where)
    padding_idx = config.get("padding_idx")
    try:
        rule = PositionRule(kind, offset=offset, padding_idx=padding_idx)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None

    if tensor("token_embeddings", (*floats, "I8")) and source.info("token_embeddings").dtype == "I8":
        q = _int8(source, "token_embeddings")
        scale = source.array(tensor("token_scale_offset", ("F32",)))
        if q.ndim != 2 or scale.shape != (q.shape[0], 2):
            raise ValueError(
                f"{source.path}: 'token_scale_offset' has shape {scale.shape}, expected ({q.shape[0]}, 2) "
                f"for 'token_embeddings' of shape {q.shape}"
            )
        tok = Table(q, T.I8, scale)
    else:
        tok = _table(source, "token_embeddings")
    # The optional tables are there when the file has them.
    pos, seg, task = (_table(source, tensor(name, floats)) if name in source else None
                      for name in ("position_embeddings", "segment_embeddings", "task_embeddings"))
    if (pos is None) != (kind == "none"):
        raise ValueError(
            f"{source.path}: the position rule {kind!r} ({where}) "
            + ("needs a 'position_embeddings' tensor" if pos is None else "is for a layer without position_embeddings")
        )
    ln_w = ln_b = None
    if _setting(config, "layer_norm", bool, where):
        ln_w = source.array(tensor("ln_weight", ("F64",)))
        if _setting(config, "layer_norm_bias", bool, where):
            ln_b = source.array(tensor("ln_bias", ("F64",)))
    eps = _setting(config, "layer_norm_eps", (int, float), where)
    for name, table, key in (("token_embeddings", tok, "vocab_size"), ("position_embeddings", pos,
                             "max_position_embeddings"), ("segment_embeddings", seg, "type_vocab_size"),
                             ("task_embeddings", task, "task_type_vocab_size")):
        want = (rows[key], hidden)
        got = None if table is None else table.data.shape
        if table is not None and got != want:
            raise ValueError(f"{source.path}: {name!r} has shape {got}, but {where} says {want}")
    try:
        tables = prepare_tables(tok, pos, seg, ln_w, ln_b, eps, task, table_dtype)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{source.path}: {exc}") from exc
    model_type = config.get("source_model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ValueError(f"{where}: 'source_model_type' is {model_type!r}, expected a str or null")
    dtype = _setting(config, "dtype", str, where)
    if dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise ValueError(f"{where}: 'dtype' is {dtype!r}, expected float32, float64, float16 or bfloat16")
    zero_masked = _setting(config, "zero_masked_rows", bool, where)
    return Saved(tables, rule, zero_masked, model_type, dtype)
