"""``BertEmbeddings``: tables checked once, calls check only ids."""

from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _inputs
from ._core import dtypes, embed, positions, trim, validate
from ._core.embed import embed_ids
from ._core.positions import ABSOLUTE, NONE, PositionRule
from ._core.tables import Tables, prepare_tables, take_rows

if TYPE_CHECKING:
    from ._checkpoints import save

# The checkpoint code (readers, families, the saver) is imported by the
# methods that use it, not with the package: `import bertembed` stays cheap
# for a process that builds layers from arrays or maps a saved one later.


class BertEmbeddings:
    """A BERT embedding layer: tables validated once, each call checks only ids.

    Parameters
    ----------
    token_embeddings : array_like, shape (rows, H)
        float32, float64, float16 or bfloat16 (``ml_dtypes.bfloat16``) table
        (see :func:`bertembed.bert_embeddings` for the rules). Tables are made
        contiguous once, here; a C-contiguous table of one of these dtypes is
        kept as it is (no copy; read-only is fine).
    position_embeddings : array_like, shape (rows, H), or None
        None: no position term (the position rule is then ``"none"``).
    segment_embeddings : array_like, shape (rows, H), optional
        None: no segment term.
    ln_weight, ln_bias : array_like, shape (H,), optional
        Fused LayerNorm; a weight without a bias is a LayerNorm without bias.
    ln_eps : float, default 1e-12
    dtype : {None, numpy.float32, numpy.float64, numpy.float16, "bfloat16"}
        Default result dtype; None means float64 for a float64 token table,
        float32 otherwise.
    task_embeddings : array_like, shape (rows, H), optional
        A fourth table (ERNIE's task types), read with ``task_type_ids``
        (default 0) at each call.
    position_rule : {"absolute", "padding", "none"} or PositionRule, default "absolute"
        How positions are numbered when a call gives no ``position_ids``:
        ``"absolute"`` 0..S-1 (BERT), ``"padding"`` RoBERTa's rule (needs
        `padding_idx`); see :class:`bertembed.PositionRule`.
    padding_idx : int, optional
        The padding token id, for ``position_rule="padding"``.
    table_dtype : {None, "float32", "float64", "float16", "bfloat16", "int8"}
        Store the tables in this dtype (a converted copy). ``"int8"`` quantises
        the token table only (a float32 scale and offset per row); the
        others convert every table. None keeps the tables as given.
    zero_masked_rows : bool, default False
        Rows whose ``attention_mask`` is 0 come out as zeros (DeBERTa-v2).
    num_threads : int, optional
        The layer's thread count for calls that give none. A call's threads:
        its own ``num_threads``, else the layer's, else the process's
        (:func:`bertembed.set_num_threads`), else the automatic choice; every
        explicit count clipped to :func:`bertembed.max_threads` (the CPUs the
        process may use). Not kept by pickling.

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
        task_embeddings: Any = None,
        position_rule: PositionRule | str = "absolute",
        padding_idx: int | None = None,
        table_dtype: Any = None,
        zero_masked_rows: bool = False,
        num_threads: int | None = None,
    ) -> None:
        threads = validate.as_num_threads(num_threads)
        tables = prepare_tables(
            token_embeddings,
            position_embeddings,
            segment_embeddings,
            ln_weight,
            ln_bias,
            ln_eps,
            task_embeddings,
            dtypes.as_table_dtype(table_dtype),
        )
        self._init(tables, dtype, _as_rule(position_rule, padding_idx, tables), bool(zero_masked_rows), threads=threads)

    @classmethod
    def _of_tables(
        cls,
        tables: Tables,
        dtype: Any,
        rule: PositionRule,
        zero_masked_rows: bool,
        special_ids: tuple[int, ...] = (),
        *,
        model_type: str | None = None,
        source: tuple[str, str | None, Any] | None = None,
        threads: int | None = None,
    ) -> BertEmbeddings:
        """A layer of checked tables: what :meth:`from_pretrained`, :meth:`trimmed` and
        unpickling build (the constructor checks arrays into tables first); see :meth:`_init`."""
        layer = cls.__new__(cls)
        layer._init(
            tables, dtype, rule, zero_masked_rows, special_ids, model_type=model_type, source=source, threads=threads
        )
        return layer

    def _init(
        self,
        tables: Tables,
        dtype: Any,
        rule: PositionRule,
        zero_masked_rows: bool,
        special_ids: tuple[int, ...] = (),
        *,
        model_type: str | None = None,
        source: tuple[str, str | None, Any] | None = None,
        threads: int | None = None,
    ) -> None:
        """Set every attribute of the layer: the one construction path (the constructor and
        :meth:`_of_tables` call it, nothing else sets the layer's attributes)."""
        if tables.token_map is not None:
            # A trimmed layer: its map checked here, once (every entry a kept row or -1).
            m = tables.token_map
            tables = tables._replace(token_map=trim.check_map(m.map, tables.tok.rows, m.unknown, "the token id map"))
        self._tables = tables
        # The ids a trimmed layer always keeps (the config's special tokens, the padding id).
        pad = () if rule.padding_idx is None else (rule.padding_idx,)
        self._special = tuple(sorted({*special_ids, *pad}))
        # float32 results for tables of at most 32 bits (float16, bfloat16
        # and int8 included), float64 for float64 tables.
        default = (dtypes.FLOAT64 if tables.tok.dtype.wide else dtypes.FLOAT32).storage
        self._dtype = validate.as_result_dtype(dtype, default)
        self._rule = rule
        self._zero_masked = zero_masked_rows
        self._plan = embed.bind(tables, rule, self._dtype)
        # (checkpoint path, table_dtype, config) of a loaded layer, for cheap pickling
        self._source = source
        self._model_type = model_type
        # The layer's thread count for calls that give none (None: the process's).
        self._threads = threads

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        dtype: Any = None,
        table_dtype: Any = None,
        config: Any = None,
        num_threads: int | None = None,
    ) -> BertEmbeddings:
        """Load the embedding layer of a Hugging Face checkpoint.

        ``config.json``'s ``model_type`` selects the family's embedding rule
        (which tables are summed, how positions are numbered, LayerNorm with
        or without bias, or none); the layer then computes exactly what that
        family's embedding module in transformers computes. An unsupported
        model type or configuration is a ValueError that names it: there is
        no fallback. The weights file is memory-mapped read-only: float32,
        float64, float16 and bfloat16 tables are views of the file, never
        copied. Only NumPy is needed (and no pickle code is ever run).

        Parameters
        ----------
        path : str or os.PathLike
            A model directory (``config.json`` and one of ``model.safetensors``,
            ``model.safetensors.index.json`` (sharded), ``pytorch_model.bin``,
            ``pytorch_model.bin.index.json``, looked for in that order), or a
            weights file. A file takes the ``config.json`` beside it when there
            is one; without one it is read as BERT, and only if its tensors
            have no prefix or ``bert.`` / ``model.``. A directory written by
            :meth:`save_pretrained` gives back that layer, its tables (int8
            included) mapped as stored, its result dtype the default.
        dtype : {None, numpy.float32, numpy.float64, numpy.float16, "bfloat16"}
            Result dtype; None means float32 (float64 for a float64 checkpoint).
            The tables are not converted: float32 tables with
            ``dtype=np.float64`` are summed in float64.
        table_dtype : {None, "float32", "float64", "float16", "bfloat16", "int8"}
            Convert the tables when loading (a private copy): ``"int8"``
            quantises the token table (a float32 scale and offset per row); the others
            convert every table. None keeps the file's tables, mapped.
        config : dict or str or os.PathLike, optional
            The model's config (a dict, or the path of a config.json), instead
            of the ``config.json`` next to the weights. Use it for a weights
            file of a family other than BERT, e.g. ``config={"model_type":
            "xlm-roberta", "pad_token_id": 1}``.
        num_threads : int, optional
            The layer's thread count for calls that give none (see the
            constructor).

        Returns
        -------
        BertEmbeddings
            Its :attr:`model_type`, :attr:`position_rule` and
            :attr:`zero_masked_rows` say what it computes. Pickling it stores
            only `path`, `dtype`, `table_dtype` and `config`; unpickling maps
            the file again.

        Raises
        ------
        FileNotFoundError
            A missing path, or a directory without weights or config.json.
        ValueError
            An unsupported model type or configuration, a malformed file or
            config.json, tables whose shapes disagree with each other or with
            the config, a pickle that would run code (``pytorch_model.bin``).
        KeyError
            A tensor the family needs is missing (the message names the file
            and the tensor).
        TypeError
            A table that is not a float tensor; a bad `dtype` or `config`.

        Examples
        --------
        >>> import numpy as np
        >>> from bertembed import BertEmbeddings
        >>> layer = BertEmbeddings.from_pretrained("path/to/xlm-roberta-base")  # doctest: +SKIP
        >>> layer.model_type, layer.position_rule  # doctest: +SKIP
        ('xlm-roberta', PositionRule(kind='padding', offset=0, padding_idx=1))
        >>> layer([[0, 35378, 2]]).shape  # doctest: +SKIP
        (1, 3, 768)
        """
        validate.as_result_dtype(dtype, np.dtype(np.float32))  # a bad dtype fails before any file is read
        threads = validate.as_num_threads(num_threads)
        target = dtypes.as_table_dtype(table_dtype)
        from ._checkpoints import load

        ckpt = load.read(path, config=config, table_dtype=target)
        if isinstance(config, (str, os.PathLike)):
            from pathlib import Path  # (loaded with the checkpoint code anyway)

            config = str(Path(os.fspath(config)).expanduser().resolve())
        try:
            return cls._of_tables(
                ckpt.tables,
                ckpt.dtype if dtype is None else dtype,
                ckpt.rule,
                ckpt.zero_masked_rows,
                ckpt.special_ids,
                model_type=ckpt.model_type,
                source=(ckpt.path, target, None if config is None else config),
                threads=threads,
            )
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{ckpt.path}: {exc}") from exc

    def save_pretrained(self, directory: str | os.PathLike[str]) -> None:
        """Save the layer as it is stored, for :meth:`from_pretrained` to map back.

        Writes two files into `directory` (created if needed; files of an
        earlier save there are replaced): ``config.json``, every setting of
        the layer (position rule, padding index, LayerNorm and its eps, result
        dtype, model type), and ``model.safetensors``, the tables exactly as
        the layer stores them: an int8 token table as its int8 rows and their
        float32 scale and offset, bfloat16, float16, float32 or float64 tables
        as they are (see :doc:`/precision` for the tensor names). Any layer can
        be saved, whether built from arrays or loaded. Loading the directory
        maps the file (no copy) and gives a layer that computes exactly the
        same results.

        Each file is written under a temporary name and renamed over the
        old one. A live layer that maps the old ``model.safetensors``: on
        Linux and macOS it keeps reading the old file; Windows refuses to
        replace a mapped file, so the save is refused (see Raises). See
        :ref:`saving-over-a-mapped-layer`.

        Parameters
        ----------
        directory : str or os.PathLike

        Raises
        ------
        PermissionError
            On Windows, a live layer maps ``directory/model.safetensors``:
            in this process (refused before anything is written) or in
            another (the rename is refused). The message names the file and
            what to do: save into another directory, or drop the layer
            first. The directory is left as it was.

        Examples
        --------
        >>> import numpy as np, tempfile
        >>> from bertembed import BertEmbeddings
        >>> rng = np.random.default_rng(0)
        >>> layer = BertEmbeddings(rng.standard_normal((100, 8), dtype=np.float32),
        ...                        rng.standard_normal((16, 8), dtype=np.float32),
        ...                        table_dtype="int8")
        >>> with tempfile.TemporaryDirectory() as d:
        ...     layer.save_pretrained(d)
        ...     again = BertEmbeddings.from_pretrained(d)
        ...     same = np.array_equal(again([[5, 6, 7]]), layer([[5, 6, 7]]))
        ...     stored = again.table_dtype
        ...     del again  # it maps d's file: let it go before d is removed (Windows refuses)
        >>> stored, same
        ('int8', True)
        """
        save_layer(self, directory)

    # --- trimming ------------------------------------------------------------------------

    def trimmed(self, keep_ids: Any, *, unknown: str | int = "error") -> BertEmbeddings:
        """A layer that stores only the token rows of `keep_ids`, and takes the same ids.

        The new layer's token table holds the rows of the kept ids (in the
        stored dtype: int8 rows keep their scales, bfloat16 stays bfloat16)
        and an int32 map from every original id to its row; calls still take
        the original ids, and the kernel reads the map in the same pass as the
        rows. For ids that are all kept the result is bit for bit what this
        layer gives. Position, segment and task tables and LayerNorm are
        shared, untouched; RoBERTa-style positions are numbered from the
        original ids, as before.

        Always kept, whatever `keep_ids` says: the special tokens this layer
        knows (the ``*_token_id`` of the checkpoint's config: pad, bos, eos,
        cls, sep, unk, mask), the special tokens of the ``tokenizer.json``
        beside the checkpoint it was loaded from, the padding id of its
        position rule, and the `unknown` id. :mod:`bertembed.trim` chooses
        `keep_ids` from a corpus, an id list or Unicode scripts.

        Parameters
        ----------
        keep_ids : array_like of int
            Original ids to keep (any order, repeats allowed), each in
            ``[0, vocab_size)``. A layer that is already trimmed can only keep
            ids it kept.
        unknown : "error" or int, default "error"
            What a call does with an id that was not kept: ``"error"``, an
            IndexError naming the array, the position and the id (raised
            before anything is written); or an id (e.g. the tokenizer's unk
            id, kept), whose row every trimmed-away id then reads.

        Returns
        -------
        BertEmbeddings
            :attr:`is_trimmed` True; :attr:`vocab_size` unchanged,
            :attr:`kept_rows` the rows stored. :meth:`save_pretrained` writes
            the kept rows and the map, :meth:`from_pretrained` maps both back.

        Raises
        ------
        IndexError
            An id of `keep_ids` or `unknown` outside ``[0, vocab_size)``.
        ValueError
            An id this (already trimmed) layer does not keep.
        TypeError
            `keep_ids` not integers; `unknown` neither "error" nor an int.

        Examples
        --------
        >>> import numpy as np
        >>> from bertembed import BertEmbeddings
        >>> rng = np.random.default_rng(0)
        >>> layer = BertEmbeddings(rng.standard_normal((1000, 8), dtype=np.float32),
        ...                        rng.standard_normal((16, 8), dtype=np.float32))
        >>> small = layer.trimmed([5, 6, 7, 3])
        >>> small.vocab_size, small.kept_rows, small.kept_ids.tolist()
        (1000, 4, [3, 5, 6, 7])
        >>> bool(np.array_equal(small([[5, 6, 7]]), layer([[5, 6, 7]])))
        True
        >>> small([[5, 9]])
        Traceback (most recent call last):
        ...
        IndexError: token_ids[0, 1] = 9 is not among the 4 token rows kept by this trimmed layer (vocabulary 1000)
        >>> lenient = layer.trimmed([5, 6, 7], unknown=3)
        >>> bool(np.array_equal(lenient([[9]]), layer([[3]])))
        True
        """
        vocab = self.vocab_size
        unk = trim.as_unknown(unknown)
        if unk is not None and not 0 <= unk < vocab:
            raise IndexError(f"unknown = {unk} is out of range for a vocabulary of {vocab} ids")
        keep = trim.as_keep_ids(keep_ids, vocab)
        always = [i for i in (*self._special, *self._tokenizer_special_ids()) if 0 <= i < vocab]
        keep = np.union1d(keep, np.asarray(always + ([] if unk is None else [unk]), np.int64))
        rows = keep
        if self._map is not None:
            kept = self._map.kept_ids()
            missing = np.setdiff1d(keep, kept)
            if missing.size:
                raise ValueError(
                    f"id {int(missing[0])} is not kept by this trimmed layer ({missing.size} asked-for ids "
                    f"are not): a trimmed layer can only be trimmed further"
                )
            rows = self._map.map[keep].astype(np.int64)
        tables = self._tables._replace(
            tok=take_rows(self._tables.tok, rows), token_map=trim.build_map(keep, vocab, unk)
        )
        special = tuple(int(i) for i in always)
        return type(self)._of_tables(
            tables, self._dtype, self._rule, self._zero_masked, special, model_type=self._model_type
        )

    def _tokenizer_special_ids(self) -> tuple[int, ...]:
        """The special tokens of the ``tokenizer.json`` beside the checkpoint this layer was loaded from."""
        from pathlib import Path

        from ._checkpoints.specials import TOKENIZER_NAME, read_tokenizer_json, tokenizer_special_ids

        if self._source is None:
            return ()
        source = Path(self._source[0])
        path = (source if source.is_dir() else source.parent) / TOKENIZER_NAME
        if not path.is_file():
            return ()
        return tokenizer_special_ids(read_tokenizer_json(path), self.vocab_size)

    def _fingerprint(self) -> tuple[Any, ...]:
        """What must not change between pickling and unpickling a loaded layer."""
        return (
            self.vocab_size,
            self.max_positions,
            self.type_vocab_size,
            self.hidden_size,
            self.has_layer_norm,
            self._tables.eps,
        ) + (() if self._map is None else (self._map.rows, self._map.rule))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle a loaded layer as its checkpoint path, other layers as their tables.

        A layer from :meth:`from_pretrained` pickles to a few hundred bytes
        (path, dtype and a shape check) and maps the file again when unpickled,
        so the file must exist at the same absolute path there. A layer built
        from arrays pickles its validated tables.
        """
        dtype = dtypes.name_of(self._dtype)
        if self._source is not None:
            return _reopen, (type(self), *self._source, dtype, self._fingerprint())
        if self._map is not None:
            return _rebuild, (type(self), self._tables, dtype, self._rule, self._zero_masked, self._special)
        return _rebuild, (type(self), self._tables, dtype, self._rule, self._zero_masked)

    def __call__(
        self,
        token_ids: Any = None,
        segment_ids: Any = None,
        *,
        num_threads: int | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        # The signature users see (help(), the docs) is _call's, the one
        # definition of the keywords a call takes (set below the class);
        # taking them here as **kwargs makes the common call cheaper (no
        # keyword-only defaults to fill in), about 10% of its fixed cost.
        """Embed ``token_ids`` (shape (B, S) or (S,)); see :func:`bertembed.bert_embeddings`.

        A tokenizer's output can be passed as it is: ``layer(**enc)`` or
        ``layer(enc)`` for a transformers ``BatchEncoding`` or any mapping
        (of NumPy arrays, lists or torch tensors), and ``layer(encodings)``
        for a list of ``tokenizers.Encoding`` (their ids, type ids and
        attention mask are used). The keys of a tokenizer's output that an
        embedding layer has no use for (``special_tokens_mask``,
        ``offset_mapping``, ``overflow_to_sample_mapping``, ``length``,
        ``num_truncated_tokens``, ``overflowing_tokens``) are ignored; any
        other unknown keyword or key is a TypeError.

        Parameters
        ----------
        token_ids : array_like of int, shape (B, S) or (S,); or a mapping; or tokenizers.Encoding objects
            Ragged rows are a ValueError: pad them to one length
            (``tokenizer(..., padding=True)``).
        segment_ids : array_like of int, optional
            Token types; None means 0 everywhere.
        position_ids : array_like of int, shape (S,), (1, S) or (B, S), optional
            None: the layer's :attr:`position_rule` numbers them
            (:meth:`position_ids` shows the result).
        task_type_ids : array_like of int, optional
            ERNIE's task types, for layers with a task table; None means 0.
        attention_mask : array_like of int or bool, optional
            1 for a token, 0 for padding (other values are a ValueError),
            the shape of `token_ids`. Layers with :attr:`zero_masked_rows`
            (DeBERTa, DeBERTa-v2) give rows of zeros at the 0 positions, as
            their embedding module does; for every other family the mask is
            checked and changes nothing, as in transformers, whose embedding
            modules do not read it (padding is masked later, in attention).
            Positions never come from the mask: RoBERTa-style layers number
            them from the padding token id, as transformers does.
        out : numpy.ndarray, optional
            Result buffer (see :func:`bertembed.bert_embeddings`).
        num_threads : int, optional
            OpenMP threads for this call; None: the layer's own count, else
            the process's (:func:`bertembed.set_num_threads`), else the
            automatic choice. Clipped to :func:`bertembed.max_threads`.
        input_ids, token_type_ids : array_like of int, optional
            transformers' names of `token_ids` and `segment_ids`; give one
            name of each pair (both is a TypeError).
        **tokenizer_outputs
            Only the ignored keys above.

        Returns
        -------
        numpy.ndarray
            Shape ``token_ids.shape + (H,)``, dtype :attr:`dtype` (or `out`).

        Examples
        --------
        >>> import numpy as np
        >>> from bertembed import BertEmbeddings
        >>> layer = BertEmbeddings(np.eye(4), np.zeros((8, 4)))
        >>> layer([2, 0]).tolist()
        [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
        >>> enc = {"input_ids": [[2, 0]], "attention_mask": [[1, 1]], "special_tokens_mask": [[1, 0]]}
        >>> layer(**enc).shape
        (1, 2, 4)
        """
        if num_threads is None:
            num_threads = self._threads
        if not kwargs and (num_threads is None or (type(num_threads) is int and num_threads > 0)):
            # The common call: ids already in the kernel's form are computed as they are
            # (None: they are not; the shim normalises them).
            result = self._plan.run(token_ids, segment_ids, num_threads or 0)
            if result is not None:
                return result
        return self._call(token_ids, segment_ids, num_threads=num_threads, **kwargs)

    def _call(
        self,
        token_ids: Any = None,
        segment_ids: Any = None,
        *,
        position_ids: Any = None,
        task_type_ids: Any = None,
        attention_mask: Any = None,
        out: np.ndarray | None = None,
        num_threads: int | None = None,
        input_ids: Any = None,
        token_type_ids: Any = None,
        **tokenizer_outputs: Any,
    ) -> np.ndarray:
        """Every call but the plainest: sort the inputs, then as :meth:`__call__` says.

        Its signature is the one :meth:`__call__` shows and takes.
        """
        if num_threads is None:
            num_threads = self._threads
        if type(token_ids) is np.ndarray and input_ids is None and token_type_ids is None and not tokenizer_outputs:
            a = _inputs.Inputs(token_ids, segment_ids, position_ids, task_type_ids, attention_mask)
        else:
            a = _inputs.resolve(
                token_ids,
                segment_ids,
                position_ids,
                task_type_ids,
                attention_mask,
                input_ids,
                token_type_ids,
                tokenizer_outputs,
            )
        return embed_ids(
            self._tables,
            a.token_ids,
            a.segment_ids,
            a.position_ids,
            out,
            self._dtype,
            num_threads,
            rule=self._rule,
            task_type_ids=a.task_type_ids,
            attention_mask=a.attention_mask,
            zero_masked=self._zero_masked,
            names=(a.token_name, a.segment_name),
            plan=self._plan,
        )

    def position_ids(self, token_ids: Any) -> np.ndarray:
        """The position ids a call without ``position_ids`` uses for `token_ids`.

        Parameters
        ----------
        token_ids : array_like of int, shape (B, S) or (S,)

        Returns
        -------
        numpy.ndarray
            int64, the shape of `token_ids`.

        Raises
        ------
        ValueError
            The layer has no position table, or a sequence is longer than it numbers.

        Examples
        --------
        >>> import numpy as np
        >>> from bertembed import BertEmbeddings
        >>> layer = BertEmbeddings(np.ones((10, 2)), np.ones((8, 2)), position_rule="padding", padding_idx=1)
        >>> layer.position_ids([[0, 5, 6, 2, 1, 1], [1, 1, 0, 7, 2, 1]]).tolist()
        [[2, 3, 4, 5, 1, 1], [1, 1, 2, 3, 4, 1]]
        """
        ids = validate.as_ids("token_ids", token_ids)
        if ids.ndim not in (1, 2):
            raise ValueError(f"token_ids must be 1-D (S,) or 2-D (B, S), got shape {ids.shape}")
        t = self._tables
        if t.pos is None:
            raise ValueError("this layer has no position table (its position rule is 'none')")
        flat = np.ascontiguousarray(np.atleast_2d(ids), dtype=np.int64)
        rule, seq = self._rule, flat.shape[1]
        if rule.kind == "padding":
            pos = positions.padding_positions(flat, rule, t.pos.rows)
        else:
            positions.check_absolute(rule, seq, t.pos.rows)
            pos = np.broadcast_to(positions.arange(seq, np.dtype(np.int64), rule.offset), flat.shape).copy()
        return pos.reshape(ids.shape)

    @property
    def vocab_size(self) -> int:
        """Token ids the layer takes, ``[0, vocab_size)``: the rows of the token table, or for
        a trimmed layer the original vocabulary (its table holds :attr:`kept_rows` rows)."""
        return self._tables.vocab

    @property
    def _map(self) -> trim.TokenMap | None:
        """A trimmed layer's id map (None for a layer that is not trimmed)."""
        return self._tables.token_map

    @property
    def is_trimmed(self) -> bool:
        """Whether the token table holds only some rows (see :meth:`trimmed`)."""
        return self._map is not None

    @property
    def kept_rows(self) -> int:
        """Rows of the token table: :attr:`vocab_size` unless trimmed."""
        return self._tables.tok.rows

    @property
    def kept_ids(self) -> np.ndarray:
        """The ids whose rows the token table holds, sorted (every id unless trimmed)."""
        return np.arange(self.vocab_size) if self._map is None else self._map.kept_ids()

    @property
    def unknown(self) -> str | int:
        """What a trimmed-away id gives: ``"error"`` (an IndexError) or the id whose row it reads."""
        return trim.ERROR if self._map is None else self._map.rule

    @property
    def special_token_ids(self) -> tuple[int, ...]:
        """The ids :meth:`trimmed` always keeps: the config's special tokens and the padding id
        (the tokenizer's, beside a loaded checkpoint, are added when trimming)."""
        return self._special

    @property
    def max_positions(self) -> int:
        """Rows of the position table (0 without one)."""
        return 0 if self._tables.pos is None else self._tables.pos.rows

    @property
    def type_vocab_size(self) -> int:
        """Rows of the segment table (0 without one)."""
        return 0 if self._tables.seg is None else self._tables.seg.rows

    @property
    def hidden_size(self) -> int:
        """H, the width of every table."""
        return self._tables.hidden

    @property
    def dtype(self) -> np.dtype:
        """The result dtype of a call."""
        return self._dtype

    @property
    def table_dtype(self) -> str:
        """How the token table is stored: float32, float64, float16, bfloat16 or int8."""
        return self._tables.tok.dtype_name

    @property
    def nbytes(self) -> int:
        """Bytes of all tables (int8 scales and a trimmed layer's id map included; LayerNorm parameters not)."""
        return self._tables.nbytes

    @property
    def has_layer_norm(self) -> bool:
        """Whether LayerNorm is fused into each call."""
        return self._tables.ln is not None

    @property
    def position_rule(self) -> PositionRule:
        """How positions are numbered when a call gives no ``position_ids``."""
        return self._rule

    @property
    def zero_masked_rows(self) -> bool:
        """Whether rows whose ``attention_mask`` is 0 come out as zeros (DeBERTa-v2)."""
        return self._zero_masked

    @property
    def model_type(self) -> str | None:
        """The checkpoint's ``model_type`` (None for a layer built from arrays)."""
        return self._model_type

    def __repr__(self) -> str:
        return (
            f"BertEmbeddings(vocab_size={self.vocab_size}, max_positions={self.max_positions}, "
            f"type_vocab_size={self.type_vocab_size}, hidden_size={self.hidden_size}, "
            f"dtype={self.dtype}, table_dtype={self.table_dtype}, layer_norm={self.has_layer_norm}, "
            f"position_rule={self._rule.kind}"
            + ("" if self._map is None else f", kept_rows={self.kept_rows}, unknown={self.unknown!r}")
            + ")"
        )


BertEmbeddings.__call__.__signature__ = inspect.signature(BertEmbeddings._call)  # type: ignore[attr-defined]


def stored_tables(layer: BertEmbeddings) -> Tables:
    """The tables `layer` holds, as stored: the package's way to read them.

    For the command line and the benchmark harness, which convert, save or
    compare a layer's tables: nothing outside ``bertembed._core`` and this
    module reads a layer's private attributes. The tables are the layer's
    own (mapped or shared): read them, never write into them.

    Parameters
    ----------
    layer : BertEmbeddings

    Returns
    -------
    bertembed._core.tables.Tables
        The token, position, segment and task tables (each a
        :class:`~bertembed._core.tables.Table`, or None), the LayerNorm
        parameters and eps, and a trimmed layer's id map.

    Examples
    --------
    >>> import numpy as np
    >>> from bertembed._layer import BertEmbeddings, stored_tables
    >>> layer = BertEmbeddings(np.ones((10, 4), np.float32), None, table_dtype="int8")
    >>> t = stored_tables(layer)
    >>> t.tok.dtype_name, t.tok.rows, t.pos, t.tok.scale is None
    ('int8', 10, None, False)
    """
    return layer._tables


def save_layer(
    layer: BertEmbeddings,
    directory: str | os.PathLike[str],
    tables: Tables | None = None,
    progress: save.Progress | None = None,
) -> None:
    """Save `layer` as :meth:`BertEmbeddings.save_pretrained` does, with `tables` instead of its own.

    Parameters
    ----------
    layer : BertEmbeddings
        Its settings are saved: result dtype, position rule, zero-masked
        rows, model type and special token ids.
    directory : str or os.PathLike
    tables : Tables, optional
        A conversion of the layer's tables (e.g. by
        :func:`bertembed._core.tables.convert_tables`); None: its own, as
        :meth:`~BertEmbeddings.save_pretrained` saves them.
    progress : callable, optional
        ``progress(done_bytes, total_bytes, label)`` as the weights are written.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from bertembed._core.tables import convert_tables
    >>> from bertembed._layer import BertEmbeddings, save_layer, stored_tables
    >>> layer = BertEmbeddings(np.ones((10, 4), np.float32), None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_layer(layer, d, convert_tables(stored_tables(layer), "float16"))
    ...     again = BertEmbeddings.from_pretrained(d)
    ...     stored = again.table_dtype
    ...     del again  # it maps d's file: let it go before d is removed (Windows refuses)
    >>> stored
    'float16'
    """
    from ._checkpoints import save

    save.save(
        directory,
        layer._tables if tables is None else tables,
        layer._dtype,
        layer._rule,
        layer._zero_masked,
        layer._model_type,
        progress,
        special_ids=layer._special,
    )


def _as_rule(rule: PositionRule | str, padding_idx: int | None, tables: Tables) -> PositionRule:
    """The layer's position rule from the constructor's arguments."""
    if isinstance(rule, PositionRule):
        if padding_idx is not None and padding_idx != rule.padding_idx:
            raise ValueError("padding_idx is given twice: in position_rule and as padding_idx")
    elif isinstance(rule, str):
        if tables.pos is None and rule == "absolute" and padding_idx is None:
            rule = "none"
        rule = PositionRule(rule, padding_idx=padding_idx)
    else:
        raise TypeError(f"position_rule must be a PositionRule or a str, got {type(rule).__name__}")
    if tables.pos is None and rule.kind != "none":
        raise ValueError(f"the position rule {rule.kind!r} needs position_embeddings")
    if tables.pos is not None and rule.kind == "none":
        raise ValueError("the position rule 'none' is for layers without position_embeddings")
    return rule


def _reopen(
    cls: type[BertEmbeddings],
    path: str,
    table_dtype: str | None,
    config: Any,
    dtype: str,
    expected: tuple[Any, ...],
) -> BertEmbeddings:
    """Unpickle a loaded layer: map its checkpoint again.

    `expected` is the layer's :meth:`~BertEmbeddings._fingerprint` when it was
    pickled; a checkpoint that no longer matches is a ValueError.
    """
    layer = cls.from_pretrained(path, dtype=dtype, table_dtype=table_dtype, config=config)
    now = layer._fingerprint()
    if now != tuple(expected):
        raise ValueError(
            f"{path}: the checkpoint changed since the layer was pickled: "
            f"(vocab_size, max_positions, type_vocab_size, hidden_size, layer_norm, ln_eps) "
            f"was {tuple(expected)}, is {now}"
        )
    return layer


def _rebuild(
    cls: type[BertEmbeddings],
    tables: Tables,
    dtype: str,
    rule: PositionRule = ABSOLUTE,
    zero_masked: bool = False,
    special_ids: tuple[int, ...] = (),
) -> BertEmbeddings:
    """Unpickle a layer built from arrays (or trimmed)."""
    return cls._of_tables(tables, dtype, rule if tables.pos is not None else NONE, zero_masked, special_ids)
