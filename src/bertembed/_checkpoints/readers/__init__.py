"""Reading the tensors of a checkpoint, NumPy only, mapping the file instead of copying it.

Formats: safetensors (:class:`SafetensorsFile`), ``torch.save`` zip archives
such as ``pytorch_model.bin`` (:class:`TorchZipFile`, without torch and
without running pickle code), and sharded checkpoints
(``*.index.json``, :class:`ShardedWeights`). Each is a :class:`TensorSource`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import CheckpointError, UnsafeCheckpointError
from .base import TensorInfo, TensorSource
from .files import INDEX, open_file, sniff
from .safetensors import SafetensorsFile
from .sharded import ShardedWeights
from .torch_zip import TorchZipFile

__all__ = [
    "WEIGHTS_NAMES",
    "CheckpointError",
    "SafetensorsFile",
    "ShardedWeights",
    "TensorInfo",
    "TensorSource",
    "TorchZipFile",
    "UnsafeCheckpointError",
    "find_weights",
    "open_weights",
]

#: The weights files of a Hugging Face model directory, in the order they are looked for.
WEIGHTS_NAMES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def open_weights(path: str | os.PathLike[str]) -> TensorSource:
    """The tensors of a checkpoint file, whatever its format.

    Parameters
    ----------
    path : str or os.PathLike
        A safetensors file, a ``torch.save`` zip archive (``.bin``, ``.pt``,
        ``.pth``) or the ``*.index.json`` of a sharded checkpoint. The format
        is decided by the file's first bytes (its name only when they do not
        tell).

    Returns
    -------
    TensorSource
        :class:`SafetensorsFile`, :class:`TorchZipFile` or :class:`ShardedWeights`.

    Raises
    ------
    FileNotFoundError
        `path` does not exist.
    IsADirectoryError
        `path` is a directory (use :func:`find_weights`).
    CheckpointError
        Not a readable checkpoint (a ``ValueError``): malformed, over a size
        or nesting limit, not a regular file, the legacy torch format, or a
        pickle that references more than a state dict needs
        (:class:`UnsafeCheckpointError`, nothing was run).

    Examples
    --------
    >>> w = open_weights("bert/pytorch_model.bin")  # doctest: +SKIP
    >>> w.info("embeddings.word_embeddings.weight")  # doctest: +SKIP
    TensorInfo(dtype='F32', shape=(30522, 768))
    >>> w.array("embeddings.word_embeddings.weight").dtype  # doctest: +SKIP
    dtype('float32')
    """
    p = Path(os.fspath(path)).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{p}: is a directory (find_weights looks for the weights file in one)")
    if sniff(p) == INDEX:
        return ShardedWeights(p)
    return open_file(p)


def find_weights(directory: str | os.PathLike[str]) -> TensorSource:
    """The tensors of a Hugging Face model directory.

    Looks for, in this order, ``model.safetensors``,
    ``model.safetensors.index.json``, ``pytorch_model.bin`` and
    ``pytorch_model.bin.index.json``, and opens the first it finds with
    :func:`open_weights`.

    Raises
    ------
    FileNotFoundError
        `directory` does not exist, or holds none of those files (the message
        lists them).
    NotADirectoryError
        `directory` is a file (use :func:`open_weights`).

    Examples
    --------
    >>> w = find_weights("all-MiniLM-L6-v2/")  # doctest: +SKIP
    >>> w.path.name  # doctest: +SKIP
    'model.safetensors'
    """
    d = Path(os.fspath(directory)).expanduser()
    if not d.exists():
        raise FileNotFoundError(f"{d}: no such directory")
    if not d.is_dir():
        raise NotADirectoryError(f"{d}: not a directory (open_weights reads a weights file)")
    for name in WEIGHTS_NAMES:
        if os.path.lexists(d / name):  # (a FIFO, a directory or a broken link by that name is an error)
            return open_weights(d / name)
    raise FileNotFoundError(f"{d}: no weights file (looked for {', '.join(WEIGHTS_NAMES)})")
