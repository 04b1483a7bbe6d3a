"""W pre-forked workers on this machine: the automatic thread choice vs fixed counts.

Each configuration runs in its own fresh process (``_bench.spawn``, this
script's :func:`child_main`), which builds the harness's BERT-base layer
(``bert_base_layer``: 30522 x 768 float32 + LayerNorm), forks W
workers that start together and call it back to back on (B, S) ids for
``--seconds``, and reports the total calls per second and the p99 call time
over all workers. W = 1 is one process alone. The settings (automatic, 1 and
2 threads) take turns within each round (``spawn.in_rounds``); medians over
the rounds, with their spread (min-max), and automatic / the best fixed
count. ``--isa`` caps the row kernel (``BERTEMBED_ISA``) in the children.

    python benchmarks/workers.py --rounds 3 --seconds 3 --shapes 8x128,1x128,32x128,32x512
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from bertembed._bench import spawn
from bertembed._bench.subject import bert_base_layer
from bertembed._bench.timing import CallLog


def child_main(argv: list[str]) -> dict[str, float]:
    """One configuration, in a fresh process (``W THREADS SECONDS B S``): W forked workers.

    Builds the harness's BERT-base layer (float32 + LayerNorm) and (B, S)
    ids, calls it once, then forks W workers that start together and call it
    back to back for SECONDS, each with ``num_threads`` THREADS (``auto``:
    the automatic choice).

    Parameters
    ----------
    argv : list of str
        ``[W, THREADS, SECONDS, B, S]``.

    Returns
    -------
    dict
        ``calls_per_s`` (all workers together) and ``p99_ms`` (over every
        worker's calls).
    """
    w, threads, seconds, batch, seq = int(argv[0]), argv[1], float(argv[2]), int(argv[3]), int(argv[4])
    layer, ids = bert_base_layer(batch, seq, layer_norm=True, seed=0)
    nt = None if threads == "auto" else int(threads)
    layer(ids, num_threads=nt)
    start_at = time.monotonic() + 0.5
    pipes = []
    for _ in range(w):
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            while time.monotonic() < start_at:
                time.sleep(0.001)
            log, end = CallLog(lambda: layer(ids, num_threads=nt)), time.monotonic() + seconds
            while time.monotonic() < end:
                log()
            os.write(wfd, json.dumps([c.seconds for c in log.records]).encode())
            os._exit(0)
        os.close(wfd)
        pipes.append((pid, r))
    lat: list[float] = []
    for pid, r in pipes:
        chunks = []
        while chunk := os.read(r, 1 << 20):
            chunks.append(chunk)
        os.waitpid(pid, 0)
        lat += json.loads(b"".join(chunks))
    return {"calls_per_s": len(lat) / seconds, "p99_ms": float(np.percentile(lat, 99)) * 1e3}


SETTINGS = ("auto", "1", "2")


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts (1: one process alone)")
    ap.add_argument("--shapes", default="8x128", help="comma-separated BxS shapes of the ids")
    ap.add_argument("--isa", default="", help="BERTEMBED_ISA for the children (e.g. avx2)")
    ap.add_argument("--quick", action="store_true", help="one round of 0.3 s, W = 1 and 2 (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.workers = 1, 0.3, "1,2"
    env = {"BERTEMBED_ISA": args.isa} if args.isa else None
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    results: dict[tuple[tuple[int, ...], int, str], list[dict[str, float]]] = {}
    for shape in shapes:
        for w in workers:
            for _, s in spawn.in_rounds(SETTINGS, args.rounds):
                argv = [str(w), s, str(args.seconds), *map(str, shape)]
                got = spawn.run_function(f"{__file__}:child_main", argv, env=env)
                results.setdefault((shape, w, s), []).append(got)
    print(f"ISA cap: {args.isa or 'none'}; {args.rounds} rounds of {args.seconds:g} s; median (min-max)")
    print("| B x S | W | auto calls/s | 1 thread | 2 threads | auto / best fixed | auto p99 / best p99 |")
    print("|---|---|---|---|---|---|---|")
    for shape in shapes:
        for w in workers:

            def runs(s: str, key: str, w: int = w, shape: tuple[int, ...] = shape) -> list[float]:
                return [r[key] for r in results[(shape, w, s)]]

            def med(s: str, key: str) -> float:
                return statistics.median(runs(s, key))

            best = max(("1", "2"), key=lambda s: med(s, "calls_per_s"))
            print(
                f"| {shape[0]} x {shape[1]} | {w} | "
                + " | ".join(_spread(runs(s, "calls_per_s")) for s in SETTINGS)
                + f" | {med('auto', 'calls_per_s') / med(best, 'calls_per_s'):.2f} (best: {best}) | "
                f"{med('auto', 'p99_ms') / med(best, 'p99_ms'):.2f} |"
            )


if __name__ == "__main__":
    main()
