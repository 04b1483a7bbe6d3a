"""W pre-forked workers on this machine: the automatic thread choice vs fixed counts.

Each configuration runs in its own fresh process (``_bench.spawn``), which
builds one layer (B=8, S=128, H=768 float32 + LayerNorm), forks W workers
that start together and call it back to back for ``--seconds``, and reports
the total calls per second and the p99 call time over all workers. Several
rounds, interleaved; medians printed.

    python benchmarks/workers.py --rounds 3 --seconds 3
"""

from __future__ import annotations

import argparse
import statistics

from bertembed._bench import spawn

_CHILD = r"""
import json, os, sys, time
import numpy as np, bertembed
from bertembed._bench import spawn
from bertembed._bench.timing import CallLog
W, threads, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
rng = np.random.default_rng(0)
H = 768
layer = bertembed.BertEmbeddings(rng.standard_normal((30522, H), dtype=np.float32),
                                 rng.standard_normal((512, H), dtype=np.float32),
                                 ln_weight=np.ones(H, np.float32), ln_bias=np.zeros(H, np.float32))
ids = rng.integers(0, 30522, (8, 128))
nt = None if threads == "auto" else int(threads)
layer(ids, num_threads=nt)
start_at = time.monotonic() + 0.5
pipes = []
for _ in range(W):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        while time.monotonic() < start_at:
            time.sleep(0.001)
        log, end = CallLog(lambda: layer(ids, num_threads=nt)), time.monotonic() + seconds
        while time.monotonic() < end:
            log()
        os.write(w, json.dumps([c.seconds for c in log.records]).encode())
        os._exit(0)
    os.close(w)
    pipes.append((pid, r))
lat = []
for pid, r in pipes:
    chunks = []
    while chunk := os.read(r, 1 << 20):
        chunks.append(chunk)
    os.waitpid(pid, 0)
    lat += json.loads(b"".join(chunks))
spawn.emit({"calls_per_s": len(lat) / seconds, "p99_ms": float(np.percentile(lat, 99)) * 1e3})
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--quick", action="store_true", help="one round of 0.3 s, W = 1 and 2 (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.workers = 1, 0.3, "1,2"
    settings = ["auto", "1", "2"]
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for w in (int(x) for x in args.workers.split(",")):
            for s in settings:
                got = spawn.run_child(_CHILD, [str(w), s, str(args.seconds)])
                results.setdefault((w, s), []).append(got)
    print("| W | threads | calls/s (median) | p99 ms (median) |")
    print("|---|---|---|---|")
    for (w, s), runs in results.items():
        cps = statistics.median(r["calls_per_s"] for r in runs)
        p99 = statistics.median(r["p99_ms"] for r in runs)
        print(f"| {w} | {s} | {cps:.0f} | {p99:.2f} |")
    print()
    print("| W | best fixed | automatic / best fixed: calls/s | p99 |")
    print("|---|---|---|---|")
    for w in sorted({w for w, _ in results}):

        def med(s: str, key: str, w: int = w) -> float:
            return statistics.median(r[key] for r in results[(w, s)])

        best = max(("1", "2"), key=lambda s: med(s, "calls_per_s"))
        print(
            f"| {w} | {best} | {med('auto', 'calls_per_s') / med(best, 'calls_per_s'):.2f} | "
            f"{med('auto', 'p99_ms') / med(best, 'p99_ms'):.2f} |"
        )


if __name__ == "__main__":
    main()
