"""The peers of the benchmark harness: NumPy, ``np.copyto``, torch and ONNX Runtime.

Each peer's builder, ``build(case, inputs, context)``, returns a no-argument
callable doing one call (see :class:`bertembed._bench.data.Peer`);
:data:`PEERS` names them.

Only NumPy is needed to import this module: torch, onnx and onnxruntime are
imported when their peer is built, and a missing one raises ImportError
(reported as unavailable).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .data import LN_EPS, Case, Context, Fn, Inputs, Peer


def _numpy_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    positions = np.arange(case.seq)

    def call() -> np.ndarray:
        e = d.tok[d.ids] + d.pos[positions] + d.seg[d.segment_ids]
        if case.layer_norm:
            centred = e - e.mean(axis=-1, keepdims=True)
            var = (centred * centred).mean(axis=-1, keepdims=True)
            e = centred / np.sqrt(var + LN_EPS) * d.ln_weight + d.ln_bias
        return e

    return call


def _copyto_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    shape = (case.batch, case.seq, case.H)
    src = np.full(shape, 0.5, case.dtype)
    dst = np.zeros(shape, case.dtype)
    dst.fill(1.0)

    def call() -> np.ndarray:
        np.copyto(dst, src)
        return dst

    return call


def _torch_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    import torch
    import torch.nn.functional as F

    ctx.stack.callback(torch.set_num_threads, torch.get_num_threads())
    torch.set_num_threads(ctx.threads)
    tok, pos, seg = (torch.from_numpy(a) for a in (d.tok, d.pos, d.seg))
    w, b = torch.from_numpy(d.ln_weight), torch.from_numpy(d.ln_bias)
    ids, sids = torch.from_numpy(d.ids), torch.from_numpy(d.segment_ids)
    positions = torch.arange(case.seq).unsqueeze(0)  # like BertEmbeddings' buffer

    def call() -> Any:
        with torch.inference_mode():
            e = F.embedding(ids, tok) + F.embedding(positions, pos) + F.embedding(sids, seg)
            if case.layer_norm:
                e = F.layer_norm(e, (case.H,), w, b, LN_EPS)
        return e.numpy()

    return call


def _ort_session(d: Inputs, ctx: Context) -> Any:
    """An ONNX Runtime session of one com.microsoft EmbedLayerNormalization node."""
    import onnxruntime as ort
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
    opts.intra_op_num_threads = ctx.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    ctx.cache[key] = session
    return session


def _ort_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    session = _ort_session(d, ctx)
    feed = {
        "input_ids": d.ids.astype(np.int32),
        "segment_ids": d.segment_ids.astype(np.int32),
    }

    def call() -> np.ndarray:
        return session.run(["output"], feed)[0]

    return call


#: Known peers, by name.
PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("numpy", lambda c: not c.out, _numpy_build),
        Peer("copyto", lambda c: c.out, _copyto_build, checked=False),
        Peer("torch", lambda c: not c.out, _torch_build),
        Peer(
            "onnxruntime",
            lambda c: c.layer_norm and c.dtype == "float32" and not c.out,
            _ort_build,
        ),
    )
}


def resolve_peers(peers: Iterable[str | Peer] | None) -> list[Peer]:
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
