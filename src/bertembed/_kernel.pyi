"""Type stub for the compiled kernel ``bertembed._kernel``.

Every function trusts its arguments; the checks live in ``bertembed._api``.
"""

import numpy as np
import numpy.typing as npt

_Ids = npt.NDArray[np.int32] | npt.NDArray[np.int64]
_Table = npt.NDArray[np.float32] | npt.NDArray[np.float64]

def openmp_enabled() -> bool: ...
def build_info() -> dict[str, object]: ...
def max_threads() -> int: ...
def release_threads() -> int: ...
def first_out_of_range(ids: _Ids, rows: int) -> int: ...
def embed(
    token_ids: _Ids,
    position_ids: _Ids,
    segment_ids: _Ids,
    tok: _Table,
    pos: _Table,
    seg: _Table,
    has_seg: bool,
    ln_weight: npt.NDArray[np.float64],
    ln_bias: npt.NDArray[np.float64],
    ln_weight32: npt.NDArray[np.float32],
    ln_bias32: npt.NDArray[np.float32],
    eps: float,
    out: _Table,
    num_threads: int,
    stream: bool,
) -> None: ...
