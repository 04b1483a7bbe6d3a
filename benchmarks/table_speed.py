"""float32, bfloat16 and int8 token tables timed call by call, interleaved, in one process.

The companion of ``bertembed bench --family tables`` for a busy machine: the
harness times each table dtype in its own processes, one after the other, so
a neighbour's burst of work lands on one dtype and not the others; here the
three layers (the harness's ``tables`` cases: the same random tables,
converted with ``table_dtype``, results into ``out=``) are timed by the
harness's ``time_interleaved`` one call per sample, in turn, for every
repeat, and each call reads fresh random ids (the calls cycle through 2**18
rows' worth of id sets, so rows are not in the cache because a recent call
read them). Printed: the min and median time per call of each dtype and the
float32 / dtype ratios. bertembed against itself: one process is fair.

Usage::

    python benchmarks/table_speed.py [--vocab 250002] [--batch 8] [--seq 128] [--threads 1] [--repeats 100]
    python benchmarks/table_speed.py --quick      # BERT-base's table, 5 repeats: a smoke test

``--token-only``: only the token table is narrow, the position and segment
tables stay float32 (a checkpoint stored that way); without it, bfloat16
converts every table, as ``table_dtype="bfloat16"`` does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bertembed._bench import cases, data, subject, timing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--vocab", type=int, default=cases.BIG_VOCAB)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="default: automatic")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="BERT-base's 30,522 rows, 5 repeats: a smoke test")
    parser.add_argument("--token-only", action="store_true", help="float32 position and segment tables")
    args = parser.parse_args(argv)
    V = cases.BERT_BASE_VOCAB if args.quick else args.vocab
    repeats = 5 if args.quick else args.repeats
    H, B, S = args.hidden, args.batch, args.seq
    cache: dict[Any, Any] = {}
    calls = {}
    for kind in cases.TABLE_KINDS:
        case = replace(cases.table_case(B, S, kind, V, out=True), H=H)
        inputs = data.make_inputs(case, 0, cache)
        if args.token_only:
            inputs = replace(inputs, pos=inputs.pos.astype(np.float32), seg=inputs.seg.astype(np.float32))
        calls[kind or "float32"] = subject.bertembed_call(case, inputs, args.threads)
    cache.clear()  # the layers hold what they read
    stats = timing.time_interleaved(calls, repeats, min_sample_s=0.0, gap_s=0.0)
    f32 = stats["float32"]
    print(
        f"{V} x {H} tables, B={B} S={S}, threads={args.threads or 'automatic'}, {repeats} calls each, "
        f"interleaved, fresh ids{', float32 position and segment tables' if args.token_only else ''}"
    )
    print("tables     min ms    median ms  f32/this (min)  f32/this (median)")
    for kind, t in stats.items():
        print(
            f"{kind:<9}  {t['min_s'] * 1e3:8.3f}  {t['median_s'] * 1e3:9.3f}  "
            f"{f32['min_s'] / t['min_s']:14.2f}  {f32['median_s'] / t['median_s']:17.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
