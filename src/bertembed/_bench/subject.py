"""The contender being measured: a ``bert_embeddings`` call on a case's inputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import bert_embeddings
from .data import LN_EPS, Case, Fn, Inputs


def bertembed_call(case: Case, inputs: Inputs, threads: int) -> Fn:
    """The bertembed contender: ``bert_embeddings`` with ``num_threads=threads``.

    Parameters
    ----------
    case : Case
    inputs : Inputs
    threads : int

    Returns
    -------
    callable
        One call per invocation; with ``case.out`` it writes into a buffer
        allocated (and touched) here.
    """
    d = inputs
    kw: dict[str, Any] = {"dtype": np.dtype(case.dtype), "num_threads": threads}
    if case.layer_norm:
        kw.update(ln_weight=d.ln_weight, ln_bias=d.ln_bias, ln_eps=LN_EPS)
    if case.out:
        kw["out"] = np.zeros((case.batch, case.seq, case.H), case.dtype)
        kw["out"].fill(1.0)

    def call() -> np.ndarray:
        return bert_embeddings(d.ids, d.segment_ids, d.tok, d.pos, d.seg, **kw)

    return call
