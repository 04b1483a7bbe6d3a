"""ONNX Runtime's fused embedding ops for onnx's reference evaluator (so onnxruntime is not needed).

Only the first output matters to the split (the normalised embeddings); the
others are computed as ONNX Runtime documents them.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from .graph import MS_DOMAIN


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, eps: float) -> tuple[np.ndarray, ...]:
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=-1, keepdims=True)
    d = x32 - mean
    inv_std = 1.0 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + np.float32(eps))
    y = d * inv_std * gamma
    if beta is not None:
        y = y + beta
    return y.astype(x.dtype), mean, inv_std


class SkipLayerNormalization(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, skip, gamma, beta=None, bias=None, epsilon=None):  # type: ignore[no-untyped-def]
        s = x + skip
        if bias is not None:
            s = s + bias
        y, mean, inv_std = _layer_norm(s, gamma, beta, 1e-12 if epsilon is None else epsilon)
        return y, mean, inv_std, s


class EmbedLayerNormalization(OpRun):
    op_domain = MS_DOMAIN

    def _run(
        self,
        input_ids,
        segment_ids,
        word,
        position,
        segment,
        gamma,
        beta,
        mask=None,
        position_ids=None,
        epsilon=None,
        mask_index_type=None,
    ):  # type: ignore[no-untyped-def]
        s = word[input_ids]
        if position_ids is None:
            position_ids = np.arange(input_ids.shape[1])[None, :]
        s = s + position[position_ids]
        if segment_ids is not None and segment is not None:
            s = s + segment[segment_ids]
        y, _, _ = _layer_norm(s, gamma, beta, 1e-12 if epsilon is None else epsilon)
        if mask is None:
            index = np.zeros(input_ids.shape[0], np.int32)
        else:
            index = mask.astype(np.int32).sum(axis=1).astype(np.int32)
        return y, index, s


OPS = [SkipLayerNormalization, EmbedLayerNormalization]


class DequantizeLinear(OpRun):
    """Per-tensor ``(x - zero_point) * scale`` (onnx's reference evaluator has it from opset 19 only)."""

    op_domain = ""

    def _run(self, x, scale, zero_point=None, axis=None, block_size=None, output_dtype=None):  # type: ignore[no-untyped-def]
        zero = 0 if zero_point is None else zero_point.astype(np.int32)
        return ((x.astype(np.int32) - zero).astype(np.float32) * scale.astype(np.float32),)


OPS = [*OPS, DequantizeLinear]
