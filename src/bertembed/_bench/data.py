"""The harness's data types: a case, its inputs, what peers share, a peer.

The bottom of :mod:`bertembed._bench`: it imports nothing else of the harness.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: BERT's LayerNorm epsilon, used by every contender.
LN_EPS = 1e-12

Fn = Callable[[], Any]


@dataclass(frozen=True)
class Case:
    """One benchmark shape.

    Parameters
    ----------
    name : str
        Label in tables and JSON.
    dtype : {"float64", "float32"}
        Dtype of the tables and of the result.
    layer_norm : bool
        Fused LayerNorm after the sum.
    batch, seq : int
        Shape of the ids, (B, S).
    out : bool
        bertembed writes into a preallocated ``out=`` buffer.
    V, P, H : int
        Token rows, position rows and hidden size (BERT-base by default).
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

    @property
    def result_bytes(self) -> int:
        """Size of one result, in bytes."""
        return self.batch * self.seq * self.H * np.dtype(self.dtype).itemsize


@dataclass
class Inputs:
    """Tables and ids of one case (tables shared by cases of the same dtype)."""

    tok: np.ndarray
    pos: np.ndarray
    seg: np.ndarray
    ln_weight: np.ndarray
    ln_bias: np.ndarray
    ids: np.ndarray
    segment_ids: np.ndarray


@dataclass
class Context:
    """What peers share during one :func:`run`: thread count, caches, cleanups."""

    threads: int
    stack: contextlib.ExitStack
    cache: dict[Any, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Peer:
    """A contender compared with bertembed.

    ``build(case, inputs, context)`` returns a no-argument callable doing one
    call (and returning its result as an array-like), or raises ImportError
    when its library is missing. ``checked=False`` skips the comparison with
    bertembed's output (for yardsticks that do other work, like a copy).
    """

    name: str
    applies: Callable[[Case], bool]
    build: Callable[[Case, Inputs, Context], Fn]
    checked: bool = True


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
    return cache[key]


def make_inputs(case: Case, seed: int = 0, cache: dict[Any, Any] | None = None) -> Inputs:
    """Random BERT-like tables and ids for ``case`` (fixed by ``seed``).

    Parameters
    ----------
    case : Case
    seed : int, default 0
    cache : dict, optional
        Tables already made for the same dtype and shapes are reused from it.

    Returns
    -------
    Inputs
        int64 ids; segment ids 0 then 1 from a random split point per row.
    """
    tok, pos, seg, w, b = _tables(case, seed, {} if cache is None else cache)
    rng = np.random.default_rng([seed, case.batch, case.seq])
    ids = rng.integers(0, case.V, (case.batch, case.seq), dtype=np.int64)
    split = rng.integers(1, case.seq + 1, (case.batch, 1))
    sids = (np.arange(case.seq) >= split).astype(np.int64)
    return Inputs(tok, pos, seg, w, b, ids, sids)
