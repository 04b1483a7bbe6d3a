"""The encoder: the graph after the embedding LayerNorm, taking ``inputs_embeds`` instead of the ids.

The model is changed in place: the nodes that only served the embeddings are
dropped, every later ``Shape`` of the ids (or token types) reads the shape of
``inputs_embeds`` instead, EmbedLayerNormalization's ``mask_index`` is rebuilt
from the mask where later nodes read it, and initializers nothing reads any
more are deleted. Any other later read of the ids is refused.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph import Graph, describe, node_inputs
from .layernorm import LayerNorm
from .lookups import Sum
from .rules import Roles

EMBEDS = "inputs_embeds"


def _unique(graph: Graph, base: str) -> str:
    taken = set(graph.producer) | set(graph.initializers) | set(graph.inputs)
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def _mask_index(graph: Graph, ln: LayerNorm, axes_name: str) -> list[onnx.NodeProto]:
    """Nodes recomputing EmbedLayerNormalization's mask_index (the number of 1s per row of the mask)."""
    node = ln.node
    mask = node.input[7] if len(node.input) > 7 else ""
    mask_type = next((a.i for a in node.attribute if a.name == "mask_index_type"), 1)
    if not mask or mask_type != 1:
        raise ValueError(
            f"{describe(node)}: its mask_index output is read later, and it has no mask input "
            f"or a mask_index_type other than 1 ({mask_type}); it cannot be rebuilt"
        )
    cast = _unique(graph, f"{node.output[1]}_mask_int32")
    return [
        helper.make_node("Cast", [mask], [cast], to=onnx.TensorProto.INT32, name=cast),
        helper.make_node(
            "ReduceSum", [cast, axes_name], [node.output[1]], keepdims=0, name=f"{node.output[1]}_rebuilt"
        ),
    ]


def _shape_dims(node: onnx.NodeProto, rank: int) -> tuple[int, int]:
    start = next((a.i for a in node.attribute if a.name == "start"), 0)
    end = next((a.i for a in node.attribute if a.name == "end"), rank)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    return start, end


def _full_shape(graph: Graph, found: Sum, roles: Roles) -> set[str]:
    """The token lookup's output and the partial sums holding it (all of shape (B, S, H))."""
    if roles.token.indices is None or roles.token.node.op_type not in ("Gather", "DequantizeLinear"):
        return set()
    adds = {id(n) for n in found.nodes if n.op_type == "Add"}
    names = {roles.token.node.output[0]}
    frontier = list(names)
    while frontier:
        name = frontier.pop()
        for user in graph.users(name):
            if id(user) in adds and user.output[0] not in names:
                names.add(user.output[0])
                frontier.append(user.output[0])
    return names


def cut(graph: Graph, ln: LayerNorm, found: Sum, roles: Roles) -> onnx.ModelProto:
    """Turn `graph.model` into the encoder (in place) and return it."""
    model = graph.model
    g = model.graph
    y = ln.output
    if EMBEDS in graph.producer or EMBEDS in graph.inputs or EMBEDS in graph.initializers:
        raise ValueError(f"the graph already has a tensor named {EMBEDS!r}")
    for name in ln.unused:
        if graph.users(name) or name in graph.outputs:
            raise ValueError(
                f"{describe(ln.node)}: its output {name!r} (not the normalised embeddings) is read "
                "later, which the split cannot keep"
            )
    stop = {y}
    extra: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    if ln.kind == "EmbedLayerNormalization" and len(ln.node.output) > 1 and ln.node.output[1]:
        mask_index = ln.node.output[1]
        if graph.users(mask_index) or mask_index in graph.outputs:
            axes = _unique(graph, "mask_index_axes")
            new_inits.append(numpy_helper.from_array(np.array([1], np.int64), axes))
            extra = _mask_index(graph, ln, axes)
            stop.add(mask_index)
    targets = list(graph.outputs) + [n for node in extra for n in node.input if n]
    kept = graph.needed(targets, stop=stop)

    removed = {roles.ids_input} | ({roles.segment_input} if roles.segment_input else set())
    embedding = {id(n) for n in (*ln.nodes, *found.nodes)}
    full_shape = _full_shape(graph, found, roles)
    internal = {o for n in (*ln.nodes, *found.nodes) for o in n.output if o} - stop
    for node in kept:
        if id(node) in embedding:
            continue
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx") and node.input[0] in full_shape:
            node.input[0] = EMBEDS  # the same shape as the sum of lookups
            continue
        for name in node_inputs(node):
            if name in internal:
                raise ValueError(
                    f"{describe(node)} reads {name!r}, a tensor inside the embedding subgraph "
                    "(before the LayerNorm output), which the split cannot keep"
                )
    kept = [n for n in kept if id(n) not in embedding]

    ids_rank = 2
    shape_nodes: list[tuple[onnx.NodeProto, list[onnx.NodeProto]]] = []
    for node in kept:
        reads = [n for n in node_inputs(node) if n in removed]
        if not reads:
            continue
        if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or list(node.input) != reads[:1]:
            raise ValueError(
                f"{describe(node)} reads {reads[0]!r} after the embeddings, other than by its shape; "
                "the encoder could not run from inputs_embeds"
            )
        start, end = _shape_dims(node, ids_rank)
        if graph.opset >= 15:
            del node.attribute[:]
            node.attribute.extend([helper.make_attribute("start", start), helper.make_attribute("end", end)])
            node.input[0] = EMBEDS
        else:
            full = _unique(graph, f"{node.output[0]}_embeds_shape")
            consts = []
            for what, value in (("starts", start), ("ends", end), ("axes", 0)):
                cname = _unique(graph, f"{node.output[0]}_{what}")
                new_inits.append(numpy_helper.from_array(np.array([value], np.int64), cname))
                consts.append(cname)
            out = node.output[0]
            repl = [
                helper.make_node("Shape", [EMBEDS], [full], name=full),
                helper.make_node("Slice", [full, *consts], [out], name=f"{out}_slice"),
            ]
            shape_nodes.append((node, repl))
    for node, repl in shape_nodes:
        at = next(k for k, n in enumerate(kept) if n is node)
        kept[at : at + 1] = repl

    if extra:
        at = graph.order[id(ln.node)]
        pos = next((k for k, n in enumerate(kept) if graph.order.get(id(n), -1) > at), len(kept))
        kept[pos:pos] = extra
    for node in kept:
        for k, name in enumerate(node.input):
            if name == y:
                node.input[k] = EMBEDS
    if y in graph.outputs:
        kept.append(helper.make_node("Identity", [EMBEDS], [y], name=f"{y}_identity"))

    # Inputs: inputs_embeds, then the original inputs still read.
    read = {n for node in kept for n in node_inputs(node)}
    ids_type = graph.inputs[roles.ids_input].type.tensor_type
    dims = [d for d in ids_type.shape.dim] if ids_type.HasField("shape") else []
    embeds = helper.make_tensor_value_info(EMBEDS, helper.np_dtype_to_tensor_dtype(roles.token.table.dtype), None)
    shape = embeds.type.tensor_type.shape
    for k in range(2):
        d = shape.dim.add()
        if k < len(dims):
            d.CopyFrom(dims[k])
        else:
            d.dim_param = ("batch", "sequence")[k]
    shape.dim.add().dim_value = int(roles.token.table.shape[1])
    inputs = [embeds] + [i for i in g.input if i.name in read and i.name not in graph.initializers]

    new_nodes = []
    for node in kept:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        new_nodes.append(copy)
    del g.node[:]
    g.node.extend(new_nodes)
    del g.input[:]
    g.input.extend(inputs)
    # Shapes recorded by the exporter may name the ids' dimensions or hold stale ranks: ONNX
    # Runtime infers them again from inputs_embeds.
    del g.value_info[:]
    inits = g.initializer
    for k in reversed(range(len(inits))):
        if inits[k].name not in read:
            del inits[k]
    inits.extend(new_inits)
    return model
