"""Type stub for the compiled kernel ``bertembed._core._kernel`` (checked by ``mypy.stubtest``).

The shim (``bertembed._core.embed``) normalises a call's inputs into a :class:`Call`; :meth:`Plan.embed`
checks its ids and computes it. The numbers below are the C's (``csrc/be_kinds.h``, ``be_check.h``,
``be_threads.h``), declared to Cython once, in ``_kernel.pxd``.
"""

from typing import final

import numpy as np
import numpy.typing as npt

from .embed import Output
from .positions import PositionRule
from .tables import Table, Tables

_Ids = npt.NDArray[np.int32] | npt.NDArray[np.int64]

# Storage kinds of tables and results (be_kinds.h).
KIND_F32: int
KIND_F64: int
KIND_F16: int
KIND_BF16: int
KIND_I8: int
# Position rules (be_kinds.h).
RULE_ABSOLUTE: int
RULE_PADDING: int
RULE_NONE: int
# Instruction sets of the row kernels (be_kinds.h); knobs.ISA_NAMES names them.
ISA_BASELINE: int
ISA_AVX2: int
ISA_AVX512: int
ISA_NEON: int
ISA_COUNT: int
# What a failed check of a call's ids found (be_check.h).
IDS_OK: int
BAD_ABSOLUTE: int
BAD_TOKEN: int
BAD_DROPPED: int
BAD_POSITION: int
BAD_PADDING: int
BAD_SEGMENT: int
BAD_TASK: int
ELEMENTS_PER_THREAD: int

def openmp_enabled() -> bool: ...
def build_info() -> dict[str, object]: ...
def max_threads() -> int: ...
def max_threads_unclipped() -> int: ...
def set_max_threads(n: int) -> None: ...
def release_threads() -> int: ...
def last_auto_threads() -> int: ...
def set_serial_only(flag: bool) -> None: ...
def set_thread_limits(ceiling: int, process_threads: int) -> None: ...
def thread_limits() -> tuple[int, int]: ...
def first_out_of_range(ids: _Ids, rows: int) -> int: ...
def padding_positions(ids: _Ids, padding_idx: int, out: _Ids) -> int: ...

@final
class Call:
    """One call's inputs in the kernel's form, and what its check found."""

    @property
    def token_ids(self) -> _Ids: ...
    @property
    def position_ids(self) -> _Ids | None: ...
    @property
    def segment_ids(self) -> _Ids | None: ...
    @property
    def task_type_ids(self) -> _Ids | None: ...
    @property
    def keep(self) -> npt.NDArray[np.uint8] | None: ...
    @property
    def out(self) -> np.ndarray | None: ...
    @property
    def flat(self) -> bool: ...
    @property
    def num_threads(self) -> int: ...
    @property
    def inputs(self) -> object: ...
    @property
    def error(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def value(self) -> int: ...
    def __init__(
        self,
        token_ids: _Ids,
        position_ids: _Ids | None,
        segment_ids: _Ids | None,
        task_type_ids: _Ids | None,
        keep: npt.NDArray[np.uint8] | None,
        out: np.ndarray | None,
        flat: bool,
        num_threads: int,
        inputs: object = None,
    ) -> None: ...

@final
class Plan:
    """Tables, a position rule and a result dtype bound to the kernel once."""

    @property
    def tables(self) -> Tables: ...
    @property
    def rule(self) -> PositionRule: ...
    @property
    def output(self) -> Output: ...
    def __init__(self, tables: Tables, rule: PositionRule, output: Output) -> None: ...
    def given(self, token_ids: object, segment_ids: object, num_threads: int, inputs: object = None) -> Call | None: ...
    def run(self, token_ids: object, segment_ids: object, num_threads: int) -> np.ndarray | None: ...
    def embed(self, call: Call) -> np.ndarray: ...

def convert_rows(src: Table, dst: Table, start: int, stop: int, num_threads: int) -> tuple[int, int]: ...

# For tests and diagnostics only: nothing in the package calls these.
def in_flight() -> int: ...
def auto_threads(elements: int, busy: int = ...) -> int: ...
def auto_threads_settings(elements_per_thread: int | None = None) -> int: ...
