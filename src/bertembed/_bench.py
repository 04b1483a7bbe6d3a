"""Benchmark harness: bertembed side by side with NumPy, torch and ONNX Runtime.

Every contender of a case is timed in the same run, interleaved round-robin
(each repeat times every contender once, the order rotated), and reported as
a median; ratios are ``peer median / bertembed median`` (above 1: bertembed
is faster). Each peer's output is compared with bertembed's before it is
timed, so no ratio ever compares different work.

Only NumPy is needed to import this module. torch, onnx and onnxruntime are
imported when their peer is built; a missing one is reported as unavailable.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
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


# --------------------------------------------------------------------------- peers


def _numpy_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    positions = np.arange(case.seq)

    def call() -> np.ndarray:
        e = d.tok[d.ids] + d.pos[positions] + d.seg[d.segment_ids]
        if case.layer_norm:
            centred = e - e.mean(axis=-1, keepdims=True)
            var = (centred * centred).mean(axis=-1, keepdims=True)
            e = centred / np.sqrt(var + LN_EPS) * d.ln_weight + d.ln_bias
        return e

    return call


def _copyto_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    shape = (case.batch, case.seq, case.H)
    src = np.full(shape, 0.5, case.dtype)
    dst = np.zeros(shape, case.dtype)
    dst.fill(1.0)

    def call() -> np.ndarray:
        np.copyto(dst, src)
        return dst

    return call


def _torch_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    import torch
    import torch.nn.functional as F

    ctx.stack.callback(torch.set_num_threads, torch.get_num_threads())
    torch.set_num_threads(ctx.threads)
    tok, pos, seg = (torch.from_numpy(a) for a in (d.tok, d.pos, d.seg))
    w, b = torch.from_numpy(d.ln_weight), torch.from_numpy(d.ln_bias)
    ids, sids = torch.from_numpy(d.ids), torch.from_numpy(d.segment_ids)
    positions = torch.arange(case.seq).unsqueeze(0)  # like BertEmbeddings' buffer

    def call() -> Any:
        with torch.inference_mode():
            e = F.embedding(ids, tok) + F.embedding(positions, pos) + F.embedding(sids, seg)
            if case.layer_norm:
                e = F.layer_norm(e, (case.H,), w, b, LN_EPS)
        return e.numpy()

    return call


def _ort_session(d: Inputs, ctx: Context) -> Any:
    """An ONNX Runtime session of one com.microsoft EmbedLayerNormalization node."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    key = ("ort", id(d.tok), ctx.threads)
    if key in ctx.cache:
        return ctx.cache[key]
    hidden = d.tok.shape[1]
    names = ["word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"]
    arrays = [d.tok, d.pos, d.seg, d.ln_weight, d.ln_bias]
    node = helper.make_node(
        "EmbedLayerNormalization",
        ["input_ids", "segment_ids", *names],
        ["output", "mask_index"],
        domain="com.microsoft",
        epsilon=LN_EPS,
    )
    graph = helper.make_graph(
        [node],
        "bert_input_embeddings",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "seq"]),
            helper.make_tensor_value_info("segment_ids", TensorProto.INT32, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("mask_index", TensorProto.INT32, ["batch"]),
        ],
        initializer=[numpy_helper.from_array(a, n) for n, a in zip(names, arrays, strict=True)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ctx.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    ctx.cache[key] = session
    return session


def _ort_build(case: Case, d: Inputs, ctx: Context) -> Fn:
    session = _ort_session(d, ctx)
    feed = {
        "input_ids": d.ids.astype(np.int32),
        "segment_ids": d.segment_ids.astype(np.int32),
    }

    def call() -> np.ndarray:
        return session.run(["output"], feed)[0]

    return call


#: Known peers, by name.
PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("numpy", lambda c: not c.out, _numpy_build),
        Peer("copyto", lambda c: c.out, _copyto_build, checked=False),
        Peer("torch", lambda c: not c.out, _torch_build),
        Peer(
            "onnxruntime",
            lambda c: c.layer_norm and c.dtype == "float32" and not c.out,
            _ort_build,
        ),
    )
}


def _resolve_peers(peers: Iterable[str | Peer] | None) -> list[Peer]:
    if peers is None:
        return list(PEERS.values())
    resolved = []
    for p in peers:
        if isinstance(p, Peer):
            resolved.append(p)
        elif p in PEERS:
            resolved.append(PEERS[p])
        else:
            raise ValueError(f"unknown peer {p!r}; known peers: {', '.join(PEERS)}")
    return resolved


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


def _mismatch(expected: np.ndarray, got: Any, dtype: str) -> str | None:
    """None when ``got`` is close to ``expected`` (loosely), else a description."""
    got = np.asarray(got)
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    tol = 1e-3 if dtype == "float32" else 1e-7
    a, b = expected.reshape(-1), got.reshape(-1)
    worst, bad = 0.0, 0
    step = 1 << 20  # chunks: no full-size temporaries for 100 MB results
    for i in range(0, a.size, step):
        x = a[i : i + step].astype(np.float64)
        y = b[i : i + step].astype(np.float64)
        diff = np.abs(x - y)
        ok = diff <= tol + tol * np.abs(x)
        bad += int(ok.size - np.count_nonzero(ok))
        if diff.size:
            worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else math.inf)
    if bad:
        return f"{bad} of {a.size} values differ from bertembed's (max |diff| {worst:.3g})"
    return None


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


# --------------------------------------------------------------------------- memory


def _rss_status() -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of this process in bytes, from ``/proc/self/status`` (Linux).

    VmHWM is the peak of this process image only; ``ru_maxrss`` would not
    do, as Linux carries the parent's peak across fork and exec.
    """
    found = {}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    if len(found) != 2:
        return None
    return found["VmRSS"], found["VmHWM"]


def _rss_probe(spec: str) -> None:
    """Child side of the RSS measurement: print RSS and peaks around one call."""
    args = json.loads(spec)
    case = Case(**args["case"])
    cache: dict[Any, Any] = {}
    call = bertembed_call(case, make_inputs(case, args["seed"], cache), args["threads"])
    # Start the OpenMP pool (thread stacks) with a call too small to matter.
    small = replace(case, batch=1, seq=min(case.seq, args["threads"]), out=False)
    bertembed_call(small, make_inputs(small, args["seed"], cache), args["threads"])()
    before = _rss_status()
    call()
    after = _rss_status()
    if before is None or after is None:
        print(json.dumps(None))
        return
    print(json.dumps({"before": before[0], "peak_before": before[1], "peak": after[1]}))


def _rss_extra(case: Case, seed: int, threads: int) -> dict[str, Any]:
    spec = json.dumps({"case": asdict(case), "seed": seed, "threads": threads})
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    code = f"from bertembed._bench import _rss_probe; _rss_probe({spec!r})"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        return {"rss_error": proc.stderr.strip().splitlines()[-1:]}
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if got is None:
        return {"rss_error": "no VmRSS/VmHWM in /proc/self/status"}
    # The peak before the call must not exceed the RSS just before it, or the
    # call's own peak could hide under an older one.
    baseline = max(got["before"], got["peak_before"])
    extra = got["peak"] - baseline
    return {
        "rss_extra_bytes": extra,
        "rss_ratio": extra / case.result_bytes if case.result_bytes else None,
        "rss_baseline_ok": got["peak_before"] <= got["before"] + (1 << 20),
    }


def peak_memory(
    case: Case, *, seed: int = 0, threads: int | None = None, rss: bool = True
) -> dict[str, Any]:
    """Peak extra memory of one bertembed call, relative to its result's size.

    Two measurements: tracemalloc in this process (NumPy reports its array
    allocations to it), and, with ``rss`` on Linux, the rise of the peak
    resident set size around the call in a fresh subprocess (which also sees
    memory the kernel allocates with plain ``malloc``).

    Parameters
    ----------
    case : Case
    seed : int, default 0
    threads : int, optional
        Default :func:`bertembed.max_threads`.
    rss : bool, default True
        Also measure in a subprocess (skipped where ``/proc`` is missing).

    Returns
    -------
    dict
        ``case``, ``result_bytes``, ``extra_bytes`` and ``ratio``
        (tracemalloc), ``rss_extra_bytes`` and ``rss_ratio`` (or
        ``rss_error``), ``goal`` (:data:`PEAK_MEMORY_GOAL`) and ``met``. With
        ``case.out`` the result buffer exists before the call, so the ratio
        is close to 0.
    """
    nthreads = max_threads() if threads is None else threads
    call = bertembed_call(case, make_inputs(case, seed), nthreads)
    call()  # warm: lazily built constants are not the call's memory
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
        del result
    finally:
        if not tracing:
            tracemalloc.stop()
    extra = peak - base
    ratio = extra / case.result_bytes if case.result_bytes else 0.0
    report: dict[str, Any] = {
        "case": case.name,
        "threads": nthreads,
        "result_bytes": case.result_bytes,
        "extra_bytes": extra,
        "ratio": ratio,
        "goal": PEAK_MEMORY_GOAL,
    }
    worst = ratio
    if rss and sys.platform.startswith("linux"):
        report.update(_rss_extra(case, seed, nthreads))
        if report.get("rss_ratio") is not None:
            worst = max(worst, report["rss_ratio"])
    report["met"] = bool(worst <= PEAK_MEMORY_GOAL)
    return report
