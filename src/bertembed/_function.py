"""The public function ``bert_embeddings``: validate and normalise, then one kernel call."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core.dtypes import kind_of
from ._core.embed import embed_ids
from ._core.tables import prepare_tables
from ._core.validate import as_result_dtype


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
    tables = prepare_tables(token_embeddings, position_embeddings, segment_embeddings, ln_weight, ln_bias, ln_eps)
    default = out.dtype if isinstance(out, np.ndarray) and kind_of(out.dtype) is not None else np.dtype(np.float64)
    rdtype = as_result_dtype(dtype, default)
    return embed_ids(
        tables,
        token_ids,
        segment_ids,
        position_ids,
        out,
        rdtype,
        num_threads,
        originals=(token_embeddings, position_embeddings, segment_embeddings, ln_weight, ln_bias),
    )
