"""A plain-NumPy twin of every family's embedding module, driven by an EmbeddingSpec.

The tests' reference (not shipped code): it reads the rule written in
``bertembed._checkpoints.families`` and computes it the obvious way, in float64, so that
both the spec (against transformers) and the kernel (against this twin) can be
checked.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from bertembed._checkpoints.families import ABSOLUTE, NONE, PADDING, EmbeddingSpec


def find_prefix(spec: EmbeddingSpec, tensors: Mapping[str, np.ndarray]) -> str:
    """The first of ``spec.prefixes`` under which the token table exists."""
    for prefix in spec.prefixes:
        if prefix + spec.token in tensors:
            return prefix
    raise KeyError(f"no {spec.token!r} under any of the prefixes {spec.prefixes}")


def _table(tensors: Mapping[str, np.ndarray], prefix: str, names: tuple[str, ...]) -> np.ndarray:
    for name in names:
        if prefix + name in tensors:
            return np.asarray(tensors[prefix + name], dtype=np.float64)
    raise KeyError(f"none of {[prefix + n for n in names]} in the tensors")


def twin_position_ids(spec: EmbeddingSpec, input_ids) -> np.ndarray | None:
    """The position ids the family's module uses when none are given (None: no position term)."""
    ids = np.asarray(input_ids)
    if spec.position_rule == NONE:
        return None
    if spec.position_rule == ABSOLUTE:
        positions = np.arange(ids.shape[-1], dtype=np.int64) + spec.position_offset
        return np.broadcast_to(positions, ids.shape).copy()
    if spec.position_rule == PADDING:
        real = ids != spec.padding_idx
        return np.where(real, spec.padding_idx + np.cumsum(real, axis=-1), spec.padding_idx).astype(np.int64)
    raise ValueError(f"unknown position rule {spec.position_rule!r}")


def twin_embeddings(
    spec: EmbeddingSpec,
    tensors: Mapping[str, np.ndarray],
    input_ids,
    token_type_ids=None,
    *,
    task_type_ids=None,
    position_ids=None,
    attention_mask=None,
) -> np.ndarray:
    """The family's embeddings of `input_ids` (B, S), in float64.

    Raises
    ------
    ValueError
        Ids were given for a term the family does not have.
    """
    ids = np.asarray(input_ids, dtype=np.int64)
    prefix = find_prefix(spec, tensors)
    out = _table(tensors, prefix, (spec.token,))[ids]

    if spec.segment is not None:
        types = np.zeros_like(ids) if token_type_ids is None else np.asarray(token_type_ids, dtype=np.int64)
        out = out + _table(tensors, prefix, (spec.segment,))[types]
    elif token_type_ids is not None:
        raise ValueError(f"{spec.model_type} has no segment (token type) table")

    if spec.position is not None:
        pids = twin_position_ids(spec, ids) if position_ids is None else np.asarray(position_ids, dtype=np.int64)
        out = out + _table(tensors, prefix, (spec.position,))[np.broadcast_to(pids, ids.shape)]
    # Without a position table, position_ids are for attention (rotary): not used here.

    if spec.task is not None:
        tasks = np.zeros_like(ids) if task_type_ids is None else np.asarray(task_type_ids, dtype=np.int64)
        out = out + _table(tensors, prefix, (spec.task,))[tasks]
    elif task_type_ids is not None:
        raise ValueError(f"{spec.model_type} has no task-type table")

    if spec.ln_weight is not None:
        mean = out.mean(axis=-1, keepdims=True)
        var = ((out - mean) ** 2).mean(axis=-1, keepdims=True)
        out = (out - mean) / np.sqrt(var + spec.ln_eps) * _table(tensors, prefix, spec.ln_weight)
        if spec.ln_bias is not None:
            out = out + _table(tensors, prefix, spec.ln_bias)

    if spec.zero_masked_rows and attention_mask is not None:
        out = out * np.asarray(attention_mask, dtype=np.float64)[..., None]
    return out
