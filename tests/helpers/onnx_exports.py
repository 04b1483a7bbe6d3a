"""Whole-model ONNX files of small random transformers models, exported as users export them.

:func:`export` builds the model of :mod:`hf_families` (random N(0, 1) weights)
and writes it with one of :data:`EXPORTERS`:

- ``classic14``, ``classic17``: ``torch.onnx.export(..., dynamo=False)`` at
  opset 14 (LayerNorm decomposed) and 17 (``LayerNormalization``);
- ``dynamo``: ``torch.onnx.export(..., dynamo=True)`` (onnxscript);
- ``ort``: the classic opset-17 export of the model with eager attention, then
  ONNX Runtime's transformers optimizer (``model_type="bert"``), which fuses
  what it recognises (EmbedLayerNormalization, SkipLayerNormalization,
  Attention);
- ``int8``: the ``classic17`` file through ONNX Runtime's dynamic quantisation
  (``quantize_dynamic``: int8 weights for MatMul and Gather, so the tables
  are looked up quantised and dequantised after the lookup).

The graph takes ``input_ids``, ``attention_mask`` and, for a family whose
forward takes them, ``token_type_ids``; it returns ``last_hidden_state``.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from helpers.hf_families import VARIANTS, batches, make_checkpoint

EXPORTERS = ("classic14", "classic17", "dynamo", "ort", "int8")
FAMILIES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "electra",
    "albert",
    "deberta-v2",
    "deberta-v2-v3style",
    "modernbert",
    "mpnet",
)


def input_names(model: torch.nn.Module) -> list[str]:
    params = inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in params and getattr(model.config, "type_vocab_size", 0):
        names.append("token_type_ids")
    return names


class _Whole(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, input_ids, attention_mask, token_type_ids=None):  # type: ignore[no-untyped-def]
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self.model(**kwargs).last_hidden_state


def quantize(path: Path, directory: Path) -> Path:
    """``directory/model.onnx``: `path` dynamically quantised by ONNX Runtime."""
    import logging

    from onnxruntime.quantization import quantize_dynamic

    directory.mkdir(parents=True, exist_ok=True)
    logging.getLogger().setLevel(logging.ERROR)  # the advice to pre-process first
    quantize_dynamic(str(path), str(directory / "model.onnx"))
    return directory / "model.onnx"


def export(model_type: str, exporter: str, directory: Path) -> tuple[Path, dict[str, Any]]:
    """Write ``directory/model.onnx`` of a small random `model_type` (or variant of
    ``hf_families.VARIANTS``); return it and the model's config."""
    if exporter == "int8":
        path, config = export(model_type, "classic17", directory / "classic17")
        return quantize(path, directory), config
    directory.mkdir(parents=True, exist_ok=True)
    model_type, overrides = VARIANTS[model_type]
    model = make_checkpoint(model_type, directory / "checkpoint", **overrides)
    if exporter == "ort":
        model = transformers.AutoModel.from_pretrained(directory / "checkpoint", attn_implementation="eager").eval()
    with torch.no_grad():  # N(0, 1) matrices blow activations up layer after layer; keep them near real scales
        for param in model.parameters():
            if param.ndim == 2:
                param.mul_(0.2)
    names = input_names(model)
    whole = _Whole(model, names)
    example = (
        torch.ones(2, 7, dtype=torch.long) * 7,
        torch.ones(2, 7, dtype=torch.long),
        torch.zeros(2, 7, dtype=torch.long),
    )[: len(names)]
    path = directory / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence", max=4096)}
            torch.onnx.export(
                whole,
                example,
                str(path),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_shapes={n: dims for n in names},
                dynamo=True,
                optimize=True,
            )
        else:
            opset = 14 if exporter == "classic14" else 17
            axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
            torch.onnx.export(
                whole,
                example,
                str(path),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=opset,
                dynamo=False,
            )
    if exporter == "ort":
        from onnxruntime.transformers.optimizer import optimize_model

        config = model.config
        hidden = getattr(config, "hidden_size", None) or config.dim
        heads = getattr(config, "num_attention_heads", None) or config.n_heads
        optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden).save_model_to_file(str(path))
    return path, model.config.to_dict()


def fused_ops(path: Path) -> list[str]:
    """The ONNX Runtime contrib ops in the file (what the optimizer fused)."""
    import onnx

    return sorted(
        {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node if n.domain == "com.microsoft"}
    )


def padded_batches(config: dict[str, Any]) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """Right- and left-padded batches (and one without padding) of `config`'s ids."""
    return batches(config)


def compare(whole_path: Path, split_dir: Path, config: dict[str, Any]) -> float:
    """The largest difference between the whole model and layer + encoder.onnx, over the batches,
    relative to the largest value of the output (at least 1)."""
    import onnxruntime as ort

    from bertembed import BertEmbeddings

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    whole = ort.InferenceSession(str(whole_path), opts, providers=["CPUExecutionProvider"])
    encoder = ort.InferenceSession(str(split_dir / "encoder.onnx"), opts, providers=["CPUExecutionProvider"])
    layer = BertEmbeddings.from_pretrained(split_dir)
    whole_names = [i.name for i in whole.get_inputs()]
    worst = 0.0
    for ids, types, mask in padded_batches(config):
        feed = {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(ids) if types is None else types,
        }
        want = whole.run(None, {n: feed[n] for n in whole_names})[0]
        split_types = types if "token_type_ids" in whole_names else None
        feed["inputs_embeds"] = layer(ids, split_types)
        got = encoder.run(None, {i.name: feed[i.name] for i in encoder.get_inputs()})[0]
        scale = max(1.0, float(np.abs(want).max()))
        worst = max(worst, float(np.abs(got - want).max()) / scale)
    return worst
