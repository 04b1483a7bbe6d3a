"""The fixed cost of one ``BertEmbeddings`` call, by way of calling it.

Tiny inputs (B=1, S=8, H=8), so the time is the Python-level call and its
checks, not the arithmetic. Each way of calling is timed as the best of
`--repeats` loops of `--number` calls; compare two builds by running the
script with each (e.g. ``PYTHONPATH=/path/to/other/src``) in turn::

    python benchmarks/call_overhead.py
    PYTHONPATH=/tmp/other/src python benchmarks/call_overhead.py

On a shared machine the times are noisy; instruction counts are not. With
``--only WAY --calls N`` the script makes N untimed calls of one way, for
``valgrind --tool=callgrind``: the difference of the totals for two values
of N, divided by their difference, is the instructions of one call::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python benchmarks/call_overhead.py --only "layer(ids)" --calls 2000
"""

from __future__ import annotations

import argparse
import inspect
import timeit

import numpy as np

import bertembed
from bertembed import BertEmbeddings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per loop")
    parser.add_argument("--repeats", type=int, default=15, help="loops; the best is kept")
    parser.add_argument("--only", help="one way of calling, untimed (see --calls)")
    parser.add_argument("--calls", type=int, default=0, help="with --only: the number of calls")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    layer = BertEmbeddings(
        rng.standard_normal((100, 8), dtype=np.float32), rng.standard_normal((16, 8), dtype=np.float32),
        rng.standard_normal((2, 8), dtype=np.float32),
        ln_weight=np.ones(8, np.float32), ln_bias=np.zeros(8, np.float32),
    )
    ids = rng.integers(0, 100, (1, 8), dtype=np.int64)
    seg = np.zeros((1, 8), np.int64)
    mask = np.ones((1, 8), np.int64)
    ways = {
        "layer(ids)": lambda: layer(ids),
        "layer(ids, seg)": lambda: layer(ids, seg),
        "layer(ids, num_threads=1)": lambda: layer(ids, num_threads=1),
        "layer(ids, seg, attention_mask=mask)": lambda: layer(ids, seg, attention_mask=mask),
    }
    accepts = inspect.signature(BertEmbeddings.__call__).parameters
    if "input_ids" in accepts:
        enc = {"input_ids": ids, "token_type_ids": seg, "attention_mask": mask}
        ways["layer(**enc)"] = lambda: layer(**enc)
    if args.only is not None:
        fn = ways[args.only]
        for _ in range(args.calls):
            fn()
        return
    print(f"bertembed from {bertembed.__file__}")
    for name, fn in ways.items():
        best = min(timeit.repeat(fn, number=args.number, repeat=args.repeats)) / args.number
        print(f"{name:40s} {best * 1e9:8.0f} ns per call")


if __name__ == "__main__":
    main()
