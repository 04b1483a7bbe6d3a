"""Sharded checkpoints: ``model.safetensors.index.json`` and ``pytorch_model.bin.index.json``.

The index is a JSON object whose ``"weight_map"`` maps each tensor name to
the file (a shard, next to the index) that holds it. A shard is opened only
when one of its tensors is asked for, so loading the embedding tables of a
large model maps one shard and never reads the others.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from ..errors import CheckpointError, short
from .base import TensorInfo, TensorSource, no_tensor
from .files import open_file
from .reading import MAX_INDEX_BYTES, MAX_INDEX_VALUES, parse_json, read_capped

#: Longest shard file name an index may give (real ones are ~40 characters).
MAX_SHARD_NAME = 1024


class ShardedWeights:
    """The tensors of a sharded checkpoint, opening each shard on first use.

    A :class:`~bertembed._checkpoints.readers.base.TensorSource` whose :attr:`path` is the
    index. Each shard is read by :func:`~bertembed._checkpoints.readers.files.open_file`
    (safetensors or a ``torch.save`` archive, decided by content).

    Parameters
    ----------
    path : str or os.PathLike
        The ``*.index.json`` file.

    Raises
    ------
    FileNotFoundError
        The index does not exist.
    ValueError
        The index is not a JSON object with a ``"weight_map"`` of tensor names
        to shard file names (relative, inside the index's directory: no
        absolute path, no ``..``). Shards are checked when they are opened.

    Examples
    --------
    >>> w = ShardedWeights("model.safetensors.index.json")  # doctest: +SKIP
    >>> tok = w.array("embeddings.word_embeddings.weight")  # doctest: +SKIP
    >>> [p.name for p in w.files()]  # doctest: +SKIP
    ['model-00001-of-00002.safetensors']
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.directory = self.path.parent
        self._shards: dict[str, TensorSource] = {}
        raw = read_capped(self.path, MAX_INDEX_BYTES, "MAX_INDEX_BYTES", "index file")
        index = parse_json(
            raw,
            self.path,
            max_bytes=MAX_INDEX_BYTES,
            bytes_name="MAX_INDEX_BYTES",
            max_values=MAX_INDEX_VALUES,
            values_name="MAX_INDEX_VALUES",
            per="; an index holds one per tensor",
        )
        if not isinstance(index, dict):
            raise self._error(f"expected a JSON object, got a {type(index).__name__}")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise self._error(
                'no "weight_map" object (tensor name -> shard file): not the index of a sharded checkpoint'
            )
        checked: dict[str, str] = {}  # each shard name once (an index names a few shards many times), and
        for name, file in weight_map.items():  # one str for each: the others are freed as they are replaced
            shard = checked.get(file) if type(file) is str else None
            if shard is None:
                shard = checked[file] = self._shard_name(name, file)
            weight_map[name] = shard
        self._where: dict[str, str] = weight_map

    def __repr__(self) -> str:
        shards = len(set(self._where.values()))
        return f"ShardedWeights({str(self.path)!r}, {len(self._where)} tensors, {shards} shards)"

    def _error(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {message}")

    def _shard_name(self, tensor: str, file: Any) -> str:
        if not isinstance(file, str) or not file or "\0" in file or len(file) > MAX_SHARD_NAME:
            raise self._error(f"weight_map[{short(tensor)}] must be a shard file name, got {short(file)}")
        posix, windows = PurePosixPath(file), PureWindowsPath(file)
        if posix.is_absolute() or windows.drive or windows.root or ".." in windows.parts:
            raise self._error(
                f"weight_map[{short(tensor)}] is {short(file)}: a shard must be a relative path inside "
                f"{self.directory} (no absolute path, no '..')"
            )
        return file

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def keys(self) -> list[str]:
        """Tensor names, in the index's order (no shard is opened)."""
        return list(self._where)

    def files(self) -> list[Path]:
        """The shards opened so far, in the order they were opened (not the index)."""
        return [shard.path for shard in self._shards.values()]

    def _shard(self, name: str) -> TensorSource:
        try:
            file = self._where[name]
        except KeyError:
            raise no_tensor(self.path, name) from None
        shard = self._shards.get(file)
        if shard is None:
            where = f"{self.path}: tensor {short(name)} is in shard {short(file)}"
            try:
                shard = open_file(self.directory / file)
            except FileNotFoundError:
                raise FileNotFoundError(f"{where}, and {self.directory / file} does not exist") from None
            except IsADirectoryError:
                raise IsADirectoryError(f"{where}, and {self.directory / file} is a directory") from None
            except ValueError as exc:
                raise type(exc)(f"{where}, which cannot be read: {exc}") from exc
            except OSError as exc:
                raise CheckpointError(f"{where}, which cannot be opened: {exc.strerror or type(exc).__name__}") from exc
            self._shards[file] = shard
        if name not in shard:
            raise KeyError(
                f"{self.path}: the index puts tensor {short(name)} in {short(file)}, which has no such tensor"
            )
        return shard

    def info(self, name: str) -> TensorInfo:
        """The dtype and shape of tensor `name` (opens its shard).

        Raises
        ------
        KeyError
            The index has no tensor `name`, or its shard does not hold it.
        FileNotFoundError, ValueError
            Its shard is missing or unreadable (the message names the index,
            the tensor and the shard).
        """
        return self._shard(name).info(name)

    def array(self, name: str) -> np.ndarray:
        """Tensor `name`, read from its shard (see :meth:`TensorSource.array`).

        Raises
        ------
        KeyError, FileNotFoundError, ValueError
            As :meth:`info`.
        TypeError
            The tensor is not F32, F64, F16 or BF16 (the message names the shard).
        """
        return self._shard(name).array(name)
