"""The contender being measured: a ``bert_embeddings`` call on a case's inputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _api, bert_embeddings
from .data import LN_EPS, Case, Fn, Inputs


def bertembed_call(case: Case, inputs: Inputs, threads: int | None) -> Fn:
    """The bertembed contender: ``bert_embeddings`` with ``num_threads=threads``.

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
    kw: dict[str, Any] = {"dtype": np.dtype(case.dtype), "num_threads": threads}
    if case.layer_norm:
        kw.update(ln_weight=d.ln_weight, ln_bias=d.ln_bias, ln_eps=LN_EPS)
    if case.out:
        kw["out"] = np.zeros((case.batch, case.seq, case.H), case.dtype)
        kw["out"].fill(1.0)

    def call() -> np.ndarray:
        return bert_embeddings(d.ids, d.segment_ids, d.tok, d.pos, d.seg, **kw)

    return call


def automatic_threads(case: Case, ceiling: int) -> int | None:
    """The thread count bertembed's automatic choice takes for ``case`` under ``ceiling``.

    None when this bertembed does not say (no ``auto_threads`` in its shim).
    """
    choose = getattr(_api, "auto_threads", None)
    if choose is None:
        return None
    return max(1, min(int(ceiling), int(choose(case.batch * case.seq * case.H))))
