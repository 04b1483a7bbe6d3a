"""What indexes each table, recovered by evaluating the index subgraph on probe ids.

Each lookup's indices are computed by the graph from its inputs. Which inputs
their *values* depend on is read from the graph (shapes do not count); what
they are is found by running the subgraph (onnx's reference evaluator) on
probes, fitting one of the rules below, and checking the fit on more probes:

- the token lookup: the indices are an input's values (the largest such table);
- a segment lookup: another input's values (token types), or one constant row;
- positions: ``s + offset`` (absolute), or the padding rule of RoBERTa and
  MPNet: ``pad_pos`` for a pad token, ``pad_pos + 1 + (non-pad tokens before)``
  otherwise, with ``pad`` the id compared against.

Anything else is refused: positions read from another input (an attention
mask), two token lookups, indices that fit no rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from . import contrib
from .graph import Graph, describe, submodel
from .lookups import Lookup, Sum

_INT_TYPES: dict[int, type] = {onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


@dataclass
class Roles:
    """Which lookup is which, and the position rule."""

    token: Lookup
    ids_input: str
    segment: Lookup | None = None
    segment_input: str | None = None  # None with a segment: one constant row
    segment_row: int = 0
    position: Lookup | None = None
    rule: str = "none"  # "absolute", "padding" or "none"
    offset: int = 0  # absolute: s + offset
    pad: int = 0  # padding: the id compared against
    pad_position: int = 0  # padding: the position of a pad token


def input_dtype(graph: Graph, name: str) -> type | None:
    t = graph.inputs[name].type.tensor_type
    return _INT_TYPES.get(t.elem_type)


def feeds(graph: Graph, model: onnx.ModelProto, values: dict[str, np.ndarray], shape: tuple[int, int]) -> dict:
    """Inputs for `model`: `values` where given, else ones (masks) of `shape`, in each input's dtype."""
    out = {}
    for i in model.graph.input:
        if i.name in graph.initializers:
            out[i.name] = graph.constant(i.name)
            continue
        dtype = input_dtype(graph, i.name)
        if dtype is None:
            elem = i.type.tensor_type.elem_type
            if elem == onnx.TensorProto.BOOL:
                dtype = np.bool_
            elif elem == onnx.TensorProto.FLOAT:
                dtype = np.float32
            else:
                raise ValueError(f"input {i.name!r}: element type {elem} is not an id, mask or float input")
        value = values.get(i.name)
        out[i.name] = (np.ones(shape) if value is None else value).astype(dtype)
    return out


def evaluate(graph: Graph, outputs: list[str], values: dict[str, np.ndarray], shape: tuple[int, int]) -> list:
    model = submodel(graph, outputs)
    ev = ReferenceEvaluator(model, new_ops=contrib.OPS)
    return [np.asarray(v) for v in ev.run(None, feeds(graph, model, values, shape))]


def _padding_positions(ids: np.ndarray, pad: int, pad_position: int) -> np.ndarray:
    real = ids != pad
    return np.where(real, np.cumsum(real, axis=1) + pad_position, pad_position)


def _expected_positions(kind: str, a: int, b: int, ids: np.ndarray) -> np.ndarray:
    """The position ids a candidate rule gives for `ids`: one `row` (a) for
    all, `absolute` positions from a, or `padding` positions (pad id a, pad
    position b)."""
    if kind == "row":
        return np.full(ids.shape, a)
    if kind == "absolute":
        return np.broadcast_to(np.arange(ids.shape[1]) + a, ids.shape)
    return _padding_positions(ids, a, b)


def _probe_ids(rng: np.random.Generator, vocab: int, pad: int, shape: tuple[int, int]) -> np.ndarray:
    ids = rng.integers(0, vocab, size=shape)
    b, s = shape
    if s > 2:
        ids[0, -2:] = pad  # right padding
        ids[-1, :2] = pad  # left padding
        ids[b // 2, s // 2] = pad  # a hole
    return ids


def _indices(lookup: Lookup, value: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray | None:
    if value is None:
        return np.broadcast_to(np.arange(shape[1]), shape)
    try:
        return np.broadcast_to(value, shape)
    except ValueError:
        return None


def find_roles(graph: Graph, found: Sum) -> Roles:
    """Which lookup is the token, segment and position lookup, and the position rule."""
    lookups = found.lookups
    names = [lk.indices for lk in lookups if lk.indices is not None]
    deps = {id(lk): graph.value_inputs(lk.indices) if lk.indices else frozenset() for lk in lookups}
    int_inputs = [n for n in graph.inputs if input_dtype(graph, n) is not None]
    rng = np.random.default_rng(0)
    shape = (2, 6)
    probe = {n: rng.integers(0, 2, size=shape) for n in int_inputs}
    values = dict(zip(names, evaluate(graph, names, probe, shape), strict=True))

    direct: dict[int, str] = {}
    for lk in lookups:
        d = deps[id(lk)]
        if lk.indices is not None and len(d) == 1:
            (src,) = d
            got = values[lk.indices]
            if src in probe and got.shape == shape and np.array_equal(got, probe[src]):
                direct[id(lk)] = src
    if not direct:
        raise ValueError(f"{describe(lookups[0].node)}: no table lookup is indexed by an input's values (no token ids)")
    token = max((lk for lk in lookups if id(lk) in direct), key=lambda lk: lk.table.shape[0])
    ids_input = direct[id(token)]
    roles = Roles(token=token, ids_input=ids_input)
    vocab = token.table.shape[0]
    every = (np.arange(-(-vocab // 8) * 8) % vocab).reshape(-1, 8)
    assert token.indices is not None  # a direct lookup has its indices input
    got = evaluate(graph, [token.indices], {ids_input: every}, every.shape)[0]
    if not np.array_equal(np.broadcast_to(got, every.shape), every):
        raise ValueError(f"{describe(token.node)}: its indices are not the ids {ids_input!r} for every id")

    for lk in lookups:
        if lk is token:
            continue
        d = deps[id(lk)]
        if id(lk) in direct:
            if direct[id(lk)] == ids_input:
                raise ValueError(
                    f"{describe(lk.node)}: a second table indexed by the token ids "
                    f"({ids_input!r}); only one token table is supported"
                )
            if roles.segment is not None:
                raise ValueError(
                    f"{describe(lk.node)}: a second segment-like lookup (of input "
                    f"{direct[id(lk)]!r}); only token types are supported"
                )
            roles.segment, roles.segment_input = lk, direct[id(lk)]
            continue
        if not d <= {ids_input}:
            others = sorted(d - {ids_input})
            raise ValueError(
                f"{describe(lk.node)}: its indices depend on the values of input(s) {others}: "
                "positions (or rows) computed from an attention mask or another input are not "
                "supported, only from the token ids or their shape"
            )
        _fit_positions_or_row(graph, lk, roles, vocab, int_inputs)
    return roles


def _fit_positions_or_row(graph: Graph, lk: Lookup, roles: Roles, vocab: int, int_inputs: list[str]) -> None:
    ids_input = roles.ids_input
    # Every id once, in rows of 8: the padding rule shows as the one place where the count stops.
    width = 8
    rows = -(-vocab // width)
    every = (np.arange(rows * width) % vocab).reshape(rows, width)
    shape = every.shape
    value = evaluate(graph, [lk.indices], {ids_input: every}, shape)[0] if lk.indices else None
    got = _indices(lk, value, shape)
    if got is None:
        seen = None if value is None else np.shape(value)
        raise ValueError(f"{describe(lk.node)}: its indices have shape {seen} for ids of shape {shape}")
    candidates: list[tuple[str, int, int]] = []
    if np.all(got == got.flat[0]):
        candidates.append(("row", int(got.flat[0]), 0))
    candidates.append(("absolute", int(got[0, 0]), 0))
    p = int(np.argmin(got))
    candidates.append(("padding", int(every.flat[p]), int(got.flat[p])))
    rng = np.random.default_rng(1)
    for kind, a, b in candidates:
        # First on the probe holding every id (a pad id a random probe would miss shows here).
        if not np.array_equal(got, _expected_positions(kind, a, b, every)):
            continue
        ok = True
        for probe_shape in ((3, 7), (2, 1), (4, 12)):
            pad = a if kind == "padding" else 0
            ids = _probe_ids(rng, vocab, pad, probe_shape)
            values = {ids_input: ids}
            for n in int_inputs:
                if n != ids_input:
                    values[n] = np.zeros(probe_shape)
            value = evaluate(graph, [lk.indices], values, probe_shape)[0] if lk.indices else None
            got2 = _indices(lk, value, probe_shape)
            if got2 is None or not np.array_equal(got2, _expected_positions(kind, a, b, ids)):
                ok = False
                break
        if not ok:
            continue
        if kind == "row":
            if roles.segment is not None:
                raise ValueError(f"{describe(lk.node)}: a second lookup of a constant row; only one is supported")
            roles.segment, roles.segment_input, roles.segment_row = lk, None, a
        else:
            if roles.position is not None:
                raise ValueError(f"{describe(lk.node)}: a second position-like lookup; only one is supported")
            if a < 0 or (kind == "padding" and b < 0):
                raise ValueError(f"{describe(lk.node)}: negative position indices")
            roles.position, roles.rule = lk, kind
            if kind == "absolute":
                roles.offset = a
            else:
                roles.pad, roles.pad_position = a, b
        return
    raise ValueError(
        f"{describe(lk.node)}: its indices follow no supported rule (absolute positions "
        "s + offset, RoBERTa's padding rule, or one constant row)"
    )
