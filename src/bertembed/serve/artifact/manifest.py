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


def new_service_config(
    *,
    name: str,
    model_type: str | None,
    source: str | os.PathLike[str],
    sentence: dict[str, Any],
    dimension: int,
    matryoshka: Any,
    pad_id: int,
    pad_token: str,
    input_width: int,
    opset: int,
    external: bool,
    optimizer: dict[str, Any],
    built_with: dict[str, str],
    **encoder: Any,
) -> dict[str, Any]:
    """The manifest both builds write, before its ``embeddings`` entry (:func:`.layer.save_layer` adds it).

    Parameters
    ----------
    sentence : dict
        The model's sentence-transformers settings (``SentenceConfig.to_json()``).
    input_width : int
        The width of the embeddings the encoder takes: the layer's (ELECTRA's
        ``embedding_size``), not always ``hidden_size``.
    external : bool
        Whether the encoder's weights are in ``encoder.onnx.data``.
    **encoder
        More facts about the encoder (its checks' figures, the split's findings).
    """
    settings = {k: v for k, v in sentence.items() if k != "transformer_dir"}
    return {
        "format": SERVICE_FORMAT,
        "name": name,
        "model_type": model_type,
        "matryoshka_dimensions": sorted(set(matryoshka), reverse=True),
        "source": str(Path(source).resolve()),
        "sentence": {**settings, "tokenizer_dir": TOKENIZER_DIR, "dimension": dimension},
        "pad_token_id": pad_id,
        "pad_token": pad_token,
        "encoder": {
            "file": ENCODER_FILE,
            "inputs": list(ENCODER_INPUTS),
            "input_width": input_width,
            "output": ENCODER_OUTPUT,
            "opset": opset,
            "external_data": ENCODER_FILE + ".data" if external else None,
            "optimizer": optimizer,
            **encoder,
        },
        "built_with": built_with,
    }


def write_service_config(out_dir: str | os.PathLike[str], service: dict[str, Any]) -> Path:
    """Write ``service.json`` (through a temporary file, so a reader never sees half of it); return its path."""
    path = Path(out_dir) / SERVICE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(service, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
