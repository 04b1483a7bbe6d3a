"""``BertEmbeddings``: tables checked once, calls check only ids."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import _checks as C
from ._api import Tables, embed_ids, prepare_tables


class BertEmbeddings:
    """A BERT embedding layer: tables validated once, each call checks only ids.

    Parameters
    ----------
    token_embeddings, position_embeddings : array_like, shape (rows, H)
        float32/float64 tables (see :func:`bertembed.bert_embeddings` for the
        conversion rules). They are made contiguous once, here; a float32 or
        float64 C-contiguous table is kept as is (no copy, read-only is fine).
    segment_embeddings : array_like, shape (rows, H), optional
        None: no segment term.
    ln_weight, ln_bias : array_like, shape (H,), optional
        Both or neither: fused LayerNorm.
    ln_eps : float, default 1e-12
    dtype : {None, numpy.float32, numpy.float64}
        Default result dtype; None means the token table's dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from bertembed import BertEmbeddings
    >>> rng = np.random.default_rng(0)
    >>> layer = BertEmbeddings(rng.standard_normal((100, 8), dtype=np.float32),
    ...                        rng.standard_normal((16, 8), dtype=np.float32),
    ...                        rng.standard_normal((2, 8), dtype=np.float32))
    >>> layer.vocab_size, layer.max_positions, layer.type_vocab_size, layer.hidden_size
    (100, 16, 2, 8)
    >>> E = layer([[5, 6, 7]], [[0, 0, 1]])
    >>> E.shape, E.dtype
    ((1, 3, 8), dtype('float32'))
    """

    def __init__(
        self,
        token_embeddings: Any,
        position_embeddings: Any,
        segment_embeddings: Any = None,
        *,
        ln_weight: Any = None,
        ln_bias: Any = None,
        ln_eps: float = 1e-12,
        dtype: Any = None,
    ) -> None:
        self._tables: Tables = prepare_tables(
            token_embeddings, position_embeddings, segment_embeddings, ln_weight, ln_bias, ln_eps
        )
        self._dtype = C.as_result_dtype(dtype, self._tables.tok.dtype)
        self._source: str | None = None  # checkpoint path, for cheap pickling

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *, dtype: Any = None) -> BertEmbeddings:
        """Load the embedding layer of a Hugging Face BERT checkpoint.

        The safetensors file is memory-mapped read-only: float32 and float64
        tables are views of the file, never copied (F16 and BF16 tables are
        widened to float32 copies). Only NumPy is needed.

        Parameters
        ----------
        path : str or os.PathLike
            A model directory with ``config.json`` (for ``layer_norm_eps``) and
            ``model.safetensors``, or a ``.safetensors`` file (``layer_norm_eps``
            is then 1e-12).
        dtype : {None, numpy.float32, numpy.float64}
            Result dtype; None means the tables' dtype. The tables themselves
            are never converted (float32 tables are summed in float64 for a
            float64 result).

        Returns
        -------
        BertEmbeddings
            A layer with LayerNorm fused. Pickling it stores only `path` and
            `dtype`; unpickling maps the file again.

        Raises
        ------
        FileNotFoundError, ValueError, KeyError, TypeError
            A missing file, a truncated or malformed file, a missing tensor,
            a table that is not a float tensor; each message names the file
            (and the tensor).

        Notes
        -----
        Tensor names are ``BertModel``'s (``embeddings.word_embeddings.weight``,
        ``embeddings.position_embeddings.weight``,
        ``embeddings.token_type_embeddings.weight``, ``embeddings.LayerNorm.weight``
        and ``.bias``, or the old ``.gamma`` and ``.beta``), with or without a
        prefix such as ``bert.``. Without a token-type table there is no
        segment term. With the default position ids (0..S-1) the result equals
        ``transformers.BertModel.from_pretrained(path).eval().embeddings``.

        Examples
        --------
        >>> import numpy as np
        >>> from bertembed import BertEmbeddings
        >>> layer = BertEmbeddings.from_pretrained("bert-base-uncased/")  # doctest: +SKIP
        >>> layer.vocab_size, layer.hidden_size, layer.dtype  # doctest: +SKIP
        (30522, 768, dtype('float32'))
        >>> layer([[101, 7592, 2088, 102]], [[0, 0, 0, 0]]).shape  # doctest: +SKIP
        (1, 4, 768)
        """
        from ._pretrained import load

        return load(cls, path, dtype=dtype)

    def _fingerprint(self) -> tuple[int, int, int, int, bool, float]:
        """What must not change between pickling and unpickling a loaded layer."""
        return (
            self.vocab_size, self.max_positions, self.type_vocab_size, self.hidden_size,
            self.has_layer_norm, self._tables.eps,
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle a loaded layer as its checkpoint path, other layers as their tables.

        A layer from :meth:`from_pretrained` pickles to a few hundred bytes
        (path, dtype and a shape check) and maps the file again when unpickled,
        so the file must exist at the same absolute path there. A layer built
        from arrays pickles its validated tables.
        """
        if self._source is not None:
            from ._pretrained import reopen

            return reopen, (type(self), self._source, self._dtype.name, self._fingerprint())
        t = self._tables
        ln = (np.asarray(t.ln_weight), np.asarray(t.ln_bias)) if self.has_layer_norm else (None, None)
        seg = None if t.seg is None else np.asarray(t.seg)
        tables = (np.asarray(t.tok), np.asarray(t.pos), seg, *ln, t.eps)
        return _rebuild, (type(self), tables, self._dtype.name)

    def __call__(
        self,
        token_ids: Any,
        segment_ids: Any = None,
        *,
        position_ids: Any = None,
        out: np.ndarray | None = None,
        num_threads: int | None = None,
    ) -> np.ndarray:
        """Embed ``token_ids`` (shape (B, S) or (S,)); see :func:`bertembed.bert_embeddings`.

        Examples
        --------
        >>> import numpy as np
        >>> from bertembed import BertEmbeddings
        >>> layer = BertEmbeddings(np.eye(4), np.zeros((8, 4)))
        >>> layer([2, 0]).tolist()
        [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
        """
        return embed_ids(
            self._tables, token_ids, segment_ids, position_ids, out, self._dtype, num_threads
        )

    @property
    def vocab_size(self) -> int:
        """Rows of the token table."""
        return int(self._tables.tok.shape[0])

    @property
    def max_positions(self) -> int:
        """Rows of the position table."""
        return int(self._tables.pos.shape[0])

    @property
    def type_vocab_size(self) -> int:
        """Rows of the segment table (0 without one)."""
        return 0 if self._tables.seg is None else int(self._tables.seg.shape[0])

    @property
    def hidden_size(self) -> int:
        """H, the width of every table."""
        return self._tables.hidden

    @property
    def dtype(self) -> np.dtype:
        """The result dtype of a call."""
        return self._dtype

    @property
    def has_layer_norm(self) -> bool:
        """Whether LayerNorm is fused into each call."""
        return self._tables.ln_weight.shape[0] > 0

    def __repr__(self) -> str:
        return (
            f"BertEmbeddings(vocab_size={self.vocab_size}, max_positions={self.max_positions}, "
            f"type_vocab_size={self.type_vocab_size}, hidden_size={self.hidden_size}, "
            f"dtype={self.dtype}, layer_norm={self.has_layer_norm})"
        )


def _rebuild(cls: type[BertEmbeddings], tables: tuple[Any, ...], dtype: str) -> BertEmbeddings:
    """Unpickle a layer built from arrays."""
    tok, pos, seg, ln_weight, ln_bias, eps = tables
    return cls(tok, pos, seg, ln_weight=ln_weight, ln_bias=ln_bias, ln_eps=eps, dtype=dtype)
