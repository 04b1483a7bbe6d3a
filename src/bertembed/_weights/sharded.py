"""Sharded checkpoints: ``model.safetensors.index.json`` and ``pytorch_model.bin.index.json``.

The index is a JSON object whose ``"weight_map"`` maps each tensor name to
the file (a shard, next to the index) that holds it. A shard is opened only
when one of its tensors is asked for, so loading the embedding tables of a
large model maps one shard and never reads the others.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from .base import TensorInfo, TensorSource, no_tensor
from .files import open_file


class ShardedWeights:
    """The tensors of a sharded checkpoint, opening each shard on first use.

    A :class:`~bertembed._weights.base.TensorSource` whose :attr:`path` is the
    index. Each shard is read by :func:`~bertembed._weights.files.open_file`
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
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path}: no such file") from None
        try:
            index = json.loads(raw.decode("utf-8"), object_pairs_hook=self._no_duplicates)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._error(f"not valid JSON ({exc})") from None
        if not isinstance(index, dict):
            raise self._error(f"expected a JSON object, got a {type(index).__name__}")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise self._error(
                'no "weight_map" object (tensor name -> shard file): not the index of a sharded checkpoint'
            )
        self._where = {name: self._shard_name(name, file) for name, file in weight_map.items()}

    def __repr__(self) -> str:
        shards = len(set(self._where.values()))
        return f"ShardedWeights({str(self.path)!r}, {len(self._where)} tensors, {shards} shards)"

    def _error(self, message: str) -> ValueError:
        return ValueError(f"{self.path}: {message}")

    def _no_duplicates(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise self._error(f"the key {key!r} appears twice in one object")
            out[key] = value
        return out

    def _shard_name(self, tensor: str, file: Any) -> str:
        if not isinstance(file, str) or not file or "\0" in file:
            raise self._error(f"weight_map[{tensor!r}] must be a shard file name, got {file!r}")
        posix, windows = PurePosixPath(file), PureWindowsPath(file)
        if posix.is_absolute() or windows.drive or windows.root or ".." in windows.parts:
            raise self._error(
                f"weight_map[{tensor!r}] is {file!r}: a shard must be a relative path inside "
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
            try:
                shard = open_file(self.directory / file)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{self.path}: tensor {name!r} is in shard {file!r}, and "
                    f"{self.directory / file} does not exist"
                ) from None
            except ValueError as exc:
                raise type(exc)(
                    f"{self.path}: tensor {name!r} is in shard {file!r}, which cannot be read: {exc}"
                ) from exc
            self._shards[file] = shard
        if name not in shard:
            raise KeyError(f"{self.path}: the index puts tensor {name!r} in {file!r}, which has no such tensor")
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
