"""The harness's data types: a case, its inputs, a peer, a variant; the inputs themselves.

Of the harness it imports only :mod:`~bertembed._bench.timing` (a peer's
builder returns a :class:`~bertembed._bench.timing.Contender`). Only NumPy
is needed; ``ml_dtypes`` only for a case with bfloat16 tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import dtypes
from .timing import Contender, Fn

#: BERT's LayerNorm epsilon, used by every contender.
LN_EPS = 1e-12

#: The scenarios a run can measure in, with the sentence that labels their tables.
SCENARIOS: dict[str, str] = {
    "isolated": "isolated: each contender timed alone in its own fresh process (no spinning neighbours)",
    "shared-process": "shared process: all contenders interleaved in one process, next to a runtime that spins",
}


@dataclass(frozen=True)
class Case:
    """One benchmark shape.

    Parameters
    ----------
    name : str
        Label in tables and JSON.
    dtype : {"float64", "float32"}
        Dtype of the result (and of the tables, unless ``table_dtype``).
    layer_norm : bool
        Fused LayerNorm after the sum.
    batch, seq : int
        Shape of the ids, (B, S).
    out : bool
        bertembed writes into a preallocated ``out=`` buffer.
    V, P, H : int
        Token rows, position rows and hidden size (BERT-base by default).
    table_dtype : str, optional
        Dtype of the token, position and segment tables when it differs from
        ``dtype`` (``"bfloat16"``: ``ml_dtypes.bfloat16`` arrays rounded from
        the ``dtype`` tables). The LayerNorm parameters stay ``dtype``.
        ``"int8"``: the inputs keep ``dtype`` tables and bertembed's layer
        quantises its token table (``table_dtype="int8"``) when it is built.
    id_sets : int, default 1
        bertembed's calls cycle through this many different (B, S) arrays of
        random ids (the first one is ``ids``, the one every contender is
        checked on), so that the rows a call reads were not read by the
        calls just before it: the table, not the rows of one batch, is what
        must fit in the cache.
    isa : str, optional
        The row kernel (``BERTEMBED_ISA``: ``baseline``, ``avx2``,
        ``avx512``, ``neon``) the case is measured with: its processes run
        with that variable set, and a process whose kernel is another (the
        CPU or the build lacks it) reports the case as unavailable. None:
        the kernel the process picks.
    """

    name: str
    dtype: str
    layer_norm: bool
    batch: int
    seq: int
    out: bool = False
    V: int = 30522
    P: int = 512
    H: int = 768
    table_dtype: str | None = None
    id_sets: int = 1
    isa: str | None = None

    @property
    def result_bytes(self) -> int:
        """Size of one result, in bytes."""
        return self.batch * self.seq * self.H * np.dtype(self.dtype).itemsize


@dataclass
class Inputs:
    """Tables and ids of one case (tables shared by cases of the same dtypes)."""

    tok: np.ndarray
    pos: np.ndarray
    seg: np.ndarray
    ln_weight: np.ndarray
    ln_bias: np.ndarray
    ids: np.ndarray
    segment_ids: np.ndarray
    #: (id_sets, B, S): every id set of the case, ``ids`` first.
    id_sets: np.ndarray | None = None


@dataclass
class Context:
    """What a peer's builder gets besides the case: its thread count, caches, cleanups."""

    threads: int
    stack: contextlib.ExitStack
    cache: dict[Any, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Peer:
    """A contender compared with bertembed.

    ``build(case, inputs, context)`` returns a no-argument callable doing one
    call (and returning its result as an array-like), or a
    :class:`~bertembed._bench.timing.Contender`; it raises ImportError when its library is missing.
    ``checked=False`` skips the comparison with bertembed's output (for
    yardsticks that do other work, like a copy or a gather). ``threaded``
    peers are measured at 1 and at T threads (``context.threads``), and the
    faster one is their figure; the others run on one thread.
    """

    name: str
    applies: Callable[[Case], bool]
    build: Callable[[Case, Inputs, Context], Fn | Contender]
    checked: bool = True
    threaded: bool = False


#: bertembed's name as a contender (at its automatic thread choice in results).
BERTEMBED = "bertembed"
#: The name in results of bertembed at a fixed thread count (the faster of 1 and T).
BERTEMBED_T = "bertembed-fixed"


@dataclass(frozen=True)
class Variant:
    """One contender at one thread count: what one timing (one process, when isolated) measures.

    Parameters
    ----------
    contender : str
        :data:`BERTEMBED` or a peer's name.
    threads : int or None
        Threads it may use; None for bertembed's automatic choice.
    """

    contender: str
    threads: int | None

    @property
    def label(self) -> str:
        """``bertembed`` (automatic threads), ``bertembed@2``, ``torch@1``, ..."""
        if self.threads is None:
            return self.contender
        return f"{self.contender}@{self.threads}"


def _array_dtype(name: str) -> np.dtype:
    """The NumPy dtype of `name` tables (the registry's; ImportError for bfloat16 without ml_dtypes)."""
    try:
        return dtypes.array_dtype(name)
    except TypeError:
        raise ImportError("bfloat16 tables need the 'ml_dtypes' package") from None


def _tables(case: Case, seed: int, cache: dict[Any, Any]) -> tuple[np.ndarray, ...]:
    key = ("tables", case.dtype, case.V, case.P, case.H, seed)
    if key not in cache:
        rng = np.random.default_rng(seed)
        dt = np.dtype(case.dtype)
        arrays = []
        for shape, scale, shift in (
            ((case.V, case.H), 0.02, 0.0),
            ((case.P, case.H), 0.02, 0.0),
            ((2, case.H), 0.02, 0.0),
            ((case.H,), 0.1, 1.0),
            ((case.H,), 0.1, 0.0),
        ):
            arr = np.empty(shape, dt)
            rng.standard_normal(out=arr, dtype=dt)  # in place: no float64 temporary
            arr *= scale
            arr += shift
            arrays.append(arr)
        cache[key] = tuple(arrays)
    tables = cache[key]
    if case.table_dtype in (None, case.dtype) or dtypes.BY_NAME[case.table_dtype].quantised:
        return tables  # (int8: the layer quantises)
    low_key = (*key, case.table_dtype)
    if low_key not in cache:
        low = _array_dtype(case.table_dtype)
        cache[low_key] = (*(t.astype(low) for t in tables[:3]), *tables[3:])
    return cache[low_key]


def make_inputs(case: Case, seed: int = 0, cache: dict[Any, Any] | None = None) -> Inputs:
    """Random BERT-like tables and ids for ``case`` (fixed by ``seed``).

    Every process that calls this with the same case and seed gets the same
    values: that is how contenders timed in separate processes share inputs.

    Parameters
    ----------
    case : Case
    seed : int, default 0
    cache : dict, optional
        Tables already made for the same dtypes and shapes are reused from it.

    Returns
    -------
    Inputs
        int64 ids; segment ids 0 then 1 from a random split point per row.

    Examples
    --------
    >>> a = make_inputs(Case("tiny", "float32", True, 2, 4, V=10, P=8, H=3))
    >>> b = make_inputs(Case("tiny", "float32", True, 2, 4, V=10, P=8, H=3))
    >>> a.tok.shape, a.ids.shape, bool((a.tok == b.tok).all() and (a.ids == b.ids).all())
    ((10, 3), (2, 4), True)
    """
    tok, pos, seg, w, b = _tables(case, seed, {} if cache is None else cache)
    rng = np.random.default_rng([seed, case.batch, case.seq])
    ids = rng.integers(0, case.V, (case.batch, case.seq), dtype=np.int64)
    split = rng.integers(1, case.seq + 1, (case.batch, 1))
    sids = (np.arange(case.seq) >= split).astype(np.int64)
    sets = None
    if case.id_sets > 1:
        more = rng.integers(0, case.V, (case.id_sets - 1, case.batch, case.seq), dtype=np.int64)
        sets = np.concatenate([ids[None], more])
    return Inputs(tok, pos, seg, w, b, ids, sids, sets)
