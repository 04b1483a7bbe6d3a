"""Calls under a container's CPU quota: the threads chosen and the periods throttled.

Makes a cgroup v1 ``cpu`` group with a quota of ``--cpus`` CPUs (``cpu.cfs_quota_us``
over a 100 ms ``cpu.cfs_period_us``), starts a fresh process that moves itself
into it before it imports bertembed, and calls one layer (B=8, S=128, H=768
float32 + LayerNorm) back to back for ``--seconds``: with the automatic choice,
then with ``num_threads=2`` (clipped to the ceiling). It prints the thread
ceiling the process saw and where it came from, the threads its calls used,
calls per second, the p99 call time, and the periods the kernel throttled the
group in (``cpu.stat``). Needs root and a cgroup v1 ``cpu`` hierarchy at
``/sys/fs/cgroup/cpu`` (a cgroup v2 machine: the same rule reads ``cpu.max``;
the tests check both on sample files).

    sudo python benchmarks/quota.py --cpus 1 --seconds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from bertembed._bench import spawn

ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000

_CHILD = r"""
import sys
with open(sys.argv[1] + "/cgroup.procs", "w") as fh:
    fh.write(str(__import__("os").getpid()))
import time
import numpy as np, bertembed
from bertembed._bench import spawn
from bertembed._bench.timing import CallLog
from bertembed._core import _kernel, runtime
threads, seconds = sys.argv[2], float(sys.argv[3])
rng = np.random.default_rng(0)
H = 768
layer = bertembed.BertEmbeddings(rng.standard_normal((30522, H), dtype=np.float32),
                                 rng.standard_normal((512, H), dtype=np.float32),
                                 ln_weight=np.ones(H, np.float32), ln_bias=np.zeros(H, np.float32))
ids = rng.integers(0, 30522, (8, 128))
nt = None if threads == "auto" else int(threads)
used = []
def call():
    layer(ids, num_threads=nt)
    used.append(_kernel.last_auto_threads() if nt is None else min(nt, bertembed.max_threads()))
for _ in range(20):
    call()
used.clear()
with open(sys.argv[1] + "/cpu.stat") as fh:
    before = dict(line.split() for line in fh)
log, end = CallLog(call), time.monotonic() + seconds
while time.monotonic() < end:
    log()
with open(sys.argv[1] + "/cpu.stat") as fh:
    after = dict(line.split() for line in fh)
ceiling, source = runtime.thread_ceiling()
lat = [r.seconds for r in log.records]
spawn.emit({"ceiling": ceiling, "source": source, "threads_used": sorted(set(used)),
            "calls_per_s": len(lat) / seconds, "p99_ms": float(np.percentile(lat, 99)) * 1e3,
            "periods": int(after["nr_periods"]) - int(before["nr_periods"]),
            "throttled": int(after["nr_throttled"]) - int(before["nr_throttled"]),
            "throttled_ms": (int(after["throttled_time"]) - int(before["throttled_time"])) / 1e6})
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpus", type=float, default=1.0, help="the quota, in CPUs")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not (ROOT / "cpu.cfs_quota_us").exists() or os.geteuid() != 0:
        raise SystemExit(f"needs root and a cgroup v1 cpu hierarchy at {ROOT}")
    group = ROOT / f"bertembed-quota-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(args.cpus * PERIOD_US)))
        results: dict[str, list[dict]] = {}
        for _ in range(args.rounds):
            for setting in ("auto", "2"):
                got = spawn.run_child(_CHILD, [str(group), setting, str(args.seconds)])
                results.setdefault(setting, []).append(got)
    finally:
        group.rmdir()
    quota = f"{int(args.cpus * PERIOD_US)}/{PERIOD_US} us"
    print(f"quota {args.cpus:g} CPU ({quota}), {args.rounds} rounds of {args.seconds:g} s")
    print("| threads asked | ceiling (source) | threads used | calls/s | p99 ms | throttled periods | throttled ms |")
    print("|---|---|---|---|---|---|---|")
    for setting, runs in results.items():
        first = runs[0]

        def med(key: str, runs: list[dict] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        print(
            f"| {setting} | {first['ceiling']} ({first['source']}) | {first['threads_used']} | "
            f"{med('calls_per_s'):.0f} | {med('p99_ms'):.2f} | {med('throttled'):.0f} of {med('periods'):.0f} | "
            f"{med('throttled_ms'):.0f} |"
        )


if __name__ == "__main__":
    main()
