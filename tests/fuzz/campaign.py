"""A long fuzzing campaign of one target, bounded by CPU time, with a summary of what it did.

Usage (from the repository root; ``tests/`` on ``PYTHONPATH`` for the
``helpers`` package, which the fuzz targets it starts and ``--merge`` import)::

    export PYTHONPATH=tests
    nice -n 19 python tests/fuzz/campaign.py TARGET --cpu-minutes 30 --work DIR
    nice -n 19 python tests/fuzz/campaign.py zip,config --rotate --cpu-minutes 30 --work DIR  # in turns
    python tests/fuzz/campaign.py all --report --work DIR            # CPU time, cases, failures per target
    python tests/fuzz/campaign.py TARGET --merge --work DIR          # fold DIR's finds into the kept corpus

TARGET is ``embed`` (``fuzz_embed.py``) or one of the checkpoint readers of
``fuzz_checkpoints.py`` (``config``, ``safetensors``, ``index``, ``zip``,
``pickle``). The target runs under atheris (libFuzzer) with two corpus
directories: ``DIR/TARGET/corpus`` (what this campaign finds, written there)
and the corpus kept in the repository, ``tests/fuzz/corpus/TARGET`` (read
only). The campaign stops the fuzzer (SIGTERM, so that libFuzzer prints its
statistics) once the fuzzer process has used ``--cpu-minutes`` of CPU time, or
after ``--wall-minutes``; it then writes ``DIR/TARGET/summary.json``: the CPU
seconds actually spent, the cases run, their outcomes (``FUZZ_OUTCOMES_FILE``),
and which libFuzzer mutations produced the inputs that reached new coverage.

``--merge`` copies from ``DIR/TARGET/corpus`` into the kept corpus the
inputs that reach Python branches (coverage.py) the kept ones do not, named by
their SHA-1; inputs larger than ``--max-bytes`` are left out so that the kept
corpus stays small.

A failure (the oracle's ``Failure``, or a crash) ends the fuzzer: libFuzzer
writes the input to ``DIR/TARGET/crash-<sha1>``, and the campaign exits with
status 1, naming it. Replay it with ``PYTHONPATH=tests python
tests/fuzz/fuzz_checkpoints.py TARGET DIR/TARGET/crash-<sha1>``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
READERS = ("config", "safetensors", "index", "zip", "pickle")
TARGETS = ("embed", *READERS)
CORPUS = HERE / "corpus"
#: Largest input kept in the repository's corpus (bytes).
MAX_KEPT_BYTES = 64 * 1024


def command(target: str) -> list[str]:
    if target == "embed":
        return [sys.executable, str(HERE / "fuzz_embed.py")]
    return [sys.executable, str(HERE / "fuzz_checkpoints.py"), target]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` and its waited-for children (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


_MS = re.compile(r"^#\d+\s+(NEW|REDUCE)\s.*?MS: \d+ (\S+)")


def mutations(log: Path) -> dict[str, dict[str, int]]:
    """For NEW and REDUCE events: how often each libFuzzer mutation was in the sequence that produced them."""
    out: dict[str, collections.Counter[str]] = {"NEW": collections.Counter(), "REDUCE": collections.Counter()}
    with open(log, errors="replace") as fh:
        for line in fh:
            m = _MS.match(line)
            if m:
                out[m.group(1)].update(name for name in m.group(2).split("-") if name)
    return {k: dict(v.most_common()) for k, v in out.items()}


def stats(log: Path) -> dict[str, float]:
    found = {}
    with open(log, errors="replace") as fh:
        for line in fh:
            if line.startswith("stat::"):
                key, _, value = line[6:].partition(":")
                found[key.strip()] = float(value)
    return found


def run(target: str, work: Path, cpu_budget: float, wall_budget: float, extra: list[str]) -> int:
    here = work / target
    corpus = here / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    kept = CORPUS / target
    kept.mkdir(parents=True, exist_ok=True)
    log = here / "fuzz.log"
    outcomes_file = here / "outcomes.json"
    for old in (log, outcomes_file):
        old.unlink(missing_ok=True)
    argv = [
        *command(target),
        "-print_final_stats=1",
        f"-max_total_time={int(wall_budget)}",
        "-rss_limit_mb=2048",  # (libFuzzer's default: an input that makes a reader allocate gigabytes is a failure)
        f"-artifact_prefix={here}/",
        *extra,
        str(corpus),
        str(kept),
    ]
    env = {**os.environ, "FUZZ_OUTCOMES_FILE": str(outcomes_file)}
    start = time.monotonic()
    spent = 0.0
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        stopped = False
        while proc.poll() is None:
            try:
                spent = cpu_seconds(proc.pid)
            except (OSError, ValueError):
                pass
            if spent >= cpu_budget and not stopped:
                proc.send_signal(signal.SIGTERM)  # (Python owns SIGINT: it would raise KeyboardInterrupt in the target)
                stopped = True
            time.sleep(2)
    wall = time.monotonic() - start
    crashes = sorted(str(p) for kind in ("crash", "oom", "timeout", "leak") for p in here.glob(f"{kind}-*"))
    summary = {
        "target": target,
        "cpu_seconds": round(spent, 1),
        "wall_seconds": round(wall, 1),
        "returncode": proc.returncode,
        "stopped_at_cpu_budget": stopped,
        "libfuzzer": stats(log),
        "outcomes": json.loads(outcomes_file.read_text()) if outcomes_file.exists() else {},
        "mutations": mutations(log),
        "corpus_files": len(os.listdir(corpus)),
        "failures": crashes,
    }
    (here / "summary.json").write_text(json.dumps(summary, indent=1))
    with open(here / "history.jsonl", "a") as fh:  # one line per run: --report adds them up
        fh.write(json.dumps(summary) + "\n")
    print(json.dumps(summary, indent=1))
    if crashes or proc.returncode not in (0, 72):  # 72: libFuzzer's exit when interrupted
        print(f"campaign {target}: FAILED (exit {proc.returncode}); see {log}", file=sys.stderr)
        return 1
    return 0


def history(work: Path, target: str) -> list[dict]:
    path = work / target / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def totals(work: Path, target: str) -> dict:
    """The runs of `target` in `work`, added up."""
    runs = history(work, target)
    outcomes: collections.Counter[str] = collections.Counter()
    new: collections.Counter[str] = collections.Counter()
    for r in runs:
        outcomes.update(r["outcomes"])
        new.update(r["mutations"]["NEW"])
    return {
        "target": target,
        "runs": len(runs),
        "cpu_minutes": round(sum(r["cpu_seconds"] for r in runs) / 60, 1),
        "wall_minutes": round(sum(r["wall_seconds"] for r in runs) / 60, 1),
        "cases": int(sum(r["libfuzzer"].get("number_of_executed_units", 0) for r in runs)),
        "outcomes": dict(outcomes.most_common()),
        "new_coverage_by_mutation": dict(new.most_common()),
        "corpus_files": runs[-1]["corpus_files"] if runs else 0,
        "failures": [f for r in runs for f in r["failures"]],
    }


def report(work: Path, targets) -> int:
    rows = [totals(work, t) for t in targets]
    print(json.dumps(rows, indent=1))
    print(f"{'target':<12} {'CPU min':>8} {'cases':>10} {'failures':>8}")
    for r in rows:
        print(f"{r['target']:<12} {r['cpu_minutes']:>8.1f} {r['cases']:>10} {len(r['failures']):>8}")
    return 0


def rotate(targets, work: Path, total_cpu: float, chunk_cpu: float, extra: list[str]) -> int:
    """Run `targets` in turns of `chunk_cpu` seconds until each has `total_cpu` (a failing target drops out)."""
    failed: set[str] = set()
    while True:
        spent = {t: 60 * totals(work, t)["cpu_minutes"] for t in targets if t not in failed}
        todo = [t for t, s in spent.items() if s < total_cpu - 1]
        if not todo:
            return 1 if failed else 0
        t = min(todo, key=lambda name: spent[name])
        budget = min(chunk_cpu, total_cpu - spent[t])
        if run(t, work, budget, max(8 * budget, 600), extra) != 0:
            failed.add(t)


def merge(target: str, work: Path, max_bytes: int) -> int:
    """Copy into the kept corpus the inputs of the campaign that reach Python branches it does not.

    Branch coverage (coverage.py, over the bertembed package) of each input,
    replayed in this process: the kept inputs first, then the campaign's, smallest
    first, each kept (named by its SHA-1) if it reaches an arc none before it did.
    (libFuzzer's own ``-merge=1`` re-runs the script as a program, which a
    Python fuzz target is not.)
    """
    import hashlib

    import coverage
    import replay

    kept_dir = CORPUS / target
    kept_dir.mkdir(parents=True, exist_ok=True)
    kept = replay.inputs(target)
    found = sorted(
        (p for p in replay.inputs(target, work) if p.stat().st_size <= max_bytes), key=lambda p: p.stat().st_size
    )
    cov = coverage.Coverage(branch=True, source=["bertembed"], data_file=None, config_file=False)
    cov.set_option("run:disable_warnings", ["module-not-measured", "no-data-collected"])

    def arcs(path: Path) -> set:
        cov.erase()
        cov.start()
        try:
            replay.run_input(target, path.read_bytes())
        except Exception:  # (a failing input is reported by the campaign; its coverage still counts)
            pass
        finally:
            cov.stop()
        data = cov.get_data()
        return {(f, arc) for f in data.measured_files() for arc in data.arcs(f) or ()}

    seen: set = set()
    for path in kept:
        seen |= arcs(path)
    added = 0
    for path in found:
        new = arcs(path) - seen
        if new:
            data = path.read_bytes()
            (kept_dir / hashlib.sha1(data).hexdigest()).write_bytes(data)
            seen |= new
            added += 1
    print(
        f"campaign {target}: {len(found)} inputs found, {added} reach new branches: kept corpus {len(kept)} -> "
        f"{len(kept) + added} files"
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help=f"one of {', '.join(TARGETS)}, or several, comma-separated, with --rotate")
    parser.add_argument("--work", type=Path, required=True, help="campaign directory (corpus, logs, summary)")
    parser.add_argument("--cpu-minutes", type=float, default=30.0)
    parser.add_argument("--wall-minutes", type=float, default=None, help="default: 4 times --cpu-minutes")
    parser.add_argument("--merge", action="store_true", help="fold the campaign's corpus into tests/fuzz/corpus")
    parser.add_argument("--rotate", action="store_true", help="run the targets in turns until each has --cpu-minutes")
    parser.add_argument("--chunk-minutes", type=float, default=5.0, help="CPU minutes of one turn (--rotate)")
    parser.add_argument("--report", action="store_true", help="add up the runs recorded in --work")
    parser.add_argument("--max-bytes", type=int, default=MAX_KEPT_BYTES)
    args, extra = parser.parse_known_args(argv)
    targets = TARGETS if args.target == "all" else tuple(args.target.split(","))
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r} (one of {', '.join(TARGETS)}, or all)")
    if args.report:
        return report(args.work.resolve(), targets)
    if args.rotate:
        return rotate(targets, args.work.resolve(), args.cpu_minutes * 60, args.chunk_minutes * 60, extra)
    if len(targets) != 1:
        parser.error("several targets need --rotate or --report")
    if args.merge:
        return merge(args.target, args.work, args.max_bytes)
    wall = args.wall_minutes if args.wall_minutes is not None else 4 * args.cpu_minutes
    return run(args.target, args.work.resolve(), args.cpu_minutes * 60, wall * 60, extra)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
