"""The table lookups summed into the LayerNorm's input, found by walking the Add tree."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from .graph import Graph, describe
from .layernorm import LayerNorm

_QUANTISED = ("DequantizeLinear", "DynamicQuantizeLinear", "QuantizeLinear", "GatherBlockQuantized")


@dataclass
class Lookup:
    """``table[indices]``: a Gather (or one table of an EmbedLayerNormalization)."""

    node: onnx.NodeProto
    table: np.ndarray
    indices: str | None  # None: positions 0..S-1 (EmbedLayerNormalization without position_ids)


@dataclass
class Sum:
    """What the LayerNorm's input is: lookups plus constant vectors, and the nodes computing the sum."""

    lookups: list[Lookup]
    constants: list[np.ndarray]
    nodes: list[onnx.NodeProto]


def _shape_only(node: onnx.NodeProto) -> bool:
    """Whether `node` reads only the shape of its input (the split keeps such reads, see :mod:`.cut`)."""
    return node.op_type == "Shape" and node.domain in ("", "ai.onnx")


def _table(graph: Graph, name: str, node: onnx.NodeProto) -> np.ndarray:
    value = graph.constant(name)
    if value is None:
        producer = graph.producer.get(name)
        if producer is not None and producer.op_type in _QUANTISED:
            raise ValueError(
                f"{describe(node)} reads a quantised table ({describe(producer)}): "
                "quantised embedding tables are not supported"
            )
        raise ValueError(f"{describe(node)}: the table {name!r} is not a constant of the graph")
    if value.ndim != 2 or value.dtype.kind != "f":
        raise ValueError(
            f"{describe(node)}: the table {name!r} has shape {value.shape} and dtype {value.dtype}, "
            "not a 2-D floating-point table"
        )
    return value


def _dequantized(graph: Graph, node: onnx.NodeProto) -> Lookup:
    """``DequantizeLinear(Gather(q_table, indices), scale, zero_point)`` (ONNX Runtime's dynamic quantisation
    of a lookup) as a lookup of the dequantised table: the same float32 values, computed once."""
    gather = graph.producer.get(node.input[0])
    why = None
    if gather is None or gather.op_type != "Gather" or next((a.i for a in gather.attribute if a.name == "axis"), 0):
        why = "its input is not a lookup of rows"
    else:
        q = graph.constant(gather.input[0])
        scale = graph.constant(node.input[1])
        zero = graph.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.int32)
        if q is None or q.ndim != 2 or q.dtype.kind not in "iu":
            why = "the quantised table is not a 2-D integer constant"
        elif scale is None or zero is None or scale.size != 1 or zero.size != 1:
            why = "its scale and zero point are not per-tensor constants"
        elif [u for u in graph.users(gather.output[0]) if u is not node] or gather.output[0] in graph.outputs:
            why = "the quantised rows are also read elsewhere"
    if why is not None:
        raise ValueError(f"{describe(node)}: a quantised embedding table that cannot be dequantised exactly: {why}")
    assert gather is not None and q is not None and scale is not None and zero is not None  # why is None
    table = (q.astype(np.int32) - zero.astype(np.int32).reshape(())).astype(np.float32) * scale.astype(
        np.float32
    ).reshape(())
    return Lookup(node, table, gather.input[1])


def _leaf(graph: Graph, name: str, ln: LayerNorm) -> Lookup | np.ndarray:
    value = graph.constant(name)
    if value is not None:
        if value.dtype.kind != "f" or (value.ndim > 1 and any(d != 1 for d in value.shape[:-1])):
            raise ValueError(
                f"{describe(ln.node)}: the constant {name!r} (shape {value.shape}) added to the "
                "embeddings is not a vector"
            )
        return value.reshape(-1)
    node = graph.producer.get(name)
    if node is None:
        raise ValueError(f"{describe(ln.node)}: its input {name!r} is a graph input, not a sum of table lookups")
    if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
        return _dequantized(graph, node)
    if node.op_type in _QUANTISED:
        raise ValueError(
            f"{describe(node)}: a quantised embedding table (a dynamically quantised graph?), which is not supported"
        )
    if node.op_type != "Gather" or node.domain not in ("", "ai.onnx"):
        raise ValueError(
            f"{describe(ln.node)}: its input is not a sum of table lookups: {describe(node)} computes {name!r}"
        )
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if axis != 0:
        raise ValueError(f"{describe(node)}: gathers along axis {axis}, not rows of a table")
    return Lookup(node, _table(graph, node.input[0], node), node.input[1])


def find(graph: Graph, ln: LayerNorm) -> Sum:
    """The lookups summed into `ln`'s input (refused with a ValueError when it is anything else)."""
    if ln.kind == "EmbedLayerNormalization":
        fused = ln.node
        opt = [fused.input[k] if len(fused.input) > k else "" for k in range(9)]
        terms = [
            Lookup(fused, _table(graph, opt[2], fused), opt[0]),
            Lookup(fused, _table(graph, opt[3], fused), opt[8] or None),
        ]
        if opt[1] and opt[4]:
            terms.append(Lookup(fused, _table(graph, opt[4], fused), opt[1]))
        return Sum(terms, [], [])
    inside = {id(n) for n in ln.nodes}
    lookups: list[Lookup] = []
    constants: list[np.ndarray] = []
    nodes: list[onnx.NodeProto] = []
    stack = list(ln.summands)
    while stack:
        name = stack.pop()
        producer = graph.producer.get(name)
        if producer is not None and producer.op_type == "Add" and producer.domain in ("", "ai.onnx"):
            readers = [u for u in graph.users(name) if id(u) not in inside and not _shape_only(u)]
            if readers or name in graph.outputs:
                where = describe(readers[0]) if readers else "a graph output"
                raise ValueError(f"{describe(producer)}: a partial sum of the embeddings is also read by {where}")
            inside.add(id(producer))
            nodes.append(producer)
            stack.extend([producer.input[0], producer.input[1]])
            continue
        leaf = _leaf(graph, name, ln)
        if isinstance(leaf, Lookup):
            readers = [u for u in graph.users(name) if id(u) not in inside and not _shape_only(u)]
            if readers or name in graph.outputs:
                where = describe(readers[0]) if readers else "a graph output"
                raise ValueError(f"{describe(leaf.node)}: its rows are also read by {where}")
            lookups.append(leaf)
            nodes.append(leaf.node)
            if leaf.node.op_type == "DequantizeLinear":
                nodes.append(graph.producer[leaf.node.input[0]])
        else:
            constants.append(leaf)
    if not lookups:
        raise ValueError(f"{describe(ln.node)}: no table lookup feeds it")
    return Sum(lookups, constants, nodes)
