"""Time ``BertEmbeddings.from_pretrained`` under two source trees: the cost of the loader's checks.

Each contender (a source tree) runs in its own fresh processes, started by
the harness (``run_in_tree``: that tree's bertembed, this harness's
timing), taking turns, so that both see the same page cache and machine
load. A process imports bertembed (not timed), then the harness's
``time_interleaved`` loads the checkpoint a few times untimed (its warm-up
and calibration: the page cache and the imports) and times `--calls` loads,
one per sample; the
figure per contender is the median over all its timed loads, with the
spread of the per-process medians.

Usage::

    # another revision's sources, its kernel built in place:
    git worktree add /tmp/main-tree main && (cd /tmp/main-tree && python setup.py build_ext --inplace)
    python benchmarks/load_checks.py --tree main=/tmp/main-tree/src --tree branch=src MODEL_DIR [MODEL_DIR ...]

    # the harness's synthetic XLM-R-sized checkpoint (250,002 x 768 float32 token table, 732 MiB):
    python benchmarks/load_checks.py --make-xlmr /tmp/xlmr-250k
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

#: One process of one tree: the harness's timing of `calls` loads (the prelude binds `timing` and `emit`).
_CHILD = """
import sys
path, calls = sys.argv[1], int(sys.argv[2])
stats = timing.time_interleaved(
    {"load": lambda: bertembed.BertEmbeddings.from_pretrained(path)}, calls, min_sample_s=0.0, gap_s=0.0
)
emit({"times": stats["load"]["samples_s"]})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="model directories (or weights files)")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=SRC",
        help="a contender: its name and the directory that holds its bertembed package",
    )
    parser.add_argument("--processes", type=int, default=10, help="fresh processes per contender (default 10)")
    parser.add_argument("--calls", type=int, default=20, help="timed loads per process (default 20)")
    parser.add_argument("--quick", action="store_true", help="2 processes of 3 loads per contender: a smoke test")
    parser.add_argument("--make-xlmr", type=Path, metavar="DIR", help="write the synthetic XLM-R checkpoint")
    args = parser.parse_args()

    from shared.checkpoint import write_checkpoint
    from shared.trees import run_in_tree

    from bertembed._bench import spawn, timing

    if args.make_xlmr:
        write_checkpoint(args.make_xlmr)
        size = (args.make_xlmr / "model.safetensors").stat().st_size
        print(f"wrote {args.make_xlmr} ({size / 2**20:.0f} MiB)")
        if not args.models:
            return
    trees = dict(t.split("=", 1) for t in args.tree)
    if not trees or not args.models:
        parser.error("give at least one --tree NAME=SRC and one model")
    processes, calls = (2, 3) if args.quick else (args.processes, args.calls)
    for model in args.models:
        per: dict[str, list[float]] = {name: [] for name in trees}
        medians: dict[str, list[float]] = {name: [] for name in trees}
        for _, name in spawn.in_rounds(list(trees), processes):  # take turns
            result = run_in_tree(_CHILD, trees[name], [model, str(calls)])
            per[name].extend(result["times"])
            medians[name].append(statistics.median(result["times"]))
        print(f"\n{model}  ({processes} processes x {calls} loads per contender)")
        base = None
        for name in trees:
            med = timing.summarize(per[name])["median_s"] * 1e3
            lo, hi = min(medians[name]) * 1e3, max(medians[name]) * 1e3
            line = f"  {name:<12} median {med:8.3f} ms  (process medians {lo:.3f} .. {hi:.3f} ms)"
            if base is None:
                base = med
            else:
                line += f"  {med - base:+.3f} ms, {100 * (med - base) / base:+.1f}% vs {next(iter(trees))}"
            print(line)


if __name__ == "__main__":
    main()
