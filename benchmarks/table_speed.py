"""float32, bfloat16 and int8 token tables timed call by call, interleaved, in one process.

The companion of ``bertembed bench --family tables`` for a busy machine: the
harness times each table dtype in its own processes, one after the other, so
a neighbour's burst of work lands on one dtype and not the others; here the
three layers (the same random tables, converted with ``table_dtype``) are
called in turn, one call each, for every repeat, and each call reads fresh
random ids (the calls cycle through 2**18 rows' worth of id sets, so rows
are not in the cache because a recent call read them). Printed: the min and
median time per call of each dtype and the float32 / dtype ratios.

Usage::

    python benchmarks/table_speed.py [--vocab 250002] [--batch 8] [--seq 128] [--threads 1] [--repeats 100]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from bertembed import BertEmbeddings

KINDS = (None, "bfloat16", "int8")
ROWS_PER_CYCLE = 2**18


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--vocab", type=int, default=250_002)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="default: automatic")
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args(argv)
    V, H, B, S = args.vocab, args.hidden, args.batch, args.seq
    rng = np.random.default_rng(0)
    tok = np.empty((V, H), np.float32)
    rng.standard_normal(out=tok, dtype=np.float32)
    tok *= 0.02
    pos = rng.standard_normal((512, H), dtype=np.float32) * 0.02
    seg = rng.standard_normal((2, H), dtype=np.float32) * 0.02
    ln = {"ln_weight": np.ones(H, np.float32), "ln_bias": np.zeros(H, np.float32)}
    layers = {k: BertEmbeddings(tok, pos, seg, table_dtype=k, **ln) for k in KINDS}
    del tok
    sets = rng.integers(0, V, (-(-ROWS_PER_CYCLE // (B * S)), B, S))
    sids = np.zeros((B, S), np.int64)
    out = {k: np.empty((B, S, H), np.float32) for k in KINDS}
    times: dict[str | None, list[float]] = {k: [] for k in KINDS}
    for k, layer in layers.items():  # warm-up
        layer(sets[0], sids, out=out[k], num_threads=args.threads)
    calls = 0
    for _ in range(args.repeats):
        for k, layer in layers.items():
            ids = sets[calls % len(sets)]
            calls += 1
            t0 = time.perf_counter()
            layer(ids, sids, out=out[k], num_threads=args.threads)
            times[k].append(time.perf_counter() - t0)
    f32 = times[None]
    print(f"{V} x {H} tables, B={B} S={S}, threads={args.threads or 'automatic'}, {args.repeats} calls each, "
          "interleaved, fresh ids")
    print("tables     min ms    median ms  f32/this (min)  f32/this (median)")
    for k, t in times.items():
        print(f"{k or 'float32':<9}  {min(t) * 1e3:8.3f}  {np.median(t) * 1e3:9.3f}  "
              f"{min(f32) / min(t):14.2f}  {np.median(f32) / np.median(t):17.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
