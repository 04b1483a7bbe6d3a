"""ONNX Runtime's transformer fusions applied to the service's encoder (build time).

``encoder.onnx`` takes the embedding layer's output (``embeddings``) and the
attention mask. Before it is saved, both build paths (``export_encoder.py``
and the torch-free ``from_onnx.py``) run it through
``onnxruntime.transformers.optimizer`` with ``model_type="bert"``, which
replaces each layer's subgraphs by ONNX Runtime's fused CPU kernels:
``Attention`` (the Q, K and V projections, the scaled and masked softmax and
the weighted sum in one node), ``SkipLayerNormalization`` (residual add +
LayerNorm) and ``BiasGelu`` (bias add + GELU).

The optimizer's attention pattern expects the scores divided by sqrt(head
size) (``Div``), as BERT's reference code and older exporters write it;
transformers 5 multiplies by the reciprocal (``Mul``). :func:`scale_as_div`
rewrites that one node first (the result differs by float rounding only).
Which fusions were made is returned and written into ``service.json``; a graph
in which the optimizer finds no attention block still works, unfused.

Needs onnx and onnxruntime (its ``transformers`` subpackage ships with it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

#: Above this many bytes of weights, ``encoder.onnx`` keeps them in ``encoder.onnx.data`` (protobuf's 2 GiB limit).
EXTERNAL_DATA_BYTES = 1 << 30
#: Fused operators counted in service.json.
FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu", "FastGelu", "Gelu")


def _constant(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                return numpy_helper.to_array(attr.t)
    return None


def scale_as_div(model: onnx.ModelProto) -> int:
    """Rewrite ``Softmax(Add(Mul(MatMul, c), mask))`` as ``Softmax(Add(Div(MatMul, 1/c), mask))``, in place.

    Returns
    -------
    int
        How many attention scalings were rewritten.
    """
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    rewritten = 0
    for node in graph.node:
        if node.op_type != "Softmax":
            continue
        add = producer.get(node.input[0])
        if add is None or add.op_type != "Add":
            continue
        for name in add.input:
            mul = producer.get(name)
            if mul is None or mul.op_type != "Mul" or len(mul.input) != 2:
                continue
            scores = producer.get(mul.input[0])
            scale = _constant(graph, mul.input[1])
            if scores is None or scores.op_type != "MatMul" or scale is None or scale.size != 1:
                continue
            divisor = (1.0 / scale.astype(np.float64)).astype(scale.dtype)
            divisor_name = f"{mul.output[0]}_divisor"
            graph.initializer.append(numpy_helper.from_array(divisor, divisor_name))
            mul.op_type = "Div"
            mul.input[1] = divisor_name
            rewritten += 1
    return rewritten


def drop_unused(model: onnx.ModelProto) -> int:
    """Remove initializers and Constant nodes that no node reads (ONNX Runtime warns about each), in place."""
    graph = model.graph
    removed = 0
    while True:
        used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if n.op_type == "Constant" and not any(o in used for o in n.output)]
        unused = [i for i in graph.initializer if i.name not in used]
        if not dead and not unused:
            return removed
        for node in dead:
            graph.node.remove(node)
        for init in unused:
            graph.initializer.remove(init)
        removed += len(dead) + len(unused)


def optimize_encoder(
    model: onnx.ModelProto, *, num_heads: int, hidden_size: int
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The encoder with ONNX Runtime's BERT fusions, and a summary of what was fused.

    Parameters
    ----------
    model : onnx.ModelProto
        An encoder taking ``(embeddings, attention_mask)``; not modified.
    num_heads, hidden_size : int
        The model's ``num_attention_heads`` and ``hidden_size`` (config.json).

    Returns
    -------
    onnx.ModelProto
        The optimized graph (ONNX Runtime's own graph optimisations are left
        to the session, at its ``graph_optimization_level``).
    dict
        ``{"fused": {op: count, ...}, "scale_rewrites": n}``.
    """
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    model = onnx.ModelProto.FromString(model.SerializeToString())
    rewrites = scale_as_div(model)
    options = FusionOptions("bert")
    # The optimizer's modules log under their own names (fusion_*, onnx_model, ...), warning about
    # every pattern a family's graph does not match: quiet below ERROR while it runs.
    disabled = logging.root.manager.disable
    logging.disable(max(disabled, logging.WARNING))
    try:
        optimized = optimizer.optimize_model(
            model,
            model_type="bert",
            num_heads=num_heads,
            hidden_size=hidden_size,
            optimization_options=options,
            opt_level=0,
            use_gpu=False,
        )
    finally:
        logging.disable(disabled)
    drop_unused(optimized.model)
    stats = optimized.get_fused_operator_statistics()
    fused = {op: int(stats.get(op, 0)) for op in FUSED_OPS if stats.get(op, 0)}
    return optimized.model, {"fused": fused, "scale_rewrites": rewrites}


def save_encoder(model: onnx.ModelProto, path: Path) -> bool:
    """Save ``encoder.onnx``; weights over 1 GiB go to ``encoder.onnx.data`` beside it. Returns whether they did."""
    big = sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer) > EXTERNAL_DATA_BYTES
    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)
    if big:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)
    else:
        onnx.save_model(model, str(path))
    return big
