"""The public function ``bert_embeddings``: validate and normalise, then one kernel call."""

from __future__ import annotations

import functools
import threading
from typing import Any, NamedTuple

import numpy as np

from . import _checks as C
from . import _fork, _kernel
from ._pool import pool as _pool

#: Below this many output elements (B * S * H) one thread is used. Alone on
#: a quiet machine two threads win from about 2**15 elements
#: (``benchmarks/threshold.py``); but next to other runtimes whose idle
#: workers spin (torch, ONNX Runtime: a model after the embedding), waking a
#: worker costs about a millisecond, more than it saves below a few million
#: elements. Interleaved with NumPy, torch and ONNX Runtime, float32 +
#: LayerNorm took 1.03 ms on one thread and 2.01 ms on two at B=16 S=128
#: H=768 (1.6M elements), 3.0 against 3.8 ms at B=32 S=128 (3.1M), and
#: 11.3 against 9.9 ms at B=32 S=512 (12.6M). See README, "Threads".
PARALLEL_MIN_ELEMENTS = 1 << 22

#: LayerNorm results at least this big are written with non-temporal stores:
#: they would not fit in cache anyway, and streaming them saves the read of
#: every destination line (measured 10-15% faster for float32 B=32 S=512).
#: Plain sums are not streamed: there the extra copy through a row buffer
#: costs more than it saves (measured 12% slower for float64 B=32 S=512).
STREAM_MIN_BYTES = 16 << 20

_NO_LN = np.zeros(0, dtype=np.float64)
_NO_LN.flags.writeable = False
_NO_LN32 = np.zeros(0, dtype=np.float32)
_NO_LN32.flags.writeable = False

# The kernel's specialisations by (ids, token table, small tables, result)
# dtype: looked up directly, which is cheaper than Cython's fused dispatch.
_C_TYPES = {"int32_t": np.int32, "int64_t": np.int64, "float": np.float32, "double": np.float64}
_EMBED = {
    tuple(np.dtype(_C_TYPES[part]) for part in sig.split("|")): fn
    for sig, fn in _kernel.embed.__signatures__.items()
}


class Tables(NamedTuple):
    """Validated tables, ready for the kernel."""

    tok: np.ndarray
    pos: np.ndarray
    seg: np.ndarray | None
    ln_weight: np.ndarray
    ln_bias: np.ndarray
    ln_weight32: np.ndarray
    ln_bias32: np.ndarray
    eps: float

    @property
    def hidden(self) -> int:
        return int(self.tok.shape[1])


def prepare_tables(
    token_embeddings: Any,
    position_embeddings: Any,
    segment_embeddings: Any,
    ln_weight: Any,
    ln_bias: Any,
    ln_eps: Any,
) -> Tables:
    """Check the tables and LayerNorm parameters once; normalise them."""
    tok = C.as_table("token_embeddings", token_embeddings)
    pos = C.as_table("position_embeddings", position_embeddings)
    seg = None if segment_embeddings is None else C.as_table("segment_embeddings", segment_embeddings)
    hidden = tok.shape[1]
    for name, table in (("position_embeddings", pos), ("segment_embeddings", seg)):
        if table is not None and table.shape[1] != hidden:
            raise ValueError(
                f"hidden sizes differ: token_embeddings has shape {tok.shape}, "
                f"{name} has shape {table.shape}"
            )
    # Position and segment tables share one kernel type: if they differ, both
    # become float64 (they are small; the token table is never converted).
    if seg is not None and seg.dtype != pos.dtype:
        pos, seg = pos.astype(np.float64), seg.astype(np.float64)
    ln = C.as_ln_params(ln_weight, ln_bias, hidden)
    eps = C.as_eps(ln_eps)
    w, b, w32, b32 = ln if ln is not None else (_NO_LN, _NO_LN, _NO_LN32, _NO_LN32)
    return Tables(tok, pos, seg, w, b, w32, b32, eps)


@functools.lru_cache(maxsize=64)
def _arange(n: int, dtype: np.dtype) -> np.ndarray:
    arr = np.arange(n, dtype=dtype).reshape(1, n)
    arr.flags.writeable = False
    return arr


@functools.lru_cache(maxsize=64)
def _zeros(n: int, dtype: np.dtype) -> np.ndarray:
    arr = np.zeros((1, n), dtype=dtype)
    arr.flags.writeable = False
    return arr


class _InFlight:
    """How many calls are computing right now (any thread)."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __enter__(self) -> int:
        with self.lock:
            busy = self.count
            self.count += 1
        return busy

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.count -= 1


_in_flight = _InFlight()


def auto_threads(elements: int, busy: int = 0) -> int:
    """The automatic thread count for a result of ``elements`` values.

    One thread below ``PARALLEL_MIN_ELEMENTS``; otherwise the calling
    thread's OpenMP maximum, shared with the ``busy`` calls already running
    in other threads (so N concurrent requests never ask for N x T threads).
    """
    if elements < PARALLEL_MIN_ELEMENTS:
        return 1
    return max(1, _kernel.max_threads() // (1 + busy))


def embed_ids(
    t: Tables,
    token_ids: Any,
    segment_ids: Any,
    position_ids: Any,
    out: Any,
    dtype: np.dtype,
    num_threads: Any,
    originals: tuple[Any, ...] = (),
) -> np.ndarray:
    """Check the ids (and ``out``) against validated tables, then run the kernel."""
    nthreads = C.as_num_threads(num_threads)
    tok_ids = C.as_ids("token_ids", token_ids)
    if tok_ids.ndim not in (1, 2):
        raise ValueError(f"token_ids must be 1-D (S,) or 2-D (B, S), got shape {tok_ids.shape}")
    batch, seq = (1, tok_ids.shape[0]) if tok_ids.ndim == 1 else tok_ids.shape
    hidden = t.hidden

    seg_ids = None
    if segment_ids is not None:
        if t.seg is None:
            raise ValueError("segment_ids was given but there is no segment_embeddings table")
        seg_ids = C.as_ids("segment_ids", segment_ids)
        if seg_ids.shape != tok_ids.shape:
            raise ValueError(
                f"segment_ids has shape {seg_ids.shape}, token_ids has shape {tok_ids.shape}"
            )

    pos_ids = None
    if position_ids is not None:
        pos_ids = C.as_ids("position_ids", position_ids)
        allowed = {(seq,), (1, seq), (batch, seq)}
        if pos_ids.shape not in allowed:
            raise ValueError(
                f"position_ids has shape {pos_ids.shape}, expected (S,), (1, S) or (B, S) "
                f"with token_ids of shape {tok_ids.shape}"
            )
    elif seq > t.pos.shape[0]:
        raise ValueError(
            f"sequence length {seq} is larger than position_embeddings' {t.pos.shape[0]} rows"
        )

    shape = (*tok_ids.shape, hidden)
    if out is not None:
        C.check_out(
            out, shape, dtype,
            [token_ids, segment_ids, position_ids, *originals, t.tok, t.pos, t.seg],
        )
    if batch * seq == 0:
        return out if out is not None else np.empty(shape, dtype)

    kdt = C.id_dtype(tok_ids, seg_ids, pos_ids)
    tk = C.ids_for_kernel("token_ids", tok_ids, t.tok.shape[0], "token_embeddings", kdt)
    if tk.ndim == 1:
        tk = tk.reshape(batch, seq)
    if pos_ids is None:
        pk = _arange(seq, kdt)
    else:
        pk = C.ids_for_kernel("position_ids", pos_ids, t.pos.shape[0], "position_embeddings", kdt)
        pk = pk.reshape(-1, seq)
    if t.seg is None:
        gk, seg_table = pk, t.pos  # not read by the kernel
    elif seg_ids is None:
        if t.seg.shape[0] == 0:
            raise IndexError("segment_ids (default 0) is out of range for segment_embeddings with 0 rows")
        gk, seg_table = _zeros(seq, kdt), t.seg
    else:
        gk = C.ids_for_kernel("segment_ids", seg_ids, t.seg.shape[0], "segment_embeddings", kdt)
        gk, seg_table = gk.reshape(batch, seq), t.seg

    rows = batch * seq
    result = out if out is not None else _pool.empty(shape, dtype)
    kernel = _EMBED[(kdt, t.tok.dtype, t.pos.dtype, result.dtype)]
    with _in_flight as busy:
        nt = auto_threads(rows * hidden, busy) if nthreads is None else nthreads
        nt = 1 if _fork.serial_only() else min(nt, rows)
        kernel(
            tk, pk, gk, t.tok, t.pos, seg_table, t.seg is not None,
            t.ln_weight, t.ln_bias, t.ln_weight32, t.ln_bias32, t.eps,
            result.reshape(rows, hidden), nt, t.ln_weight.shape[0] > 0 and result.nbytes >= STREAM_MIN_BYTES,
        )
    return result


def bert_embeddings(
    token_ids: Any,
    segment_ids: Any,
    token_embeddings: Any,
    position_embeddings: Any,
    segment_embeddings: Any,
    *,
    position_ids: Any = None,
    ln_weight: Any = None,
    ln_bias: Any = None,
    ln_eps: float = 1e-12,
    out: np.ndarray | None = None,
    dtype: Any = None,
    num_threads: int | None = None,
) -> np.ndarray:
    """BERT input embeddings: token + position + segment rows, optionally LayerNorm.

    ``E[b, s] = token_embeddings[token_ids[b, s]]
    + position_embeddings[position_ids[b, s]] + segment_embeddings[segment_ids[b, s]]``,
    computed in one pass without temporaries, the GIL released.

    Parameters
    ----------
    token_ids : array_like of int, shape (B, S) or (S,)
        Vocabulary ids. Any integer dtype; bool, float, complex, object and
        str are a TypeError. An id outside ``[0, rows)`` is an IndexError
        (negative ids never wrap).
    segment_ids : array_like of int or None
        Same shape as `token_ids`: 0 for sentence A (including [CLS] and the
        first [SEP]), 1 for sentence B. None means all zeros.
    token_embeddings, position_embeddings : array_like, shape (rows, H)
        float32 or float64 tables (float16 is widened to float32; lists
        become float64; other dtypes are a TypeError).
    segment_embeddings : array_like, shape (rows, H), or None
        None leaves the segment term out (RoBERTa/DistilBERT style).
    position_ids : array_like of int, shape (S,), (1, S) or (B, S), optional
        Default: ``0 .. S-1`` for every row.
    ln_weight, ln_bias : array_like, shape (H,), optional
        Both or neither: apply LayerNorm in the same pass (statistics in float64).
    ln_eps : float, default 1e-12
        LayerNorm epsilon, a finite positive number.
    out : numpy.ndarray, optional
        Writable C-contiguous result buffer of shape ``token_ids.shape + (H,)``,
        sharing no memory with any input. Untouched when an error is raised.
    dtype : {None, numpy.float32, numpy.float64}
        Result dtype. Default: `out`'s dtype if given, else float64.
    num_threads : int, optional
        OpenMP threads; None picks one thread for small inputs, else
        ``max_threads()`` (which honours OMP_NUM_THREADS and threadpoolctl).

    Returns
    -------
    numpy.ndarray
        Shape ``token_ids.shape + (H,)``; `out` itself when given.

    Examples
    --------
    >>> import numpy as np
    >>> from bertembed import bert_embeddings
    >>> tok = [[0.1, 0.2], [0.3, -0.1], [-0.2, 0.4], [0.5, 0.0]]
    >>> pos = [[0.0, 0.1], [0.1, 0.0], [0.2, -0.1], [-0.1, 0.2]]
    >>> seg = [[0.01, 0.02], [-0.03, 0.04]]
    >>> E = bert_embeddings([[0, 1, 2, 3]], [[0, 0, 1, 1]], tok, pos, seg)
    >>> E.shape, E.dtype
    ((1, 4, 2), dtype('float64'))
    >>> np.round(E, 2).tolist()
    [[[0.11, 0.32], [0.41, -0.08], [-0.03, 0.34], [0.37, 0.24]]]
    """
    tables = prepare_tables(
        token_embeddings, position_embeddings, segment_embeddings, ln_weight, ln_bias, ln_eps
    )
    default = out.dtype if isinstance(out, np.ndarray) and out.dtype in C.FLOATS else np.dtype(np.float64)
    rdtype = C.as_result_dtype(dtype, default)
    return embed_ids(
        tables, token_ids, segment_ids, position_ids, out, rdtype, num_threads,
        originals=(token_embeddings, position_embeddings, segment_embeddings, ln_weight, ln_bias),
    )


def openmp_enabled() -> bool:
    """Whether the compiled kernel uses OpenMP.

    Examples
    --------
    >>> import bertembed
    >>> isinstance(bertembed.openmp_enabled(), bool)
    True
    """
    return bool(_kernel.openmp_enabled())


def max_threads() -> int:
    """The most OpenMP threads a call from this thread may use.

    ``omp_get_max_threads()`` of the calling thread: honours OMP_NUM_THREADS
    and threadpoolctl limits; 1 when built without OpenMP.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.max_threads() >= 1
    True
    """
    return int(_kernel.max_threads())
