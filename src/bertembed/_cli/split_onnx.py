"""``bertembed split-onnx MODEL.onnx OUT_DIR``: :func:`bertembed.onnx.split_model` as a command."""

from __future__ import annotations

import argparse

from .common import CLIError


def cmd_split_onnx(args: argparse.Namespace) -> int:
    """Split the model, then say what was written and found."""
    try:
        from ..onnx import split_model
    except ImportError as exc:  # pragma: no cover - bertembed.onnx imports nothing heavy
        raise CLIError(str(exc)) from None
    result = split_model(args.model, args.out_dir)
    print(f"wrote {result.encoder} (inputs: {', '.join(result.encoder_inputs)})")
    print(
        f"wrote {result.layer_dir}/config.json and model.safetensors (model_type {result.model_type}, "
        f"positions {result.position_rule}, LayerNorm form {result.layer_norm})"
    )
    print(f"checked: max |layer - graph embeddings| = {result.max_difference:.3g} on probe batches")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``split-onnx`` on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "split-onnx",
        help="split a whole-model ONNX file into a bertembed layer and an encoder.onnx (needs onnx)",
        description="Find the embedding subgraph of a whole-model ONNX file (lookups, sum, LayerNorm), "
        "write it as an embedding layer (config.json + model.safetensors, loaded by "
        "BertEmbeddings.from_pretrained(OUT_DIR)) and the rest as OUT_DIR/encoder.onnx, which takes "
        "inputs_embeds instead of the ids. The layer is checked against the graph before anything is "
        "written; a graph it cannot reproduce is refused with the node and the reason.",
    )
    p.add_argument("model", metavar="MODEL.onnx", help="the whole model (external data is read from beside it)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where to write encoder.onnx, config.json, model.safetensors")
    p.set_defaults(func=cmd_split_onnx)
