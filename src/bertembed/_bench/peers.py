"""The peers of the benchmark harness: NumPy, ``np.take``, ``np.copyto``, torch, ONNX Runtime.

Each peer's builder, ``build(case, inputs, context)``, returns a no-argument
callable doing one call, or a :class:`~bertembed._bench.timing.Contender`
(see :class:`~bertembed._bench.data.Peer`); :data:`PEERS` names them. Every
peer gets the settings a critic would give it: torch under
``torch.inference_mode`` with in-place adds, one inter-op thread and its
intra-op threads set; ONNX Runtime with every graph optimisation, its
intra-op threads set, its own threads spinning, sequential execution.

Only NumPy is needed to import this module: torch, onnx and onnxruntime are
imported when their peer is built, and a missing one raises ImportError
(reported as unavailable).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from .data import LN_EPS, Case, Context, Inputs, Peer
from .timing import Contender, Fn


def _numpy_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    """The plain NumPy expression ``tok[ids] + pos[arange(S)] + seg[sids]`` (+ LayerNorm)."""
    positions = np.arange(case.seq)

    def call() -> np.ndarray:
        e = d.tok[d.ids] + d.pos[positions] + d.seg[d.segment_ids]
        if case.layer_norm:
            centred = e - e.mean(axis=-1, keepdims=True)
            var = (centred * centred).mean(axis=-1, keepdims=True)
            e = centred / np.sqrt(var + LN_EPS) * d.ln_weight + d.ln_bias
        return e

    return call


def _take_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    """The gather floor: ``np.take`` of the token rows into a preallocated buffer (one thread)."""
    dst = np.empty((case.batch, case.seq, case.H), d.tok.dtype)
    dst.fill(1.0)

    def call() -> np.ndarray:
        return np.take(d.tok, d.ids, axis=0, out=dst)

    return call


def _copyto_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    """The bandwidth yardstick: ``np.copyto`` of an array of the result's size."""
    shape = (case.batch, case.seq, case.H)
    src = np.full(shape, 0.5, case.dtype)
    dst = np.zeros(shape, case.dtype)
    dst.fill(1.0)

    def call() -> np.ndarray:
        np.copyto(dst, src)
        return dst

    return call


def _torch_build(case: Case, d: Inputs, ctx: Context) -> Contender:
    """Eager torch: ``F.embedding`` of tokens and segments, positions as a slice, ``F.layer_norm``."""
    import torch
    import torch.nn.functional as F

    threads = ctx.threads
    # Only possible before torch's first inter-op work (a fresh process); then kept.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    ctx.stack.callback(torch.set_num_threads, torch.get_num_threads())
    torch.set_num_threads(threads)
    ctx.stack.enter_context(torch.inference_mode())
    tok, pos, seg = (torch.from_numpy(a) for a in (d.tok, d.pos, d.seg))
    w, b = torch.from_numpy(d.ln_weight), torch.from_numpy(d.ln_bias)
    ids, sids = torch.from_numpy(d.ids), torch.from_numpy(d.segment_ids)
    positions = pos[: case.seq]  # positions 0..S-1: a view, broadcast over the batch

    def prepare() -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    def call() -> Any:
        e = F.embedding(ids, tok)
        e += positions
        e += F.embedding(sids, seg)
        if case.layer_norm:
            e = F.layer_norm(e, (case.H,), w, b, LN_EPS)
        return e.numpy()

    return Contender(call, prepare)


def _ort_session(d: Inputs, ctx: Context) -> Any:
    """An ONNX Runtime session of one com.microsoft EmbedLayerNormalization node."""
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnx import TensorProto, helper, numpy_helper

    key = ("ort", id(d.tok), ctx.threads)
    if key in ctx.cache:
        return ctx.cache[key]
    hidden = d.tok.shape[1]
    names = ["word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"]
    arrays = [d.tok, d.pos, d.seg, d.ln_weight, d.ln_bias]
    node = helper.make_node(
        "EmbedLayerNormalization",
        ["input_ids", "segment_ids", *names],
        ["output", "mask_index"],
        domain="com.microsoft",
        epsilon=LN_EPS,
    )
    graph = helper.make_graph(
        [node],
        "bert_input_embeddings",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "seq"]),
            helper.make_tensor_value_info("segment_ids", TensorProto.INT32, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("mask_index", TensorProto.INT32, ["batch"]),
        ],
        initializer=[numpy_helper.from_array(a, n) for n, a in zip(names, arrays, strict=True)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = ctx.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # ONNX Runtime's own default, stated: its workers spin between calls,
    # which is fastest for itself (and what slows a neighbour in one process).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ctx.cache[key] = session
    return session


def _ort_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    """ONNX Runtime's fused ``EmbedLayerNormalization`` (int32 ids, converted once, untimed)."""
    session = _ort_session(d, ctx)
    feed = {
        "input_ids": d.ids.astype(np.int32),
        "segment_ids": d.segment_ids.astype(np.int32),
    }

    def call() -> np.ndarray:
        return session.run(["output"], feed)[0]

    return call


def _plain_tables(case: Case) -> bool:
    return case.table_dtype is None


#: Known peers, by name.
PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("numpy", lambda c: not c.out and _plain_tables(c), _numpy_build),
        Peer("take", lambda c: c.layer_norm and not c.out and _plain_tables(c), _take_build, checked=False),
        Peer("copyto", lambda c: c.out, _copyto_build, checked=False),
        Peer("torch", lambda c: not c.out and _plain_tables(c), _torch_build, threaded=True),
        Peer(
            "onnxruntime",
            lambda c: c.layer_norm and c.dtype == "float32" and not c.out and _plain_tables(c),
            _ort_build,
            threaded=True,
        ),
    )
}


def resolve_peers(peers: Iterable[str | Peer] | None) -> list[Peer]:
    """Peers by name (from :data:`PEERS`) or as given; default every known peer.

    Examples
    --------
    >>> [p.name for p in resolve_peers(["numpy", "take"])]
    ['numpy', 'take']
    """
    if peers is None:
        return list(PEERS.values())
    resolved = []
    for p in peers:
        if isinstance(p, Peer):
            resolved.append(p)
        elif p in PEERS:
            resolved.append(PEERS[p])
        else:
            raise ValueError(f"unknown peer {p!r}; known peers: {', '.join(PEERS)}")
    return resolved
