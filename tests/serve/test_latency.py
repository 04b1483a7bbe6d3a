"""One-query latency: the immediate path, ONNX Runtime's spinning, and what they must not break.

- a request that finds the batcher idle is computed on the tokenizing thread, and gives the
  vectors the batcher gives (same encoder call, bit for bit);
- with spinning on, an idle worker (10 s after a burst of requests) uses under 2% of a core;
- spinning is on only when the workers' threads fit the usable cores;
- ``benchmarks/service/latency.py --quick`` runs and writes its JSON (its structure is checked,
  not its figures).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import ROOT
from service_helpers import Server, serve, skip_without_service_packages

from bertembed.serve.server import batching

#: An idle service's CPU, in cores: the rule every setting keeps.
IDLE_CPU_LIMIT = 0.02
IDLE_SECONDS = 10.0


def _fake_encoder(calls: list[tuple[str, int]]):
    def encode(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        calls.append((threading.current_thread().name, len(seqs)))
        return np.array([[len(s), s[0]] for s in seqs], dtype=np.float32), {"encoder": 0.0}

    return encode


def test_run_now_runs_on_the_callers_thread_only_when_the_batcher_is_idle() -> None:
    calls: list[tuple[str, int]] = []
    batcher = batching.Batcher(_fake_encoder(calls), max_batch_tokens=64, max_texts=4)
    batcher.start()
    try:
        vectors, stages = batcher.run_now([np.arange(3), np.arange(5) + 7])  # type: ignore[misc]
        assert vectors.tolist() == [[3, 0], [5, 7]] and stages == {"encoder": 0.0}
        assert calls == [(threading.current_thread().name, 2)]
        assert batcher.run_now([np.arange(3)] * 5) is None  # more texts than one call takes
        assert batcher.run_now([np.arange(40)] * 2) is None  # more padded tokens than one call takes
    finally:
        batcher.stop()
    assert batcher.run_now([np.arange(3)]) is None  # stopped


def test_run_now_is_refused_while_anything_is_queued_or_running() -> None:
    """Nothing queued is overtaken, and the worker never runs two encoder calls at once."""
    running = threading.Event()
    release = threading.Event()
    calls: list[tuple[str, int]] = []
    inner = _fake_encoder(calls)

    def slow(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        running.set()
        release.wait(30)
        return inner(seqs)

    batcher = batching.Batcher(slow, max_batch_tokens=64, max_texts=4)
    answered = threading.Event()
    batcher.submit([np.arange(4)], lambda result, error: answered.set())
    assert batcher.run_now([np.arange(3)]) is None  # queued, the thread not even started
    batcher.start()
    assert running.wait(30)
    assert batcher.run_now([np.arange(3)]) is None  # a step is running
    release.set()
    assert answered.wait(30)
    deadline = time.monotonic() + 30
    while batcher.run_now([np.arange(2)]) is None:  # idle again once the step is over
        assert time.monotonic() < deadline
        time.sleep(0.001)
    batcher.stop()


def test_run_now_waits_for_a_one_request_step_after_a_grouped_one() -> None:
    """Clients taking turns stay grouped: after a step that served several requests
    the next request goes through the batcher; after a step of one, run_now runs again."""
    calls: list[tuple[str, int]] = []
    batcher = batching.Batcher(_fake_encoder(calls), max_batch_tokens=64, max_texts=4)
    answered = threading.Semaphore(0)
    for n in (3, 4):  # queued before the thread starts: one step serves both
        batcher.submit([np.arange(n)], lambda result, error: answered.release())
    batcher.start()
    try:
        for _ in range(2):
            assert answered.acquire(timeout=30)
        assert calls == [("batcher", 2)]
        assert batcher.run_now([np.arange(3)]) is None  # right after a step of two requests
        batcher.submit([np.arange(5)], lambda result, error: answered.release())
        assert answered.acquire(timeout=30)
        deadline = time.monotonic() + 30
        while (done := batcher.run_now([np.arange(2)])) is None:  # once the step of one is over
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert done[0].tolist() == [[2, 0]]
        assert calls == [("batcher", 2), ("batcher", 1), (threading.current_thread().name, 1)]
    finally:
        batcher.stop()


def test_run_now_makes_the_calls_the_batcher_makes() -> None:
    """A request's vectors do not depend on its path: each row here says how long its call padded to."""

    def encode(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        longest = max(len(s) for s in seqs)
        return np.array([[len(s), longest] for s in seqs], np.float32), {"encoder": 0.0}

    seqs = [np.arange(n) for n in (3, 60, 4, 58, 5)]  # two calls: the short ones and the long ones
    batcher = batching.Batcher(encode, max_batch_tokens=4096, max_texts=32)
    batcher.start()
    try:
        immediate = batcher.run_now(seqs)
        assert immediate is not None
        done = threading.Event()
        got: list[np.ndarray] = []
        batcher.submit(seqs, lambda result, error: (got.append(result), done.set()))
        assert done.wait(30)
    finally:
        batcher.stop()
    assert immediate[0].tolist() == got[0].tolist() == [[3, 5], [60, 60], [4, 5], [58, 60], [5, 5]]


def test_the_batcher_waits_while_an_immediate_call_runs() -> None:
    active = []
    overlap = []
    lock = threading.Lock()
    entered = threading.Event()
    release = threading.Event()

    def encode(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        with lock:
            active.append(1)
            overlap.append(len(active))
        if threading.current_thread().name != "batcher":
            entered.set()
            release.wait(30)
        with lock:
            active.pop()
        return np.zeros((len(seqs), 2), np.float32), {}

    batcher = batching.Batcher(encode, max_batch_tokens=64, max_texts=4)
    batcher.start()
    immediate = threading.Thread(target=batcher.run_now, args=([np.arange(3)],))
    immediate.start()
    assert entered.wait(30)
    answered = threading.Event()
    batcher.submit([np.arange(4)], lambda result, error: answered.set())
    assert not answered.wait(0.2)  # the batcher holds its step while the immediate call runs
    release.set()
    immediate.join(30)
    assert answered.wait(30)
    batcher.stop()
    assert max(overlap) == 1


def test_spinning_only_when_the_threads_fit_the_cores() -> None:
    pytest.importorskip("onnxruntime", reason='the pipeline needs onnxruntime: pip install "bertembed[serve]"')
    from bertembed.serve.server.pipeline import spinning_on, usable_cores

    cores = usable_cores()
    assert spinning_on("auto", cores, 1) is (cores > 1)
    assert not spinning_on("auto", cores, 2)
    assert not spinning_on("auto", 1, 1)  # one thread: no pool to spin
    assert spinning_on("on", cores, 8) and not spinning_on("off", 2, 1)
    with pytest.raises(ValueError, match="spinning must be one of"):
        spinning_on("sometimes", 2)


# --- the service ----------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def spinning_server(out_dir: Path) -> Iterator[Server]:
    skip_without_service_packages()
    # Spinning forced on, with the immediate path: the settings whose idle cost is checked.
    yield from serve(
        out_dir, "server-latency.log", workers=1, SERVICE_ORT_SPINNING="on", SERVICE_THREADS="2", SERVICE_ACCESS_LOG="0"
    )


@pytest.mark.heavy
def test_an_idle_spinning_worker_uses_under_2_percent_of_a_core(spinning_server: Server) -> None:
    import httpx

    texts = ["What is the capital city of France?", "A second, somewhat longer text. " * 8]
    with httpx.Client(base_url=spinning_server.url, timeout=60) as http:
        for k in range(40):  # a burst: one at a time (the immediate path) ...
            assert http.post("/embed", json={"texts": [texts[k % 2]]}).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # ... and concurrent (the batcher)
        answers = list(pool.map(lambda t: httpx.post(f"{spinning_server.url}/embed", json={"texts": [t]}), texts * 10))
    assert all(a.status_code == 200 for a in answers)
    pids = [spinning_server.master, *spinning_server.workers()]
    time.sleep(0.5)  # the burst's last answers leave
    before = {pid: _cpu_seconds(pid) for pid in pids}
    time.sleep(IDLE_SECONDS)
    used = {pid: (_cpu_seconds(pid) - before[pid]) / IDLE_SECONDS for pid in pids}
    print(f"\nidle for {IDLE_SECONDS:.0f} s after a burst, spinning on: cores used per process {used}")
    assert sum(used.values()) < IDLE_CPU_LIMIT, used


@pytest.mark.heavy
def test_the_immediate_path_answers_as_the_batcher_does(spinning_server: Server, out_dir: Path) -> None:
    """The same text, alone (computed at once) and among concurrent requests (batched): the same vector."""
    import httpx

    text = "The same text, whichever way it goes."
    alone = httpx.post(f"{spinning_server.url}/embed", json={"texts": [text]}, timeout=60)
    assert alone.status_code == 200
    stages = dict(part.split(";dur=") for part in alone.headers["Server-Timing"].split(", "))
    assert set(stages) >= {"tokenize", "batch", "embed", "encoder"}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        crowd = list(pool.map(lambda _: httpx.post(f"{spinning_server.url}/embed", json={"texts": [text]}), range(16)))
    expected = np.array(alone.json()["embeddings"], dtype=np.float32)
    for answer in crowd:
        assert answer.status_code == 200
        got = np.array(answer.json()["embeddings"], dtype=np.float32)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


@pytest.mark.heavy
def test_latency_benchmark_quick_writes_its_json(out_dir: Path, tmp_path: Path) -> None:
    skip_without_service_packages()
    script = ROOT / "benchmarks" / "service" / "latency.py"
    if not script.is_file():
        pytest.skip(f"{script} is not in this checkout")
    report = tmp_path / "latency.json"
    src = str(Path(__import__("bertembed").__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--service-dir", str(out_dir), "--json", str(report)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert sum(line.startswith("goal: ") for line in done.stdout.splitlines()) == 2
    data = json.loads(report.read_text())
    assert set(data) >= {"args", "text", "host", "rounds", "summary", "skipped", "goals"}
    assert set(data["summary"]) == {"pipeline", "http"}
    for name, summary in data["summary"].items():
        assert len(data["rounds"][name]) == 1
        for key in ("p50_ms", "p99_ms"):
            assert set(summary["sequential"][key]) == {"median", "lowest", "highest"}
            assert summary["sequential"][key]["median"] > 0
        assert set(summary["concurrent"]) == {"1", "2"}
        for figures in summary["concurrent"].values():
            assert set(figures) == {"p50_ms", "p99_ms", "texts_per_s"}
    assert [g["contender"] for g in data["goals"]] == ["pipeline", "http"]
    for goal in data["goals"]:
        assert set(goal) >= {"goal", "value_ms", "bound_ms", "met"}
    assert data["goals"][0]["met"] is None  # fastembed is not in the quick run
    assert isinstance(data["goals"][1]["met"], bool)
