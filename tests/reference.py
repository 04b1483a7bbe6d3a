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
    one_d = ids.ndim == 1
    ids = np.atleast_2d(ids).astype(np.int64)
    seq = ids.shape[1]
    tok = np.asarray(tok, dtype=np.float64)
    pos = np.asarray(pos, dtype=np.float64)
    if position_ids is None:
        pids = np.broadcast_to(np.arange(seq), ids.shape)
    else:
        pids = np.broadcast_to(np.asarray(position_ids, dtype=np.int64).reshape(-1, seq), ids.shape)
    assert ids.min(initial=0) >= 0 and ids.max(initial=0) < tok.shape[0]
    e = tok[ids] + pos[pids]
    if seg is not None:
        seg = np.asarray(seg, dtype=np.float64)
        sids = np.zeros_like(ids) if segment_ids is None else np.atleast_2d(np.asarray(segment_ids))
        e = e + seg[sids.astype(np.int64)]
    if ln_weight is not None:
        mean = e.mean(axis=-1, keepdims=True)
        var = ((e - mean) ** 2).mean(axis=-1, keepdims=True)
        e = (e - mean) / np.sqrt(var + ln_eps) * np.asarray(ln_weight, np.float64) + np.asarray(
            ln_bias, np.float64
        )
    if one_d:
        e = e[0]
    return e.astype(dtype)


def tolerance(dtype) -> dict[str, float]:
    """assert_allclose tolerances for a result of ``dtype``."""
    if np.dtype(dtype) == np.float32:
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": 1e-12, "atol": 1e-12}
