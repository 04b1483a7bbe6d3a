"""Type stub for the compiled kernel ``bertembed._kernel``.

Every function trusts its arguments; the checks live in ``bertembed._api``
(and, for the fast path, in :class:`Plan`, which declines what it does not check).
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

_Ids = npt.NDArray[np.int32] | npt.NDArray[np.int64]
_Term = tuple[np.ndarray, int, _Ids | None, int]

def openmp_enabled() -> bool: ...
def build_info() -> dict[str, object]: ...
def max_threads() -> int: ...
def set_max_threads(n: int) -> None: ...
def release_threads() -> int: ...
def set_serial_only(flag: bool) -> None: ...
def in_flight() -> int: ...
def last_auto_threads() -> int: ...
def auto_threads_settings(min_parallel: int | None = None, learning: bool | None = None) -> tuple[int, bool]: ...
def auto_threads_state() -> dict[int, tuple[int, int, int, int, int, int]]: ...
def reset_auto_threads() -> None: ...
def choose_threads(elements: int, share: int) -> tuple[int, int]: ...
def record_threads(elements: int, arm: int, seconds: float) -> None: ...
def first_out_of_range(ids: _Ids, rows: int) -> int: ...
def padding_positions(ids: _Ids, padding_idx: int, out: _Ids) -> int: ...
def convert_rows(
    src: np.ndarray,
    src_kind: int,
    src_scale: np.ndarray | None,
    dst: np.ndarray,
    dst_kind: int,
    dst_scale: np.ndarray | None,
    start: int,
    stop: int,
    num_threads: int,
) -> tuple[int, int]: ...
def embed(
    token_ids: _Ids,
    tok: np.ndarray,
    tok_kind: int,
    tok_scale: npt.NDArray[np.float32] | None,
    terms: tuple[_Term, ...],
    w32: npt.NDArray[np.float32] | None,
    b32: npt.NDArray[np.float32] | None,
    w64: npt.NDArray[np.float64] | None,
    b64: npt.NDArray[np.float64] | None,
    eps: float,
    keep: npt.NDArray[np.uint8] | None,
    out: np.ndarray,
    out_kind: int,
    wide: bool,
    num_threads: int,
    stream: bool,
) -> None: ...

class Plan:
    def __init__(
        self,
        tok: Any,
        pos: Any,
        seg: Any,
        task: Any,
        ln: tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None] | None,
        eps: float,
        rule: int,
        offset: int,
        padding_idx: int | None,
        out_dtype: np.dtype,
        out_kind: int,
        wide: bool,
        big_empty: Callable[[tuple[int, ...], np.dtype], np.ndarray],
        big_bytes: int,
    ) -> None: ...
    def run(self, token_ids: Any, segment_ids: Any, num_threads: int, stream_min_bytes: int) -> np.ndarray | None: ...
