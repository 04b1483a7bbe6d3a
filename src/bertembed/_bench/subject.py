"""The contender being measured: a ``bert_embeddings`` call on a case's inputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import BertEmbeddings, _kernel
from .data import LN_EPS, Case, Fn, Inputs


def bertembed_call(case: Case, inputs: Inputs, threads: int | None) -> Fn:
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
    callable
        One call per invocation; with ``case.out`` it writes into a buffer
        allocated (and touched) here.
    """
    d = inputs
    ln: dict[str, Any] = {}
    if case.layer_norm:
        ln = {"ln_weight": d.ln_weight, "ln_bias": d.ln_bias, "ln_eps": LN_EPS}
    layer = BertEmbeddings(d.tok, d.pos, d.seg, dtype=np.dtype(case.dtype), **ln)
    kw: dict[str, Any] = {"num_threads": threads}
    if case.out:
        kw["out"] = np.zeros((case.batch, case.seq, case.H), case.dtype)
        kw["out"].fill(1.0)

    def call() -> np.ndarray:
        return layer(d.ids, d.segment_ids, **kw)

    return call


def automatic_threads() -> int | None:
    """The thread count bertembed's automatic choice took last (None before any call)."""
    return int(_kernel.last_auto_threads()) or None
