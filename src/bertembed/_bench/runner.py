"""``run``: time bertembed and its peers on each case, compare, and evaluate the goals.

Two scenarios:

``isolated`` (the default)
    Every variant (a contender at one thread count) of every case is timed
    in its own fresh Python process, alone: the tables are made from the
    same seed in each process, bertembed's output is saved by its own
    process and every checked peer's output is compared with it before
    timing. No runtime's idle workers spin next to another.
``shared-process``
    Every variant of a case is built in this process and timed interleaved
    round-robin (each repeat times every variant once, the order rotated,
    with a short pause between samples): bertembed next to runtimes whose
    workers spin.

Peers that have a thread setting (torch, ONNX Runtime) are measured at 1
and at T threads and the faster counts; bertembed is measured at its
automatic choice (its figure) and at 1 and at T. Ratios are ``peer median /
bertembed median`` (above 1: bertembed is faster).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .. import max_threads
from .._core import _kernel, knobs
from .cases import DEFAULT_CASES, GOALS, Goal
from .data import BERTEMBED, BERTEMBED_T, SCENARIOS, Case, Context, Peer, Variant, make_inputs
from .machine import machine_info
from .measure import Skip, build_variant, check_isa, peer_ref
from .peers import resolve_peers
from .schema import SCHEMA_VERSION, parse
from .spawn import run_function
from .subject import automatic_threads
from .timing import Contender, summarize, time_interleaved

Progress = Callable[[int, int, str], None]

#: The function each process of the isolated scenario runs (:func:`bertembed._bench.worker.main`).
WORKER = "bertembed._bench.worker:main"


def plan(case: Case, peers: Sequence[Peer], threads: int) -> list[tuple[Variant, Peer | None]]:
    """The variants of ``case``: bertembed (automatic, then at 1 and at T), then each applicable peer.

    Examples
    --------
    >>> from bertembed._bench.cases import make_case
    >>> from bertembed._bench.peers import resolve_peers
    >>> [v.label for v, _ in plan(make_case("float32", True, 1, 128),
    ...                            resolve_peers(["numpy", "torch"]), 2)]
    ['bertembed', 'bertembed@1', 'bertembed@2', 'numpy@1', 'torch@1', 'torch@2']
    """
    variants: list[tuple[Variant, Peer | None]] = [(Variant(BERTEMBED, None), None)]
    for t in sorted({1, threads}):
        variants.append((Variant(BERTEMBED, t), None))
    for peer in peers:
        if peer.applies(case):
            for t in sorted({1, threads}) if peer.threaded else [1]:
                variants.append((Variant(peer.name, t), peer))
    return variants


#: The isolated scenario times each variant in this many processes, in rotation
#: (the repeats are shared among them), so that a burst of noise on the
#: machine (another VM on the host) hits every contender, not just one.
ROUNDS = 3


def _merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's record from its processes: all samples pooled (median, min)."""
    failed = [r for r in runs if r.get("status") != "ok"]
    if failed:
        return failed[0]
    merged = {
        **runs[0],
        **summarize([x for r in runs for x in r["samples_s"]]),
        "pid": [r["pid"] for r in runs],
    }
    autos = [r["auto_threads"] for r in runs if r.get("auto_threads") is not None]
    if autos:
        merged["auto_threads"] = max(set(autos), key=autos.count)
    return merged


def _measure_isolated(
    case: Case,
    variants: list[tuple[Variant, Peer | None]],
    *,
    threads: int,
    repeats: int,
    seed: int,
    min_sample_s: float | None,
    tmp: Path,
    step: Callable[[str], None],
    rounds: int = ROUNDS,
) -> dict[str, dict[str, Any]]:
    expected = tmp / "expected.npy"
    rounds = max(1, min(rounds, repeats))
    runs: dict[str, list[dict[str, Any]]] = {v.label: [] for v, _ in variants}
    done: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        # The repeats shared among the rounds (the first ones take the remainder).
        base = {
            "case": asdict(case),
            "T": threads,
            "seed": seed,
            "min_sample_s": min_sample_s,
            "repeats": repeats // rounds + (1 if r < repeats % rounds else 0),
        }
        for variant, peer in variants:
            label = variant.label
            if label in done:
                continue
            first = r == 0 and label == variants[0][0].label
            mine = runs[variants[0][0].label]
            if not first and (not mine or mine[-1].get("status") != "ok"):
                # Nothing to check against, and nothing to compare with.
                done[label] = {
                    "status": mine[-1]["status"] if mine else "error",
                    "reason": "bertembed could not run this case",
                }
                step(label)
                continue
            spec = {**base, "contender": variant.contender, "threads": variant.threads}
            paths: list[str] = []
            if peer is not None:
                ref = peer_ref(peer)
                spec["peer"] = ref
                if ref.get("path"):
                    paths.append(ref["path"])
            if first:
                spec["save_expected"] = str(expected)
            else:
                spec["expected"] = str(expected)
            env = {"OMP_NUM_THREADS": str(threads)} if peer is None else {}
            if case.isa is not None:
                env[knobs.ISA.name] = case.isa
            try:
                result = run_function(WORKER, [json.dumps(spec)], env=env, paths=paths)
            except RuntimeError as exc:
                result = {"status": "error", "reason": str(exc)}
            runs[label].append(result)
            if result.get("status") != "ok":
                done[label] = result  # unavailable, mismatch or error: not tried again
            if r == rounds - 1 or label in done:
                step(label)
    with contextlib.suppress(OSError):
        expected.unlink()
    return {label: done.get(label) or _merge(rs) for label, rs in runs.items()}


def _measure_shared(
    case: Case,
    variants: list[tuple[Variant, Peer | None]],
    *,
    threads: int,
    repeats: int,
    seed: int,
    min_sample_s: float | None,
    stack: contextlib.ExitStack,
    cache: dict[Any, Any],
    on_repeat: Callable[[int], None],
) -> dict[str, dict[str, Any]]:
    inputs = make_inputs(case, seed, cache)
    # bertembed's automatic choice, under this run's ceiling T (this thread's
    # own ceiling is given back when the run ends).
    stack.callback(_kernel.set_max_threads, max_threads())
    _kernel.set_max_threads(threads)
    mine = Variant(BERTEMBED, None)
    measured: dict[str, dict[str, Any]] = {}
    try:
        check_isa(case)  # (one process: the kernel it picked at import)
        contender, got = build_variant(case, inputs, mine, None, Context(threads, stack, cache))
    except Skip as skip:
        measured[BERTEMBED] = skip.as_dict()
        for variant, _ in variants[1:]:
            measured[variant.label] = {"status": skip.status, "reason": "bertembed could not run this case"}
        return measured
    expected = np.array(got)
    del got
    contenders: dict[str, Contender] = {BERTEMBED: contender}
    for variant, peer in variants[1:]:
        ctx = Context(variant.threads or threads, stack, cache)
        try:
            contenders[variant.label], _ = build_variant(case, inputs, variant, peer, ctx, expected)
        except Skip as skip:
            measured[variant.label] = skip.as_dict()
    del expected
    timings = time_interleaved(contenders, repeats, min_sample_s=min_sample_s, on_repeat=on_repeat)
    for label, timing in timings.items():
        measured[label] = {"status": "ok", **timing}
    measured[BERTEMBED]["auto_threads"] = automatic_threads()
    return measured


def _result(
    case: Case,
    variants: list[tuple[Variant, Peer | None]],
    measured: dict[str, dict[str, Any]],
    *,
    threads: int,
    repeats: int,
    scenario: str,
    machine: dict[str, Any],
) -> dict[str, Any]:
    """One case's JSON-serialisable record: every variant, each contender's best, ratios."""
    records: dict[str, dict[str, Any]] = {}
    by_name: dict[str, list[str]] = {}
    for variant, _ in variants:
        name = variant.contender
        if variant.contender == BERTEMBED:
            name = BERTEMBED if variant.threads is None else BERTEMBED_T
        records[variant.label] = {
            "contender": name,
            "threads": variant.threads,
            **measured.get(variant.label, {"status": "error", "reason": "not measured"}),
        }
        by_name.setdefault(name, []).append(variant.label)
    timings: dict[str, dict[str, Any]] = {}
    skipped: dict[str, dict[str, str]] = {}
    for name, labels in by_name.items():
        ok = [lab for lab in labels if records[lab]["status"] == "ok"]
        if ok:
            best = min(ok, key=lambda lab: records[lab]["median_s"])
            rec = records[best]
            timings[name] = {
                "median_s": rec["median_s"],
                "min_s": rec["min_s"],
                "calls_per_sample": rec["calls_per_sample"],
                "threads": rec["threads"],
                "variant": best,
            }
        else:
            first = records[labels[0]]
            skipped[name] = {"status": first["status"], "reason": first.get("reason", "")}
    auto = records.get(BERTEMBED, {}).get("auto_threads")
    if BERTEMBED in timings:
        timings[BERTEMBED]["threads"] = auto
    ratios: dict[str, float] = {}
    ratios_min: dict[str, float] = {}
    if BERTEMBED in timings:
        mine, best = timings[BERTEMBED]["median_s"], timings[BERTEMBED]["min_s"]
        for name, t in timings.items():
            if name != BERTEMBED:
                ratios[name] = t["median_s"] / mine
                ratios_min[name] = t["min_s"] / best
    return {
        "schema_version": SCHEMA_VERSION,
        **asdict(case),
        "scenario": scenario,
        "threads": threads,
        "repeats": repeats,
        "result_bytes": case.result_bytes,
        "bertembed_threads": auto,
        "variants": records,
        "timings": timings,
        "ratios": ratios,
        "ratios_min": ratios_min,
        "skipped": skipped,
        "goals": {},
        "machine": machine,
    }


def _side(by_case: dict[str, dict[str, Any]], case: str, names: tuple[str, ...]) -> tuple[float | None, str]:
    """The fastest of ``names`` in ``case``: (median seconds, its variant), or (None, why not)."""
    result = by_case.get(case)
    if result is None:
        return None, f"case {case} was not run"
    found = [
        (result["timings"][n]["median_s"], result["timings"][n]["variant"]) for n in names if n in result["timings"]
    ]
    if found:
        return min(found)
    why = [f"{n} {result['skipped'][n]['status']}" for n in names if n in result["skipped"]]
    return None, f"{case}: " + (", ".join(why) or f"{'/'.join(names)} not measured")


def evaluate_goals(results: Sequence[dict[str, Any]], goals: Sequence[Goal] = GOALS) -> None:
    """Attach each goal's measured ratio and verdict to the result of its case (in place).

    A goal whose case was not run is left out; one whose contenders were not
    all measured gets ``ratio`` None, ``met`` None and a ``reason``.
    """
    by_case = {r["name"]: r for r in results}
    for goal in goals:
        home = by_case.get(goal.case)
        if home is None:
            continue
        num, num_label = _side(by_case, goal.numerator_case or goal.case, goal.numerator)
        den, den_label = _side(by_case, goal.case, goal.denominator)
        entry: dict[str, Any] = {"text": goal.text, "op": goal.op, "bound": goal.bound, "ratio": None, "met": None}
        if num is None or den is None:
            entry["reason"] = num_label if num is None else den_label
        else:
            ratio = num / den
            entry.update(
                ratio=ratio,
                numerator=num_label,
                denominator=den_label,
                met=bool(ratio >= goal.bound if goal.at_least else ratio <= goal.bound),
            )
        home["goals"][goal.key] = entry


def run(
    cases: Sequence[Case] | None = None,
    *,
    repeats: int = 15,
    threads: int | None = None,
    peers: Iterable[str | Peer] | None = None,
    progress: Progress | None = None,
    seed: int = 0,
    scenario: str = "isolated",
    min_sample_s: float | None = None,
    rounds: int = ROUNDS,
) -> list[dict[str, Any]]:
    """Time bertembed and its peers on each case and compare medians.

    Parameters
    ----------
    cases : sequence of Case, optional
        Default :data:`~bertembed._bench.cases.DEFAULT_CASES`.
    repeats : int, default 15
        Timed samples per variant and case.
    threads : int, optional
        T: the most threads any contender may use (bertembed's automatic
        choice runs under it); default :func:`bertembed.max_threads`.
    peers : iterable of str or Peer, optional
        Names from :data:`~bertembed._bench.peers.PEERS` (default: all) or
        custom :class:`~bertembed._bench.data.Peer` objects (in the isolated
        scenario their ``build`` must be a module-level function). A peer
        whose library is missing is reported as unavailable; one whose
        output differs from bertembed's as a mismatch, and is not timed.
    progress : callable, optional
        ``progress(done, total, label)``, called as work advances.
    seed : int, default 0
        Seed of the random tables and ids.
    scenario : {"isolated", "shared-process"}
        See the module docstring.
    min_sample_s : float, optional
        Shortest timed sample (default
        :data:`bertembed._bench.timing.MIN_SAMPLE_S`).
    rounds : int, default :data:`ROUNDS`
        Isolated scenario: each variant is timed in this many processes, in
        rotation with the other variants, its repeats shared among them.

    Returns
    -------
    list of dict
        One JSON-serialisable dict per case (the layout of
        :mod:`bertembed._bench.schema`, which checks it before it is
        returned): ``schema_version``, the case's fields, ``scenario``,
        ``threads`` (T), ``repeats``, ``result_bytes``, ``bertembed_threads``
        (the automatic choice), ``variants`` (every variant's timing or
        ``status`` and ``reason``), ``timings`` (per contender, its fastest
        variant: ``median_s``, ``min_s``, ``calls_per_sample``, ``threads``,
        ``variant``; ``bertembed`` is the automatic choice, ``bertembed-T``
        bertembed at T), ``ratios`` (contender median / bertembed median),
        ``ratios_min`` (the same for the fastest samples), ``skipped``
        (contenders with no timed variant: ``status`` and ``reason``),
        ``goals`` (the performance goals of the case) and ``machine``.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    todo = list(DEFAULT_CASES if cases is None else cases)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    nthreads = max_threads() if threads is None else int(threads)
    if nthreads < 1:
        raise ValueError(f"threads must be a positive int, got {threads}")
    peer_list = resolve_peers(peers)
    plans = [plan(case, peer_list, nthreads) for case in todo]
    if scenario == "isolated":
        for variants in plans:  # refuse unusable custom peers before any work
            for _, peer in variants:
                if peer is not None:
                    peer_ref(peer)
    machine = machine_info()
    machine["python_executable"] = sys.executable
    isolated = scenario == "isolated"
    total = sum(len(v) for v in plans) if isolated else len(todo) * repeats
    done = 0

    def report(label: str) -> None:
        if progress is not None:
            progress(done, total, label)

    results = []
    with contextlib.ExitStack() as stack:
        cache: dict[Any, Any] = {}
        tmp = (
            None if not isolated else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bertembed-bench-")))
        )
        for case, variants in zip(todo, plans, strict=True):
            report(f"{case.name}: setup")
            if tmp is not None:

                def step(label: str, c: Case = case) -> None:
                    nonlocal done
                    done += 1
                    report(f"{c.name}: {label}")

                measured = _measure_isolated(
                    case,
                    variants,
                    threads=nthreads,
                    repeats=repeats,
                    seed=seed,
                    min_sample_s=min_sample_s,
                    tmp=tmp,
                    step=step,
                    rounds=rounds,
                )
            else:
                start = done

                def on_repeat(r: int, c: Case = case, s: int = start) -> None:
                    nonlocal done
                    done = s + r
                    report(c.name)

                measured = _measure_shared(
                    case,
                    variants,
                    threads=nthreads,
                    repeats=repeats,
                    seed=seed,
                    min_sample_s=min_sample_s,
                    stack=stack,
                    cache=cache,
                    on_repeat=on_repeat,
                )
                done = start + repeats
            results.append(
                _result(case, variants, measured, threads=nthreads, repeats=repeats, scenario=scenario, machine=machine)
            )
    evaluate_goals(results)
    parse(results)  # what the readers will accept (a harness bug otherwise)
    report("done")
    return results
