"""An index of an ONNX graph: who produces and who reads each tensor, which tensors are constants."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

#: ONNX Runtime's contrib domain (SkipLayerNormalization, EmbedLayerNormalization, ...).
MS_DOMAIN = "com.microsoft"


def describe(node: onnx.NodeProto) -> str:
    """``Op 'name'`` for messages (the first output when the node has no name)."""
    name = node.name or (node.output[0] if node.output else "?")
    return f"{node.op_type} node {name!r}"


def subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """The outer-scope names read by the subgraphs of `node` (If, Loop, Scan bodies)."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for g in graphs:
            local = {i.name for i in g.input} | {i.name for i in g.initializer}
            for inner in g.node:
                local.update(inner.output)
            for inner in g.node:
                names.update(n for n in inner.input if n and n not in local)
                names.update(n for n in subgraph_inputs(inner) if n not in local)
    return names


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Every tensor `node` reads: its inputs and its subgraphs' outer-scope names."""
    return [n for n in node.input if n] + sorted(subgraph_inputs(node))


@dataclass
class Graph:
    """Index of `model.graph` (built once; the model is not changed by it)."""

    model: onnx.ModelProto
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    consumers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    inputs: dict[str, onnx.ValueInfoProto] = field(default_factory=dict)
    order: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        g = self.model.graph
        self.initializers = {t.name: t for t in g.initializer}
        self.inputs = {i.name: i for i in g.input if i.name not in self.initializers}
        for k, node in enumerate(g.node):
            self.order[id(node)] = k
            for out in node.output:
                if out:
                    self.producer[out] = node
            for name in node_inputs(node):
                self.consumers.setdefault(name, []).append(node)
        self.outputs = [o.name for o in g.output]
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 0)

    @property
    def nodes(self) -> Iterable[onnx.NodeProto]:
        return self.model.graph.node

    def constant(self, name: str) -> np.ndarray | None:
        """The value of `name` if it is an initializer or a Constant node's output, else None.

        An initializer's array is made once and kept (the tables are read several times).
        """
        if name in self.initializers:
            cache = self.__dict__.setdefault("_arrays", {})
            if name not in cache:
                cache[name] = numpy_helper.to_array(self.initializers[name])
            return cache[name]
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
                if attr.name == "value_float":
                    return np.array(attr.f, np.float32)
                if attr.name == "value_floats":
                    return np.array(attr.floats, np.float32)
                if attr.name == "value_int":
                    return np.array(attr.i, np.int64)
                if attr.name == "value_ints":
                    return np.array(attr.ints, np.int64)
        return None

    def is_constant(self, name: str) -> bool:
        return name in self.initializers or (name in self.producer and self.producer[name].op_type == "Constant")

    def users(self, name: str) -> list[onnx.NodeProto]:
        return self.consumers.get(name, [])

    def value_inputs(self, name: str, _memo: dict[str, frozenset[str]] | None = None) -> frozenset[str]:
        """The graph inputs whose *values* `name` depends on (through Shape and Size only shapes count)."""
        memo = {} if _memo is None else _memo
        stack = [name]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            if top in self.inputs:
                memo[top] = frozenset([top])
                stack.pop()
                continue
            node = self.producer.get(top)
            if node is None or (node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx")):
                memo[top] = frozenset()
                stack.pop()
                continue
            pending = [n for n in node_inputs(node) if n not in memo]
            if pending:
                stack.extend(pending)
                continue
            deps: set[str] = set()
            for n in node_inputs(node):
                deps |= memo[n]
            for out in node.output:
                memo[out] = frozenset(deps)
            stack.pop()
        return memo[name]

    def needed(self, targets: Iterable[str], stop: Iterable[str] = ()) -> list[onnx.NodeProto]:
        """The nodes computing `targets`, in graph order, not looking past the tensors in `stop`."""
        stop = set(stop)
        seen: set[int] = set()
        found: list[onnx.NodeProto] = []
        stack = [t for t in targets if t not in stop]
        visited: set[str] = set()
        while stack:
            name = stack.pop()
            if name in visited:
                continue
            visited.add(name)
            node = self.producer.get(name)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            found.append(node)
            stack.extend(n for n in node_inputs(node) if n not in stop)
        found.sort(key=lambda n: self.order[id(n)])
        return found


def submodel(graph: Graph, outputs: list[str], extra_nodes: Iterable[onnx.NodeProto] = ()) -> onnx.ModelProto:
    """A model computing `outputs` from the graph inputs they need (for onnx's reference evaluator).

    The initializers it reads are inputs of the model (fed with :meth:`Graph.constant`'s arrays),
    so that no table is copied into it.
    """
    nodes = graph.needed(outputs)
    names: set[str] = set()
    for node in nodes:
        names.update(node_inputs(node))
    names.update(outputs)
    inits: list[onnx.TensorProto] = []
    inputs = [graph.inputs[n] for n in graph.inputs if n in names]
    for n in sorted(names):
        if n in graph.initializers:
            t = graph.initializers[n]
            inputs.append(onnx.helper.make_tensor_value_info(n, t.data_type, list(t.dims)))
    outs = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs]
    g = onnx.helper.make_graph([*nodes, *extra_nodes], "probe", inputs, outs, inits)
    m = onnx.helper.make_model(g, opset_imports=list(graph.model.opset_import), ir_version=graph.model.ir_version)
    m.functions.extend(graph.model.functions)
    return m
