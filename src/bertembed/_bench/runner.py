"""``run``: time bertembed and its peers on each case and compare medians.

Every contender of a case is timed in the same run, interleaved round-robin
(each repeat times every contender once, the order rotated), and reported as
a median; ratios are ``peer median / bertembed median`` (above 1: bertembed
is faster). Each peer's output is compared with bertembed's before it is
timed, so no ratio ever compares different work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from .. import _api, max_threads
from .cases import DEFAULT_CASES, GOALS
from .check import mismatch
from .data import Case, Context, Peer, make_inputs
from .machine import machine_info
from .peers import resolve_peers
from .subject import bertembed_call
from .timing import time_interleaved


def _result(
    case: Case,
    threads: int,
    repeats: int,
    timings: dict[str, dict[str, float]],
    skipped: dict[str, dict[str, str]],
    machine: dict[str, Any],
) -> dict[str, Any]:
    mine = timings["bertembed"]["median_s"]
    ratios = {n: t["median_s"] / mine for n, t in timings.items() if n != "bertembed"}
    best = timings["bertembed"]["min_s"]
    ratios_min = {n: t["min_s"] / best for n, t in timings.items() if n != "bertembed"}
    goals = {}
    for peer, least in GOALS.get(case.name, {}).items():
        ratio = ratios.get(peer)
        goals[peer] = {
            "min_ratio": least,
            "ratio": ratio,
            "met": None if ratio is None else bool(ratio >= least),
        }
    return {
        **asdict(case),
        "threads": threads,
        "repeats": repeats,
        "result_bytes": case.result_bytes,
        "timings": timings,
        "ratios": ratios,
        "ratios_min": ratios_min,
        "skipped": skipped,
        "goals": goals,
        "machine": machine,
    }


def run(
    cases: Sequence[Case] | None = None,
    *,
    repeats: int = 15,
    threads: int | None = None,
    peers: Iterable[str | Peer] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time bertembed and its peers on each case, interleaved, and compare medians.

    Parameters
    ----------
    cases : sequence of Case, optional
        Default :data:`DEFAULT_CASES`.
    repeats : int, default 15
        Timed samples per contender and case.
    threads : int, optional
        Threads for every contender (bertembed ``num_threads``, torch
        ``set_num_threads``, ONNX Runtime ``intra_op_num_threads``); default
        :func:`bertembed.max_threads`. NumPy and ``np.copyto`` use one.
    peers : iterable of str or Peer, optional
        Names from :data:`PEERS` (default: all) or custom :class:`Peer` objects.
        A peer whose library is missing is skipped and reported as
        unavailable; one whose output differs from bertembed's is reported
        as a mismatch and not timed.
    progress : callable, optional
        ``progress(done, total, label)``, called as work advances.
    seed : int, default 0
        Seed of the random tables and ids.

    Returns
    -------
    list of dict
        One JSON-serialisable dict per case: the case's fields, ``threads``,
        ``repeats``, ``result_bytes``, ``timings`` (per contender
        ``median_s``, ``min_s``, ``calls_per_sample``), ``ratios`` (peer
        median / bertembed median), ``ratios_min`` (the same for the fastest
        samples: what a quiet machine would show), ``skipped`` (``status`` and ``reason``),
        ``goals`` (DESIGN.md goals of the case) and ``machine``.
    """
    todo = list(DEFAULT_CASES if cases is None else cases)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    nthreads = max_threads() if threads is None else int(threads)
    if nthreads < 1:
        raise ValueError(f"threads must be a positive int, got {threads}")
    peer_list = resolve_peers(peers)
    machine = machine_info()
    total, done = len(todo) * repeats, 0

    def report(label: str, extra: int = 0) -> None:
        if progress is not None:
            progress(done + extra, total, label)

    results = []
    with contextlib.ExitStack() as stack:
        ctx = Context(nthreads, stack)
        for case in todo:
            report(f"{case.name}: setup")
            inputs = make_inputs(case, seed, ctx.cache)
            # bertembed gets the same ceiling as every peer and makes its own
            # automatic choice under it (one thread for small inputs).
            be_threads = min(nthreads, _api.auto_threads(case.batch * case.seq * case.H))
            funcs = {"bertembed": bertembed_call(case, inputs, be_threads)}
            expected = np.array(funcs["bertembed"]())
            skipped: dict[str, dict[str, str]] = {}
            for peer in peer_list:
                if not peer.applies(case):
                    continue
                try:
                    fn = peer.build(case, inputs, ctx)
                    problem = mismatch(expected, fn(), case.dtype) if peer.checked else None
                except ImportError as exc:
                    skipped[peer.name] = {"status": "unavailable", "reason": str(exc)}
                    continue
                except Exception as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                    skipped[peer.name] = {"status": "error", "reason": reason}
                    continue
                if problem is not None:
                    skipped[peer.name] = {"status": "mismatch", "reason": problem}
                    continue
                funcs[peer.name] = fn
            del expected
            timings = time_interleaved(
                funcs, repeats, on_repeat=lambda r, c=case: report(c.name, r)
            )
            done += repeats
            res = _result(case, nthreads, repeats, timings, skipped, machine)
            res["bertembed_threads"] = be_threads
            results.append(res)
            del funcs, inputs
    report("done")
    return results
