"""ONNX Runtime's fused embedding ops for onnx's reference evaluator (so onnxruntime is not needed),
and standard ops whose reference implementation the split cannot use.

Only the first output of the fused ops matters to the split (the normalised
embeddings); the others are computed as ONNX Runtime documents them.
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


def gather_elements(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    """ONNX's ``GatherElements``: ``out[i][j] = data[i][indices[i][j]]`` for axis 1 (likewise for any axis).

    `axis` may be negative (counted from the back, in ``[-r, r-1]``); an index
    may be negative (``-s`` is the first of `s` entries along the axis). An
    index outside ``[-s, s-1]`` is an error (ONNX: "it is an error if any of
    the index values are out of bounds"), never wrapped. As in ONNX Runtime
    (and ``torch.gather``), `indices` has the rank of `data` and, on every
    other axis, at most its size: the output has the shape of `indices` and
    reads the leading part of `data` there.
    """
    data = np.asarray(data)
    indices = np.asarray(indices)
    rank = data.ndim
    if rank < 1:
        raise ValueError("GatherElements: data is a scalar (rank 0)")
    if indices.ndim != rank:
        raise ValueError(f"GatherElements: indices of rank {indices.ndim} for data of rank {rank}")
    if not -rank <= axis < rank:
        raise ValueError(f"GatherElements: axis {axis} outside [{-rank}, {rank - 1}]")
    axis %= rank
    if indices.dtype.kind not in "iu":
        raise TypeError(f"GatherElements: indices of type {indices.dtype}, not integers")
    for d in range(rank):
        if d != axis and indices.shape[d] > data.shape[d]:
            raise ValueError(
                f"GatherElements: indices of shape {indices.shape} for data of shape {data.shape} "
                f"(dimension {d} larger than the data's, axis {axis})"
            )
    size = data.shape[axis]
    if indices.size:
        low, high = int(indices.min()), int(indices.max())
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(f"GatherElements: index {bad} out of range [{-size}, {size - 1}] (axis {axis})")
    index = indices.astype(np.intp)
    index = np.where(index < 0, index + size, index)
    window = tuple(slice(None) if d == axis else slice(0, indices.shape[d]) for d in range(rank))
    return np.take_along_axis(data[window], index, axis=axis)


class GatherElements(OpRun):
    """``GatherElements`` by :func:`gather_elements`.

    onnx's reference implementation uses ``np.choose``, one array per entry
    along the axis, under NumPy's limit on arrays per call (32 before NumPy
    2, 64 from it: 63 entries with NumPy 2.4); its fallback for a longer
    axis reads one entry per row. It fails on the 514-wide token-type buffer that
    transformers' BERT, RoBERTa and XLM-RoBERTa gather from when exported
    without ``token_type_ids``. It also wraps an out-of-range index
    (``mode="wrap"``) where ONNX calls it an error.
    """

    op_domain = ""

    def _run(self, data, indices, axis=None):  # type: ignore[no-untyped-def]
        return (gather_elements(data, indices, 0 if axis is None else int(axis)),)


OPS = [*OPS, GatherElements]
