"""The embedding layer's files (config.json and model.safetensors, Hugging Face names) and their check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .._checkpoints.safetensors_writer import code_of, write_safetensors, write_text
from .graph import Graph, describe
from .layernorm import LayerNorm
from .lookups import Sum
from .rules import Roles, evaluate, input_dtype


def tables(ln: LayerNorm, found: Sum, roles: Roles) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The layer's tensors (Hugging Face names) and its config.json."""
    token = roles.token.table
    dtype = token.dtype
    width = token.shape[1]
    for lk in found.lookups:
        if lk.table.shape[1] != width or lk.table.dtype != dtype:
            raise ValueError(
                f"{describe(lk.node)}: its table is {lk.table.shape} {lk.table.dtype}, the token "
                f"table {token.shape} {dtype}"
            )
    if found.constants:
        token = token + sum(c.astype(dtype) for c in found.constants)
    out = {"embeddings.word_embeddings.weight": np.ascontiguousarray(token)}
    segment = None
    if roles.segment is not None:
        segment = roles.segment.table
        if roles.segment_input is None:
            segment = segment[roles.segment_row : roles.segment_row + 1]
    gamma = np.ones(width, dtype) if ln.gamma is None else ln.gamma.astype(dtype)
    beta = np.zeros(width, dtype) if ln.beta is None else ln.beta.astype(dtype)
    if gamma.shape != (width,) or beta.shape != (width,):
        raise ValueError(
            f"{describe(ln.node)}: LayerNorm parameters of shape {gamma.shape} / {beta.shape} "
            f"for embeddings {width} wide"
        )
    config: dict[str, Any] = {
        "vocab_size": int(token.shape[0]),
        "hidden_size": int(width),
        "layer_norm_eps": float(ln.eps),
    }
    if roles.rule == "absolute":
        assert roles.position is not None  # the rule was found from the position lookup
        pos = roles.position.table[roles.offset :]
        config.update(model_type="bert", max_position_embeddings=int(pos.shape[0]))
    elif roles.rule == "padding":
        assert roles.position is not None
        table = roles.position.table
        shift = roles.pad_position - roles.pad
        if shift >= 0:
            pos = table[shift:]
        else:
            pos = np.concatenate([np.zeros((-shift, width), dtype), table])
        config.update(max_position_embeddings=int(pos.shape[0]), pad_token_id=int(roles.pad))
        config["model_type"] = "mpnet" if segment is None and roles.pad == 1 else "roberta"
    else:
        pos = None
        config["model_type"] = "gte"
    if config["model_type"] in ("bert", "roberta") and segment is None:
        segment = np.zeros((1, width), dtype)
    if pos is not None:
        out["embeddings.position_embeddings.weight"] = np.ascontiguousarray(pos)
    if segment is not None:
        out["embeddings.token_type_embeddings.weight"] = np.ascontiguousarray(segment)
    config["type_vocab_size"] = 0 if segment is None else int(segment.shape[0])
    out["embeddings.LayerNorm.weight"] = gamma
    out["embeddings.LayerNorm.bias"] = beta
    return out, config


def write(directory: Path, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> None:
    """``config.json`` and ``model.safetensors`` (the package's writer: aligned, atomic)."""
    write_text(directory / "config.json", json.dumps(config, indent=2) + "\n")
    write_safetensors(directory / "model.safetensors", [(name, code_of(a.dtype), a) for name, a in tensors.items()])


def _probes(roles: Roles, config: dict[str, Any], rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    vocab = config["vocab_size"]
    max_len = config.get("max_position_embeddings", 64)
    if roles.rule == "padding":
        max_len -= config["pad_token_id"] + 1
    pad = roles.pad if roles.rule == "padding" else 0
    probes = []
    for b, s in ((3, 9), (2, 1), (4, min(max_len, 64)), (1, max_len)):
        if s < 1:
            continue
        ids = rng.integers(0, vocab, size=(b, s))
        mask = np.ones((b, s), np.int64)
        if s > 3:
            ids[0, -3:], mask[0, -3:] = pad, 0  # right padding
            ids[-1, :2], mask[-1, :2] = pad, 0  # left padding
            if b > 2:
                ids[1, s // 2], mask[1, s // 2] = pad, 0  # a hole
        ids[0, 0] = vocab - 1
        probe = {"ids": ids, "mask": mask}
        if roles.segment is not None and roles.segment_input is not None:
            probe["types"] = rng.integers(0, roles.segment.table.shape[0], size=(b, s))
        probes.append(probe)
    return probes


def check(graph: Graph, ln: LayerNorm, roles: Roles, layer: Any, config: dict[str, Any], tolerance: float) -> float:
    """The largest difference between `layer` and the graph's own embeddings on probe batches.

    Raises ValueError when it is above `tolerance` (the token table dtype's,
    from the dtype registry) times ``max(1, max |value|)``.
    """
    rng = np.random.default_rng(2)
    worst = 0.0
    for probe in _probes(roles, config, rng):
        shape = probe["ids"].shape
        values = {roles.ids_input: probe["ids"]}
        if roles.segment_input is not None:
            values[roles.segment_input] = probe["types"]
        for name in graph.inputs:
            if name not in values and input_dtype(graph, name) is not None:
                values[name] = probe["mask"]
        want = evaluate(graph, [ln.output], values, shape)[0]
        got = layer(probe["ids"], probe.get("types"))
        if got.shape != want.shape:
            raise ValueError(f"{describe(ln.node)}: the layer gives shape {got.shape}, the graph {want.shape}")
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        scale = max(1.0, float(np.max(np.abs(want))))
        if not np.isfinite(diff) or diff > tolerance * scale:
            raise ValueError(
                f"{describe(ln.node)}: the extracted layer differs from the graph's embeddings by {diff:.3g} "
                f"(shape {shape}, position rule {roles.rule}); the split is refused"
            )
        worst = max(worst, diff)
    return worst
