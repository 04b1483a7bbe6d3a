"""The contender being measured: a ``bert_embeddings`` call on a case's inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import BertEmbeddings
from .._core import _kernel, dtypes
from .._core import tables as _tables
from .._layer import stored_tables
from .data import LN_EPS, Case, Inputs, make_inputs


def bert_base_layer(
    batch: int = 8, seq: int = 128, *, layer_norm: bool = True, seed: int = 0
) -> tuple[BertEmbeddings, np.ndarray]:
    """The harness's one BERT-base-shaped layer (V=30522, P=512, H=768, float32) and random ids.

    What a script that needs "a BERT-base layer and a batch" calls, rather
    than making tables of its own: the tables of
    :func:`~bertembed._bench.data.make_inputs` (fixed `seed`, the values every
    contender of the harness sees).

    Parameters
    ----------
    batch, seq : int
        Shape of the ids.
    layer_norm : bool, default True
        With BERT's LayerNorm (random weight and bias around 1 and 0).
    seed : int, default 0

    Returns
    -------
    tuple of (BertEmbeddings, numpy.ndarray)
        The layer and (batch, seq) int64 ids.

    Examples
    --------
    >>> layer, ids = bert_base_layer(2, 16)
    >>> layer.vocab_size, layer.hidden_size, ids.shape
    (30522, 768, (2, 16))
    """
    case = Case("bert-base", "float32", layer_norm, batch, seq)
    inputs = make_inputs(case, seed)
    return bertembed_call(case, inputs, None).layer, inputs.ids


def bertembed_call(case: Case, inputs: Inputs, threads: int | None) -> BertembedCall:
    """The bertembed contender: a :class:`~bertembed.BertEmbeddings` layer (tables
    checked once, as a service holds it) called with ``num_threads=threads``.

    Parameters
    ----------
    case : Case
    inputs : Inputs
    threads : int or None
        None: bertembed's automatic choice (under the process's OpenMP
        maximum, which ``OMP_NUM_THREADS`` sets).

    Returns
    -------
    BertembedCall
        One call per invocation; with ``case.out`` it writes into a buffer
        allocated (and touched) here. ``case.table_dtype == "int8"``: the
        layer quantises its token table when it is built (untimed). With
        ``case.id_sets > 1`` the calls cycle through the id sets, the first
        call on ``inputs.ids``.
    """
    d = inputs
    ln: dict[str, Any] = {}
    if case.layer_norm:
        ln = {"ln_weight": d.ln_weight, "ln_bias": d.ln_bias, "ln_eps": LN_EPS}
    # A quantised table is made by the layer; the others are given as arrays (make_inputs).
    convert = case.table_dtype if case.table_dtype is not None and dtypes.BY_NAME[case.table_dtype].quantised else None
    layer = BertEmbeddings(d.tok, d.pos, d.seg, dtype=np.dtype(case.dtype), table_dtype=convert, **ln)
    kw: dict[str, Any] = {"num_threads": threads}
    if case.out:
        kw["out"] = np.zeros((case.batch, case.seq, case.H), case.dtype)
        kw["out"].fill(1.0)
    sets = [d.ids] if d.id_sets is None else list(d.id_sets)
    return BertembedCall(layer, sets, d.segment_ids, kw)


class BertembedCall:
    """One ``layer(ids, segment_ids, **kwargs)`` call per invocation, the ids the
    next of the id sets in turn; ``layer`` is kept for the check of a quantised
    case (its tables as the kernel reads them)."""

    def __init__(
        self, layer: BertEmbeddings, id_sets: list[np.ndarray], segment_ids: np.ndarray, kwargs: dict[str, Any]
    ) -> None:
        self.layer = layer
        self._sets = id_sets
        self._segments = segment_ids
        self._kwargs = kwargs
        self._next = 0

    def __call__(self) -> np.ndarray:
        ids = self._sets[self._next]
        self._next = (self._next + 1) % len(self._sets)
        return self.layer(ids, self._segments, **self._kwargs)


def token_values(call: BertembedCall) -> np.ndarray:
    """The token table of the call's layer as float32 values (an int8 table dequantised)."""
    return _tables.to_float32(stored_tables(call.layer).tok)


@dataclass(frozen=True)
class LayerArrays:
    """The arrays a layer holds, as stored (a token table mapped from a checkpoint: the mapping)."""

    tok: np.ndarray
    pos: np.ndarray | None
    seg: np.ndarray | None
    ln_weight: np.ndarray | None
    ln_bias: np.ndarray | None
    ln_eps: float


def layer_arrays(layer: BertEmbeddings) -> LayerArrays:
    """The tables and LayerNorm parameters of ``layer``: the one place the harness and the
    ``benchmarks/`` scripts look inside a layer (to build another from the same arrays).

    Examples
    --------
    >>> layer = BertEmbeddings(np.ones((4, 2), np.float32), None, None, ln_weight=np.ones(2, np.float32))
    >>> a = layer_arrays(layer)
    >>> a.tok.shape, a.pos, a.ln_weight.tolist(), a.ln_bias
    ((4, 2), None, [1.0, 1.0], None)
    """
    t = stored_tables(layer)
    ln = t.ln
    return LayerArrays(
        tok=t.tok.data,
        pos=None if t.pos is None else t.pos.data,
        seg=None if t.seg is None else t.seg.data,
        ln_weight=None if ln is None else ln.weight32,
        ln_bias=None if ln is None else ln.bias32,
        ln_eps=float(t.eps),
    )


def automatic_threads() -> int | None:
    """The thread count bertembed's automatic choice took last (None before any call)."""
    return int(_kernel.last_auto_threads()) or None
