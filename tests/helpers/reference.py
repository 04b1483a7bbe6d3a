"""A plain-NumPy reference of BERT input embeddings, for comparisons in tests."""

from __future__ import annotations

import numpy as np


def reference(
    token_ids,
    segment_ids,
    tok,
    pos,
    seg,
    position_ids=None,
    ln_weight=None,
    ln_bias=None,
    ln_eps=1e-12,
    dtype=np.float64,
):
    """The obvious NumPy expression, computed in float64, then cast to ``dtype``.

    Ids are checked to be in range first (NumPy would wrap negatives).
    """
    ids = np.asarray(token_ids)
    assert ids.min(initial=0) >= 0 and ids.max(initial=0) < np.shape(tok)[0]
    e = twin(
        ids,
        np.asarray(tok, dtype=np.float64),
        pos=np.asarray(pos, dtype=np.float64),
        position_ids=position_ids,
        seg=None if seg is None else np.asarray(seg, dtype=np.float64),
        segment_ids=segment_ids,
        ln_weight=ln_weight,
        ln_bias=ln_bias,
        ln_eps=ln_eps,
    )
    if ids.ndim == 1:
        e = e[0]
    return e.astype(dtype)


def tolerance(dtype) -> dict[str, float]:
    """assert_allclose tolerances for a result of ``dtype``."""
    if np.dtype(dtype) == np.float32:
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": 1e-12, "atol": 1e-12}


def values64(table, scale=None) -> np.ndarray:
    """A table's values in float64: float16/float32/float64 as they are,
    bfloat16 (ml_dtypes, or uint16 bits) widened exactly, int8 times its
    per-row scale."""
    arr = np.asarray(table)
    if arr.dtype.name == "bfloat16" or (arr.dtype == np.uint16 and scale is None):
        return (arr.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if arr.dtype == np.int8:
        qs = np.asarray(scale, np.float64)  # (rows, 2): scale and offset
        return arr.astype(np.float64) * qs[:, :1] + qs[:, 1:]
    return arr.astype(np.float64)


def twin(
    token_ids,
    tok,
    *,
    pos=None,
    position_ids=None,
    seg=None,
    segment_ids=None,
    task=None,
    task_type_ids=None,
    ln_weight=None,
    ln_bias=None,
    ln_eps=1e-12,
    keep=None,
    tok_scale=None,
) -> np.ndarray:
    """Every term the kernel can add, in float64 (the plain twin of the kernel).

    ``position_ids`` default 0..S-1 (when there is a position table);
    segment and task ids default 0; ``keep`` (B, S): rows with 0 are zeros.
    """
    ids = np.atleast_2d(np.asarray(token_ids)).astype(np.int64)
    b, s = ids.shape
    e = values64(tok, tok_scale)[ids]
    if e.size == 0:
        return e
    if pos is not None:
        pids = np.arange(s) if position_ids is None else np.asarray(position_ids, np.int64)
        e = e + values64(pos)[np.broadcast_to(pids.reshape(-1, s), (b, s))]
    for table, tids in ((seg, segment_ids), (task, task_type_ids)):
        if table is not None:
            t = np.zeros((b, s), np.int64) if tids is None else np.atleast_2d(np.asarray(tids, np.int64))
            e = e + values64(table)[t]
    if ln_weight is not None:
        mean = e.mean(axis=-1, keepdims=True)
        var = ((e - mean) ** 2).mean(axis=-1, keepdims=True)
        e = (e - mean) / np.sqrt(var + ln_eps) * np.asarray(ln_weight, np.float64)
        if ln_bias is not None:
            e = e + np.asarray(ln_bias, np.float64)
    if keep is not None:
        e = np.where(np.atleast_2d(np.asarray(keep))[..., None] != 0, e, 0.0)
    return e


def result_tolerance(dtype) -> dict[str, float]:
    """assert_allclose tolerances for results of ``dtype`` against :func:`twin`
    (float32 arithmetic, then rounding to the result dtype)."""
    name = np.dtype(dtype).name
    if name == "float16":
        return {"rtol": 2.0**-10, "atol": 2.0**-14}
    if name == "bfloat16":
        return {"rtol": 2.0**-7, "atol": 1e-6}
    return tolerance(dtype)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (N, D) arrays, in their dtype's precision."""
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
