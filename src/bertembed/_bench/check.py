"""``mismatch``: is a peer's output the same as bertembed's (loosely)?"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._core import dtypes


def mismatch(expected: np.ndarray, got: Any, dtype: str) -> str | None:
    """None when ``got`` is close to ``expected`` (loosely), else a description."""
    got = np.asarray(got)
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    tol = 1e-7 if dtypes.BY_NAME[dtype].wide else 1e-3  # 1e-7 for float64 results, 1e-3 for float32 and narrower
    a, b = expected.reshape(-1), got.reshape(-1)
    worst, bad = 0.0, 0
    step = 1 << 20  # chunks: no full-size temporaries for 100 MB results
    for i in range(0, a.size, step):
        x = a[i : i + step].astype(np.float64)
        y = b[i : i + step].astype(np.float64)
        diff = np.abs(x - y)
        ok = diff <= tol + tol * np.abs(x)
        bad += int(ok.size - np.count_nonzero(ok))
        if diff.size:
            worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else math.inf)
    if bad:
        return f"{bad} of {a.size} values differ from bertembed's (max |diff| {worst:.3g})"
    return None
