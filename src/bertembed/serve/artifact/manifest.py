"""An artifact's layout and manifest, ``service.json``: what ``bertembed export`` writes and ``bertembed serve`` reads.

An artifact directory holds what a worker uses and nothing else::

    service.json            this manifest: the pipeline's settings, the files below, how they were built
    encoder.onnx[.data]     the transformer layers (fused) and the pooling: embeddings + mask -> vectors
    embeddings/             the embedding layer (config.json, model.safetensors), mapped by every worker
    tokenizer/              tokenizer.json (and the tokenizer's own settings)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The manifest's name inside an artifact directory.
SERVICE_FILE = "service.json"
#: 3: the layer is always saved in ``embeddings/``, the tokenizer in ``tokenizer/``; the encoder
#: returns the pooled vectors (normalisation is done by the pipeline).
SERVICE_FORMAT = 3
#: The encoder's file, its inputs and its output.
ENCODER_FILE = "encoder.onnx"
ENCODER_INPUTS = ("embeddings", "attention_mask")
ENCODER_OUTPUT = "sentence_embedding"
#: Where the embedding layer and the tokenizer go (relative to the artifact).
EMBEDDINGS_DIR = "embeddings"
TOKENIZER_DIR = "tokenizer"


def read_service_config(service_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``service.json`` of an artifact, checked.

    Parameters
    ----------
    service_dir : str or os.PathLike
        The artifact directory (``bertembed export``'s OUT_DIR).

    Returns
    -------
    dict
        Its content, with ``tokenizer_dir``, the encoder's and the layer's paths made absolute.

    Raises
    ------
    FileNotFoundError
        No ``service.json`` there.
    ValueError
        It is not valid JSON, or of another format.

    Examples
    --------
    >>> cfg = read_service_config("out/")  # doctest: +SKIP
    >>> cfg["sentence"]["max_seq_length"], cfg["sentence"]["pooling"]  # doctest: +SKIP
    (256, ['mean'])
    """
    root = Path(service_dir)
    path = root / SERVICE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; build the artifact with: bertembed export MODEL_DIR {root}")
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != SERVICE_FORMAT:
        found = config.get("format") if isinstance(config, dict) else None
        raise ValueError(
            f"{path}: format {found!r}, expected {SERVICE_FORMAT}; build the artifact again with bertembed export"
        )
    config["sentence"]["tokenizer_dir"] = str(root / config["sentence"]["tokenizer_dir"])
    config["encoder"]["path"] = str(root / config["encoder"]["file"])
    config["embeddings"]["path"] = str(root / config["embeddings"]["dir"])
    return config


def write_service_config(out_dir: str | os.PathLike[str], service: dict[str, Any]) -> Path:
    """Write ``service.json`` (through a temporary file, so a reader never sees half of it); return its path."""
    path = Path(out_dir) / SERVICE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(service, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
