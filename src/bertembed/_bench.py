"""Benchmark harness: bertembed side by side with NumPy, torch and ONNX Runtime.

Every contender of a case is timed in the same run, interleaved round-robin
(each repeat times every contender once, the order rotated), and reported as
a median; ratios are ``peer median / bertembed median`` (above 1: bertembed
is faster). Each peer's output is compared with bertembed's before it is
timed, so no ratio ever compares different work.

This module holds the cases, inputs, timing, :func:`run` and
:func:`format_table`. The peers live in :mod:`bertembed._bench_peers`
(:data:`PEERS`) and the memory measurement in :mod:`bertembed._bench_memory`
(:func:`peak_memory`).

Only NumPy is needed to import this module. torch, onnx and onnxruntime are
imported when their peer is built; a missing one is reported as unavailable.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import _api
from ._api import bert_embeddings, max_threads
from ._config import config

#: Shortest timed sample: fast calls are looped until a sample lasts this long.
MIN_SAMPLE_S = 0.01
#: Pause between two samples, so that one runtime's spinning worker threads
#: (OpenMP, ONNX Runtime) go idle before the next contender starts.
GAP_S = 0.002
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


def make_case(dtype: str, layer_norm: bool, batch: int, seq: int, out: bool = False) -> Case:
    """A BERT-base-shaped case named ``f32-ln-B8-S128``, ``f64-sum-out-B32-S512``, ...

    Parameters
    ----------
    dtype : {"float64", "float32"}
    layer_norm : bool
    batch, seq : int
    out : bool, default False

    Returns
    -------
    Case
    """
    short = {"float32": "f32", "float64": "f64"}[dtype]
    kind = "ln" if layer_norm else "sum"
    name = f"{short}-{kind}{'-out' if out else ''}-B{batch}-S{seq}"
    return Case(name, dtype, layer_norm, batch, seq, out)


#: The DESIGN.md goal rows first, then a float32 + LayerNorm batch sweep at
#: S=128 (together with the goal rows: B = 1, 2, 4, 8, 16, 32) for plots.
DEFAULT_CASES: list[Case] = [
    make_case("float64", False, 32, 512),
    make_case("float64", False, 32, 512, out=True),
    make_case("float32", True, 32, 512),
    make_case("float32", True, 8, 128),
    make_case("float32", True, 1, 128),
    *(make_case("float32", True, b, 128) for b in (2, 4, 16, 32)),
]

#: DESIGN.md goals: case name -> {peer: lowest acceptable peer/bertembed ratio}.
#: "<= 1.3x the time of np.copyto" is a copyto/bertembed ratio of 1/1.3.
GOALS: dict[str, dict[str, float]] = {
    "f64-sum-B32-S512": {"numpy": 5.0},
    "f64-sum-out-B32-S512": {"copyto": 1 / 1.3},
    "f32-ln-B32-S512": {"onnxruntime": 1.5},
    "f32-ln-B8-S128": {"onnxruntime": 1.5},
    "f32-ln-B1-S128": {"onnxruntime": 1.5, "torch": 3.0},
}

#: Goal for :func:`peak_memory`: peak extra bytes of a call / result bytes.
PEAK_MEMORY_GOAL = 1.1


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


# --------------------------------------------------------------------------- inputs


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


# --------------------------------------------------------------------------- timing


def time_interleaved(
    funcs: Mapping[str, Fn],
    repeats: int,
    *,
    min_sample_s: float | None = None,
    on_repeat: Callable[[int], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Time callables round-robin: each repeat runs every one once, order rotated.

    Parameters
    ----------
    funcs : mapping of str to callable
        No-argument callables, each warmed up (two calls) before timing.
    repeats : int
        Samples per callable.
    min_sample_s : float, optional
        A callable faster than this is looped within a sample (default
        :data:`MIN_SAMPLE_S`); times are per call.
    on_repeat : callable, optional
        Called with the number of repeats done after each one.

    Returns
    -------
    dict
        ``{name: {"median_s", "min_s", "calls_per_sample"}}``, seconds per call.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    target = MIN_SAMPLE_S if min_sample_s is None else min_sample_s
    loops = {}
    for name, fn in funcs.items():
        fn()
        start = time.perf_counter()
        fn()
        one = time.perf_counter() - start
        loops[name] = max(1, min(100_000, math.ceil(target / max(one, 1e-9))))
    names = list(funcs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, n = funcs[name], loops[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
            if GAP_S:
                time.sleep(GAP_S)
        if on_repeat is not None:
            on_repeat(r + 1)
    return {
        n: {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "calls_per_sample": loops[n],
        }
        for n, s in samples.items()
    }


# --------------------------------------------------------------------------- run


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return None


def machine_info() -> dict[str, Any]:
    """Platform, CPUs and library versions, for the record of a run.

    Returns
    -------
    dict
        JSON-serialisable.
    """
    info: dict[str, Any] = dict(config())
    info["cpu_model"] = _cpu_model()
    if hasattr(os, "sched_getaffinity"):
        info["usable_cpus"] = len(os.sched_getaffinity(0))
    for dist in ("torch", "onnxruntime", "onnx"):
        info[dist] = _version(dist)
    return info


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
    from ._bench_peers import _mismatch, _resolve_peers

    todo = list(DEFAULT_CASES if cases is None else cases)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    nthreads = max_threads() if threads is None else int(threads)
    if nthreads < 1:
        raise ValueError(f"threads must be a positive int, got {threads}")
    peer_list = _resolve_peers(peers)
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
                    problem = _mismatch(expected, fn(), case.dtype) if peer.checked else None
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


# --------------------------------------------------------------------------- report


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_table(results: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of medians and ratios, one row per case.

    Parameters
    ----------
    results : sequence of dict
        The output of :func:`run`.

    Returns
    -------
    str
        Cells are ``median (ratio x)``; ``ratio`` is peer median / bertembed
        median, so above 1 means bertembed is faster. Skipped peers show
        their status; ``-`` means the peer does not apply to the case.
    """
    if not results:
        return "(no results)"
    peers: list[str] = []
    for r in results:
        for name in [*r["timings"], *r["skipped"]]:
            if name != "bertembed" and name not in peers:
                peers.append(name)
    header = ["case", "T", "be T", "bertembed", *peers, "goals"]
    rows = []
    for r in results:
        row = [r["name"], str(r["threads"]), str(r.get("bertembed_threads", r["threads"])),
               _fmt_time(r["timings"]["bertembed"]["median_s"])]
        for p in peers:
            if p in r["timings"]:
                row.append(f"{_fmt_time(r['timings'][p]['median_s'])} ({r['ratios'][p]:.2f}x)")
            elif p in r["skipped"]:
                row.append(r["skipped"][p]["status"])
            else:
                row.append("-")
        goals = []
        for p, g in r["goals"].items():
            verdict = "n/a" if g["met"] is None else ("met" if g["met"] else "MISSED")
            goals.append(f"{p}>={g['min_ratio']:.2f}x {verdict}")
        row.append("; ".join(goals) or "-")
        rows.append(row)
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    m = results[0]["machine"]
    lines.append("")
    lines.append(
        f"medians of {results[0]['repeats']} interleaved repeats; cell = median "
        "(peer median / bertembed median; >1 means bertembed is faster)"
    )
    lines.append(
        "T: threads every contender may use; be T: what bertembed's automatic choice took under that ceiling"
    )
    lines.append(
        f"machine: {m.get('platform')}, {m.get('cpu_model')}, cpu_count={m.get('cpu_count')}; "
        f"numpy {m.get('numpy')}, torch {m.get('torch')}, onnxruntime {m.get('onnxruntime')}"
    )
    skipped = {(p, s["status"], s["reason"]) for r in results for p, s in r["skipped"].items()}
    for p, status, reason in sorted(skipped):
        lines.append(f"{p}: {status}: {reason}")
    return "\n".join(lines)
