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

A trimmed layer (:meth:`BertEmbeddings.trimmed`) is saved in format 2: its
token table holds ``kept_rows`` rows, and the ``I32`` tensor
``token_id_map`` of shape (``vocab_size``,) gives the row of each original
id (-1: trimmed away); the config says ``"trimmed": true``, ``kept_rows``
and ``unknown`` (``"error"``, or the id whose row trimmed-away ids read).
Layers that are not trimmed are still written in format 1, so that older
versions read them. Every saved config lists ``special_token_ids``, the ids
trimming always keeps.

Reading maps the file: every table, int8 ones included, is a read-only view
of the file's pages (no private copy), so processes that map the same saved
layer share one copy in the page cache. Saving over a file that a live layer
maps follows the platform's rule (:mod:`.mapped`): POSIX replaces it under
the layer, Windows refuses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .._core import dtypes, tables, trim
from .._core.positions import PositionRule
from .._core.tables import Table, Tables, prepare_tables
from .._core.trim import TokenMap
from .._version import __version__
from . import mapped
from .readers import SafetensorsFile, TensorSource
from .readers.base import FLOAT_DTYPES
from .safetensors_writer import Progress, write_safetensors, write_text

#: ``config.json``'s ``model_type`` of a saved layer.
MODEL_TYPE = "bertembed"
#: The newest layout this version writes and reads.
FORMAT_VERSION = 2
#: The layout of a layer that is not trimmed (older versions read it).
UNTRIMMED_FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

#: The tensors of ``model.safetensors`` (present when the layer has them).
TENSOR_NAMES = (
    "token_embeddings",
    "token_scale_offset",
    "token_id_map",
    "position_embeddings",
    "segment_embeddings",
    "task_embeddings",
    "ln_weight",
    "ln_bias",
)

#: How the per-row scales and offsets of an int8 table, and the LayerNorm
#: parameters (the float64 values the layer computes with), are stored.
_SCALE = dtypes.FLOAT32.safetensors
_LAYER_NORM = dtypes.FLOAT64.safetensors
#: How a trimmed table's id map is stored (int32, little-endian).
_MAP = "I32"


class Saved(NamedTuple):
    """A saved layer read back, before it becomes a layer."""

    tables: Tables
    rule: PositionRule
    zero_masked_rows: bool
    model_type: str | None
    dtype: str
    special_ids: tuple[int, ...] = ()


def is_saved(config: Mapping[str, Any]) -> bool:
    """Whether `config` is the ``config.json`` of a saved layer."""
    return config.get("model_type") == MODEL_TYPE


def _config(
    tables: Tables,
    dtype: np.dtype,
    rule: PositionRule,
    zero_masked: bool,
    model_type: str | None,
    special_ids: tuple[int, ...] = (),
) -> dict[str, Any]:
    t = tables
    m = t.token_map
    trimmed = {} if m is None else {"trimmed": True, "kept_rows": t.tok.rows, "unknown": m.rule}
    return {
        "model_type": MODEL_TYPE,
        "format_version": UNTRIMMED_FORMAT_VERSION if m is None else FORMAT_VERSION,
        "source_model_type": model_type,
        "hidden_size": t.hidden,
        "vocab_size": t.vocab,
        **trimmed,
        "special_token_ids": list(special_ids),
        "max_position_embeddings": 0 if t.pos is None else t.pos.rows,
        "type_vocab_size": 0 if t.seg is None else t.seg.rows,
        "task_type_vocab_size": 0 if t.task is None else t.task.rows,
        "position_rule": rule.kind,
        "position_offset": rule.offset,
        "padding_idx": rule.padding_idx,
        "layer_norm": t.ln is not None,
        "layer_norm_bias": t.ln is not None and t.ln.bias64 is not None,
        "layer_norm_eps": t.eps,
        "zero_masked_rows": zero_masked,
        "dtype": dtypes.name_of(dtype),
        "table_dtype": t.tok.dtype_name,
        "bertembed_version": __version__,
    }


def _tensors(tables: Tables) -> list[tuple[str, str, np.ndarray]]:
    """(name, safetensors dtype, array) of every tensor to write."""
    t = tables
    out = [("token_embeddings", t.tok.dtype.safetensors, t.tok.data)]
    if t.tok.scale is not None:
        out.append(("token_scale_offset", _SCALE, t.tok.scale))
    if t.token_map is not None:
        out.append(("token_id_map", _MAP, t.token_map.map))
    for name, table in (("position_embeddings", t.pos), ("segment_embeddings", t.seg), ("task_embeddings", t.task)):
        if table is not None:
            out.append((name, table.dtype.safetensors, table.data))
    if t.ln is not None:
        # float64: the exact values the layer computes with (its float32 copy
        # is these values rounded, as when the layer was built).
        out.append(("ln_weight", _LAYER_NORM, t.ln.weight64))
        if t.ln.bias64 is not None:
            out.append(("ln_bias", _LAYER_NORM, t.ln.bias64))
    return out


def check_destination(directory: Path) -> None:
    """Refuse, before anything is written, to save over files that a live layer maps where the OS forbids it.

    Raises
    ------
    MappedFileError
        On Windows (:data:`.mapped.REPLACE_REFUSED`), this process maps
        ``model.safetensors`` or ``config.json`` of `directory`.
    """
    for name in (WEIGHTS_NAME, CONFIG_NAME):
        mapped.check_replaceable(directory / name)


def save(
    directory: str | os.PathLike[str],
    tables: Tables,
    dtype: np.dtype,
    rule: PositionRule,
    zero_masked: bool,
    model_type: str | None,
    progress: Progress | None = None,
    *,
    special_ids: tuple[int, ...] = (),
) -> Path:
    """Write a layer's ``config.json`` and ``model.safetensors`` into `directory`.

    The directory is created if needed; files of an earlier save there are
    replaced (each is written under a temporary name, then renamed, see
    :mod:`.safetensors_writer`). A layer that maps the old file: on POSIX
    it keeps reading the old file; on Windows, which refuses to replace a
    mapped file, :func:`check_destination` refuses before anything is
    written. Returns the directory.

    Raises
    ------
    MappedFileError
        The weights file there cannot be replaced: a live layer maps it
        (Windows), checked first, or the rename was refused.
    """
    d = Path(os.fspath(directory)).expanduser()
    if d.exists() and not d.is_dir():
        raise NotADirectoryError(f"{d}: not a directory")
    check_destination(d)
    d.mkdir(parents=True, exist_ok=True)
    config = _config(tables, dtype, rule, zero_masked, model_type, special_ids)
    metadata = {
        "format": "bertembed",
        "format_version": str(config["format_version"]),
        "table_dtype": tables.tok.dtype_name,
    }
    write_safetensors(d / WEIGHTS_NAME, _tensors(tables), metadata, progress)
    write_text(d / CONFIG_NAME, json.dumps(config, indent=2) + "\n")
    return d


# --- reading -------------------------------------------------------------------------------


def _quantised(source: SafetensorsFile, name: str, storage: np.dtype) -> np.ndarray:
    """An integer tensor (int8 rows, an int32 id map) as a read-only map of the file (the
    readers map only floats); a copy only on a big-endian machine, or for a tensor not aligned
    to its item size, which this module never writes."""
    _, shape, begin, end = source.entries[name]
    storage = np.dtype(storage).newbyteorder("<")
    if begin == end:
        arr = np.empty(shape, storage)
    else:
        with open(source.path, "rb") as fh:
            arr = np.memmap(fh, dtype=storage, mode="r", offset=source.data_start + begin, shape=shape)
            mapped.register(arr, source.path, os.fstat(fh.fileno()))
    if not (arr.dtype.isnative and arr.flags.aligned):  # (a file written by another tool)
        arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C")
    arr.flags.writeable = False
    return arr


def _table(source: SafetensorsFile, name: str) -> Table:
    """A float table as stored (a map of the file), bfloat16 as tagged bits (no ml_dtypes)."""
    arr = source.array(name)
    if source.info(name).dtype == dtypes.BFLOAT16.safetensors:
        return tables.bits_as_bfloat16(arr, name)
    return tables.as_table(name, arr)


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

    floats = tuple(FLOAT_DTYPES)
    quantised = tuple(d.safetensors for d in dtypes.REGISTRY if d.quantised)
    trimmed = version >= 2 and _setting(config, "trimmed", bool, where)
    hidden = _setting(config, "hidden_size", int, where)
    rows = {
        key: _setting(config, key, int, where)
        for key in ("vocab_size", "max_position_embeddings", "type_vocab_size", "task_type_vocab_size")
    }
    kind = _setting(config, "position_rule", str, where)
    offset = _setting(config, "position_offset", int, where)
    padding_idx = config.get("padding_idx")
    try:
        rule = PositionRule(kind, offset=offset, padding_idx=padding_idx)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None

    if tensor("token_embeddings", (*floats, *quantised)) and source.info("token_embeddings").dtype in quantised:
        stored = dtypes.BY_SAFETENSORS[source.info("token_embeddings").dtype]
        q = _quantised(source, "token_embeddings", stored.storage)
        scale = source.array(tensor("token_scale_offset", (_SCALE,)))
        if q.ndim != 2 or scale.shape != (q.shape[0], 2):
            raise ValueError(
                f"{source.path}: 'token_scale_offset' has shape {scale.shape}, expected ({q.shape[0]}, 2) "
                f"for 'token_embeddings' of shape {q.shape}"
            )
        tok = Table(q, stored.kind, scale)
    else:
        tok = _table(source, "token_embeddings")
    # The optional tables are there when the file has them.
    pos, seg, task = (
        _table(source, tensor(name, floats)) if name in source else None
        for name in ("position_embeddings", "segment_embeddings", "task_embeddings")
    )
    if (pos is None) != (kind == "none"):
        raise ValueError(
            f"{source.path}: the position rule {kind!r} ({where}) "
            + ("needs a 'position_embeddings' tensor" if pos is None else "is for a layer without position_embeddings")
        )
    ln_w = ln_b = None
    if _setting(config, "layer_norm", bool, where):
        ln_w = source.array(tensor("ln_weight", (_LAYER_NORM,)))
        if _setting(config, "layer_norm_bias", bool, where):
            ln_b = source.array(tensor("ln_bias", (_LAYER_NORM,)))
    eps = _setting(config, "layer_norm_eps", (int, float), where)
    token_map = None
    if trimmed:
        rows["kept_rows"] = _setting(config, "kept_rows", int, where)
        token_map = _token_map(source, tensor("token_id_map", (_MAP,)), rows, config, where)
    for name, table, key in (
        ("token_embeddings", tok, "kept_rows" if trimmed else "vocab_size"),
        ("position_embeddings", pos, "max_position_embeddings"),
        ("segment_embeddings", seg, "type_vocab_size"),
        ("task_embeddings", task, "task_type_vocab_size"),
    ):
        want = (rows[key], hidden)
        got = None if table is None else table.data.shape
        if table is not None and got != want:
            raise ValueError(f"{source.path}: {name!r} has shape {got}, but {where} says {want}")
    try:
        tables = prepare_tables(tok, pos, seg, ln_w, ln_b, eps, task, table_dtype)._replace(token_map=token_map)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{source.path}: {exc}") from exc
    model_type = config.get("source_model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ValueError(f"{where}: 'source_model_type' is {model_type!r}, expected a str or null")
    dtype = _setting(config, "dtype", str, where)
    if dtype not in (d.name for d in dtypes.RESULTS):
        raise ValueError(f"{where}: 'dtype' is {dtype!r}, expected {dtypes.listed(dtypes.RESULTS)}")
    zero_masked = _setting(config, "zero_masked_rows", bool, where)
    special = config.get("special_token_ids", [])
    if not isinstance(special, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in special):
        raise ValueError(f"{where}: 'special_token_ids' is {special!r}, expected a list of ints")
    vocab = rows["vocab_size"]
    return Saved(tables, rule, zero_masked, model_type, dtype, tuple(i for i in special if 0 <= i < vocab))


def _token_map(
    source: SafetensorsFile, name: str, rows: Mapping[str, int], config: Mapping[str, Any], where: str
) -> TokenMap:
    """A trimmed layer's id map, a map of the file (its entries are checked when the layer is built)."""
    unknown = config.get("unknown")
    if unknown != trim.ERROR and (not isinstance(unknown, int) or isinstance(unknown, bool)):
        raise ValueError(f"{where}: 'unknown' is {unknown!r}, expected \"error\" or a token id")
    arr = _quantised(source, name, np.dtype(np.int32))
    if arr.shape != (rows["vocab_size"],):
        raise ValueError(
            f"{source.path}: {name!r} has shape {arr.shape}, but {where} says a vocabulary of {rows['vocab_size']}"
        )
    return TokenMap(arr, rows["kept_rows"], trim.as_unknown(unknown))
