"""The LayerNorm that ends the embedding subgraph, in the four forms exporters write.

- ``LayerNormalization`` (opset 17 and later, the dynamo exporter);
- its decomposed form (torch's classic exporter below opset 17)::

      m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2)) (or Mul(d, d))
      y = Div(d, Sqrt(Add(v, eps))) (or Mul(d, Reciprocal(...))); y = Mul(y, gamma); y = Add(y, beta)

- ONNX Runtime's ``SkipLayerNormalization`` (x = input + skip [+ bias]);
- ONNX Runtime's ``EmbedLayerNormalization`` (the lookups, the sum and the LayerNorm in one node).

Each match gives the tensors summed into ``x``, the parameters and the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from .graph import MS_DOMAIN, Graph, describe


@dataclass
class LayerNorm:
    """One LayerNorm over the last axis: ``output = (x - mean) / sqrt(var + eps) * gamma + beta``."""

    kind: str
    node: onnx.NodeProto  # the node named in messages
    nodes: list[onnx.NodeProto]
    summands: list[str]  # x is their sum (empty for EmbedLayerNormalization)
    gamma: np.ndarray | None
    beta: np.ndarray | None
    eps: float
    output: str
    unused: list[str] = field(default_factory=list)  # outputs that must not be read


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _only_user(graph: Graph, name: str, op: str | tuple[str, ...]) -> onnx.NodeProto | None:
    users = graph.users(name)
    ops = (op,) if isinstance(op, str) else op
    if len(users) == 1 and users[0].op_type in ops:
        return users[0]
    return None


def _other(node: onnx.NodeProto, name: str) -> str:
    a, b = node.input[0], node.input[1]
    return b if a == name else a


def _scalar(graph: Graph, name: str) -> float | None:
    value = graph.constant(name)
    if value is None or value.size != 1:
        return None
    return float(value.reshape(()))


def _last_axis(graph: Graph, node: onnx.NodeProto) -> bool:
    axes = _attr(node, "axes", None)
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = graph.constant(node.input[1])
        axes = None if value is None else value.reshape(-1).tolist()
    return axes is not None and list(axes) == [-1] and _attr(node, "keepdims", 1) == 1


def _vector(graph: Graph, name: str, what: str, node: onnx.NodeProto) -> np.ndarray:
    value = graph.constant(name)
    if value is None:
        raise ValueError(f"{describe(node)}: the LayerNorm {what} {name!r} is not a constant")
    if value.ndim > 1 and any(d != 1 for d in value.shape[:-1]):
        raise ValueError(f"{describe(node)}: the LayerNorm {what} has shape {value.shape}, not a vector")
    return value.reshape(-1)


def _decomposed(graph: Graph, first: onnx.NodeProto) -> LayerNorm | None:
    """The decomposed form starting at ReduceMean `first`, or None if it is not one."""
    if not _last_axis(graph, first):
        return None
    x = first.input[0]
    mean = first.output[0]
    sub = next((n for n in graph.users(mean) if n.op_type == "Sub" and list(n.input) == [x, mean]), None)
    if sub is None:
        return None
    d = sub.output[0]
    users = graph.users(d)
    if len(users) != 2:
        return None
    square = next(
        (
            n
            for n in users
            if (n.op_type == "Pow" and n.input[0] == d and _scalar(graph, n.input[1]) == 2.0)
            or (n.op_type == "Mul" and list(n.input) == [d, d])
        ),
        None,
    )
    scale = next((n for n in users if n is not square and n.op_type in ("Div", "Mul") and n.input[0] == d), None)
    if square is None or scale is None:
        return None
    mean2 = _only_user(graph, square.output[0], "ReduceMean")
    if mean2 is None or not _last_axis(graph, mean2):
        return None
    add_eps = _only_user(graph, mean2.output[0], "Add")
    if add_eps is None:
        return None
    eps = _scalar(graph, _other(add_eps, mean2.output[0]))
    sqrt = _only_user(graph, add_eps.output[0], "Sqrt")
    if eps is None or sqrt is None:
        return None
    nodes = [first, sub, square, mean2, add_eps, sqrt]
    if scale.op_type == "Div":
        if scale.input[1] != sqrt.output[0]:
            return None
    else:
        recip = _only_user(graph, sqrt.output[0], "Reciprocal")
        if recip is None or scale.input[1] != recip.output[0]:
            return None
        nodes.append(recip)
    nodes.append(scale)
    out = scale.output[0]
    gamma = beta = None
    mul = _only_user(graph, out, "Mul")
    if mul is not None and graph.is_constant(_other(mul, out)):
        gamma = _vector(graph, _other(mul, out), "weight", mul)
        nodes.append(mul)
        out = mul.output[0]
    add = _only_user(graph, out, "Add")
    if add is not None and graph.is_constant(_other(add, out)):
        beta = _vector(graph, _other(add, out), "bias", add)
        nodes.append(add)
        out = add.output[0]
    return LayerNorm("decomposed", first, nodes, [x], gamma, beta, eps, out)


def _optional_input(node: onnx.NodeProto, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def match(graph: Graph, node: onnx.NodeProto) -> LayerNorm | None:
    """The LayerNorm that `node` starts (or is), or None."""
    op, domain = node.op_type, node.domain
    if op == "LayerNormalization" and domain in ("", "ai.onnx", MS_DOMAIN):
        axis = _attr(node, "axis", -1)
        if axis != -1:
            return None
        gamma = _vector(graph, node.input[1], "weight", node)
        bias = _optional_input(node, 2)
        beta = _vector(graph, bias, "bias", node) if bias else None
        return LayerNorm(
            "LayerNormalization",
            node,
            [node],
            [node.input[0]],
            gamma,
            beta,
            float(_attr(node, "epsilon", 1e-5)),
            node.output[0],
            [o for o in node.output[1:] if o],
        )
    if op == "ReduceMean" and domain in ("", "ai.onnx"):
        return _decomposed(graph, node)
    if op == "SkipLayerNormalization" and domain == MS_DOMAIN:
        gamma = _vector(graph, node.input[2], "weight", node)
        beta_name, bias_name = _optional_input(node, 3), _optional_input(node, 4)
        beta = _vector(graph, beta_name, "bias", node) if beta_name else None
        summands = [node.input[0], node.input[1]] + ([bias_name] if bias_name else [])
        return LayerNorm(
            "SkipLayerNormalization",
            node,
            [node],
            summands,
            gamma,
            beta,
            float(_attr(node, "epsilon", 1e-12)),
            node.output[0],
            [o for o in node.output[1:] if o],
        )
    if op == "EmbedLayerNormalization" and domain == MS_DOMAIN:
        gamma = _vector(graph, node.input[5], "weight", node)
        beta = _vector(graph, node.input[6], "bias", node)
        unused = [node.output[2]] if len(node.output) > 2 and node.output[2] else []
        return LayerNorm(
            "EmbedLayerNormalization",
            node,
            [node],
            [],
            gamma,
            beta,
            float(_attr(node, "epsilon", 1e-12)),
            node.output[0],
            unused,
        )
    return None
