"""Reading the embedding layer of a Hugging Face checkpoint.

``config.json``'s ``model_type`` selects the family's embedding rule
(:mod:`bertembed._checkpoints.families`: which tables, which position rule, LayerNorm or
not); the tensors come from the weights file (:mod:`bertembed._checkpoints.readers`:
safetensors, sharded, or ``pytorch_model.bin`` read without running pickle
code), memory-mapped read-only. float32, float64, float16 and bfloat16 tables
are views of the file's pages, never copied.

A weights file given without a config (no ``config=`` and no ``config.json``
beside it) is read as BERT (:data:`bertembed._checkpoints.families.BARE_FILE_MODEL_TYPE`),
and only when its tensors carry no prefix or ``bert.`` / ``model.``: a file
from another family must say so through its config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .._core import dtypes, tables
from .._core.positions import NONE, PositionRule
from .._core.tables import Table, Tables, prepare_tables
from . import save
from .families import BARE_FILE_MODEL_TYPE, EmbeddingSpec, bare_file_spec, check_position_table, embedding_spec
from .readers import CheckpointError, TensorSource, find_weights, open_weights
from .readers.reading import MAX_CONFIG_BYTES, MAX_CONFIG_VALUES, parse_json, read_capped
from .specials import config_special_ids

CONFIG_NAME = "config.json"


class Checkpoint(NamedTuple):
    """An embedding layer read from a checkpoint, before it becomes a layer."""

    tables: Tables
    rule: PositionRule
    zero_masked_rows: bool
    model_type: str | None
    path: str  # absolute; what pickling stores
    dtype: str | None = None  # a saved layer's result dtype
    special_ids: tuple[int, ...] = ()  # the config's special tokens (kept by trimming)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        raw = read_capped(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES", "config file")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no such file (a model directory needs config.json: it tells which model "
            "family, hence which embedding rule, the weights are for)"
        ) from None
    config = parse_json(
        raw,
        path,
        max_bytes=MAX_CONFIG_BYTES,
        bytes_name="MAX_CONFIG_BYTES",
        max_values=MAX_CONFIG_VALUES,
        values_name="MAX_CONFIG_VALUES",
    )
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got a {type(config).__name__}")
    return config


def _config(config: Any, weights_path: Path) -> tuple[dict[str, Any] | None, str]:
    """The config to use and where it came from (None: a bare weights file)."""
    if config is None:
        beside = (weights_path if weights_path.is_dir() else weights_path.parent) / CONFIG_NAME
        if weights_path.is_dir() or beside.exists():
            return _read_config(beside), str(beside)
        return None, str(weights_path)
    if isinstance(config, Mapping):
        return dict(config), "config"
    if isinstance(config, (str, os.PathLike)):
        path = Path(os.fspath(config)).expanduser()
        return _read_config(path), str(path)
    raise TypeError(f"config must be a dict or the path of a config.json, got {type(config).__name__}")


def _weights(path: Path) -> TensorSource:
    if path.is_dir():
        return find_weights(path)
    if path.exists():
        return open_weights(path)
    raise FileNotFoundError(f"{path}: no such file or directory")


def _prefix(spec: EmbeddingSpec, source: TensorSource, bare: bool, config_at: str | None = None) -> str:
    """The prefix of the embedding tensors' names (``""``, ``"bert."``, ...).

    Any of the family's embedding tensors identifies it, so that a checkpoint
    missing its token table is reported as missing ``<prefix><token name>``.
    `config_at` (where the config came from) is named when the config is
    what asked for the tensors.
    """
    suffixes = [
        spec.token,
        *(n for n in (spec.position, spec.segment, spec.task) if n is not None),
        *(spec.ln_weight or ()),
        *(spec.ln_bias or ()),
    ]
    found = sorted(
        {
            name[: -len(suffix)]
            for name in source.keys()
            for suffix in suffixes
            if name.endswith(suffix) and (name == suffix or name[: -len(suffix)].endswith("."))
        }
    )
    for prefix in spec.prefixes:
        if prefix in found:
            return prefix
    if not found:
        looked = ", ".join(repr(p + spec.token) for p in spec.prefixes)
        raise KeyError(
            f"{source.path}: no tensor {looked} (nor any '<prefix>.{spec.token}'): not a {spec.model_type} "
            f"checkpoint{_as_said(spec, config_at)}?"
        )
    if bare:
        raise CheckpointError(
            f"{source.path}: the embedding tensors are under {found[0]!r} and there is no config.json, "
            f"so the model family is unknown (a weights file without one is read as "
            f"{BARE_FILE_MODEL_TYPE!r} only with the prefixes {', '.join(repr(p) for p in spec.prefixes)}); "
            "pass config= (the model's config.json, or a dict with its model_type)"
        )
    if len(found) > 1:
        names = ", ".join(repr(p) for p in found)
        raise CheckpointError(
            f"{source.path}: embedding tensors under several prefixes ({names}); cannot tell which model to load"
        )
    return found[0]


def _array(source: TensorSource, name: str) -> Table:
    """A table exactly as stored: a read-only map of the file when it can be."""
    arr = source.array(name)
    try:
        if source.info(name).dtype == dtypes.BFLOAT16.safetensors:
            return tables.bits_as_bfloat16(arr, name)  # the raw bits, tagged: no ml_dtypes import
        return tables.as_table(name, arr)
    except ValueError as exc:  # (a shape that is not a table's)
        raise CheckpointError(f"{source.path}: {exc}") from None


def _optional(source: TensorSource, prefix: str, names: tuple[str, ...] | None) -> str | None:
    for name in names or ():
        if prefix + name in source:
            return prefix + name
    return None


def _as_said(spec: EmbeddingSpec, config_at: str | None) -> str:
    return "" if config_at is None else f", as {config_at} says (model_type {spec.model_type!r})"


def _required(
    source: TensorSource, prefix: str, names: tuple[str, ...], spec: EmbeddingSpec, config_at: str | None = None
) -> str:
    name = _optional(source, prefix, names)
    if name is None:
        also = "".join(f" or {prefix + n!r}" for n in names[1:])
        said = "" if config_at is None else f" configured by {config_at}"
        raise KeyError(
            f"{source.path}: no tensor {prefix + names[0]!r}{also} (a {spec.model_type} checkpoint{said} has it)"
        )
    return name


def _vector(source: TensorSource, name: str) -> np.ndarray:
    """A LayerNorm parameter as float values NumPy reads (bfloat16 bits widened: small)."""
    arr = source.array(name)
    if source.info(name).dtype == dtypes.BFLOAT16.safetensors:
        return tables.to_float32(tables.bits_as_bfloat16(arr))
    return arr


#: Files of a model directory that hold no weights: naming one is a mistake we can explain.
_NOT_WEIGHTS = {
    "tokenizer.json": "a tokenizer file",
    "tokenizer_config.json": "a tokenizer's settings",
    "vocab.txt": "a tokenizer's vocabulary",
    "special_tokens_map.json": "a tokenizer's settings",
    "sentencepiece.bpe.model": "a tokenizer model",
    "spm.model": "a tokenizer model",
    "config.json": "the model's config",
    "modules.json": "a sentence-transformers module list",
}


def _not_weights(given: str | os.PathLike[str], p: Path) -> None:
    """A clear error for a path that cannot be a checkpoint: a tokenizer file, a hub id."""
    what = _NOT_WEIGHTS.get(p.name)
    if what is not None and p.is_file():
        raise ValueError(
            f"{p}: this is {what}, not weights; give the model's directory "
            f"({p.parent}) or its weights file (model.safetensors, pytorch_model.bin)"
        )
    if p.exists():
        return
    text = os.fspath(given)
    parts = text.split("/")
    if (
        isinstance(given, str)
        and len(parts) == 2
        and all(parts)
        and not text.startswith((".", "~"))
        and "\\" not in text
    ):
        raise FileNotFoundError(
            f"{text}: no such file or directory. It looks like a Hugging Face Hub id, and "
            f"bertembed does not download models: get a local copy first, e.g. "
            f"`hf download {text} --local-dir ./model` or "
            f"huggingface_hub.snapshot_download({text!r}), and give that directory"
        )
    raise FileNotFoundError(f"{p}: no such file or directory")


def read(path: str | os.PathLike[str], *, config: Any = None, table_dtype: str | None = None) -> Checkpoint:
    """Read the embedding layer of the checkpoint at `path`.

    See :meth:`bertembed.BertEmbeddings.from_pretrained` for the parameters,
    what is read and the errors.
    """
    p = Path(os.fspath(path)).expanduser()
    _not_weights(path, p)
    source = _weights(p)
    settings, where = _config(config, p)
    if settings is not None and save.is_saved(settings):  # written by save_pretrained
        got = save.read(source, settings, where, table_dtype)
        return Checkpoint(
            got.tables,
            got.rule,
            got.zero_masked_rows,
            got.model_type,
            str(p.resolve()),
            got.dtype,
            got.special_ids,
        )
    spec = bare_file_spec() if settings is None else embedding_spec(settings, source=where)
    config_at = None if settings is None else where
    prefix = _prefix(spec, source, bare=settings is None, config_at=config_at)

    def required(names: tuple[str, ...]) -> str:
        return _required(source, prefix, names, spec, config_at)

    tok = _array(source, required((spec.token,)))
    pos = None if spec.position is None else _array(source, required((spec.position,)))
    seg = None
    if spec.segment is not None:
        if settings is None:  # a bare file: BERT's token-type table if it has one
            name = _optional(source, prefix, (spec.segment,))
        else:
            name = required((spec.segment,))
        seg = None if name is None else _array(source, name)
    task = None if spec.task is None else _array(source, required((spec.task,)))
    ln_w = ln_b = None
    if spec.ln_weight is not None:
        ln_w = _vector(source, required(spec.ln_weight))
        if spec.ln_bias is not None:
            ln_b = _vector(source, required(spec.ln_bias))
    if spec.width is not None and tok.hidden != spec.width:
        raise CheckpointError(
            f"{source.path}: {prefix + spec.token!r} has shape {tok.data.shape}, but {where} says the "
            f"embeddings are {spec.width} wide"
        )
    try:
        tables = prepare_tables(
            tok, pos, seg, ln_w, ln_b, spec.ln_eps if ln_w is not None else 1e-12, task, table_dtype
        )
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{source.path}: {exc}") from exc
    if tables.pos is not None and settings is not None:
        check_position_table(spec, tables.pos.rows, prefix + (spec.position or ""), settings, where)
    if spec.position_rule == "padding":
        rule = PositionRule("padding", padding_idx=spec.padding_idx)
    elif spec.position_rule == "absolute":
        rule = PositionRule("absolute", offset=spec.position_offset)
    else:
        rule = NONE
    specials = () if settings is None else config_special_ids(settings, tables.tok.rows)
    return Checkpoint(tables, rule, spec.zero_masked_rows, spec.model_type, str(p.resolve()), special_ids=specials)
