"""The public function ``bert_embeddings``: validate and normalise, then one kernel call."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _checks as C
from . import _fork, _kernel
from . import _positions as P
from . import _tables as T
from ._pool import pool as _pool
from ._positions import PositionRule
from ._tables import Table

_fork.install()

#: LayerNorm results at least this big are written with non-temporal stores:
#: they would not fit in cache anyway, and streaming them saves the read of
#: every destination line (measured 10-15% faster for float32 B=32 S=512).
#: Plain sums are not streamed: there the extra copy through a row buffer
#: costs more than it saves (measured 12% slower for float64 B=32 S=512).
STREAM_MIN_BYTES = 16 << 20



class Tables(NamedTuple):
    """Validated tables and LayerNorm parameters, ready for the kernel."""

    tok: Table
    pos: Table | None
    seg: Table | None
    task: Table | None
    ln: tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None] | None
    eps: float

    @property
    def hidden(self) -> int:
        return self.tok.hidden

    @property
    def wide(self) -> bool:
        """Whether a table is float64 (the rows are then computed in float64)."""
        return any(t is not None and t.kind == T.F64 for t in (self.tok, self.pos, self.seg, self.task))

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.tok, self.pos, self.seg, self.task) if t is not None)


def prepare_tables(
    token_embeddings: Any,
    position_embeddings: Any,
    segment_embeddings: Any,
    ln_weight: Any,
    ln_bias: Any,
    ln_eps: Any,
    task_embeddings: Any = None,
    table_dtype: str | None = None,
) -> Tables:
    """Check the tables and LayerNorm parameters once; normalise them.

    Tables may be arrays or :class:`Table` (already normalised, e.g. mapped
    from a checkpoint). `table_dtype` converts the token table (``int8``:
    quantised, the others kept) or every table (a float dtype).
    """
    tok = _table("token_embeddings", token_embeddings)
    pos = None if position_embeddings is None else _table("position_embeddings", position_embeddings)
    seg = None if segment_embeddings is None else _table("segment_embeddings", segment_embeddings)
    task = None if task_embeddings is None else _table("task_embeddings", task_embeddings)
    hidden = tok.hidden
    for name, table in (("position_embeddings", pos), ("segment_embeddings", seg), ("task_embeddings", task)):
        if table is not None and table.hidden != hidden:
            raise ValueError(
                f"hidden sizes differ: token_embeddings has shape {tok.data.shape}, "
                f"{name} has shape {table.data.shape}"
            )
    ln = C.as_ln_params(ln_weight, ln_bias, hidden)
    eps = C.as_eps(ln_eps)
    tables = Tables(tok, pos, seg, task, ln, eps)
    return tables if table_dtype is None else convert_tables(tables, table_dtype)


def convert_tables(
    tables: Tables, table_dtype: str, *, num_threads: int = 0, progress: T.Progress | None = None
) -> Tables:
    """`tables` stored as `table_dtype`: ``int8`` quantises the token table
    only (the others are kept), a float dtype converts every table. See
    :func:`bertembed._tables.convert`."""
    def conv(t: Table | None, name: str) -> Table | None:
        return None if t is None else T.convert(t, name, table_dtype, num_threads=num_threads, progress=progress)

    t = tables
    tok = conv(t.tok, "token_embeddings")
    if table_dtype == "int8":
        return t._replace(tok=tok)
    return t._replace(tok=tok, pos=conv(t.pos, "position_embeddings"), seg=conv(t.seg, "segment_embeddings"),
                      task=conv(t.task, "task_embeddings"))


def _table(name: str, value: Any) -> Table:
    return value if isinstance(value, Table) else T.as_table(name, value)


def _type_ids(
    name: str, value: Any, table: Table | None, table_name: str, shape: tuple[int, ...], tok_name: str,
) -> np.ndarray | None:
    """Segment or task ids: None, or an integer array of the token ids' shape."""
    if value is None:
        return None
    if table is None:
        raise ValueError(f"{name} was given but there is no {table_name} table")
    ids = C.as_ids(name, value)
    if ids.shape != shape:
        raise ValueError(f"{name} has shape {ids.shape}, {tok_name} has shape {shape}")
    return ids


def embed_ids(
    t: Tables,
    token_ids: Any,
    segment_ids: Any,
    position_ids: Any,
    out: Any,
    dtype: np.dtype,
    num_threads: Any,
    originals: tuple[Any, ...] = (),
    *,
    rule: PositionRule = P.ABSOLUTE,
    task_type_ids: Any = None,
    attention_mask: Any = None,
    zero_masked: bool = False,
    names: tuple[str, str] = ("token_ids", "segment_ids"),
) -> np.ndarray:
    """Check the ids (and ``out``) against validated tables, then run the kernel.

    `rule` numbers positions when `position_ids` is None. `attention_mask`
    is checked whenever given; with `zero_masked` its 0 positions give rows
    of zeros (DeBERTa's embedding module does this). `names`: what the caller
    called the token and segment ids (transformers' ``input_ids`` and
    ``token_type_ids``), for the error messages.
    """
    tok_name, seg_name = names
    nthreads = C.as_num_threads(num_threads)
    tok_ids = C.as_ids(tok_name, token_ids)
    if tok_ids.ndim not in (1, 2):
        raise ValueError(f"{tok_name} must be 1-D (S,) or 2-D (B, S), got shape {tok_ids.shape}")
    batch, seq = (1, tok_ids.shape[0]) if tok_ids.ndim == 1 else tok_ids.shape
    hidden = t.hidden

    seg_ids = _type_ids(seg_name, segment_ids, t.seg, "segment_embeddings", tok_ids.shape, tok_name)
    task_ids = _type_ids("task_type_ids", task_type_ids, t.task, "task_embeddings", tok_ids.shape, tok_name)

    pos_ids = None
    if position_ids is not None:
        if t.pos is None:
            raise ValueError("position_ids was given but there is no position_embeddings table")
        pos_ids = C.as_ids("position_ids", position_ids)
        allowed = {(seq,), (1, seq), (batch, seq)}
        if pos_ids.shape not in allowed:
            raise ValueError(
                f"position_ids has shape {pos_ids.shape}, expected (S,), (1, S) or (B, S) "
                f"with {tok_name} of shape {tok_ids.shape}"
            )
    elif t.pos is not None and rule.kind == "absolute" and seq + rule.offset > t.pos.rows:
        if rule.offset:
            raise ValueError(
                f"sequence length {seq} with positions from {rule.offset} needs "
                f"{seq + rule.offset} rows; position_embeddings has {t.pos.rows}"
            )
        raise ValueError(f"sequence length {seq} is larger than position_embeddings' {t.pos.rows} rows")
    keep = None
    if attention_mask is not None:
        keep = C.as_mask(attention_mask, tok_ids.shape, tok_name)
        keep = keep.reshape(batch, seq) if zero_masked else None

    shape = (*tok_ids.shape, hidden)
    if out is not None:
        C.check_out(
            out, shape, dtype,
            [token_ids, segment_ids, position_ids, task_type_ids, attention_mask, *originals,
             *(x.data for x in (t.tok, t.pos, t.seg, t.task) if x is not None)],
        )
    if batch * seq == 0:
        return out if out is not None else np.empty(shape, dtype)

    kdt = C.id_dtype(tok_ids, seg_ids, pos_ids, task_ids)
    if P.needs_int64(rule, seq):
        kdt = np.dtype(np.int64)
    tk = C.ids_for_kernel(tok_name, tok_ids, t.tok.rows, "token_embeddings", kdt).reshape(batch, seq)
    terms = []
    if t.pos is not None:
        if pos_ids is not None:
            pk = C.ids_for_kernel("position_ids", pos_ids, t.pos.rows, "position_embeddings", kdt)
            terms.append((t.pos.data, t.pos.kind, pk.reshape(-1, seq), -1))
        elif rule.kind == "padding":
            pk = P.padding_positions(tk, rule.padding_idx, t.pos.rows)
            terms.append((t.pos.data, t.pos.kind, pk, -1))
        else:  # rows offset + s, numbered by the kernel
            terms.append((t.pos.data, t.pos.kind, None, rule.offset))
    for table, ids, name, what in (
        (t.seg, seg_ids, seg_name, "segment_embeddings"),
        (t.task, task_ids, "task_type_ids", "task_embeddings"),
    ):
        if table is None:
            continue
        if ids is None:
            if table.rows == 0:
                raise IndexError(f"{name} (default 0) is out of range for {what} with 0 rows")
            terms.append((table.data, table.kind, None, -1))
        else:
            gk = C.ids_for_kernel(name, ids, table.rows, what, kdt)
            terms.append((table.data, table.kind, gk.reshape(batch, seq), -1))

    result = out if out is not None else _pool.empty(shape, dtype)
    out_kind = T.kind_of(result.dtype)
    ln = t.ln if t.ln is not None else (None, None, None, None)
    stream = t.ln is not None and result.nbytes >= STREAM_MIN_BYTES
    _kernel.embed(
        tk, t.tok.data, t.tok.kind, t.tok.scale, tuple(terms),
        ln[2], ln[3], ln[0], ln[1], t.eps, keep, result, out_kind,
        t.wide or out_kind == T.F64, 0 if nthreads is None else nthreads, stream,
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
    token_embeddings : array_like, shape (rows, H)
        float32, float64, float16 or bfloat16 (``ml_dtypes.bfloat16``)
        table, read as it is (never converted); lists become float64; other
        dtypes are a TypeError.
    position_embeddings : array_like, shape (rows, H), or None
        Same dtypes. None leaves the position term out (DeBERTa-v2, ModernBERT).
    segment_embeddings : array_like, shape (rows, H), or None
        Same dtypes. None leaves the segment term out (RoBERTa/DistilBERT style).
    position_ids : array_like of int, shape (S,), (1, S) or (B, S), optional
        Default: ``0 .. S-1`` for every row.
    ln_weight, ln_bias : array_like, shape (H,), optional
        Apply LayerNorm in the same pass (statistics in float64). A weight
        without a bias is a LayerNorm without bias; a bias alone is an error.
    ln_eps : float, default 1e-12
        LayerNorm epsilon, a finite positive number.
    out : numpy.ndarray, optional
        Writable C-contiguous result buffer of shape ``token_ids.shape + (H,)``,
        sharing no memory with any input. Untouched when an error is raised.
    dtype : {None, numpy.float32, numpy.float64, numpy.float16, "bfloat16"}
        Result dtype. Default: `out`'s dtype if given, else float64. Rows are
        computed in float64 when a table or the result is float64, else in
        float32.
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
    default = out.dtype if isinstance(out, np.ndarray) and T.kind_of(out.dtype) is not None else np.dtype(np.float64)
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
