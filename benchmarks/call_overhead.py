"""The fixed cost of one ``BertEmbeddings`` call, by way of calling it.

Tiny inputs (B=1, S=8, H=8), so the time is the Python-level call and its
checks, not the arithmetic. The ways of calling are timed interleaved by
the harness's ``time_interleaved`` (samples of ``--sample-ms``, the fastest
and the median per call), in fresh processes: one per source tree and round,
the trees taking turns, so that two builds are compared side by side, each
in its own processes (``--tree NAME=SRC``, a directory that holds a
``bertembed`` package with its compiled kernel; default: this one)::

    python benchmarks/call_overhead.py
    python benchmarks/call_overhead.py --tree main=/tmp/main-tree/src --tree branch=src

On a shared machine the times are noisy; instruction counts are not. With
``--only WAY --calls N`` the script makes N untimed calls of one way, in
this process, for ``valgrind --tool=callgrind``: the difference of the
totals for two values of N, divided by their difference, is the
instructions of one call::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python benchmarks/call_overhead.py --only "layer(ids)" --calls 2000
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

#: The child of one tree and round: this file loaded (with that tree's bertembed),
#: its ways timed by the harness's timing (the prelude's ``timing``).
_CHILD = """
stats = timing.time_interleaved(script.ways(), int(sys.argv[1]), min_sample_s=float(sys.argv[2]))
emit({way: s["samples_s"] for way, s in stats.items()})
"""


def ways() -> dict[str, Callable[[], Any]]:
    """The ways of calling a tiny float32 + LayerNorm layer (the bertembed on ``sys.path``)."""
    from bertembed import BertEmbeddings

    rng = np.random.default_rng(0)
    layer = BertEmbeddings(
        rng.standard_normal((100, 8), dtype=np.float32),
        rng.standard_normal((16, 8), dtype=np.float32),
        rng.standard_normal((2, 8), dtype=np.float32),
        ln_weight=np.ones(8, np.float32),
        ln_bias=np.zeros(8, np.float32),
    )
    ids = rng.integers(0, 100, (1, 8), dtype=np.int64)
    seg = np.zeros((1, 8), np.int64)
    mask = np.ones((1, 8), np.int64)
    found: dict[str, Callable[[], Any]] = {
        "layer(ids)": lambda: layer(ids),
        "layer(ids, seg)": lambda: layer(ids, seg),
        "layer(ids, num_threads=1)": lambda: layer(ids, num_threads=1),
        "layer(ids, seg, attention_mask=mask)": lambda: layer(ids, seg, attention_mask=mask),
    }
    if "input_ids" in inspect.signature(BertEmbeddings.__call__).parameters:
        enc = {"input_ids": ids, "token_type_ids": seg, "attention_mask": mask}
        found["layer(**enc)"] = lambda: layer(**enc)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=SRC",
        help="a build to time: its name and the directory holding its bertembed (default: this one)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree, taking turns (default 3)")
    parser.add_argument("--repeats", type=int, default=15, help="samples per way and process (default 15)")
    parser.add_argument("--sample-ms", type=float, default=20.0, help="shortest sample (default 20 ms)")
    parser.add_argument("--quick", action="store_true", help="one round of 3 short samples: a smoke test")
    parser.add_argument("--only", help="one way of calling, untimed, in this process (see --calls)")
    parser.add_argument("--calls", type=int, default=0, help="with --only: the number of calls")
    args = parser.parse_args()
    if args.only is not None:
        fn = ways()[args.only]
        for _ in range(args.calls):
            fn()
        return

    from shared.trees import run_in_tree, script_code

    from bertembed._bench import spawn, timing

    trees = dict(t.split("=", 1) for t in args.tree) or {"this": spawn.package_root()}
    rounds, repeats, sample_s = (1, 3, 0.002) if args.quick else (args.rounds, args.repeats, args.sample_ms / 1e3)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    files = {}
    code = script_code(__file__, _CHILD)
    for _, name in spawn.in_rounds(list(trees), rounds):
        got = run_in_tree(code, trees[name], [str(repeats), str(sample_s)])
        files[name] = got.pop("bertembed_file")
        for way, xs in got.items():
            samples[name].setdefault(way, []).extend(xs)
    print(f"{rounds} process(es) per tree x {repeats} samples per way, interleaved; ns per call: fastest, median")
    first = next(iter(trees))
    for name in trees:
        print(f"{name}: bertembed from {files[name]}")
        for way, xs in samples[name].items():
            s = timing.summarize(xs)
            line = f"  {way:40s} {s['min_s'] * 1e9:8.0f} {s['median_s'] * 1e9:8.0f}"
            if name != first and way in samples[first]:
                base = timing.summarize(samples[first][way])["min_s"]
                line += f"  {100 * (s['min_s'] / base - 1):+6.1f}% (fastest) vs {first}"
            print(line)


if __name__ == "__main__":
    main()
