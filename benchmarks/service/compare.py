"""The service with bertembed against the same service with the embedding step in torch.

Usage::

    python compare.py OUT_DIR [--workers W] [--rounds 3] [--requests 400] [--clients 16] [--json FILE]
    python compare.py OUT_DIR --memory-only [--workers W]

Starts two services from the same artifact (``bertembed serve``, W workers each, on
free ports): ``SERVICE_EMBEDDING=bertembed`` (the tables memory-mapped) and
``SERVICE_EMBEDDING=torch`` (transformers' ``BertEmbeddings`` module). Both
stay up the whole time, but only one is under load at any moment; the
variants alternate within each round, so a busy machine slows both alike.
Each round runs every scenario (:data:`SCENARIOS`; the batch scenario sends
half as many requests) against each variant with ``loadtest.run_load``.
Printed: a Markdown table of the median over rounds of p50/p99 latency and
requests/s, with the mean server-side time of the embedding step and of the
encoder, then the memory of each variant's workers from /proc (Linux), taken
after a short warm-up load. The tables file is the one bertembed maps:
``model.safetensors``, or the converted layer of an export made with
``--table-dtype``. ``--memory-only`` starts the bertembed service alone and
prints its memory, with no load rounds (to compare exports of several table
dtypes).

Needs everything the service and its torch variant need (torch, transformers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import loadtest

from bertembed._bench.spawn import stop_process
from bertembed.serve.server import procinfo

HERE = Path(__file__).resolve().parent
VARIANTS = ("bertembed", "torch")
#: name -> (texts per request, mean words per text, share of --requests)
SCENARIOS = {"1 text of ~12 words": (1, 12, 1.0), "16 texts of ~24 words": (16, 24, 0.5)}
MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask where the OS has one (Linux), else the CPU count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def start(out_dir: Path, variant: str, workers: int, log_dir: Path) -> tuple[subprocess.Popen, str]:
    """Start ``bertembed serve`` for one variant (in its own process group where the OS has them).

    Returns the process and its URL. The torch variant's workers import
    ``torch_embedding`` from this folder (on their ``PYTHONPATH``).
    """
    port = _free_port()
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "SERVICE_EMBEDDING": variant, "PYTHONPATH": path}
    with open(log_dir / f"{variant}.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bertembed", "serve", str(out_dir), "--port", str(port), "--workers", str(workers)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return process, f"http://127.0.0.1:{port}"


def wait_ready(process: subprocess.Popen, url: str, workers: int, timeout: float = 120.0) -> None:
    """Until every worker has answered /healthz."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the service exited with {process.returncode}")
        try:
            answer = httpx.get(f"{url}/healthz", headers={"Connection": "close"}, timeout=5)
            if answer.status_code == 200:
                seen.add(answer.json()["pid"])
        except httpx.HTTPError:
            pass
        if len(seen) >= workers and set(procinfo.children(process.pid)) <= seen:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url}: workers not ready within {timeout} s")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL what is left (the harness's stop_process), then reap the child."""
    stop_process(process)
    process.wait()


def memory_of(process: subprocess.Popen, checkpoint: Path) -> dict[str, float]:
    """Mean per-worker memory (MiB) and the master's PSS."""
    rows = []
    for pid in procinfo.children(process.pid):
        whole, mapped = procinfo.memory(pid), procinfo.file_mapping(pid, checkpoint)
        rows.append(
            {
                "rss": whole["Rss"] / MIB,
                "pss": whole["Pss"] / MIB,
                "private": (whole["Private_Clean"] + whole["Private_Dirty"]) / MIB,
                "checkpoint_rss": mapped["Rss"] / MIB,
                "checkpoint_pss": mapped["Pss"] / MIB,
            }
        )
    mean = {key: statistics.fmean(row[key] for row in rows) for key in rows[0]}
    mean["master_pss"] = procinfo.memory(process.pid)["Pss"] / MIB
    return mean


def tables_file(out_dir: Path) -> Path:
    """The file holding the tables the bertembed step maps: the artifact's layer."""
    service = json.loads((out_dir / "service.json").read_text(encoding="utf-8"))
    return out_dir / service["embeddings"]["dir"] / "model.safetensors"


def measure(urls: dict[str, str], rounds: int, requests: int, clients: int) -> dict[str, Any]:
    """{scenario: {variant: [summary per round]}}, variants alternating."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {s: {v: [] for v in urls} for s in SCENARIOS}
    for round_ in range(rounds):
        for scenario, (texts, words, share) in SCENARIOS.items():
            order = list(urls) if round_ % 2 == 0 else list(reversed(urls))
            for variant in order:
                report = asyncio.run(
                    loadtest.run_load(
                        urls[variant],
                        clients=clients,
                        requests=int(requests * share),
                        texts=texts,
                        words=words,
                        seed=round_,
                    )
                )
                summary = report.summary()
                results[scenario][variant].append(summary)
                print(
                    f"round {round_ + 1}, {scenario}, {variant}: p50 {summary['p50_ms']:.1f} ms, "
                    f"p99 {summary['p99_ms']:.1f} ms, {summary['rps']:.1f}/s, {summary['failed']} failed",
                    file=sys.stderr,
                )
    return results


def table(results: dict[str, Any], memory: dict[str, dict[str, float]], workers: int) -> str:
    """The Markdown tables: latency/throughput (median over rounds), then memory."""
    lines = [
        "| scenario | embedding step | p50 ms | p99 ms | requests/s | embedding step ms | encoder ms | failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, by_variant in results.items():
        for variant, runs in by_variant.items():
            med = {k: statistics.median(r[k] for r in runs) for k in ("p50_ms", "p99_ms", "rps")}
            server = {
                k: statistics.fmean(r["server_ms"].get(k, float("nan")) for r in runs) for k in ("embed", "encoder")
            }
            failed = sum(r["failed"] for r in runs)
            lines.append(
                f"| {scenario} | {variant} | {med['p50_ms']:.1f} | {med['p99_ms']:.1f} | "
                f"{med['rps']:.1f} | {server['embed']:.3f} | {server['encoder']:.2f} | {failed} |"
            )
    return "\n".join([*lines, "", memory_table(memory, workers)])


def memory_table(memory: dict[str, dict[str, float]], workers: int) -> str:
    """The Markdown memory table: one row per variant, per-worker means and the master's PSS."""
    lines = [
        "| embedding step | worker RSS MiB | worker PSS MiB | worker private MiB | "
        "tables file mapped: RSS / PSS MiB per worker | master PSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, m in memory.items():
        lines.append(
            f"| {variant} ({workers} workers) | {m['rss']:.1f} | {m['pss']:.1f} | {m['private']:.1f} | "
            f"{m['checkpoint_rss']:.1f} / {m['checkpoint_pss']:.1f} | {m['master_pss']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out_dir", type=Path, help="the artifact (bertembed export's OUT_DIR)")
    parser.add_argument(
        "--workers",
        type=int,
        default=usable_cpus(),
        help="workers per service (default: the usable CPUs)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write every summary here")
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="start the bertembed service alone and print its memory (no load rounds)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the services on SIGTERM too

    log_dir = args.out_dir.resolve().parent
    checkpoint = tables_file(args.out_dir)
    if args.memory_only:
        process, url = start(args.out_dir, "bertembed", args.workers, log_dir)
        try:
            wait_ready(process, url, args.workers)
            asyncio.run(loadtest.run_load(url, clients=args.clients, requests=64, texts=4))
            memory = {"bertembed": memory_of(process, checkpoint)}
        finally:
            stop(process)
        print(
            f"{args.out_dir}: tables file {checkpoint.relative_to(args.out_dir)} "
            f"({checkpoint.stat().st_size / MIB:.1f} MiB)"
        )
        print(memory_table(memory, args.workers))
        if args.json:
            args.json.write_text(json.dumps({"memory": memory}, indent=2))
        return 0
    servers = {v: start(args.out_dir, v, args.workers, log_dir) for v in VARIANTS}
    try:
        for process, url in servers.values():
            wait_ready(process, url, args.workers)
        urls = {v: url for v, (_, url) in servers.items()}
        for url in urls.values():  # warm-up, not measured
            asyncio.run(loadtest.run_load(url, clients=args.clients, requests=64, texts=4))
        # Memory before the long runs: later, other jobs on the machine may
        # evict page-cache pages of the tables that no request has read again.
        memory = {v: memory_of(process, checkpoint) for v, (process, _) in servers.items()}
        results = measure(urls, args.rounds, args.requests, args.clients)
    finally:
        for process, _ in servers.values():
            stop(process)
    print(
        f"{args.workers} workers, {args.clients} clients, {args.requests} requests per run, "
        f"median of {args.rounds} rounds; {os.cpu_count()} CPUs"
    )
    print(table(results, memory, args.workers))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "memory": memory}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
