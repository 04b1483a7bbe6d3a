"""Calls under a container's CPU quota: the threads chosen and the periods throttled.

Makes a cgroup v1 ``cpu`` group with a quota of ``--cpus`` CPUs (``cpu.cfs_quota_us``
over a 100 ms ``cpu.cfs_period_us``), starts a fresh process that moves itself
into it before it imports bertembed (:data:`_JOIN_THEN_CALL`, then
:func:`child_main`), and calls the harness's BERT-base layer
(``bert_base_layer``, B=8, S=128, H=768 float32 + LayerNorm) back to back
for ``--seconds``: with the automatic choice, then with ``num_threads=2`` (clipped to the ceiling). It prints the thread
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
from typing import Any

from bertembed._bench import spawn

ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000

#: The child's first lines: join the group (``sys.argv[1]``), and only then import bertembed
#: (which reads the CPU quota at import) to call ``sys.argv[2]`` (:func:`child_main`) with the
#: rest. A string, not a function of this script: ``python -m bertembed._bench.child`` (what
#: ``spawn.run_function`` starts) imports bertembed before any function runs.
_JOIN_THEN_CALL = """\
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as fh:
    fh.write(str(os.getpid()))
from bertembed._bench import child
child.main(sys.argv[2:])
"""


def child_main(argv: list[str]) -> dict[str, Any]:
    """One setting's calls, in a fresh process already in the group (``GROUP THREADS SECONDS``).

    Started by :data:`_JOIN_THEN_CALL`, which moved the process into the
    group before bertembed was imported; bertembed is imported here. Calls
    the harness's BERT-base layer (B=8, S=128, float32 + LayerNorm) with
    ``num_threads`` THREADS (``auto``: the automatic choice) 20 times, then
    back to back for SECONDS.

    Parameters
    ----------
    argv : list of str
        ``[GROUP, THREADS, SECONDS]``: the group's directory, ``auto`` or a
        count, and the seconds of calls.

    Returns
    -------
    dict
        The thread ceiling and its source, the threads the calls used, calls
        per second, the p99 call time, and the group's periods, throttled
        periods and throttled milliseconds over the calls (``cpu.stat``).
    """
    import time

    import numpy as np

    import bertembed
    from bertembed._bench.subject import bert_base_layer
    from bertembed._bench.timing import CallLog
    from bertembed._core import _kernel, runtime

    group, threads, seconds = Path(argv[0]), argv[1], float(argv[2])
    layer, ids = bert_base_layer(8, 128, layer_norm=True, seed=0)
    nt = None if threads == "auto" else int(threads)
    used: list[int] = []

    def call() -> None:
        layer(ids, num_threads=nt)
        used.append(_kernel.last_auto_threads() if nt is None else min(nt, bertembed.max_threads()))

    def stat() -> dict[str, int]:
        return {k: int(v) for k, v in (line.split() for line in (group / "cpu.stat").read_text().splitlines())}

    for _ in range(20):
        call()
    used.clear()
    before = stat()
    log, end = CallLog(call), time.monotonic() + seconds
    while time.monotonic() < end:
        log()
    after = stat()
    ceiling, source = runtime.thread_ceiling()
    lat = [r.seconds for r in log.records]
    return {
        "ceiling": ceiling,
        "source": source,
        "threads_used": sorted(set(used)),
        "calls_per_s": len(lat) / seconds,
        "p99_ms": float(np.percentile(lat, 99)) * 1e3,
        "periods": after["nr_periods"] - before["nr_periods"],
        "throttled": after["nr_throttled"] - before["nr_throttled"],
        "throttled_ms": (after["throttled_time"] - before["throttled_time"]) / 1e6,
    }


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
        results: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            for setting in ("auto", "2"):
                argv = [str(group), f"{__file__}:child_main", str(group), setting, str(args.seconds)]
                got = spawn.run_child(_JOIN_THEN_CALL, argv)
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
